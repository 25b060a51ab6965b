"""Pairing-safe units: the smallest runs of messages a strategy may drop or replace as a whole (an
assistant turn with the messages carrying its results; anything else alone)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxc.model import Message, ToolResultBlock, ToolUseBlock


@dataclass(frozen=True, slots=True)
class Unit:
    start: int  # position in the message list (not Message.index)
    stop: int  # exclusive

    def messages(self, messages: Sequence[Message]) -> Sequence[Message]:
        return messages[self.start : self.stop]


def _results(m: Message) -> set[str]:
    return {b.tool_use_id for b in m.blocks if isinstance(b, ToolResultBlock)}


def _calls(m: Message) -> set[str]:
    return {b.id for b in m.blocks if isinstance(b, ToolUseBlock)}


def _turns(messages: Sequence[Message]) -> list[Unit]:
    """Turns: an assistant turn with the results that directly follow it; other messages alone."""
    out: list[Unit] = []
    i, n = 0, len(messages)
    while i < n:
        j = i + 1
        if messages[i].role == "assistant":
            open_calls = set(_calls(messages[i]))
            # Consecutive assistant messages are one turn (Codex writes each call as its own item).
            while j < n and messages[j].role == "assistant":
                open_calls |= _calls(messages[j])
                j += 1
            # Then the messages answering its calls, with system messages slipped in between (Codex).
            k = j
            while open_calls and k < n and messages[k].role != "assistant":
                answered = _results(messages[k]) & open_calls
                if answered:
                    open_calls -= answered
                    j = k = k + 1
                elif messages[k].role == "system":
                    k += 1
                else:
                    break
        out.append(Unit(i, j))
        i = j
    return out


def units(messages: Sequence[Message]) -> list[Unit]:
    """Split a conversation into units covering every message once: the turns, merged wherever a
    result answers a call of an earlier turn (as strict validation allows: only the latest turn's;
    a misplaced result is the repair step's business)."""
    parts = _turns(messages)
    reach = list(range(len(parts)))  # reach[u]: the earliest unit that u must stay with
    open_calls: dict[str, int] = {}  # the current turn's call ids -> their unit
    previous = ""
    for u, part in enumerate(parts):
        for m in part.messages(messages):
            if m.role == "assistant" and previous != "assistant":
                open_calls = {}  # as in strict validation: a result may only answer the latest turn
            for b in m.blocks:
                if isinstance(b, ToolResultBlock) and b.tool_use_id in open_calls:
                    reach[u] = min(reach[u], open_calls[b.tool_use_id])
                elif isinstance(b, ToolUseBlock) and m.role == "assistant":
                    open_calls.setdefault(b.id, u)
            if m.role != "system":
                previous = m.role
    merged: list[Unit] = []
    for u, part in enumerate(parts):
        if reach[u] == u:
            merged.append(part)
            continue
        start = parts[reach[u]].start
        while merged[-1].start > start:  # everything since the call's unit joins it
            merged.pop()
        merged[-1] = Unit(merged[-1].start, part.stop)
    return merged
