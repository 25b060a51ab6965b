"""Replay a transcript as if its agent had run with a :class:`~ctxc.agent.ContextManager`: each model
call (turn) measured as recorded, as managed, and as the log's usage says (docs/eval-and-replay.md)."""

from __future__ import annotations

import bisect
import dataclasses
import importlib.util
import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ctxc.agent import Compaction, ContextManager
from ctxc.archive_store import sha256_hex
from ctxc.compaction.ledger import Ledger
from ctxc.errors import UsageError
from ctxc.formats import get_adapter
from ctxc.live import compactions, live_context
from ctxc.model import Message, ThinkingBlock, Transcript
from ctxc.reminders import Reminder, TurnState, last_response, reminder_message
from ctxc.stages import STAGE_NAMES, stage_for

if TYPE_CHECKING:
    from rich.text import Text


@dataclass(frozen=True, slots=True)
class Turn:
    """One model call of the replay."""

    turn: int
    index: int  # the first message of the assistant turn this call produced
    line: int
    raw_tokens: int  # every earlier message of the conversation, nothing compacted
    tokens: int  # with the manager: after compaction and injected reminders
    tokens_before: int  # the managed context as the turn began
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
        return max((t.recorded for t in self.turns if t.recorded is not None), default=None)


def replay(
    transcript: Transcript, manager: ContextManager, *, conversation: int | None = None, compact: bool = True
) -> Replay:
    """Replay one conversation of ``transcript`` (default: its largest) through a fresh ``manager``, at
    the window the log records unless the manager was given one; ``compact=False`` only injects reminders
    (``ctxc remind``)."""
    manager.follow_log(transcript.usage)
    ledger = Ledger(manager.counter)
    ledger.count_uncounted(transcript.messages)
    live = live_context(transcript.boundaries, transcript.messages)
    conv = _pick_conversation(transcript, ledger, live.side) if conversation is None else conversation
    if not 0 <= conv < transcript.conversations:
        raise UsageError(
            f"{{conversation}} {conv}: the transcript has {transcript.conversations} conversation(s)",
            options=("conversation",),
        )
    msgs = transcript.conversation(conv)
    if not msgs:
        raise UsageError(f"conversation {conv} has no messages")
    run = _Run(manager, ledger, transcript, msgs, compact)
    # Where the log's own compaction reset the context, the replay resets to what it carried.
    resets = {b.index: b for b in transcript.boundaries if b.resets and b.conversation == conv}
    started, prev_role = 0, ""  # where the previous turn's response began in ``msgs``
    branch = False  # messages of an abandoned branch are in the context
    for i, m in enumerate(msgs):
        if (reset := resets.get(m.index)) is not None:
            kept = [x for x in msgs[:i] if reset.kept_from is not None and x.index >= reset.kept_from]
            run.reset([*reset.carried, *kept])
        if m.index in live.abandoned:
            branch = True
        elif branch:  # a rewind: the branch left behind is in no later context
            run.drop(live.abandoned)
            branch = False
        if m.role == "assistant" and prev_role != "assistant":
            run.turn(m, msgs[started:i])
            started = i
        run.add(m)
        prev_role = m.role
    # After the last message, the context is the one a resume sends (what analyze counts).
    if branch:
        run.drop(live.abandoned)
    run.withhold([m for m in msgs if m.index in live.unsent_thinking])
    starts = [t.line for t in run.turns]
    marks = tuple(
        # Placed before the first turn starting after it (len + 1 when none does).
        BoundaryMark(bisect.bisect_right(starts, b.line) + 1, b.kind, b.line, b.trigger, b.pre_tokens)
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
        turns=_recorded(transcript, msgs, run.turns, starts),
        boundaries=marks,
        final_raw=run.raw_tokens,
        final_tokens=run.managed_tokens,
    )


