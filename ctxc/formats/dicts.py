"""Message dicts as the APIs take them (Anthropic or OpenAI shape, decided per message) to ctxc messages
and back: one dict per chat-log line or dataset turn, or a list for :class:`ctxc.ContextManager` (which
may also be OpenAI Responses-API input items, read and written as Codex's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import orjson

from ctxc.errors import UsageError, ValidationError
from ctxc.formats.base import importance_of, recorded_usage
from ctxc.formats.codex_items import ITEM_TYPES, encode_message, new_item, parse_item
from ctxc.formats.shapes import (
    ANTHROPIC_ONLY_PARTS,
    OPENAI_ONLY_PARTS,
    content_text,
    encode_anthropic_content,
    encode_openai_content,
    encode_openai_part,
    encode_openai_tool_call,
    openai_role,
    parse_anthropic_content,
    parse_openai_content,
    parse_openai_tool_call,
    parse_tool_arguments,
    tool_arguments,
)
from ctxc.model import (
    MISSING_IDS,
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    Usage,
)

Dialect = Literal["anthropic", "openai"]
#: How a whole list is written: a chat dialect, or OpenAI Responses-API input items.
Shape = Literal["anthropic", "openai", "responses"]
SHAPES: tuple[Shape, ...] = ("anthropic", "openai", "responses")
#: How the message's ``content`` was written, so an unchanged message is written back the same way.
ContentForm = Literal["string", "list", "null", "absent", "other"]

#: Content parts and keys only one of the two APIs uses.
_ANTHROPIC_BLOCK_TYPES = ANTHROPIC_ONLY_PARTS | {"tool_use", "tool_result", "thinking", "redacted_thinking"}
_OPENAI_PART_TYPES = OPENAI_ONLY_PARTS | {"image_url", "refusal"}
_OPENAI_KEYS = ("tool_calls", "function_call", "tool_call_id", "reasoning_content", "refusal", "audio")
_ANTHROPIC_KEYS = ("stop_reason", "stop_sequence")
#: Responses-API parts: a line using them is a Codex legacy item, not a chat message.
_RESPONSES_PART_TYPES = frozenset({"input_text", "output_text"})
#: Usage counts as the two APIs name them: input, output, cache read, cache write.
_ANTHROPIC_USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
_OPENAI_USAGE = ("prompt_tokens", "completion_tokens", "cached_tokens", "")
#: Keys OpenAI-compatible providers use for the model's reasoning text.
_REASONING_KEYS = ("reasoning_content", "reasoning")


@dataclasses.dataclass(slots=True)
class ChatState:
    """What parsing one conversation remembers: tool names by call id, and unanswered calls in call order
    (a result without an id, such as a legacy ``role: function`` message, answers the oldest)."""

    dialect: Dialect | None = None
    names: dict[str, str] = dataclasses.field(default_factory=dict)
    open_calls: dict[str, str] = dataclasses.field(default_factory=dict)

    def call(self, call_id: str, name: str) -> None:
        self.names[call_id] = name
        self.open_calls[call_id] = name

    def answer(self, call_id: str | None, name: str | None = None) -> tuple[str | None, str | None]:
        """Close the call a result answers; without an id, the oldest open call (of that name if any)."""
        if call_id is None:
            same_name = [k for k, v in self.open_calls.items() if v == name]
            call_id = next(iter(same_name or self.open_calls), None)
            if call_id is None:
                return None, name
        self.open_calls.pop(call_id, None)
        return call_id, name or self.names.get(call_id)


def _content_form(obj: Mapping[str, Any]) -> ContentForm:
    content = obj.get("content")
    if content is None:
        return "null" if "content" in obj else "absent"
    return "string" if isinstance(content, str) else "list" if isinstance(content, list) else "other"


def _part_types(content: Any) -> set[str]:
    if not isinstance(content, list):
        return set()
    return {str(p.get("type")) for p in content if isinstance(p, dict) and "type" in p}


def uses_responses_parts(obj: Mapping[str, Any]) -> bool:
    """True for Codex legacy items, whose parts are Responses-API ``input_text``/``output_text``."""
    return bool(_part_types(obj.get("content")) & _RESPONSES_PART_TYPES)


def is_responses_item(obj: Any) -> bool:
    """Whether a dict is a Responses-API input item no chat shape has: a call, its output, reasoning...
    or a message of ``input_text``/``output_text`` parts."""
    if not isinstance(obj, Mapping):
        return False
    itype = obj.get("type")
    item = isinstance(itype, str) and itype in ITEM_TYPES and itype != "message"
    return item or uses_responses_parts(obj)


def detect_dialect(obj: Mapping[str, Any]) -> Dialect | None:
    """The dialect a message line shows, or None when it is valid in both (a string, only text parts)."""
    role = obj.get("role")
    if role in ("tool", "function", "developer") or any(k in obj for k in _OPENAI_KEYS):
        return "openai"
    content = obj.get("content")
    if "content" in obj and content is None:
        return "openai"
    types = _part_types(content)
    if types & _OPENAI_PART_TYPES:
        return "openai"
    anthropic_keys = any(k in obj for k in _ANTHROPIC_KEYS) or obj.get("type") == "message"
    if types & _ANTHROPIC_BLOCK_TYPES or anthropic_keys:
        return "anthropic"
    sourced = "image" in types and any(
        isinstance(p, dict) and p.get("type") == "image" and "source" in p for p in content or ()
    )
    return "anthropic" if sourced else None


def is_chat_message(obj: Any) -> bool:
    """Whether a dict is a conversation message this module parses (not a ``_`` pseudo-line)."""
    return isinstance(obj, dict) and openai_role(obj.get("role")) is not None


def parse_usage(usage: Any, line: int) -> Usage | None:
    """Usage recorded on a message (an API response stored as a line), Anthropic or OpenAI field names."""
    if not isinstance(usage, dict):
        return None
    if "input_tokens" in usage or "output_tokens" in usage:
        return recorded_usage(usage, _ANTHROPIC_USAGE, line)
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        details = usage.get("prompt_tokens_details")
        counts = {**usage, "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else 0}
        return recorded_usage(counts, _OPENAI_USAGE, line, cached_in_input=True)
    return None


def _openai_tool_result(obj: Mapping[str, Any], call_id: str, name: str | None) -> ToolResultBlock:
    content = obj.get("content")
    images = tuple(b for b in parse_openai_content(content) if isinstance(b, ImageBlock))
    return ToolResultBlock(tool_use_id=call_id, text=content_text(content), name=name, raw=obj, images=images)


def parse_chat_message(
    obj: Mapping[str, Any], state: ChatState, *, synth_id: str
) -> tuple[Role, tuple[Block, ...], dict[str, Any]] | None:
    """One message dict as (role, blocks, meta), or None when it is not a conversation message; ``synth_id``
    (unique per message in the file) names calls and results without an id."""
    if not is_chat_message(obj):
        return None
    source_role = obj["role"]
    role = openai_role(source_role)
    assert role is not None
    found = detect_dialect(obj)
    dialect: Dialect = found or state.dialect or "openai"
    meta: dict[str, Any] = {
        "dialect": dialect,
        "dialect_from": "line" if found else ("file" if state.dialect else "default"),
        "content": _content_form(obj),
    }
    if found is not None:
        state.dialect = found
    if source_role != role:
        meta["source_role"] = source_role
    if isinstance(obj.get("name"), str):
        meta["name"] = obj["name"]
    if dialect == "anthropic":
        blocks: list[Block] = []
        for block in parse_anthropic_content(obj.get("content")):
            if isinstance(block, ToolResultBlock):
                blocks.append(block.named(state.answer(block.tool_use_id)[1]))
                continue
            if isinstance(block, ToolUseBlock):
                state.call(block.id, block.name)
            blocks.append(block)
        return role, tuple(blocks), meta
    if role == "tool":
        return role, (_parse_openai_result(obj, state, synth_id, meta),), meta
    return role, _parse_openai(obj, state, synth_id, meta), meta


def _parse_openai_result(
    obj: Mapping[str, Any], state: ChatState, synth_id: str, meta: dict[str, Any]
) -> ToolResultBlock:
    call_id = obj.get("tool_call_id")
    given_name = obj.get("name") if isinstance(obj.get("name"), str) else None
    paired, name = state.answer(call_id if isinstance(call_id, str) else None, given_name)
    result = _openai_tool_result(obj, paired or f"{synth_id}-result", name)
    if not isinstance(call_id, str):
        meta["synthesized_id"] = True
        if obj["role"] == "tool":  # a legacy ``function`` result has no id by design; this needs one
            meta[MISSING_IDS] = (result.tool_use_id,)
    return result


def _parse_openai(
    obj: Mapping[str, Any], state: ChatState, synth_id: str, meta: dict[str, Any]
) -> tuple[Block, ...]:
    blocks: list[Block] = []
    key = next((k for k in _REASONING_KEYS if isinstance(obj.get(k), str)), None)
    if key is not None:
        meta["reasoning_key"] = key
        blocks.append(ThinkingBlock(text=obj[key]))
    blocks.extend(parse_openai_content(obj.get("content")))
    calls = obj.get("tool_calls")
    if isinstance(calls, list):
        missing: list[str] = []
        for n, call in enumerate(calls):
            block = parse_openai_tool_call(call)
            if isinstance(block, ToolUseBlock):
                if not isinstance(call.get("id"), str) or not call["id"]:  # absent, empty or null
                    block = dataclasses.replace(block, id=f"{synth_id}-{n}")
                    missing.append(block.id)
                state.call(block.id, block.name)
            blocks.append(block)
        if missing:
            meta[MISSING_IDS] = tuple(missing)
    fc = obj.get("function_call")
    if isinstance(fc, dict):
        meta["function_call"] = True
        name, arguments = str(fc.get("name", "")), parse_tool_arguments(fc.get("arguments"))
        blocks.append(ToolUseBlock(id=synth_id, name=name, input=arguments, raw=fc))
        state.call(synth_id, name)
    return tuple(blocks)


def _kept_content(out: dict[str, Any], form: Any, blocks: Sequence[Block]) -> bool:
    """Keep content the log wrote absent, null or odd (neither a string nor a list) while it still is."""
    if form == "absent" and not blocks:
        out.pop("content", None)
    elif form == "null" and not blocks:
        out["content"] = None
    else:
        odd = len(blocks) == 1 and isinstance(blocks[0], UnknownBlock) and blocks[0].raw is out.get("content")
        return form == "other" and odd
    return True


def _encode_anthropic(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = dict(message.raw) if isinstance(message.raw, dict) else {}
    out["role"] = "user" if message.role == "tool" else message.role
    form = message.meta.get("content")
    # Names are filled in from the call when reading; neither dialect stores them in the block itself.
    blocks = [b.named(None) if isinstance(b, ToolResultBlock) else b for b in message.blocks]
    if not _kept_content(out, form, blocks):
        out["content"] = encode_anthropic_content(blocks, as_string=form in ("string", None))
    return out


#: (role, source role) pairs written as the source role in the OpenAI dialect.
_SOURCE_ROLES: dict[tuple[str, Any], str] = {
    ("system", "developer"): "developer",
    ("tool", "function"): "function",
}


def _encode_openai_tool(message: Message, out: dict[str, Any]) -> dict[str, Any]:
    results = [b for b in message.blocks if isinstance(b, ToolResultBlock)]
    if len(results) > 1:
        raise ValidationError(
            f"message {message.index}: an OpenAI tool message carries one result, not {len(results)} "
            "(convert with ctxc.convert.to_openai to split them)"
        )
    form = message.meta.get("content")
    if not results:
        out["content"] = "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock))
        return out
    block = results[0]
    if isinstance(block.raw, dict) and _openai_tool_result(block.raw, block.tool_use_id, block.name) == block:
        if "content" in block.raw:  # the result is unchanged: its content as the log wrote it
            out["content"] = block.raw["content"]
    elif form == "list" or block.images:
        parts: list[Any] = [{"type": "text", "text": block.text}] if block.text or not block.images else []
        parts.extend(encode_openai_part(i) for i in block.images)
        out["content"] = parts
    else:
        out["content"] = block.text
    if out["role"] == "function":
        if block.name is not None:
            out["name"] = block.name
    elif block.tool_use_id not in message.meta.get(MISSING_IDS, ()):
        out["tool_call_id"] = block.tool_use_id  # also an id made up on reading, once repair adopted it
    return out


def _encode_function_call(block: ToolUseBlock) -> Any:
    raw = block.raw
    if (
        isinstance(raw, dict)
        and raw.get("name", "") == block.name
        and parse_tool_arguments(raw.get("arguments")) == block.input
    ):
        return raw
    base = dict(raw) if isinstance(raw, dict) else {}
    return {**base, "name": block.name, "arguments": tool_arguments(block.input)}


def _encode_call(block: Block, missing: Sequence[str]) -> Any:
    raw = block.raw
    if not isinstance(block, ToolUseBlock):
        return raw
    if isinstance(raw, dict) and not raw.get("id") and block.id in missing:
        # The id was synthesized on reading: the call is unchanged when all but the id match.
        again = parse_openai_tool_call(raw)
        if isinstance(again, ToolUseBlock) and dataclasses.replace(again, id=block.id) == block:
            return raw
        encoded = encode_openai_tool_call(block)
        if isinstance(encoded, dict):
            encoded.pop("id", None)
        return encoded
    return encode_openai_tool_call(block)


def _encode_openai(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = dict(message.raw) if isinstance(message.raw, dict) else {}
    out["role"] = _SOURCE_ROLES.get((message.role, message.meta.get("source_role")), message.role)
    if message.role == "tool":
        return _encode_openai_tool(message, out)
    meta = message.meta
    thinking: list[str] = []
    calls: list[Block] = []
    content: list[Block] = []
    # tool_calls entries that are not objects were kept as unknown blocks; they go back into tool_calls.
    raw_calls = out.get("tool_calls")
    odd_calls = {id(c) for c in raw_calls if not isinstance(c, dict)} if isinstance(raw_calls, list) else ()
    for block in message.blocks:
        if isinstance(block, ThinkingBlock):
            thinking.append(block.text)
        elif isinstance(block, ToolUseBlock) or (
            isinstance(block, UnknownBlock) and id(block.raw) in odd_calls
        ):
            calls.append(block)
        elif isinstance(block, ToolResultBlock):
            raise ValidationError(
                f"message {message.index}: an OpenAI {message.role} message cannot carry a tool result "
                "(convert with ctxc.convert.to_openai)"
            )
        else:
            content.append(block)

    form = meta.get("content")
    if not _kept_content(out, form, content):
        encoded = encode_openai_content(content, as_string=form in ("string", "null", "absent", None))
        if encoded is None and message.role != "assistant":
            encoded = ""  # only an assistant message may have null content
        out["content"] = encoded

    reasoning_key = meta.get("reasoning_key", "reasoning_content")
    if thinking:
        out[reasoning_key] = "\n".join(thinking)
    else:
        out.pop(reasoning_key, None)

    if meta.get("function_call") and calls and isinstance(calls[0], ToolUseBlock):
        out["function_call"] = _encode_function_call(calls[0])
        calls = calls[1:]
    elif meta.get("function_call"):
        out.pop("function_call", None)
    if calls:
        missing = meta.get(MISSING_IDS, ())
        out["tool_calls"] = [_encode_call(c, missing) for c in calls]
    elif out.get("tool_calls"):
        del out["tool_calls"]  # every call was removed; an empty list or null the log wrote stays
    return out


def encode_chat_message(message: Message) -> dict[str, Any]:
    """The message dict for ``message`` in its own dialect (``meta["dialect"]``, OpenAI when unknown)."""
    if message.meta.get("dialect") == "anthropic":
        return _encode_anthropic(message)
    return _encode_openai(message)


def detect_shape(messages: Sequence[Mapping[str, Any]]) -> Shape:
    """Responses when an item is a Responses-API one, Anthropic when a message is Anthropic-only
    (tool_use/tool_result blocks...), else OpenAI."""
    if any(is_responses_item(m) for m in messages):
        return "responses"
    found = (detect_dialect(m) for m in messages if isinstance(m, Mapping))
    return next((d for d in found if d is not None), "openai")


def to_messages(messages: Sequence[Mapping[str, Any]], *, shape: Shape | None = None) -> list[Message]:
    """ctxc messages for a dict list (indexes are positions in the list; non-messages are skipped)."""
    if shape == "responses":
        return _items_to_messages(messages)
    state = ChatState(shape)
    out: list[Message] = []
    for i, obj in enumerate(messages):
        parsed = parse_chat_message(obj, state, synth_id=f"fc-{i}")
        if parsed is not None:
            role, blocks, meta = parsed
            out.append(Message(role, blocks, i + 1, i, importance=importance_of(obj), meta=meta, raw=obj))
    return out


def _items_to_messages(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    names: dict[str, str] = {}  # tool names by call id, for the outputs
    out: list[Message] = []
    for i, given in enumerate(items):
        itype = given.get("type") if isinstance(given, Mapping) else None
        item: Mapping[str, Any]
        if itype is None and is_chat_message(given):
            item = {"type": "message", **given}  # the type of a message item may be left out
        elif not isinstance(itype, str) or (itype == "message" and not is_chat_message(given)):
            continue  # not an item, or a message of no known role
        else:
            item = given
        parsed = parse_item(item, i + 1, names)
        if parsed is not None:
            role, blocks, meta = parsed
            names.update((b.id, b.name) for b in blocks if isinstance(b, ToolUseBlock))
            out.append(Message(role, blocks, i + 1, i, importance=importance_of(item), meta=meta, raw=item))
    return out


def from_messages(
    result: Sequence[Message], given: Sequence[Mapping[str, Any]], parsed: Sequence[Message], *, shape: Shape
) -> list[dict[str, Any]]:
    """Dicts for compacted ``result``: a message kept as it was is the very dict given (``parsed``
    are the messages read from ``given``); a new or changed one is encoded in ``shape``."""
    kept = {id(m): given[m.index] for m in parsed}
    by_json: dict[bytes, Mapping[str, Any]] | None = None
    out: list[dict[str, Any]] = []
    for m in result:
        original = kept.get(id(m))
        if original is None:
            encoded = _encode_dict(m, shape)
            if by_json is None:  # the first of equal dicts wins
                by_json = {json_bytes(obj): obj for obj in reversed(given)}
            original = by_json.get(json_bytes(encoded), encoded)
        out.append(original if isinstance(original, dict) else dict(original))
    return out


def _encode_dict(message: Message, shape: Shape) -> dict[str, Any]:
    if shape == "responses":
        # A changed item is rebuilt from its own keys; a new one (summary, missing output) is made.
        return encode_message(message) if message.raw is not None else new_item(message)
    if "dialect" not in message.meta:
        message = dataclasses.replace(message, meta={**message.meta, "dialect": shape})
    return encode_chat_message(message)


def json_bytes(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError as exc:
        raise UsageError(f"messages must be JSON-serialisable dicts: {exc}") from None
