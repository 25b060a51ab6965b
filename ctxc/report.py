"""What an analysis reports (:class:`Analysis`) and the scan of a file it is computed from: below
:mod:`ctxc.analysis`, so the scan cache, the recorded-usage reader and the renderers share them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ctxc.live import LiveContext, scanned_live_context, thread_usage
from ctxc.model import Boundary, Usage
from ctxc.pricing import Cost, PriceTable, default_prices, price_usage
from ctxc.validate import Problem


class MessageStat(NamedTuple):
    """One message's row of an analysis: a named tuple, quicker to make than a dataclass (one per
    message, and a cached run over a large log is mostly making them)."""

    index: int  # type: ignore[assignment]  # hides tuple.index(), which a row has no use for
    line: int
    role: str
    kind: str
    tool: str | None
    tokens: int
    cumulative: int
    share: float
    stage: int
    conversation: int = 0
    #: In the live context (after the log's own last compaction, not a sidechain run).
    live: bool = True


@dataclass(frozen=True, slots=True)
class UsageSummary:
    """What the log itself recorded about API calls (Claude Code, Codex, pi, Kimi)."""

    calls: int
    input: int
    output: int
    cache_read: int
    cache_write: int
    last_context: int
    max_context: int
    window: int | None
    #: What the recorded calls cost, per model, at the price table's rates.
    cost: Cost | None = None


@dataclass(frozen=True, slots=True)
class Analysis:
    path: str
    format: str
    tokenizer: str
    window: int
    model: str | None
    thresholds: tuple[float, float, float, float]
    total_tokens: int
    stage: int
    conversations: int
    messages: tuple[MessageStat, ...]
    by_role: dict[str, int]
    by_kind: dict[str, int]
    by_tool: dict[str, int]
    largest: tuple[MessageStat, ...]
    usage: UsageSummary | None
    boundaries: tuple[Boundary, ...]
    problems: tuple[Problem, ...] = ()
    skipped_lines: int = 0
    max_context: int = 0
    #: Per-stage forecast (:class:`ctxc.compaction.forecast.StageForecast`), when asked for.
    forecast: tuple[Any, ...] = ()
    #: With ``--tokenizer anthropic``: (Claude's total, o200k's total, their ratio) on the same file.
    versus_o200k: tuple[int, int, float | None] | None = None
    #: Where the window came from: ``flag``, ``log``, ``log model`` or ``default``.
    window_source: str = "flag"
    #: The live context's start: the line of the log's own last compaction, None when it has none.
    live_from_line: int | None = None
    #: What the client no longer sends: before the log's own compaction, and inline subagent runs.
    history_messages: int = 0
    history_tokens: int = 0
    side_messages: int = 0
    side_tokens: int = 0
    #: Messages and tokens on branches the client abandoned (Claude Code: a rewind, an edited prompt).
    branch_messages: int = 0
    branch_tokens: int = 0
    #: Tokens of what the log's compaction record itself carries into the live context.
    carried_tokens: int = 0

    @property
    def live_messages(self) -> int:
        return sum(1 for m in self.messages if m.live)

    @property
    def share(self) -> float:
        return self.max_context / self.window if self.window else 0.0


#: What a scan keeps of each message: index, line, role, kind, tool (its first), tokens, conversation,
#: the tokens of thinking inside it when its kind is another (reported under kind ``thinking``), and
#: when it holds several tools' calls or results, each other tool's tokens by name (else None).
Row = tuple[int, int, str, str, str | None, int, int, int, dict[str, int] | None]


@dataclass(frozen=True, slots=True)
class Scan:
    """What reading and counting a file yields, before a window or thresholds apply: what the cache
    stores, as it depends only on the file's bytes, the tokenizer and the read options."""

    path: str
    format: str
    tokenizer: str
    rows: tuple[Row, ...]
    usage: tuple[Usage, ...]
    boundaries: tuple[Boundary, ...]
    problems: tuple[Problem, ...]
    skipped_lines: int
    #: Conversations that are subagent runs written inline (not the log's own thread).
    sidechains: tuple[int, ...] = ()

    @property
    def live(self) -> LiveContext:
        return scanned_live_context(self.boundaries, self.sidechains)


def summarize_usage(usage: Sequence[Usage], prices: PriceTable | None = None) -> UsageSummary | None:
    """Calls, token sums and cost (at ``prices``, else the shipped table) of every call, as billed; the
    largest and last context of the calls on the chain the client resumes (:func:`ctxc.live.thread_usage`)."""
    if not usage:
        return None
    own = thread_usage(usage)
    windows = [u.window for u in own if u.window]
    return UsageSummary(
        calls=len(usage),
        input=sum(u.input for u in usage),
        output=sum(u.output for u in usage),
        cache_read=sum(u.cache_read for u in usage),
        cache_write=sum(u.cache_write for u in usage),
        last_context=own[-1].context if own else 0,
        max_context=max((u.context for u in own), default=0),
        window=windows[-1] if windows else None,
        cost=price_usage(usage, prices or default_prices()),
    )
