"""mask: shrink old tool results in place, the least lossy way to make room.

Tool results older than the newest ``keep_last_results`` are rewritten, oldest first, until the target
is met. First pass: each is shrunk by its tool's post-processor (:mod:`ctxc.compaction.postprocess`:
top search results, the request-relevant lines of a file read, the tail and errors of a command);
a result no processor can make smaller becomes a placeholder. Second pass, only if still over the
target: the shrunk results become placeholders too, oldest first. When even placeholders everywhere
would leave the conversation over the target (the adaptive pipeline escalating past this stage), the
first pass goes straight to placeholders, since the second would undo its shrinking. A placeholder says
what was removed (tool, size, the call's file path or command) and cites the archive so it can be
recovered.

Only the text of ``ToolResultBlock``s changes: no message is dropped, added or reordered, so tool
pairing is exactly what it was. Pinned messages and the last ``keep_last`` messages are left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxc.archive_store import citation
from ctxc.compaction.base import Action, CompactContext, StrategyResult, option, register
from ctxc.compaction.postprocess import Request, ToolCall, call_summary, current_request, postprocess
from ctxc.model import Message, ToolResultBlock, ToolUseBlock
from ctxc.tokens.cost import image_tokens


@dataclass(frozen=True)
class MaskConfig:
    keep_last_results: int = option(3, "the newest tool results are never masked", min=0, max=1_000_000)
    placeholder_only: bool = option(
        False, "replace old results by a placeholder without post-processing first"
    )


#: How every note, placeholder and pointer ctxc writes into a tool result begins.
CTXC_MARK = "[ctxc"

#: A tool result's place: (position in the message list, position in the message's blocks).
Slot = tuple[int, int]


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
        if total <= ctx.target:
            return StrategyResult(tuple(messages))
        slots = eligible_slots(msgs, ctx, cfg.keep_last_results)
        if not slots:
            return StrategyResult(tuple(messages))
        calls = _calls(msgs)
        request = Request.of(current_request(msgs))
        originals: dict[Slot, ToolResultBlock] = {}
        placeholders: set[Slot] = set()
        actions: list[Action] = []
        made: dict[Slot, ToolResultBlock] = {}

        def placeholder(slot: Slot, block: ToolResultBlock) -> ToolResultBlock:
            if slot not in made:
                pos = slot[0]
                cite = citation(ctx.archive_id, msgs[pos].index, msgs[pos].index)
                made[slot] = _placeholder_block(block, _call_of(block, calls), cite, ctx)
            return made[slot]

        # When placeholders for every result would still leave the conversation over the target, the
        # second pass turns every shrunk result into its placeholder anyway (keeping a shrunk one only
        # where it came out no larger than its placeholder): post-processing them first, the costliest
        # work here, would be thrown away. The adaptive pipeline meets this case whenever it escalates.
        shrink = not cfg.placeholder_only and not _out_of_reach(msgs, slots, placeholder, ctx, total)

        def apply(slot: Slot, new_block: ToolResultBlock, kind: str, note: str) -> bool:
            """Swap the block in if the message gets smaller; keep the running total exact."""
            nonlocal total
            pos, bi = slot
            old = msgs[pos]
            blocks = list(old.blocks)
            blocks[bi] = new_block
            new = replace(old, blocks=tuple(blocks))
            before, after = ctx.ledger.tokens(old), ctx.ledger.tokens(new)
            if after >= before:
                return False
            msgs[pos] = new
            total += after - before
            actions.append(Action(self.name, kind, old.index, old.index, before, after, note))
            return True

        # Pass 1: post-process (or, where nothing helps, placeholder) oldest first. Candidates are made a
        # chunk at a time and their texts counted in one batch, so each swap below is a cache hit.
        for start in range(0, len(slots), _CHUNK):
            if total <= ctx.target:
                break
            planned: list[tuple[Slot, ToolResultBlock, str | None, ToolResultBlock]] = []
            for slot in slots[start : start + _CHUNK]:
                pos, bi = slot
                block = msgs[pos].blocks[bi]
                assert isinstance(block, ToolResultBlock)
                if block.text.startswith(CTXC_MARK):
                    continue  # shrunk or offloaded by an earlier run: shrinking again would stack notes
                call = _call_of(block, calls)
                cite = citation(ctx.archive_id, msgs[pos].index, msgs[pos].index)
                shrunk = postprocess(block.text, call, request, cite) if shrink else None
                planned.append((slot, block, shrunk, placeholder(slot, block)))
            ctx.ledger.counter.count([t for _, _, sh, ph in planned for t in (sh or "", ph.text) if t])
            for slot, block, shrunk, stand_in in planned:
                if total <= ctx.target:
                    break
                label = _label(_call_of(block, calls))
                if shrunk is not None and apply(slot, replace(block, text=shrunk), "shrink", label):
                    originals[slot] = block
                    continue
                if apply(slot, stand_in, "mask", label):
                    originals[slot] = block
                    placeholders.add(slot)

        # Pass 2: still over: shrunk and untouched results alike become placeholders, oldest first.
        for slot in slots:
            if total <= ctx.target:
                break
            if slot in placeholders:
                continue
            pos, bi = slot
            current = msgs[pos].blocks[bi]
            assert isinstance(current, ToolResultBlock)
            original = originals.get(slot, current)
            if apply(slot, placeholder(slot, original), "mask", _label(_call_of(original, calls))):
                placeholders.add(slot)
        return StrategyResult(tuple(msgs), tuple(actions))


def _out_of_reach(
    msgs: Sequence[Message],
    slots: Sequence[Slot],
    placeholder: Callable[[Slot, ToolResultBlock], ToolResultBlock],
    ctx: CompactContext,
    total: int,
) -> bool:
    """Whether ``total`` stays over the target with every result that a placeholder makes smaller
    replaced by it. Exact: a message costs its texts, framing and images, and a placeholder changes one
    text and drops that result's images."""
    blocks: list[ToolResultBlock] = []
    stand_ins: list[str] = []
    for slot in slots:
        block = msgs[slot[0]].blocks[slot[1]]
        if isinstance(block, ToolResultBlock) and not block.text.startswith(CTXC_MARK):
            blocks.append(block)
            stand_ins.append(placeholder(slot, block).text)
    count = ctx.ledger.counter.count
    saved = 0
    for block, old, new in zip(blocks, count([b.text for b in blocks]), count(stand_ins), strict=True):
        saved += max(0, old + sum(image_tokens(i) for i in block.images) - new)
    return total - saved > ctx.target


