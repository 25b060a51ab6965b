"""Recorded usage only (``ctxc analyze --tokenizer usage``): only the lines holding the adapter's
``usage_needles`` are parsed, with the figures of the full reader; formats without needles go through
the full reader, uncounted. A Claude Code log's other lines are placed on its record tree from their
leading keys, so its calls on abandoned branches are marked as the reader marks them. A file that records
no usage is an error, not a silent zero."""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from ctxc.errors import CtxcError, InputError
from ctxc.formats import check_forced, get_adapter, open_stream, sniff
from ctxc.formats.base import SNIFF_RECORDS, FormatAdapter
from ctxc.formats.claude_code import (
    _BOUNDARIES,
    _MAX_OPEN_RECORDS,
    _RECENT_IDS,
    compaction_boundary,
    response_usage,
)
from ctxc.formats.claude_code_chain import Tree
from ctxc.formats.claude_code_records import SYNTHETIC_MODEL, str_or_none
from ctxc.live import thread_usage
from ctxc.model import Boundary, Record, Usage
from ctxc.pricing import PriceTable
from ctxc.profiles import window_for_log
from ctxc.reader import BOM, ReadOptions, iter_records, megabytes, named_bytes, open_binary, parse_line
from ctxc.report import Analysis, UsageSummary, summarize_usage
from ctxc.stages import DEFAULT_THRESHOLDS, stage_for
from ctxc.tokens.base import USAGE_TOKENIZER

#: What a scan of the usage lines finds: the calls, the compaction boundaries, the lines skipped.
_Found = tuple[tuple[Usage, ...], tuple[Boundary, ...], int]
_NL = b"\n"
_SNIFF_HEAD = 64 * 1024
#: The key every record of Claude Code's tree has.
_UUID = b'"uuid"'
_STR = rb'"[^"\\]*(?:\\.[^"\\]*)*"'  # unrolled: sre runs it many times faster
#: A record's leading keys up to its ``type`` (and ``subtype``), every value a plain one: so all of them
#: are the record's own, not a nested object's. Claude Code writes them first (``parentUuid``, ...).
_HEAD = re.compile(
    rb'\{((?:(?!"type":)%b:(?:%b|true|false|null|-?[0-9.eE+-]+),)*+)"type":(%b)(?:,"subtype":(%b))?'
    % (_STR, _STR, _STR, _STR)
)
_PLAIN_STR = re.compile(rb'"([^"\\]*)"')
_BOUNDARY_SUBTYPES = frozenset(b'"%b"' % k.encode() for k in _BOUNDARIES)


@dataclass(frozen=True, slots=True)
class UsageScan:
    """The usage and compaction boundaries a log recorded, and how they were read."""

    path: str
    format: str
    usage: tuple[Usage, ...]
    boundaries: tuple[Boundary, ...]
    skipped_lines: int = 0
    #: True when only the usage lines were parsed; False when the full reader was used.
    fast: bool = False


def scan_usage(
    src: str | os.PathLike[str] | BinaryIO,
    *,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
) -> UsageScan:
    """The usage a transcript (a path, ``-`` or a binary stream) recorded; InputError when none."""
    name, handle = open_binary(src)
    owned = isinstance(src, str | os.PathLike) and name != "-"
    try:
        scan = _scan_buffer(_buffer(handle, owned), name, input_format, options)
    finally:
        if owned:
            handle.close()
    if not scan.usage:
        raise InputError(
            f"no recorded usage in this {scan.format} file: {{tokenizer}} usage reads the usage a log "
            "records (Claude Code, Codex, pi, Kimi); count its tokens with another {tokenizer}",
            path=name,
            options=("tokenizer",),
        )
    return scan


def _buffer(handle: BinaryIO, owned: bool) -> bytes | mmap.mmap:
    """The whole input: a read-only map of a regular file (no copy), else its bytes."""
    if owned:
        try:
            if os.fstat(handle.fileno()).st_size > 0:
                return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            pass  # not mappable (a pipe, a special file): read it instead
    return handle.read()


