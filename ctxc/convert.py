"""Convert messages of any format into Anthropic or OpenAI chat lines.

The two dialects place tool results differently: Anthropic puts ``tool_result`` blocks in the user
message right after the assistant message holding the ``tool_use`` blocks; OpenAI wants one
``{"role": "tool"}`` message per result, right after the assistant message with the ``tool_calls``.
Source formats differ too (Codex writes each parallel call as its own item, Anthropic logs mix results
and text in one user message), so conversion first groups every result with the assistant turn that
made the call, then writes the turns in the target dialect. Pairing is kept by construction: a result
is always written after its call, in the message the target dialect expects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import orjson

from ctxc.errors import FormatError
from ctxc.formats.shapes import dumps_compact
from ctxc.model import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    UnknownBlock,
)

Target = Literal["chat-anthropic", "chat-openai"]
TARGETS: tuple[Target, ...] = ("chat-anthropic", "chat-openai")

#: Anthropic block types with no model block of their own, written back as recorded.
_ANTHROPIC_PASSTHROUGH = frozenset(
    {
        "document",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)
#: OpenAI content part types with no model block of their own.
_OPENAI_PASSTHROUGH = frozenset({"input_audio", "file"})
#: Where formats keep a thinking block's signature (Anthropic, pi).
_SIGNATURE_KEYS = ("signature", "thinkingSignature")
_ANTHROPIC_ID = re.compile(r"^[A-Za-z0-9_-]+$")


class _Turn:
    """One output message being planned, with the results of its calls gathered behind it."""

    __slots__ = ("after_results", "blocks", "results", "role", "source_role")

    def __init__(self, role: str, blocks: list[Block], source_role: str | None = None) -> None:
        self.role = role  # system | user | assistant | results (results whose call was not seen)
        self.blocks = blocks
        self.source_role = source_role
        self.results: list[ToolResultBlock] = []
        # A user turn left over from a message whose results moved to their call's turn.
        self.after_results = False

    def has_calls(self) -> bool:
        return any(isinstance(b, ToolUseBlock) for b in self.blocks)


def _said(block: Block) -> Block:
    """A terminal call (it ended the run; no result follows) as the text it says: in a chat API a call
    must be answered, and the agent's own client sends such a call as assistant text."""
    if isinstance(block, ToolUseBlock) and block.terminal:
        args = "" if block.input in ({}, None, "") else f" {dumps_compact(block.input)}"
        return TextBlock(f"[{block.name}]{args}")
    return block


def _plan(messages: Iterable[Message]) -> list[_Turn]:
    turns: list[_Turn] = []
    call_turn: dict[str, _Turn] = {}
    for message in messages:
        source_role = message.meta.get("source_role")
        results = [b for b in message.blocks if isinstance(b, ToolResultBlock)]
        rest = [_said(b) for b in message.blocks if not isinstance(b, ToolResultBlock)]
        for result in results:
            owner = call_turn.get(result.tool_use_id)
            if owner is not None:
                owner.results.append(result)
            elif turns and turns[-1].role == "results":
                turns[-1].blocks.append(result)
            else:
                turns.append(_Turn("results", [result]))
        if message.role == "assistant":
            last = turns[-1] if turns else None
            if last is not None and last.role == "assistant" and last.has_calls() and not last.results:
                # Calls split over several records (Codex parallel calls): one assistant turn, so that
                # all their results can follow it.
                last.blocks.extend(rest)
                turn = last
            else:
                turn = _Turn("assistant", list(rest), source_role)
                turns.append(turn)
            for block in rest:
                if isinstance(block, ToolUseBlock):
                    call_turn[block.id] = turn
        elif message.role == "system":
            turns.append(_Turn("system", list(rest), source_role))
        elif rest or not results:
            turn = _Turn("user", list(rest), source_role)
            turn.after_results = bool(results)
            turns.append(turn)
    return turns


# ---------------------------------------------------------------------------------------------- images


def _image_source(block: ImageBlock) -> tuple[str | None, str | None, str | None]:
    """(media type, base64 data, url) of an image, from whichever shape its format recorded."""
    raw = block.raw
    media, data, url = block.media_type, None, None
    if isinstance(raw, dict):
        source = raw.get("source")
        if isinstance(source, dict):  # Anthropic
            media = source.get("media_type") or media
            data = source.get("data") if source.get("type") == "base64" else None
            url = source.get("url") if isinstance(source.get("url"), str) else None
        else:
            image_url = raw.get("image_url")  # OpenAI chat part, Responses input_image
            if isinstance(image_url, dict):
                image_url = image_url.get("url")
            if isinstance(image_url, str):
                url = image_url
            elif isinstance(raw.get("data"), str):  # pi and other {data, mimeType} shapes
                data = raw["data"]
                media = raw.get("mimeType") or raw.get("media_type") or media
            elif isinstance(raw.get("url"), str):
                url = raw["url"]
    if url is not None and url.startswith("data:") and ";base64," in url:
        header, data = url.split(";base64,", 1)
        media, url = header[5:] or media, None
    return (media if isinstance(media, str) else None), (data if isinstance(data, str) else None), url


