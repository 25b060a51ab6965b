"""Summarizers behind one Protocol, registered by name.

Whoever writes it, a summary has the same fixed sections (so the next turn finds the intent, decisions
and state in the same place) and cites the archive id and message range it replaced.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from ctxc.errors import UsageError
from ctxc.model import Message

SECTIONS: tuple[str, ...] = (
    "Session intent",
    "Decisions",
    "Artifacts and files touched",
    "Errors and fixes",
    "Current state",
    "Next steps",
)
#: The stage-5 "essential summary" keeps only what the next turn cannot do without.
ESSENTIAL_SECTIONS: tuple[str, ...] = ("Session intent", "Current state", "Next steps")


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    messages: tuple[Message, ...]
    #: The citation of what the summary replaces, e.g. ``ctxc archive 3f2a9c1b4d5e messages 3-40``.
    citation: str
    #: Upper bound on the summary's tokens (by the run's tokenizer).
    budget: int
    #: An earlier summary to fold in (recursive summarization).
    previous: str | None = None
    instructions: str | None = None
    essential: bool = False
    #: The session's intent (the user's own words of its first request): the Session intent section
    #: quotes it verbatim, whatever the budget, when the client would otherwise not see it.
    intent: str | None = None

    @property
    def sections(self) -> tuple[str, ...]:
        return ESSENTIAL_SECTIONS if self.essential else SECTIONS


@runtime_checkable
class Summarizer(Protocol):
    name: str

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        """Return summary text within ``request.budget`` tokens as measured by ``count``."""
        ...


class QuotingIntent:
    """A summarizer whose every summary quotes the session's intent: the compaction run wraps it so when a
    summary replaces all the client will know of the session's start, and no strategy needs to know."""

    def __init__(self, inner: Summarizer, intent: str) -> None:
        self.inner = inner
        self.intent = intent
        self.name = inner.name

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        return self.inner.summarize(replace(request, intent=self.intent), count)


def quoting_intent(summarizer: Summarizer, intent: str | None) -> Summarizer:
    """``summarizer``, quoting ``intent`` in every summary when there is one."""
    return QuotingIntent(summarizer, intent) if intent else summarizer


@dataclass(frozen=True, slots=True)
class SummarizerOptions:
    """Settings for summarizers that call out (a model API, a command); the extractive one ignores them."""

    #: The summary model (``--summary-model``, else ``$CTXC_SUMMARY_MODEL``, else the summarizer's default).
    model: str | None = None
    #: Calls in flight at once (hierarchical segments are summarized concurrently).
    concurrency: int = 4
    #: Retries of a failed call (429, 529, 5xx, timeouts), with backoff honouring retry-after.
    max_retries: int = 2
    #: Seconds one call may take.
    timeout: float = 120.0
    #: Reuse summaries cached on disk, keyed by model, prompt and input.
    use_cache: bool = True
    #: Plan only: record the calls and input tokens that would be spent, call nothing.
    dry_run: bool = False
    #: ``--summarizer command``: the shell command that reads the prompt on stdin.
    command: str | None = None
    #: A span longer than this (tokens) is summarized as independent segments, concurrently, and the
    #: segment summaries are merged by one more call (hierarchical summaries of long histories).
    segment_tokens: int = 40_000


_SUMMARIZERS: dict[str, Callable[[SummarizerOptions], Summarizer]] = {}


def register(name: str, factory: Callable[[SummarizerOptions], Summarizer]) -> None:
    """Make a summarizer available by name; ``factory`` builds it from the run's options."""
    _SUMMARIZERS[name] = factory


#: The built-in summarizers, each registered by its module (``ctxc.summarize.<name>``) when first asked
#: for: a compaction with the extractive summarizer never loads the Anthropic one, nor asyncio.
BUILTIN_SUMMARIZERS = ("extractive", "anthropic", "command")


def get_summarizer(name: str, options: SummarizerOptions | None = None) -> Summarizer:
    if name not in _SUMMARIZERS and name in BUILTIN_SUMMARIZERS:
        importlib.import_module(f"ctxc.summarize.{name}")
    try:
        factory = _SUMMARIZERS[name]
    except KeyError:
        raise UsageError(f"unknown summarizer {name!r} (known: {', '.join(summarizer_names())})") from None
    return factory(options or SummarizerOptions())


def summarizer_names() -> Sequence[str]:
    return sorted({*BUILTIN_SUMMARIZERS, *_SUMMARIZERS})