def _scan_buffer(
    buf: bytes | mmap.mmap, name: str, input_format: str | None, options: ReadOptions
) -> UsageScan:
    adapter = None
    try:
        sample = list(_head_records(buf, name, options))
        if sample:
            adapter = get_adapter(input_format) if input_format else sniff(sample, name)
    except CtxcError:
        adapter = None  # the full reader says exactly what is wrong (or reads a whole-document file)
    if adapter is None or not adapter.usage_needles:
        stream = open_stream(
            named_bytes(name, bytes(buf)), input_format=input_format, options=options, keep_records=False
        )
        try:
            usage, boundaries = _usage_and_boundaries(stream.items)
        finally:
            stream.close()
        return UsageScan(name, stream.adapter.name, usage, boundaries, len(stream.invalid_lines))
    lines = _Lines(buf, name, options)
    # Claude Code's own loop equals its reader over these lines (tested), without building messages.
    if adapter.name == "claude-code":
        usage, boundaries, skipped = _claude_code(lines, adapter.usage_needles)
    else:
        usage, boundaries, skipped = _needle_lines(lines, adapter)
    if input_format and not (usage or boundaries):
        check_forced(input_format, sample, name)
    return UsageScan(name, adapter.name, usage, boundaries, skipped, fast=True)


def _head_records(buf: bytes | mmap.mmap, name: str, options: ReadOptions) -> Iterator[Record]:
    """The records sniffing looks at: whole lines up to 64 KB at the head of the buffer."""
    end, lines = 0, 0
    while lines < SNIFF_RECORDS * 2 and (end < _SNIFF_HEAD or lines == 0):
        nl = buf.find(_NL, end)
        if nl < 0:
            end = len(buf)
            break
        end, lines = nl + 1, lines + 1
    passthrough = 0
    for rec in iter_records(named_bytes(name, buf[:end]), name, options):
        yield rec
        passthrough += rec.kind == "passthrough"
        if passthrough >= SNIFF_RECORDS:
            return


def _usage_and_boundaries(items: Iterable[object]) -> tuple[tuple[Usage, ...], tuple[Boundary, ...]]:
    usage: list[Usage] = []
    boundaries: list[Boundary] = []
    for item in items:
        if isinstance(item, Usage):
            usage.append(item)
        elif isinstance(item, Boundary):
            boundaries.append(item)
    return tuple(usage), tuple(boundaries)


class _Lines:
    """The lines of a buffer that hold any of some byte strings, parsed, with their line numbers."""

    def __init__(self, buf: bytes | mmap.mmap, name: str, options: ReadOptions) -> None:
        self.buf, self.name, self.options = buf, name, options
        self.skipped = 0

    def parsed(self, needles: Sequence[bytes]) -> Iterator[tuple[int, bytes, Any]]:
        """``(line number, raw bytes, parsed value)`` of each line holding any of ``needles``, in order."""
        buf = self.buf
        spans: dict[int, int] = {}  # start and end offsets of those lines
        for needle in needles:
            i = buf.find(needle)
            while i >= 0:
                end = buf.find(_NL, i)
                end = len(buf) if end < 0 else end
                spans[buf.rfind(_NL, 0, i) + 1] = end
                i = buf.find(needle, end)
        line, counted_to = 1, 0
        for start, end in sorted(spans.items()):
            nl = buf.find(_NL, counted_to)
            while 0 <= nl < start:
                line += 1
                nl = buf.find(_NL, nl + 1)
            counted_to = start
            if (found := self._parse(line, start, end)) is not None:
                yield line, *found

    def tree(self, needles: Sequence[bytes]) -> Iterator[tuple[int, Any, bool]]:
        """``(line number, value, whole)`` of each line that may hold a call or a compaction and holds a
        needle (parsed whole), and of each other line with a ``uuid`` (only its place on the tree, see
        :func:`_envelope`): every line visited once, none copied."""
        buf, size = self.buf, len(self.buf)
        line, start = 1, 0
        while start < size:
            nl = buf.find(_NL, start)
            end = size if nl < 0 else nl
            begin = start + 3 if start == 0 and buf[:3] == BOM else start
            head = _HEAD.match(buf, begin, end)
            if _may_count(head) and any(buf.find(n, start, end) >= 0 for n in needles):
                if (found := self._parse(line, start, end)) is not None:
                    yield line, found[1], True
            elif (at := buf.find(_UUID, begin, end)) >= 0:
                yield line, _envelope(buf, begin, end, at, head), False
            start, line = end + 1, line + 1

    def _parse(self, line: int, start: int, end: int) -> tuple[bytes, Any] | None:
        """The line's bytes and value; None when it is not JSON and such lines are skipped."""
        raw = self.buf[start:end]
        if raw[-1:] == b"\r":
            raw = raw[:-1]
        if len(raw) > self.options.max_line_bytes:
            raise InputError(
                f"line is {megabytes(len(raw))}, over the {megabytes(self.options.max_line_bytes)} limit "
                "(raise it with {max_line_bytes})",
                path=self.name,
                line=line,
                options=("max_line_bytes",),
            )
        body = raw[3:] if start == 0 and raw.startswith(BOM) else raw
        try:
            return raw, parse_line(body, self.name, line)
        except InputError:
            if self.options.skip_invalid:
                self.skipped += 1
                return None
            if start > 0 and end == len(self.buf):
                return None  # the file ends mid-record, in a line being written: not read, as the reader
            raise


