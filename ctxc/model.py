"""The transcript model every adapter reads into and writes from: :class:`Record` lines (the exact bytes
read) and the :class:`Message` objects read from them, which point back at their records so a writer
re-encodes only what changed. Everything is frozen."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import orjson

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")

RecordKind = Literal["message", "passthrough", "blank", "invalid"]


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str
    raw: Any = None
    kind: ClassVar[str] = "text"


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """Model reasoning. ``text`` may be empty when only an encrypted or redacted form was recorded."""

    text: str
    raw: Any = None
    kind: ClassVar[str] = "thinking"


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    """A tool call. ``terminal``: the format's adapter says this call ends the agent's run (OpenHands
    ``finish``), so no result is awaited and none is missing; pairing checks and repair skip it."""

    id: str
    name: str
    input: Any
    raw: Any = None
    terminal: bool = False
    kind: ClassVar[str] = "tool_use"


def dumps_compact(value: Any) -> str:
    """Compact JSON, the form tool inputs take on the wire (and so what they cost)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """An image. Width and height are known only when the source recorded them or the header was read."""

    media_type: str | None = None
    width: int | None = None
    height: int | None = None
    data_bytes: int = 0
    raw: Any = None
    kind: ClassVar[str] = "image"


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    tool_use_id: str
    text: str
    is_error: bool = False
    name: str | None = None
    raw: Any = None
    #: Images returned inside the result (a screenshot, an image file read by a tool).
    images: tuple[ImageBlock, ...] = ()
    kind: ClassVar[str] = "tool_result"

    def named(self, name: str | None) -> ToolResultBlock:
        """``replace(self, name=name)``, without its walk over the fields (readers name every result)."""
        return ToolResultBlock(self.tool_use_id, self.text, self.is_error, name, self.raw, self.images)


@dataclass(frozen=True, slots=True)
class UnknownBlock:
    """A block ctxc does not model. ``text`` is what it costs in tokens; ``raw`` is written back verbatim."""

    raw: Any
    text: str = ""
    type: str = "unknown"
    kind: ClassVar[str] = "unknown"


Block = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | ImageBlock | UnknownBlock
BLOCK_KINDS: tuple[str, ...] = ("text", "thinking", "tool_use", "tool_result", "image", "unknown")
#: Which kind names a message's content in reports: results and calls outrank plain text.
_KIND_ORDER = ("tool_result", "tool_use", "image", "text", "thinking", "unknown")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage an API call recorded, as the log wrote it; ``context`` is the input the model saw."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    line: int = 0
    window: int | None = None
    #: The model the call was made with, when the log names it.
    model: str | None = None
    #: Of ``cache_write``, what was written for an hour rather than five minutes (priced higher).
    cache_write_1h: int = 0
    #: A call of a subagent run written inline (Claude Code 1.0.x): not the log's own thread.
    sidechain: bool = False
    #: A call on a branch the client abandoned (a rewind, an edited prompt): billed, but in no context.
    abandoned: bool = False

    @property
    def context(self) -> int:
        return self.input + self.cache_read + self.cache_write


@dataclass(frozen=True, slots=True)
class Boundary:
    """A compaction the log records. The client resumes from one that ``resets``: nothing before ``index``
    (the first message after it) but the messages from ``kept_from`` on and the ``carried`` messages the
    compaction record holds (Codex's ``replacement_history``, pi's summary)."""

    kind: str
    line: int
    trigger: str | None = None
    pre_tokens: int | None = None
    resets: bool = False
    index: int = 0
    conversation: int = 0
    kept_from: int | None = None
    carried: tuple[Message, ...] = field(default=(), compare=False, repr=False)
    #: What the carried messages cost, once counted (a cached scan keeps this, not the messages).
    carried_tokens: int = 0
    #: Indexes of messages on branches the client abandoned (a rewind, an edited prompt): they are in
    #: the file but on no chain it resumes. Only a ``branches`` item (Claude Code) carries them.
    abandoned: tuple[int, ...] = ()
    #: Indexes of messages whose thinking the client does not send (signed by another model than the
    #: one it resumes with). Only an ``unsent_thinking`` item (Claude Code) carries them.
    unsent_thinking: tuple[int, ...] = ()


class ByteSource(Protocol):
    """Where a record's bytes are kept when it does not hold them (:class:`ctxc.reader.Spool`)."""

    def read_at(self, offset: int, size: int) -> bytes: ...


