"""Token usage of a transcript: per message, per role/kind/tool, and the compaction stage it is in.

Analysis streams the file: messages are counted in batches as they are read and only small per-message
figures are kept, so memory stays bounded by the largest batch rather than by the file. On a large file
the batches go to worker processes (:func:`ctxc.tokens.counting_processes`) that count while this
process parses the next ones.
"""

from __future__ import annotations

import heapq
import os
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, NamedTuple, Protocol

from ctxc.live import LiveContext, is_sidechain, last_resets
from ctxc.model import Boundary, Message, ThinkingBlock, Transcript, Usage
from ctxc.reader import ReadOptions
from ctxc.system import gc_paused
from ctxc.validate import Pairing, Problem

#: Window shares at which stages 2, 3, 4 and 5 begin (the adaptive pipeline's defaults).
DEFAULT_THRESHOLDS: tuple[float, float, float, float] = (0.60, 0.70, 0.80, 0.90)

STAGE_NAMES = {
    1: "none",
    2: "tool-output post-processing",
    3: "trim old messages",
    4: "summarize history",
    5: "essential summary only",
}

# A batch is flushed to the counter when it holds this many characters or messages. Large enough that
# shipping it to the counting workers is noise, small enough that memory stays low on a 100 MB log.
_BATCH_CHARS = 2_000_000
_BATCH_MESSAGES = 4_000


