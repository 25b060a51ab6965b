"""What a message costs in context tokens: :data:`MESSAGE_OVERHEAD` for its framing, plus the tokens of
each text-bearing part (:func:`message_texts`), plus its images (:func:`image_tokens`). Parts, not the
message's JSON: keys and escapes never reach the model."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice

from ctxc.model import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    dumps_compact,
)
from ctxc.tokens.base import Counter, StartingCounter
from ctxc.tokens.cache import CachedCounter

#: Fixed tokens per message for its role and delimiters: OpenAI's documented 3 plus the role; Anthropic's
#: count_tokens reports a similar few per turn, so one figure serves both.
MESSAGE_OVERHEAD = 4

#: Anthropic bills an image at width * height / 750 tokens after scaling it down to a long edge of at
#: most 1568 px and at most ~1,600 tokens (docs: "Vision").
IMAGE_PIXELS_PER_TOKEN = 750
IMAGE_MAX_EDGE = 1568
IMAGE_MAX_TOKENS = 1600
#: An image of unknown size costs the most an image can: over-counting is safer than an overflow.
IMAGE_UNKNOWN_TOKENS = IMAGE_MAX_TOKENS


def image_tokens(block: ImageBlock) -> int:
    """Anthropic's token cost of an image, or :data:`IMAGE_UNKNOWN_TOKENS` when its size is unknown."""
    w, h = block.width, block.height
    if not w or not h or w <= 0 or h <= 0:
        return IMAGE_UNKNOWN_TOKENS
    scale = min(1.0, IMAGE_MAX_EDGE / max(w, h))
    pixels = min(w * h * scale * scale, float(IMAGE_MAX_TOKENS * IMAGE_PIXELS_PER_TOKEN))
    return max(1, math.ceil(pixels / IMAGE_PIXELS_PER_TOKEN))


def message_texts(message: Message) -> list[str]:
    """The texts of a message that cost tokens, one per part, empty parts left out: block texts, and a
    tool call's name and input as compact JSON (or as the raw string the model wrote)."""
    out: list[str] = []
    for b in message.blocks:
        if isinstance(b, TextBlock | ThinkingBlock | ToolResultBlock | UnknownBlock):
            if b.text:
                out.append(b.text)
        elif isinstance(b, ToolUseBlock):
            if b.name:
                out.append(b.name)
            arguments = b.input if isinstance(b.input, str) else dumps_compact(b.input)
            if arguments:
                out.append(arguments)
    return out


def thinking_texts(message: Message) -> list[str]:
    """The thinking texts of a message whose kind is not ``thinking`` (a Claude Code response holds its
    thinking beside text and calls): analyze reports them under kind ``thinking`` all the same."""
    texts = [b.text for b in message.blocks if isinstance(b, ThinkingBlock) and b.text]
    return texts if texts and message.kind != "thinking" else []  # ``kind`` is computed: asked last


def thinking_tokens(messages: Sequence[Message], counter: Counter) -> list[int]:
    """Tokens of each message's :func:`thinking_texts`, all counted in one call (counted already with
    the messages, they are cache hits for a caching counter)."""
    per = [thinking_texts(m) for m in messages]
    flat = [t for texts in per for t in texts]
    if not flat:
        return [0] * len(messages)
    counts, out, at = counter.count(flat), [], 0
    for texts in per:
        out.append(sum(counts[at : at + len(texts)]))
        at += len(texts)
    return out


def message_images(message: Message) -> list[ImageBlock]:
    """Every image the message carries, including those returned inside tool results."""
    out: list[ImageBlock] = []
    for b in message.blocks:
        if isinstance(b, ImageBlock):
            out.append(b)
        elif isinstance(b, ToolResultBlock):
            out.extend(b.images)
    return out


def message_parts(message: Message) -> tuple[list[str], int]:
    """The texts of a message to tokenize, and what it costs beyond them (framing and images); a message
    with no blocks (a client's bookkeeping record) is never sent and costs nothing."""
    if not message.blocks:
        return [], 0
    return message_texts(message), MESSAGE_OVERHEAD + sum(image_tokens(i) for i in message_images(message))


def count_messages(messages: Sequence[Message], counter: Counter) -> list[int]:
    """Tokens of each message (framing, texts and images), every text counted in one ``count`` call."""
    return start_parts(messages, counter)().totals()


@dataclass(frozen=True, slots=True)
class Counted:
    """A batch's counts: the tokens of each part (:func:`message_parts`'s texts, all messages in a
    row), and per message the span of its parts and its extra (framing and images)."""

    parts: list[int]
    spans: list[tuple[int, int, int]]

    def totals(self) -> list[int]:
        return [sum(self.parts[a:b]) + extra for a, b, extra in self.spans]


def start_parts(messages: Sequence[Message], counter: Counter) -> Callable[[], Counted]:
    """Start counting the parts of ``messages``: the returned function waits for their counts (a
    :class:`~ctxc.tokens.base.StartingCounter` may count in worker processes meanwhile)."""
    texts: list[str] = []
    spans: list[tuple[int, int, int]] = []
    for m in messages:
        parts, extra = message_parts(m)
        spans.append((len(texts), len(texts) + len(parts), extra))
        texts.extend(parts)
    started, counted = None, []
    # The concrete class first: a Protocol's isinstance walks its members on every call.
    if texts and isinstance(counter, CachedCounter | StartingCounter):
        started = counter.start(texts)
    elif texts:
        counted = counter.count(texts)
    return lambda: Counted(started() if started is not None else counted, spans)


def tool_tokens(message: Message, counts: Sequence[int]) -> dict[str, int]:
    """Tokens of each named tool's own blocks in ``message`` (a call's name and input, a result's text
    and images), from ``counts``, the tokens of its :func:`message_texts` in order."""
    out: dict[str, int] = {}
    at = 0
    for b in message.blocks:
        if isinstance(b, TextBlock | ThinkingBlock | UnknownBlock):
            at += bool(b.text)
        elif isinstance(b, ToolUseBlock | ToolResultBlock):
            if isinstance(b, ToolUseBlock):  # as message_texts: its name if any, its input unless ""
                n, extra = bool(b.name) + (bool(b.input) if isinstance(b.input, str) else 1), 0
            else:
                n, extra = int(bool(b.text)), sum(image_tokens(i) for i in b.images)
            if b.name:
                out[b.name] = out.get(b.name, 0) + sum(counts[at : at + n]) + extra
            at += n
    return out


def compare_with_o200k(
    messages: Iterable[Message],
    anthropic_counter: Counter,
    o200k_counter: Counter,
    *,
    batch: int = 2_000,
) -> tuple[int, int, float | None]:
    """``(anthropic_total, o200k_total, ratio)`` of the same messages as analyze costs them (framing
    and images on both sides), counted ``batch`` at a time; the ratio is None when nothing counts."""
    a_total = o_total = 0
    stream = iter(messages)
    while chunk := list(islice(stream, batch)):
        a_total += sum(count_messages(chunk, anthropic_counter))
        o_total += sum(count_messages(chunk, o200k_counter))
    return a_total, o_total, (a_total / o_total if o_total else None)
