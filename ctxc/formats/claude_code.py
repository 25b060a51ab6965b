"""Claude Code session logs (``~/.claude/projects/<cwd>/<sessionId>.jsonl`` and subagent files).

Each line is one record. ``user``, ``assistant`` and ``system`` records are messages; ``progress``,
``file-history-snapshot``, ``queue-operation``, ``summary`` (session titles), ``pr-link`` and anything
unknown are not, and so stay in place byte for byte. Decisions worth knowing:

* One API response is written as several ``assistant`` records sharing ``message.id``; they become ONE
  message (``records`` = all of them, ``raw`` = the tuple of their dicts, usage counted once). Tool
  results answering the early parts can be written between the parts; they are buffered and yielded
  after the merged response, so every result comes after its call.
* ``compact_boundary`` and ``microcompact_boundary`` system records are yielded only as
  :class:`~ctxc.model.Boundary` items, not as messages: the client never sends them to the model.
  Other system records (``stop_hook_summary``, ``turn_duration``, ``local_command``, ...) are
  ``system`` messages, with a TextBlock when they carry a ``content`` string and no blocks otherwise.
* A user record's top-level ``toolUseResult`` is the client's structured copy of a tool result; the
  model only sees the ``tool_result`` block, so the copy is not content (it stays in ``raw``).
* ``model:"<synthetic>"`` turns are written by the client, not the API: their all-zero usage is not
  recorded usage (``usage`` is None and no Usage item is yielded).
* Consecutive user records on one chain (a record hanging off the previous one, or the results of
  parallel calls hanging off the parts of one response) are ONE message, as Claude Code sends them:
  ``records`` all of them, ``raw`` the tuple of their dicts. The log's own summary, records the client
  injected (``isMeta``) and its note that the user interrupted stay messages of their own (what the
  user typed after the note joins it).
* The log is a tree (``parentUuid``). Claude Code resumes the chain from the last main-chain row back
  to its root (a ``compact_boundary``): after the last record, a ``branches`` :class:`~ctxc.model.Boundary`
  names the messages on other branches (a rewind, an edited prompt), when there are any.

Compacted output is written by :meth:`ClaudeCodeAdapter.write_compacted` the way Claude Code records
its own ``/compact`` (a ``compact_boundary`` record and an ``isCompactSummary`` user record, with the
``parentUuid`` chain re-linked); :class:`_CompactWriter` says exactly what is kept, dropped and changed.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import os
import uuid as uuidlib
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import orjson

from ctxc.formats import register
from ctxc.formats.base import Item, rename_session
from ctxc.formats.shapes import dumps_compact, encode_anthropic_block, parse_anthropic_content
from ctxc.live import BRANCHES, abandoned_messages
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
    UnknownBlock,
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

_NAMESPACE = uuidlib.uuid5(uuidlib.NAMESPACE_URL, "https://github.com/ctxc/claude-code")
_CONVERSATIONAL = ("user", "assistant")
#: The record types Claude Code loads into its conversation tree (progress records it skips).
_ROWS = frozenset({"user", "assistant", "system", "attachment"})
_SYNTHETIC_MODEL = "<synthetic>"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(message: Mapping[str, Any], line: int) -> Usage | None:
    u = message.get("usage")
    if not isinstance(u, dict):
        return None
    model = _str(message.get("model"))
    return Usage(
        input=_int(u.get("input_tokens")),
        output=_int(u.get("output_tokens")),
        cache_read=_int(u.get("cache_read_input_tokens")),
        cache_write=_int(u.get("cache_creation_input_tokens")),
        cache_write_1h=hour_writes(u),
        line=line,
        # "<synthetic>" marks a message the client made up (an error notice), not a model call.
        model=model if model and not model.startswith("<") else None,
    )


def hour_writes(usage: Mapping[str, Any]) -> int:
    """The tokens a call wrote to the one-hour cache (``cache_creation.ephemeral_1h_input_tokens``)."""
    detail = usage.get("cache_creation")
    return _int(detail.get("ephemeral_1h_input_tokens")) if isinstance(detail, dict) else 0


def _max_usage(a: Usage | None, b: Usage | None) -> Usage | None:
    # Every split record repeats the usage; output_tokens grows as the response streams, so the
    # field-wise maximum is the final count.
    if a is None or b is None:
        return a or b
    return Usage(
        input=max(a.input, b.input),
        output=max(a.output, b.output),
        cache_read=max(a.cache_read, b.cache_read),
        cache_write=max(a.cache_write, b.cache_write),
        line=a.line,
        model=a.model or b.model,
        cache_write_1h=max(a.cache_write_1h, b.cache_write_1h),
    )


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
        "synthetic": model == _SYNTHETIC_MODEL,
        "has_tool_use_result": "toolUseResult" in rec,
        "content_string": content_string,
        "continuation": False,
    }


def _importance(rec: Mapping[str, Any]) -> str | None:
    return _str(rec.get("importance"))


def _wire(block: Block) -> Block:
    """The block as the shared encoder should see it: ``name`` on a result is ctxc's, not the log's."""
    if isinstance(block, ToolResultBlock) and block.name is not None:
        return replace(block, name=None)
    return block


def _encode_content(blocks: Sequence[Block], raw_content: Any, *, as_string: bool) -> Any:
    if not blocks and not isinstance(raw_content, str | list):
        return raw_content  # content was missing or null: keep it so
    if (
        len(blocks) == 1
        and isinstance(blocks[0], UnknownBlock)
        and blocks[0].raw is raw_content
        and not isinstance(raw_content, list)
    ):
        return raw_content  # an unmodeled non-list content value, unchanged
    if as_string and len(blocks) == 1 and isinstance(blocks[0], TextBlock) and blocks[0].raw is None:
        return blocks[0].text
    if as_string and not blocks:
        return ""
    return [encode_anthropic_block(_wire(b)) for b in blocks]


def _plain_text(blocks: Sequence[Block]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock | ThinkingBlock) and b.text)


class _Node(NamedTuple):
    """One record of the ``parentUuid`` tree, as much as finding the resumed chain needs."""

    record: int  # its index in the file's records
    line: int
    uuid: str
    parent: str | None  # through progress records, which the client skips
    kind: str
    side: bool
    message_id: str | None = None  # an assistant record's response id
    compact: bool = False  # a compact_boundary record


def _own(meta: Mapping[str, Any]) -> bool:
    """Whether a user record stays a message of its own: ctxc recognizes the log's own summary and what
    the client injected by these flags, so such a record never joins a neighbouring user message."""
    return bool(
        meta.get("is_compact_summary") or meta.get("is_meta") or meta.get("is_visible_in_transcript_only")
    )


def _joined(held: Message, item: Message) -> Message:
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


#: How Claude Code's note that the user interrupted a turn begins ("... for tool use]" after a call).
_INTERRUPTED = "[Request interrupted by user"


def _interruption(message: Message) -> bool:
    """Whether ``message`` is only the client's note that the user interrupted the turn."""
    return bool(message.blocks) and all(
        isinstance(b, TextBlock) and b.text.startswith(_INTERRUPTED) for b in message.blocks
    )


