"""hierarchical: one structured summary of the oldest stretch the target requires, detail by tier; its
budget halves down to ``BUDGET_FLOOR`` while over the target. ``essential`` (adaptive's stage 5)
summarizes the whole history into intent, current state and next steps."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ctxc.compaction.base import CompactContext, StrategyResult, option, register
from ctxc.compaction.recursive import plan_layout, summarize
from ctxc.model import Message

#: A summary over the target is asked again with half the budget, down to this floor.
BUDGET_FLOOR = 200


@dataclass(frozen=True, slots=True)
class HierarchicalConfig:
    keep_last: int = option(0, "messages kept verbatim at the end (0 = the run's --keep-last)", min=0)
    summary_tokens: int = option(3000, "most tokens the summary may take", min=1)
    essential: bool = option(
        False, "essential summary only (intent, current state, next steps) of the whole history"
    )


#: A summary is planned at a quarter of the tokens it replaces (at least BUDGET_FLOOR, at most
#: summary_tokens): enough for its tiers, and the least history summarized when the target is generous.
COMPRESSION = 4


@register
class Hierarchical:
    name: ClassVar[str] = "hierarchical"
    uses_summarizer: ClassVar[bool] = True
    best_effort: ClassVar[bool] = False
    description: ClassVar[str] = (
        "One structured summary of the history: decisions and instructions verbatim, events one line each, "
        "routine work as counts"
    )
    Config: ClassVar[type[HierarchicalConfig]] = HierarchicalConfig

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: HierarchicalConfig = ctx.config(self)
        layout = plan_layout(messages, ctx, cfg.keep_last or ctx.keep_last)
        if layout is None:
            return StrategyResult(tuple(messages))
        cands = layout.candidates
        room = ctx.target - layout.fixed - layout.overhead  # for the summary text once all history is in it
        cap = max(1, min(cfg.summary_tokens, room))
        prefix = list(itertools.accumulate((layout.unit_tokens[u] for u in cands), initial=0))

        def rest(n: int) -> int:
            """What stays verbatim of the candidates once the first ``n`` are summarized."""
            return prefix[-1] - prefix[n]

        def planned_budget(n: int) -> int:
            return max(1, min(cap, max(BUDGET_FLOOR, prefix[n] // COMPRESSION)))

        def smallest(cost: int | None = None) -> int:
            """The fewest candidate units to summarize so that the output fits, with a summary costing
            ``cost`` (or its planned budget), or all of them when no prefix does."""
            for n in range(1, len(cands) + 1):
                c = cost if cost is not None else planned_budget(n) + layout.overhead
                if layout.fixed + rest(n) + c <= ctx.target:
                    return n
            return len(cands)

        n = len(cands) if cfg.essential else smallest()
        budget = cap if cfg.essential else planned_budget(n)
        floor = min(BUDGET_FLOOR, budget)

        best: tuple[int, Message, int] | None = None  # (output tokens, summary, units summarized)
        while True:
            summary = summarize(ctx, layout.span_messages(cands[:n]), budget, essential=cfg.essential)
            cost = ctx.ledger.tokens(summary)
            total = layout.fixed + rest(n) + cost
            if best is None or total < best[0]:
                best = (total, summary, n)
            if total <= ctx.target:
                break
            # Larger than planned: summarize more of the history first, then ask for less.
            grown = smallest(cost)
            if grown > n:
                n = grown
                continue
            if budget <= floor:
                break
            budget = max(floor, budget // 2)

        _, summary, n = best
        tiers = "essential sections" if cfg.essential else "tiered sections"
        return layout.summarized(self.name, cands[:n], summary, ctx, f" into one summary ({tiers})")
