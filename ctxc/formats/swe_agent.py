"""SWE-agent ``.traj`` files: one JSON document ``{environment, trajectory, history, info}`` (one record),
whose ``history`` (OpenAI chat shape, ``tool_call_ids`` on results) is the conversation the model was sent;
classic runs keep commands as plain text (no tool structure is invented)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ctxc.formats import register
from ctxc.formats.base import FormatAdapter, Item, importance_of
from ctxc.formats.shapes import (
    blocks_text,
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
    content = msg.get("content")
    meta: dict[str, Any] = {"history_index": position, "content_was_string": isinstance(content, str)}
    meta.update((key, msg[key]) for key in ("agent", "message_type", "thought", "action") if key in msg)
    if msg.get("is_demo"):
        meta["is_demo"] = True
    if msg.get("role") != role:
        meta["source_role"] = msg.get("role")
    if role == "tool":
        ids = meta["tool_call_ids"] = _result_ids(msg)
        # Several ids share one observation: the text is carried once, by the first id's result.
        first_id = ids[0] if ids else f"swe-{position}"
        first = ToolResultBlock(first_id, content_text(content), name=msg.get("name"))
        return "tool", (first, *(ToolResultBlock(tool_use_id=i, text="") for i in ids[1:])), meta
    calls = msg.get("tool_calls")
    calls_blocks = tuple(parse_openai_tool_call(c) for c in calls) if isinstance(calls, list) else ()
    return role, (*parse_openai_content(content), *calls_blocks), meta


def encode_message(message: Message) -> dict[str, Any]:
    """A history message: the recorded one while it parses to the same blocks, else rebuilt."""
    raw = message.raw if isinstance(message.raw, dict) else None
    if raw is not None:
        position = message.meta.get("history_index", 0)
        parsed = _parse_message(raw, position if isinstance(position, int) else 0)
        if parsed is not None and parsed[:2] == (message.role, message.blocks):
            return raw
    return _build(message, raw)


def _build(message: Message, raw: dict[str, Any] | None) -> dict[str, Any]:
    """A history message for a changed or new message; raw's other keys (agent, message_type...) are kept."""
    out: dict[str, Any] = dict(raw) if raw is not None else {"role": message.role}
    if raw is None:
        agent = message.meta.get("agent")
        out["agent"] = agent if isinstance(agent, str) else "main"
    if message.role == "tool":
        results = [b for b in message.blocks if isinstance(b, ToolResultBlock)]
        out["role"] = "tool"
        out["content"] = blocks_text(results) if results else blocks_text(message.blocks)
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
        out["content"] = "\n".join(b.text for b in content_blocks if isinstance(b, TextBlock | ThinkingBlock))
    else:
        out["content"] = encode_openai_content(content_blocks, as_string=False)
    if raw is not None and isinstance(old_content, str) and out.get("thought") == old_content:
        out["thought"] = out["content"]  # the function-calling variant stores the same text twice
    uses = [b for b in message.blocks if isinstance(b, ToolUseBlock)]
    if uses:
        out["tool_calls"] = [encode_openai_tool_call(b) for b in uses]
    else:
        out.pop("tool_calls", None)
    if message.meta.get("is_demo") and raw is None:
        out["is_demo"] = True
    return out


def encode_document(messages: Sequence[Message], template_raw: Mapping[str, Any]) -> dict[str, Any]:
    """The whole ``.traj`` document with ``history`` rebuilt from ``messages``; every other key as it was
    (``trajectory`` and ``info`` record the run, not the context)."""
    template = template_raw.get("history")
    agents = [h.get("agent") for h in template if isinstance(h, dict)] if isinstance(template, list) else []
    agent = next((a for a in agents if isinstance(a, str)), None)
    history: list[dict[str, Any]] = []
    for m in messages:
        # A new message speaks for the agent whose history it joins ("main", "primary", ...).
        joins = m.raw is None and agent is not None and "agent" not in m.meta
        joined = dataclasses.replace(m, meta={**m.meta, "agent": agent}) if joins else m
        encoded = encode_message(joined)
        if isinstance(encoded.get("agent"), str):
            agent = encoded["agent"]
        history.append(encoded)
    return {**template_raw, "history": history}


class SweAgentAdapter(FormatAdapter):
    name = "swe-agent"
    suffixes: tuple[str, ...] = (".traj", ".traj.json")
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
        documents = ((i, rec) for i, rec in records if _is_document(rec.data))
        for conversation, (i, rec) in enumerate(documents):
            for position, msg in enumerate(rec.data["history"]):
                parsed = _parse_message(msg, position) if isinstance(msg, dict) else None
                if parsed is None:
                    continue
                role, blocks, meta = parsed
                yield Message(
                    role, blocks, rec.line, index, (i,), conversation, importance_of(msg), None, meta, msg
                )
                index += 1

    encode_conversation = staticmethod(encode_document)
    encode_message = staticmethod(encode_message)


register(SweAgentAdapter())