def _resumed_chain(
    nodes: Mapping[str, _Node], start: _Node, results: Container[int]
) -> tuple[set[int], _Node | None] | None:
    """The records Claude Code resumes when ``start`` is the last main-chain row, and the record the
    chain starts at; None when the chain breaks at a link to a record the file lacks (another tool
    cut it: nothing can be said about branches then).

    As the client does: from the row up to its nearest user or assistant record (the leaf), then up the
    ``parentUuid`` links to the root (a compact_boundary has none); the leaf's non-message descendants
    (hook notes after it); every record of a response on the chain (parts share ``message.id``) and the
    tool results hanging off any of them (parallel calls answer each part separately).
    """
    leaf: _Node | None = start
    seen: set[str] = set()
    while leaf is not None and leaf.kind not in _CONVERSATIONAL and leaf.uuid not in seen:
        seen.add(leaf.uuid)
        leaf = nodes.get(leaf.parent) if leaf.parent else None
    if leaf is None or leaf.kind not in _CONVERSATIONAL:
        return None
    chain: list[_Node] = []
    seen = set()
    node: _Node | None = leaf
    root = leaf
    while node is not None and node.uuid not in seen:
        seen.add(node.uuid)
        chain.append(node)
        root = node
        if node.parent is None:
            break
        node = nodes.get(node.parent)
        if node is None:
            return None
    live = {n.record for n in chain}
    children: dict[str, list[_Node]] = {}  # non-message children, and tool results, by parent
    responses: set[str] = {n.message_id for n in chain if n.message_id}
    parts: list[str] = []
    for n in nodes.values():
        if n.parent is not None and (n.kind not in _CONVERSATIONAL or n.record in results):
            children.setdefault(n.parent, []).append(n)
        if n.message_id in responses and n.side == leaf.side:
            live.add(n.record)
            parts.append(n.uuid)
    for part in parts:
        live.update(c.record for c in children.get(part, ()) if c.record in results)
    queue = [leaf.uuid]
    while queue:
        for child in children.get(queue.pop(), ()):
            if child.record not in live and child.kind not in _CONVERSATIONAL:
                live.add(child.record)
                queue.append(child.uuid)
    return live, root


@dataclass
class _Open:
    """An assistant response whose records may not all have been read yet."""

    message_id: str
    indexes: list[int] = field(default_factory=list)
    raws: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    usage: Usage | None = None
    line: int = 0
    #: A later part of a response that was already yielded (past the state bounds).
    continuation: bool = False


