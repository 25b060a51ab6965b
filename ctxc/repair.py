"""Make a conversation valid for the API it targets, changing as little as possible.

Orphan tool results (their call is gone) are removed; calls left unanswered get an explicit
"no result recorded" result placed right after their turn, in the dialect the conversation already
uses (a ``tool`` message per call for OpenAI-like logs, one user message of tool_result blocks for
Anthropic-like ones). Compaction runs this as its last step; ``ctxc repair`` runs it on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.validate import Problem, pairing_problems

NO_RESULT = "[ctxc] no result was recorded for this tool call"


def uses_tool_role(messages: Sequence[Message], default: bool = False) -> bool:
    """Whether results travel as role ``tool`` messages (OpenAI, Codex) rather than in user messages."""
    for m in messages:
        if m.role == "tool":
            return True
        if m.role == "user" and any(isinstance(b, ToolResultBlock) for b in m.blocks):
            return False
    return default


def _carries_results(m: Message) -> bool:
    return m.role == "tool" or (m.role == "user" and any(isinstance(b, ToolResultBlock) for b in m.blocks))


def repair_messages(
    messages: Sequence[Message], *, tool_role: bool | None = None
) -> tuple[tuple[Message, ...], tuple[Problem, ...]]:
    """Return repaired messages (per conversation) and the problems that were fixed."""
    problems = pairing_problems(messages, strict=True)
    if not problems:
        return tuple(messages), ()
    use_tool_role = uses_tool_role(messages) if tool_role is None else tool_role
    drop_results = {(p.conversation, p.index, p.tool_id) for p in problems if p.code != "unanswered_call"}
    unanswered = {(p.conversation, p.tool_id) for p in problems if p.code == "unanswered_call"}
    # Results that were not adjacent are dropped too, so their calls need answering again.
    relocated = {(p.conversation, p.tool_id) for p in problems if p.code == "result_not_adjacent"}
    out: list[Message] = []
    pending: list[tuple[int, ToolUseBlock]] = []  # calls of the current assistant turn still to answer

    def flush() -> None:
        if not pending:
            return
        conv = pending[0][0]
        results = [
            ToolResultBlock(tool_use_id=b.id, text=NO_RESULT, is_error=True, name=b.name) for _, b in pending
        ]
        if use_tool_role:
            out.extend(
                Message(role="tool", blocks=(r,), conversation=conv, meta={"ctxc": "repair"}) for r in results
            )
        else:
            out.append(
                Message(role="user", blocks=tuple(results), conversation=conv, meta={"ctxc": "repair"})
            )
        pending.clear()

    prev: Message | None = None
    for m in messages:
        continues_turn = (
            prev is not None
            and m.conversation == prev.conversation
            and ((m.role == "assistant" and prev.role == "assistant") or _carries_results(m))
        )
        if pending and not continues_turn:
            flush()  # right after the turn's own results, before anything else is said
        blocks = tuple(
            b
            for b in m.blocks
            if not (
                isinstance(b, ToolResultBlock) and (m.conversation, m.index, b.tool_use_id) in drop_results
            )
        )
        if len(blocks) == len(m.blocks):
            out.append(m)
        elif any(not isinstance(b, TextBlock) or b.text.strip() for b in blocks):
            out.append(replace(m, blocks=blocks))
        # else: nothing (or only blank text) is left, and an empty message is invalid too: drop it.
        if m.role == "assistant":
            pending.extend(
                (m.conversation, b)
                for b in m.blocks
                if isinstance(b, ToolUseBlock)
                and ((m.conversation, b.id) in unanswered or (m.conversation, b.id) in relocated)
            )
        prev = m
    flush()
    return tuple(out), tuple(problems)
