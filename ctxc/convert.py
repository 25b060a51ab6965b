"""Convert messages of any format into Anthropic or OpenAI chat lines: every result is grouped with the
assistant turn that made its call, then the turns are written in the target dialect."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from ctxc.errors import FormatError
from ctxc.formats.shapes import ANTHROPIC_ONLY_PARTS, OPENAI_ONLY_PARTS, tool_arguments
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
    dumps_compact,
)

Target = Literal["chat-anthropic", "chat-openai"]
TARGETS: tuple[Target, ...] = ("chat-anthropic", "chat-openai")

#: Where formats keep a thinking block's signature (Anthropic, pi).
_SIGNATURE_KEYS = ("signature", "thinkingSignature")
_ANTHROPIC_ID = re.compile(r"^[A-Za-z0-9_-]+$")
#: An image the log kept no data of (redacted or stripped): said so instead of an invalid block.
_NO_IMAGE = {"type": "text", "text": "[image]"}


@dataclass(slots=True)
class _Turn:
    """One output message being planned, with the results of its calls gathered behind it."""

    role: str  # system | user | assistant | results (results whose call was not seen)
    blocks: list[Block]
    source_role: str | None = None
    results: list[ToolResultBlock] = field(default_factory=list)
    #: A user turn left over from a message whose results moved to their call's turn.
    after_results: bool = False


def _said(block: Block) -> Block:
    """A terminal call (it ended the run, no result follows) as the assistant text its client sends."""
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
                turns[-1].results.append(result)
            else:
                turns.append(_Turn("results", [], results=[result]))
        if message.role == "assistant":
            last = turns[-1] if turns else None
            calls = last is not None and any(isinstance(b, ToolUseBlock) for b in last.blocks)
            if last is not None and last.role == "assistant" and calls and not last.results:
                # Calls split over several records (Codex parallel calls): one turn for all their results.
                last.blocks.extend(rest)
                turn = last
            else:
                turn = _Turn("assistant", list(rest), source_role)
                turns.append(turn)
            call_turn.update((b.id, turn) for b in rest if isinstance(b, ToolUseBlock))
        elif message.role == "system":  # one without text (a Claude Code turn_duration record) says nothing
            if _plain_text(rest):
                turns.append(_Turn("system", list(rest), source_role))
        elif rest or not results:
            turns.append(_Turn("user", list(rest), source_role, after_results=bool(results)))
    return turns


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
        source = {"type": "base64", "media_type": media or "image/png", "data": data}
        return {"type": "image", "source": source}
    return dict(_NO_IMAGE) if url is None else {"type": "image", "source": {"type": "url", "url": url}}


def _openai_image(block: ImageBlock) -> dict[str, Any]:
    media, data, url = _image_source(block)
    url = f"data:{media or 'image/png'};base64,{data}" if data is not None else url
    return dict(_NO_IMAGE) if url is None else {"type": "image_url", "image_url": {"url": url}}


class _AnthropicIds:
    """Tool ids made valid for the Anthropic API (``[A-Za-z0-9_-]+``), the same for a call and its result:
    Kimi ids such as ``Bash:1`` are rewritten, with a suffix where a rewrite would collide."""

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


def _anthropic_result(block: ToolResultBlock, ids: _AnthropicIds) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": ids(block.tool_use_id),
        "content": block.text,
    }
    if block.images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": block.text}] if block.text else []
        out["content"] = parts + [_anthropic_image(i) for i in block.images]
    if block.is_error:
        out["is_error"] = True
    return out


def _anthropic_block(block: Block, ids: _AnthropicIds) -> dict[str, Any] | None:
    raw = block.raw if isinstance(block.raw, dict) else {}
    if isinstance(block, TextBlock):  # the API refuses an empty one (OpenAI's "" beside tool calls)
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ThinkingBlock):
        if raw.get("type") == "redacted_thinking":
            return dict(raw)
        signature = next((v for k in _SIGNATURE_KEYS if isinstance(v := raw.get(k), str) and v), None)
        if not block.text and signature is None:
            return None  # an encrypted reasoning item of another vendor: nothing Anthropic can take
        out: dict[str, Any] = {"type": "thinking", "thinking": block.text}
        return out if signature is None else {**out, "signature": signature}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": ids(block.id), "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        return _anthropic_result(block, ids)
    if isinstance(block, ImageBlock):
        return _anthropic_image(block)
    if raw.get("type") in ANTHROPIC_ONLY_PARTS:
        return dict(raw)
    return {"type": "text", "text": block.text} if block.text else None


def _single_text(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Content of one text part as a bare string, as both dialects allow."""
    return str(parts[0]["text"]) if len(parts) == 1 and parts[0]["type"] == "text" else parts


