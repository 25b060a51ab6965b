"""OpenAI Codex CLI rollouts (``~/.codex/sessions/**/rollout-*.jsonl``), current and legacy dialects.

Current rollouts wrap every line as ``{timestamp, type, payload}``. Only ``response_item`` lines are the
model-visible history, so only they become messages, one message per line (never merged, so records map
1:1 to messages and :meth:`CodexAdapter.encode_message` gives back the line). ``event_msg`` lines mirror
the conversation for the UI; of them only ``token_count`` (recorded API usage) and ``context_compacted``
matter. ``session_meta`` and ``turn_context`` carry no messages.

Legacy rollouts (2025-09) start with a bare ``{id, timestamp, instructions, git}`` header and then hold
bare ResponseItems (no envelope) and ``{"record_type": "state"}`` markers.

Item mapping (the Responses-API item type is kept in ``meta["item_type"]``):

- ``message``: role user/assistant; developer and system become role ``system`` with
  ``meta["source_role"]``. Parts go through :mod:`ctxc.formats.shapes`.
- ``reasoning``: an assistant message of ThinkingBlocks from ``summary`` (and ``content`` parts if a
  provider recorded raw reasoning). ``encrypted_content`` stays in ``raw`` only: it is opaque, and what it
  costs is not text ctxc can count. An item with no summary gets one empty ThinkingBlock so the message
  is not empty.
- ``function_call`` / ``custom_tool_call`` / ``local_shell_call``: an assistant ToolUseBlock (id =
  ``call_id``). Results (``function_call_output`` / ``custom_tool_call_output``) are role ``tool`` with a
  ToolResultBlock whose text is the output exactly as the model sees it (a JSON string stays whole).
- ``web_search_call``, ``tool_search_call``/``tool_search_output``, ``image_generation_call``,
  ``compaction`` and unknown items: an UnknownBlock (written back verbatim). Web search has no output
  item, so modelling it as a tool call would leave an unanswered call for pairing validators.
- ``ghost_snapshot`` (an undo checkpoint the harness never sends to the model): not a message.

Usage comes from ``token_count`` events (``last_token_usage``; a repeat with unchanged totals is a
rate-limit refresh, not a call). A ``compacted`` record is one Boundary; the ``context_compacted`` event
that follows it is the same compaction. New messages (``raw`` None) become current-format lines stamped
``meta["timestamp"]`` or the run's time, or bare items when ``meta["dialect"] == "legacy"``.

Compacted output (:meth:`CodexAdapter.write_compacted`) is recorded the way Codex records its own
compaction: a ``compacted`` record whose ``replacement_history`` is the history Codex would resume with
at that point, a ``context_compacted`` event, then the summary as a user message item.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from ctxc.errors import FormatError
from ctxc.formats import register
from ctxc.formats.base import Item, rename_session, run_time, run_timestamp
from ctxc.formats.shapes import (
    content_text,
    dumps_compact,
    encode_openai_part,
    openai_role,
    parse_openai_content,
    parse_tool_arguments,
)
from ctxc.live import compaction_block_boundary, request_text
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
    Transcript,
    UnknownBlock,
    Usage,
)

#: Envelope ``type`` values of current rollouts (including the newer schema fixture's extras).
ENVELOPE_TYPES = frozenset(
    {
        "session_meta",
        "response_item",
        "event_msg",
        "turn_context",
        "compacted",
        "world_state",
        "inter_agent_communication_metadata",
    }
)
#: ResponseItem types a legacy rollout holds bare.
ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
        "ghost_snapshot",
        "tool_search_call",
        "tool_search_output",
        "image_generation_call",
        "compaction",
        "compaction_summary",
        "agent_message",
    }
)
_CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_RESULT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
#: Items the harness records but never sends to the model.
_NOT_CONVERSATION = frozenset({"ghost_snapshot"})
_NEW_ROLE = {"system": "developer", "user": "user", "assistant": "assistant"}


def _is_envelope(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("type"), str) and isinstance(data.get("payload"), dict) and "timestamp" in data


def _is_bare_item(data: Mapping[str, Any]) -> bool:
    """A legacy bare ResponseItem; a message must use Responses-API parts to tell it from chat logs."""
    itype = data.get("type")
    if itype not in ITEM_TYPES or "payload" in data:
        return False
    if itype == "message":
        content = data.get("content")
        return (
            isinstance(data.get("role"), str)
            and isinstance(content, list)
            and any(isinstance(p, dict) and p.get("type") in ("input_text", "output_text") for p in content)
        )
    if itype in _CALL_TYPES or itype in _RESULT_TYPES:
        return "call_id" in data
    return itype in ("reasoning", "ghost_snapshot", "web_search_call")


def _codex_shaped(data: Mapping[str, Any], *, first: bool) -> bool:
    if _is_envelope(data):
        return data["type"] in ENVELOPE_TYPES
    return data.get("record_type") == "state" or _is_bare_item(data) or (first and _is_legacy_header(data))


def _is_legacy_header(data: Mapping[str, Any]) -> bool:
    return (
        {"id", "timestamp", "instructions"} <= data.keys() and "type" not in data and "messages" not in data
    )


# ------------------------------------------------------------------------------------------- parsing


def _item_role(value: Any) -> Role:
    # Responses-API message items never carry tool results; an unknown role is input to the model.
    role = openai_role(value)
    return "user" if role is None or role == "tool" else role


def _reasoning_part(part: Any) -> ThinkingBlock:
    text = part.get("text") if isinstance(part, dict) else None
    return ThinkingBlock(text=text if isinstance(text, str) else "", raw=part)


def _output_value(output: Any) -> tuple[str, tuple[ImageBlock, ...]]:
    """Text and images of a tool output: a string, a list of content items, or a single content item."""
    if isinstance(output, str):
        return output, ()
    parts = output if isinstance(output, list) else [output] if isinstance(output, dict) else None
    if parts is None:
        return ("" if output is None else dumps_compact(output)), ()
    images = tuple(b for b in parse_openai_content(parts) if isinstance(b, ImageBlock))
    return content_text(parts), images


def _exit_code(output: Any) -> int | None:
    # Shell results are often a JSON string {"output": ..., "metadata": {"exit_code": ...}}.
    if not isinstance(output, str) or not output.startswith("{") or '"exit_code"' not in output:
        return None
    parsed = parse_tool_arguments(output)
    meta = parsed.get("metadata") if isinstance(parsed, dict) else None
    code = meta.get("exit_code") if isinstance(meta, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _message_parts(content: Any) -> tuple[Block, ...]:
    blocks = parse_openai_content(content)
    # Encrypted parts (inter-agent messages) cost tokens ctxc cannot see: no countable text.
    return tuple(
        UnknownBlock(raw=b.raw, text="", type="encrypted_content")
        if isinstance(b, UnknownBlock) and b.type == "encrypted_content"
        else b
        for b in blocks
    )


def _call_block(payload: Mapping[str, Any], line: int) -> ToolUseBlock:
    ptype = payload.get("type")
    call_id = payload.get("call_id") or payload.get("id") or f"codex-call-{line}"
    if ptype == "function_call":
        return ToolUseBlock(
            id=str(call_id),
            name=str(payload.get("name") or ""),
            input=parse_tool_arguments(payload.get("arguments")),
            raw=payload,
        )
    if ptype == "custom_tool_call":
        return ToolUseBlock(
            id=str(call_id), name=str(payload.get("name") or ""), input=payload.get("input"), raw=payload
        )
    # local_shell_call: the built-in local_shell tool; its action ({type: exec, command, ...}) is the input.
    return ToolUseBlock(id=str(call_id), name="local_shell", input=payload.get("action"), raw=payload)


def _unknown_text(payload: Mapping[str, Any]) -> str:
    ptype = payload.get("type")
    if ptype == "web_search_call":
        action = payload.get("action")
        return dumps_compact(action) if action is not None else ""
    if ptype == "image_generation_call":
        # The result is an image (base64), not text; the revised prompt is the text part.
        prompt = payload.get("revised_prompt")
        return prompt if isinstance(prompt, str) else ""
    if ptype in ("compaction", "compaction_summary"):
        return ""  # encrypted
    if ptype == "tool_search_output":
        return dumps_compact(payload.get("tools"))
    if ptype == "tool_search_call":
        return dumps_compact(payload.get("arguments"))
    return dumps_compact(payload)


def parse_item(
    payload: Mapping[str, Any], line: int = 0, call_names: Mapping[str, str] | None = None
) -> tuple[Role, tuple[Block, ...], dict[str, Any]] | None:
    """Role, blocks and meta for one ResponseItem, or None when the item is not conversation."""
    ptype = payload.get("type")
    if not isinstance(ptype, str) or ptype in _NOT_CONVERSATION:
        return None
    meta: dict[str, Any] = {"item_type": ptype}
    for key in ("id", "call_id", "phase", "status"):
        value = payload.get(key)
        if isinstance(value, str):
            meta[key] = value
    passthrough = payload.get("internal_chat_message_metadata_passthrough") or payload.get("metadata")
    if isinstance(passthrough, dict) and isinstance(passthrough.get("turn_id"), str):
        meta["turn_id"] = passthrough["turn_id"]

    if ptype == "message":
        source_role = payload.get("role")
        role = _item_role(source_role)
        if role == "system" or role != source_role:
            meta["source_role"] = source_role
        return role, _message_parts(payload.get("content")), meta
    if ptype == "agent_message":
        # A message from another agent, fed to this model as input.
        for key in ("author", "recipient"):
            if isinstance(payload.get(key), str):
                meta[key] = payload[key]
        return "user", _message_parts(payload.get("content")), meta
    if ptype == "reasoning":
        parts = [
            p for key in ("summary", "content") if isinstance(payload.get(key), list) for p in payload[key]
        ]
        blocks = tuple(_reasoning_part(p) for p in parts) or (ThinkingBlock(text=""),)
        return "assistant", blocks, meta
    if ptype in _CALL_TYPES:
        return "assistant", (_call_block(payload, line),), meta
    if ptype in _RESULT_TYPES:
        call_id = str(payload.get("call_id") or "")
        output = payload.get("output")
        text, images = _output_value(output)
        code = _exit_code(output)
        if code is not None:
            meta["exit_code"] = code
        name = (call_names or {}).get(call_id)
        return (
            "tool",
            (ToolResultBlock(tool_use_id=call_id, text=text, name=name, raw=payload, images=images),),
            meta,
        )
    other_role: Role = "user" if ptype == "tool_search_output" else "assistant"
    return other_role, (UnknownBlock(raw=payload, text=_unknown_text(payload), type=ptype),), meta


def history_messages(payload: Mapping[str, Any], line: int = 0) -> tuple[Message, ...]:
    """The ``replacement_history`` of a ``compacted`` payload as messages (the model's new history).

    They are not yielded by :meth:`CodexAdapter.read` (they belong to no record of their own); this is for
    callers that want to count what the model sees right after a recorded compaction.
    """
    history = payload.get("replacement_history")
    out: list[Message] = []
    names: dict[str, str] = {}
    for item in history if isinstance(history, list) else []:
        if not isinstance(item, dict):
            continue
        parsed = parse_item(item, line, names)
        if parsed is None:
            continue
        role, blocks, meta = parsed
        if item.get("type") in ("compaction", "compaction_summary"):
            meta["is_compact_summary"] = True  # the summary the compaction made (encrypted, remotely)
        names.update((b.id, b.name) for b in blocks if isinstance(b, ToolUseBlock))
        out.append(Message(role=role, blocks=blocks, line=line, index=len(out), meta=meta, raw=item))
    return tuple(out)


def _usage(payload: Mapping[str, Any], line: int, last_total: list[Any]) -> Usage | None:
    """A Usage for a token_count event that records a new API call, else None.

    Codex writes token_count again with unchanged totals when only rate limits refresh (half the events
    in the corpus); those repeat the previous call and are skipped so sums are not doubled.
    """
    info = payload.get("info")
    if isinstance(info, dict):
        last = info.get("last_token_usage")
        total = info.get("total_token_usage")
        window = info.get("model_context_window")
    elif "info" not in payload and "input_tokens" in payload:  # older flat token_count events
        last, total, window = payload, None, None
    else:
        return None
    if not isinstance(last, dict):
        return None
    if total is not None:
        if total == last_total[0]:
            return None
        last_total[0] = total

    def num(key: str) -> int:
        value = last.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    if num("input_tokens") == 0 and num("output_tokens") == 0:
        return None
    cached = num("cached_input_tokens")
    written = num("cache_write_input_tokens")
    # Codex input_tokens is the whole prompt, cached tokens included: keep Usage.context == input_tokens.
    return Usage(
        input=max(num("input_tokens") - cached - written, 0),
        output=num("output_tokens"),
        cache_read=cached,
        cache_write=written,
        line=line,
        window=window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None,
    )


# ------------------------------------------------------------------------------------------ encoding


def _text_part(block: Block, role: str) -> Any:
    if isinstance(block, TextBlock):
        if block.raw is not None:
            return encode_openai_part(block)
        return {"type": "output_text" if role == "assistant" else "input_text", "text": block.text}
    if isinstance(block, UnknownBlock | ImageBlock) and block.raw is not None:
        return encode_openai_part(block)
    raise ValueError(f"a Codex message item cannot hold a {block.kind} block without its source")


def _reasoning_out(block: Block) -> Any:
    if not isinstance(block, ThinkingBlock):
        raise ValueError(f"a Codex reasoning item cannot hold a {block.kind} block")
    if block.raw is not None:
        if _reasoning_part(block.raw) == block:
            return block.raw
        return {**block.raw, "text": block.text} if isinstance(block.raw, dict) else block.text
    return {"type": "summary_text", "text": block.text}


def _output_out(block: ToolResultBlock, old: Any) -> Any:
    if _output_value(old) == (block.text, block.images):
        return old
    if isinstance(old, list) or (block.images and not isinstance(old, dict)):
        return [
            {"type": "input_text", "text": block.text},
            *(i.raw for i in block.images if i.raw is not None),
        ]
    if isinstance(old, dict):
        return {**old, "text": block.text}
    return block.text


def _single(blocks: Sequence[Block], kind: type[Any], itype: str) -> Any:
    if len(blocks) != 1 or not isinstance(blocks[0], kind):
        raise ValueError(f"a Codex {itype} item holds exactly one {kind.__name__}")
    return blocks[0]


def _encode_item(payload: Mapping[str, Any], message: Message) -> dict[str, Any]:
    """Rebuild one ResponseItem from ``message``'s blocks; ``payload`` supplies every other key."""
    ptype = payload.get("type")
    blocks = message.blocks
    names = {b.tool_use_id: b.name for b in blocks if isinstance(b, ToolResultBlock) and b.name is not None}
    parsed = parse_item(payload, message.line, names)
    if parsed is not None and parsed[0] == message.role and parsed[1] == blocks:
        return dict(payload)  # unchanged: the recorded item, keys and order as read
    if ptype in ("message", "agent_message"):
        out = dict(payload)
        if ptype == "message" and _item_role(payload.get("role")) != message.role:
            if message.role == "tool":
                raise ValueError("a Codex message item cannot have role tool")
            out["role"] = _NEW_ROLE[message.role]
        role = str(out.get("role") or "user")
        out["content"] = [_text_part(b, role) for b in blocks]
        return out
    if ptype == "reasoning":
        summary: list[Any] = []
        content: list[Any] = []
        old_content = payload.get("content")
        raw_text_ids = {id(p) for p in old_content} if isinstance(old_content, list) else set()
        for b in blocks:
            if isinstance(b, ThinkingBlock) and b.raw is None and not b.text:
                continue  # the placeholder of an item with no summary
            part = _reasoning_out(b)
            is_raw_text = id(b.raw) in raw_text_ids or (
                isinstance(b.raw, dict) and b.raw.get("type") == "reasoning_text"
            )
            (content if is_raw_text else summary).append(part)
        out = dict(payload)
        if summary or "summary" in payload:
            out["summary"] = summary
        if content or isinstance(old_content, list):
            out["content"] = content
        return out
    if ptype in _CALL_TYPES:
        call: ToolUseBlock = _single(blocks, ToolUseBlock, str(ptype))
        out = dict(payload)
        out["call_id"] = call.id
        if ptype == "function_call":
            out["name"] = call.name
            old_args = payload.get("arguments")
            if parse_tool_arguments(old_args) != call.input:
                out["arguments"] = call.input if isinstance(call.input, str) else dumps_compact(call.input)
        elif ptype == "custom_tool_call":
            out["name"] = call.name
            out["input"] = call.input if isinstance(call.input, str) else dumps_compact(call.input)
        else:
            out["action"] = call.input
        return out
    if ptype in _RESULT_TYPES:
        result: ToolResultBlock = _single(blocks, ToolResultBlock, str(ptype))
        return {
            **payload,
            "call_id": result.tool_use_id,
            "output": _output_out(result, payload.get("output")),
        }
    unknown: UnknownBlock = _single(blocks, UnknownBlock, str(ptype))
    if not isinstance(unknown.raw, dict):
        raise ValueError(f"a Codex {ptype} item must be written from its recorded form")
    return dict(unknown.raw)


def _new_item(message: Message) -> dict[str, Any]:
    """A ResponseItem for a message that has no source record (a summary a compactor inserts, say)."""
    blocks = message.blocks
    kinds = {b.kind for b in blocks}
    meta_type = message.meta.get("item_type")
    if "tool_result" in kinds:
        result: ToolResultBlock = _single(blocks, ToolResultBlock, "function_call_output")
        itype = meta_type if meta_type in _RESULT_TYPES else "function_call_output"
        output: Any = result.text
        if result.images:
            output = _output_out(result, [])
        return {"type": itype, "call_id": result.tool_use_id, "output": output}
    if "tool_use" in kinds:
        call: ToolUseBlock = _single(blocks, ToolUseBlock, "function_call")
        if meta_type == "custom_tool_call":
            text = call.input if isinstance(call.input, str) else dumps_compact(call.input)
            return {"type": "custom_tool_call", "call_id": call.id, "name": call.name, "input": text}
        args = call.input if isinstance(call.input, str) else dumps_compact(call.input)
        return {"type": "function_call", "name": call.name, "arguments": args, "call_id": call.id}
    if blocks and kinds == {"thinking"}:
        summary = [
            _reasoning_out(b)
            for b in blocks
            if b.raw is not None or (isinstance(b, ThinkingBlock) and b.text)
        ]
        return {"type": "reasoning", "summary": summary, "content": None, "encrypted_content": None}
    if message.role == "tool":
        raise ValueError("a new Codex tool message needs a ToolResultBlock")
    role = _NEW_ROLE[message.role]
    if message.role == "system" and message.meta.get("source_role") == "system":
        role = "system"
    item: dict[str, Any] = {"type": "message", "role": role, "content": [_text_part(b, role) for b in blocks]}
    phase = message.meta.get("phase")
    if isinstance(phase, str):
        item["phase"] = phase
    return item


def encode_compacted(
    message_text: str, replacement_history: list[dict[str, Any]], timestamp: str
) -> dict[str, Any]:
    """A ``compacted`` record: Codex resumes from ``replacement_history`` instead of the items before it."""
    return {
        "timestamp": timestamp,
        "type": "compacted",
        "payload": {"message": message_text, "replacement_history": replacement_history},
    }


# ------------------------------------------------------------------------------ writing compacted output

#: UI events that repeat a conversation item, and the payload field holding the repeated text.
_MIRRORS = {"user_message": "message", "agent_message": "message", "agent_reasoning": "text"}


def _mirror_kind(m: Message) -> str | None:
    """Which mirror event Codex writes for this message, if any."""
    itype = m.meta.get("item_type")
    if itype == "reasoning":
        return "agent_reasoning"
    if itype == "message" and "source_role" not in m.meta:
        return {"user": "user_message", "assistant": "agent_message"}.get(m.role)
    return None


def _texts(m: Message) -> set[str]:
    return {m.text, *(b.text for b in m.blocks if isinstance(b, TextBlock | ThinkingBlock))}


def _tool_ids(m: Message) -> set[str]:
    ids = {b.id for b in m.blocks if isinstance(b, ToolUseBlock)}
    ids |= {b.tool_use_id for b in m.blocks if isinstance(b, ToolResultBlock)}
    ids |= {v for k in ("id", "call_id") if isinstance(v := m.meta.get(k), str)}
    return ids


def _replaces(m: Message) -> tuple[int, int] | None:
    span = m.meta.get("replaces")
    if isinstance(span, tuple | list) and len(span) == 2 and all(isinstance(i, int) for i in span):
        return span[0], span[1]
    return None


def _is_event(data: Any, etype: str | None = None) -> bool:
    if not (isinstance(data, dict) and _is_envelope(data) and data["type"] == "event_msg"):
        return False
    return etype is None or data["payload"].get("type") == etype


def _is_compacted(data: Any) -> bool:
    return isinstance(data, dict) and _is_envelope(data) and data["type"] == "compacted"


class _CompactedWriter:
    """One pass over the input records that writes the compacted rollout (see ``write_compacted``)."""

    def __init__(
        self, adapter: CodexAdapter, transcript: Transcript, outputs: Mapping[int, Sequence[Message]]
    ) -> None:
        self.adapter = adapter
        self.records = transcript.records
        originals = transcript.messages
        self.original_ids = {id(m) for m in originals}
        self.by_record = {r: m for m in originals for r in m.records}
        convs = sorted({m.conversation for m in originals} | set(outputs))
        # A conversation the caller left out is unchanged, not dropped.
        self.out_messages = [
            m for c in convs for m in (outputs[c] if c in outputs else transcript.conversation(c))
        ]
        kept = {r for m in self.out_messages for r in m.records}
        self.dropped = {r for r in self.by_record if r not in kept}
        # The log's last compaction, whose replacement_history compaction may have changed.
        reset = next((b for b in reversed(transcript.boundaries) if b.resets and b.carried), None)
        self.reset_record = (
            None if reset is None else next(r for r, rec in enumerate(self.records) if rec.line == reset.line)
        )
        self.carried = reset.carried if reset is not None else ()
        self.legacy = bool(originals) and originals[0].meta.get("dialect") == "legacy"
        self.removed = self._removed_events()
        # Call types by id: a result ctxc adds must be the output item its call's type expects.
        self.call_types = {
            b.id: str(m.meta.get("item_type"))
            for m in originals
            for b in m.blocks
            if isinstance(b, ToolUseBlock)
        }
        self.eol = next((r.eol for r in self.records if r.eol), b"\n")
        self.out: list[Record] = []
        # The model history Codex rebuilds on resume at this point of the output: response items in
        # order, reset by every ``compacted`` record to its ``replacement_history``.
        self.view: list[Any] = []
        self.last_timestamp: str | None = None
        self.next_record = 0

    # -- which non-message records go with dropped messages

    def _removed_events(self) -> set[int]:
        """Events of dropped messages: their UI mirrors, tool events and the token counts of their calls.

        Only events next to a dropped message are candidates (between the kept messages around a dropped
        run); everything else (session_meta, turn_context, task events, earlier compactions) stays.
        """
        if not self.dropped:
            return set()
        message_records = sorted(self.by_record)
        by_kind: dict[str, list[int]] = {}
        for r in message_records:
            kind = _mirror_kind(self.by_record[r])
            if kind is not None:
                by_kind.setdefault(kind, []).append(r)
        kept_ids = {i for m in self.out_messages for i in _tool_ids(m)}
        dropped_ids = {i for r in self.dropped for i in _tool_ids(self.by_record[r])} - kept_ids
        removed: set[int] = set()
        for r, rec in enumerate(self.records):
            if r in self.by_record or not _is_event(rec.data):
                continue
            pos = bisect_left(message_records, r)
            before = message_records[pos - 1] if pos else None
            after = message_records[pos] if pos < len(message_records) else None
            if before not in self.dropped and after not in self.dropped:
                continue
            payload = rec.data["payload"]
            etype = payload.get("type")
            owner: int | None = None
            if etype == "token_count":
                owner = before  # a call's usage is recorded after the items it produced
            elif etype in _MIRRORS:
                owner = self._mirror_owner(r, str(etype), payload.get(_MIRRORS[str(etype)]), by_kind)
            else:
                call_id = payload.get("call_id", payload.get("callId"))
                if isinstance(call_id, str) and call_id in dropped_ids:
                    removed.add(r)
                continue
            if owner in self.dropped:
                removed.add(r)
        return removed

    def _mirror_owner(self, r: int, etype: str, text: Any, by_kind: Mapping[str, list[int]]) -> int | None:
        """The item a mirror event repeats: the neighbour of its kind with the same text, else the nearest.

        Codex versions write the event before the item (streamed reasoning and answers) or after it (user
        input), so both neighbours are candidates; redacted logs can differ in text, hence distance.
        """
        candidates = by_kind.get(etype, [])
        pos = bisect_left(candidates, r)
        before = candidates[pos - 1] if pos else None
        after = candidates[pos] if pos < len(candidates) else None
        if isinstance(text, str):
            same = [c for c in (before, after) if c is not None and text in _texts(self.by_record[c])]
            if len(same) == 1:
                return same[0]
        if before is None or after is None:
            return after if before is None else before
        if r - before != after - r:
            return before if r - before < after - r else after
        return before if etype == "user_message" else after

    # -- output

    def _emit(self, rec: Record) -> None:
        self.out.append(rec)
        data = rec.data
        if not isinstance(data, dict):
            return
        if _is_envelope(data):
            if data["type"] == "response_item":
                self.view.append(data["payload"])
            elif data["type"] == "compacted" and isinstance(data["payload"].get("replacement_history"), list):
                self.view = list(data["payload"]["replacement_history"])
            if isinstance(data.get("timestamp"), str):
                self.last_timestamp = data["timestamp"]

    def _emit_new(self, data: dict[str, Any]) -> None:
        self._emit(Record(line=0, raw=orjson.dumps(data), eol=self.eol, data=data, kind="message"))

    def _flush_until(self, stop: int) -> None:
        """Pass the records before ``stop``: non-message records unless removed; message records never
        (kept ones are written by their message, dropped ones not at all)."""
        for r in range(self.next_record, stop):
            if r not in self.by_record and r not in self.removed:
                self._emit(self.records[r])
        self.next_record = max(self.next_record, stop)

    def _replaced(self, m: Message, start: int, limit: int) -> int | None:
        """The first dropped record in ``start..limit`` that ``m`` says it replaces (``meta["replaces"]``)."""
        span = _replaces(m)
        if span is not None:
            for r in range(start, limit):
                if r in self.dropped and span[0] <= self.by_record[r].index <= span[1]:
                    return r
        return None

    def _after_compactions(self, anchor: int, limit: int) -> int:
        # A recorded compaction between here and the next kept message would reset Codex's history
        # after a new message and lose it: new messages go after it (and its context_compacted event).
        for r in range(anchor, limit):
            if _is_compacted(self.records[r].data):
                anchor = r + 1
                if anchor < limit and _is_event(self.records[anchor].data, "context_compacted"):
                    anchor += 1
        return anchor

    def _timestamp(self, m: Message, anchor: int, limit: int) -> str:
        """The time of the first record ``m`` replaces, else of the line before it: deterministic, and in
        order with its neighbours."""
        r = self._replaced(m, anchor, limit)
        ts = None if r is None else self.records[r].data.get("timestamp")
        return ts if isinstance(ts, str) else self.last_timestamp or run_timestamp()

    def _item(self, m: Message) -> dict[str, Any]:
        results = [b for b in m.blocks if isinstance(b, ToolResultBlock)]
        if results and "item_type" not in m.meta:
            call_type = self.call_types.get(results[0].tool_use_id)
            itype = "custom_tool_call_output" if call_type == "custom_tool_call" else "function_call_output"
            m = replace(m, meta={**m.meta, "item_type": itype})
        return _new_item(m)

    def _carried_part(self) -> tuple[int, int]:
        """The output positions of what now stands for the log's carried history: the new messages
        between the last message before its compaction record and the first after it, when the caller
        compacted that history (they hold carried messages, or replace some: indexes below 0)."""
        if self.reset_record is None:
            return 0, 0
        messages = self.out_messages
        start = next(
            (i + 1 for i in range(len(messages) - 1, -1, -1)
             if messages[i].records and messages[i].records[0] < self.reset_record),
            0,
        )  # fmt: skip
        end = start
        while end < len(messages) and not messages[end].records:
            end += 1
        part = messages[start:end]
        if not any(m.meta.get("carried") or (_replaces(m) or (0, 0))[0] < 0 for m in part):
            return 0, 0
        return start, end

    def _rewrite_carried(self, part: Sequence[Message]) -> None:
        """A ``compacted`` record after the log's own, carrying ``part`` as the history Codex resumes
        with; nothing when ``part`` is what the log's record already carries."""
        same = len(part) == len(self.carried) and all(
            m.meta.get("carried") and m.blocks == c.blocks for m, c in zip(part, self.carried, strict=True)
        )
        if same:
            return
        assert self.reset_record is not None
        anchor = self.reset_record + 1
        if anchor < len(self.records) and _is_event(self.records[anchor].data, "context_compacted"):
            anchor += 1
        self._flush_until(anchor)
        ts = self.records[self.reset_record].data.get("timestamp")
        ts = ts if isinstance(ts, str) else self.last_timestamp or run_timestamp()
        items = [self._item(m) if m.raw is None else self.adapter.encode_message(m) for m in part]
        text = "\n\n".join(m.text for m in part if m.meta.get("ctxc") == "summary")
        self._emit_new(encode_compacted(text, items, ts))
        self._emit_new({"timestamp": ts, "type": "event_msg", "payload": {"type": "context_compacted"}})

    def write(self) -> tuple[Record, ...]:
        messages = self.out_messages
        # The first input record of the next kept message at or after each output position.
        next_kept = [len(self.records)] * (len(messages) + 1)
        for i in range(len(messages) - 1, -1, -1):
            next_kept[i] = messages[i].records[0] if messages[i].records else next_kept[i + 1]
        carried_from, carried_to = self._carried_part()
        for i, m in enumerate(messages):
            if carried_from <= i < carried_to:
                if i == carried_from:
                    self._rewrite_carried(messages[carried_from:carried_to])
                continue
            if m.records:
                first = m.records[0]
                self._flush_until(first)
                if id(m) in self.original_ids:
                    for r in m.records:
                        self._emit(self.records[r])
                else:
                    src = self.records[first]
                    data = self.adapter.encode_message(m)
                    self._emit(Record(src.line, orjson.dumps(data), src.eol or self.eol, data, "message"))
                self.next_record = max(self.next_record, m.records[-1] + 1)
                continue
            limit = next_kept[i]
            # A new message goes where the first record it replaces was, else right after what is written;
            # never before a compaction record Codex would then resume from without it.
            replaced = self._replaced(m, self.next_record, limit)
            anchor = self.next_record if replaced is None else replaced
            summary = m.meta.get("ctxc") == "summary" and not self.legacy
            anchor = self._after_compactions(anchor, limit)
            self._flush_until(anchor)
            ts = self._timestamp(m, anchor, limit)
            if m.raw is not None:
                self._emit_new(self.adapter.encode_message(m))
            elif self.legacy:
                self._emit_new(self._item(m))
            else:
                if summary:
                    self._emit_new(encode_compacted(m.text, list(self.view), ts))
                    self._emit_new(
                        {"timestamp": ts, "type": "event_msg", "payload": {"type": "context_compacted"}}
                    )
                self._emit_new({"timestamp": ts, "type": "response_item", "payload": self._item(m)})
        self._flush_until(len(self.records))
        return self._fix_eols()

    def _fix_eols(self) -> tuple[Record, ...]:
        """Every line but the last ends with a newline; the last ends as the input's last line did.

        (The rule of ``ctxc.compaction.write``; importing it here would load every strategy with the formats.)
        """
        if not self.out:
            return ()
        final = self.records[-1].eol if self.records else b"\n"
        fixed = [r if r.eol else r.but(eol=self.eol) for r in self.out[:-1]]
        last = self.out[-1]
        fixed.append(last if last.eol == final else last.but(eol=final))
        return tuple(fixed)


# ------------------------------------------------------------------------------------------- adapter


def uuid7() -> str:
    """A time-ordered UUID (version 7), the kind Codex names its sessions with."""
    millis = time.time_ns() // 1_000_000
    rand_a, rand_b = secrets.randbits(12), secrets.randbits(62)
    return str(uuid.UUID(int=(millis << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b))


class CodexAdapter:
    name = "codex"
    tool_role = True
    usage_before_response = False
    suffixes: tuple[str, ...] = (".jsonl",)
    usage_needles: tuple[bytes, ...] = (b'"token_count"', b'compacted"', b'"turn_context"')
    summary_resets = False
    rewrites_carried = True  # a new compacted record replaces the last one's replacement_history
    description = (
        "OpenAI Codex CLI rollout (session_meta/response_item/event_msg lines, and the 2025 legacy form)"
    )

    # Forking (``compact --fork``): a rollout is ``rollout-<time>-<id>.jsonl``, its ``session_meta`` naming
    # the id; Codex finds a session by the id in the file name.
    def new_session_id(self) -> str:
        return uuid7()

    def with_session_id(self, transcript: Transcript, session_id: str) -> Transcript:
        metas = [
            r for r in transcript.records if isinstance(r.data, dict) and r.data.get("type") == "session_meta"
        ]
        payload = metas[0].data.get("payload") if metas else None
        old = payload.get("id") if isinstance(payload, dict) else None
        if not isinstance(old, str) or not old:
            raise FormatError(
                "this rollout names no session id (session_meta.payload.id)", path=transcript.source
            )
        return rename_session(transcript, (b"id", b"session_id"), session_id, old=old)

    def fork_path(self, original: str, session_id: str) -> str:
        stamp = run_time().strftime("%Y-%m-%dT%H-%M-%S")
        return os.path.join(os.path.dirname(original), f"rollout-{stamp}-{session_id}.jsonl")

    def resume_command(self, session_id: str) -> str:
        return f"codex resume {session_id}"

    def sniff(self, sample: Sequence[Record]) -> int:
        records = [r.data for r in sample if isinstance(r.data, dict)]
        if not records:
            return 0
        hits = sum(1 for i, data in enumerate(records) if _codex_shaped(data, first=i == 0))
        if hits * 2 >= len(records):
            return 95
        return 40 if hits else 0

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        index = 0
        call_names: dict[str, str] = {}
        last_total: list[Any] = [None]
        last_usage: Usage | None = None
        model: str | None = None  # from the newest turn_context
        requests: list[Message] = []  # the user's requests since the last compaction
        compacted_pending = False  # a `compacted` record whose context_compacted event has not come yet
        for rec_index, rec in records:
            data = rec.data
            if not isinstance(data, dict):
                continue
            envelope = _is_envelope(data)
            rtype = data.get("type")
            if envelope and rtype == "turn_context":
                named = data["payload"].get("model") if isinstance(data["payload"], dict) else None
                model = named if isinstance(named, str) and named else model
                continue
            if envelope and rtype == "event_msg":
                payload = data["payload"]
                etype = payload.get("type")
                if etype == "token_count":
                    usage = _usage(payload, rec.line, last_total)
                    if usage is not None:
                        if model is not None:
                            usage = replace(usage, model=model)
                        last_usage = usage
                        yield usage
                elif etype == "context_compacted":
                    if compacted_pending:
                        compacted_pending = False  # the event that mirrors the compacted record
                    else:
                        yield Boundary(
                            kind="codex_context_compacted", line=rec.line, pre_tokens=_pre(last_usage)
                        )
                continue
            if envelope and rtype == "compacted":
                compacted_pending = True
                carried = _carried(data["payload"], rec.line, requests)
                requests = [m for m in carried if m.is_request]
                yield Boundary(
                    kind="codex_compacted",
                    line=rec.line,
                    pre_tokens=_pre(last_usage),
                    resets=True,  # Codex resumes from its last compacted record
                    index=index,
                    carried=carried,
                )
                continue
            if envelope and rtype == "response_item":
                payload, dialect = data["payload"], "current"
            elif not envelope and rtype in ITEM_TYPES and "payload" not in data:
                payload, dialect = data, "legacy"
            else:
                continue
            parsed = parse_item(payload, rec.line, call_names)
            if parsed is None:
                continue
            compacted_pending = False
            role, blocks, meta = parsed
            # Names stay known for the whole file: a call may be answered more than once.
            call_names.update((b.id, b.name) for b in blocks if isinstance(b, ToolUseBlock))
            meta["dialect"] = dialect
            if envelope and isinstance(data.get("timestamp"), str):
                meta["timestamp"] = data["timestamp"]
            importance = data.get("importance", payload.get("importance"))
            message = Message(
                role=role,
                blocks=blocks,
                line=rec.line,
                index=index,
                records=(rec_index,),
                importance=importance if isinstance(importance, str) else None,
                meta=meta,
                raw=data,
            )
            if message.is_request and request_text(message):
                requests.append(message)
            if (reset := compaction_block_boundary(message)) is not None:
                yield reset
            yield message
            index += 1

    def write_compacted(
        self, transcript: Transcript, outputs: Mapping[int, Sequence[Message]], *, archive_id: str
    ) -> tuple[Record, ...]:
        """The rollout with ``outputs`` in place of its conversation, recorded the way Codex records it.

        Kept messages keep their exact lines; changed ones are re-encoded; dropped items go, with their
        UI mirrors, tool events and token counts. A summary becomes what Codex writes when it compacts:
        a ``compacted`` record whose ``replacement_history`` is the history before it (so a resumed
        session keeps the pinned prefix), a ``context_compacted`` event, and the summary as a user
        message (so readers that count response items, like ctxc, see it too). Legacy rollouts have no
        compacted record: the summary is a plain user item there. ``archive_id`` is already cited in the
        summary and placeholder texts, so nothing else needs it.
        """
        del archive_id
        return _CompactedWriter(self, transcript, outputs).write()

    def encode_message(self, message: Message) -> dict[str, Any]:
        raw = message.raw
        if raw is None:
            item = _new_item(message)
            if message.meta.get("dialect") == "legacy":
                return item
            ts = message.meta.get("timestamp")
            return {
                "timestamp": ts if isinstance(ts, str) else run_timestamp(),
                "type": "response_item",
                "payload": item,
            }
        if not isinstance(raw, dict):
            raise ValueError("a Codex message comes from exactly one record")
        if _is_envelope(raw):
            return {**raw, "payload": _encode_item(raw["payload"], message)}
        return _encode_item(raw, message)


def _carried(payload: Any, line: int, requests: Sequence[Message]) -> tuple[Message, ...]:
    """What Codex resumes with from a ``compacted`` record: its ``replacement_history`` or, for records
    that have none (older clients), the user's requests so far and the summary as a user message."""
    if not isinstance(payload, dict):
        return ()
    if isinstance(payload.get("replacement_history"), list):
        return history_messages(payload, line)
    summary = payload.get("message")
    tail = (
        (
            Message(
                role="user", blocks=(TextBlock(text=summary),), line=line, meta={"is_compact_summary": True}
            ),
        )
        if isinstance(summary, str) and summary
        else ()
    )
    return (*(replace(m, line=line) for m in requests), *tail)


def _pre(usage: Usage | None) -> int | None:
    # Context of the last recorded call plus what it produced: the history size compaction replaced.
    return None if usage is None else usage.context + usage.output


register(CodexAdapter())
