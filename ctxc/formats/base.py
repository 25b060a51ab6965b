"""The format adapter Protocol and the stream items adapters yield.

An adapter turns the records of one file into messages (and the usage and compaction boundaries the log
recorded), and can encode a message back into a record of its own format. Reading is a generator over
records so that ``analyze`` can stream a 100 MB log without holding it; ``load`` collects the same items
into a :class:`~ctxc.model.Transcript`.

Everything ctxc knows about a format is here, on its adapter: the attributes of :class:`FormatAdapter`,
and how compacted conversations are written back (:class:`WritesCompacted`, :class:`EncodesConversations`,
or else one record per message). Adding a format is one module plus one line in ``FORMAT_MODULES``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import orjson

from ctxc.model import Boundary, Message, Record, Transcript, Usage

Item = Message | Usage | Boundary

#: How many leading records sniffing looks at.
SNIFF_RECORDS = 40


@functools.cache
def run_time() -> datetime:
    """When this run started writing (one instant per process): the time of a record ctxc adds where no
    record near it has one, so viewers never sort it to 1970."""
    return datetime.now(UTC)


def run_timestamp() -> str:
    """:func:`run_time` as the ISO 8601 UTC text logs use: ``2026-12-01T16:57:05.123Z``."""
    return run_time().strftime("%Y-%m-%dT%H:%M:%S.") + f"{run_time().microsecond // 1000:03d}Z"


@runtime_checkable
class FormatAdapter(Protocol):
    """One transcript format. Register an instance with :func:`ctxc.formats.register`."""

    #: The name used by ``--input-format`` and stored in ``Transcript.format``.
    name: str
    #: One line for ``ctxc formats`` and the README.
    description: str
    #: Whether the client resumes from a summary ctxc writes and sends nothing before it (Claude Code's
    #: compact_boundary): what must survive is then placed after the summary.
    summary_resets: bool
    #: Whether its writer can replace what the log's own compaction record carries into the live context
    #: (Codex: a new compacted record): compaction then works on those messages too.
    rewrites_carried: bool
    #: Whether tool results travel as role ``tool`` messages (Codex, pi, OpenHands) rather than inside a
    #: user message: how a repair answers an unanswered call when the conversation shows neither.
    tool_role: bool
    #: Whether the usage lines the log records come *before* the response they measure (Kimi's ``_usage``
    #: is the context size as the next call is made); elsewhere usage follows or sits on the response.
    usage_before_response: bool
    #: File name endings a directory walk picks up (``ctxc compact DIR`` without ``--glob``).
    suffixes: tuple[str, ...]
    #: Byte strings every record carrying usage or a compaction boundary contains: ``--tokenizer usage``
    #: then parses only the lines holding one. Empty: the whole file is read.
    usage_needles: tuple[bytes, ...]

    def sniff(self, sample: Sequence[Record]) -> int:
        """How sure (0-100) this adapter is that ``sample`` (the first non-blank records) is its format."""
        ...

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        """Yield messages (with ``records`` set to the given indexes), usage and boundaries, in order.

        Message ``index`` values must count up from 0 across the whole file. Records the adapter does not
        turn into messages are simply not referenced: they stay in place when the file is written.
        """
        ...

    def encode_message(self, message: Message) -> dict[str, Any]:
        """The JSON object for ``message`` as one record of this format.

        Built from the blocks (``raw`` supplies only envelope fields and blocks ctxc does not model), so
        that encoding a message read from a single record gives back that record's JSON.
        """
        ...


@runtime_checkable
class WritesCompacted(Protocol):
    """An adapter that writes compacted conversations its own way (Claude Code, Codex: they record
    compaction in their own records)."""

    def write_compacted(
        self, transcript: Transcript, outputs: Mapping[int, Sequence[Message]], *, archive_id: str
    ) -> tuple[Record, ...]: ...


@runtime_checkable
class EncodesConversations(Protocol):
    """An adapter with one conversation per record (datasets, trajectories): a changed conversation's
    record is rebuilt from ``template`` (its record as read); unchanged ones stay as their bytes."""

    def encode_conversation(
        self, messages: Sequence[Message], template: dict[str, Any]
    ) -> dict[str, Any]: ...


@runtime_checkable
class ForksSessions(Protocol):
    """An adapter whose logs are sessions a client resumes by id (Claude Code, Codex): ``compact --fork``
    writes the compacted session as a new one beside the original."""

    def new_session_id(self) -> str:
        """A fresh id of the kind the client makes."""
        ...

    def with_session_id(self, transcript: Transcript, session_id: str) -> Transcript:
        """``transcript`` with every record that names its session naming ``session_id`` instead."""
        ...

    def fork_path(self, original: str, session_id: str) -> str:
        """Where the client looks for session ``session_id``, beside the ``original`` log."""
        ...

    def resume_command(self, session_id: str) -> str:
        """The command that resumes session ``session_id``."""
        ...


def rename_session(
    transcript: Transcript, keys: Sequence[bytes], session_id: str, *, old: str | None = None
) -> Transcript:
    """``transcript`` with the string value of every ``"<key>": "..."`` of ``keys`` in its records' bytes
    (only the values equal to ``old``, when given) set to ``session_id``. The bytes are edited where
    they stand, so every other byte stays as it was; a key inside a JSON string is escaped
    (``\\"key\\"``) and so never matches."""
    value = rb"[^\"\\]*" if old is None else re.escape(old.encode())
    names = b"|".join(re.escape(k) for k in keys)
    pattern = re.compile(rb'("(?:' + names + rb')"\s*:\s*")' + value + rb'(")')
    new = session_id.encode()
    records = []
    for record in transcript.records:
        raw = pattern.sub(lambda m: m.group(1) + new + m.group(2), record.raw)
        records.append(
            record
            if raw == record.raw
            else Record(record.line, raw, record.eol, orjson.loads(raw), record.kind)
        )
    return dataclasses.replace(transcript, records=tuple(records))