class Record:
    """One physical line (or a whole-document file) exactly as read: its bytes, or (:meth:`kept_in`) where
    they are on disk, so a large input is not held twice. Frozen and compared like a frozen dataclass."""

    __slots__ = ("_held", "_offset", "_size", "_source", "data", "eol", "kind", "line")
    line: int
    eol: bytes
    data: Any
    kind: RecordKind
    _held: bytes
    _source: ByteSource | None
    _offset: int
    _size: int

    def __init__(
        self,
        line: int,
        raw: bytes,
        eol: bytes,
        data: Any = None,
        kind: RecordKind = "passthrough",
        source: ByteSource | None = None,
        offset: int = 0,
        size: int = 0,
    ) -> None:
        """``raw`` held, or (given a ``source``, ``raw`` empty) the ``size`` bytes at ``offset`` of it."""
        set_slot = object.__setattr__
        set_slot(self, "line", line)
        set_slot(self, "eol", eol)
        set_slot(self, "data", data)
        set_slot(self, "kind", kind)
        set_slot(self, "_held", raw)
        set_slot(self, "_source", source)
        set_slot(self, "_offset", offset)
        set_slot(self, "_size", size)

    @classmethod
    def kept_in(
        cls, source: ByteSource, offset: int, size: int, line: int, eol: bytes, data: Any, kind: RecordKind
    ) -> Record:
        """A record whose ``size`` bytes are at ``offset`` of ``source``."""
        return cls(line, b"", eol, data, kind, source, offset, size)

    @property
    def raw(self) -> bytes:
        source: ByteSource | None = self._source
        return self._held if source is None else source.read_at(self._offset, self._size)

    @property
    def kept(self) -> bool:
        """Whether the bytes are kept elsewhere (:meth:`kept_in`) rather than held."""
        return self._source is not None

    @property
    def size(self) -> int:
        """``len(self.raw)``, without reading it."""
        return len(self._held) if self._source is None else self._size

    def but(
        self, *, line: int | None = None, eol: bytes | None = None, kind: RecordKind | None = None
    ) -> Record:
        """This record with another line number, line end or kind: the same bytes, held or not."""
        line = self.line if line is None else line
        eol = self.eol if eol is None else eol
        kind = self.kind if kind is None else kind
        return Record(line, self._held, eol, self.data, kind, self._source, self._offset, self._size)

    def to_bytes(self) -> bytes:
        return self.raw + self.eol

    def _fields(self) -> tuple[Any, ...]:
        return (self.line, self.raw, self.eol, self.data, self.kind)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        line, raw, eol, data, kind = self._fields()
        return f"Record(line={line!r}, raw={raw!r}, eol={eol!r}, data={data!r}, kind={kind!r})"

    def __reduce__(self) -> tuple[type[Record], tuple[Any, ...]]:
        return Record, self._fields()  # a pickled record holds its bytes

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


#: ``Message.meta`` key: the tool ids of the message that its reader made up because the file gave a
#: call or result none (null or absent) where the API needs one. Writers leave these ids out, as read;
#: ``validate`` reports them and ``repair`` drops the key, so that the made-up ids are written.
MISSING_IDS = "missing_ids"


@dataclass(frozen=True, slots=True)
class Message:
    """One logical message: a role and ordered blocks. ``records`` index the lines it was read from
    (several for a split Claude Code response); ``meta`` holds adapter facts (uuids, source role...)."""

    role: Role
    blocks: tuple[Block, ...]
    line: int = 0
    index: int = 0
    records: tuple[int, ...] = ()
    conversation: int = 0
    importance: str | None = None
    usage: Usage | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    raw: Any = None

    @property
    def kind(self) -> str:
        """The message's dominant content kind, for reports: results and calls outrank plain text."""
        kinds = {b.kind for b in self.blocks}
        return next((k for k in _KIND_ORDER if k in kinds), "empty")

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.blocks if isinstance(b, ToolUseBlock | ToolResultBlock) and b.name)

    @property
    def text(self) -> str:
        """Plain text of the message's text, thinking and tool-result blocks, for search and rules."""
        parts = (
            f"{b.name} {b.input}"
            if isinstance(b, ToolUseBlock)
            else ""
            if isinstance(b, ImageBlock)
            else b.text
            for b in self.blocks
        )
        return "\n".join(p for p in parts if p)

    @property
    def is_request(self) -> bool:
        """A user's own words: a user message with text (not only tool results) that the client did not
        inject (meta text, a compaction summary, a demo, a shell command's output: ``meta["injected"]``)."""
        if self.role != "user":
            return False
        if any(self.meta.get(flag) for flag in ("is_meta", "is_compact_summary", "is_demo", "injected")):
            return False
        return any(isinstance(b, TextBlock) and b.text.strip() for b in self.blocks)


@dataclass(frozen=True, slots=True)
class Transcript:
    """A whole file: its records in order, the messages read from them, and what the log recorded."""

    format: str
    records: tuple[Record, ...]
    messages: tuple[Message, ...]
    source: str = "-"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    usage: tuple[Usage, ...] = ()
    boundaries: tuple[Boundary, ...] = ()
    conversations: int = 1
    problems: tuple[str, ...] = ()
    #: The number of a last line not read because the file ends mid-record in it (0: none).
    cut_line: int = 0

    def to_bytes(self) -> bytes:
        return b"".join(self.parts())

    def parts(self) -> Iterator[bytes]:
        """The file's bytes as its records' lines and line ends, in order, each read as it is reached:
        what ``to_bytes`` joins, for hashing or writing a large file without a second copy of it."""
        for r in self.records:
            yield r.raw
            yield r.eol

    def conversation(self, n: int) -> tuple[Message, ...]:
        return tuple(m for m in self.messages if m.conversation == n)
