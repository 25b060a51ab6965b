"""The library API in one place: what an agent loop or a script imports from ``ctxc`` (lazily)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ctxc.errors import UsageError
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
    if isinstance(obj, Transcript):
        obj = obj.messages
    items: list[object] = list(obj) if isinstance(obj, Iterable) and not isinstance(obj, Mapping) else [obj]
    messages = [m for m in items if isinstance(m, Message)]
    if len(messages) != len(items):
        raise UsageError(
            "count_tokens takes a text, a ctxc Message, a Transcript or Messages;"
            " count message dicts with ctxc.ContextManager(...).count(messages)"
        )
    return sum(count_messages(messages, counter))


def compact(
    transcript: Transcript,
    options: CompactOptions | None = None,
    *,
    archive: Archive | str | os.PathLike[str] | None = None,
) -> CompactionResult:
    """Compact a loaded transcript; with an ``archive`` (or its folder) the original is stored there first
    and cited."""
    from ctxc.archive import Archive
    from ctxc.compaction.run import CompactOptions as Options
    from ctxc.compaction.run import compact_transcript

    if not isinstance(transcript, Transcript):
        raise UsageError(f"compact takes a Transcript (ctxc.load(path)), got a {type(transcript).__name__}")
    if not isinstance(options, Options | None):
        raise UsageError(f"compact's options are a CompactOptions, got a {type(options).__name__}")
    if archive is not None and not isinstance(archive, Archive):
        archive = Archive.open(archive)
    return compact_transcript(transcript, options or Options(), archive=archive)
