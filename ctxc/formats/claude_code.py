"""Claude Code session logs (``~/.claude/projects/<cwd>/<sessionId>.jsonl`` and subagent files): ``user``,
``assistant`` and ``system`` records are messages, the rest stay in place byte for byte. How split responses,
consecutive user records and the record tree are read: docs/formats.md."""

from __future__ import annotations

import os
import uuid as uuidlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxc.formats import register
from ctxc.formats.base import FormatAdapter, Item, count, rename_session
from ctxc.formats.claude_code_chain import Tree, signer
from ctxc.formats.claude_code_records import SYNTHETIC_MODEL, encode_message
from ctxc.formats.claude_code_records import str_or_none as _str
from ctxc.formats.claude_code_write import CompactWriter
from ctxc.formats.shapes import parse_anthropic_content
from ctxc.model import (
    Block,
    Boundary,
    Message,
    Record,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    Usage,
)

#: Record types only Claude Code writes (used by sniffing).
_TYPES = frozenset(
    {"user", "assistant", "system", "progress", "summary"}
    | {"file-history-snapshot", "queue-operation", "pr-link"}
)
#: Keys that mark a record with one of those types as Claude Code's and not some other ``type`` field.
_MARKERS = ("uuid", "sessionId", "leafUuid", "messageId")
#: System subtypes that record a compaction, and the key holding their metadata.
_BOUNDARIES = {"compact_boundary": "compactMetadata", "microcompact_boundary": "microcompactMetadata"}

# Bounds on the reader's state, so a 100 MB log streams in constant memory. They are far above what
# real logs need (the largest split response in the corpus spans 30 records).
_MAX_PENDING = 1024  # messages buffered behind an open split response
_MAX_OPEN_RECORDS = 1024  # records of one split response
_RECENT_IDS = 256  # closed response ids remembered, so a late fragment does not count usage twice
_MAX_TOOL_NAMES = 1 << 16  # tool_use id -> name entries kept for naming results
#: How Claude Code's note that the user interrupted a turn begins ("... for tool use]" after a call).
_INTERRUPTED = "[Request interrupted by user"
#: A response's ``usage`` keys, in the order of the first four ``Usage`` fields.
_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def compaction_boundary(data: Mapping[str, Any], line: int) -> Boundary | None:
    """The boundary a compaction's ``system`` record marks, else None (this reader's and ``usage_scan``'s)."""
    subtype = _str(data.get("subtype"))
    if subtype not in _BOUNDARIES:
        return None
    md = data.get(_BOUNDARIES[subtype])
    md = md if isinstance(md, dict) else {}
    pre = md.get("preTokens")
    return Boundary(
        kind=subtype,
        line=line,
        trigger=_str(md.get("trigger")),
        pre_tokens=pre if isinstance(pre, int) and not isinstance(pre, bool) else None,
        # Claude Code resumes from its newest compact_boundary; a microcompaction only cleared old tool
        # results in place.
        resets=subtype == "compact_boundary",
    )


def response_usage(parts: Iterable[tuple[Mapping[str, Any], int]], sidechain: bool) -> Usage | None:
    """The usage of a response from the ``message`` and line of each record it was written in (this
    reader's and ``usage_scan``'s): each repeats it, and output_tokens grows as the response streams,
    so the field-wise maximum is the final count. One ``Usage`` for the response, not one a record."""
    most: list[int] | None = None
    line, model = 0, None
    for message, at in parts:
        u = message.get("usage")
        if not isinstance(u, dict):
            continue
        detail = u.get("cache_creation")  # the one-hour cache's writes are billed apart
        hour = count(detail.get("ephemeral_1h_input_tokens")) if isinstance(detail, dict) else 0
        counts = [*(count(u.get(key)) for key in _USAGE_KEYS), hour]
        if most is None:
            most, line = counts, at
        else:
            most = list(map(max, most, counts))
        if model is None:
            name = _str(message.get("model"))
            # "<synthetic>" marks a message the client made up (an error notice), not a model call.
            model = name if name and not name.startswith("<") else None
    if most is None:
        return None
    given, output, read, written, hour = most
    return Usage(given, output, read, written, line, model=model, cache_write_1h=hour, sidechain=sidechain)