class _Reader:
    """The streaming state of one ``read`` call."""

    def __init__(self) -> None:
        self.index = 0
        self.open: _Open | None = None
        # Items read while a response is open: messages (index not yet final) and boundaries.
        self.pending: list[Message | Boundary] = []
        # The last _RECENT_IDS closed response ids, oldest first: a dict, since every assistant record
        # asks whether its id is among them (a deque's scan of 256 ids took 7 us).
        self.closed_ids: dict[str, None] = {}
        self.tool_names: dict[str, str] = {}
        # Each chain of records is its own conversation: the main chain, and every sidechain run (a
        # subagent's own context, written inline by 1.0.x clients). Keys in order of first appearance.
        self.chain_of: dict[str, str] = {}  # sidechain record uuid -> its chain key (the run's root uuid)
        self.conv_numbers: dict[str, int] = {}
        self.record_conv: dict[int, int] = {}  # record index -> conversation, until its message is emitted
        self.last_side: str | None = None
        # The parentUuid tree, to find the chain the client resumes (see _resumed_chain).
        self.nodes: dict[str, _Node] = {}
        self.through: dict[str, str | None] = {}  # progress record uuid -> the parent it stands for
        self.last_row: dict[bool, str] = {}  # by sidechain flag: the last row in file order
        # Per emitted message with a uuid: its index, records, conversation and sidechain flag.
        self.emitted: list[tuple[int, tuple[int, ...], int, bool]] = []
        # A user message not yet emitted: the next user record on its chain joins it, as the client
        # sends consecutive user records as one message.
        self.held: Message | None = None
        self.last_response: dict[int, frozenset[str]] = {}  # conversation -> uuids of its last response
        self.result_records: set[int] = set()  # user records holding tool results
        self.linked = (
            False  # whether any message record names its parent (a log made by another tool may not)
        )

    # -------------------------------------------------------------------------------------- output

    def _emit(self, item: Message | Boundary) -> Iterator[Item]:
        if isinstance(item, Message) and item.role == "user":
            held = self.held
            if held is not None and self._joins(held, item):
                self.held = _joined(held, item)
                return
            yield from self.release()
            if not _own(item.meta):
                self.held = item
                return
        else:
            yield from self.release()
        yield from self._place(item)

    def release(self) -> Iterator[Item]:
        """Emit the held user message."""
        held, self.held = self.held, None
        if held is not None:
            yield from self._place(held)

    def _place(self, item: Message | Boundary) -> Iterator[Item]:
        if isinstance(item, Boundary):
            yield replace(item, index=self.index)
            return
        conv = self.record_conv.get(item.records[0], 0) if item.records else 0
        for i in item.records:
            self.record_conv.pop(i, None)
        msg = item.with_position(self.index, conv)
        self.index += 1
        if msg.meta.get("uuid") is not None:
            self.emitted.append((msg.index, msg.records, conv, msg.meta.get("is_sidechain") is True))
        if msg.role == "assistant":
            self.last_response[conv] = frozenset(msg.meta.get("uuids") or ())
        yield msg
        if msg.usage is not None:
            yield msg.usage

    def _joins(self, held: Message, item: Message) -> bool:
        """Whether user message ``item`` directly follows ``held`` on the same chain (so the client
        sends both as one message): it hangs off ``held``'s last record, or both answer the calls of
        the same response (parallel tool results hang off the response's parts)."""
        if _own(item.meta) or len(held.records) >= _MAX_OPEN_RECORDS:
            return False
        if _interruption(item):
            # The client's note that the user interrupted: kept apart, so a strategy may drop the
            # interrupted turn's results and keep the note (it costs a message's framing, no more).
            return False
        if not item.records or not held.records:
            return False
        conv = self.record_conv.get(held.records[0], 0)
        if self.record_conv.get(item.records[0], 0) != conv:
            return False
        parent = self._resolved(_str(item.meta.get("parent_uuid")))
        last = held.meta["uuids"][-1] if held.meta.get("uuids") else None
        if last is None and _str(item.meta.get("uuid")) is None:
            return True  # a log without uuids: file order is the chain
        if parent is not None and parent == last:
            return True
        response = self.last_response.get(conv, frozenset())
        return (
            parent is not None
            and parent in response
            and any(isinstance(b, ToolResultBlock) for b in item.blocks)
            and any(isinstance(b, ToolResultBlock) for b in held.blocks)
        )

    def _resolved(self, parent: str | None) -> str | None:
        """``parent`` as the client links it: progress records are skipped."""
        while parent is not None and parent in self.through:
            parent = self.through[parent]
        return parent

    def _note(self, i: int, line: int, data: Mapping[str, Any]) -> None:
        """Note record ``i`` in the parentUuid tree (once per record: kept cheap)."""
        get = data.get
        uuid = get("uuid")
        if not isinstance(uuid, str):
            return
        kind = get("type")
        parent = get("parentUuid")
        if not isinstance(parent, str):
            parent = None
        elif parent in self.through:
            parent = self._resolved(parent)
        if kind == "progress":
            self.through[uuid] = parent
            return
        if kind not in _ROWS:
            return
        side = get("isSidechain") is True
        message_id, compact, snapshot = None, False, False
        if kind == "assistant":
            message = get("message")
            message_id = _str(message.get("id")) if isinstance(message, dict) else None
        elif kind == "system":
            subtype = get("subtype")
            compact, snapshot = subtype == "compact_boundary", subtype == "file_snapshot"
        self.nodes[uuid] = _Node(i, line, uuid, parent, kind, side, message_id, compact)
        if parent is not None and kind in _CONVERSATIONAL:
            self.linked = True
        if not snapshot:
            self.last_row[side] = uuid

    def branches(self) -> Iterator[Item]:
        """The ``branches`` item: the messages of the resumed thread on no chain the client resumes
        (after the chain's compact_boundary, if it starts at one: before it is history)."""
        side = False not in self.last_row  # a subagent's own log: its sidechain is its thread
        start = self.nodes.get(self.last_row.get(side, ""))
        if start is None or not self.linked:
            return  # no tree: file order is all there is
        found = _resumed_chain(self.nodes, start, self.result_records)
        if found is None:
            return
        live, root = found
        after = root.record if root is not None and root.compact else -1
        off = [
            (index, conv)
            for index, records, conv, is_side in self.emitted
            if is_side == side and records[0] > after and not any(i in live for i in records)
        ]
        if off:
            yield Boundary(
                kind=BRANCHES,
                line=start.line,
                index=self.index,
                conversation=off[0][1],
                abandoned=tuple(index for index, _ in off),
            )

    def _queue(self, item: Message | Boundary) -> Iterator[Item]:
        if self.open is None:
            yield from self._emit(item)
            return
        self.pending.append(item)
        if len(self.pending) >= _MAX_PENDING:
            yield from self.flush()

    def flush(self) -> Iterator[Item]:
        """Close the open response: yield it, then everything that was read while it was open."""
        op, self.open = self.open, None
        if op is not None:
            yield from self._emit(self._merged(op))
            closed = self.closed_ids
            closed.pop(op.message_id, None)  # re-closed: now the newest
            closed[op.message_id] = None
            if len(closed) > _RECENT_IDS:
                del closed[next(iter(closed))]
        pending, self.pending = self.pending, []
        for item in pending:
            yield from self._emit(item)

    def _merged(self, op: _Open) -> Message:
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
        return Message(
            role="assistant",
            blocks=tuple(op.blocks),
            line=op.line,
            records=tuple(op.indexes),
            importance=next((i for i in map(_importance, op.raws) if i), None),
            usage=op.usage,
            meta=meta,
            raw=op.raws[0] if len(op.raws) == 1 else tuple(op.raws),
        )

    # --------------------------------------------------------------------------------------- input

    def _remember_tools(self, blocks: Iterable[Block]) -> None:
        for b in blocks:
            if isinstance(b, ToolUseBlock):
                if len(self.tool_names) >= _MAX_TOOL_NAMES:
                    del self.tool_names[next(iter(self.tool_names))]
                self.tool_names[b.id] = b.name

    def _name_results(self, blocks: tuple[Block, ...]) -> tuple[Block, ...]:
        if not any(isinstance(b, ToolResultBlock) for b in blocks):
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
        synthetic = message.get("model") == _SYNTHETIC_MODEL
        usage = None if synthetic else _usage(message, rec.line)
        mid = _str(message.get("id"))
        op = self.open
        same = op is not None and mid is not None and op.message_id == mid
        if op is not None and same and len(op.indexes) < _MAX_OPEN_RECORDS:
            op.indexes.append(i)
            op.raws.append(data)
            op.blocks.extend(blocks)
            op.usage = _max_usage(op.usage, usage)
            return
        yield from self.flush()
        continuation = mid is not None and mid in self.closed_ids
        if continuation:
            # A late part of a response already yielded (only past the state bounds, or when another
            # response was written in between): its own message, with the usage not counted again.
            usage = None
        if mid is None:
            meta = _meta(data, message, isinstance(message.get("content"), str))
            yield from self._emit(
                Message(
                    role="assistant",
                    blocks=blocks,
                    line=rec.line,
                    records=(i,),
                    importance=_importance(data),
                    usage=usage,
                    meta=meta,
                    raw=data,
                )
            )
            return
        self.open = _Open(
            message_id=mid,
            indexes=[i],
            raws=[data],
            blocks=list(blocks),
            usage=usage,
            line=rec.line,
            continuation=continuation,
        )

    def user(self, i: int, rec: Record, data: dict[str, Any], message: dict[str, Any]) -> Iterator[Item]:
        content = message.get("content")
        blocks = self._name_results(parse_anthropic_content(content))
        if any(isinstance(b, ToolResultBlock) for b in blocks):
            self.result_records.add(i)
        self._remember_tools(blocks)
        yield from self._queue(
            Message(
                role="user",
                blocks=blocks,
                line=rec.line,
                records=(i,),
                importance=_importance(data),
                meta=_meta(data, message, isinstance(content, str)),
                raw=data,
            )
        )

    def system(self, i: int, rec: Record, data: dict[str, Any]) -> Iterator[Item]:
        subtype = _str(data.get("subtype"))
        if subtype in _BOUNDARIES:
            md = data.get(_BOUNDARIES[subtype])
            md = md if isinstance(md, dict) else {}
            pre = md.get("preTokens")
            yield from self._queue(
                Boundary(
                    kind=subtype,
                    line=rec.line,
                    trigger=_str(md.get("trigger")),
                    pre_tokens=pre if isinstance(pre, int) and not isinstance(pre, bool) else None,
                    # Claude Code resumes from its newest compact_boundary; a microcompaction only
                    # cleared old tool results in place.
                    resets=subtype == "compact_boundary",
                    conversation=self.record_conv.pop(i, 0),
                )
            )
            return
        content = data.get("content")
        blocks: tuple[Block, ...] = (TextBlock(text=content),) if isinstance(content, str) else ()
        yield from self._queue(
            Message(
                role="system",
                blocks=blocks,
                line=rec.line,
                records=(i,),
                importance=_importance(data),
                meta=_meta(data, {}, isinstance(content, str)),
                raw=data,
            )
        )

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
                self._note(i, rec.line, data)
            rtype = data.get("type")
            message = data.get("message")
            if rtype == "assistant" and isinstance(message, dict):
                yield from self.assistant(i, rec, data, message)
            elif rtype == "user" and isinstance(message, dict):
                yield from self.user(i, rec, data, message)
            elif rtype == "system":
                yield from self.system(i, rec, data)
        yield from self.flush()
        yield from self.release()
        yield from self.branches()


