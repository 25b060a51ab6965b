"""Conversation datasets: one conversation per line, ``{"messages": [...], "tools": [...]}``, its messages
chat messages (:mod:`ctxc.formats.dicts`); a top-level Anthropic ``system`` prompt is a system message too."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ctxc.formats import register
from ctxc.formats.base import FormatAdapter, Item, importance_of
from ctxc.formats.dicts import (
    ChatState,
    encode_chat_message,
    is_chat_message,
    parse_chat_message,
    parse_usage,
)
from ctxc.formats.shapes import parse_anthropic_content
from ctxc.model import Message, Record

#: meta["dataset_field"] of the message read from a line's top-level ``system`` prompt.
SYSTEM_FIELD = "system"
#: Keys holding the tool definitions the model was given (they cost context tokens).
_TOOL_KEYS = ("tools", "functions")


def _system_prompt(line: Mapping[str, Any]) -> bool:
    system = line.get("system")
    return isinstance(system, str) or (isinstance(system, list) and bool(system))


def _conversation_line(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("messages"), list)


def read_line(
    data: Mapping[str, Any], record_index: int, line: int, conversation: int, first_index: int
) -> Iterator[Message]:
    """The messages of one dataset line, indexed from ``first_index``."""
    state = ChatState()
    index = first_index
    tools_key = next((k for k in _TOOL_KEYS if isinstance(data.get(k), list)), None)
    # The tool definitions ride on the first message, so token counts can include them.
    extra: dict[str, Any] = {"tools_key": tools_key, "tools": data[tools_key]} if tools_key else {}
    if _system_prompt(data):
        system = data["system"]
        form = "string" if isinstance(system, str) else "list"
        facts = {"dialect": "anthropic", "content": form, "dataset_field": SYSTEM_FIELD, **extra}
        raw = {"role": "system", "content": system}
        blocks = parse_anthropic_content(system)
        yield Message("system", blocks, line, index, (record_index,), conversation, meta=facts, raw=raw)
        index, extra = index + 1, {}
    for position, obj in enumerate(data["messages"]):
        parsed = parse_chat_message(obj, state, synth_id=f"fc-{line}-{position}")
        if parsed is None:  # not a message (not even an object): kept in its place when written
            continue
        role, blocks, meta = parsed
        usage = parse_usage(obj.get("usage"), line)
        meta = {**meta, "position": position, **extra}
        yield Message(
            role, blocks, line, index, (record_index,), conversation, importance_of(obj), usage, meta, obj
        )
        index, extra = index + 1, {}


def encode_line(messages: Sequence[Message], template_raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """A whole dataset line holding ``messages``, keeping the template line's other keys; its list items
    that were not messages keep their place, by the position each message was read from."""
    out: dict[str, Any] = dict(template_raw) if template_raw is not None else {}
    template_items = out.get("messages")
    kept = [
        (p, item)
        for p, item in enumerate(template_items if isinstance(template_items, list) else [])
        if not is_chat_message(item)
    ]
    items: list[Any] = []
    system: Message | None = None
    for message in messages:
        if message.meta.get("dataset_field") == SYSTEM_FIELD:
            system = message
            continue
        position = message.meta.get("position")
        while isinstance(position, int) and kept and kept[0][0] < position:
            items.append(kept.pop(0)[1])
        items.append(encode_chat_message(message))
    items.extend(item for _, item in kept)
    if system is not None:
        out["system"] = encode_chat_message(system)["content"]
    elif template_raw is not None and _system_prompt(template_raw):
        del out["system"]  # the system prompt message was dropped
    out["messages"] = items
    return out


class DatasetAdapter(FormatAdapter):
    name = "dataset"
    description = (
        "one conversation per line: {'messages': [...], 'tools'|'functions': [...]} (fine-tuning sets)"
    )

    def sniff(self, sample: Sequence[Record]) -> int:
        hits = sum(1 for rec in sample if _conversation_line(rec.data))
        return 0 if hits == 0 or hits * 2 < len(sample) else 90

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        index = 0
        lines = ((i, rec) for i, rec in records if _conversation_line(rec.data))
        for conversation, (i, rec) in enumerate(lines):
            for message in read_line(rec.data, i, rec.line, conversation, index):
                yield message
                if message.usage is not None:
                    yield message.usage
                index += 1

    encode_conversation = staticmethod(encode_line)
    encode_message = staticmethod(encode_chat_message)


register(DatasetAdapter())
