"""Tool-call pairing and role checks over the model, independent of any file format.

Two strengths of check exist because they answer different questions. ``loose`` asks whether every result
answers *some* earlier call (what a log of a real session should satisfy, and what analyze reports).
``strict`` asks whether an API would accept the messages as a request: each result in the message
right after its call, every call answered there (Anthropic's rule; OpenAI's ``tool`` messages must
follow their ``tool_calls`` directly). Compaction output must pass ``strict``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ctxc.model import Message, ToolResultBlock, ToolUseBlock

ProblemCode = Literal[
    "orphan_result",
    "unanswered_call",
    "duplicate_result",
    "result_not_adjacent",
    "result_outside_user_or_tool",
    "call_outside_assistant",
    "tool_message_without_result",
]


@dataclass(frozen=True, slots=True)
class Problem:
    code: ProblemCode
    message: str
    line: int
    index: int
    tool_id: str
    conversation: int = 0

    def __str__(self) -> str:
        return f"line {self.line} (message {self.index}): {self.message}"


def _by_conversation(messages: Iterable[Message]) -> dict[int, list[Message]]:
    groups: dict[int, list[Message]] = {}
    for m in messages:
        groups.setdefault(m.conversation, []).append(m)
    return groups


def pairing_problems(messages: Iterable[Message], *, strict: bool = False) -> list[Problem]:
    """Every pairing problem, in message order. See the module docstring for ``strict``."""
    problems: list[Problem] = []
    for conv, msgs in _by_conversation(messages).items():
        problems.extend(_check(msgs, conv, strict))
    problems.sort(key=lambda p: (p.conversation, p.index, p.code))
    return problems


def _check(msgs: Sequence[Message], conv: int, strict: bool) -> list[Problem]:
    problems: list[Problem] = []
    calls: dict[str, tuple[Message, str]] = {}
    answered: set[str] = set()
    # Calls of the latest assistant turn. Its results may come in any of the messages up to the next
    # assistant turn: consecutive user or tool messages form one API message (Anthropic merges them,
    # OpenAI sends one tool message per result).
    open_calls: set[str] = set()

    reported: set[str] = set()

    def unanswered(ids: set[str], why: str) -> None:
        for tid in sorted(ids - answered - reported):
            reported.add(tid)
            cm, name = calls[tid]
            problems.append(
                Problem("unanswered_call", f"tool call {tid!r} ({name}) {why}", cm.line, cm.index, tid, conv)
            )

    prev_role = ""
    for m in msgs:
        # Consecutive assistant messages are one turn (Codex writes each parallel call as its own item).
        starts_turn = m.role == "assistant" and prev_role != "assistant"
        if starts_turn and strict:
            unanswered(open_calls, "has no result before the next assistant turn")
        for b in m.blocks:
            if not isinstance(b, ToolResultBlock):
                continue
            tid = b.tool_use_id
            if tid in answered and tid in calls:
                problems.append(
                    Problem(
                        "duplicate_result", f"second result for tool call {tid!r}", m.line, m.index, tid, conv
                    )
                )
            elif tid not in calls:
                problems.append(
                    Problem(
                        "orphan_result",
                        f"tool result {tid!r} answers no earlier tool call",
                        m.line,
                        m.index,
                        tid,
                        conv,
                    )
                )
            elif strict and tid not in open_calls:
                problems.append(
                    Problem(
                        "result_not_adjacent",
                        f"tool result {tid!r} does not follow its call's turn",
                        m.line,
                        m.index,
                        tid,
                        conv,
                    )
                )
            answered.add(tid)
        if m.role != "system":
            prev_role = m.role
        if starts_turn:
            open_calls = set()
        if m.role == "assistant":
            for b in m.blocks:
                if isinstance(b, ToolUseBlock):
                    # An id used again is a new call (replayed or redacted logs reuse ids): its
                    # answer is still to come.
                    calls[b.id] = (m, b.name)
                    answered.discard(b.id)
                    reported.discard(b.id)
                    open_calls.add(b.id)
    unanswered(set(calls), "is never answered")
    return problems


def role_problems(messages: Iterable[Message]) -> list[Problem]:
    """Blocks in a role that cannot carry them: results from the assistant, calls from the user."""
    problems: list[Problem] = []
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolResultBlock) and m.role not in ("user", "tool"):
                problems.append(
                    Problem(
                        "result_outside_user_or_tool",
                        f"tool result {b.tool_use_id!r} in a {m.role} message",
                        m.line,
                        m.index,
                        b.tool_use_id,
                        m.conversation,
                    )
                )
            elif isinstance(b, ToolUseBlock) and m.role != "assistant":
                problems.append(
                    Problem(
                        "call_outside_assistant",
                        f"tool call {b.id!r} in a {m.role} message",
                        m.line,
                        m.index,
                        b.id,
                        m.conversation,
                    )
                )
        if m.role == "tool" and not any(isinstance(b, ToolResultBlock) for b in m.blocks):
            problems.append(
                Problem(
                    "tool_message_without_result",
                    "tool message carries no tool result",
                    m.line,
                    m.index,
                    "",
                    m.conversation,
                )
            )
    return problems


def all_problems(messages: Sequence[Message], *, strict: bool = True) -> list[Problem]:
    """Pairing and role problems together, in message order."""
    found = pairing_problems(messages, strict=strict) + role_problems(messages)
    found.sort(key=lambda p: (p.conversation, p.index, p.code))
    return found
