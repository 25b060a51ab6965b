"""Writing compacted conversations back in the format they were read from, as the adapter says
(:mod:`ctxc.formats.base`): its own ``write_compacted``, an ``encode_conversation`` per record, or else
line per message, kept messages and other records keeping their exact bytes and places."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from ctxc.formats.base import EncodesConversations, FormatAdapter, RelinksLines, WritesCompacted
from ctxc.model import Message, Record, Transcript
from ctxc.reader import BOM

__all__ = ["EncodesConversations", "WritesCompacted", "encode_record", "write_lines", "write_transcript"]


def encode_record(data: dict[str, Any], eol: bytes, line: int = 0) -> Record:
    """A record ctxc made: it keeps ``data`` and encodes its bytes whenever they are read (to check the
    output, then to write it) rather than hold them beside the strings they repeat."""
    encoded = _Encoded(data)
    return Record.kept_in(encoded, 0, len(encoded.read_at(0, 0)), line, eol, data, "message")


class _Encoded:
    """The JSON bytes of ``data``, made again on each read."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def read_at(self, offset: int, size: int) -> bytes:
        return orjson.dumps(_copied(self.data))


def _copied(value: Any) -> Any:
    """``value`` with copies of its non-ASCII strings: encoding a string caches its UTF-8 form inside it
    for as long as it lives, and these are the written messages' own texts."""
    if isinstance(value, str):
        return value if value.isascii() else "".join((value, ""))  # join of two makes a new string
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copied(v) for v in value]
    return value


def write_transcript(
    transcript: Transcript,
    outputs: Mapping[int, Sequence[Message]],
    adapter: FormatAdapter,
    *,
    archive_id: str,
) -> Transcript:
    if isinstance(adapter, WritesCompacted):
        records = adapter.write_compacted(transcript, outputs, archive_id=archive_id)
    elif isinstance(adapter, EncodesConversations):
        records = _write_per_conversation(transcript, outputs, adapter)
    else:
        records = write_lines(transcript, outputs, adapter)
        if isinstance(adapter, RelinksLines):
            records = adapter.relink_lines(transcript.records, records)
    flat = tuple(m for conv in sorted(outputs) for m in outputs[conv])
    return replace(transcript, records=records, messages=flat)


def _unchanged(original: Sequence[Message], new: Sequence[Message]) -> bool:
    return len(original) == len(new) and all(a is b for a, b in zip(original, new, strict=True))


def _write_per_conversation(
    transcript: Transcript, outputs: Mapping[int, Sequence[Message]], adapter: EncodesConversations
) -> tuple[Record, ...]:
    by_record: dict[int, int] = {}
    for m in transcript.messages:
        if m.records:
            by_record.setdefault(m.records[0], m.conversation)
    out: list[Record] = []
    for i, rec in enumerate(transcript.records):
        conv = by_record.get(i)
        if conv is None or conv not in outputs or _unchanged(transcript.conversation(conv), outputs[conv]):
            out.append(rec)
            continue
        data = adapter.encode_conversation(outputs[conv], rec.data)
        if not rec.eol and b"\n" in rec.raw:
            # A pretty-printed whole document (a .traj file) stays pretty-printed, framed as it was read:
            # byte-order mark, line ends (a newline in a JSON string is escaped) and how it ends.
            body = orjson.dumps(data, option=orjson.OPT_INDENT_2)
            body = body.replace(b"\n", b"\r\n") if b"\r\n" in rec.raw else body
            bom = BOM if rec.raw.startswith(BOM) else b""
            raw = bom + body + rec.raw[len(rec.raw.rstrip()) :]
            out.append(Record(line=rec.line, raw=raw, eol=b"", data=data, kind="message"))
        else:
            out.append(encode_record(data, rec.eol, rec.line))
    return tuple(out)


def write_lines(
    transcript: Transcript, outputs: Mapping[int, Sequence[Message]], adapter: FormatAdapter
) -> tuple[Record, ...]:
    """Line-per-message writing; non-message records keep their position relative to kept messages."""
    eol = next((r.eol for r in transcript.records if r.eol), b"\n")
    originals = {id(m) for m in transcript.messages}
    message_records = {i for m in transcript.messages for i in m.records}
    out_messages = [m for conv in sorted(outputs) for m in _in_file_order(outputs[conv])]
    out: list[Record] = []
    next_record = 0  # the first input record not yet passed

    def flush_until(stop: int) -> None:
        nonlocal next_record
        while next_record < stop:
            if next_record not in message_records:
                out.append(transcript.records[next_record])
            next_record += 1

    @functools.cache
    def first_stamp() -> str | None:  # looked up once: a chat file's records have none
        return next((t for t in map(_stamp_of, transcript.records) if t is not None), None)

    dialect: Any = None
    stamp: str | None = None  # the timestamp of the last record written that has one
    seen = 0  # the records of ``out`` already looked at for it
    for message in out_messages:
        m = message
        if "dialect" in m.meta:
            dialect = m.meta["dialect"]
        elif dialect is not None:
            # A message ctxc made speaks the dialect of the messages around it (chat files mix none).
            m = replace(m, meta={**m.meta, "dialect": dialect})
        if not m.records and "timestamp" not in m.meta:
            # ...and carries the time of the record it follows (pi; before any, of the first record that
            # has one), so viewers keep it in its place.
            stamp = next((t for t in map(_stamp_of, reversed(out[seen:])) if t is not None), stamp)
            seen = len(out)
            when = stamp if stamp is not None else first_stamp()
            if when is not None:
                m = replace(m, meta={**m.meta, "timestamp": when})
        if m.records:
            flush_until(m.records[0])
            if id(m) in originals:
                out.extend(transcript.records[i] for i in m.records)
            else:
                out.append(
                    encode_record(adapter.encode_message(m), transcript.records[m.records[0]].eol or eol)
                )
            next_record = max(next_record, m.records[-1] + 1)
        else:
            out.append(encode_record(adapter.encode_message(m), eol))
    flush_until(len(transcript.records))
    if not out:
        return ()
    # Every line but the last ends with a newline; the last ends as the input's last line did.
    final_eol = transcript.records[-1].eol if transcript.records else b"\n"
    fixed = [r if r.eol else r.but(eol=eol) for r in out[:-1]]
    return (*fixed, out[-1].but(eol=final_eol))


def _in_file_order(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with those read from records in the order of their records, each new one just before
    the next of those: the history a conversation's output starts with goes back to its places (a
    branch the client abandoned lies between live messages). A no-op when that order holds already."""
    keys: list[tuple[float, int]] = []
    ahead = float("inf")  # the first record of the next message read from one
    for seq in range(len(messages) - 1, -1, -1):
        records = messages[seq].records
        ahead = records[0] if records else ahead
        keys.append((ahead, seq))
    return [messages[seq] for _, seq in sorted(keys)]


def _stamp_of(rec: Record) -> str | None:
    stamp = rec.data.get("timestamp") if isinstance(rec.data, dict) else None
    return stamp if isinstance(stamp, str) else None
