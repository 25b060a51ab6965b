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
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple, Protocol

from ctxc.model import Boundary, Message, Transcript, Usage
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
    only hold more messages in memory.
    """

    def __init__(self, counter: TextCounter, depth: int = 8) -> None:
        self.counter = counter
        self.depth = depth
        self._queue: deque[tuple[list[Message], Callable[[], list[int]]]] = deque()

    def add(self, batch: list[Message]) -> Iterator[tuple[list[Message], list[int]]]:
        """Start counting ``batch``; yields the oldest batches with their counts while over depth."""
        self._queue.append((batch, start_counting(batch, self.counter)))
        while len(self._queue) > self.depth:
            done, finish = self._queue.popleft()
            yield done, finish()

    def drain(self) -> Iterator[tuple[list[Message], list[int]]]:
        while self._queue:
            done, finish = self._queue.popleft()
            yield done, finish()


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


#: What a scan keeps of each message: index, line, role, kind, tool, tokens, conversation.
Row = tuple[int, int, str, str, str | None, int, int]


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
    from ctxc.profiles import resolve_window

    if tokenizer == "usage" or getattr(counter, "name", None) == "usage":  # recorded usage, no counting
        from ctxc.usage_scan import analyze_usage

        return analyze_usage(
            src, window=window, model=model, thresholds=thresholds, input_format=input_format, options=options
        )
    th = check_thresholds(thresholds)
    win, model_name = resolve_window(model=model, window=window)
    if counter is None:
        counter = make_counter(tokenizer, use_cache=use_cache, model=model)
    scan = None
    key = None
    cacheable = use_cache and isinstance(src, str | os.PathLike) and str(src) != "-" and _caches(counter)
    if cacheable:
        from ctxc.scancache import load_scan, scan_key

        key = scan_key(src, counter.name, input_format, options)  # type: ignore[arg-type]
        scan = load_scan(key, str(src)) if key else None
    if scan is not None:
        return finish(scan, window=win, model=model_name, thresholds=th, top=top)
    # Tallied as the counts arrive, while the counting processes make the next ones: when the last
    # count is in, the analysis is all but done.
    tally = _Tally(win, th, top)
    scan = scan_file(src, counter, input_format=input_format, options=options, on_rows=tally.add)
    if key:
        from ctxc.scancache import store_scan

        store_scan(key, scan)
    return tally.analysis(scan, model=model_name)


def _caches(counter: TextCounter) -> bool:
    """Whole-scan caching follows the count cache: on when counts are cached (not for approx)."""
    return getattr(counter, "cache", None) is not None


def scan_file(
    src: str | os.PathLike[str] | BinaryIO,
    counter: TextCounter,
    *,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
    on_rows: Callable[[list[Row]], None] | None = None,
) -> Scan:
    """Read and count a file, streaming: only small per-message facts are kept. ``on_rows`` is given
    each batch's rows as its counts arrive."""
    from ctxc.tokens import counting_processes

    with counting_processes(counter, _size_of(src)):
        return _scan(src, counter, input_format=input_format, options=options, on_rows=on_rows)


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
    on_rows: Callable[[list[Row]], None] | None = None,
) -> Scan:
    # Imported here: `--tokenizer usage` and cached scans never read a transcript in full.
    from ctxc.formats import open_stream

    stream = open_stream(src, input_format=input_format, options=options, keep_records=False)
    side: list[Usage | Boundary] = []
    rows: list[Row] = []
    pairing = Pairing()  # keeps only the calls' ids, lines and names, not the messages
    inflight = _InFlight(counter)

    def counted(done: list[Message], counts: list[int]) -> None:
        new = list(_rows(done, counts))
        rows.extend(new)
        if on_rows is not None:
            on_rows(new)

    try:
        with gc_paused():
            for batch in _batches(stream.items, side):
                for done, counts in inflight.add(batch):
                    counted(done, counts)
                for m in batch:
                    pairing.add(m)
            problems = tuple(pairing.problems())  # while the last counts are made
            for done, counts in inflight.drain():
                counted(done, counts)
    finally:
        stream.close()
    return Scan(
        path=stream.name,
        format=stream.adapter.name,
        tokenizer=counter.name,
        rows=tuple(rows),
        usage=tuple(i for i in side if isinstance(i, Usage)),
        boundaries=tuple(i for i in side if isinstance(i, Boundary)),
        problems=problems,
        skipped_lines=len(stream.invalid_lines),
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

    inflight = _InFlight(counter)
    counts: list[int] = []
    batch: list[Message] = []
    chars = 0

    def take(message: Message) -> None:
        nonlocal batch, chars
        batch.append(message)
        chars += sum(len(getattr(b, "text", "")) for b in message.blocks)
        if chars >= _BATCH_CHARS or len(batch) >= _BATCH_MESSAGES:
            for _, done in inflight.add(batch):
                counts.extend(done)
            batch, chars = [], 0

    transcript = load(src, input_format=input_format, options=options, on_message=take)
    if batch:
        for _, done in inflight.add(batch):
            counts.extend(done)
    for _, done in inflight.drain():
        counts.extend(done)
    return transcript, counts


def _rows(batch: list[Message], counts: list[int]) -> Iterator[Row]:
    for m, tokens in zip(batch, counts, strict=True):
        names = m.tool_names
        yield (m.index, m.line, m.role, m.kind, names[0] if names else None, tokens, m.conversation)


def finish(
    scan: Scan,
    *,
    window: int,
    model: str | None,
    thresholds: tuple[float, float, float, float],
    top: int = 10,
) -> Analysis:
    """Apply a window and thresholds to a scan: cumulative tokens, shares, stages, totals."""
    tally = _Tally(window, thresholds, top)
    tally.add(scan.rows)
    return tally.analysis(scan, model=model)


class _Tally:
    """What a window and thresholds make of a scan's rows (:func:`finish`), added up as rows come."""

    def __init__(self, window: int, thresholds: tuple[float, float, float, float], top: int) -> None:
        self.window = window
        self.thresholds = thresholds
        self.top = top
        self.stats: list[MessageStat] = []
        self.cumulative: dict[int, int] = {}  # by conversation
        self.by_role: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()
        self.by_tool: Counter[str] = Counter()
        # The `top` largest messages so far, smallest first: (tokens, -index, -order, stat), so that
        # ties go to the earlier message, as a stable sort would have it.
        self.largest: list[tuple[int, int, int, MessageStat]] = []

    def add(self, rows: Iterable[Row]) -> None:
        # Once per message of a file, on every run (a cached one is mostly this): names held locally.
        window, thresholds, top, stats = self.window, self.thresholds, self.top, self.stats
        cumulative, largest = self.cumulative, self.largest
        by_role, by_kind, by_tool = self.by_role, self.by_kind, self.by_tool
        new_stat, append, stage_of = MessageStat, stats.append, stage_for
        for index, line, role, kind, tool, tokens, conv in rows:
            cum = cumulative.get(conv, 0) + tokens
            cumulative[conv] = cum
            share = cum / window
            stat = new_stat(
                index, line, role, kind, tool, tokens, cum, share, stage_of(share, thresholds), conv
            )
            if len(largest) < top:
                heapq.heappush(largest, (tokens, -index, -len(stats), stat))
            elif top > 0 and tokens >= largest[0][0] and (tokens, -index, -len(stats)) > largest[0][:3]:
                heapq.heapreplace(largest, (tokens, -index, -len(stats), stat))
            append(stat)
            by_role[role] += tokens
            by_kind[kind] += tokens
            if tool:
                by_tool[tool] += tokens

    def analysis(self, scan: Scan, *, model: str | None) -> Analysis:
        max_context = max(self.cumulative.values(), default=0)
        return Analysis(
            path=scan.path,
            format=scan.format,
            tokenizer=scan.tokenizer,
            window=self.window,
            model=model,
            thresholds=self.thresholds,
            total_tokens=sum(self.cumulative.values()),
            stage=stage_for(max_context / self.window, self.thresholds),
            conversations=len(self.cumulative) or 1,
            messages=tuple(self.stats),
            by_role=dict(self.by_role.most_common()),
            by_kind=dict(self.by_kind.most_common()),
            by_tool=dict(self.by_tool.most_common()),
            largest=tuple(entry[3] for entry in sorted(self.largest, reverse=True)),
            usage=summarize_usage(scan.usage),
            boundaries=scan.boundaries,
            problems=scan.problems,
            skipped_lines=scan.skipped_lines,
            max_context=max_context,
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
