"""Codex ResponseItems to (role, blocks, meta) and back (``meta["item_type"]``): calls' outputs are role
``tool``; web search (it has no output item), image generation, compaction and unknown items are UnknownBlocks
written back verbatim; ``ghost_snapshot`` (an undo checkpoint) is not conversation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxc.formats.base import run_timestamp
from ctxc.formats.shapes import (
    content_text,
    encode_openai_part,
    openai_role,
    parse_openai_content,
    parse_tool_arguments,
    tool_arguments,
)
from ctxc.model import (
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    dumps_compact,
)

#: Envelope ``type`` values of current rollouts (including the newer schema fixture's extras).
ENVELOPE_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted", "world_state"}
    | {"inter_agent_communication_metadata"}
)
#: ResponseItem types a legacy rollout holds bare.
ITEM_TYPES = frozenset(
    {"message", "reasoning", "function_call", "function_call_output", "custom_tool_call"}
    | {"custom_tool_call_output", "local_shell_call", "web_search_call", "ghost_snapshot", "tool_search_call"}
    | {"tool_search_output", "image_generation_call", "compaction", "compaction_summary", "agent_message"}
)
CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
RESULT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
_NEW_ROLE = {"system": "developer", "user": "user", "assistant": "assistant"}


def is_envelope(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("type"), str) and isinstance(data.get("payload"), dict) and "timestamp" in data


def item_role(value: Any) -> Role:
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
    # Encrypted parts (inter-agent messages) cost tokens ctxc cannot see: no countable text.
    return tuple(
        UnknownBlock(raw=b.raw, text="", type="encrypted_content")
        if isinstance(b, UnknownBlock) and b.type == "encrypted_content"
        else b
        for b in parse_openai_content(content)
    )


def _call_block(payload: Mapping[str, Any], line: int) -> ToolUseBlock:
    ptype = payload.get("type")
    call_id = str(payload.get("call_id") or payload.get("id") or f"codex-call-{line}")
    name = str(payload.get("name") or "")
    if ptype == "function_call":
        return ToolUseBlock(call_id, name, parse_tool_arguments(payload.get("arguments")), raw=payload)
    if ptype == "custom_tool_call":
        return ToolUseBlock(id=call_id, name=name, input=payload.get("input"), raw=payload)
    # local_shell_call: the built-in local_shell tool; its action ({type: exec, command, ...}) is the input.
    return ToolUseBlock(id=call_id, name="local_shell", input=payload.get("action"), raw=payload)


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
    field = {"tool_search_output": "tools", "tool_search_call": "arguments"}.get(str(ptype))
    return dumps_compact(payload.get(field) if field else payload)


def parse_item(
    payload: Mapping[str, Any], line: int, call_names: Mapping[str, str]
) -> tuple[Role, tuple[Block, ...], dict[str, Any]] | None:
    """Role, blocks and meta for one ResponseItem, or None when the item is not conversation."""
    ptype = payload.get("type")
    if not isinstance(ptype, str) or ptype == "ghost_snapshot":  # never sent to the model
        return None
    meta: dict[str, Any] = {"item_type": ptype}
    meta.update((k, v) for k in ("id", "call_id", "phase", "status") if isinstance(v := payload.get(k), str))
    passthrough = payload.get("internal_chat_message_metadata_passthrough") or payload.get("metadata")
    if isinstance(passthrough, dict) and isinstance(passthrough.get("turn_id"), str):
        meta["turn_id"] = passthrough["turn_id"]
    if ptype == "message":
        source_role = payload.get("role")
        role = item_role(source_role)
        if role == "system" or role != source_role:
            meta["source_role"] = source_role
        return role, _message_parts(payload.get("content")), meta
    if ptype == "agent_message":  # a message from another agent, fed to this model as input
        meta.update((k, v) for k in ("author", "recipient") if isinstance(v := payload.get(k), str))
        return "user", _message_parts(payload.get("content")), meta
    if ptype == "reasoning":
        parts = [p for k in ("summary", "content") if isinstance(payload.get(k), list) for p in payload[k]]
        return "assistant", tuple(_reasoning_part(p) for p in parts) or (ThinkingBlock(text=""),), meta
    if ptype in CALL_TYPES:
        return "assistant", (_call_block(payload, line),), meta
    if ptype in RESULT_TYPES:
        call_id = str(payload.get("call_id") or "")
        output = payload.get("output")
        if (code := _exit_code(output)) is not None:
            meta["exit_code"] = code
        text, images = _output_value(output)
        name = call_names.get(call_id)
        return "tool", (ToolResultBlock(call_id, text, name=name, raw=payload, images=images),), meta
    other: Role = "user" if ptype == "tool_search_output" else "assistant"
    return other, (UnknownBlock(raw=payload, text=_unknown_text(payload), type=ptype),), meta


def history_messages(payload: Mapping[str, Any], line: int = 0) -> tuple[Message, ...]:
    """The ``replacement_history`` of a ``compacted`` payload as messages (the model's new history), which
    have no record of their own."""
    history = payload.get("replacement_history")
    out: list[Message] = []
    names: dict[str, str] = {}
    for item in history if isinstance(history, list) else []:
        parsed = parse_item(item, line, names) if isinstance(item, dict) else None
        if parsed is None:
            continue
        role, blocks, meta = parsed
        if item.get("type") in ("compaction", "compaction_summary"):
            meta["is_compact_summary"] = True  # the summary the compaction made (encrypted, remotely)
        names.update((b.id, b.name) for b in blocks if isinstance(b, ToolUseBlock))
        out.append(Message(role=role, blocks=blocks, line=line, index=len(out), meta=meta, raw=item))
    return tuple(out)


def _text_part(block: Block, role: str) -> Any:
    if isinstance(block, TextBlock) and block.raw is None:
        return {"type": "output_text" if role == "assistant" else "input_text", "text": block.text}
    if isinstance(block, TextBlock | UnknownBlock | ImageBlock) and block.raw is not None:
        return encode_openai_part(block)
    raise ValueError(f"a Codex message item cannot hold a {block.kind} block without its source")


def _reasoning_out(block: Block) -> Any:
    if not isinstance(block, ThinkingBlock):
        raise ValueError(f"a Codex reasoning item cannot hold a {block.kind} block")
    if block.raw is None:
        return {"type": "summary_text", "text": block.text}
    if _reasoning_part(block.raw) == block:
        return block.raw
    return {**block.raw, "text": block.text} if isinstance(block.raw, dict) else block.text


def _output_out(block: ToolResultBlock, old: Any) -> Any:
    if _output_value(old) == (block.text, block.images):
        return old
    if isinstance(old, list) or (block.images and not isinstance(old, dict)):
        images = [i.raw for i in block.images if i.raw is not None]
        return [{"type": "input_text", "text": block.text}, *images]
    return {**old, "text": block.text} if isinstance(old, dict) else block.text


def _single(blocks: Sequence[Block], kind: type[Any], itype: str) -> Any:
    if len(blocks) != 1 or not isinstance(blocks[0], kind):
        raise ValueError(f"a Codex {itype} item holds exactly one {kind.__name__}")
    return blocks[0]


def _reasoning_item(payload: Mapping[str, Any], blocks: Sequence[Block]) -> dict[str, Any]:
    summary: list[Any] = []
    content: list[Any] = []
    old_content = payload.get("content")
    raw_text_ids = {id(p) for p in old_content} if isinstance(old_content, list) else set()
    for b in blocks:
        if isinstance(b, ThinkingBlock) and b.raw is None and not b.text:
            continue  # the placeholder of an item with no summary
        raw_text = id(b.raw) in raw_text_ids or (
            isinstance(b.raw, dict) and b.raw.get("type") == "reasoning_text"
        )
        (content if raw_text else summary).append(_reasoning_out(b))
    out = dict(payload)
    if summary or "summary" in payload:
        out["summary"] = summary
    if content or isinstance(old_content, list):
        out["content"] = content
    return out


def encode_item(payload: Mapping[str, Any], message: Message) -> dict[str, Any]:
    """Rebuild one ResponseItem from ``message``'s blocks; ``payload`` supplies every other key."""
    ptype = payload.get("type")
    blocks = message.blocks
    out = dict(payload)
    if ptype in ("message", "agent_message"):
        if ptype == "message" and item_role(payload.get("role")) != message.role:
            if message.role == "tool":
                raise ValueError("a Codex message item cannot have role tool")
            out["role"] = _NEW_ROLE[message.role]
        out["content"] = [_text_part(b, str(out.get("role") or "user")) for b in blocks]
        return out
    if ptype == "reasoning":
        return _reasoning_item(payload, blocks)
    if ptype in CALL_TYPES:
        call: ToolUseBlock = _single(blocks, ToolUseBlock, str(ptype))
        out["call_id"] = call.id
        if ptype == "function_call":
            out["name"] = call.name
            if parse_tool_arguments(payload.get("arguments")) != call.input:
                out["arguments"] = tool_arguments(call.input)
        elif ptype == "custom_tool_call":
            out["name"] = call.name
            out["input"] = tool_arguments(call.input)
        else:
            out["action"] = call.input
        return out
    if ptype in RESULT_TYPES:
        result: ToolResultBlock = _single(blocks, ToolResultBlock, str(ptype))
        output = _output_out(result, payload.get("output"))
        return {**payload, "call_id": result.tool_use_id, "output": output}
    unknown: UnknownBlock = _single(blocks, UnknownBlock, str(ptype))
    if not isinstance(unknown.raw, dict):
        raise ValueError(f"a Codex {ptype} item must be written from its recorded form")
    return dict(unknown.raw)


def new_item(message: Message) -> dict[str, Any]:
    """A ResponseItem for a message that has no source record (a summary a compactor inserts, say)."""
    blocks = message.blocks
    kinds = {b.kind for b in blocks}
    meta_type = message.meta.get("item_type")
    if "tool_result" in kinds:
        result: ToolResultBlock = _single(blocks, ToolResultBlock, "function_call_output")
        itype = meta_type if meta_type in RESULT_TYPES else "function_call_output"
        output = _output_out(result, []) if result.images else result.text
        return {"type": itype, "call_id": result.tool_use_id, "output": output}
    if "tool_use" in kinds:
        call: ToolUseBlock = _single(blocks, ToolUseBlock, "function_call")
        arguments = tool_arguments(call.input)
        if meta_type == "custom_tool_call":
            return {"type": meta_type, "call_id": call.id, "name": call.name, "input": arguments}
        return {"type": "function_call", "name": call.name, "arguments": arguments, "call_id": call.id}
    if blocks and kinds == {"thinking"}:
        kept = [b for b in blocks if b.raw is not None or (isinstance(b, ThinkingBlock) and b.text)]
        summary = [_reasoning_out(b) for b in kept]
        return {"type": "reasoning", "summary": summary, "content": None, "encrypted_content": None}
    if message.role == "tool":
        raise ValueError("a new Codex tool message needs a ToolResultBlock")
    keep_system = message.role == "system" and message.meta.get("source_role") == "system"
    role = "system" if keep_system else _NEW_ROLE[message.role]
    item: dict[str, Any] = {"type": "message", "role": role, "content": [_text_part(b, role) for b in blocks]}
    if isinstance(phase := message.meta.get("phase"), str):
        item["phase"] = phase
    return item


def encode_message(message: Message) -> dict[str, Any]:
    """``message``'s record: the recorded one with its item rebuilt, else a new item (legacy: bare)."""
    raw = message.raw
    if raw is None:
        item = new_item(message)
        if message.meta.get("dialect") == "legacy":
            return item
        stamp = ts if isinstance(ts := message.meta.get("timestamp"), str) else run_timestamp()
        return {"timestamp": stamp, "type": "response_item", "payload": item}
    if not isinstance(raw, dict):
        raise ValueError("a Codex message comes from exactly one record")
    envelope = is_envelope(raw)
    payload = raw["payload"] if envelope else raw
    results = (b for b in message.blocks if isinstance(b, ToolResultBlock))
    names = {b.tool_use_id: b.name for b in results if b.name is not None}
    parsed = parse_item(payload, message.line, names)
    if parsed is not None and parsed[:2] == (message.role, message.blocks):
        item = dict(payload)  # unchanged: the recorded item, keys and order as read
    else:
        item = encode_item(payload, message)
    return {**raw, "payload": item} if envelope else item


def encode_compacted(
    message_text: str, replacement_history: list[dict[str, Any]], timestamp: str
) -> dict[str, Any]:
    """A ``compacted`` record: Codex resumes from ``replacement_history`` instead of the items before it."""
    payload = {"message": message_text, "replacement_history": replacement_history}
    return {"timestamp": timestamp, "type": "compacted", "payload": payload}
