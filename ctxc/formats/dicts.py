"""Message lists as the SDKs take them (plain dicts, Anthropic or OpenAI shape) to ctxc messages and back.

What :class:`ctxc.ContextManager` and :func:`ctxc.compact_messages` read and return: the chat format's
parsing and encoding, applied to a list in memory rather than to the lines of a file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import orjson

from ctxc.errors import UsageError
from ctxc.formats.chat import (
    ChatState,
    detect_dialect,
    encode_chat_message,
    importance_of,
    parse_chat_message,
)
from ctxc.model import Message

Shape = Literal["anthropic", "openai"]


def detect_shape(messages: Sequence[Mapping[str, Any]]) -> Shape:
    """Anthropic when a message is Anthropic-only (tool_use/tool_result blocks...), else OpenAI.

    A list whose every message is valid in both shapes (plain strings) is the same either way.
    """
    for m in messages:
        if isinstance(m, Mapping):
            found = detect_dialect(m)
            if found is not None:
                return found
    return "openai"


def to_messages(messages: Sequence[Mapping[str, Any]], *, shape: Shape | None = None) -> list[Message]:
    """ctxc messages for a dict list (indexes are positions in the list; non-messages are skipped)."""
    state = ChatState()
    state.dialect = shape
    out: list[Message] = []
    for i, obj in enumerate(messages):
        parsed = parse_chat_message(obj, state, synth_id=f"fc-{i}") if isinstance(obj, Mapping) else None
        if parsed is None:
            continue
        role, blocks, meta = parsed
        out.append(
            Message(
                role=role,
                blocks=blocks,
                index=i,
                line=i + 1,
                importance=importance_of(obj),
                meta=meta,
                raw=obj,
            )
        )
    return out


def from_messages(
    result: Sequence[Message],
    given: Sequence[Mapping[str, Any]],
    parsed: Sequence[Message],
    *,
    shape: Shape,
) -> list[dict[str, Any]]:
    """Dicts for compacted ``result``: a message kept as it was is the very dict given (``parsed``
    are the messages read from ``given``); a new or changed one is encoded in ``shape``."""
    kept = {id(m): given[m.index] for m in parsed}
    by_json: dict[bytes, Mapping[str, Any]] | None = None
    out: list[dict[str, Any]] = []
    for m in result:
        original = kept.get(id(m))
        if original is None:
            new = m if "dialect" in m.meta else replace(m, meta={**m.meta, "dialect": shape})
            encoded = encode_chat_message(new)
            if by_json is None:
                by_json = {}
                for obj in reversed(given):  # the first of equal dicts wins
                    by_json[json_bytes(obj)] = obj
            original = by_json.get(json_bytes(encoded), encoded)
        out.append(original if isinstance(original, dict) else dict(original))
    return out


def json_bytes(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError as exc:
        raise UsageError(f"messages must be JSON-serialisable dicts: {exc}") from None


__all__ = ["Shape", "detect_shape", "from_messages", "json_bytes", "to_messages"]
