"""pi coding-agent sessions (``~/.pi/agent/sessions/*.jsonl``): a ``session`` header, then entries whose
``message`` is a pi-ai or coding-agent message; a ``compaction`` entry is a Boundary (pi deletes nothing)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import orjson

from ctxc.formats import register
from ctxc.formats.base import FormatAdapter, Item, importance_of, recorded_usage, run_time, run_timestamp
from ctxc.formats.shapes import (
    blocks_text,
    content_text,
    encode_content,
    image_from_base64,
    parse_anthropic_block,
    parse_content,
    unchanged,
)
from ctxc.live import BRANCHES
from ctxc.model import (
    Block,
    Boundary,
    ImageBlock,
    Message,
    Record,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    Usage,
    dumps_compact,
)

#: Message roles only pi writes (pi-ai's ``toolResult``, the coding agent's own message kinds).
_PI_ROLES = frozenset(
    {"toolResult", "bashExecution", "custom", "hookMessage", "branchSummary", "compactionSummary"}
)
_ALL_ROLES = _PI_ROLES | {"user", "assistant"}
#: Entry types only pi writes.
_PI_ENTRY_TYPES = frozenset(
    {"model_change", "thinking_level_change", "compaction", "branch_summary"}
    | {"custom_message", "session_info"}
)
#: Stop reasons of assistant turns pi never sends again (pi-ai ``transformMessages`` skips them, and the
#: agent loop ran none of their tool calls): in the file, in no context.
_UNSENT_STOPS = frozenset({"aborted", "error"})
#: How pi wraps a summary when it sends it to the model (coding-agent messages.ts), by message role.
_WRAPS = {
    "branchSummary": (
        "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n",
        "</summary>",
    ),
    "compactionSummary": (
        "The conversation history before this point was compacted into the following summary:\n\n<summary>\n",
        "\n</summary>",
    ),
}


def parse_block(block: Any) -> Block:
    """One pi-ai content block: text and thinking (spelled as Anthropic's), toolCall or image."""
    btype = block.get("type") if isinstance(block, dict) else None
    if btype in ("text", "thinking") or not isinstance(block, dict):
        return parse_anthropic_block(block)
    if btype == "toolCall" and isinstance(block.get("id"), str):
        name = str(block.get("name", ""))
        return ToolUseBlock(id=block["id"], name=name, input=block.get("arguments"), raw=block)
    if btype == "image":
        data = block.get("data")
        if isinstance(data, str):
            return image_from_base64(data, block.get("mimeType"), block)
        return ImageBlock(media_type=block.get("mimeType"), raw=block)
    return UnknownBlock(raw=block, text=dumps_compact(block), type=str(btype or "unknown"))


def encode_block(block: Block) -> Any:
    """The pi-ai JSON for a block: ``raw`` when unchanged, else rebuilt keeping raw's other keys."""
    if unchanged(block, parse_block):
        return block.raw
    base = dict(block.raw) if isinstance(block.raw, dict) else {}
    if isinstance(block, TextBlock):
        return {**base, "type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"thinkingSignature": "", **base, "type": "thinking", "thinking": block.text}
    if isinstance(block, ToolUseBlock):
        # partialJson is the streamed form of the old arguments: stale once they change.
        base.pop("partialJson", None)
        return {**base, "type": "toolCall", "id": block.id, "name": block.name, "arguments": block.input}
    if isinstance(block, ToolResultBlock):  # not a pi content block: its text is what it carries
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock):
        return base or {"type": "image", "data": "", "mimeType": block.media_type or "image/png"}
    return block.raw


def _parse_content(content: Any) -> tuple[tuple[Block, ...], bool]:
    """Blocks of a message's content, and whether it was a bare string (pi-ai allows both for users)."""
    return parse_content(content, parse_block), isinstance(content, str)


def bash_execution_text(msg: Mapping[str, Any]) -> str:
    """What pi sends the model for a user's ``!command`` (coding-agent ``bashExecutionToText``)."""
    text = f"Ran `{msg.get('command', '')}`\n"
    output = msg.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = msg.get("exitCode")
    if msg.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif isinstance(exit_code, int) and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if msg.get("truncated") and msg.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {msg['fullOutputPath']}]"
    return text


