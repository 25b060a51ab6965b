"""thinking: remove the thinking of older assistant turns, keeping what the API still needs.

A model that keeps earlier turns' thinking in its context pays for it on every later call (Anthropic's
``clear_thinking`` context editing exists for that reason). This strategy removes thinking and redacted
thinking blocks from assistant turns, except:

* the last assistant turn: when the conversation ends in tool results, the turn whose calls they
  answer, which the API wants back with its thinking blocks unmodified, signatures included;
* every assistant turn with a tool call still unanswered.

A message left with no blocks (a Codex ``reasoning`` item, a Claude Code record holding only
thinking) is dropped whole; it has no tool calls, so pairing is unchanged. No note is left in the turn
(the model's own message); each action cites the archive copy of the message it changed. Pinned
messages and the last ``keep_last`` messages are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxc.archive_store import citation
from ctxc.compaction.base import Action, CompactContext, StrategyResult, register
from ctxc.model import Message, ThinkingBlock, ToolResultBlock, ToolUseBlock


@dataclass(frozen=True)
class ThinkingConfig:
    pass


def protected_turns(messages: Sequence[Message]) -> set[int]:
    """Positions of the assistant messages whose thinking must stay: the last assistant turn (the one
    whose tool calls the trailing results answer, if any) and every turn with a call still unanswered."""
    keep: set[int] = set()
    # The last assistant turn: the last run of assistant messages (Codex writes each item apart).
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
        keep = protected_turns(messages)
        # The last ``keep_last`` messages are kept verbatim, as every strategy keeps them.
        keep.update(range(max(0, len(messages) - ctx.keep_last), len(messages)) if ctx.keep_last > 0 else ())
        out: list[Message] = []
        actions: list[Action] = []
        for pos, m in enumerate(messages):
            if (
                m.role != "assistant"
                or pos in keep
                or m.index in ctx.pinned
                or not any(isinstance(b, ThinkingBlock) for b in m.blocks)
            ):
                out.append(m)
                continue
            blocks = tuple(b for b in m.blocks if not isinstance(b, ThinkingBlock))
            removed = len(m.blocks) - len(blocks)
            before = ctx.ledger.tokens(m)
            new = replace(m, blocks=blocks) if blocks else None
            after = ctx.ledger.tokens(new) if new is not None else 0
            if new is not None:
                out.append(new)
            cite = citation(ctx.archive_id, m.index, m.index)
            note = f"{removed} thinking block{'s' if removed != 1 else ''}; original in {cite}"
            actions.append(
                Action(self.name, "drop" if new is None else "shrink", m.index, m.index, before, after, note)
            )
        return StrategyResult(tuple(out), tuple(actions))
