"""images: replace images older than the last few assistant turns (up to ~1,600 tokens each on every
later call) by a line citing the archive. Only blocks change, so pairing is unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxc.compaction.base import Action, CompactContext, StrategyResult, option, register
from ctxc.model import Block, ImageBlock, Message, TextBlock, ToolResultBlock


@dataclass(frozen=True)
class ImagesConfig:
    keep_last_turns: int = option(
        3, "images in and after the last this many assistant turns stay", min=0, max=1_000_000
    )


def describe(image: ImageBlock) -> str:
    """What an image was: media type, dimensions when known, and size."""
    dims = f"{image.width}x{image.height}" if image.width and image.height else ""
    size = f"{image.data_bytes:,} bytes" if image.data_bytes else ""
    return ", ".join(part for part in (image.media_type or "image", dims, size) if part)


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
        keep = cfg.keep_last_turns
        cut = len(msgs) if keep == 0 else assistant[-keep] if len(assistant) >= keep else 0
        actions: list[Action] = []
        for pos in ctx.editable(msgs, cut):
            old = msgs[pos]
            cite = ctx.cite(old.index)
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
            n = len(removed)
            note = f"{n} image{'s' if n != 1 else ''}"
            if n and (action := ctx.shrink(msgs, pos, blocks, self.name, "mask", note)):
                actions.append(action)
        return StrategyResult(tuple(msgs), tuple(actions))