def _wrap(summary: Any, role: str) -> str:
    prefix, suffix = _WRAPS[role]
    return prefix + (summary if isinstance(summary, str) else "") + suffix


def _unwrap(blocks: Sequence[Block], role: str) -> str:
    text = blocks_text(blocks)
    prefix, suffix = _WRAPS[role]
    if text.startswith(prefix) and text.endswith(suffix) and len(text) >= len(prefix) + len(suffix):
        return text[len(prefix) : len(text) - len(suffix)]
    return text


def _usage(raw: Any, line: int, model: Any = None) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    model = model if isinstance(model, str) and model else None
    return recorded_usage(raw, ("input", "output", "cacheRead", "cacheWrite"), line, model=model)


def _ms_of(stamp: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 time (pi's message timestamps), else the run's."""
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        when = run_time()
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)


class PiAdapter(FormatAdapter):
    name = "pi"
    tool_role = True
    description = "pi coding-agent session (header line, then message/model_change/compaction entries)"

    def sniff(self, sample: Sequence[Record]) -> int:
        records = [r.data for r in sample if isinstance(r.data, dict)]
        if not records:
            return 0
        first = records[0]
        if first.get("type") == "session" and isinstance(first.get("id"), str) and "payload" not in first:
            return 95
        generic = 0
        for data in records:
            if "payload" in data:  # a codex envelope, never pi
                return 0
            rtype = data.get("type")
            msg = data.get("message")
            if not isinstance(rtype, str):  # not an entry of any kind (a list or an object: unhashable)
                continue
            role = msg.get("role") if isinstance(msg, dict) else None
            if rtype == "message" and isinstance(role, str) and role in _ALL_ROLES:
                if role in _PI_ROLES:
                    return 95
                generic += 1
            elif rtype in _PI_ENTRY_TYPES and data.keys() & {"modelId", "thinkingLevel", "tokensBefore"}:
                return 95
        return 80 if generic else 0

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        index = 0
        # Where each message came from, to find the first entry a compaction keeps (by id, or by position).
        index_of_id: dict[str, int] = {}
        positions: list[tuple[int, int]] = []  # (entry position, message index)
        position = -1  # pi numbers the entries it loaded (the header is 0): blank lines are not entries
        # The tree, to tell what is on pi's walk from the leaf: only known once the last entry is read, so
        # compactions and usage wait for it.
        parent_of: dict[str, Any] = {}
        linked, leaf, leaf_line = False, None, 0
        placed: list[tuple[Any, int]] = []  # (entry id, message index)
        waiting: list[tuple[Any, Boundary | Usage]] = []  # (entry id, compaction or usage)
        for i, rec in records:
            entry = rec.data
            if not isinstance(entry, dict):
                continue
            position += 1
            if entry.get("type") != "session":
                leaf, leaf_line, linked = entry.get("id"), rec.line, linked or "parentId" in entry
                if isinstance(leaf, str):
                    parent_of[leaf] = entry.get("parentId")
            if entry.get("type") == "compaction":
                kept_from = _first_kept(entry, index, index_of_id, positions)
                waiting.append((leaf, _compaction(entry, rec.line, index, kept_from)))
                continue
            # An entry that is no message names the next one (where a kept tail naming it starts).
            if isinstance(entry.get("id"), str):
                index_of_id[entry["id"]] = index
            positions.append((position, index))
            parsed = _parse_entry(entry, rec.line)
            if parsed is None:
                continue
            role, blocks, usage, meta = parsed
            if usage is not None:  # an aborted call too: it was made and billed
                waiting.append((entry.get("id"), usage))
            if meta.get("stop_reason") in _UNSENT_STOPS:
                continue
            yield Message(role, blocks, rec.line, index, (i,), 0, importance_of(entry), usage, meta, entry)
            placed.append((entry.get("id"), index))
            index += 1
        # A v1 session (no parentId) pi links in file order itself: all of it is on the walk.
        walk = _walk(parent_of, leaf) if linked and leaf in parent_of else None

        def off(id_: Any) -> bool:
            return walk is not None and isinstance(id_, str) and id_ not in walk

        for id_, item in waiting:
            if isinstance(item, Boundary):  # pi resumes from the last compaction on its walk
                yield replace(item, resets=False) if off(id_) else item
        gone = tuple(at for id_, at in placed if off(id_))
        if gone:
            yield Boundary(BRANCHES, leaf_line, index=index, abandoned=gone)
        for id_, item in waiting:
            if isinstance(item, Usage):  # billed, but in no context when off the walk
                yield replace(item, abandoned=True) if off(id_) else item

    def encode_message(self, message: Message) -> dict[str, Any]:
        raw = message.raw if isinstance(message.raw, dict) else None
        if raw is not None:
            parsed = _parse_entry(raw, message.line)
            if parsed is not None and parsed[:2] == (message.role, message.blocks):
                return raw
        return _build_entry(message, raw)

    def relink_lines(self, source: Sequence[Record], written: Sequence[Record]) -> tuple[Record, ...]:
        return _relinked(source, written)


def _compaction(entry: Mapping[str, Any], line: int, index: int, kept_from: int | None) -> Boundary:
    """The boundary of a compaction entry: pi resumes from its last one (summary, kept tail, what follows)."""
    before = entry.get("tokensBefore")
    summary = TextBlock(text=_wrap(entry.get("summary"), "compactionSummary"))
    return Boundary(
        kind="pi_compaction",
        line=line,
        trigger="hook" if entry.get("fromHook") else None,
        pre_tokens=before if isinstance(before, int) else None,
        resets=True,
        index=index,
        kept_from=kept_from,
        carried=(Message(role="user", blocks=(summary,), line=line, meta={"is_compact_summary": True}),),
    )


def _first_kept(
    entry: Mapping[str, Any], index: int, index_of_id: Mapping[str, int], positions: Sequence[tuple[int, int]]
) -> int | None:
    """The index of the first message before a compaction entry that pi still sends, if any."""
    kept_id = entry.get("firstKeptEntryId")
    if isinstance(kept_id, str) and kept_id in index_of_id:
        return index_of_id[kept_id]
    position = entry.get("firstKeptEntryIndex")
    if isinstance(position, int) and not isinstance(position, bool):
        return next((i for pos, i in positions if pos >= position), index)
    return None


def _entry_meta(entry: Mapping[str, Any], **facts: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"entry_type": entry.get("type")}
    if isinstance(entry.get("id"), str):
        meta["id"] = entry["id"]
    if "parentId" in entry:
        meta["parent_id"] = entry["parentId"]
    meta.update({k: v for k, v in facts.items() if v is not None})
    return meta


def _parse_entry(
    entry: Mapping[str, Any], line: int
) -> tuple[Role, tuple[Block, ...], Usage | None, dict[str, Any]] | None:
    """Role, blocks, usage and meta of one entry, or None when the entry is not a context message."""
    etype = entry.get("type")
    if etype == "custom_message":
        blocks, as_string = _parse_content(entry.get("content"))
        meta = _entry_meta(entry, custom_type=entry.get("customType"), content_was_string=as_string)
        return "user", blocks, None, meta
    if etype == "branch_summary":
        if not entry.get("summary"):
            return None  # pi sends nothing for an empty branch summary
        text = _wrap(entry.get("summary"), "branchSummary")
        return "user", (TextBlock(text=text),), None, _entry_meta(entry)
    msg = entry.get("message")
    if etype != "message" or not isinstance(msg, dict):
        return None
    role = msg.get("role")
    if not isinstance(role, str):  # an object or a list: no role pi knows (nor hashable)
        return None
    if role in ("user", "assistant", "custom", "hookMessage"):
        blocks, as_string = _parse_content(msg.get("content"))
        if role == "user":
            return "user", blocks, None, _entry_meta(entry, content_was_string=as_string)
        if role != "assistant":
            facts = {"source_role": role, "custom_type": msg.get("customType")}
            return "user", blocks, None, _entry_meta(entry, **facts, content_was_string=as_string)
        meta = _entry_meta(
            entry,
            content_was_string=as_string,
            model=msg.get("model"),
            provider=msg.get("provider"),
            api=msg.get("api"),
            stop_reason=msg.get("stopReason"),
            error_message=msg.get("errorMessage"),
        )
        return "assistant", blocks, _usage(msg.get("usage"), line, msg.get("model")), meta
    if role == "toolResult":
        content = msg.get("content")
        images = tuple(b for b in _parse_content(content)[0] if isinstance(b, ImageBlock))
        result = ToolResultBlock(
            tool_use_id=str(msg.get("toolCallId", "")),
            text=content_text(content),
            is_error=bool(msg.get("isError", False)),
            name=msg.get("toolName") if isinstance(msg.get("toolName"), str) else None,
            images=images if isinstance(content, list) else (),
        )
        return "tool", (result,), None, _entry_meta(entry, source_role="toolResult")
    if role == "bashExecution" and not msg.get("excludeFromContext"):  # "!!": never sent to the model
        meta = _entry_meta(entry, source_role="bashExecution", command=msg.get("command"), injected=True)
        return "user", (TextBlock(text=bash_execution_text(msg)),), None, meta
    if role in _WRAPS:
        text = _wrap(msg.get("summary"), str(role))
        return "user", (TextBlock(text=text),), None, _entry_meta(entry, source_role=role)
    return None


def _build_entry(message: Message, raw: dict[str, Any] | None) -> dict[str, Any]:
    """A pi entry for a changed or new message; the envelope (type, timestamp, id, parentId) is raw's, or
    new with ``meta["timestamp"]`` (the time of the record it follows), else the run's."""
    new = {"type": "message", "timestamp": str(message.meta.get("timestamp") or run_timestamp())}
    envelope: dict[str, Any] = dict(raw) if raw is not None else new
    etype = envelope.get("type")
    old_msg: dict[str, Any] = envelope["message"] if isinstance(envelope.get("message"), dict) else {}
    content = encode_content(message.blocks, encode_block, bool(message.meta.get("content_was_string")), [])
    if etype == "custom_message":
        return {**envelope, "content": content}
    if etype == "branch_summary":
        return {**envelope, "summary": _unwrap(message.blocks, "branchSummary")}
    if etype != "message":  # a message whose record was something else: write it as a new message entry
        kept = {k: v for k, v in envelope.items() if k in ("id", "parentId", "timestamp")}
        envelope, old_msg = {"type": "message", **kept}, {}
    timestamp = old_msg.get("timestamp", _ms_of(str(envelope.get("timestamp") or run_timestamp())))
    old_role = old_msg.get("role")
    if message.role == "tool":
        results = [b for b in message.blocks if isinstance(b, ToolResultBlock)]
        first = results[0] if results else ToolResultBlock(tool_use_id="", text=blocks_text(message.blocks))
        base = old_msg if old_role == "toolResult" else {}
        new_msg: dict[str, Any] = {
            **base,
            "role": "toolResult",
            "toolCallId": first.tool_use_id,
            "toolName": first.name if first.name is not None else base.get("toolName", ""),
            "content": [{"type": "text", "text": first.text}, *(encode_block(i) for i in first.images)],
            "isError": first.is_error,
            "timestamp": timestamp,
        }
    elif message.role == "assistant" and old_role != "assistant":
        blocks = [encode_block(b) for b in message.blocks]
        new_msg = {"role": "assistant", "content": blocks, "stopReason": "stop", "timestamp": timestamp}
    elif message.role == "assistant" or old_role in ("user", "custom", "hookMessage"):
        new_msg = {**old_msg, "content": content}
    elif old_role in _WRAPS:
        new_msg = {**old_msg, "summary": _unwrap(message.blocks, str(old_role))}
    else:
        # A new user/system message or a changed bashExecution: pi sends both as a plain user message
        # (pi-ai has no system role inside a session).
        new_msg = {"role": "user", "content": content, "timestamp": timestamp}
    return {**envelope, "message": new_msg}


def _entries(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if isinstance(r.data, dict) and r.data.get("type") != "session"]


def _relinked(source: Sequence[Record], written: Sequence[Record]) -> tuple[Record, ...]:
    """``written`` relinked so pi's walk from the last entry back along ``parentId`` (session-manager.ts
    ``buildSessionContext``; an unknown parent ends it) passes through every written entry that was on
    the old walk, and every new one, in file order. Others (abandoned branches, which the reader leaves
    out of the live context) stay byte for byte, a dropped parent too: pi's tree makes such an entry a
    root. pi links a v1 session (no parentIds) itself."""
    old = _entries(source)
    if not any("parentId" in r.data for r in old):
        return tuple(written)
    parent_of = {r.data["id"]: r.data.get("parentId") for r in old if isinstance(r.data.get("id"), str)}
    order = {id_: i for i, id_ in enumerate(parent_of)}
    walk = _walk(parent_of, old[-1].data.get("id") if old else None)
    ids = {r.data.get("id") for r in _entries(written)} - {None}
    taken = ids | parent_of.keys()
    seen: set[Any] = set()
    chain: list[Any] = []  # the entries written on the walk so far
    out: list[Record] = []
    for rec in written:
        entry = rec.data
        if not isinstance(entry, dict) or entry.get("type") == "session":
            out.append(rec)
            continue
        own = entry.get("id")
        known = isinstance(own, str) and own in parent_of and own not in seen
        changes: dict[str, Any] = {}
        if not known or own in walk:
            last = chain[-1] if chain else None
            if not known:  # new, or a second entry made from the same one
                own = _fresh_id(last, entry, taken)
                taken.add(own)
            changes = {"id": own, "parentId": last}
            first_kept = entry.get("firstKeptEntryId")
            if entry.get("type") == "compaction" and first_kept in order and first_kept not in ids:
                changes["firstKeptEntryId"] = (
                    _first_kept_written(order[first_kept], chain, order) or first_kept
                )
            if all(entry.get(k) == v for k, v in changes.items()):
                changes = {}
            chain.append(own)
        seen.add(own)
        out.append(_with(rec, changes) if changes else rec)
    return tuple(out)


def _walk(parent_of: Mapping[Any, Any], leaf: Any) -> set[Any]:
    """The ids of the entries pi sends from: ``leaf`` and its ancestors along ``parentId``
    (session-manager.ts ``buildSessionContext``; an unknown parent ends the walk)."""
    walk: set[Any] = set()
    while leaf in parent_of and leaf not in walk:
        walk.add(leaf)
        leaf = parent_of[leaf]
    return walk


def _first_kept_written(dropped: int, chain: Sequence[Any], order: Mapping[str, int]) -> str | None:
    """Where the kept tail of a compaction whose first kept entry (at ``dropped``) was dropped now
    starts: after the last entry written before it (none: pi sends none of the tail, as it names none)."""
    start = max((i + 1 for i, id_ in enumerate(chain) if order.get(id_, dropped) < dropped), default=0)
    return chain[start] if start < len(chain) else None


def _fresh_id(parent: str | None, entry: Mapping[str, Any], taken: set[Any]) -> str:
    """A new entry's id in pi's style (8 hex digits), the same for the same place and entry."""
    seed = orjson.dumps([parent, entry], option=orjson.OPT_SORT_KEYS)
    while (new := hashlib.sha256(seed).hexdigest()[:8]) in taken:
        seed += b"+"
    return new


def _with(rec: Record, changes: Mapping[str, Any]) -> Record:
    """``rec`` with ``changes`` to its envelope, in pi's key order (type, id, parentId first)."""
    data = {"type": rec.data.get("type"), "id": None, "parentId": None, **rec.data, **changes}
    return Record(rec.line, orjson.dumps(data), rec.eol, data, "message")


register(PiAdapter())
