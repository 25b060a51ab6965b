"""Summarizers behind one Protocol, registered by name. Every summary has the same fixed sections
and cites the archive id and message range it replaced."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from ctxc.errors import UsageError
from ctxc.model import Message

#: The fixed sections of every summary, in order, and what each holds (told to summarizing models).
SECTION_GUIDE: dict[str, str] = {
    "Session intent": "what the user wants overall, their requests and constraints (short ones verbatim)",
    "Decisions": "choices made and why (approach, libraries, designs rejected), verbatim when short",
    "Artifacts and files touched": "files created, edited or deleted (exact paths), commands and tools that "
    "mattered; routine reads and searches as counts",
    "Errors and fixes": "errors met (the telling line) and how each was fixed, or that it is still open",
    "Current state": "where the work stands at the end of the material: what works, what does not",
    "Next steps": "open items and what was about to happen next",
}
SECTIONS: tuple[str, ...] = tuple(SECTION_GUIDE)
#: The stage-5 "essential summary" keeps only what the next turn cannot do without.
ESSENTIAL_SECTIONS: tuple[str, ...] = ("Session intent", "Current state", "Next steps")


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    messages: tuple[Message, ...]
    citation: str  # e.g. ``ctxc archive 3f2a9c1b4d5e messages 3-40``
    budget: int  # the summary's most tokens, by the run's tokenizer
    previous: str | None = None  # an earlier summary to fold in
    instructions: str | None = None
    essential: bool = False
    #: The user's first request: quoted verbatim whatever the budget, when the client would not see it.
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


@dataclass(slots=True)
class QuotingIntent:
    """A summarizer whose every summary quotes the session's intent, so no strategy needs to know."""

    inner: Summarizer
    intent: str
    name: str

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        return self.inner.summarize(replace(request, intent=self.intent), count)


def quoting_intent(summarizer: Summarizer, intent: str | None) -> Summarizer:
    return QuotingIntent(summarizer, intent, summarizer.name) if intent else summarizer


@dataclass(frozen=True, slots=True)
class SummarizerOptions:
    """Settings for summarizers that call out (a model API, a command); the extractive one ignores them."""

    model: str | None = None  # else $CTXC_SUMMARY_MODEL, else the summarizer's default
    concurrency: int = 4  # calls in flight at once
    max_retries: int = 2
    timeout: float = 120.0  # seconds one call may take
    use_cache: bool = True
    dry_run: bool = False  # record the calls and input tokens that would be spent, call nothing
    command: str | None = None  # ``--summarizer command``: reads the prompt on stdin
    #: A longer span (tokens) is summarized as segments, concurrently, then merged by one more call.
    segment_tokens: int = 40_000


_SUMMARIZERS: dict[str, Callable[[SummarizerOptions], Summarizer]] = {}


def register(name: str, factory: Callable[[SummarizerOptions], Summarizer]) -> None:
    _SUMMARIZERS[name] = factory


#: Each registered by its module ``ctxc.summarize.<name>`` when first asked for (asyncio only if needed).
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
