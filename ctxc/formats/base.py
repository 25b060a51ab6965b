"""The format adapter Protocol, the items its reader yields, and what adapters share. Everything ctxc knows
about a format is on its adapter (writing compacted output: WritesCompacted, EncodesConversations or
RelinksLines)."""

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
    """When this run started: the time of an added record with no dated neighbour."""
    return datetime.now(UTC)


def run_timestamp() -> str:
    """:func:`run_time` as the ISO 8601 UTC text logs use: ``2026-12-01T16:57:05.123Z``."""
    return run_time().isoformat(timespec="milliseconds").replace("+00:00", "Z")


@runtime_checkable
class FormatAdapter(Protocol):
    """One transcript format. Register an instance with :func:`ctxc.formats.register`; an adapter that
    subclasses this Protocol takes the defaults below and sets only what differs."""

    name: str  # ``--input-format`` and ``Transcript.format``
    description: str  # one line for ``ctxc formats``
    #: Whether the client resumes from ctxc's summary and sends nothing before it (Claude Code's boundary).
    summary_resets: bool = False
    #: Whether its writer can replace what the log's own compaction record carries (Codex).
    rewrites_carried: bool = False
    #: Whether tool results travel as role ``tool`` messages rather than inside a user message (for repair).
    tool_role: bool = False
    #: Whether recorded usage comes *before* the response it measures (Kimi's ``_usage``), not with or after.
    usage_before_response: bool = False
    #: File name endings a directory walk picks up (``ctxc compact DIR`` without ``--glob``).
    suffixes: tuple[str, ...] = (".jsonl",)
    #: Bytes every record with usage or a boundary contains, so ``--tokenizer usage`` parses only those lines.
    usage_needles: tuple[bytes, ...] = ()

    def sniff(self, sample: Sequence[Record]) -> int:
        """How sure (0-100) this adapter is that ``sample`` (the first non-blank records) is its format."""

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        """Yield messages (``records`` set to the given indexes, ``index`` counting from 0), usage and
        boundaries, each kind in order (Claude Code's usage comes last: its tree tells which calls were
        abandoned). Records no message references stay in place when the file is written."""

    def encode_message(self, message: Message) -> dict[str, Any]:
        """The JSON object for ``message`` as one record, built from its blocks (``raw`` supplies the rest):
        a message read from one record encodes back to that record's JSON."""

    def thinking_model(self, message: Message) -> str | None:
        """The model ``message``'s thinking may be sent to, for a client that sends a model only the
        thinking recorded with it (signatures verify nowhere else); None when the format has no such rule."""
        return None


def count(value: Any) -> int:
    """A token count as recorded, else 0 (a bool or a non-int is no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def recorded_usage(
    usage: Mapping[str, Any],
    keys: tuple[str, str, str, str],
    line: int,
    *,
    cached_in_input: bool = False,
    **more: Any,
) -> Usage:
    """Usage from a log's counts named by ``keys`` (input, output, cache read, cache write; "" if not
    recorded); where the input count includes the cached tokens (OpenAI's), they are taken out of it."""
    prompt, output, read, write = (count(usage.get(key)) if key else 0 for key in keys)
    fresh = max(prompt - read - write, 0) if cached_in_input else prompt
    return Usage(fresh, output, read, write, line=line, **more)


def importance_of(obj: Mapping[str, Any]) -> str | None:
    value = obj.get("importance")
    return value if isinstance(value, str) else None


@runtime_checkable
class WritesCompacted(Protocol):
    """An adapter that writes compacted conversations its own way (Claude Code, Codex)."""

    def write_compacted(
        self, transcript: Transcript, outputs: Mapping[int, Sequence[Message]], *, archive_id: str
    ) -> tuple[Record, ...]: ...


@runtime_checkable
class EncodesConversations(Protocol):
    """An adapter with one conversation per record: a changed one is rebuilt from ``template`` (as read)."""

    def encode_conversation(
        self, messages: Sequence[Message], template: dict[str, Any]
    ) -> dict[str, Any]: ...


@runtime_checkable
class RelinksLines(Protocol):
    """An adapter written a line per message whose entries name their parents (pi): it relinks them."""

    def relink_lines(self, source: Sequence[Record], written: Sequence[Record]) -> tuple[Record, ...]: ...


@runtime_checkable
class ForksSessions(Protocol):
    """An adapter whose sessions a client resumes by id: ``compact --fork`` writes a new one beside it."""

    def new_session_id(self) -> str: ...

    def with_session_id(self, transcript: Transcript, session_id: str) -> Transcript:
        """``transcript`` with every record that names its session naming ``session_id`` instead."""

    def fork_path(self, original: str, session_id: str) -> str:
        """Where the client looks for session ``session_id``, beside the ``original`` log."""

    def resume_command(self, session_id: str) -> str: ...


def rename_session(
    transcript: Transcript, keys: Sequence[bytes], session_id: str, *, old: str | None = None
) -> Transcript:
    """``transcript`` with every ``"<key>": "..."`` value (equal to ``old``, when given) set to
    ``session_id``, edited in the bytes so all else stays (a key inside a JSON string never matches)."""
    value = rb"[^\"\\]*" if old is None else re.escape(old.encode())
    names = b"|".join(re.escape(k) for k in keys)
    pattern = re.compile(rb'("(?:' + names + rb')"\s*:\s*")' + value + rb'(")')
    new = session_id.encode()
    records = []
    for record in transcript.records:
        raw = pattern.sub(lambda m: m.group(1) + new + m.group(2), record.raw)
        changed = raw != record.raw
        records.append(
            Record(record.line, raw, record.eol, orjson.loads(raw), record.kind) if changed else record
        )
    return dataclasses.replace(transcript, records=tuple(records))


def output_messages(transcript: Transcript, outputs: Mapping[int, Sequence[Message]]) -> list[Message]:
    """Every conversation's output in order; a conversation the caller left out is unchanged, not dropped."""
    convs = sorted({m.conversation for m in transcript.messages} | set(outputs))
    return [m for c in convs for m in (outputs[c] if c in outputs else transcript.conversation(c))]


def replaces(message: Message) -> tuple[int, int] | None:
    """The span of message indexes a new message stands for (``meta["replaces"]``), if it names one."""
    span = message.meta.get("replaces")
    if isinstance(span, tuple | list) and len(span) == 2 and all(isinstance(x, int) for x in span):
        return int(span[0]), int(span[1])
    return None


def fix_eols(out: Sequence[Record], source: Sequence[Record], eol: bytes) -> tuple[Record, ...]:
    """Every line but the last ends with a newline; the last ends as the input's last line did (as
    ``ctxc.compaction.write`` does)."""
    if not out:
        return ()
    final = source[-1].eol if source else b"\n"
    fixed = [r if r.eol else r.but(eol=eol) for r in out[:-1]]
    fixed.append(out[-1] if out[-1].eol == final else out[-1].but(eol=final))
    return tuple(fixed)
