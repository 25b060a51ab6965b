"""Format adapters: the registry, sniffing, and ``load``/``dump``. A new format is one module calling
:func:`register` plus its name in ``FORMAT_MODULES``."""

from __future__ import annotations

import importlib
import io
import itertools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from ctxc.errors import FormatError, InputError, UsageError
from ctxc.formats.base import SNIFF_RECORDS, FormatAdapter, Item
from ctxc.model import Boundary, Message, Record, Transcript, Usage
from ctxc.reader import BOM, CUT_OFF, ReadOptions, is_json, iter_records, named_bytes, open_binary, read_line
from ctxc.system import gc_paused
from ctxc.terminal import one_line

log = logging.getLogger(__name__)
_ADAPTERS: dict[str, FormatAdapter] = {}


def register(adapter: FormatAdapter) -> FormatAdapter:
    if adapter.name in _ADAPTERS:
        raise ValueError(f"format {adapter.name!r} registered twice")
    _ADAPTERS[adapter.name] = adapter
    return adapter


def unregister(name: str) -> None:
    """Remove a format (a test's or a plugin's); unknown names are an error."""
    del _ADAPTERS[name]


def adapters() -> dict[str, FormatAdapter]:
    return dict(_ADAPTERS)


def transcript_suffixes() -> tuple[str, ...]:
    """The file name endings of every registered format, for a directory walk."""
    return tuple(sorted({s for a in _ADAPTERS.values() for s in a.suffixes}))


def get_adapter(name: str) -> FormatAdapter:
    if name not in _ADAPTERS:
        raise FormatError(f"unknown format {name!r} (known: {', '.join(sorted(_ADAPTERS))})")
    return _ADAPTERS[name]


def sniff(sample: list[Record], name: str) -> FormatAdapter:
    """Pick the adapter most sure of ``sample``; a tie or no taker is an error, never a guess."""
    usable = [r for r in sample if r.kind == "passthrough"]
    scores = sorted(((a.sniff(usable), a.name) for a in _ADAPTERS.values()), reverse=True)
    if not usable or not scores or scores[0][0] <= 0:
        raise FormatError(
            "unknown transcript format (force one with {input_format})", path=name, options=("input_format",)
        )
    if len(scores) > 1 and scores[1][0] == scores[0][0]:
        raise FormatError(
            f"ambiguous format: {scores[0][1]} or {scores[1][1]} (force one with {{input_format}})",
            path=name,
            options=("input_format",),
        )
    return _ADAPTERS[scores[0][1]]


def check_forced(forced: str, sample: list[Record], name: str) -> None:
    """Refuse a forced ``--input-format`` that read nothing from a file another format sniffs as its own."""
    try:
        guess = sniff(sample, name)
    except FormatError:
        return  # no format knows the file better: its emptiness is the forced format's answer
    if guess.name != forced:
        raise FormatError(
            f"{{input_format}} {forced} reads nothing in this file, which looks like {guess.name} "
            f"(give {{input_format}} {guess.name}, or none to sniff)",
            path=name,
            options=("input_format",),
        )


def _forced(items: Iterator[Item], forced: str, sample: list[Record], name: str) -> Iterator[Item]:
    """``items``, then :func:`check_forced` when no message was among them."""
    messages = 0
    for item in items:
        messages += isinstance(item, Message)
        yield item
    if not messages:
        check_forced(forced, sample, name)


@dataclass
class Stream:
    """An opened transcript read lazily: ``records`` (unless ``keep_records=False``), ``invalid_lines``
    (records skipped under ``skip_invalid``) and ``cut_off`` (a last line not read, see
    :func:`~ctxc.reader.iter_records`) fill up as ``items`` is consumed."""

    name: str
    adapter: FormatAdapter
    items: Iterator[Item]
    records: list[Record]
    invalid_lines: list[int] = field(default_factory=list)
    cut_off: list[int] = field(default_factory=list)
    _handle: BinaryIO | None = None

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def open_stream(
    src: str | os.PathLike[str] | BinaryIO,
    *,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
    keep_records: bool = True,
) -> Stream:
    name, handle = open_binary(src)
    owned = handle if isinstance(src, str | os.PathLike) and str(src) != "-" else None
    cut_off: list[int] = []
    try:
        stream = _stream(
            name, iter_records(handle, name, options, cut_off=cut_off), input_format, keep_records, owned
        )
    except BaseException:
        if owned is not None:
            owned.close()
        raise
    stream.cut_off = cut_off
    return stream


def _stream(
    name: str,
    records_iter: Iterator[Record],
    input_format: str | None,
    keep_records: bool,
    handle: BinaryIO | None,
) -> Stream:
    sample: list[Record] = []
    passthrough = 0  # a running count: recounting the sample per record is quadratic in blank lines
    for rec in records_iter:
        sample.append(rec)
        passthrough += rec.kind == "passthrough"
        if passthrough >= SNIFF_RECORDS:
            break
    # Never empty: iter_records (and reload) raise for a file without a JSON record.
    adapter = get_adapter(input_format) if input_format else sniff(sample, name)
    kept: list[Record] = []
    invalid: list[int] = []

    def indexed() -> Iterator[tuple[int, Record]]:
        for i, rec in enumerate(itertools.chain(sample, records_iter)):
            if keep_records:
                kept.append(rec)
            if rec.kind == "passthrough":
                yield i, rec
            elif rec.kind == "invalid":
                invalid.append(rec.line)

    items = adapter.read(indexed())
    if input_format:
        items = _forced(items, adapter.name, sample, name)
    return Stream(name, adapter, items, kept, invalid, _handle=handle)


