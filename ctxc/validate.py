"""Tool-call pairing and role checks over the model, for any format. Loose: every result answers an
earlier call (a real log); strict: each result right after its call's turn, as an API takes it."""

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

#: Block types of an API's tool traffic: an unknown block of one is a call or result without a usable id.
TOOL_BLOCK_TYPES = frozenset({"tool_use", "tool_result"})


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


def _problem(code: ProblemCode, message: str, m: Message, tool_id: str = "") -> Problem:
    return Problem(code, message, m.line, m.index, tool_id, m.conversation)


def pairing_problems(messages: Iterable[Message], *, strict: bool = False) -> list[Problem]:
    """Every pairing problem, in message order. See the module docstring for ``strict``."""
    pairing = Pairing(strict=strict)
    for m in messages:
        pairing.add(m)
    return pairing.problems()


class Pairing:
    """The checks of :func:`pairing_problems` fed one message at a time, keeping only the calls' ids,
    lines and names (a reader streaming a large file keeps no message)."""

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
        self.terminal: set[str] = set()  # calls that end the run: never unanswered
        # Calls of the latest assistant turn, answerable up to the next (user and tool messages between).
        self.open_calls: set[str] = set()
        self.prev_role = ""

    def unanswered(self, ids: set[str], why: str, *, mark: bool = True) -> list[Problem]:
        found: list[Problem] = []
        for tid in sorted(ids - self.answered - self.reported - self.terminal):
            if mark:
                self.reported.add(tid)
            line, index, name = self.calls[tid]
            text = f"tool call {tid!r} ({name}) {why}"
            found.append(Problem("unanswered_call", text, line, index, tid, self.number))
        return found

    def add(self, m: Message, strict: bool) -> None:
        problems, calls = self.problems, self.calls
        # Consecutive assistant messages are one turn (Codex writes each parallel call as its own item),
        # except in OpenAI's chat shape, where a message's calls are answered right after it.
        starts_turn = m.role == "assistant" and (self.prev_role != "assistant" or openai_chat(m))
        for tid in m.meta.get(MISSING_IDS, ()):
            problems.append(_problem("missing_id", "tool call or result without an id", m, tid))
        for b in m.blocks:
            if isinstance(b, UnknownBlock) and b.type in TOOL_BLOCK_TYPES:
                problems.append(_problem("missing_id", f"{b.type} block without a usable id", m))
        if starts_turn and strict:
            problems.extend(self.unanswered(self.open_calls, "has no result before the next assistant turn"))
        for b in m.blocks:
            if not isinstance(b, ToolResultBlock):
                continue
            tid = b.tool_use_id
            if tid in self.answered and tid in calls:
                problems.append(_problem("duplicate_result", f"second result for tool call {tid!r}", m, tid))
            elif tid not in calls:
                why = f"tool result {tid!r} answers no earlier tool call"
                problems.append(_problem("orphan_result", why, m, tid))
            elif strict and tid not in self.open_calls:
                why = f"tool result {tid!r} does not follow its call's turn"
                problems.append(_problem("result_not_adjacent", why, m, tid))
            self.answered.add(tid)
        if m.role != "system":
            self.prev_role = m.role
        if starts_turn:
            self.open_calls = set()
        if m.role != "assistant":
            return
        for b in m.blocks:
            if not isinstance(b, ToolUseBlock):
                continue
            if b.id in calls:
                why = f"tool call id {b.id!r} ({b.name}) was already used at line {calls[b.id][0]}"
                problems.append(_problem("duplicate_call", why, m, b.id))
            # A reused id is a new call (replayed or redacted logs reuse ids): its answer is still to come.
            calls[b.id] = (m.line, m.index, b.name)
            self.answered.discard(b.id)
            self.reported.discard(b.id)
            self.open_calls.add(b.id)
            if b.terminal:
                self.terminal.add(b.id)
            else:
                self.terminal.discard(b.id)


def openai_chat(m: Message) -> bool:
    """Whether ``m`` is an OpenAI chat message (its calls must be answered by the messages right after it)."""
    return m.meta.get("dialect") == "openai"


def role_problems(messages: Iterable[Message]) -> list[Problem]:
    """Blocks in a role that cannot carry them: results from the assistant, calls from the user."""
    problems: list[Problem] = []
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolResultBlock) and m.role not in ("user", "tool"):
                why = f"tool result {b.tool_use_id!r} in a {m.role} message"
                problems.append(_problem("result_outside_user_or_tool", why, m, b.tool_use_id))
            elif isinstance(b, ToolUseBlock) and m.role != "assistant":
                why = f"tool call {b.id!r} in a {m.role} message"
                problems.append(_problem("call_outside_assistant", why, m, b.id))
        if m.role == "tool" and not any(isinstance(b, ToolResultBlock) for b in m.blocks):
            problems.append(_problem("tool_message_without_result", "tool message carries no tool result", m))
    return problems


def all_problems(messages: Sequence[Message], *, strict: bool = True) -> list[Problem]:
    """Pairing and role problems together, in message order."""
    found = pairing_problems(messages, strict=strict) + role_problems(messages)
    found.sort(key=lambda p: (p.conversation, p.index, p.code))
    return found