def stage_for(share: float, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> int:
    """The stage (1-5) a context filled to ``share`` of the window is in (thresholds ascending, as
    :func:`check_thresholds` makes them)."""
    return bisect_right(thresholds, share) + 1


def check_thresholds(thresholds: Sequence[float]) -> tuple[float, float, float, float]:
    from ctxc.errors import UsageError

    if (
        len(thresholds) != 4
        or any(not 0 < t < 1.5 for t in thresholds)
        or list(thresholds) != sorted(thresholds)
    ):
        raise UsageError("thresholds must be four increasing window shares, e.g. 0.6,0.7,0.8,0.9")
    return (thresholds[0], thresholds[1], thresholds[2], thresholds[3])


class TextCounter(Protocol):
    """Counts many texts at once; the tokens package's counting service is the real one."""

    name: str

    def count(self, texts: Sequence[str]) -> list[int]: ...


class MessageStat(NamedTuple):
    """One message's row of an analysis.

    A named tuple rather than a frozen dataclass like the rest: an analysis makes one per message,
    and a tuple is made in a quarter of the time (0.8 us against 3.7 us, a tenth of a cached run
    over a 100 MB log).
    """

    index: int  # type: ignore[assignment]  # hides tuple.index(), which a row has no use for
    line: int
    role: str
    kind: str
    tool: str | None
    tokens: int
    cumulative: int
    share: float
    stage: int
    conversation: int = 0
    #: In the live context (after the log's own last compaction, not a sidechain run).
    live: bool = True


@dataclass(frozen=True, slots=True)
class UsageSummary:
    """What the log itself recorded about API calls (Claude Code, Codex, pi, Kimi)."""

    calls: int
    input: int
    output: int
    cache_read: int
    cache_write: int
    last_context: int
    max_context: int
    window: int | None


@dataclass(frozen=True, slots=True)
class Analysis:
    path: str
    format: str
    tokenizer: str
    window: int
    model: str | None
    thresholds: tuple[float, float, float, float]
    total_tokens: int
    stage: int
    conversations: int
    messages: tuple[MessageStat, ...]
    by_role: dict[str, int]
    by_kind: dict[str, int]
    by_tool: dict[str, int]
    largest: tuple[MessageStat, ...]
    usage: UsageSummary | None
    boundaries: tuple[Boundary, ...]
    problems: tuple[Problem, ...] = ()
    skipped_lines: int = 0
    max_context: int = field(default=0)
    #: Per-stage forecast (:class:`ctxc.compaction.forecast.StageForecast`), when asked for.
    forecast: tuple[Any, ...] = ()
    #: With ``--tokenizer anthropic``: (Claude's total, o200k's total, their ratio) on the same file.
    versus_o200k: tuple[int, int, float | None] | None = None
    #: Where the window came from: ``flag``, ``log``, ``log model`` or ``default``.
    window_source: str = "flag"
    #: The live context's start: the line of the log's own last compaction, None when it has none.
    live_from_line: int | None = None
    #: Messages and tokens the client no longer sends: before the log's own compaction, and subagent
    #: runs written inline (sidechains).
    history_messages: int = 0
    history_tokens: int = 0
    side_messages: int = 0
    side_tokens: int = 0
    #: Tokens of what the log's compaction record itself carries into the live context.
    carried_tokens: int = 0

    @property
    def live_messages(self) -> int:
        return sum(1 for m in self.messages if m.live)

    @property
    def share(self) -> float:
        return self.max_context / self.window if self.window else 0.0


def count_messages(messages: Sequence[Message], counter: TextCounter) -> list[int]:
    """Tokens of each message (its texts counted in one batch, plus framing and images)."""
    from ctxc.tokens.cost import count_messages as count

    return count(messages, counter.count)


def start_counting(messages: Sequence[Message], counter: TextCounter) -> Callable[[], list[int]]:
    """:func:`count_messages`, started: the returned function waits for the counts.

    The counting service ships large batches to its worker processes and returns at once (see
    :func:`ctxc.tokens.counting_processes`); other counters count before returning.
    """
    from ctxc.tokens.cost import start_count_messages

    start = getattr(counter, "start", None)
    if callable(start):
        return start_count_messages(messages, start)
    counts = count_messages(messages, counter)
    return lambda: counts


class _InFlight:
    """Batches of messages being counted, oldest first, at most ``depth`` of them unfinished.

    The parser keeps a few batches ahead of the workers, so they always have one queued; more would
    only hold more messages in memory. Each batch yields its messages, their tokens, and the tokens of
    the thinking inside messages of another kind (see :func:`thinking_texts`).
    """

    def __init__(self, counter: TextCounter, depth: int = 8, *, thinking: bool = True) -> None:
        self.counter = counter
        self.depth = depth
        self.thinking = thinking
        self._queue: deque[tuple[list[Message], Callable[[], list[int]], Callable[[], list[int]]]] = deque()

    def add(self, batch: list[Message]) -> Iterator[tuple[list[Message], list[int], list[int]]]:
        """Start counting ``batch``; yields the oldest batches with their counts while over depth."""
        thinking = _start_thinking(batch, self.counter) if self.thinking else _zeros(batch)
        self._queue.append((batch, start_counting(batch, self.counter), thinking))
        while len(self._queue) > self.depth:
            done, finish, thinking = self._queue.popleft()
            yield done, finish(), thinking()

    def drain(self) -> Iterator[tuple[list[Message], list[int], list[int]]]:
        while self._queue:
            done, finish, thinking = self._queue.popleft()
            yield done, finish(), thinking()


def thinking_texts(message: Message) -> list[str]:
    """The thinking texts of a message whose kind is not ``thinking`` (a Claude Code response holds its
    thinking beside text and calls): analyze counts them as kind ``thinking`` all the same."""
    if message.kind == "thinking":
        return []
    return [b.text for b in message.blocks if isinstance(b, ThinkingBlock) and b.text]


def _zeros(batch: Sequence[Message]) -> Callable[[], list[int]]:
    zeros = [0] * len(batch)
    return lambda: zeros


def _start_thinking(batch: Sequence[Message], counter: TextCounter) -> Callable[[], list[int]]:
    per = [thinking_texts(m) for m in batch]
    flat = [t for texts in per for t in texts]
    if not flat:
        return _zeros(batch)
    start = getattr(counter, "start", None)
    pending: Callable[[], list[int]]
    if callable(start):
        pending = start(flat)
    else:
        now = counter.count(flat)
        pending = lambda: now  # noqa: E731

    def finish() -> list[int]:
        counts, out, at = pending(), [], 0
        for texts in per:
            out.append(sum(counts[at : at + len(texts)]))
            at += len(texts)
        return out

    return finish


def _batches(
    items: Iterable[Message | Usage | Boundary], sink: list[Usage | Boundary]
) -> Iterator[list[Message]]:
    batch: list[Message] = []
    chars = 0
    for item in items:
        if not isinstance(item, Message):
            sink.append(item)
            continue
        batch.append(item)
        chars += sum(len(getattr(b, "text", "")) for b in item.blocks)
        if chars >= _BATCH_CHARS or len(batch) >= _BATCH_MESSAGES:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


#: What a scan keeps of each message: index, line, role, kind, tool, tokens, conversation, and the
#: tokens of thinking inside it when its kind is another (counted under kind ``thinking``).
Row = tuple[int, int, str, str, str | None, int, int, int]


@dataclass(frozen=True, slots=True)
class Scan:
    """What reading and counting a file yields, before any window or threshold is applied.

    This is what the analysis cache stores: it depends only on the file's bytes, the tokenizer and the
    read options, so the same scan serves any ``--window``, ``--model`` or ``--thresholds``.
    """

    path: str
    format: str
    tokenizer: str
    rows: tuple[Row, ...]
    usage: tuple[Usage, ...]
    boundaries: tuple[Boundary, ...]
    problems: tuple[Problem, ...]
    skipped_lines: int
    #: Conversations that are subagent runs written inline (not the log's own thread).
    sidechains: tuple[int, ...] = ()

    @property
    def live(self) -> LiveContext:
        return LiveContext(resets=last_resets(self.boundaries), side=frozenset(self.sidechains))


def analyze(
    src: str | os.PathLike[str] | BinaryIO,
    *,
    counter: TextCounter | None = None,
    tokenizer: str = "o200k_base",
    window: int | None = None,
    model: str | None = None,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
    top: int = 10,
    use_cache: bool = True,
) -> Analysis:
    """Analyze one transcript file (a path, ``-`` or a binary stream).

    A file path is analyzed once per content: the scan is cached by the file's content hash (with the
    tokenizer and read options), so a second run over an unchanged log only hashes it.
    """
    from ctxc.profiles import resolve_window, window_for_log

    if tokenizer == "usage" or getattr(counter, "name", None) == "usage":  # recorded usage, no counting
        from ctxc.usage_scan import analyze_usage

        return analyze_usage(
            src, window=window, model=model, thresholds=thresholds, input_format=input_format, options=options
        )
    th = check_thresholds(thresholds)
    if window is not None or model is not None:
        resolve_window(model=model, window=window)  # a bad flag fails before any reading
    if counter is None:
        counter = make_counter(tokenizer, use_cache=use_cache, model=model)
    scan = None
    key = None
    cacheable = use_cache and isinstance(src, str | os.PathLike) and str(src) != "-" and _caches(counter)
    if cacheable:
        from ctxc.scancache import load_scan, scan_key

        key = scan_key(src, counter.name, input_format, options)  # type: ignore[arg-type]
        scan = load_scan(key, str(src)) if key else None
    if scan is None:
        scan = scan_file(src, counter, input_format=input_format, options=options)
        if key:
            from ctxc.scancache import store_scan

            store_scan(key, scan)
    choice = window_for_log(model=model, window=window, usage=scan.usage)
    return finish(
        scan, window=choice.window, model=choice.model, thresholds=th, top=top, source=choice.source
    )


def _caches(counter: TextCounter) -> bool:
    """Whole-scan caching follows the count cache: on when counts are cached (not for approx)."""
    return getattr(counter, "cache", None) is not None


def scan_file(
    src: str | os.PathLike[str] | BinaryIO,
    counter: TextCounter,
    *,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
) -> Scan:
    """Read and count a file, streaming: only small per-message facts are kept."""
    from ctxc.tokens import counting_processes

    with counting_processes(counter, _size_of(src)):
        return _scan(src, counter, input_format=input_format, options=options)


def _size_of(src: str | os.PathLike[str] | BinaryIO) -> int:
    """The input's size in bytes when it is a regular file (0 otherwise: stdin, a stream)."""
    try:
        if isinstance(src, str | os.PathLike):
            return 0 if str(src) == "-" else os.stat(src).st_size
        buffer = getattr(src, "getbuffer", None)
        return len(buffer()) if callable(buffer) else os.fstat(src.fileno()).st_size
    except (OSError, ValueError, AttributeError):
        return 0


def _scan(
    src: str | os.PathLike[str] | BinaryIO,
    counter: TextCounter,
    *,
    input_format: str | None,
    options: ReadOptions,
) -> Scan:
    # Imported here: `--tokenizer usage` and cached scans never read a transcript in full.
    from ctxc.formats import open_stream

    stream = open_stream(src, input_format=input_format, options=options, keep_records=False)
    side: list[Usage | Boundary] = []
    rows: list[Row] = []
    sidechains: set[int] = set()
    pairing = Pairing()  # keeps only the calls' ids, lines and names, not the messages
    inflight = _InFlight(counter)
    try:
        with gc_paused():
            for batch in _batches(stream.items, side):
                for done, counts, thinking in inflight.add(batch):
                    rows.extend(_rows(done, counts, thinking))
                for m in batch:
                    pairing.add(m)
                    if m.conversation and is_sidechain(m):
                        sidechains.add(m.conversation)
            problems = tuple(pairing.problems())  # while the last counts are made
            for done, counts, thinking in inflight.drain():
                rows.extend(_rows(done, counts, thinking))
    finally:
        stream.close()
    return Scan(
        path=stream.name,
        format=stream.adapter.name,
        tokenizer=counter.name,
        rows=tuple(rows),
        usage=tuple(i for i in side if isinstance(i, Usage)),
        # A scan keeps what the carried messages cost, not the messages.
        boundaries=tuple(
            replace(i, carried=(), carried_tokens=sum(count_messages(i.carried, counter))) if i.carried else i
            for i in side
            if isinstance(i, Boundary)
        ),
        problems=problems,
        skipped_lines=len(stream.invalid_lines),
        sidechains=tuple(sorted(sidechains)),
    )


def load_counted(
    src: str | os.PathLike[str] | BinaryIO,
    counter: TextCounter,
    *,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
) -> tuple[Transcript, list[int]]:
    """Read a whole transcript and the tokens of each of its messages, in message order.

    Batches are counted as they are read, as in :func:`scan_file`: inside
    :func:`ctxc.tokens.counting_processes` the worker processes count while this one parses.
    """
    from ctxc.formats import load

    inflight = _InFlight(counter, thinking=False)
    counts: list[int] = []
    batch: list[Message] = []
    chars = 0

    def take(message: Message) -> None:
        nonlocal batch, chars
        batch.append(message)
        chars += sum(len(getattr(b, "text", "")) for b in message.blocks)
        if chars >= _BATCH_CHARS or len(batch) >= _BATCH_MESSAGES:
            for _, done, _ in inflight.add(batch):
                counts.extend(done)
            batch, chars = [], 0

    transcript = load(src, input_format=input_format, options=options, on_message=take)
    if batch:
        for _, done, _ in inflight.add(batch):
            counts.extend(done)
    for _, done, _ in inflight.drain():
        counts.extend(done)
    return transcript, counts


def _rows(batch: list[Message], counts: list[int], thinking: list[int]) -> Iterator[Row]:
    for m, tokens, think in zip(batch, counts, thinking, strict=True):
        names = m.tool_names
        yield (m.index, m.line, m.role, m.kind, names[0] if names else None, tokens, m.conversation, think)


def finish(
    scan: Scan,
    *,
    window: int,
    model: str | None,
    thresholds: tuple[float, float, float, float],
    top: int = 10,
    source: str = "flag",
) -> Analysis:
    """Apply a window and thresholds to a scan: the live context's cumulative tokens, shares, stages
    and totals, with what the client no longer sends counted apart."""
    live = scan.live
    stats: list[MessageStat] = []
    running: dict[int, int] = {}  # context so far, by conversation
    resets = sorted((b for b in scan.boundaries if b.resets), key=lambda b: b.index)
    pending = 0
    by_role: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    by_tool: Counter[str] = Counter()
    history = [0, 0]
    side = [0, 0]
    for index, line, role, kind, tool, tokens, conv, *rest in scan.rows:
        thinking = rest[0] if rest else 0  # rows made before thinking was counted apart have none
        while pending < len(resets) and resets[pending].index <= index:
            reset = resets[pending]
            kept = 0
            if reset.kept_from is not None:  # pi: a tail from before the boundary stays
                kept = sum(
                    s.tokens
                    for s in stats
                    if s.conversation == reset.conversation and s.index >= reset.kept_from
                )
            running[reset.conversation] = reset.carried_tokens + kept
            pending += 1
        is_live = live.is_live(index, conv)
        cum = running.get(conv, 0) + tokens
        running[conv] = cum
        share = cum / window
        stats.append(
            MessageStat(
                index, line, role, kind, tool, tokens, cum, share, stage_for(share, thresholds), conv, is_live
            )
        )
        if is_live:
            by_role[role] += tokens
            by_kind[kind] += tokens - thinking
            if thinking:
                by_kind["thinking"] += thinking
            if tool:
                by_tool[tool] += tokens
        else:
            tally = side if conv in live.side else history
            tally[0] += 1
            tally[1] += tokens
    # A reset after the last message (a log that ends at its compaction) still starts a new context.
    for reset in resets[pending:]:
        running[reset.conversation] = reset.carried_tokens
    carried = sum(b.carried_tokens for b in live.resets.values())
    contexts = {c: t for c, t in running.items() if c not in live.side} or {0: 0}
    max_context = max(contexts.values())
    live_stats = [s for s in stats if s.live]
    # Ties go to the earlier message, as a stable sort has it.
    largest = heapq.nlargest(top, live_stats, key=lambda s: (s.tokens, -s.index)) if top > 0 else []
    boundary = live.boundary
    return Analysis(
        path=scan.path,
        format=scan.format,
        tokenizer=scan.tokenizer,
        window=window,
        model=model,
        thresholds=thresholds,
        total_tokens=sum(contexts.values()),
        stage=stage_for(max_context / window, thresholds),
        conversations=len({s.conversation for s in stats}) or 1,
        messages=tuple(stats),
        by_role=dict(by_role.most_common()),
        by_kind=dict(by_kind.most_common()),
        by_tool=dict(by_tool.most_common()),
        largest=tuple(largest),
        usage=summarize_usage(scan.usage),
        boundaries=scan.boundaries,
        problems=scan.problems,
        skipped_lines=scan.skipped_lines,
        max_context=max_context,
        window_source=source,
        live_from_line=boundary.line if boundary is not None else None,
        history_messages=history[0],
        history_tokens=history[1],
        side_messages=side[0],
        side_tokens=side[1],
        carried_tokens=carried,
    )


def summarize_usage(usage: Sequence[Usage]) -> UsageSummary | None:
    """Calls, token sums and the largest and last context of some recorded usage."""
    if not usage:
        return None
    windows = [u.window for u in usage if u.window]
    return UsageSummary(
        calls=len(usage),
        input=sum(u.input for u in usage),
        output=sum(u.output for u in usage),
        cache_read=sum(u.cache_read for u in usage),
        cache_write=sum(u.cache_write for u in usage),
        last_context=usage[-1].context,
        max_context=max(u.context for u in usage),
        window=windows[-1] if windows else None,
    )


def make_counter(
    tokenizer: str, *, use_cache: bool = True, model: str | None = None, concurrency: int = 4
) -> TextCounter:
    """The counting service for a tokenizer name, with the on-disk count cache unless disabled.

    ``model`` and ``concurrency`` only matter for ``anthropic``, which counts with that Claude model's
    tokenizer through the API, ``concurrency`` requests at a time.
    """
    if tokenizer == "usage":  # reads the usage a log recorded (ctxc/usage_scan.py); counts nothing
        from ctxc.usage_scan import RecordedUsageOnly

        return RecordedUsageOnly()
    from ctxc.tokens import make_counting_service

    return make_counting_service(tokenizer, use_cache=use_cache, model=model, concurrency=concurrency)
