"""Replay a recorded transcript as if its agent had run with a :class:`~ctxc.agent.ContextManager`.

The transcript is walked message by message. Each model call (the start of an assistant turn) is one
*turn*: the context it would have been sent is measured twice, as recorded (nothing compacted: every
earlier message) and as managed (compacted whenever the manager says so, with due reminders
injected). The result says, per turn, both sizes, the compaction that ran (its stage, the tokens it
freed, the strategies that acted) and the reminders that fired, and, where the log recorded usage
(Claude Code, Codex, pi, Kimi), the context size the real run reported, with the log's own
compaction boundaries.

Replay is linear in the transcript: every message is counted once (one batched, cached count up
front), both sizes are running sums, and the strategy runs only on the turns the trigger fires.

Drawing: :func:`terminal_chart` (rich text, always available) and :func:`plot` (SVG or PNG through
matplotlib, the optional ``ctxc[plot]`` extra).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ctxc.agent import Compaction, ContextManager
from ctxc.archive_store import sha256_hex
from ctxc.compaction.ledger import Ledger
from ctxc.errors import UsageError
from ctxc.formats import get_adapter
from ctxc.live import compactions, live_context
from ctxc.model import Message, Transcript
from ctxc.reminders import Reminder, TurnState, last_response, reminder_message
from ctxc.stages import STAGE_NAMES, stage_for

if TYPE_CHECKING:
    from rich.text import Text


@dataclass(frozen=True, slots=True)
class Turn:
    """One model call of the replay."""

    turn: int
    #: The first message of the assistant turn this call produced.
    index: int
    line: int
    #: Context sent without compaction: every earlier message of the conversation.
    raw_tokens: int
    #: Context sent with the manager: after compaction and injected reminders.
    tokens: int
    #: What the managed context was as the turn began, before compaction and reminders.
    tokens_before: int
    stage: int
    recorded: int | None = None
    compaction: Compaction | None = None
    reminders: tuple[Reminder, ...] = ()


@dataclass(frozen=True, slots=True)
class BoundaryMark:
    """A compaction the log itself recorded, placed before the turn it preceded."""

    turn: int
    kind: str
    line: int
    trigger: str | None
    pre_tokens: int | None


@dataclass(frozen=True, slots=True)
class Replay:
    path: str
    format: str
    conversation: int
    messages: int
    window: int
    trigger: float
    thresholds: tuple[float, float, float, float]
    strategy: str
    tokenizer: str
    turns: tuple[Turn, ...]
    boundaries: tuple[BoundaryMark, ...]
    #: Both sizes after the last message (trailing tool results included).
    final_raw: int
    final_tokens: int

    @property
    def compactions(self) -> tuple[Turn, ...]:
        return tuple(t for t in self.turns if t.compaction is not None)

    @property
    def reminders(self) -> tuple[Reminder, ...]:
        return tuple(r for t in self.turns for r in t.reminders)

    @property
    def peak_raw(self) -> int:
        return max([self.final_raw, *(t.raw_tokens for t in self.turns)])

    @property
    def peak_tokens(self) -> int:
        return max([self.final_tokens, *(t.tokens for t in self.turns)])

    @property
    def recorded_peak(self) -> int | None:
        values = [t.recorded for t in self.turns if t.recorded is not None]
        return max(values) if values else None


def replay(
    transcript: Transcript,
    manager: ContextManager,
    *,
    conversation: int | None = None,
    compact: bool = True,
) -> Replay:
    """Replay one conversation of ``transcript`` (default: its largest) through ``manager``.

    The manager's reminder state is used and advanced, so pass a fresh manager per replay.
    ``compact=False`` only injects reminders (``ctxc remind``: where each rule fires in the log).
    """
    ledger = Ledger(manager.counter)
    ledger.prime(transcript.messages)
    conv, msgs = _chosen(transcript, ledger, conversation)
    # Placeholders and summaries cite the transcript by its content hash, as `compact` does without
    # an archive.
    archive_id = sha256_hex(transcript.to_bytes())
    tool_role = True if get_adapter(transcript.format).tool_role else None

    managed: list[Message] = []
    managed_tokens = 0
    raw_tokens = 0
    turns: list[Turn] = []
    started = 0  # where the previous turn's response began in ``msgs``
    prev_role = ""
    # Where the log's own compaction reset the context, the replay resets too: to what it carried.
    resets = {b.index: b for b in transcript.boundaries if b.resets and b.conversation == conv}
    for i, m in enumerate(msgs):
        if (reset := resets.get(m.index)) is not None:
            kept = [x for x in msgs[:i] if reset.kept_from is not None and x.index >= reset.kept_from]
            managed = [*reset.carried, *kept]
            managed_tokens = raw_tokens = ledger.total(managed)
        if m.role == "assistant" and prev_role != "assistant":
            number = len(turns) + 1
            began = managed_tokens
            compaction: Compaction | None = None
            if compact and managed and manager.over_trigger(managed_tokens):
                compacted, compaction = manager.compact_messages(
                    managed, ledger=ledger, archive_id=archive_id, tool_role=tool_role
                )
                managed = list(compacted)
                managed_tokens = compaction.tokens_after
            fired = _fire_reminders(manager, msgs[started:i], number, began, compaction)
            if fired:
                note = reminder_message(fired, after=managed[-1] if managed else None)
                managed.append(note)
                managed_tokens += ledger.tokens(note)
            turns.append(
                Turn(
                    turn=number,
                    index=m.index,
                    line=m.line,
                    raw_tokens=raw_tokens,
                    tokens=managed_tokens,
                    tokens_before=began,
                    stage=manager.stage(managed_tokens),
                    compaction=compaction,
                    reminders=fired,
                )
            )
            started = i
        n = ledger.tokens(m)
        managed.append(m)
        managed_tokens += n
        raw_tokens += n
        prev_role = m.role

    return _result(transcript, manager, conv, msgs, turns, raw_tokens, managed_tokens)


def _chosen(transcript: Transcript, ledger: Any, conversation: int | None) -> tuple[int, tuple[Message, ...]]:
    """The conversation to replay (default: the largest) and its messages."""
    conv = _pick_conversation(transcript, ledger) if conversation is None else conversation
    if not 0 <= conv < transcript.conversations:
        raise UsageError(
            f"--conversation {conv}: the transcript has {transcript.conversations} conversation(s)"
        )
    msgs = transcript.conversation(conv)
    if not msgs:
        raise UsageError(f"conversation {conv} has no messages")
    return conv, msgs


def _fire_reminders(
    manager: ContextManager,
    response: Sequence[Message],
    number: int,
    began: int,
    compaction: Compaction | None,
) -> tuple[Reminder, ...]:
    """The reminders due as turn ``number`` begins, after ``response`` (the previous turn's)."""
    if manager.rules is None:
        return ()
    calls, said = last_response(response)
    state = TurnState(
        turn=number - 1,
        tokens=began,
        window=manager.window,
        tool_calls=calls,
        response=said,
        compacted=compaction is not None and compaction.changed,
    )
    return manager.reminders_due(state)


def _result(
    transcript: Transcript,
    manager: ContextManager,
    conv: int,
    msgs: Sequence[Message],
    turns: list[Turn],
    raw_tokens: int,
    managed_tokens: int,
) -> Replay:
    """The replay of ``turns``: the usage the log recorded attached, its own compactions placed."""
    starts = [t.line for t in turns]
    with_usage = _recorded(transcript, msgs, turns, starts)
    marks = tuple(
        BoundaryMark(_turn_after(starts, b.line), b.kind, b.line, b.trigger, b.pre_tokens)
        for b in compactions(transcript.boundaries)
        if msgs[0].line <= b.line <= msgs[-1].line or transcript.conversations == 1
    )
    return Replay(
        path=transcript.source,
        format=transcript.format,
        conversation=conv,
        messages=len(msgs),
        window=manager.window,
        trigger=manager.trigger,
        thresholds=manager.thresholds,
        strategy=manager.options.strategy,
        tokenizer=getattr(manager.counter, "name", "?"),
        turns=with_usage,
        boundaries=marks,
        final_raw=raw_tokens,
        final_tokens=managed_tokens,
    )


def _pick_conversation(transcript: Transcript, ledger: Any) -> int:
    """The largest conversation that is not a subagent run written inline."""
    if transcript.conversations == 1:
        return 0
    side = live_context(transcript.boundaries, transcript.messages).side
    totals: dict[int, int] = {}
    for m in transcript.messages:
        if m.conversation not in side:
            totals[m.conversation] = totals.get(m.conversation, 0) + ledger.tokens(m)
    return max(sorted(totals), key=lambda c: totals[c])


def _turn_after(starts: Sequence[int], line: int) -> int:
    """The number of the first turn starting after ``line`` (len+1 when none does)."""
    return bisect.bisect_right(starts, line) + 1


def _recorded(
    transcript: Transcript, msgs: Sequence[Message], turns: list[Turn], starts: Sequence[int]
) -> tuple[Turn, ...]:
    """Attach the context size the log recorded to each turn: usage on the turn's own messages
    (Claude Code, pi), else usage lines placed by position (Codex after the response, Kimi before)."""
    from dataclasses import replace

    if not turns:
        return ()
    recorded: dict[int, int] = {}
    on_messages = [m for m in msgs if m.usage is not None]
    if on_messages:
        for m in on_messages:
            assert m.usage is not None
            k = bisect.bisect_right(starts, m.line)  # the turn whose run holds this message
            if k and m.usage.context:
                recorded.setdefault(k, m.usage.context)
    elif transcript.conversations == 1:
        before = get_adapter(transcript.format).usage_before_response
        for u in transcript.usage:
            k = _turn_after(starts, u.line) if before else bisect.bisect_right(starts, u.line)
            if 1 <= k <= len(turns) and u.context:
                recorded.setdefault(k, u.context)
    return tuple(replace(t, recorded=recorded.get(t.turn)) for t in turns)


# ------------------------------------------------------------------------------------------ output


def replay_to_json(r: Replay) -> dict[str, Any]:
    return {
        "path": r.path,
        "format": r.format,
        "conversation": r.conversation,
        "messages": r.messages,
        "window": r.window,
        "trigger": r.trigger,
        "thresholds": list(r.thresholds),
        "strategy": r.strategy,
        "tokenizer": r.tokenizer,
        "summary": {
            "turns": len(r.turns),
            "compactions": len(r.compactions),
            "reminders": len(r.reminders),
            "peak_without": r.peak_raw,
            "peak_with": r.peak_tokens,
            "final_without": r.final_raw,
            "final_with": r.final_tokens,
            "recorded_peak": r.recorded_peak,
            "tokens_freed": sum(t.compaction.freed for t in r.compactions if t.compaction),
        },
        "turns": [
            {
                "turn": t.turn,
                "index": t.index,
                "line": t.line,
                "without": t.raw_tokens,
                "with": t.tokens,
                "before": t.tokens_before,
                "stage": t.stage,
                "recorded": t.recorded,
                "compaction": None
                if t.compaction is None
                else {
                    "stage": t.compaction.stage,
                    "tokens_before": t.compaction.tokens_before,
                    "tokens_after": t.compaction.tokens_after,
                    "freed": t.compaction.freed,
                    "strategies": list(t.compaction.strategies),
                },
                "reminders": [
                    {"rule": x.rule, "trigger": x.trigger, "detail": x.detail, "message": x.message}
                    for x in t.reminders
                ],
            }
            for t in r.turns
        ],
        "boundaries": [
            {"turn": b.turn, "kind": b.kind, "line": b.line, "trigger": b.trigger, "pre_tokens": b.pre_tokens}
            for b in r.boundaries
        ],
    }


def events(r: Replay) -> list[tuple[int, int, str, str]]:
    """(turn, line, event, detail) rows: compactions, reminders and log boundaries, in order."""
    rows: list[tuple[int, int, str, str]] = []
    for t in r.turns:
        if t.compaction is not None:
            c = t.compaction
            what = ", ".join(c.strategies) or "nothing to do"
            rows.append(
                (
                    t.turn,
                    t.line,
                    "compaction",
                    f"stage {c.stage} ({STAGE_NAMES[c.stage]}): {c.tokens_before:,} → {c.tokens_after:,}, "
                    f"freed {c.freed:,} [{what}]",
                )
            )
        for x in t.reminders:
            rows.append((t.turn, t.line, "reminder", f"{x.rule}: {x.detail}"))
    for b in r.boundaries:
        pre = f", {b.pre_tokens:,} tokens before" if b.pre_tokens else ""
        trig = f" ({b.trigger})" if b.trigger else ""
        rows.append((b.turn, b.line, "log compaction", f"{b.kind}{trig}{pre}"))
    rows.sort(key=lambda row: (row[0], row[1]))
    return rows


def terminal_chart(r: Replay, *, width: int = 72, height: int = 14) -> Text:
    """Both curves against the window as unicode text: ``·`` without compaction, ``●`` with,
    ``◆`` the size the log recorded; rows are labelled with their stage; below the axis ``C`` marks
    a compaction, ``R`` a reminder, ``|`` the log's own compaction."""
    from rich.text import Text

    out = Text()
    if not r.turns:
        out.append("(no model calls to chart)\n")
        return out
    n = len(r.turns)
    width = max(10, min(width, n))
    top = max(r.window, r.peak_raw, r.recorded_peak or 0) * 1.02
    cols: list[tuple[int, int, int | None, str]] = []  # per column: raw, with, recorded, event
    for c in range(width):
        span = r.turns[c * n // width : max((c + 1) * n // width, c * n // width + 1)]
        seen = [t.recorded for t in span if t.recorded is not None]
        ev = " "
        if any(t.compaction is not None for t in span):
            ev = "C"
        elif any(t.reminders for t in span):
            ev = "R"
        cols.append(
            (max(t.raw_tokens for t in span), max(t.tokens for t in span), max(seen) if seen else None, ev)
        )
    first_turns = [r.turns[c * n // width].turn for c in range(width)]
    for b in r.boundaries:
        c = max(0, bisect.bisect_right(first_turns, b.turn) - 1)
        raw, managed, logged, ev = cols[c]
        cols[c] = (raw, managed, logged, "|" if ev == " " else ev)

    def row_of(value: float) -> int:
        return min(height - 1, int(value / top * height))

    styles = {1: "green", 2: "yellow", 3: "dark_orange", 4: "red", 5: "bold red"}
    window_row = row_of(r.window)
    for row in range(height - 1, -1, -1):
        lo = row * top / height
        mid = (row + 0.5) * top / height
        stage = stage_for(mid / r.window, r.thresholds)
        label = f"{lo / 1000:>6,.0f}k s{stage} │"
        out.append(label, style=styles[stage])
        for raw, managed, logged, _ in cols:
            if row_of(managed) == row:
                out.append("●", style="bold cyan")
            elif logged is not None and row_of(logged) == row:
                out.append("◆", style="magenta")
            elif row_of(raw) == row:
                out.append("·", style="dim")
            elif row == window_row:
                out.append("─", style="red")
            else:
                out.append(" ")
        out.append("\n")
    out.append(" " * 10 + "└" + "─" * width + "\n")
    out.append(" " * 11 + "".join(ev for *_, ev in cols) + "\n")
    out.append(
        f"{' ' * 11}turn 1{' ' * max(1, width - 11 - len(str(r.turns[-1].turn)))}turn {r.turns[-1].turn}\n",
        style="dim",
    )
    out.append(f"{' ' * 11}")
    out.append("●", style="bold cyan")
    out.append(f" with {r.strategy}  ")
    out.append("·", style="dim")
    out.append(" without compaction\n")
    out.append(" " * 11)
    if r.recorded_peak is not None:
        out.append("◆", style="magenta")
        out.append(" recorded by the log  ")
    out.append("─", style="red")
    out.append(f" window {r.window:,}\n")
    out.append(f"{' ' * 11}C compaction  R reminder  | the log's own compaction\n")
    out.append(f"{' ' * 11}s1-s5: the stage a context at that row's size is in\n")
    return out


def plot_format(path: str | Path) -> str:
    """``svg`` or ``png`` from a file name; anything else is a usage error."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".svg", ".png"):
        raise UsageError(f"--plot writes .svg or .png files, not {suffix or 'a file without an extension'!r}")
    return suffix[1:]


def have_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def plot(r: Replay, out: str | Path | BinaryIO, *, fmt: str | None = None) -> None:
    """Draw the replay as SVG or PNG to a path or binary stream (needs ``pip install 'ctxc[plot]'``).

    ``fmt`` defaults to the path's extension. The figure is built without pyplot (no global state,
    no display needed), and an SVG is reproducible: no date, fixed ids, text kept as text.
    """
    if fmt is None:
        if not isinstance(out, str | Path):
            raise UsageError("plot to a stream needs fmt='svg' or fmt='png'")
        fmt = plot_format(out)
    if fmt not in ("svg", "png"):
        raise UsageError(f"plot format is svg or png, not {fmt!r}")
    try:
        import matplotlib
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        raise UsageError("plotting needs matplotlib: pip install 'ctxc[plot]'") from None

    x = [t.turn for t in r.turns]
    window = r.window
    top = max(window, r.peak_raw, r.recorded_peak or 0) * 1.05
    with matplotlib.rc_context({"svg.hashsalt": "ctxc", "svg.fonttype": "none", "font.size": 9}):
        fig = Figure(figsize=(10, 5.2), layout="constrained")
        ax = fig.add_subplot()
        edges = [0.0, *(s * window for s in r.thresholds), top]
        colors = ["#2ca02c", "#bcbd22", "#ff7f0e", "#d62728", "#8c1c13"]
        for stage, (lo, hi) in enumerate(itertools.pairwise(edges), 1):
            if lo >= top:
                break
            ax.axhspan(lo, min(hi, top), color=colors[stage - 1], alpha=0.10, lw=0)
            ax.text(
                1.005,
                (lo + min(hi, top)) / 2,
                f"stage {stage}",
                transform=ax.get_yaxis_transform(),
                va="center",
                fontsize=7,
                color=colors[stage - 1],
            )
        ax.axhline(window, color="black", lw=1.2, label=f"window ({window:,})")
        ax.plot(
            x, [t.raw_tokens for t in r.turns], color="#7f7f7f", ls="--", lw=1.3, label="without compaction"
        )
        ax.plot(x, [t.tokens for t in r.turns], color="#1f77b4", lw=1.8, label=f"with ctxc ({r.strategy})")
        rec = [(t.turn, t.recorded) for t in r.turns if t.recorded is not None]
        if rec:
            ax.plot(
                [a for a, _ in rec],
                [b for _, b in rec],
                color="#9467bd",
                ls=":",
                marker=".",
                ms=3,
                lw=1,
                label="recorded by the log (usage)",
            )
        comps = [t for t in r.compactions if t.compaction is not None]
        if comps:
            ax.vlines(
                [t.turn for t in comps],
                [t.tokens for t in comps],
                [t.tokens_before for t in comps],
                color="#d62728",
                lw=1.2,
            )
            ax.scatter(
                [t.turn for t in comps],
                [t.tokens_before for t in comps],
                marker="v",
                color="#d62728",
                s=22,
                zorder=3,
                label=f"compaction ({len(comps)})",
            )
        rem = [t for t in r.turns if t.reminders]
        if rem:
            ax.scatter(
                [t.turn for t in rem],
                [t.tokens for t in rem],
                marker="*",
                color="#ff7f0e",
                s=40,
                zorder=4,
                label=f"reminder ({sum(len(t.reminders) for t in rem)})",
            )
        for k, b in enumerate(r.boundaries):
            ax.axvline(
                b.turn - 0.5,
                color="#9467bd",
                ls="-.",
                lw=1,
                alpha=0.8,
                label="the log's own compaction" if k == 0 else None,
            )
        ax.set_xlim(0.5, max(x[-1], 1) + 0.5)
        ax.set_ylim(0, top)
        ax.set_xlabel("turn (model call)")
        ax.set_ylabel("context tokens")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v / 1000:,.0f}k"))
        ax.set_title(
            f"{Path(r.path).name}: {len(r.turns)} turns, window {window:,}, trigger {r.trigger:.0%}, "
            f"tokenizer {r.tokenizer}",
            fontsize=9,
        )
        ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
        ax.grid(alpha=0.25, lw=0.5)
        metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(str(out) if isinstance(out, Path) else out, format=fmt, metadata=metadata, dpi=150)


__all__ = [
    "BoundaryMark",
    "Replay",
    "Turn",
    "events",
    "have_matplotlib",
    "plot",
    "plot_format",
    "replay",
    "replay_to_json",
    "terminal_chart",
]
