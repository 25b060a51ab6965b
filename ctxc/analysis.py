"""Token usage of a transcript: per message, per role/kind/tool, and the compaction stage it is in.

The file is streamed: messages are counted in batches as they are read (by worker processes on a large
file) and only small per-message figures are kept, so memory is bounded by a batch, not by the file.
A file analyzed before is served from its cached scan, without loading the formats' readers: they are
imported where a file is read (bench/README.md, "Session 14").
"""

from __future__ import annotations

import collections
import functools
import heapq
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from ctxc.live import is_sidechain
from ctxc.model import Boundary, Message, Usage
from ctxc.pricing import PriceTable, default_prices
from ctxc.profiles import resolve_window, window_for_log
from ctxc.reader import ReadOptions, named_bytes, read_all
from ctxc.report import Analysis, MessageStat, Row, Scan, summarize_usage
from ctxc.scancache import load_scan, scan_key, store_scan
from ctxc.stages import DEFAULT_THRESHOLDS, check_thresholds, stage_for
from ctxc.system import gc_paused
from ctxc.tokens import USAGE_TOKENIZER, Counter, checked, counting_processes, make_counter
from ctxc.tokens.cost import Counted, compare_with_o200k, count_messages, thinking_tokens, tool_tokens
from ctxc.validate import Pairing


@functools.lru_cache(maxsize=8)
def process_counter(tokenizer: str, use_cache: bool, model: str | None, concurrency: int) -> Counter:
    # One cached counter per process and setting: a worker analyzing 200 files loads the BPE once.
    return make_counter(tokenizer, use_cache=use_cache, model=model, concurrency=concurrency)


@dataclass(frozen=True, slots=True)
class AnalyzeJob:
    """``ctxc analyze`` of one file, picklable for :func:`ctxc.batch.run_batch` (see :func:`analyze_file`)."""

    path: str
    tokenizer: str = "o200k_base"
    use_cache: bool = True
    model: str | None = None
    window: int | None = None
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
    input_format: str | None = None
    read_options: ReadOptions = ReadOptions()
    top: int = 10
    concurrency: int = 4
    forecast: bool = False  # also dry-run each adaptive stage
    prices: str | None = None  # a price table over the shipped one


def analyze_file(job: AnalyzeJob) -> Analysis:
    """``ctxc analyze`` for one file, plus the forecast and the Claude/o200k ratio when asked."""
    counter = process_counter(job.tokenizer, job.use_cache, job.model, job.concurrency)
    src: Any = job.path
    data = b""
    again = job.forecast or job.tokenizer == "anthropic"
    if again:  # both read the messages again: read the input once for all
        name, data = read_all(job.path)
        src = named_bytes(name, data)
    result = analyze(
        src,
        counter=counter,
        window=job.window,
        model=job.model,
        thresholds=job.thresholds,
        input_format=job.input_format,
        options=job.read_options,
        top=job.top,
        prices=default_prices(job.prices),
    )
    if not again:
        return result
    from ctxc.formats import load

    transcript = load(
        named_bytes(result.path, data),
        input_format=job.input_format,
        options=job.read_options,
        say_skipped=False,  # the analysis has said it
    )
    if job.forecast:
        from ctxc.compaction.forecast import forecast

        result = replace(
            result,
            forecast=forecast(transcript, window=result.window, counter=counter, thresholds=job.thresholds),
        )
    if job.tokenizer == "anthropic":  # how far Claude's counts are from o200k's (the estimate's error)
        from ctxc.live import sent_messages

        # Of the live context, as the analysis counts it.
        sent = sent_messages(transcript)
        result = replace(result, versus_o200k=compare_with_o200k(sent, counter, make_counter("o200k_base")))
    return result


