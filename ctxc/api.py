"""The library API in one place: what an agent loop or a script imports from ``ctxc`` (lazily)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ctxc.model import Message, Transcript

if TYPE_CHECKING:
    from ctxc.archive import Archive
    from ctxc.compaction.run import CompactionResult, CompactOptions


def count_tokens(
    obj: str | Message | Transcript | Iterable[Message], *, tokenizer: str = "o200k_base"
) -> int:
    """Tokens of a text, a message, a transcript or a list of messages, as ``ctxc analyze`` counts them
    (a message: its texts, a fixed framing overhead and its images; see :mod:`ctxc.tokens.cost`)."""
    from ctxc.tokens import make_cached_counter
    from ctxc.tokens.cost import count_messages

    counter = make_cached_counter(tokenizer)
    if isinstance(obj, str):
        return counter.count([obj])[0]
    messages = (
        [obj] if isinstance(obj, Message) else list(obj.messages if isinstance(obj, Transcript) else obj)
    )
    return sum(count_messages(messages, counter))


def compact(
    transcript: Transcript, options: CompactOptions | None = None, *, archive: Archive | None = None
) -> CompactionResult:
    """Compact a loaded transcript; with an ``archive`` the original is stored there first and cited."""
    from ctxc.compaction.run import CompactOptions as Options
    from ctxc.compaction.run import compact_transcript

    return compact_transcript(transcript, options or Options(), archive=archive)
