"""SWE-agent ``.traj`` files: ONE pretty-printed JSON document ``{environment, trajectory, history, info}``.

The reader hands the whole document over as a single record. ``history`` is the message list the
model was sent, in OpenAI chat shape, so it is the conversation; ``trajectory`` repeats the same steps
as (action, observation, response) for humans and is not additional context. Two variants:

* function calling: assistant messages carry ``tool_calls``; results are ``role: tool`` messages with
  ``tool_call_ids`` (a list);
* classic: the command is a fenced block inside the assistant text and each observation is the next
  ``user`` message. No tool-call structure exists, so none is invented: assistant and user text stay text.

An embedded demonstration is a ``user`` message with ``is_demo: true``; it stays a user message (it is
sent) with ``meta["is_demo"]``. ``thought``/``action``/``agent``/``message_type`` are SWE-agent
bookkeeping beside the content and go into ``meta``. A message's ``raw`` is its history dict;
:func:`encode_document` rebuilds the whole document from messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ctxc.formats import register
from ctxc.formats.base import Item
from ctxc.formats.shapes import (
    content_text,
    encode_openai_content,
    encode_openai_tool_call,
    openai_role,
    parse_openai_content,
    parse_openai_tool_call,
)
from ctxc.model import Block, Message, Record, Role, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock


def _is_document(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("trajectory"), list)
        and isinstance(data.get("history"), list)
    )


def _result_ids(msg: Mapping[str, Any]) -> list[str]:
    ids = msg.get("tool_call_ids")
    if isinstance(ids, list):
        return [str(i) for i in ids]
    one = msg.get("tool_call_id")  # the plain OpenAI spelling, should a version write it
    return [str(one)] if one is not None else []


def _parse_message(
    msg: Mapping[str, Any], position: int
) -> tuple[Role, tuple[Block, ...], dict[str, Any]] | None:
    role = openai_role(msg.get("role"))
    if role is None:
        return None
    meta: dict[str, Any] = {
        "history_index": position,
        "content_was_string": isinstance(msg.get("content"), str),
    }
    for key in ("agent", "message_type", "thought", "action"):
        if key in msg:
            meta[key] = msg[key]
    if msg.get("is_demo"):
        meta["is_demo"] = True
    if msg.get("role") != role:
        meta["source_role"] = msg.get("role")
    content = msg.get("content")
    if role == "tool":
        ids = _result_ids(msg)
        meta["tool_call_ids"] = ids
        text = content_text(content)
        # Several ids share one observation: the text is carried once, by the first id's result.
        result = ToolResultBlock(
            tool_use_id=ids[0] if ids else f"swe-{position}", text=text, name=msg.get("name")
        )
        extra = tuple(ToolResultBlock(tool_use_id=i, text="") for i in ids[1:])
        return "tool", (result, *extra), meta
    blocks = parse_openai_content(content)
    calls = msg.get("tool_calls")
    if isinstance(calls, list):
        blocks = (*blocks, *(parse_openai_tool_call(c) for c in calls))
    return role, blocks, meta


class SweAgentAdapter:
    name = "swe-agent"
    tool_role = False
    usage_before_response = False
    suffixes: tuple[str, ...] = (".traj", ".traj.json")
    usage_needles: tuple[bytes, ...] = ()
    rewrites_carried = False
    summary_resets = False
    description = "SWE-agent .traj trajectory (one JSON document with trajectory and history)"

    def sniff(self, sample: Sequence[Record]) -> int:
        docs = [r.data for r in sample if isinstance(r.data, dict)]
        if len(docs) == 1 and _is_document(docs[0]):
            return 95
        if docs and all(_is_document(d) for d in docs):
            return 80  # trajectories concatenated one per line: readable, but not what SWE-agent writes
        return 0

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        index = 0
        conversation = 0
        for rec_index, record in records:
            data = record.data
            if not _is_document(data):
                continue
            for position, msg in enumerate(data["history"]):
                if not isinstance(msg, dict):
                    continue
                parsed = _parse_message(msg, position)
                if parsed is None:
                    continue
                role, blocks, meta = parsed
                importance = msg.get("importance")
                yield Message(
                    role=role,
                    blocks=blocks,
                    line=record.line,
                    index=index,
                    records=(rec_index,),
                    conversation=conversation,
                    importance=importance if isinstance(importance, str) else None,
                    meta=meta,
                    raw=msg,
                )
                index += 1
            conversation += 1

    def encode_conversation(self, messages: Sequence[Message], template: dict[str, Any]) -> dict[str, Any]:
        """The compaction writer's hook: rebuild a whole record from one conversation's messages."""
        return encode_document(messages, template)

    def encode_message(self, message: Message) -> dict[str, Any]:
        raw = message.raw if isinstance(message.raw, dict) else None
        if raw is not None:
            position = message.meta.get("history_index", 0)
            parsed = _parse_message(raw, position if isinstance(position, int) else 0)
            if parsed is not None and parsed[0] == message.role and parsed[1] == message.blocks:
                return raw
        return _build(message, raw)


def _text(blocks: Iterable[Block]) -> str:
    return "\n".join(
        b.text for b in blocks if isinstance(b, TextBlock | ThinkingBlock | ToolResultBlock) and b.text
    )


def _build(message: Message, raw: dict[str, Any] | None) -> dict[str, Any]:
    """A history message for a changed or new message; raw's other keys (agent, message_type...) are kept."""
    out: dict[str, Any] = dict(raw) if raw is not None else {"role": message.role}
    if raw is None:
        agent = message.meta.get("agent")
        out["agent"] = agent if isinstance(agent, str) else "main"
    if message.role == "tool":
        results = [b for b in message.blocks if isinstance(b, ToolResultBlock)]
        out["role"] = "tool"
        out["content"] = _text(results) if results else _text(message.blocks)
        ids = [b.tool_use_id for b in results]
        if "tool_call_id" in out and "tool_call_ids" not in out:
            out["tool_call_id"] = ids[0] if ids else ""
        else:
            out["tool_call_ids"] = ids
        if raw is None:
            out["message_type"] = "observation"
        return out
    old_content = out.get("content")
    content_blocks = [b for b in message.blocks if not isinstance(b, ToolUseBlock | ToolResultBlock)]
    as_string = raw is None or isinstance(old_content, str)
    if as_string and all(isinstance(b, TextBlock | ThinkingBlock) for b in content_blocks):
        content: Any = "\n".join(b.text for b in content_blocks if isinstance(b, TextBlock | ThinkingBlock))
    else:
        content = encode_openai_content(content_blocks, as_string=False)
    out["content"] = content
    if raw is not None and isinstance(old_content, str) and out.get("thought") == old_content:
        out["thought"] = content  # the function-calling variant stores the same text twice
    uses = [b for b in message.blocks if isinstance(b, ToolUseBlock)]
    if uses:
        out["tool_calls"] = [encode_openai_tool_call(b) for b in uses]
    else:
        out.pop("tool_calls", None)
    if message.meta.get("is_demo") and raw is None:
        out["is_demo"] = True
    return out


def encode_document(messages: Sequence[Message], template_raw: Mapping[str, Any]) -> dict[str, Any]:
    """The whole ``.traj`` document with ``history`` rebuilt from ``messages``; every other key as it was.

    ``trajectory`` and ``info`` are left alone: they record the run, not the context.
    """
    adapter = SweAgentAdapter()
    template = template_raw.get("history")
    agents = [h.get("agent") for h in template if isinstance(h, dict)] if isinstance(template, list) else []
    agent = next((a for a in agents if isinstance(a, str)), None)
    history: list[dict[str, Any]] = []
    for m in messages:
        msg = m
        if m.raw is None and agent is not None and "agent" not in m.meta:
            # A new message speaks for the agent whose history it joins ("main", "primary", ...).
            msg = dataclasses.replace(m, meta={**m.meta, "agent": agent})
        encoded = adapter.encode_message(msg)
        if isinstance(encoded.get("agent"), str):
            agent = encoded["agent"]
        history.append(encoded)
    return {**template_raw, "history": history}


register(SweAgentAdapter())