def _plain_text(blocks: Sequence[Block]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock | UnknownBlock) and b.text)


def to_anthropic(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Chat lines in the Anthropic dialect (system lines as ``{"role": "system"}``) for one conversation."""
    ids = _AnthropicIds()
    lines: list[dict[str, Any]] = []

    def content(blocks: Sequence[Block]) -> str | list[dict[str, Any]]:
        return _single_text([b for b in (_anthropic_block(x, ids) for x in blocks) if b is not None])

    for turn in _plan(messages):
        if turn.role == "system":
            lines.append({"role": "system", "content": _plain_text(turn.blocks)})
        # A turn left without content (another vendor's encrypted reasoning alone) is refused by the API.
        elif turn.role == "assistant" and (said := content(turn.blocks)):
            lines.append({"role": "assistant", "content": said})
        elif turn.role == "user" and (text := content(turn.blocks)):
            after = (
                lines[-1]["content"] if turn.after_results and lines and lines[-1]["role"] == "user" else None
            )
            if isinstance(after, list) and any(b.get("type") == "tool_result" for b in after):
                # Text that came with the results stays in their message, after them.
                after.extend([{"type": "text", "text": text}] if isinstance(text, str) else text)
            else:
                lines.append({"role": "user", "content": text})
        if turn.results:  # an assistant turn's results, or results whose call was not seen
            lines.append({"role": "user", "content": [_anthropic_result(r, ids) for r in turn.results]})
    return lines


def _openai_content(blocks: Sequence[Block]) -> str | list[dict[str, Any]] | None:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_openai_image(block))
        elif isinstance(block, UnknownBlock):
            if isinstance(block.raw, dict) and block.raw.get("type") in OPENAI_ONLY_PARTS:
                parts.append(dict(block.raw))
            elif block.text:
                parts.append({"type": "text", "text": block.text})
    return _single_text(parts) if parts else None


def _openai_assistant(turn: _Turn) -> dict[str, Any]:
    reasoning = "\n".join(b.text for b in turn.blocks if isinstance(b, ThinkingBlock) and b.text)
    calls = [
        {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": tool_arguments(b.input)}}
        for b in turn.blocks
        if isinstance(b, ToolUseBlock)
    ]
    content = _openai_content([b for b in turn.blocks if not isinstance(b, ThinkingBlock | ToolUseBlock)])
    out: dict[str, Any] = {"role": "assistant", "content": content if content is not None or calls else ""}
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = calls
    return out


def to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Chat lines in the OpenAI dialect (``tool_calls``, a ``tool`` message per result), one conversation."""
    lines: list[dict[str, Any]] = []
    for turn in _plan(messages):
        if turn.role == "system":
            role = "developer" if turn.source_role == "developer" else "system"
            lines.append({"role": role, "content": _plain_text(turn.blocks)})
        elif turn.role == "assistant":
            lines.append(_openai_assistant(turn))
        elif turn.role == "user":
            content = _openai_content(turn.blocks)
            lines.append({"role": "user", "content": "" if content is None else content})
        lines.extend({"role": "tool", "tool_call_id": r.tool_use_id, "content": r.text} for r in turn.results)
        # Tool messages carry text only; images a tool returned follow as one user message.
        images = [_openai_image(i) for r in turn.results for i in r.images]
        if images:
            lines.append({"role": "user", "content": images})
    return lines


def convert_transcript(transcript: Transcript, target: str) -> bytes:
    """A transcript as a JSONL chat file in ``target``; each of several conversations (a dataset) starts
    with a ``{"role": "_conversation", "index": n}`` line, which the ``chat`` reader keeps out of messages."""
    if target not in TARGETS:
        raise FormatError(f"cannot convert to {target!r} (targets: {', '.join(TARGETS)})")
    convert = to_anthropic if target == "chat-anthropic" else to_openai
    groups: dict[int, list[Message]] = {}
    for message in transcript.messages:
        groups.setdefault(message.conversation, []).append(message)
    out: list[bytes] = []
    for number in sorted(groups):
        if len(groups) > 1:
            out.append(orjson.dumps({"role": "_conversation", "index": number}) + b"\n")
        out.extend(orjson.dumps(line) + b"\n" for line in convert(groups[number]))
    return b"".join(out)