class _Run:
    """A replay in progress: the context as recorded (raw) and as managed, and the turns so far. Claude
    Code sends a model only the thinking recorded with it (another's signatures would not verify)."""

    def __init__(
        self,
        manager: ContextManager,
        ledger: Ledger,
        transcript: Transcript,
        msgs: Sequence[Message],
        compact: bool,
    ) -> None:
        self.manager, self.ledger, self.compact = manager, ledger, compact
        # Citations name the transcript's content hash, as `compact` without an archive does.
        self.cite = sha256_hex(transcript.to_bytes())
        adapter = get_adapter(transcript.format)
        self.tool_role = True if adapter.tool_role else None
        self.thinking_model = adapter.thinking_model
        self.raw: list[Message] = []
        self.managed: list[Message] = []
        self.raw_tokens = self.managed_tokens = 0
        self.turns: list[Turn] = []
        thinks = [m for m in msgs if any(isinstance(b, ThinkingBlock) for b in m.blocks)]
        self.signed = [(m, s) for m in thinks if (s := self.thinking_model(m)) is not None]
        self.model: str | None = None  # the model of the turn: it is sent only its own thinking
        self.withheld = False

    def reset(self, messages: list[Message]) -> None:
        self.raw, self.managed = list(messages), list(messages)
        self.raw_tokens = self.managed_tokens = self.ledger.total(messages)

    def drop(self, indexes: Collection[int]) -> None:
        """Take the messages at ``indexes`` out of both contexts (those of a branch the user left)."""
        self.raw = [m for m in self.raw if m.index not in indexes]
        self.managed = [m for m in self.managed if m.index not in indexes]
        self.raw_tokens = self.ledger.total(self.raw)
        self.managed_tokens = self.ledger.total(self.managed)

    def add(self, message: Message) -> None:
        n = self.ledger.tokens(message)
        self.raw.append(message)
        self.managed.append(message)
        self.raw_tokens += n
        self.managed_tokens += n

    def withhold(self, messages: list[Message]) -> None:
        """Count ``messages`` without their thinking from now on, and every other message with it."""
        if messages or self.withheld:
            self.ledger.send_all_thinking()
            self.ledger.withhold_thinking(messages)
            self.withheld = bool(messages)
            self.raw_tokens = self.ledger.total(self.raw)
            self.managed_tokens = self.ledger.total(self.managed)

    def turn(self, response: Message, previous: Sequence[Message]) -> None:
        """The model call that produced ``response``, after ``previous`` (the previous turn's messages):
        compacted past the trigger, reminders due injected."""
        if (model := self.thinking_model(response)) not in (None, self.model):
            self.model = model
            self.withhold([m for m, s in self.signed if m.index < response.index and s != model])
        manager, began = self.manager, self.managed_tokens
        compaction: Compaction | None = None
        if self.compact and self.managed and manager.over_trigger(began):
            compacted, compaction = manager.compact_messages(
                self.managed, ledger=self.ledger, archive_id=self.cite, tool_role=self.tool_role
            )
            self.managed, self.managed_tokens = list(compacted), compaction.tokens_after
        number = len(self.turns) + 1
        calls, said = last_response(previous)
        changed = compaction is not None and compaction.changed
        fired = manager.reminders_due(TurnState(number - 1, began, manager.window, calls, said, changed))
        if fired:
            note = reminder_message(fired, after=self.managed[-1] if self.managed else None)
            self.managed.append(note)
            self.managed_tokens += self.ledger.tokens(note)
        sizes = (self.raw_tokens, self.managed_tokens, began, manager.stage(self.managed_tokens))
        self.turns.append(
            Turn(number, response.index, response.line, *sizes, compaction=compaction, reminders=fired)
        )


def _pick_conversation(transcript: Transcript, ledger: Ledger, side: Collection[int]) -> int:
    """The largest conversation that is not a subagent run written inline (``side``)."""
    if transcript.conversations == 1:
        return 0
    totals: dict[int, int] = {}
    for m in transcript.messages:
        if m.conversation not in side:
            totals[m.conversation] = totals.get(m.conversation, 0) + ledger.tokens(m)
    return max(sorted(totals), key=lambda c: totals[c])