def analyze(
    src: str | os.PathLike[str] | BinaryIO,
    *,
    counter: Counter | None = None,
    tokenizer: str = "o200k_base",
    window: int | None = None,
    model: str | None = None,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
    top: int = 10,
    use_cache: bool = True,
    prices: PriceTable | None = None,
) -> Analysis:
    """Analyze one transcript file (a path, ``-`` or a binary stream); recorded usage is priced at
    ``prices`` (default: the shipped table, see :mod:`ctxc.pricing`).

    A file path is analyzed once per content: the scan is cached by the file's content hash (with the
    tokenizer and read options), so a second run over an unchanged log only hashes it.
    """
    th = check_thresholds(thresholds)
    if window is not None or model is not None:
        resolve_window(model=model, window=window)  # a bad flag fails before any reading
    if USAGE_TOKENIZER in (tokenizer, getattr(counter, "name", None)):  # nothing counted
        from ctxc.usage_scan import scan_usage, usage_analysis

        usage = scan_usage(src, input_format=input_format, options=options)
        return usage_analysis(usage, window=window, model=model, thresholds=th, prices=prices)
    counter = counter or make_counter(tokenizer, use_cache=use_cache, model=model)
    key = None
    # Whole-scan caching follows the count cache: on when counts are cached (not for approx).
    cached = use_cache and getattr(counter, "cache", None) is not None
    counter = checked(counter)
    if cached and isinstance(src, str | os.PathLike) and str(src) != "-":
        key = scan_key(src, counter.name, input_format, options)
    scan = load_scan(key, str(src)) if key else None
    if scan is None:
        scan = scan_file(src, counter, input_format=input_format, options=options)
        if key:
            store_scan(key, scan)
    choice = window_for_log(model=model, window=window, usage=scan.usage)
    return finish(
        scan,
        window=choice.window,
        model=choice.model,
        thresholds=th,
        top=top,
        source=choice.source,
        prices=prices,
    )


def scan_file(
    src: str | os.PathLike[str] | BinaryIO,
    counter: Counter,
    *,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
) -> Scan:
    """Read and count a file, streaming: only small per-message facts are kept."""
    from ctxc.formats import open_stream
    from ctxc.tokens.reading import CountingQueue

    side: list[Usage | Boundary] = []
    rows: list[Row] = []
    sidechains: set[int] = set()
    pairing = Pairing()  # keeps only the calls' ids, lines and names, not the messages
    inflight = CountingQueue(counter)
    with counting_processes(counter, _size_of(src)):
        stream = open_stream(src, input_format=input_format, options=options, keep_records=False)
        try:
            with gc_paused():
                for item in stream.items:
                    if not isinstance(item, Message):
                        side.append(item)
                        continue
                    for done, counts in inflight.add(item):
                        rows.extend(_rows(done, counts, counter))
                    pairing.add(item)
                    if item.conversation and is_sidechain(item):
                        sidechains.add(item.conversation)
                inflight.flush()
                problems = tuple(pairing.problems())  # while the last counts are made
                for done, counts in inflight.drain():
                    rows.extend(_rows(done, counts, counter))
        finally:
            stream.close()
        # A scan keeps what the carried messages cost, not the messages.
        boundaries = tuple(
            replace(i, carried=(), carried_tokens=sum(count_messages(i.carried, counter))) if i.carried else i
            for i in side
            if isinstance(i, Boundary)
        )
    return Scan(
        path=stream.name,
        format=stream.adapter.name,
        tokenizer=counter.name,
        rows=tuple(rows),
        usage=tuple(i for i in side if isinstance(i, Usage)),
        boundaries=boundaries,
        problems=problems,
        skipped_lines=len(stream.invalid_lines),
        sidechains=tuple(sorted(sidechains)),
    )


def _size_of(src: str | os.PathLike[str] | BinaryIO) -> int:
    """The input's size in bytes when it is a regular file (0 otherwise: stdin, a stream)."""
    try:
        if isinstance(src, str | os.PathLike):
            return 0 if str(src) == "-" else os.stat(src).st_size
        buffer = getattr(src, "getbuffer", None)
        return len(buffer()) if callable(buffer) else os.fstat(src.fileno()).st_size
    except (OSError, ValueError, AttributeError):
        return 0


def _rows(batch: list[Message], counted: Counted, counter: Counter) -> Iterator[Row]:
    thinking = thinking_tokens(batch, counter)
    parts = counted.parts
    for m, (a, b, extra), think in zip(batch, counted.spans, thinking, strict=True):
        names = m.tool_names
        first = names[0] if names else None
        others = None
        if len(names) > 1 and any(n != first for n in names):  # parallel calls or their results
            others = tool_tokens(m, parts[a:b])
            del others[names[0]]
        yield (m.index, m.line, m.role, m.kind, first, sum(parts[a:b]) + extra, m.conversation, think, others)


