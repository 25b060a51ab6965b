"""Claude Code records: a message encoded as the record Claude Code writes, a record's fields patched in
its bytes, and the value helpers the reader and the compacted writer share."""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from ctxc.formats.shapes import encode_anthropic_block
from ctxc.model import (
    Block,
    Message,
    Record,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    UnknownBlock,
    dumps_compact,
)

NAMESPACE = uuidlib.uuid5(uuidlib.NAMESPACE_URL, "https://github.com/ctxc/claude-code")
#: The model name the client gives the turns it makes up itself (an error notice), not the API.
SYNTHETIC_MODEL = "<synthetic>"
_BOM = b"\xef\xbb\xbf"
_PARENT_KEY = b'{"parentUuid":'
#: Flags of a user record (meta key, record field) that a new record carries when meta sets them.
_USER_FLAGS = (
    ("is_meta", "isMeta"),
    ("is_compact_summary", "isCompactSummary"),
    ("is_visible_in_transcript_only", "isVisibleInTranscriptOnly"),
)


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _wire(block: Block) -> Block:
    """The block as the shared encoder should see it: ``name`` on a result is ctxc's, not the log's."""
    if isinstance(block, ToolResultBlock) and block.name is not None:
        return replace(block, name=None)
    return block


def _encode_content(blocks: Sequence[Block], raw_content: Any, *, as_string: bool) -> Any:
    if not blocks and not isinstance(raw_content, str | list):
        return raw_content  # content was missing or null: keep it so
    only = blocks[0] if len(blocks) == 1 else None
    if isinstance(only, UnknownBlock) and only.raw is raw_content and not isinstance(raw_content, list):
        return raw_content  # an unmodeled non-list content value, unchanged
    if as_string and isinstance(only, TextBlock) and only.raw is None:
        return only.text
    if as_string and not blocks:
        return ""
    return [encode_anthropic_block(_wire(b)) for b in blocks]


def plain_text(blocks: Sequence[Block]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock | ThinkingBlock) and b.text)


def encode_message(message: Message) -> dict[str, Any]:
    """One record for ``message``.

    Read from one record: that record with its content rebuilt from the blocks (equal to ``raw`` when
    nothing changed). Merged from several: ONE record of all blocks with the first record's envelope but
    the last one's ``uuid`` and ``message`` fields (final usage), so what pointed at the last part still
    finds it. New (``raw`` None): see :func:`_new_record`.
    """
    raw = message.raw
    if isinstance(raw, tuple) and raw and all(isinstance(r, dict) for r in raw):
        first, last = raw[0], raw[-1]
        msg = {**(last.get("message") or {}), "content": _encode_content(message.blocks, [], as_string=False)}
        out = {**first, "message": msg}
        if "uuid" in last:
            out["uuid"] = last["uuid"]
        return out
    if not isinstance(raw, dict):
        return _new_record(message)
    if raw.get("type") == "system" or "message" not in raw:
        out = dict(raw)
        if message.blocks or isinstance(raw.get("content"), str):
            out["content"] = plain_text(message.blocks)
        return out
    msg = dict(raw["message"]) if isinstance(raw["message"], dict) else {}
    content = msg.get("content")
    if message.blocks or "content" in msg:  # a message without content stays without
        msg["content"] = _encode_content(message.blocks, content, as_string=isinstance(content, str))
    return {**raw, "message": msg}


def _new_record(message: Message) -> dict[str, Any]:
    """A record for a message ctxc made (a compaction summary, say).

    ``uuid`` comes from meta or from the content and index (reproducible, no randomness); the links,
    ``sessionId`` and ``timestamp`` come from meta when present. A ``tool`` message becomes a ``user``
    record (Claude Code carries tool results in user records); a ``system`` one gets ``subtype`` from meta
    or ``informational``; an assistant one gets ``model`` from meta or ``"ctxc"`` (``"<synthetic>"`` is
    the client's) and ``usage`` only when the message has one.
    """
    meta = message.meta
    role: Role = message.role
    rtype = "user" if role == "tool" else role
    if role == "system":
        content: Any = plain_text(message.blocks)
    else:
        content = _encode_content(message.blocks, None, as_string=role != "assistant")
    digest = hashlib.sha256(f"{message.index}\0{rtype}\0{dumps_compact(content)}".encode()).hexdigest()
    out: dict[str, Any] = {
        "parentUuid": str_or_none(meta.get("parent_uuid")),
        "isSidechain": meta.get("is_sidechain") is True,
        "userType": "external",
    }
    for key, field_name in (("session_id", "sessionId"), ("agent_id", "agentId")):
        if isinstance(meta.get(key), str):
            out[field_name] = meta[key]
    out["type"] = rtype
    if role == "system":
        subtype = str_or_none(meta.get("subtype")) or "informational"
        out |= {
            "subtype": subtype,
            "content": content,
            "isMeta": meta.get("is_meta") is True,
            "level": "info",
        }
    elif role == "assistant":
        out["message"] = {
            "id": str_or_none(meta.get("message_id")) or f"msg_ctxc_{digest[:24]}",
            "type": "message",
            "role": "assistant",
            "model": str_or_none(meta.get("model")) or "ctxc",
            "content": content,
            "stop_reason": str_or_none(meta.get("stop_reason")) or "end_turn",
            "stop_sequence": None,
        }
        if (u := message.usage) is not None:
            out["message"]["usage"] = {
                "input_tokens": u.input,
                "output_tokens": u.output,
                "cache_creation_input_tokens": u.cache_write,
                "cache_read_input_tokens": u.cache_read,
            }
    else:
        out["message"] = {"role": "user", "content": content}
        out |= {field_name: True for key, field_name in _USER_FLAGS if meta.get(key) is True}
    out["uuid"] = str_or_none(meta.get("uuid")) or str(uuidlib.uuid5(NAMESPACE, digest))
    if isinstance(meta.get("timestamp"), str):
        out["timestamp"] = meta["timestamp"]
    return out


def _content(record: Mapping[str, Any]) -> Any:
    message = record.get("message")
    return message.get("content") if isinstance(message, dict) else None


def tool_results(data: Mapping[str, Any]) -> list[Any]:
    content = _content(data)
    return (
        [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if isinstance(content, list)
        else []
    )


def content_len(record: Mapping[str, Any]) -> int | None:
    """How many blocks the reader made of a record's content (a string is one text block)."""
    content = _content(record)
    return 1 if isinstance(content, str) else len(content) if isinstance(content, list) else None


def patch(rec: Record, old: Mapping[str, Any], new: dict[str, Any]) -> Record:
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