def _meta(rec: Mapping[str, Any], message: Mapping[str, Any], content_string: bool) -> dict[str, Any]:
    model = _str(message.get("model"))
    uuid = _str(rec.get("uuid"))
    return {
        "uuid": uuid,
        "uuids": (uuid,) if uuid else (),
        "parent_uuid": _str(rec.get("parentUuid")),
        "logical_parent_uuid": _str(rec.get("logicalParentUuid")),
        "is_sidechain": rec.get("isSidechain") is True,
        "is_meta": rec.get("isMeta") is True,
        "is_compact_summary": rec.get("isCompactSummary") is True,
        "is_visible_in_transcript_only": rec.get("isVisibleInTranscriptOnly") is True,
        "message_id": _str(message.get("id")),
        "request_id": _str(rec.get("requestId")),
        "agent_id": _str(rec.get("agentId")),
        "session_id": _str(rec.get("sessionId")),
        "timestamp": _str(rec.get("timestamp")),
        "model": model,
        "stop_reason": _str(message.get("stop_reason")),
        "subtype": _str(rec.get("subtype")),
        "is_api_error": rec.get("isApiErrorMessage") is True,
        "synthetic": model == SYNTHETIC_MODEL,
        "has_tool_use_result": "toolUseResult" in rec,
        "content_string": content_string,
        "continuation": False,
    }


@dataclass(slots=True)
class _Draft:
    """A message read but not yet placed: its index is known only when it is emitted, after the later
    records of a response and the user records joined to it. Not frozen, unlike ``Message``: a frozen
    instance costs several times as much to make (bench/README.md, "Session 15")."""

    role: Role
    blocks: tuple[Block, ...]
    line: int
    records: tuple[int, ...]
    importance: str | None
    meta: dict[str, Any]
    raw: Any
    usage: Usage | None = None

    def placed(self, index: int, conversation: int) -> Message:
        return Message(
            self.role,
            self.blocks,
            self.line,
            index,
            self.records,
            conversation,
            self.importance,
            self.usage,
            self.meta,
            self.raw,
        )


def _message(role: Role, blocks: tuple[Block, ...], i: int, rec: Record, meta: dict[str, Any]) -> _Draft:
    """A user or system message read from record ``i`` alone."""
    data = rec.data
    return _Draft(role, blocks, rec.line, (i,), _str(data.get("importance")), meta, data)


def _own(meta: Mapping[str, Any]) -> bool:
    """Whether a user record stays a message of its own (the log's summary, what the client injected)."""
    return bool(
        meta.get("is_compact_summary") or meta.get("is_meta") or meta.get("is_visible_in_transcript_only")
    )


def _joined(held: _Draft, item: _Draft) -> _Draft:
    """``held`` and the user message after it on its chain as one message; ``raw`` keeps every record's
    dict (the writer splits changed blocks back over the records)."""
    raws = held.raw if isinstance(held.raw, tuple) else (held.raw,)
    meta = dict(held.meta)
    meta["uuids"] = (*(held.meta.get("uuids") or ()), *(item.meta.get("uuids") or ()))
    meta["content_string"] = False
    meta["has_tool_use_result"] = any(m.meta.get("has_tool_use_result") for m in (held, item))
    return replace(
        held,
        blocks=held.blocks + item.blocks,
        records=held.records + item.records,
        importance=held.importance or item.importance,
        meta=meta,
        raw=(*raws, item.raw),
    )


def _interruption(message: _Draft) -> bool:
    """Whether ``message`` is only the client's note that the user interrupted the turn."""
    return bool(message.blocks) and all(
        isinstance(b, TextBlock) and b.text.startswith(_INTERRUPTED) for b in message.blocks
    )


def _results(blocks: Iterable[Block]) -> bool:
    return any(isinstance(b, ToolResultBlock) for b in blocks)