def _recorded(
    transcript: Transcript, msgs: Sequence[Message], turns: list[Turn], starts: Sequence[int]
) -> tuple[Turn, ...]:
    """Attach the context size the log recorded to each turn: usage on the turn's own messages
    (Claude Code, pi), else usage lines placed by position (Codex after the response, Kimi before)."""
    found = [(m.line, m.usage.context) for m in msgs if m.usage is not None]
    before = False  # on the turn's messages or after its response: the turn whose run holds it
    if not found and transcript.conversations == 1:
        found = [(u.line, u.context) for u in transcript.usage]
        before = get_adapter(transcript.format).usage_before_response
    recorded: dict[int, int] = {}
    for line, context in found:
        k = bisect.bisect_right(starts, line) + before
        if 1 <= k <= len(turns) and context:
            recorded.setdefault(k, context)
    return tuple(dataclasses.replace(t, recorded=recorded.get(t.turn)) for t in turns)


def replay_to_json(r: Replay) -> dict[str, Any]:
    freed = sum(t.compaction.freed for t in r.compactions if t.compaction)
    return {
        **{f.name: getattr(r, f.name) for f in dataclasses.fields(r)[:9]},  # path to tokenizer
        "thresholds": list(r.thresholds),
        "summary": {
            "turns": len(r.turns),
            "compactions": len(r.compactions),
            "reminders": len(r.reminders),
            "peak_without": r.peak_raw,
            "peak_with": r.peak_tokens,
            "final_without": r.final_raw,
            "final_with": r.final_tokens,
            "recorded_peak": r.recorded_peak,
            "tokens_freed": freed,
        },
        "turns": [_turn_json(t) for t in r.turns],
        "boundaries": [dataclasses.asdict(b) for b in r.boundaries],
    }


def _turn_json(t: Turn) -> dict[str, Any]:
    c = t.compaction
    return {
        "turn": t.turn,
        "index": t.index,
        "line": t.line,
        "without": t.raw_tokens,
        "with": t.tokens,
        "before": t.tokens_before,
        "stage": t.stage,
        "recorded": t.recorded,
        "compaction": None
        if c is None
        else {
            "stage": c.stage,
            "tokens_before": c.tokens_before,
            "tokens_after": c.tokens_after,
            "freed": c.freed,
            "strategies": list(c.strategies),
        },
        "reminders": [
            {"rule": x.rule, "trigger": x.trigger, "detail": x.detail, "message": x.message}
            for x in t.reminders
        ],
    }


def events(r: Replay) -> list[tuple[int, int, str, str]]:
    """(turn, line, event, detail) rows: compactions, reminders and log boundaries, in order."""
    rows: list[tuple[int, int, str, str]] = []
    for t in r.turns:
        if (c := t.compaction) is not None:
            what = ", ".join(c.strategies) or "nothing to do"
            sizes = f"{c.tokens_before:,} → {c.tokens_after:,}, freed {c.freed:,} [{what}]"
            rows.append((t.turn, t.line, "compaction", f"stage {c.stage} ({STAGE_NAMES[c.stage]}): {sizes}"))
        rows.extend((t.turn, t.line, "reminder", f"{x.rule}: {x.detail}") for x in t.reminders)
    for b in r.boundaries:
        pre = f", {b.pre_tokens:,} tokens before" if b.pre_tokens else ""
        trig = f" ({b.trigger})" if b.trigger else ""
        rows.append((b.turn, b.line, "log compaction", f"{b.kind}{trig}{pre}"))
    rows.sort(key=lambda row: (row[0], row[1]))
    return rows


