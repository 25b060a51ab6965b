"""Conversation datasets: one whole conversation per line, ``{"messages": [...], ...}``.

Fine-tuning and evaluation sets (OpenAI fine-tuning files, functionary, ShareGPT-converted sets) store a
conversation per line with optional ``tools``/``functions`` definitions and any other keys. Each line is
its own conversation (``Message.conversation`` is the line's number among conversation lines), while
message indexes keep counting across the file. The messages are chat messages, parsed and encoded by
:mod:`ctxc.formats.chat`; a top-level Anthropic-style ``system`` prompt becomes a system message too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ctxc.formats import register
from ctxc.formats.base import Item
from ctxc.formats.chat import (
    ChatState,
    encode_chat_message,
    importance_of,
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
    """Whether a line has a top-level system prompt this adapter turns into a message."""
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
    first = True

    def extra() -> dict[str, Any]:
        # The tool definitions ride on the conversation's first message, so token counts can include them.
        nonlocal first
        if not first or tools_key is None:
            first = False
            return {}
        first = False
        return {"tools_key": tools_key, "tools": data[tools_key]}

    if _system_prompt(data):
        raw = {"role": "system", "content": data["system"]}
        yield Message(
            role="system",
            blocks=parse_anthropic_content(data["system"]),
            line=line,
            index=index,
            records=(record_index,),
            conversation=conversation,
            meta={
                "dialect": "anthropic",
                "content": "string" if isinstance(data["system"], str) else "list",
                "dataset_field": SYSTEM_FIELD,
                **extra(),
            },
            raw=raw,
        )
        index += 1
    for position, obj in enumerate(data["messages"]):
        if not isinstance(obj, dict):
            continue
        parsed = parse_chat_message(obj, state, synth_id=f"fc-{line}-{position}")
        if parsed is None:
            continue
        role, blocks, meta = parsed
        meta["position"] = position
        meta.update(extra())
        yield Message(
            role=role,
            blocks=blocks,
            line=line,
            index=index,
            records=(record_index,),
            conversation=conversation,
            importance=importance_of(obj),
            usage=parse_usage(obj.get("usage"), line),
            meta=meta,
            raw=obj,
        )
        index += 1


def encode_line(messages: Sequence[Message], template_raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """A whole dataset line holding ``messages``, keeping the template line's other keys.

    Items of the template's list that were not messages (``_`` pseudo-entries, non-objects) keep their
    place relative to the messages around them, by the position each message was read from.
    """
    out: dict[str, Any] = dict(template_raw) if template_raw is not None else {}
    template_items = out.get("messages")
    kept = (
        [(p, item) for p, item in enumerate(template_items) if not is_chat_message(item)]
        if isinstance(template_items, list)
        else []
    )
    items: list[Any] = []
    system: Message | None = None
    k = 0
    for message in messages:
        if message.meta.get("dataset_field") == SYSTEM_FIELD:
            system = message
            continue
        position = message.meta.get("position")
        if isinstance(position, int):
            while k < len(kept) and kept[k][0] < position:
                items.append(kept[k][1])
                k += 1
        items.append(encode_chat_message(message))
    items.extend(item for _, item in kept[k:])
    if system is not None:
        out["system"] = encode_chat_message(system)["content"]
    elif template_raw is not None and _system_prompt(template_raw):
        del out["system"]  # the system prompt message was dropped
    out["messages"] = items
    return out


class DatasetAdapter:
    name = "dataset"
    tool_role = False
    usage_before_response = False
    suffixes: tuple[str, ...] = (".jsonl",)
    usage_needles: tuple[bytes, ...] = ()
    rewrites_carried = False
    summary_resets = False
    description = (
        "one conversation per line: {'messages': [...], 'tools'|'functions': [...]} (fine-tuning sets)"
    )

    def sniff(self, sample: Sequence[Record]) -> int:
        hits = sum(1 for rec in sample if _conversation_line(rec.data))
        if hits == 0 or hits * 2 < len(sample):
            return 0
        return 90

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        index = 0
        conversation = 0
        for i, rec in records:
            if not _conversation_line(rec.data):
                continue
            for message in read_line(rec.data, i, rec.line, conversation, index):
                yield message
                if message.usage is not None:
                    yield message.usage
                index += 1
            conversation += 1

    def encode_conversation(self, messages: Sequence[Message], template: dict[str, Any]) -> dict[str, Any]:
        """The compaction writer's hook: rebuild a whole line from one conversation's messages."""
        return encode_line(messages, template)

    def encode_message(self, message: Message) -> dict[str, Any]:
        return encode_chat_message(message)


register(DatasetAdapter())