class ClaudeCodeAdapter:
    name = "claude-code"
    tool_role = False
    usage_before_response = False
    suffixes: tuple[str, ...] = (".jsonl",)
    usage_needles: tuple[bytes, ...] = (b'"usage"', b'compact_boundary"')
    rewrites_carried = False
    summary_resets = True  # ctxc writes its summary as a compact_boundary
    description = "Claude Code session log (~/.claude/projects/*/<session>.jsonl, subagent files)"

    def sniff(self, sample: Sequence[Record]) -> int:
        records = [r.data for r in sample if isinstance(r.data, dict)]
        if not records:
            return 0
        hits = sum(1 for d in records if d.get("type") in _TYPES and any(k in d for k in _MARKERS))
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

    def encode_message(self, message: Message) -> dict[str, Any]:
        """One record for ``message``.

        * Read from one record: that record with its content rebuilt from the blocks (equal to ``raw``
          when nothing changed). ``toolUseResult`` and every other envelope field are kept as they were.
        * Merged from several records: ONE record holding all blocks, with the first record's envelope
          (``parentUuid``, timestamp) but the last record's ``uuid`` and ``message`` fields
          (``stop_reason``, final usage), so records that pointed at the last part still find it.
        * New (``raw`` None): see :meth:`_new`.
        """
        raw = message.raw
        if isinstance(raw, tuple) and raw and all(isinstance(r, dict) for r in raw):
            first, last = raw[0], raw[-1]
            msg = dict(last.get("message") or {})
            msg["content"] = _encode_content(message.blocks, [], as_string=False)
            out = {**first, "message": msg}
            if "uuid" in last:
                out["uuid"] = last["uuid"]
            return out
        if isinstance(raw, dict):
            if raw.get("type") == "system" or "message" not in raw:
                out = dict(raw)
                if message.blocks or isinstance(raw.get("content"), str):
                    out["content"] = _plain_text(message.blocks)
                return out
            msg = dict(raw["message"]) if isinstance(raw["message"], dict) else {}
            content = msg.get("content")
            if message.blocks or "content" in msg:  # a message without content stays without
                msg["content"] = _encode_content(message.blocks, content, as_string=isinstance(content, str))
            return {**raw, "message": msg}
        return self._new(message)

    def _new(self, message: Message) -> dict[str, Any]:
        """A record for a message ctxc made (a compaction summary, say).

        ``uuid`` is derived from the content and index (reproducible output, no randomness) unless meta
        gives one; ``parentUuid``, ``isSidechain``, ``sessionId`` and ``timestamp`` come from meta when
        present (so a caller can splice the record into a chain), else null/false/absent. A ``tool``
        message becomes a ``user`` record (Claude Code carries tool results in user records). A
        ``system`` message becomes a ``system`` record with ``subtype`` from meta or ``informational``.
        An assistant record gets ``model`` from meta, else ``"ctxc"`` (not ``"<synthetic>"``, which
        the client reserves for its own turns), and ``usage`` only when the message has one.
        """
        meta = message.meta
        role: Role = message.role
        rtype = "user" if role == "tool" else role
        content: Any
        if role == "system":
            content = _plain_text(message.blocks)
        else:
            content = _encode_content(message.blocks, None, as_string=role != "assistant")
        digest = hashlib.sha256(f"{message.index}\0{rtype}\0{dumps_compact(content)}".encode()).hexdigest()
        out: dict[str, Any] = {
            "parentUuid": _str(meta.get("parent_uuid")),
            "isSidechain": meta.get("is_sidechain") is True,
            "userType": "external",
        }
        for key, field_name in (("session_id", "sessionId"), ("agent_id", "agentId")):
            if isinstance(meta.get(key), str):
                out[field_name] = meta[key]
        out["type"] = rtype
        if role == "system":
            out["subtype"] = _str(meta.get("subtype")) or "informational"
            out["content"] = content
            out["isMeta"] = meta.get("is_meta") is True
            out["level"] = "info"
        elif role == "assistant":
            msg: dict[str, Any] = {
                "id": _str(meta.get("message_id")) or f"msg_ctxc_{digest[:24]}",
                "type": "message",
                "role": "assistant",
                "model": _str(meta.get("model")) or "ctxc",
                "content": content,
                "stop_reason": _str(meta.get("stop_reason")) or "end_turn",
                "stop_sequence": None,
            }
            if message.usage is not None:
                msg["usage"] = {
                    "input_tokens": message.usage.input,
                    "output_tokens": message.usage.output,
                    "cache_creation_input_tokens": message.usage.cache_write,
                    "cache_read_input_tokens": message.usage.cache_read,
                }
            out["message"] = msg
        else:
            out["message"] = {"role": "user", "content": content}
            for key, field_name in (
                ("is_meta", "isMeta"),
                ("is_compact_summary", "isCompactSummary"),
                ("is_visible_in_transcript_only", "isVisibleInTranscriptOnly"),
            ):
                if meta.get(key) is True:
                    out[field_name] = True
        out["uuid"] = _str(meta.get("uuid")) or str(uuidlib.uuid5(_NAMESPACE, digest))
        if isinstance(meta.get("timestamp"), str):
            out["timestamp"] = meta["timestamp"]
        return out

    def write_compacted(
        self, transcript: Transcript, outputs: Mapping[int, Sequence[Message]], *, archive_id: str
    ) -> tuple[Record, ...]:
        """The compacted log, recorded the way Claude Code records its own compaction.

        See :class:`_CompactWriter` for what is kept, dropped, re-linked and written.
        """
        return _CompactWriter(self, transcript, outputs, archive_id).write()