def _may_count(head: re.Match[bytes] | None) -> bool:
    """Whether a record with these leading keys may be a call or a compaction: unless its own ``type``
    (and ``subtype``) say it is neither."""
    if head is None or head[2] == b'"assistant"':
        return True
    return head[2] == b'"system"' and (head[3] is None or head[3] in _BOUNDARY_SUBTYPES)


def _envelope(buf: bytes | mmap.mmap, begin: int, end: int, at: int, head: re.Match[bytes] | None) -> Any:
    """The place on Claude Code's tree of the line at ``begin:end`` whose first ``"uuid"`` is at ``at``:
    its leading keys (``head``, :data:`_HEAD`) and its only ``"uuid":"..."``. A key matched in the bytes
    is a key (in a JSON string the quotes are escaped); a ``"uuid"`` found twice (a nested message) or
    keys written otherwise, and the line is parsed whole. A line cut short (being written) is no record."""
    if buf[max(begin, end - 2) : end].rstrip()[-1:] != b"}":
        return None
    value = _PLAIN_STR.match(buf, at + 7, end) if buf[at + 6 : at + 7] == b":" else None
    if (
        head is None
        or (head[2] == b'"system"' and head[3] is None)  # the tree needs a system record's subtype
        or value is None
        or buf.find(_UUID, at + 6, end) >= 0
    ):
        try:
            return orjson.loads(buf[begin:end])
        except orjson.JSONDecodeError:
            return None
    prefix, kind, subtype = head.groups()
    found = orjson.loads(b'{%b"type":%b%b}' % (prefix, kind, b',"subtype":' + subtype if subtype else b""))
    found["uuid"] = value[1].decode()
    return found


