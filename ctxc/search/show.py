"""``ctxc show REF``: the original messages a citation (``ctxc archive 3f2a9c1b4d5e messages 3-17``),
a hit's ``ref`` (``3f2a9c1b4d5e:3-17``) or an archive id points at; an offloaded output as text."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxc.archive_store import CITATION_RE, MIN_PREFIX, recorded_path
from ctxc.errors import ArchiveError, CtxcError, UsageError
from ctxc.model import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    UnknownBlock,
)
from ctxc.search import entry_text, load_archived
from ctxc.search.chunks import render_input
from ctxc.search.index import INDEX_NAME

if TYPE_CHECKING:
    from ctxc.archive_store import ArchiveStore

_SHORT_REF = re.compile(rf"^\s*([0-9a-fA-F]{{{MIN_PREFIX},64}})(?::(\d+)(?:-(\d+))?)?\s*$")


@dataclass(frozen=True, slots=True)
class Ref:
    archive_id: str
    first: int | None = None
    last: int | None = None

    def __str__(self) -> str:
        if self.first is None:
            return self.archive_id[:MIN_PREFIX]
        span = str(self.first) if self.last in (None, self.first) else f"{self.first}-{self.last}"
        return f"{self.archive_id[:MIN_PREFIX]}:{span}"


def parse_ref(text: str) -> Ref:
    """A reference in one of the forms in the module docstring, else a UsageError."""
    m = _SHORT_REF.match(text) or CITATION_RE.search(text)
    if m is None:
        raise UsageError(
            f"not an archive reference: {text!r} (give `<id12>:5`, `<id12>:3-17`, "
            "or a citation such as `ctxc archive <id12> messages 3-17`)"
        )
    first = int(m.group(2)) if m.group(2) is not None else None
    last = int(m.group(3)) if m.group(3) is not None else first
    if first is not None and last is not None and last < first:
        raise UsageError(f"the range {first}-{last} ends before it starts")
    return Ref(m.group(1).lower(), first, last)


@dataclass(frozen=True, slots=True)
class Shown:
    """What a reference points at: messages of a transcript, or the text of an offloaded output."""

    archive_id: str
    ref: Ref
    transcript: Transcript | None
    messages: tuple[Message, ...]
    text: str | None = None
    source: str | None = None

    @property
    def format(self) -> str:
        return self.transcript.format if self.transcript is not None else "text"

    def raw_records(self) -> bytes:
        """The source records the messages were read from, exactly as archived, each once, in order."""
        if self.transcript is None:
            return (self.text or "").encode("utf-8")
        wanted = sorted({r for m in self.messages for r in m.records})
        return b"".join(self.transcript.records[i].to_bytes() for i in wanted)


def show(ref: Ref | str, *, archive: ArchiveStore) -> Shown:
    """Read the messages ``ref`` names from ``archive`` (a missing id or index is an ArchiveError)."""
    r = parse_ref(ref) if isinstance(ref, str) else ref
    ident = archive.resolve(r.archive_id)
    data = archive.read(ident)
    entry: dict[str, Any] = next(
        (e for e in reversed(archive.manifest()) if ident in (e.get("archive_id"), e.get("input_sha256"))), {}
    )
    source = (_indexed_source(archive, ident) or recorded_path(entry)) if entry else None
    short = ident[:MIN_PREFIX]
    try:
        transcript: Transcript | None = load_archived(data, f"archive {short}", entry_text(entry, "format"))
    except CtxcError:
        transcript = None
    # An offloaded output with JSON lines among its others (`head log.jsonl`) reads as a transcript with
    # skipped lines; no run archived it as an original, so it is the text it was.
    if transcript is None or not transcript.messages or (transcript.problems and not entry):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ArchiveError(f"archive object {short} is neither a transcript nor text") from None
        if r.first is not None:
            raise UsageError(
                f"archive object {short} is an offloaded output, not a transcript: "
                f"it has no messages (show it as `{short}`)"
            )
        return Shown(ident, r, None, (), text=text, source=source)
    if r.first is None:
        picked = transcript.messages
    else:
        lo, hi = r.first, r.last if r.last is not None else r.first
        picked = tuple(m for m in transcript.messages if lo <= m.index <= hi)
        if not picked:
            top = transcript.messages[-1].index
            asked = f"no message {lo}" if lo == hi else f"none in {lo}-{hi}"
            raise ArchiveError(f"archive {short} has messages 0-{top}; {asked}")
    return Shown(ident, r, transcript, picked, source=source)


def _indexed_source(archive: ArchiveStore, ident: str) -> str | None:
    """The original's path as the index has it (absolute, as recorded at archive time, as search hits
    give it); None without an index or a row (never makes or migrates one: ``show`` only reads)."""
    path = archive.root / INDEX_NAME
    if not path.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)) as conn:
            row = conn.execute(
                "SELECT source FROM docs WHERE archive_id = ? AND kind = 'transcript'", (ident,)
            )
            found = row.fetchone()
    except sqlite3.Error:
        return None
    return str(found[0]) if found and found[0] else None


def block_text(b: Any) -> tuple[str, str]:
    """(label, text) of one block, as ``ctxc show`` prints it."""
    if isinstance(b, TextBlock):
        return "text", b.text
    if isinstance(b, ThinkingBlock):
        return "thinking", b.text or "(redacted)"
    if isinstance(b, ToolUseBlock):
        return f"tool call {b.name} (id {b.id})", render_input(b.input)
    if isinstance(b, ToolResultBlock):
        status = "error result" if b.is_error else "result"
        name = f" of {b.name}" if b.name else ""
        images = f" [+{len(b.images)} image(s)]" if b.images else ""
        return f"tool {status}{name} (id {b.tool_use_id}){images}", b.text
    if isinstance(b, ImageBlock):
        size = f" {b.width}x{b.height}" if b.width and b.height else ""
        return "image", f"[image {b.media_type or '?'}{size}, {b.data_bytes:,} bytes]"
    if isinstance(b, UnknownBlock):
        return f"{b.type} block", b.text
    return "block", ""


def message_json(m: Message) -> dict[str, Any]:
    return {
        "index": m.index,
        "line": m.line,
        "conversation": m.conversation,
        "role": m.role,
        "kind": m.kind,
        "tools": list(m.tool_names),
        "blocks": [{"type": label, "text": text} for label, text in (block_text(b) for b in m.blocks)],
    }


def shown_json(shown: Shown) -> dict[str, Any]:
    return {
        "archive_id": shown.archive_id,
        "ref": str(shown.ref),
        "format": shown.format,
        "source": shown.source,
        "messages": [message_json(m) for m in shown.messages],
        **({"text": shown.text} if shown.text is not None else {}),
    }


def plain(messages: Sequence[Message]) -> str:
    """Messages as plain text, one ``[index] role (line N)`` header each (for pipes and tests)."""
    out: list[str] = []
    for m in messages:
        out.append(f"[{m.index}] {m.role} (line {m.line})")
        for label, text in (block_text(b) for b in m.blocks):
            out.append(f"  {label}:")
            out.extend(f"    {line}" for line in text.split("\n"))
    return "\n".join(out)
