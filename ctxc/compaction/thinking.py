"""thinking: remove the thinking of older assistant turns. The last turn and turns with a call unanswered
keep theirs, signatures included; a message left empty (a Codex ``reasoning`` item) goes whole; thinking
the client does not send (another model's) stays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxc.compaction.base import Action, CompactContext, StrategyResult, register
from ctxc.model import Message, ThinkingBlock, ToolResultBlock, ToolUseBlock


@dataclass(frozen=True)
class ThinkingConfig:
    pass


def protected_turns(messages: Sequence[Message]) -> set[int]:
    """Positions of the assistant messages whose thinking must stay: the last assistant turn (the one
    whose tool calls the trailing results answer, if any) and every turn with a call still unanswered."""
    keep: set[int] = set()
    # The last run of assistant messages (Codex writes each item apart).
    pos = len(messages) - 1
    while pos >= 0 and messages[pos].role != "assistant":
        pos -= 1
    while pos >= 0 and messages[pos].role in ("assistant", "system"):
        if messages[pos].role == "assistant":
            keep.add(pos)
        pos -= 1
    answered = {b.tool_use_id for m in messages for b in m.blocks if isinstance(b, ToolResultBlock)}
    for pos, m in enumerate(messages):
        if m.role == "assistant" and any(
            isinstance(b, ToolUseBlock) and not b.terminal and b.id not in answered for b in m.blocks
        ):
            keep.add(pos)
    return keep


@register
class Thinking:
    name: ClassVar[str] = "thinking"
    description: ClassVar[str] = (
        "Remove thinking blocks of older assistant turns (the last turn, and turns whose calls await "
        "results, keep theirs, with their signatures)"
    )
    Config: ClassVar[type[Any]] = ThinkingConfig
    uses_summarizer: ClassVar[bool] = False
    best_effort: ClassVar[bool] = False

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        editable = set(ctx.editable(messages)) - protected_turns(messages)
        out: list[Message] = []
        changed: list[tuple[Message, Message | None, int]] = []  # old, new (None: dropped), blocks removed
        for pos, m in enumerate(messages):
            if (
                m.role != "assistant"
                or pos not in editable
                or not any(isinstance(b, ThinkingBlock) for b in m.blocks)
                or not ctx.ledger.sends_thinking(m)  # removing it would save nothing
            ):
                out.append(m)
                continue
            blocks = tuple(b for b in m.blocks if not isinstance(b, ThinkingBlock))
            new = replace(m, blocks=blocks) if blocks else None  # else nothing is left of the message
            if new is not None:
                out.append(new)
            changed.append((m, new, len(m.blocks) - len(blocks)))
        ctx.ledger.count_uncounted([new for _, new, _ in changed if new is not None])
        actions: list[Action] = []
        for m, new, removed in changed:
            before = ctx.ledger.tokens(m)
            after, kind = (ctx.ledger.tokens(new), "shrink") if new is not None else (0, "drop")
            note = f"{removed} thinking block{'s' if removed != 1 else ''}; original in {ctx.cite(m.index)}"
            actions.append(Action(self.name, kind, m.index, m.index, before, after, note))
        return StrategyResult(tuple(out), tuple(actions))