#: Envelope fields a record ctxc writes copies from a neighbouring record, in Claude Code's key order,
#: so it belongs to the same session, directory and branch (claude-code-log requires cwd and version).
_ENVELOPE = ("userType", "cwd", "sessionId", "version", "gitBranch", "slug", "agentId", "teamName")
_BOM = b"\xef\xbb\xbf"
_PARENT_KEY = b'{"parentUuid":'
#: Fields of non-message records that name another record; a name that was merged away is updated.
_REFERENCES = ("sourceToolAssistantUUID", "leafUuid", "messageId")
_BOUNDARY_CONTENT = "Conversation compacted"
#: Tools that start a subagent; their ``prompt`` input is the first message of the subagent's run.
_SUBAGENT_TOOLS = frozenset({"Task", "Agent"})

#: Sort key of an output record: (file position, 0 for a source record / 1 for a new one, sequence).
_Key = tuple[float, int, int]
#: A thread of the output: the log's own (``_MAIN``), or an inline subagent run (its conversation).
_Thread = int
_MAIN: _Thread = -1


@dataclass
class _Out:
    """One output record: a source record (its bytes, or ``data`` when re-encoded) or a new one."""

    key: _Key
    index: int | None  # the source record, None for a record ctxc made
    data: dict[str, Any] | None = None  # None: the source record's bytes as they are
    boundary: bool = False


@dataclass
class _New:
    """Where a new message's records go and what they hang off (resolved once every uuid is known)."""

    key: _Key
    uuid: str
    after: str | None  # the uuid of the message before it in the output, if any
    replaced_parent: str | None  # else: what the first record it replaces hung off


def _tool_results(data: Mapping[str, Any]) -> list[Any]:
    message = data.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def _replaces(message: Message) -> tuple[int, int] | None:
    span = message.meta.get("replaces")
    if isinstance(span, tuple | list) and len(span) == 2 and all(isinstance(x, int) for x in span):
        return int(span[0]), int(span[1])
    return None