def _columns(r: Replay, width: int) -> list[tuple[int, int, int | None, str]]:
    """Per chart column: the largest raw, managed and recorded size of its turns, and its event mark."""
    n = len(r.turns)
    starts = [c * n // width for c in range(width)]
    first_turns = [r.turns[start].turn for start in starts]
    # A log's compaction marks the last column starting at or before the turn it preceded.
    logs = {max(0, bisect.bisect_right(first_turns, b.turn) - 1) for b in r.boundaries}
    cols: list[tuple[int, int, int | None, str]] = []
    for c, start in enumerate(starts):
        span = r.turns[start : max((c + 1) * n // width, start + 1)]
        seen = [t.recorded for t in span if t.recorded is not None]
        compacted, reminded = any(t.compaction is not None for t in span), any(t.reminders for t in span)
        ev = "C" if compacted else "R" if reminded else "|" if c in logs else " "
        cols.append(
            (max(t.raw_tokens for t in span), max(t.tokens for t in span), max(seen, default=None), ev)
        )
    return cols


_STAGE_STYLES = {1: "green", 2: "yellow", 3: "dark_orange", 4: "red", 5: "bold red"}
#: The chart's marks for the managed, recorded and raw sizes and the window, with their styles.
_MARKS = (("●", "bold cyan"), ("◆", "magenta"), ("·", "dim"), ("─", "red"))


def terminal_chart(r: Replay, *, width: int = 72, height: int = 14) -> Text:
    """Both curves against the window as unicode text: ``·`` without compaction, ``●`` with,
    ``◆`` the size the log recorded; rows are labelled with their stage; below the axis ``C`` marks
    a compaction, ``R`` a reminder, ``|`` the log's own compaction."""
    from rich.text import Text

    out = Text()
    if not r.turns:
        out.append("(no model calls to chart)\n")
        return out
    width = max(10, min(width, len(r.turns)))
    top = max(r.window, r.peak_raw, r.recorded_peak or 0) * 1.02
    cols = _columns(r, width)

    def row_of(value: float) -> int:
        return min(height - 1, int(value / top * height))

    for row in range(height - 1, -1, -1):
        stage = stage_for((row + 0.5) * top / height / r.window, r.thresholds)
        out.append(f"{row * top / height / 1000:>6,.0f}k s{stage} │", style=_STAGE_STYLES[stage])
        for raw, managed, logged, _ in cols:
            values = (managed, logged, raw, r.window)  # the first one at this row shows
            hit = (mark for v, mark in zip(values, _MARKS, strict=True) if v is not None and row_of(v) == row)
            out.append(*next(hit, (" ", None)))
        out.append("\n")
    pad, last = " " * 11, r.turns[-1].turn
    out.append(" " * 10 + "└" + "─" * width + "\n")
    out.append(pad + "".join(ev for *_, ev in cols) + "\n")
    out.append(f"{pad}turn 1{' ' * max(1, width - 11 - len(str(last)))}turn {last}\n", style="dim")
    out.append_text(
        Text.assemble(pad, ("●", "bold cyan"), f" with {r.strategy}  ", ("·", "dim"), " without compaction\n")
    )
    recorded = (("◆", "magenta"), " recorded by the log  ") if r.recorded_peak is not None else ()
    out.append_text(Text.assemble(pad, *recorded, ("─", "red"), f" window {r.window:,}\n"))
    out.append(f"{pad}C compaction  R reminder  | the log's own compaction\n")
    out.append(f"{pad}s1-s5: the stage a context at that row's size is in\n")
    return out


def plot_format(path: str | Path) -> str:
    """``svg`` or ``png`` from a file name; anything else is a usage error."""
    if str(path) == "-":  # stdout holds the report
        raise UsageError("{out} writes a .svg or .png file, not - (stdout)", options=("out",))
    suffix = Path(path).suffix.lower()
    if suffix not in (".svg", ".png"):
        raise UsageError(
            f"{{out}} writes .svg or .png files, not {suffix or 'a file without an extension'!r}",
            options=("out",),
        )
    return suffix[1:]


def have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


_STAGE_COLORS = ("#2ca02c", "#bcbd22", "#ff7f0e", "#d62728", "#8c1c13")
_RED = "#d62728"


def plot(r: Replay, out: str | Path | BinaryIO, *, fmt: str | None = None) -> None:
    """Draw the replay as SVG or PNG (``fmt``, default: the path's extension) to a path or binary stream;
    needs ``ctxc[plot]``. No pyplot (no global state), and an SVG is reproducible."""
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

    top = max(r.window, r.peak_raw, r.recorded_peak or 0) * 1.05
    with matplotlib.rc_context({"svg.hashsalt": "ctxc", "svg.fonttype": "none", "font.size": 9}):
        fig = Figure(figsize=(10, 5.2), layout="constrained")
        ax = fig.add_subplot()
        _draw_stages(ax, r, top)
        _draw_curves(ax, r)
        ax.set_xlim(0.5, max(r.turns[-1].turn, 1) + 0.5)
        ax.set_ylim(0, top)
        ax.set_xlabel("turn (model call)")
        ax.set_ylabel("context tokens")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v / 1000:,.0f}k"))
        title = f"{Path(r.path).name}: {len(r.turns)} turns, window {r.window:,}, trigger {r.trigger:.0%}"
        ax.set_title(f"{title}, tokenizer {r.tokenizer}", fontsize=9)
        ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
        ax.grid(alpha=0.25, lw=0.5)
        metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(str(out) if isinstance(out, Path) else out, format=fmt, metadata=metadata, dpi=150)


def _draw_stages(ax: Any, r: Replay, top: float) -> None:
    """The stage bands behind the curves, each labelled at the right edge, and the window line."""
    edges = [0.0, *(s * r.window for s in r.thresholds), top]
    for stage, (lo, hi) in enumerate(itertools.pairwise(edges), 1):
        if lo >= top:
            break
        color, end = _STAGE_COLORS[stage - 1], min(hi, top)
        ax.axhspan(lo, end, color=color, alpha=0.10, lw=0)
        where = ax.get_yaxis_transform()
        ax.text(
            1.005, (lo + end) / 2, f"stage {stage}", transform=where, va="center", fontsize=7, color=color
        )
    ax.axhline(r.window, color="black", lw=1.2, label=f"window ({r.window:,})")


def _draw_curves(ax: Any, r: Replay) -> None:
    """Both context curves, the recorded usage, compactions, reminders and the log's own compactions."""
    x = [t.turn for t in r.turns]
    raw = [t.raw_tokens for t in r.turns]
    ax.plot(x, raw, color="#7f7f7f", ls="--", lw=1.3, label="without compaction")
    ax.plot(x, [t.tokens for t in r.turns], color="#1f77b4", lw=1.8, label=f"with ctxc ({r.strategy})")
    if rec := [t for t in r.turns if t.recorded is not None]:
        xs, ys = [t.turn for t in rec], [t.recorded for t in rec]
        ax.plot(xs, ys, color="#9467bd", ls=":", marker=".", ms=3, lw=1, label="recorded by the log (usage)")
    if comps := r.compactions:
        xs, before = [t.turn for t in comps], [t.tokens_before for t in comps]
        ax.vlines(xs, [t.tokens for t in comps], before, color=_RED, lw=1.2)
        ax.scatter(xs, before, marker="v", color=_RED, s=22, zorder=3, label=f"compaction ({len(comps)})")
    if rem := [t for t in r.turns if t.reminders]:
        label = f"reminder ({sum(len(t.reminders) for t in rem)})"
        xs, ys = [t.turn for t in rem], [t.tokens for t in rem]
        ax.scatter(xs, ys, marker="*", color="#ff7f0e", s=40, zorder=4, label=label)
    for k, b in enumerate(r.boundaries):
        first = "the log's own compaction" if k == 0 else None
        ax.axvline(b.turn - 0.5, color="#9467bd", ls="-.", lw=1, alpha=0.8, label=first)