@dataclass
class _Open:
    """An assistant response whose records may not all have been read yet."""

    message_id: str | None
    indexes: list[int]
    raws: list[dict[str, Any]]
    blocks: list[Block]
    #: The ``message`` and line of each record whose usage counts (see :func:`response_usage`).
    usages: list[tuple[dict[str, Any], int]]
    line: int
    #: A later part of a response that was already yielded (past the state bounds).
    continuation: bool


class _Reader:
    """The streaming state of one ``read`` call."""

    def __init__(self) -> None:
        self.index = 0
        self.open: _Open | None = None
        # Items read while a response is open: messages (index not yet final) and boundaries.
        self.pending: list[_Draft | Boundary] = []
        # The last _RECENT_IDS closed response ids, oldest first (a dict: every assistant record asks).
        self.closed_ids: dict[str, None] = {}
        self.tool_names: dict[str, str] = {}
        # Each chain of records is its own conversation: the main chain, and every sidechain run (a
        # subagent's own context, written inline by 1.0.x clients). Keys in order of first appearance.
        self.chain_of: dict[str, str] = {}  # sidechain record uuid -> its chain key (the run's root uuid)
        self.conv_numbers: dict[str, int] = {}
        self.record_conv: dict[int, int] = {}  # record index -> conversation, until its message is emitted
        self.last_side: str | None = None
        self.tree = Tree()
        # A user message not yet emitted: the next user record on its chain joins it.
        self.held: _Draft | None = None
        self.last_response: dict[int, frozenset[str]] = {}  # conversation -> uuids of its last response

    def _emit(self, item: _Draft | Boundary) -> Iterator[Item]:
        if isinstance(item, _Draft) and item.role == "user" and not _own(item.meta):
            held = self.held
            if held is not None and self._joins(held, item):
                self.held = _joined(held, item)
                return
            yield from self.release()
            self.held = item
            return
        yield from self.release()
        yield from self._place(item)

    def release(self) -> Iterator[Item]:
        """Emit the held user message."""
        held, self.held = self.held, None
        if held is not None:
            yield from self._place(held)

    def _place(self, item: _Draft | Boundary) -> Iterator[Item]:
        if isinstance(item, Boundary):
            yield replace(item, index=self.index)
            return
        conv = self.record_conv.get(item.records[0], 0)
        for i in item.records:
            self.record_conv.pop(i, None)
        msg = item.placed(self.index, conv)
        self.index += 1
        meta = msg.meta
        side = meta.get("is_sidechain") is True
        if meta.get("uuid") is not None:
            self.tree.emitted.append((msg.index, msg.records, conv, side))
        if msg.role == "assistant":
            self.last_response[conv] = frozenset(meta.get("uuids") or ())
            thinks = any(isinstance(b, ThinkingBlock) for b in msg.blocks)
            self.tree.responses.append((msg.index, msg.line, side, meta.get("model"), thinks))
        yield msg
        if msg.usage is not None:
            self.tree.calls.append((msg.usage, msg.records, side))

    def _joins(self, held: _Draft, item: _Draft) -> bool:
        """Whether user message ``item`` (not one of its own) directly follows ``held`` on the same chain
        (so the client sends both as one message): it hangs off ``held``'s last record, or both answer the
        calls of the same response (parallel tool results hang off the response's parts)."""
        # The note that the user interrupted stays apart, so a strategy may drop the interrupted turn.
        if len(held.records) >= _MAX_OPEN_RECORDS or _interruption(item):
            return False
        conv = self.record_conv.get(held.records[0], 0)
        if self.record_conv.get(item.records[0], 0) != conv:
            return False
        parent = self.tree.resolved(_str(item.meta.get("parent_uuid")))
        last = held.meta["uuids"][-1] if held.meta.get("uuids") else None
        if last is None and _str(item.meta.get("uuid")) is None:
            return True  # a log without uuids: file order is the chain
        if parent is not None and parent == last:
            return True
        response = self.last_response.get(conv, frozenset())
        return parent is not None and parent in response and _results(item.blocks) and _results(held.blocks)

    def _queue(self, item: _Draft | Boundary) -> Iterator[Item]:
        if self.open is None:
            yield from self._emit(item)
            return
        self.pending.append(item)
        if len(self.pending) >= _MAX_PENDING:
            yield from self.flush()

    def flush(self) -> Iterator[Item]:
        """Close the open response: yield it, then everything that was read while it was open."""
        op, self.open = self.open, None
        if op is not None and op.message_id is not None:
            yield from self._emit(self._merged(op))
            closed = self.closed_ids
            closed.pop(op.message_id, None)  # re-closed: now the newest
            closed[op.message_id] = None
            if len(closed) > _RECENT_IDS:
                del closed[next(iter(closed))]
        pending, self.pending = self.pending, []
        for item in pending:
            yield from self._emit(item)

    def _merged(self, op: _Open) -> _Draft:
        first = op.raws[0]
        first_msg = first["message"]
        meta = _meta(first, first_msg, False)
        meta["continuation"] = op.continuation
        if len(op.raws) > 1:
            meta["uuids"] = tuple(u for u in (_str(r.get("uuid")) for r in op.raws) if u)
            stops = [_str(r["message"].get("stop_reason")) for r in op.raws]
            meta["stop_reason"] = next((s for s in reversed(stops) if s), None)
        else:
            meta["content_string"] = isinstance(first_msg.get("content"), str)
        return _Draft(
            role="assistant",
            blocks=tuple(op.blocks),
            line=op.line,
            records=tuple(op.indexes),
            importance=next((i for i in (_str(r.get("importance")) for r in op.raws) if i), None),
            meta=meta,
            raw=op.raws[0] if len(op.raws) == 1 else tuple(op.raws),
            usage=response_usage(op.usages, first.get("isSidechain") is True),
        )

    def _remember_tools(self, blocks: Iterable[Block]) -> None:
        for b in blocks:
            if isinstance(b, ToolUseBlock):
                if len(self.tool_names) >= _MAX_TOOL_NAMES:
                    del self.tool_names[next(iter(self.tool_names))]
                self.tool_names[b.id] = b.name

    def _name_results(self, blocks: tuple[Block, ...]) -> tuple[Block, ...]:
        if not _results(blocks):
            return blocks
        return tuple(
            b.named(self.tool_names[b.tool_use_id])
            if isinstance(b, ToolResultBlock) and b.name is None and b.tool_use_id in self.tool_names
            else b
            for b in blocks
        )

    def assistant(self, i: int, rec: Record, data: dict[str, Any], message: dict[str, Any]) -> Iterator[Item]:
        blocks = parse_anthropic_content(message.get("content"))
        self._remember_tools(blocks)
        usage = [] if message.get("model") == SYNTHETIC_MODEL else [(message, rec.line)]
        mid = _str(message.get("id"))
        op = self.open
        if (
            op is not None
            and mid is not None
            and op.message_id == mid
            and len(op.indexes) < _MAX_OPEN_RECORDS
        ):
            op.indexes.append(i)
            op.raws.append(data)
            op.blocks.extend(blocks)
            op.usages += usage
            return
        yield from self.flush()
        # A late part of a response already yielded (only past the state bounds, or when another
        # response was written in between): its own message, with the usage not counted again.
        continuation = mid is not None and mid in self.closed_ids
        op = _Open(mid, [i], [data], list(blocks), [] if continuation else usage, rec.line, continuation)
        if mid is None:
            yield from self._emit(self._merged(op))
        else:
            self.open = op

    def user(self, i: int, rec: Record, message: dict[str, Any]) -> Iterator[Item]:
        content = message.get("content")
        blocks = self._name_results(parse_anthropic_content(content))
        if _results(blocks):
            self.tree.result_records.add(i)
        self._remember_tools(blocks)
        yield from self._queue(
            _message("user", blocks, i, rec, _meta(rec.data, message, isinstance(content, str)))
        )

    def system(self, i: int, rec: Record, data: dict[str, Any]) -> Iterator[Item]:
        boundary = compaction_boundary(data, rec.line)
        if boundary is not None:
            yield from self._queue(replace(boundary, conversation=self.record_conv.pop(i, 0)))
            return
        content = data.get("content")
        blocks: tuple[Block, ...] = (TextBlock(text=content),) if isinstance(content, str) else ()
        yield from self._queue(_message("system", blocks, i, rec, _meta(data, {}, isinstance(content, str))))

    def _chain(self, i: int, data: dict[str, Any]) -> None:
        """Note which conversation (chain) record ``i`` belongs to."""
        key = "main"
        if data.get("isSidechain") is True:
            parent = _str(data.get("parentUuid"))
            uuid = _str(data.get("uuid")) or f"#{i}"
            agent = _str(data.get("agentId"))
            if agent:  # 2.x names the subagent
                key = f"agent:{agent}"
            elif parent in self.chain_of:
                key = self.chain_of[parent]
            elif parent is None:  # 1.0.x: each inline run starts a new root
                key = uuid
            else:  # an excerpt starting mid-run: the parent is outside the file
                key = self.last_side or uuid
            self.chain_of[uuid] = key
            self.last_side = key
        number = self.conv_numbers.setdefault(key, len(self.conv_numbers))
        if number:  # conversation 0 is the default: only the others need remembering
            self.record_conv[i] = number

    def run(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        for i, rec in records:
            data = rec.data
            if not isinstance(data, dict):
                continue
            if "uuid" in data or data.get("isSidechain") is True:
                self._chain(i, data)
                self.tree.note(i, rec.line, data)
            rtype = data.get("type")
            message = data.get("message")
            if rtype == "assistant" and isinstance(message, dict):
                yield from self.assistant(i, rec, data, message)
            elif rtype == "user" and isinstance(message, dict):
                yield from self.user(i, rec, message)
            elif rtype == "system":
                yield from self.system(i, rec, data)
        yield from self.flush()
        yield from self.release()
        yield from self.tree.items(self.index)


class ClaudeCodeAdapter(FormatAdapter):
    name = "claude-code"
    usage_needles: tuple[bytes, ...] = (b'"usage"', b'compact_boundary"')
    summary_resets = True  # ctxc writes its summary as a compact_boundary
    description = "Claude Code session log (~/.claude/projects/*/<session>.jsonl, subagent files)"

    def sniff(self, sample: Sequence[Record]) -> int:
        records = [r.data for r in sample if isinstance(r.data, dict)]
        hits = sum(1 for d in records if _str(d.get("type")) in _TYPES and any(k in d for k in _MARKERS))
        if hits == 0:
            return 0
        return 95 if hits * 2 >= len(records) else 40

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        return _Reader().run(records)

    # Forking (``compact --fork``): a session is ``<project dir>/<sessionId>.jsonl``, every record naming
    # the session in its ``sessionId``.
    def new_session_id(self) -> str:
        return str(uuidlib.uuid4())

    def with_session_id(self, transcript: Transcript, session_id: str) -> Transcript:
        return rename_session(transcript, (b"sessionId",), session_id)

    def fork_path(self, original: str, session_id: str) -> str:
        return os.path.join(os.path.dirname(original), f"{session_id}.jsonl")

    def resume_command(self, session_id: str) -> str:
        return f"claude --resume {session_id}"

    encode_message = staticmethod(encode_message)

    def thinking_model(self, message: Message) -> str | None:
        """Its response's model, dates aside; None for a response the client made up (``<synthetic>``)."""
        model = message.meta.get("model")
        return None if model is None or model == SYNTHETIC_MODEL else signer(model)

    def write_compacted(
        self, transcript: Transcript, outputs: Mapping[int, Sequence[Message]], *, archive_id: str
    ) -> tuple[Record, ...]:
        """The compacted log, recorded the way Claude Code records its own compaction (see
        :class:`~ctxc.formats.claude_code_write.CompactWriter`)."""
        return CompactWriter(transcript, outputs, archive_id).write()


register(ClaudeCodeAdapter())