class _CompactWriter:
    """Writes compacted conversations back as a Claude Code log.

    * A summary (``meta["ctxc"] == "summary"``) is written the way Claude Code records ``/compact``: a
      ``system``/``compact_boundary`` record (``parentUuid`` null, ``logicalParentUuid`` the last record
      before it, ``compactMetadata`` with trigger ``manual`` and ``preTokens``) followed by a ``user``
      record with ``isCompactSummary`` and ``isVisibleInTranscriptOnly`` carrying the summary text.
      Kept records that hung off the span it replaced hang off the summary record.
    * Claude Code resumes a session from its last boundary. Messages a strategy keeps *before* the
      summary (system messages, the pinned first request) stay before the boundary in file order:
      readers of the log see them, a resumed session does not, which is why the summary's "Session
      intent" section restates the first request.
    * Kept records keep their exact bytes unless their ``parentUuid`` had to change. A message whose
      parent record was dropped is re-linked to the record written just before it in the output's
      order (in its thread): the summary or placeholder that replaced the parent, or the nearest
      kept message before it, so the chain Claude Code's resume walks back from the last record
      follows the compacted conversation through the summary to the boundary. Other records whose
      parent was dropped go to their nearest kept ancestor (or to what replaced it). No dangling
      link is made; links that already pointed outside the file (excerpted logs) stay as they were.
    * A changed message is re-encoded record by record when its blocks still split over its records
      (unchanged parts keep their bytes), else as one record that takes over the other parts' uuids.
      When a tool result changed, the record's ``toolUseResult`` (the client's copy of the full output,
      often larger) becomes a short note with the archive citation.
    * Other new messages (placeholders, repair results, ``tool`` messages) are encoded with
      ``encode_message`` and chained to the message before them.
    * Inline sidechain records (subagent runs in 1.0.x logs) go with the span they belong to: a run
      whose ``Task`` call was dropped is dropped too (it stays in the archive), with every new message
      of that run or answering its calls. A run whose call is kept is its own thread: its new messages
      (a summary of the run is an ordinary message there, not a compaction) are sidechain records
      chained inside the run, so nothing of a run is ever linked into the log's own chain, and the
      newest main-chain record, where Claude Code resumes, is always the log's own thread.
    * Non-message records: ``progress`` and others in the uuid chain go with their nearest message
      ancestor (a root goes with the message after it); snapshots and titles whose ``messageId`` or
      ``leafUuid`` names a dropped record are dropped; everything else stays in place.
    """

    def __init__(
        self,
        adapter: ClaudeCodeAdapter,
        transcript: Transcript,
        outputs: Mapping[int, Sequence[Message]],
        archive_id: str,
    ) -> None:
        self.adapter = adapter
        self.transcript = transcript
        self.archive_id = archive_id
        self.records = transcript.records
        convs = sorted({m.conversation for m in transcript.messages} | set(outputs))
        self.out_msgs: list[Message] = [
            m for c in convs for m in (outputs[c] if c in outputs else transcript.conversation(c))
        ]
        self.datas: list[dict[str, Any] | None] = [_dict(r.data) for r in self.records]
        self.uuid_at: list[str | None] = [_str(d.get("uuid")) if d else None for d in self.datas]
        self.index_of: dict[str, int] = {}
        for i, u in enumerate(self.uuid_at):
            if u is not None:
                self.index_of.setdefault(u, i)
        self.owner: dict[int, Message] = {i: m for m in transcript.messages for i in m.records}
        self.message_records = sorted(self.owner)
        self.by_index: dict[tuple[int, int], Message] = {
            (m.conversation, m.index): m for m in transcript.messages
        }
        self.originals = {id(m) for m in transcript.messages}
        # Records of messages on branches the client abandoned: written as they are, linked to nothing new.
        gone = abandoned_messages(transcript.boundaries)
        self.abandoned: frozenset[int] = frozenset(
            i for m in transcript.messages if m.index in gone for i in m.records
        )
        # Conversations that are inline subagent runs: sidechain chains in a log that has a main chain.
        has_main = any(not m.meta.get("is_sidechain") for m in transcript.messages)
        self.inline_runs: dict[int, bool] = {
            m.conversation: has_main and bool(m.meta.get("is_sidechain")) for m in transcript.messages
        }
        self.eol = next((r.eol for r in self.records if r.eol), b"\n")
        first = self.datas[self.message_records[0]] if self.message_records else None
        #: Whether the log's own thread is a sidechain (a 2.x subagent file): then nothing is "inline".
        self.main_side = bool(first and first.get("isSidechain") is True)
        self.dropped: set[int] = set()
        self.out_uuids: set[str] = set()
        self.absorbed: dict[str, str] = {}  # uuid of a part merged into another record -> that record's
        self.replacement: dict[int, tuple[_Key, str]] = {}  # dropped record -> the new record standing in
        self.ancestor_memo: dict[int, int | None] = {}
        #: First record of a kept message -> the last uuid written before it in its thread.
        self.prev_of: dict[int, str | None] = {}

    # ------------------------------------------------------------------------------------ helpers

    def _side(self, i: int) -> bool:
        d = self.datas[i]
        return not self.main_side and d is not None and d.get("isSidechain") is True

    def _parent_index(self, i: int) -> int | None:
        d = self.datas[i]
        p = _str(d.get("parentUuid")) if d else None
        return self.index_of.get(p) if p is not None else None

    def _message_ancestor(self, i: int) -> int | None:
        """The nearest message record up ``i``'s parent chain, through non-message records."""
        if i in self.ancestor_memo:
            return self.ancestor_memo[i]
        seen = {i}
        path: list[int] = []
        j = self._parent_index(i)
        found: int | None = None
        while j is not None and j not in seen:
            if j in self.owner:
                found = j
                break
            if j in self.ancestor_memo:
                found = self.ancestor_memo[j]
                break
            seen.add(j)
            path.append(j)
            j = self._parent_index(j)
        for k in (i, *path):
            self.ancestor_memo[k] = found
        return found

    def _neighbours(self, i: int, pool: Sequence[int]) -> tuple[int | None, int | None]:
        at = bisect.bisect_left(pool, i)
        before = pool[at - 1] if at > 0 else None
        after_at = at + 1 if at < len(pool) and pool[at] == i else at
        after = pool[after_at] if after_at < len(pool) else None
        return before, after

    def _new_uuid(self, seq: int, kind: str, text: str) -> str:
        digest = hashlib.sha256(f"{self.archive_id}\0{seq}\0{kind}\0{text}".encode()).hexdigest()
        return str(uuidlib.uuid5(_NAMESPACE, digest))

    # ----------------------------------------------------------------------------- what is dropped

    def _drop_inline_sidechains(self) -> None:
        """Drop the inline subagent runs whose ``Task`` call was dropped: every record of the run, and
        every new message of it (a summary or placeholder of a run whose call is gone stands for nothing).

        A run starts with its call's prompt (1.0.x logs link a run to its call only by that prompt); a
        run that starts mid-way (an excerpt) goes when the record it hangs off was dropped. A run whose
        call is kept stays, compacted or not, as sidechain records of its own chain.
        """
        if self.main_side:
            return
        prompts = {
            b.input["prompt"]
            for m in self.transcript.messages
            if m.records and all(i in self.dropped for i in m.records)
            for b in m.blocks
            if isinstance(b, ToolUseBlock)
            and b.name in _SUBAGENT_TOOLS
            and isinstance(b.input, dict)
            and isinstance(b.input.get("prompt"), str)
        }
        gone: set[int] = set()
        for conv, inline in self.inline_runs.items():
            run = self.transcript.conversation(conv)
            if not inline or not run or not run[0].records:
                continue
            first = run[0].records[0]
            if _str((self.datas[first] or {}).get("parentUuid")) is None:
                belongs = run[0].text in prompts
            else:
                anc = self._message_ancestor(first)
                belongs = anc is not None and anc in self.dropped
            if belongs:
                gone.add(conv)
                self.dropped.update(i for m in run for i in m.records)
        if not gone:
            return
        calls = {
            b.id
            for c in gone
            for m in self.transcript.conversation(c)
            for b in m.blocks
            if isinstance(b, ToolUseBlock)
        }
        self.out_msgs = [
            m
            for m in self.out_msgs
            if m.conversation not in gone
            and not (
                not m.records
                and any(isinstance(b, ToolResultBlock) and b.tool_use_id in calls for b in m.blocks)
            )
        ]

    def _drops_record(self, i: int, d: Mapping[str, Any]) -> bool:
        """Whether a non-message record goes with a dropped span."""
        for ref in ("messageId", "leafUuid"):
            target = self.index_of.get(_str(d.get(ref)) or "")
            if target is not None and target in self.dropped:
                return True
        if _str(d.get("uuid")) is None or "parentUuid" not in d:
            return False  # not in the uuid chain: stays in place
        anc = self._message_ancestor(i)
        if anc is not None:
            return anc in self.dropped
        before, after = self._neighbours(i, self.message_records)
        ref_msg = after if after is not None else before
        return ref_msg is not None and ref_msg in self.dropped

    # ------------------------------------------------------------------------------------ encoding

    def _encode_changed(self, m: Message) -> list[tuple[int, dict[str, Any] | None]]:
        """(record index, new JSON or None to keep the bytes) for a message a strategy changed."""
        datas = [self.datas[i] or {} for i in m.records]
        raw = m.raw if m.raw is not None else (datas[0] if len(datas) == 1 else tuple(datas))
        if isinstance(raw, dict) and len(m.records) == 1:
            parts: list[tuple[int, dict[str, Any], tuple[Block, ...]]] = [(m.records[0], raw, m.blocks)]
        elif isinstance(raw, tuple) and len(raw) == len(m.records) and all(isinstance(r, dict) for r in raw):
            sizes = [_content_len(r) for r in raw]
            if any(n is None for n in sizes) or sum(n or 0 for n in sizes) != len(m.blocks):
                merged = self.adapter.encode_message(replace(m, raw=raw))
                keeper = _str(merged.get("uuid"))
                for r in raw:
                    u = _str(r.get("uuid"))
                    if u is not None and keeper is not None and u != keeper:
                        self.absorbed[u] = keeper
                return [(m.records[0], self._noted(merged, raw[0], m))]
            parts, at = [], 0
            for i, r, n in zip(m.records, raw, sizes, strict=True):
                parts.append((i, r, m.blocks[at : at + (n or 0)]))
                at += n or 0
        else:
            return [(i, None) for i in m.records]
        out: list[tuple[int, dict[str, Any] | None]] = []
        for i, part, blocks in parts:
            enc = self.adapter.encode_message(replace(m, blocks=blocks, raw=part, records=(i,)))
            if enc == self.datas[i]:
                out.append((i, None))
                continue
            out.append((i, self._noted(enc, part, m)))
        return out

    def _noted(self, enc: dict[str, Any], part: Mapping[str, Any], m: Message) -> dict[str, Any]:
        """``enc`` with its ``toolUseResult`` made a note when its tool results changed: the client's copy
        of the full output would undo the compaction (and is often larger)."""
        if "toolUseResult" in enc and _tool_results(enc) != _tool_results(part):
            # (Imported here: reading a log must not load the archive and its file-writing modules.)
            from ctxc.archive_store import citation

            note = citation(self.archive_id, m.index)
            enc["toolUseResult"] = f"[ctxc] tool output compacted; the full output is in {note}"
        return enc

    def _envelope(
        self, body: dict[str, Any], template: Mapping[str, Any], *, boundary: bool = False
    ) -> dict[str, Any]:
        """``body`` with the template's session envelope, in the key order Claude Code writes."""
        out: dict[str, Any] = {"parentUuid": body.get("parentUuid")}
        if boundary:
            out["logicalParentUuid"] = None
        out["isSidechain"] = template.get("isSidechain") is True
        for key in _ENVELOPE:
            if key in template:
                out[key] = template[key]
        for key, value in body.items():
            if key not in out:
                out[key] = value
        return out

    def _template(self, pos: int, thread: _Thread) -> dict[str, Any]:
        """The record a new message at output position ``pos`` takes its envelope from: one of its own
        thread (so a message of an inline subagent run is written as a sidechain record of that run)."""
        order = [*range(pos - 1, -1, -1), *range(pos + 1, len(self.out_msgs))]
        candidates: Iterable[int] = (i for k in order for i in reversed(self.out_msgs[k].records))
        if thread != _MAIN:  # also the run's records the strategy dropped
            candidates = itertools.chain(
                candidates, (i for m in self.transcript.conversation(thread) for i in m.records)
            )
        for i in candidates:
            found: dict[str, Any] | None = self.datas[i]
            if found is not None and "sessionId" in found and self._thread_of(i) == thread:
                return found
        for data in self.datas:
            if data is not None and "sessionId" in data:
                return data
        return {}

    def _thread_of(self, i: int) -> _Thread:
        """The thread record ``i`` belongs to: the log's own, or the inline run (conversation) it is in."""
        if not self._side(i):
            return _MAIN
        owner = self.owner.get(i)
        return owner.conversation if owner is not None else _MAIN

    def _pre_tokens(self, m: Message, span: tuple[int, int] | None) -> int | None:
        for key in ("pre_tokens", "tokens_before"):
            value = m.meta.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        if span is None:
            return None
        # What the window held when the replaced span ended: the last recorded call within it.
        best: Usage | None = None
        for orig in self.transcript.messages:
            if orig.conversation == m.conversation and orig.index <= span[1] and orig.usage is not None:
                best = orig.usage
        return best.context if best is not None else None

    # --------------------------------------------------------------------------------------- write

    def write(self) -> tuple[Record, ...]:
        kept = {i for m in self.out_msgs for i in m.records}
        self.dropped = {i for i in self.owner if i not in kept}
        self._drop_inline_sidechains()
        outs: list[_Out] = []
        for i, d in enumerate(self.datas):
            if i in self.owner or (d is not None and self._drops_record(i, d)):
                continue
            outs.append(_Out((i, 0, 0), i))
            if self.uuid_at[i] is not None:
                self.out_uuids.add(self.uuid_at[i] or "")
        news = self._layout(outs)
        return self._finish(outs, news)

    def _layout(self, outs: list[_Out]) -> dict[int, _New]:
        """Place every output message's records; returns the new records' placement by id(_Out)."""
        news: dict[int, _New] = {}
        # Per thread (the log's own, each inline subagent run), in output order: the last uuid written
        # and the furthest source record placed (new records go after it, never before their thread).
        tails: dict[_Thread, str | None] = {}
        prev_max: dict[_Thread, float] = {}
        seq = 0
        for pos, m in enumerate(self.out_msgs):
            if m.records and m.records[0] in self.abandoned:
                outs.extend(_Out((i, 0, 0), i) for i in m.records)
                self.out_uuids.update(u for i in m.records if (u := self.uuid_at[i]) is not None)
                continue  # on no chain the client resumes: nothing is linked to it or after it
            if m.records:
                thread = self._thread_of(m.records[0])
                self.prev_of[m.records[0]] = tails.get(thread)
                encoded = (
                    [(i, None) for i in m.records] if id(m) in self.originals else self._encode_changed(m)
                )
                for i, data in encoded:
                    outs.append(_Out((i, 0, 0), i, data))
                    u = _str(data.get("uuid")) if data is not None else self.uuid_at[i]
                    if u is not None:
                        self.out_uuids.add(u)
                        tails[thread] = u
                prev_max[thread] = max(prev_max.get(thread, -1.0), float(max(m.records)))
                continue
            span = _replaces(m)
            replaced = [
                r
                for k in (range(span[0], span[1] + 1) if span else ())
                if (orig := self.by_index.get((m.conversation, k))) is not None
                for r in orig.records
                if r in self.dropped
            ]
            inline_run = self.inline_runs.get(m.conversation, False)
            # A summary of the log's own thread is a compaction (boundary + summary record); inside an
            # inline subagent run it is an ordinary message of that run, which must stay one chain.
            summary = m.meta.get("ctxc") == "summary" and not inline_run
            thread = m.conversation if inline_run else _MAIN
            anchor = prev_max.get(thread, -1.0)
            if replaced:
                anchor = max(anchor, min(replaced) - 0.5)
            if anchor < 0:
                later = next((n.records[0] for n in self.out_msgs[pos + 1 :] if n.records), len(self.records))
                anchor = later - 0.5
            prev_max[thread] = max(prev_max.get(thread, -1.0), anchor)  # what follows is written after it
            template = self._template(pos, thread)
            last_replaced = self.datas[max(replaced)] if replaced else None
            stamp = _str((last_replaced or {}).get("timestamp")) or _str(template.get("timestamp"))
            after = tails.get(thread)
            replaced_parent = (
                _str((self.datas[min(replaced)] or {}).get("parentUuid"))
                if replaced and after is None
                else None
            )
            if summary:
                text = "\n\n".join(b.text for b in m.blocks if isinstance(b, TextBlock)) or m.text
                b_uuid = self._new_uuid(seq, "compact_boundary", text)
                s_uuid = self._new_uuid(seq + 1, "summary", text)
                metadata: dict[str, Any] = {"trigger": _str(m.meta.get("trigger")) or "manual"}
                pre = self._pre_tokens(m, span)
                if pre is not None:
                    metadata["preTokens"] = pre
                boundary = {
                    "parentUuid": None,
                    "type": "system",
                    "subtype": "compact_boundary",
                    "content": _BOUNDARY_CONTENT,
                    "isMeta": False,
                    "timestamp": stamp,
                    "uuid": b_uuid,
                    "level": "info",
                    "compactMetadata": metadata,
                }
                summary_rec = {
                    "parentUuid": b_uuid,
                    "type": "user",
                    "message": {"role": "user", "content": text},
                    "isVisibleInTranscriptOnly": True,
                    "isCompactSummary": True,
                    "uuid": s_uuid,
                    "timestamp": stamp,
                }
                b_out = _Out(
                    (anchor, 1, seq), None, self._envelope(boundary, template, boundary=True), boundary=True
                )
                s_out = _Out((anchor, 1, seq + 1), None, self._envelope(summary_rec, template))
                outs.extend((b_out, s_out))
                self.out_uuids.update((b_uuid, s_uuid))
                key, new_uuid = s_out.key, s_uuid
                seq += 2
            else:
                new_uuid = self._new_uuid(seq, m.role, m.text)
                meta = {
                    **m.meta,
                    "uuid": new_uuid,
                    "parent_uuid": None,
                    "is_sidechain": template.get("isSidechain") is True,
                    "timestamp": stamp,
                }
                body = self.adapter.encode_message(replace(m, meta=meta))
                n_out = _Out((anchor, 1, seq), None, self._envelope(body, template))
                outs.append(n_out)
                news[id(n_out)] = _New(n_out.key, new_uuid, after, replaced_parent)
                self.out_uuids.add(new_uuid)
                key = n_out.key
                seq += 1
            for r in replaced:
                self.replacement.setdefault(r, (key, new_uuid))
            tails[thread] = new_uuid
        return news

    def _relink(self, parent: str | None, key: _Key) -> str | None:
        """The nearest ancestor of a dropped ``parent`` that is in the output, or what replaced it."""
        seen: set[str] = set()
        p = parent
        while p is not None:
            if p in self.out_uuids:
                return p
            if p in self.absorbed:
                return self.absorbed[p]
            j = self.index_of.get(p)
            if j is None or p in seen:
                return None  # the chain leaves the file: this record becomes a root
            seen.add(p)
            stand_in = self.replacement.get(j)
            if stand_in is not None and stand_in[0] < key:
                return stand_in[1]
            d = self.datas[j]
            p = _str(d.get("parentUuid")) if d else None
        return None

    def _changes(
        self, o: _Out, data: Mapping[str, Any], new: _New | None, last: str | None
    ) -> dict[str, Any]:
        """The top-level fields of an output record that must change (links only)."""
        changes: dict[str, Any] = {}
        if o.index in self.abandoned:
            return changes  # an abandoned branch stays byte for byte, like the history
        if o.boundary:
            changes["logicalParentUuid"] = last
        elif new is not None:
            changes["parentUuid"] = new.after or self._relink(new.replaced_parent, new.key)
        else:
            parent = data.get("parentUuid")
            if isinstance(parent, str) and parent not in self.out_uuids:
                if parent in self.absorbed:
                    changes["parentUuid"] = self.absorbed[parent]
                elif parent in self.index_of:  # dropped (a link that already left the file stays)
                    after = self.prev_of.get(o.index) if o.index is not None else None
                    changes["parentUuid"] = after or self._relink(parent, o.key)
        if self.absorbed:
            for ref in _REFERENCES:
                target = data.get(ref)
                if isinstance(target, str) and target in self.absorbed:
                    changes[ref] = self.absorbed[target]
        return {k: v for k, v in changes.items() if data.get(k, ...) != v}

    def _finish(self, outs: list[_Out], news: dict[int, _New]) -> tuple[Record, ...]:
        outs.sort(key=lambda o: o.key)
        result: list[Record] = []
        last_by_side: dict[bool, str] = {}
        for o in outs:
            rec = self.records[o.index] if o.index is not None else None
            data = o.data if o.data is not None else (self.datas[o.index] if o.index is not None else None)
            if data is None:
                assert rec is not None
                result.append(rec)
                continue
            side = data.get("isSidechain") is True
            changes = self._changes(o, data, news.get(id(o)), last_by_side.get(side))
            if rec is not None and o.data is None:
                result.append(_patch(rec, data, {**data, **changes}) if changes else rec)
            else:
                patched = {**data, **changes}
                eol = rec.eol if rec is not None and rec.eol else self.eol
                line = rec.line if rec is not None else 0
                result.append(
                    Record(line=line, raw=orjson.dumps(patched), eol=eol, data=patched, kind="message")
                )
            u = _str(data.get("uuid"))
            if u is not None:
                last_by_side[side] = u
        return _fix_eols(result, self.records, self.eol)


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _content_len(record: Mapping[str, Any]) -> int | None:
    """How many blocks the reader made of a record's content (a string is one text block)."""
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return 1
    return len(content) if isinstance(content, list) else None


def _patch(rec: Record, old: Mapping[str, Any], new: dict[str, Any]) -> Record:
    """``rec`` with changed top-level fields, touching only the ``parentUuid`` bytes when that is all."""
    bom = _BOM if rec.raw.startswith(_BOM) else b""
    body = rec.raw[len(bom) :]
    changed = [k for k in new if old.get(k, ...) != new[k]]
    prefix = _PARENT_KEY + orjson.dumps(old.get("parentUuid"))
    if changed == ["parentUuid"] and body.startswith(prefix):
        body = _PARENT_KEY + orjson.dumps(new["parentUuid"]) + body[len(prefix) :]
    else:
        body = orjson.dumps(new)
    return Record(rec.line, bom + body, rec.eol, new, rec.kind)


def _fix_eols(out: list[Record], source: Sequence[Record], eol: bytes) -> tuple[Record, ...]:
    """Every line but the last ends with a newline; the last ends as the input's last line did."""
    if not out:
        return ()
    fixed = [r if r.eol else r.but(eol=eol) for r in out[:-1]]
    final = source[-1].eol if source else b"\n"
    fixed.append(out[-1] if out[-1].eol == final else out[-1].but(eol=final))
    return tuple(fixed)


register(ClaudeCodeAdapter())