def _claude_code(lines: _Lines, needles: Sequence[bytes]) -> _Found:
    """Usage of each response (split records merged by ``message.id``) and the compaction boundaries,
    read as :mod:`ctxc.formats.claude_code` reads them, without building the messages. Every line with a
    ``uuid`` is placed on the record tree (its other lines by their keys alone), so the calls on branches
    the client abandoned are marked as the reader marks them."""
    parts: list[tuple[dict[str, Any], int]] = []  # the open response's records whose usage counts
    boundaries: list[Boundary] = []
    closed: dict[str, None] = {}  # the last _RECENT_IDS closed ids, oldest first
    open_id: str | None = None
    open_lines: list[int] = []
    open_side = False  # the open response is a subagent run's, written inline
    tree = Tree()  # records numbered by line; its calls: each response's usage, lines and sidechain flag
    for line, data, whole in lines.tree(needles):
        if not isinstance(data, dict):
            continue
        if "uuid" in data:
            tree.note(line, line, data)
        rtype = data.get("type")
        if not whole:
            continue
        if rtype == "system":
            if (boundary := compaction_boundary(data, line)) is not None:
                boundaries.append(boundary)
            continue
        message = data.get("message")
        if rtype != "assistant" or not isinstance(message, dict):
            continue
        mid = str_or_none(message.get("id"))
        part = [] if message.get("model") == SYNTHETIC_MODEL else [(message, line)]
        if open_id is not None and mid == open_id and len(open_lines) < _MAX_OPEN_RECORDS:
            parts += part
            open_lines.append(line)
            continue
        if open_lines and (usage := response_usage(parts, open_side)) is not None:
            tree.calls.append((usage, open_lines, open_side))
        if open_id is not None:
            closed.pop(open_id, None)  # re-closed: now the newest
            closed[open_id] = None
            if len(closed) > _RECENT_IDS:
                del closed[next(iter(closed))]
        open_id, open_lines, open_side = mid, [line], data.get("isSidechain") is True
        parts = [] if mid in closed else part  # a late part of a closed response counts once
    if open_lines and (usage := response_usage(parts, open_side)) is not None:
        tree.calls.append((usage, open_lines, open_side))
    return tuple(tree.usage()), tuple(boundaries), lines.skipped


def _needle_lines(lines: _Lines, adapter: FormatAdapter) -> _Found:
    """The adapter's own reader over only the lines holding its ``usage_needles``."""
    records = (
        (n, Record(line=line, raw=raw, eol=b"", data=data))
        for n, (line, raw, data) in enumerate(lines.parsed(adapter.usage_needles))
        if isinstance(data, dict)
    )
    return (*_usage_and_boundaries(adapter.read(records)), lines.skipped)


def total_tokens(summary: UsageSummary) -> int:
    """Every token the calls were billed for (ccusage's ``totalTokens``)."""
    return summary.input + summary.output + summary.cache_read + summary.cache_write


def _live_since(scan: UsageScan) -> int:
    """The line of the log's own last compaction (0 when it has none)."""
    return max((b.line for b in scan.boundaries if b.resets), default=0)


def usage_analysis(
    scan: UsageScan,
    *,
    window: int | None = None,
    model: str | None = None,
    thresholds: tuple[float, float, float, float] = DEFAULT_THRESHOLDS,
    prices: PriceTable | None = None,
) -> Analysis:
    """An Analysis from recorded usage alone: ``max_context`` is the largest context a call sent since
    the log's own last compaction."""
    choice = window_for_log(model=model, window=window, usage=scan.usage)
    summary = summarize_usage(scan.usage, prices)
    since = _live_since(scan)
    peak = max((u.context for u in thread_usage(scan.usage) if u.line > since), default=0)
    return Analysis(
        path=scan.path,
        format=scan.format,
        tokenizer=USAGE_TOKENIZER,
        window=choice.window,
        model=choice.model,
        window_source=choice.source,
        live_from_line=since or None,
        thresholds=thresholds,
        total_tokens=total_tokens(summary) if summary else 0,
        stage=stage_for(peak / choice.window, thresholds),
        conversations=1,
        messages=(),
        by_role={},
        by_kind={},
        by_tool={},
        largest=(),
        usage=summary,
        boundaries=scan.boundaries,
        skipped_lines=scan.skipped_lines,
        max_context=peak,
    )


def crossing_line(scan: UsageScan, limit: int) -> int | None:
    """The line of the first recorded call whose context exceeded ``limit`` tokens, if any."""
    since = _live_since(scan)
    return next((u.line for u in thread_usage(scan.usage) if u.line > since and u.context > limit), None)


__all__ = ["UsageScan", "crossing_line", "scan_usage", "total_tokens", "usage_analysis"]