def eligible_slots(messages: Sequence[Message], ctx: CompactContext, keep_last_results: int) -> list[Slot]:
    """Tool results that may be rewritten, oldest first.

    Not the newest ``keep_last_results`` results (the agent is probably still working with them), not
    in the last ``ctx.keep_last`` messages (the user asked for those verbatim), not in pinned messages.
    """
    all_slots = [
        (pos, bi)
        for pos, m in enumerate(messages)
        for bi, b in enumerate(m.blocks)
        if isinstance(b, ToolResultBlock)
    ]
    cut = len(all_slots) - keep_last_results if keep_last_results else len(all_slots)
    tail_start = len(messages) - ctx.keep_last if ctx.keep_last > 0 else len(messages)
    return [
        (pos, bi)
        for pos, bi in all_slots[: max(0, cut)]
        if pos < tail_start and messages[pos].index not in ctx.pinned
    ]


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


def _placeholder_block(
    block: ToolResultBlock, call: ToolCall, cite: str, ctx: CompactContext
) -> ToolResultBlock:
    text = placeholder_text(block, call, cite, ctx.ledger.count_text(block.text))
    return replace(block, text=text, images=())


def _calls(messages: Sequence[Message]) -> dict[str, ToolUseBlock]:
    return {b.id: b for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)}


def _call_of(block: ToolResultBlock, calls: dict[str, ToolUseBlock]) -> ToolCall:
    use = calls.get(block.tool_use_id)
    if use is not None:
        return ToolCall(use.name, use.input)
    return ToolCall(block.name or "")


def _label(call: ToolCall) -> str:
    summary = call_summary(call, limit=60)
    return f"{call.name or 'tool'} {summary}".strip()
