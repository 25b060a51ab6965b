"""Tool-call pairing and role checks over the model, independent of any file format.

Two strengths of check exist because they answer different questions. ``loose`` asks whether every result
answers *some* earlier call (what a log of a real session should satisfy, and what analyze reports).
``strict`` asks whether an API would accept the messages as a request: each result in the message
right after its call, every call answered there (Anthropic's rule; OpenAI's ``tool`` messages must
follow their ``tool_calls`` directly). Compaction output must pass ``strict``. A call its adapter
marked ``terminal`` (it ends the agent's run) awaits no result in either.

Both check the ids themselves too: an API rejects a request where two calls share an id
(``duplicate_call``), or where a call or result has none (``missing_id``: the file's id is null or
absent; the reader listed the id it made up in the message's ``meta["missing_ids"]``, or could not
read the block as a call or result at all).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ctxc.model import MISSING_IDS, Message, ToolResultBlock, ToolUseBlock, UnknownBlock

ProblemCode = Literal[
    "orphan_result",
    "unanswered_call",
    "duplicate_result",
    "result_not_adjacent",
    "result_outside_user_or_tool",
    "call_outside_assistant",
    "tool_message_without_result",
    "duplicate_call",
    "missing_id",
]

#: Block types of an API's tool traffic: an unknown block of one of these is a call or result without
#: a usable id.
_TOOL_TYPES = frozenset({"tool_use", "tool_result"})


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


def pairing_problems(messages: Iterable[Message], *, strict: bool = False) -> list[Problem]:
    """Every pairing problem, in message order. See the module docstring for ``strict``."""
    pairing = Pairing(strict=strict)
    for m in messages:
        pairing.add(m)
    return pairing.problems()


class Pairing:
    """The pairing checks of :func:`pairing_problems`, fed one message at a time in file order, so that
    a reader streaming a large file need keep no message: only the ids, lines and names of the calls."""

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._conversations: dict[int, _Conversation] = {}

    def add(self, m: Message) -> None:
        conv = self._conversations.get(m.conversation)
        if conv is None:
            conv = self._conversations[m.conversation] = _Conversation(m.conversation)
        conv.add(m, self.strict)

    def problems(self) -> list[Problem]:
        """The problems so far, calls not answered yet among them, in message order."""
        problems: list[Problem] = []
        for conv in self._conversations.values():
            problems.extend(conv.problems)
            problems.extend(conv.unanswered(set(conv.calls), "is never answered", mark=False))
        problems.sort(key=lambda p: (p.conversation, p.index, p.code))
        return problems


class _Conversation:
    """The pairing state of one conversation."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.problems: list[Problem] = []
        self.calls: dict[str, tuple[int, int, str]] = {}  # id -> line, index and name of its call
        self.answered: set[str] = set()
        self.reported: set[str] = set()  # calls already reported unanswered
        # Calls the adapter marked terminal (they end the run): never reported unanswered.
        self.terminal: set[str] = set()
        # Calls of the latest assistant turn. Its results may come in any of the messages up to the
        # next assistant turn: consecutive user or tool messages form one API message (Anthropic merges
        # them, OpenAI sends one tool message per result).
        self.open_calls: set[str] = set()
        self.prev_role = ""

    def unanswered(self, ids: set[str], why: str, *, mark: bool = True) -> list[Problem]:
        found: list[Problem] = []
        for tid in sorted(ids - self.answered - self.reported - self.terminal):
            if mark:
                self.reported.add(tid)
            line, index, name = self.calls[tid]
            found.append(
                Problem("unanswered_call", f"tool call {tid!r} ({name}) {why}", line, index, tid, self.number)
            )
        return found

    def add(self, m: Message, strict: bool) -> None:
        conv = self.number
        problems = self.problems
        calls = self.calls
        # Consecutive assistant messages are one turn (Codex writes each parallel call as its own item).
        starts_turn = m.role == "assistant" and self.prev_role != "assistant"
        for tid in m.meta.get(MISSING_IDS, ()):
            problems.append(
                Problem("missing_id", "tool call or result without an id", m.line, m.index, tid, conv)
            )
        for b in m.blocks:
            if isinstance(b, UnknownBlock) and b.type in _TOOL_TYPES:
                problems.append(
                    Problem("missing_id", f"{b.type} block without a usable id", m.line, m.index, "", conv)
                )
        if starts_turn and strict:
            problems.extend(self.unanswered(self.open_calls, "has no result before the next assistant turn"))
        for b in m.blocks:
            if not isinstance(b, ToolResultBlock):
                continue
            tid = b.tool_use_id
            if tid in self.answered and tid in calls:
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
            elif strict and tid not in self.open_calls:
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
            self.answered.add(tid)
        if m.role != "system":
            self.prev_role = m.role
        if starts_turn:
            self.open_calls = set()
        if m.role == "assistant":
            for b in m.blocks:
                if isinstance(b, ToolUseBlock):
                    if b.id in calls:
                        first = calls[b.id][0]
                        problems.append(
                            Problem(
                                "duplicate_call",
                                f"tool call id {b.id!r} ({b.name}) was already used at line {first}",
                                m.line,
                                m.index,
                                b.id,
                                conv,
                            )
                        )
                    # An id used again is a new call (replayed or redacted logs reuse ids): its
                    # answer is still to come.
                    calls[b.id] = (m.line, m.index, b.name)
                    self.answered.discard(b.id)
                    self.reported.discard(b.id)
                    self.open_calls.add(b.id)
                    if b.terminal:
                        self.terminal.add(b.id)
                    else:
                        self.terminal.discard(b.id)


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