def load(
    src: str | os.PathLike[str] | BinaryIO,
    *,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
    on_message: Callable[[Message], None] | None = None,
    say_skipped: bool = True,
) -> Transcript:
    """Read a whole transcript file (a path, ``-`` for stdin, or a binary stream); ``on_message`` sees each
    message as soon as it is read, so work on it can go on while the rest is parsed. Lines
    ``skip_invalid`` passed over, and a last line cut off mid-record, are said in a warning on ctxc's
    logger unless ``say_skipped`` is False (a second read of a file already reported)."""
    transcript = _load(open_stream(src, input_format=input_format, options=options), on_message)
    if transcript.problems and say_skipped:
        log.warning(
            "ctxc: %s: skipped %d invalid line(s)", one_line(transcript.source), len(transcript.problems)
        )
    if transcript.cut_line and say_skipped:  # an output written from it does not have that line either
        log.warning("ctxc: %s:%d: %s", one_line(transcript.source), transcript.cut_line, CUT_OFF)
    return transcript


def reload(written: Transcript, read_from: Transcript, *, options: ReadOptions = ReadOptions()) -> Transcript:
    """``written`` read back as :func:`load` reads ``written.to_bytes()``, without a second copy of a large
    file: records taken from ``read_from`` keep their parsed JSON, and only new ones are parsed."""
    name = read_from.source
    own = {id(r) for r in read_from.records}
    if not _reads_alone(written.records, own, options):
        data = written.to_bytes()
        return load(named_bytes(name, data), input_format=written.format, options=options, say_skipped=False)
    records: list[Record] = []
    for line_no, rec in enumerate(written.records, 1):
        if id(rec) in own and rec.kind != "invalid":
            kind = "passthrough" if rec.kind == "message" else rec.kind
            as_read = rec.line == line_no and rec.kind == kind  # then the record itself, not a copy
            records.append(rec if as_read else rec.but(line=line_no, kind=kind))
            continue
        fresh = read_line(rec.raw, rec.eol, line_no, name, options)
        # A writer's line that reads back as the JSON it was made from keeps that JSON, whose strings
        # are the written messages': no second copy of them.
        same = fresh.kind == "passthrough" and rec.data is not None and fresh.data == rec.data
        records.append(rec.but(line=line_no, kind="passthrough") if same else fresh)
    if not any(r.kind == "passthrough" for r in records):
        raise InputError("empty file (no JSON records)", path=name)
    return _load(_stream(name, iter(records), written.format, True, None), None)


def _reads_alone(records: Sequence[Record], own: set[int], options: ReadOptions) -> bool:
    """Whether each record reads back alone as in the file: one line each, and a first line that is JSON
    (else the reader tries the whole file as one document)."""
    if not records:
        return False
    last = len(records) - 1
    for k, rec in enumerate(records):
        raw = b"" if rec.kept else rec.raw  # a kept line reads alone: see ctxc.reader.Spool
        if (
            rec.eol not in ((b"\n", b"\r\n") if k < last else (b"", b"\n", b"\r\n"))
            or b"\n" in raw
            or raw.endswith(b"\r")
            or raw.startswith(BOM)
            or rec.size + len(rec.eol) > options.max_line_bytes
        ):
            return False
    first = records[0]
    if id(first) in own:
        return first.kind in ("passthrough", "message", "blank")
    return is_json(first.raw)


def _load(stream: Stream, on_message: Callable[[Message], None] | None) -> Transcript:
    messages: list[Message] = []
    usage: list[Usage] = []
    boundaries: list[Boundary] = []
    with gc_paused():
        try:
            for item in stream.items:
                if isinstance(item, Message):
                    messages.append(item)
                    if on_message is not None:
                        on_message(item)
                elif isinstance(item, Usage):
                    usage.append(item)
                else:
                    boundaries.append(item)
        finally:
            stream.close()
        used = {i for m in messages for i in m.records}
        marked = tuple(r.but(kind="message") if i in used else r for i, r in enumerate(stream.records))
    problems = tuple(f"line {n}: skipped, not a JSON object" for n in stream.invalid_lines)
    return Transcript(
        format=stream.adapter.name,
        records=marked,
        messages=tuple(messages),
        source=stream.name,
        usage=tuple(usage),
        boundaries=tuple(boundaries),
        conversations=(max((m.conversation for m in messages), default=0) + 1),
        problems=problems,
        cut_line=stream.cut_off[0] if stream.cut_off else 0,
    )


def dump(transcript: Transcript, stream: BinaryIO) -> None:
    """Write a transcript's records; records nobody changed go out as the exact bytes read."""
    if isinstance(stream, io.TextIOBase) or not callable(getattr(stream, "write", None)):
        raise UsageError(f"dump writes to a binary stream (open(path, 'wb')), not a {type(stream).__name__}")
    for rec in transcript.records:
        stream.write(rec.raw)
        stream.write(rec.eol)


# Importing an adapter module registers it. Sniffing scores every adapter, so order does not matter.
FORMAT_MODULES = ("chat", "claude_code", "codex", "dataset", "openhands", "pi", "swe_agent")
for _module in FORMAT_MODULES:
    importlib.import_module(f"ctxc.formats.{_module}")