def _anthropic_image(block: ImageBlock) -> dict[str, Any]:
    media, data, url = _image_source(block)
    if data is not None:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media or "image/png", "data": data},
        }
    if url is not None:
        return {"type": "image", "source": {"type": "url", "url": url}}
    # The log kept no image data (redacted or stripped): say so instead of writing an invalid block.
    return {"type": "text", "text": "[image]"}


def _openai_image(block: ImageBlock) -> dict[str, Any]:
    media, data, url = _image_source(block)
    if data is not None:
        return {"type": "image_url", "image_url": {"url": f"data:{media or 'image/png'};base64,{data}"}}
    if url is not None:
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "text", "text": "[image]"}


# ------------------------------------------------------------------------------------------- anthropic


class _AnthropicIds:
    """Tool ids made valid for the Anthropic API (``[A-Za-z0-9_-]+``), the same way for a call and its result.

    Kimi ids such as ``Bash:1`` are rewritten; a rewrite that would collide with another id gets a suffix.
    """

    def __init__(self) -> None:
        self._map: dict[str, str] = {}
        self._used: set[str] = set()

    def __call__(self, tool_id: str) -> str:
        if tool_id in self._map:
            return self._map[tool_id]
        new = tool_id if _ANTHROPIC_ID.match(tool_id) else re.sub(r"[^A-Za-z0-9_-]", "_", tool_id) or "id"
        base, n = new, 1
        while new in self._used:
            n += 1
            new = f"{base}_{n}"
        self._map[tool_id] = new
        self._used.add(new)
        return new


def _signature(block: ThinkingBlock) -> str | None:
    if isinstance(block.raw, dict):
        for key in _SIGNATURE_KEYS:
            value = block.raw.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def _anthropic_result(block: ToolResultBlock, ids: _AnthropicIds) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": ids(block.tool_use_id)}
    if block.images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": block.text}] if block.text else []
        parts.extend(_anthropic_image(i) for i in block.images)
        out["content"] = parts
    else:
        out["content"] = block.text
    if block.is_error:
        out["is_error"] = True
    return out


def _anthropic_block(block: Block, ids: _AnthropicIds) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        if isinstance(block.raw, dict) and block.raw.get("type") == "redacted_thinking":
            return dict(block.raw)
        signature = _signature(block)
        if not block.text and signature is None:
            return None  # an encrypted reasoning item of another vendor: nothing Anthropic can take
        out: dict[str, Any] = {"type": "thinking", "thinking": block.text}
        if signature is not None:
            out["signature"] = signature
        return out
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": ids(block.id), "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        return _anthropic_result(block, ids)
    if isinstance(block, ImageBlock):
        return _anthropic_image(block)
    if isinstance(block.raw, dict) and block.raw.get("type") in _ANTHROPIC_PASSTHROUGH:
        return dict(block.raw)
    return {"type": "text", "text": block.text} if block.text else None


def _anthropic_content(blocks: Sequence[Block], ids: _AnthropicIds) -> str | list[dict[str, Any]]:
    out = [b for b in (_anthropic_block(block, ids) for block in blocks) if b is not None]
    if len(out) == 1 and out[0]["type"] == "text":
        return str(out[0]["text"])
    return out


def _plain_text(blocks: Sequence[Block]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock | UnknownBlock) and b.text)


def _anthropic_lines(turns: list[_Turn]) -> list[dict[str, Any]]:
    ids = _AnthropicIds()
    lines: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "system":
            lines.append({"role": "system", "content": _plain_text(turn.blocks)})
        elif turn.role == "results":
            lines.append({"role": "user", "content": [_anthropic_result(b, ids) for b in _results(turn)]})
        elif turn.role == "assistant":
            lines.append({"role": "assistant", "content": _anthropic_content(turn.blocks, ids)})
            if turn.results:
                lines.append({"role": "user", "content": [_anthropic_result(r, ids) for r in turn.results]})
        else:
            content = _anthropic_content(turn.blocks, ids)
            previous = lines[-1] if lines else None
            if (
                turn.after_results
                and previous is not None
                and previous["role"] == "user"
                and isinstance(previous["content"], list)
                and any(b.get("type") == "tool_result" for b in previous["content"])
            ):
                # Text that came with the results stays in their message, after them.
                extra = [{"type": "text", "text": content}] if isinstance(content, str) else content
                previous["content"].extend(extra)
            else:
                lines.append({"role": "user", "content": content})
    return lines


