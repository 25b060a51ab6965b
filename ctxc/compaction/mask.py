"""mask: shrink tool results older than the newest ``keep_last_results`` in place, oldest first, by their
tool's post-processor (:mod:`ctxc.compaction.postprocess`), else (and if still over the target) replace
them by a placeholder citing the archive. Only result texts change: pairing holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxc.compaction.base import (
    CTXC_MARK,
    Action,
    CompactContext,
    Slot,
    StrategyResult,
    option,
    register,
    tool_calls,
    with_block,
)
from ctxc.compaction.postprocess import Request, ToolCall, call_summary, postprocess
from ctxc.live import last_request, request_text
from ctxc.model import Message, ToolResultBlock
from ctxc.tokens.cost import image_tokens


@dataclass(frozen=True)
class MaskConfig:
    keep_last_results: int = option(3, "the newest tool results are never masked", min=0, max=1_000_000)
    placeholder_only: bool = option(
        False, "replace old results by a placeholder without post-processing first"
    )


#: Tool results prepared (post-processed and counted) per batch in the first pass.
_CHUNK = 256


@register
class Mask:
    name: ClassVar[str] = "mask"
    uses_summarizer: ClassVar[bool] = False
    best_effort: ClassVar[bool] = False
    description: ClassVar[str] = (
        "Shrink old tool results (top search hits, relevant file lines, command tail and errors), "
        "else leave a placeholder citing the archive"
    )
    Config: ClassVar[type[Any]] = MaskConfig

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: MaskConfig = ctx.config(self)
        msgs = list(messages)
        total = ctx.ledger.total(msgs)
        slots = eligible_slots(msgs, ctx, cfg.keep_last_results) if total > ctx.target else []
        if not slots:
            return StrategyResult(tuple(messages))
        run = _Masking(self.name, msgs, ctx, total)
        # When placeholders everywhere would still leave it over the target (adaptive escalating past
        # this stage), pass 2 undoes every shrinking: post-processing first would be work thrown away.
        run.shrink_or_mask(slots, shrink=not cfg.placeholder_only and not run.out_of_reach(slots))
        run.mask_the_rest(slots)
        return StrategyResult(tuple(msgs), tuple(run.actions))


class _Masking:
    """One mask run over ``msgs`` (rewritten in place), keeping its token ``total`` exact."""

    def __init__(self, strategy: str, msgs: list[Message], ctx: CompactContext, total: int) -> None:
        self.strategy, self.msgs, self.ctx, self.total = strategy, msgs, ctx, total
        self.calls = tool_calls(msgs)
        last = last_request(msgs)
        self.request = Request.of(request_text(last) if last else "")
        self.actions: list[Action] = []
        self.originals: dict[Slot, ToolResultBlock] = {}
        self.masked: set[Slot] = set()
        self._made: dict[Slot, ToolResultBlock] = {}

    def block(self, slot: Slot) -> ToolResultBlock:
        block = self.msgs[slot[0]].blocks[slot[1]]
        assert isinstance(block, ToolResultBlock)
        return block

    def call(self, block: ToolResultBlock) -> ToolCall:
        use = self.calls.get(block.tool_use_id)
        return ToolCall(use.name, use.input) if use is not None else ToolCall(block.name or "")

    def placeholder(self, slot: Slot, block: ToolResultBlock) -> ToolResultBlock:
        if slot not in self._made:
            cite = self.ctx.cite(self.msgs[slot[0]].index)
            text = placeholder_text(block, self.call(block), cite, self.ctx.ledger.count_text(block.text))
            self._made[slot] = replace(block, text=text, images=())
        return self._made[slot]

    def apply(self, slot: Slot, new_block: ToolResultBlock, kind: str, note: str) -> bool:
        """Swap the block in if the message gets smaller."""
        pos, bi = slot
        blocks = with_block(self.msgs[pos], bi, new_block)
        action = self.ctx.shrink(self.msgs, pos, blocks, self.strategy, kind, note)
        if action is not None:
            self.total -= action.saved
            self.actions.append(action)
        return action is not None

    def out_of_reach(self, slots: Sequence[Slot]) -> bool:
        """Whether the total stays over the target with every result a placeholder makes smaller
        replaced by it (exact: a placeholder changes one text and drops that result's images)."""
        live = [s for s in slots if not self.block(s).text.startswith(CTXC_MARK)]
        blocks = [self.block(s) for s in live]
        count = self.ctx.ledger.counter.count
        olds = count([b.text for b in blocks])
        news = count([self.placeholder(s, b).text for s, b in zip(live, blocks, strict=True)])
        saved = sum(
            max(0, old + sum(image_tokens(i) for i in b.images) - new)
            for b, old, new in zip(blocks, olds, news, strict=True)
        )
        return self.total - saved > self.ctx.target

    def shrink_or_mask(self, slots: Sequence[Slot], *, shrink: bool) -> None:
        """Pass 1, oldest first: post-process, else placeholder. Candidates are made a chunk at a time
        and counted in one batch, so each swap is a cache hit."""
        for start in range(0, len(slots), _CHUNK):
            if self.total <= self.ctx.target:
                return
            planned: list[tuple[Slot, ToolResultBlock, str | None, ToolResultBlock]] = []
            for slot in slots[start : start + _CHUNK]:
                block = self.block(slot)
                if block.text.startswith(CTXC_MARK):
                    continue  # shrunk or offloaded by an earlier run: shrinking again would stack notes
                cite = self.ctx.cite(self.msgs[slot[0]].index)
                shrunk = postprocess(block.text, self.call(block), self.request, cite) if shrink else None
                planned.append((slot, block, shrunk, self.placeholder(slot, block)))
            self.ctx.ledger.counter.count([t for _, _, sh, ph in planned for t in (sh or "", ph.text) if t])
            for slot, block, shrunk, stand_in in planned:
                if self.total <= self.ctx.target:
                    return
                label = _label(self.call(block))
                if shrunk is not None and self.apply(slot, replace(block, text=shrunk), "shrink", label):
                    self.originals[slot] = block
                elif self.apply(slot, stand_in, "mask", label):
                    self.originals[slot] = block
                    self.masked.add(slot)

    def mask_the_rest(self, slots: Sequence[Slot]) -> None:
        """Pass 2, still over: shrunk and untouched results alike become placeholders, oldest first,
        all counted in one batch (short texts: a round trip to the counting workers costs more)."""
        if self.total <= self.ctx.target:
            return
        todo = [
            (slot, self.originals.get(slot, self.block(slot))) for slot in slots if slot not in self.masked
        ]
        count = self.ctx.ledger.counter.count
        # A placeholder states its original's tokens: those not counted yet are counted together.
        count([original.text for slot, original in todo if slot not in self._made])
        count([self.placeholder(slot, original).text for slot, original in todo])
        for slot, original in todo:
            if self.total <= self.ctx.target:
                return
            if self.apply(slot, self.placeholder(slot, original), "mask", _label(self.call(original))):
                self.masked.add(slot)


def eligible_slots(messages: Sequence[Message], ctx: CompactContext, keep_last_results: int) -> list[Slot]:
    """Tool results that may be rewritten, oldest first: not the newest ``keep_last_results`` (the
    agent is probably still working with them), not in the last ``ctx.keep_last`` messages nor pinned."""
    all_slots = [
        (pos, bi)
        for pos, m in enumerate(messages)
        for bi, b in enumerate(m.blocks)
        if isinstance(b, ToolResultBlock)
    ]
    cut = max(0, len(all_slots) - keep_last_results)
    editable = set(ctx.editable(messages))
    return [(pos, bi) for pos, bi in all_slots[:cut] if pos in editable]


def placeholder_text(block: ToolResultBlock, call: ToolCall, cite: str, tokens: int) -> str:
    """What a masked result becomes: what it was, how big, and where the original is."""
    summary = call_summary(call)
    lines = block.text.count("\n") + 1 if block.text else 0
    size = f"{tokens:,} tokens, {lines:,} line{'s' if lines != 1 else ''}"
    if block.images:
        size += f", {len(block.images)} image{'s' if len(block.images) != 1 else ''}"
    what = f"{call.name or 'tool'} {'error ' if block.is_error else ''}result"
    about = f" of {summary}" if summary else ""
    return f"[ctxc: {what}{about} removed ({size}); original in {cite}]"


def _label(call: ToolCall) -> str:
    return f"{call.name or 'tool'} {call_summary(call, limit=60)}".strip()
