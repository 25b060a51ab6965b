"""recursive: summarize the oldest chunk, then fold that summary and the next chunk into a new one until
the rest fits; ONE summary stands where the span began, pinned units in it staying verbatim after it.
The layout and summary helpers are shared with ``hierarchical``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ctxc.compaction.base import Action, CompactContext, StrategyResult, option, protected_units, register
from ctxc.compaction.units import Unit, units
from ctxc.model import Message, TextBlock
from ctxc.summarize import SummaryRequest
from ctxc.tokens.cost import count_messages


@dataclass(frozen=True, slots=True)
class Layout:
    """Which units may be summarized: ``candidates`` (positions into ``parts``, oldest first, not pinned
    nor in the tail); ``fixed``: the tokens of every other unit, which stays verbatim."""

    messages: tuple[Message, ...]
    parts: tuple[Unit, ...]
    unit_tokens: tuple[int, ...]
    candidates: tuple[int, ...]
    fixed: int
    overhead: int  # what a summary message costs beyond its text (framing)

    def span_messages(self, chosen: Sequence[int]) -> tuple[Message, ...]:
        return tuple(m for u in chosen for m in self.parts[u].messages(self.messages))

    def tokens_of(self, chosen: Sequence[int]) -> int:
        return sum(self.unit_tokens[u] for u in chosen)

    def summarized(
        self, strategy: str, chosen: Sequence[int], summary: Message, ctx: CompactContext, note: str
    ) -> StrategyResult:
        """The output with ``summary`` where the first chosen unit was, unless it costs more than
        what it replaces; ``note`` follows the message count in the action."""
        replaced = self.span_messages(chosen)
        before, after = self.tokens_of(chosen), ctx.ledger.tokens(summary)
        if after >= before:
            return StrategyResult(self.messages)
        first, last = replaced[0].index, replaced[-1].index
        action = Action(
            strategy, "summarize", first, last, before, after, f"{len(replaced)} message(s){note}"
        )
        chosen_set = set(chosen)
        out: list[Message] = []
        for u, part in enumerate(self.parts):
            if u not in chosen_set:
                out.extend(part.messages(self.messages))
            elif u == chosen[0]:
                out.append(summary)
        return StrategyResult(tuple(out), (action,))


def plan_layout(messages: Sequence[Message], ctx: CompactContext, keep_last: int) -> Layout | None:
    """The summarizable history of ``messages``, or None when they are within the target or there is
    none: the tail (at least the last message) and units holding a pinned message stay."""
    msgs = tuple(messages)
    if not msgs or ctx.under_target(msgs):
        return None
    parts = tuple(units(msgs))
    tokens = tuple(ctx.ledger.total(p.messages(msgs)) for p in parts)
    keep = protected_units(msgs, parts, ctx, keep_last)
    candidates = tuple(u for u in range(len(parts)) if u not in keep)
    if not candidates:
        return None
    # The framing is counted without the ledger so the probe is not kept alive in its memo.
    framed = count_messages([summary_message("x", msgs[:1])], ctx.ledger.counter)[0]
    fixed = sum(tokens[u] for u in keep)
    return Layout(msgs, parts, tokens, candidates, fixed, max(0, framed - ctx.ledger.count_text("x")))


def summary_message(text: str, replaced: Sequence[Message]) -> Message:
    """The brand-new user message carrying a summary of ``replaced`` (in order)."""
    first, last = replaced[0], replaced[-1]
    meta = {"ctxc": "summary", "replaces": (first.index, last.index)}
    return Message(
        "user",
        (TextBlock(text),),
        line=first.line,
        index=first.index,
        conversation=first.conversation,
        meta=meta,
    )


def summarize(
    ctx: CompactContext,
    covered: Sequence[Message],
    budget: int,
    *,
    messages: Sequence[Message] = (),
    previous: str | None = None,
    essential: bool = False,
) -> Message:
    """The summary message standing for ``covered``, of ``messages`` (default: them)."""
    citation = ctx.cite(covered[0].index, covered[-1].index)
    request = SummaryRequest(
        tuple(messages or covered), citation, budget, previous, ctx.instructions, essential=essential
    )
    return summary_message(ctx.summarizer.summarize(request, ctx.ledger.count_text), covered)


@dataclass(frozen=True, slots=True)
class RecursiveConfig:
    keep_last: int = option(0, "messages kept verbatim at the end (0 = the run's --keep-last)", min=0)
    chunk_tokens: int = option(20000, "history tokens summarized per fold (whole tool turns)", min=1)
    summary_tokens: int = option(2000, "most tokens the summary may take", min=1)


@register
class Recursive:
    name: ClassVar[str] = "recursive"
    uses_summarizer: ClassVar[bool] = True
    best_effort: ClassVar[bool] = False
    description: ClassVar[str] = (
        "Summarize the oldest chunk, then fold that summary and the next chunk into a new one; keeps last N"
    )
    Config: ClassVar[type[RecursiveConfig]] = RecursiveConfig

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: RecursiveConfig = ctx.config(self)
        layout = plan_layout(messages, ctx, cfg.keep_last or ctx.keep_last)
        if layout is None:
            return StrategyResult(tuple(messages))
        cands, overhead = layout.candidates, layout.overhead
        # At most what the target leaves once all is folded: the last fold fits if the verbatim part does.
        budget = max(1, min(cfg.summary_tokens, ctx.target - layout.fixed - overhead))
        remaining = layout.tokens_of(cands)
        summary: Message | None = None
        done = folds = 0
        while done < len(cands):
            # No more than the target still needs removed (with room for a full summary): the least is lost.
            current = ctx.ledger.tokens(summary) if summary is not None else 0
            needed = layout.fixed + remaining + max(current, budget + overhead) - ctx.target
            limit = max(1, min(cfg.chunk_tokens, needed))
            chunk: list[int] = []
            chunk_tokens = 0
            while done < len(cands) and chunk_tokens < limit:
                if chunk and chunk_tokens + layout.unit_tokens[cands[done]] > cfg.chunk_tokens:
                    break
                chunk.append(cands[done])
                chunk_tokens += layout.unit_tokens[cands[done]]
                done += 1
            remaining -= chunk_tokens
            previous = summary.text if summary is not None else None
            chunk_messages = layout.span_messages(chunk)
            summary = summarize(
                ctx, layout.span_messages(cands[:done]), budget, messages=chunk_messages, previous=previous
            )
            folds += 1
            if layout.fixed + remaining + ctx.ledger.tokens(summary) <= ctx.target:
                break
        assert summary is not None
        return layout.summarized(self.name, cands[:done], summary, ctx, f" in {folds} fold(s)")