def finish(
    scan: Scan,
    *,
    window: int,
    model: str | None,
    thresholds: tuple[float, float, float, float],
    top: int = 10,
    source: str = "flag",
    prices: PriceTable | None = None,
) -> Analysis:
    """A scan at a window and thresholds: running contexts, stages and totals, what is not sent apart."""
    live = scan.live
    stats: list[MessageStat] = []
    running: dict[int, int] = {}  # context so far, by conversation
    resets, pending = sorted((b for b in scan.boundaries if b.resets), key=lambda b: b.index), 0
    by_role = collections.Counter[str]()
    by_kind = collections.Counter[str]()
    by_tool = collections.Counter[str]()
    history, side, branches = [0, 0], [0, 0], [0, 0]
    for index, line, role, kind, tool, counted, conv, counted_thinking, others in scan.rows:
        pending = _reset(resets, pending, index, stats, running)
        is_live = live.is_live(index, conv)
        tokens, thinking = counted, counted_thinking
        if is_live and index in live.unsent_thinking:  # the client leaves that thinking out
            tokens, thinking = (0, 0) if kind == "thinking" else (counted - thinking, 0)
        cum = running.get(conv, 0) + tokens
        if index not in live.abandoned:  # an abandoned branch never adds to the context resumed
            running[conv] = cum
        share = cum / window
        stage = stage_for(share, thresholds)
        stats.append(MessageStat(index, line, role, kind, tool, tokens, cum, share, stage, conv, is_live))
        if is_live:
            by_role[role] += tokens
            by_kind[kind] += tokens - thinking
            if thinking:
                by_kind["thinking"] += thinking
            if tool:  # each other tool's own tokens to it, the rest of the message to its first tool
                by_tool.update(others or {})
                by_tool[tool] += tokens - sum(others.values()) if others else tokens
        else:
            tally = side if conv in live.side else branches if index in live.abandoned else history
            tally[0] += 1
            tally[1] += tokens
    # A reset after the last message (a log that ends at its compaction) still starts a new context.
    running.update({reset.conversation: reset.carried_tokens for reset in resets[pending:]})
    contexts = {c: t for c, t in running.items() if c not in live.side} or {0: 0}
    max_context = max(contexts.values())
    # Ties go to the earlier message, as a stable sort has it.
    largest = heapq.nlargest(top, (s for s in stats if s.live), key=lambda s: (s.tokens, -s.index))
    return Analysis(
        path=scan.path,
        format=scan.format,
        tokenizer=scan.tokenizer,
        window=window,
        model=model,
        thresholds=thresholds,
        total_tokens=sum(contexts.values()),
        stage=stage_for(max_context / window, thresholds),
        conversations=len(contexts),  # a subagent run written inline is apart, not a conversation
        messages=tuple(stats),
        by_role=dict(by_role.most_common()),
        by_kind=dict(by_kind.most_common()),
        by_tool=dict(by_tool.most_common()),
        largest=tuple(largest),
        usage=summarize_usage(scan.usage, prices),
        boundaries=scan.boundaries,
        problems=scan.problems,
        skipped_lines=scan.skipped_lines,
        max_context=max_context,
        window_source=source,
        live_from_line=live.boundary.line if live.boundary is not None else None,
        history_messages=history[0],
        history_tokens=history[1],
        side_messages=side[0],
        side_tokens=side[1],
        branch_messages=branches[0],
        branch_tokens=branches[1],
        carried_tokens=sum(b.carried_tokens for b in live.resets.values()),
    )


def _reset(
    resets: list[Boundary], pending: int, index: int, stats: list[MessageStat], running: dict[int, int]
) -> int:
    """Apply the compactions the log recorded before message ``index``: each restarts its conversation's
    context from what it carried (pi: plus the tail it keeps). Returns the first not yet applied."""
    while pending < len(resets) and resets[pending].index <= index:
        reset = resets[pending]
        kept = 0
        if reset.kept_from is not None:
            kept = sum(
                s.tokens for s in stats if s.conversation == reset.conversation and s.index >= reset.kept_from
            )
        running[reset.conversation] = reset.carried_tokens + kept
        pending += 1
    return pending
