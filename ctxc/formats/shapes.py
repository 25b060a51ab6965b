"""Anthropic and OpenAI content blocks, which most formats embed, to model blocks and back: a block still
equal to what its ``raw`` parses to is written as ``raw`` (nothing unmodelled is lost), else rebuilt."""

from __future__ import annotations

import base64
import contextlib
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from ctxc.model import (
    ROLES,
    Block,
    ImageBlock,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    dumps_compact,
)

#: Anthropic block types with no model block of their own, kept as recorded.
ANTHROPIC_ONLY_PARTS = frozenset(
    {"document", "search_result", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result"}
    | {"code_execution_tool_result", "mcp_tool_use", "mcp_tool_result", "container_upload"}
)
#: OpenAI content part types with no model block of their own.
OPENAI_ONLY_PARTS = frozenset({"input_audio", "file"})
#: JPEG start-of-frame markers, which hold the image size.
_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, WebP or JPEG header, or None when the header is not readable."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return int(w), int(h)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        return int(w), int(h)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8X":
            return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
        if chunk == b"VP8 ":
            w, h = struct.unpack("<HH", data[26:30])
            return int(w) & 0x3FFF, int(h) & 0x3FFF
        if chunk == b"VP8L":
            b = data[21:25]
            w = 1 + (((b[1] & 0x3F) << 8) | b[0])
            h = 1 + (((b[3] & 0xF) << 10) | (b[2] << 2) | ((b[1] & 0xC0) >> 6))
            return w, h
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            seg_len = struct.unpack(">H", data[i + 2 : i + 4])[0]
            if marker in _JPEG_SOF:
                h, w = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(w), int(h)
            i += 2 + seg_len
    return None


def _b64_head(data: str, n_bytes: int) -> bytes:
    chars = (n_bytes + 2) // 3 * 4
    try:
        return base64.b64decode(data[:chars], validate=False)
    except ValueError:  # binascii.Error is one
        return b""


def image_from_base64(data: str, media_type: str | None, raw: Any) -> ImageBlock:
    # PNG, GIF and WebP keep their size in the first 30 bytes; JPEG's SOF marker can sit after EXIF data.
    size = image_size(_b64_head(data, 64))
    if size is None and media_type in ("image/jpeg", "image/jpg"):
        size = image_size(_b64_head(data, 1 << 16))
    width, height = size if size else (None, None)
    return ImageBlock(media_type, width, height, data_bytes=len(data) * 3 // 4, raw=raw)


def tool_arguments(value: Any) -> str:
    """A call's input as OpenAI's ``arguments`` string."""
    return value if isinstance(value, str) else dumps_compact(value)


def content_text(content: Any) -> str:
    """The text a tool result or message content carries: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") if isinstance(part, dict) else part for part in content]
        return "\n".join(part for part in parts if isinstance(part, str))
    return dumps_compact(content)


def _content_images(content: Any) -> tuple[ImageBlock, ...]:
    parts = content if isinstance(content, list) else ()
    images = [
        p for p in parts if isinstance(p, dict) and p.get("type") in ("image", "image_url", "input_image")
    ]
    blocks = (parse_anthropic_block(p) if p["type"] == "image" else _openai_part(p) for p in images)
    return tuple(b for b in blocks if isinstance(b, ImageBlock))


def unknown_value(value: Any) -> UnknownBlock:
    """A value where a content block was expected, kept as it is (its text, or its JSON)."""
    return UnknownBlock(raw=value, text=value if isinstance(value, str) else dumps_compact(value))


def parse_anthropic_block(block: Any) -> Block:
    if not isinstance(block, dict):
        return unknown_value(block)
    btype = block.get("type")
    if btype == "text" and isinstance(block.get("text"), str):
        return TextBlock(text=block["text"], raw=block)
    if btype == "thinking":
        return ThinkingBlock(text=str(block.get("thinking") or ""), raw=block)
    if btype == "redacted_thinking":
        return ThinkingBlock(text="", raw=block)
    if btype == "tool_use" and isinstance(block.get("id"), str):
        return ToolUseBlock(block["id"], str(block.get("name", "")), block.get("input"), raw=block)
    if btype == "tool_result" and isinstance(block.get("tool_use_id"), str):
        content = block.get("content")
        is_error = bool(block.get("is_error", False))
        text, images = content_text(content), _content_images(content)
        return ToolResultBlock(block["tool_use_id"], text, is_error, raw=block, images=images)
    if btype == "image":
        source = block.get("source")
        source = source if isinstance(source, dict) else {}
        data = source.get("data") if source.get("type") == "base64" else None
        if isinstance(data, str):
            return image_from_base64(data, source.get("media_type"), block)
        return ImageBlock(raw=block)
    return UnknownBlock(raw=block, text=dumps_compact(block), type=str(btype or "unknown"))


def parse_content(content: Any, parse_part: Callable[[Any], Block]) -> tuple[Block, ...]:
    """Message content as blocks: a string is one text block, a list's parts go through ``parse_part``."""
    if content is None:
        return ()
    if isinstance(content, str):
        return (TextBlock(text=content),)
    if isinstance(content, list):
        return tuple(parse_part(p) for p in content)
    return (UnknownBlock(raw=content, text=dumps_compact(content)),)


def parse_anthropic_content(content: Any) -> tuple[Block, ...]:
    return parse_content(content, parse_anthropic_block)


def unchanged(block: Block, parse: Callable[[Any], Block]) -> bool:
    """Whether ``block`` is still what its ``raw`` parses to (then ``raw`` is written back as it was)."""
    return block.raw is not None and parse(block.raw) == block


def blocks_text(blocks: Iterable[Block]) -> str:
    """The text a format without block structure keeps of text, thinking and tool-result blocks."""
    return "\n".join(
        b.text for b in blocks if isinstance(b, TextBlock | ThinkingBlock | ToolResultBlock) and b.text
    )


def encode_anthropic_block(block: Block) -> Any:
    if unchanged(block, parse_anthropic_block):
        return block.raw
    base = dict(block.raw) if isinstance(block.raw, dict) else {}
    if isinstance(block, TextBlock):
        return {**base, "type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        if base.get("type") == "redacted_thinking":
            return base
        return {**base, "type": "thinking", "thinking": block.text}
    if isinstance(block, ToolUseBlock):
        return {**base, "type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {**base, "type": "tool_result", "tool_use_id": block.tool_use_id}
        images = [encode_anthropic_block(i) for i in block.images]
        out["content"] = [{"type": "text", "text": block.text}, *images] if images else block.text
        if block.is_error:
            out["is_error"] = True
        else:
            out.pop("is_error", None)
        return out
    if isinstance(block, ImageBlock):
        return base or {
            "type": "image",
            "source": {"type": "base64", "media_type": block.media_type, "data": ""},
        }
    return block.raw


def encode_content(
    blocks: Sequence[Block], encode: Callable[[Block], Any], as_string: bool, empty: Any
) -> Any:
    """Content of ``encode``d blocks; with ``as_string``, one text block made by ctxc as a bare string (no
    block as ``empty``)."""
    if as_string and not blocks:
        return empty
    if as_string and len(blocks) == 1 and isinstance(blocks[0], TextBlock) and blocks[0].raw is None:
        return blocks[0].text
    return [encode(b) for b in blocks]


def encode_anthropic_content(blocks: Sequence[Block], *, as_string: bool = False) -> Any:
    return encode_content(blocks, encode_anthropic_block, as_string, "")


_OPENAI_ROLES: dict[str, Role] = {**{r: r for r in ROLES}, "developer": "system", "function": "tool"}


def openai_role(role: Any) -> Role | None:
    return _OPENAI_ROLES.get(role) if isinstance(role, str) else None


def _openai_part(part: Any) -> Block:
    if not isinstance(part, dict):
        return unknown_value(part)
    ptype = part.get("type")
    if ptype in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
        return TextBlock(text=part["text"], raw=part)
    if ptype == "refusal" and isinstance(part.get("refusal"), str):
        return TextBlock(text=part["refusal"], raw=part)
    if ptype in ("image_url", "input_image"):
        url = part.get("image_url")  # a chat part nests it as {"url": ...}, a Responses input_image does not
        if ptype == "image_url" and isinstance(url, dict):
            url = url.get("url")
        if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
            header, data = url.split(";base64,", 1)
            return image_from_base64(data, header[5:] or None, part)
        return ImageBlock(raw=part)
    return UnknownBlock(raw=part, text=dumps_compact(part), type=str(ptype or "unknown"))


def parse_openai_content(content: Any) -> tuple[Block, ...]:
    return parse_content(content, _openai_part)


def parse_tool_arguments(arguments: Any) -> Any:
    """OpenAI sends arguments as a JSON string; keep the parsed value, or the string if it is not JSON."""
    if isinstance(arguments, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(arguments)
    return arguments


def parse_openai_tool_call(call: Any) -> Block:
    if not isinstance(call, dict):
        return UnknownBlock(raw=call, text=dumps_compact(call))
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    arguments = parse_tool_arguments(fn.get("arguments"))
    return ToolUseBlock(str(call.get("id", "")), str(fn.get("name", "")), arguments, raw=call)


def encode_openai_tool_call(block: Block) -> Any:
    if unchanged(block, parse_openai_tool_call) or not isinstance(block, ToolUseBlock):
        return block.raw
    base: dict[str, Any] = dict(block.raw) if isinstance(block.raw, dict) else {"type": "function"}
    old_fn = base.get("function")
    fn: dict[str, Any] = dict(old_fn) if isinstance(old_fn, dict) else {}
    fn.update(name=block.name, arguments=tool_arguments(block.input))
    return {**base, "id": block.id, "function": fn}


def encode_openai_part(block: Block) -> Any:
    if unchanged(block, _openai_part):
        return block.raw
    base = dict(block.raw) if isinstance(block.raw, dict) else {}
    if isinstance(block, TextBlock):
        if base.get("type") == "refusal":
            return {**base, "refusal": block.text}
        return {"type": "text", **base, "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "text", "text": block.text}
    return block.raw if block.raw is not None else {"type": "text", "text": ""}


def encode_openai_content(blocks: Sequence[Block], *, as_string: bool) -> Any:
    return encode_content(blocks, encode_openai_part, as_string, None)
