"""images: replace images older than the last few assistant turns by a placeholder.

An image the model has already looked at, several turns ago, costs up to ~1,600 tokens on every later
call. Images (whole image blocks, and images returned inside tool results) in messages before the
``keep_last_turns``-th last assistant turn become one line saying what they were (media type,
dimensions when known, size) and citing the archive, where the original is. Pinned messages and the
last ``keep_last`` messages are left alone. Only blocks change (an image block becomes a text block,
a result loses its images): pairing is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxc.archive_store import citation
from ctxc.compaction.base import Action, CompactContext, StrategyResult, option, register
from ctxc.model import Block, ImageBlock, Message, TextBlock, ToolResultBlock


@dataclass(frozen=True)
class ImagesConfig:
    keep_last_turns: int = option(
        3, "images in and after the last this many assistant turns stay", min=0, max=1_000_000
    )


def describe(image: ImageBlock) -> str:
    """What an image was: media type, dimensions when known, and size."""
    parts = [image.media_type or "image"]
    if image.width and image.height:
        parts.append(f"{image.width}x{image.height}")
    if image.data_bytes:
        parts.append(f"{image.data_bytes:,} bytes")
    return ", ".join(parts)


def placeholder(images: Sequence[ImageBlock], cite: str) -> str:
    what = "; ".join(describe(i) for i in images)
    noun = "image" if len(images) == 1 else f"{len(images)} images"
    return f"[ctxc: {noun} removed ({what}); original in {cite}]"


@register
class Images:
    name: ClassVar[str] = "images"
    description: ClassVar[str] = (
        "Replace images older than the last 3 assistant turns by a placeholder (media type, size, "
        "archive citation)"
    )
    Config: ClassVar[type[Any]] = ImagesConfig
    uses_summarizer: ClassVar[bool] = False
    best_effort: ClassVar[bool] = False

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: ImagesConfig = ctx.config(self)
        msgs = list(messages)
        assistant = [pos for pos, m in enumerate(msgs) if m.role == "assistant"]
        if cfg.keep_last_turns == 0:
            cut = len(msgs)
        elif len(assistant) >= cfg.keep_last_turns:
            cut = assistant[-cfg.keep_last_turns]
        else:
            cut = 0
        tail = len(msgs) - ctx.keep_last if ctx.keep_last > 0 else len(msgs)
        actions: list[Action] = []
        for pos in range(min(cut, tail)):
            old = msgs[pos]
            if old.index in ctx.pinned:
                continue
            cite = citation(ctx.archive_id, old.index, old.index)
            blocks: list[Block] = []
            removed: list[ImageBlock] = []
            for b in old.blocks:
                if isinstance(b, ImageBlock):
                    removed.append(b)
                    blocks.append(TextBlock(placeholder([b], cite)))
                elif isinstance(b, ToolResultBlock) and b.images:
                    removed.extend(b.images)
                    note = placeholder(b.images, cite)
                    blocks.append(replace(b, text=f"{b.text}\n{note}" if b.text else note, images=()))
                else:
                    blocks.append(b)
            if not removed:
                continue
            new = replace(old, blocks=tuple(blocks))
            before, after = ctx.ledger.tokens(old), ctx.ledger.tokens(new)
            if after >= before:
                continue
            msgs[pos] = new
            n = len(removed)
            actions.append(
                Action(
                    self.name,
                    "mask",
                    old.index,
                    old.index,
                    before,
                    after,
                    f"{n} image{'s' if n != 1 else ''}",
                )
            )
        return StrategyResult(tuple(msgs), tuple(actions))
