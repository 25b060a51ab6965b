"""adaptive: escalate from the least lossy strategy to the most lossy as the window fills (the
:data:`STAGES`; see docs/strategies.md). It stops once the target is met, and without an explicit target
never goes past the stage usage calls for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxc.compaction.base import Action, CompactContext, StrategyResult, get_strategy, option, register
from ctxc.errors import UsageError
from ctxc.model import Message
from ctxc.stages import DEFAULT_THRESHOLDS, stage_for

#: Which strategies each stage runs, in order.
STAGES: tuple[tuple[int, tuple[str, ...]], ...] = (
    # Redundancy first: what it removes is still in the context (or the archive), then tool output.
    (2, ("dedupe", "thinking", "images", "offload", "mask")),
    (3, ("selective",)),
    (4, ("hierarchical",)),
    (5, ("essential",)),
)


def _share(default: float, starts: str) -> Any:
    return option(default, f"window share where {starts}", min=0.0, max=1.5)


@dataclass(frozen=True)
class AdaptiveConfig:
    stage2: float = _share(DEFAULT_THRESHOLDS[0], "tool-output post-processing starts")
    stage3: float = _share(DEFAULT_THRESHOLDS[1], "trimming old messages starts")
    stage4: float = _share(DEFAULT_THRESHOLDS[2], "summarizing the history starts")
    stage5: float = _share(DEFAULT_THRESHOLDS[3], "only an essential summary is kept")
    essential_keep_last: int = option(
        3, "messages kept verbatim after the essential summary", min=1, max=1000
    )

    def __post_init__(self) -> None:
        if not self.stage2 <= self.stage3 <= self.stage4 <= self.stage5:
            raise UsageError("adaptive stage thresholds must increase: stage2 <= stage3 <= stage4 <= stage5")

    @property
    def thresholds(self) -> tuple[float, float, float, float]:
        return (self.stage2, self.stage3, self.stage4, self.stage5)


@register
class Adaptive:
    name: ClassVar[str] = "adaptive"
    uses_summarizer: ClassVar[bool] = True  # from stage 4 on
    best_effort: ClassVar[bool] = True
    description: ClassVar[str] = (
        "Escalate dedupe/thinking/images/offload/mask → selective → hierarchical → essential summary "
        "as the window fills (default)"
    )
    Config: ClassVar[type[AdaptiveConfig]] = AdaptiveConfig

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: AdaptiveConfig = ctx.config(self)
        current = stage_for(ctx.tokens(messages) / ctx.window, cfg.thresholds)
        ceiling = 5 if ctx.explicit_target else current
        msgs: tuple[Message, ...] = tuple(messages)
        actions: list[Action] = []
        for stage, name in ((stage, name) for stage, names in STAGES for name in names):
            if stage > ceiling or ctx.under_target(msgs):
                break
            result = self.run_stage(name, msgs, ctx, cfg)
            msgs = result.messages
            actions.extend(
                replace(a, note=f"stage {stage}; {a.note}" if a.note else f"stage {stage}")
                for a in result.actions
            )
        return StrategyResult(msgs, tuple(actions))

    @staticmethod
    def run_stage(
        name: str, msgs: tuple[Message, ...], ctx: CompactContext, cfg: AdaptiveConfig
    ) -> StrategyResult:
        """Run one of a stage's strategies (``essential`` is hierarchical in its stage-5 mode)."""
        if name == "selective":
            # Trimming keeps its quoted decisions (stage 4 summarizes them instead) and the log's own summary.
            selective = get_strategy(name)
            trim_cfg = replace(ctx.config(selective), keep_quotes=True)
            own = frozenset(m.index for m in msgs if m.meta.get("is_compact_summary"))
            trim_ctx = replace(ctx, pinned=ctx.pinned | own, configs={**ctx.configs, name: trim_cfg})
            return selective.compact(msgs, trim_ctx)
        if name != "essential":
            return get_strategy(name).compact(msgs, ctx)
        hierarchical = get_strategy("hierarchical")
        essential = replace(ctx.config(hierarchical), essential=True, keep_last=cfg.essential_keep_last)
        result = hierarchical.compact(msgs, replace(ctx, configs={**ctx.configs, "hierarchical": essential}))
        return StrategyResult(
            result.messages, tuple(replace(a, strategy="essential") for a in result.actions)
        )