def _results(turn: _Turn) -> list[ToolResultBlock]:
    return [b for b in turn.blocks if isinstance(b, ToolResultBlock)]


def to_anthropic(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Chat lines in the Anthropic dialect (system lines as ``{"role": "system"}``) for one conversation."""
    return _anthropic_lines(_plan(messages))


# ---------------------------------------------------------------------------------------------- openai


def _openai_parts(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_openai_image(block))
        elif isinstance(block, UnknownBlock):
            if isinstance(block.raw, dict) and block.raw.get("type") in _OPENAI_PASSTHROUGH:
                parts.append(dict(block.raw))
            elif block.text:
                parts.append({"type": "text", "text": block.text})
    return parts


def _openai_content(blocks: Sequence[Block]) -> str | list[dict[str, Any]] | None:
    parts = _openai_parts(blocks)
    if not parts:
        return None
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _openai_tool_message(block: ToolResultBlock) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": block.text}


def _openai_results(results: Sequence[ToolResultBlock]) -> list[dict[str, Any]]:
    lines = [_openai_tool_message(r) for r in results]
    # Tool messages carry text only; images a tool returned follow as one user message.
    images = [_openai_image(i) for r in results for i in r.images]
    if images:
        lines.append({"role": "user", "content": images})
    return lines


def _openai_assistant(turn: _Turn) -> dict[str, Any]:
    content_blocks = [b for b in turn.blocks if not isinstance(b, ThinkingBlock | ToolUseBlock)]
    reasoning = "\n".join(b.text for b in turn.blocks if isinstance(b, ThinkingBlock) and b.text)
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {
                "name": b.name,
                "arguments": b.input if isinstance(b.input, str) else dumps_compact(b.input),
            },
        }
        for b in turn.blocks
        if isinstance(b, ToolUseBlock)
    ]
    content = _openai_content(content_blocks)
    out: dict[str, Any] = {"role": "assistant", "content": content if content is not None or calls else ""}
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = calls
    return out


def _openai_lines(turns: list[_Turn]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "system":
            role = "developer" if turn.source_role == "developer" else "system"
            lines.append({"role": role, "content": _plain_text(turn.blocks)})
        elif turn.role == "results":
            lines.extend(_openai_results(_results(turn)))
        elif turn.role == "assistant":
            lines.append(_openai_assistant(turn))
            lines.extend(_openai_results(turn.results))
        else:
            content = _openai_content(turn.blocks)
            lines.append({"role": "user", "content": "" if content is None else content})
    return lines


def to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Chat lines in the OpenAI dialect (``tool_calls``, a ``tool`` message per result), one conversation."""
    return _openai_lines(_plan(messages))


# ---------------------------------------------------------------------------------------------- files


def convert_messages(messages: Iterable[Message], target: str) -> list[dict[str, Any]]:
    if target == "chat-anthropic":
        return to_anthropic(messages)
    if target == "chat-openai":
        return to_openai(messages)
    raise FormatError(f"cannot convert to {target!r} (targets: {', '.join(TARGETS)})")


def convert_transcript(transcript: Transcript, target: str) -> bytes:
    """A transcript as a JSONL chat file in ``target`` ("chat-anthropic" or "chat-openai").

    A transcript of several conversations (a dataset) is written one after the other, each started by a
    ``{"role": "_conversation", "index": n}`` line, a pseudo-line the ``chat`` reader understands and
    keeps out of the messages (as it does Kimi's ``_checkpoint`` lines).
    """
    if target not in TARGETS:
        raise FormatError(f"cannot convert to {target!r} (targets: {', '.join(TARGETS)})")
    groups: dict[int, list[Message]] = {}
    for message in transcript.messages:
        groups.setdefault(message.conversation, []).append(message)
    marked = len(groups) > 1
    out: list[bytes] = []
    for number in sorted(groups):
        if marked:
            out.append(orjson.dumps({"role": "_conversation", "index": number}) + b"\n")
        out.extend(orjson.dumps(line) + b"\n" for line in convert_messages(groups[number], target))
    return b"".join(out)
