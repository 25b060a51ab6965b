"""``ctxc replay``: a transcript replayed turn by turn as if ctxc had managed its context."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ctxc.cli import options as opt
from ctxc.errors import UsageError
from ctxc.output import atomic_output, check_output
from ctxc.stages import DEFAULT_THRESHOLDS_TEXT
from ctxc.terminal import one_line

if TYPE_CHECKING:
    from ctxc.replay import Replay


REPLAY_EPILOG = opt.examples(
    "ctxc replay session.jsonl --window 100000",
    "ctxc replay rollout.jsonl -s fifo --reminders rules.toml -f json > r.json",
    "ctxc replay session.jsonl --model claude-opus-4-5 --plot r.svg  # ctxc\\[plot]",
    "ctxc replay session.jsonl --trigger 0.8 --target-ratio 0.5 --turns",
    note="Each turn (model call) is measured twice: the context as recorded, and as ctxc would have kept it "
    "(compacted when the context reaches --trigger of the window, reminders injected). Logs that "
    "recorded usage (Claude Code, Codex, pi, Kimi) add the size the real run reported.",
)


@opt.app.command("replay", epilog=REPLAY_EPILOG)
def replay_command(
    path: opt.PathArg,
    window: opt.WindowOpt = None,
    model: opt.ModelOpt = None,
    strategy: opt.StrategyOpt = "adaptive",
    reminders: Annotated[
        str | None, typer.Option(help="Reminder rules (TOML) to inject as the run goes.")
    ] = None,
    trigger: Annotated[
        float | None,
        typer.Option(help="Compact when the context reaches this share of the window (default: stage 2)."),
    ] = None,
    target_ratio: Annotated[
        float | None, typer.Option(help="Compact down to this share of the window.")
    ] = None,
    keep_last: opt.KeepLastOpt = 4,
    thresholds: opt.ThresholdsOpt = DEFAULT_THRESHOLDS_TEXT,
    settings: opt.SetOpt = None,
    tokenizer: opt.TokenizerOpt = "o200k_base",
    conversation: opt.ConversationOpt = None,
    fmt: opt.TableOrJsonOpt = None,
    turns: Annotated[bool, opt.flag("--turns", "Table: list every turn, not only events.")] = False,
    plot_file: Annotated[
        str | None,
        typer.Option("--plot", help="Also draw the replay to an .svg or .png file (needs ctxc\\[plot])."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Nothing on stderr but errors.")] = False,
    input_format: opt.InputFormatOpt = None,
    skip_invalid: opt.SkipInvalidOpt = False,
    max_line_mb: opt.MaxLineOpt = 32.0,
) -> None:
    """Replay a transcript turn by turn as if its agent had run with ctxc's context manager."""
    from ctxc.agent import ContextManager
    from ctxc.replay import have_matplotlib, plot, plot_format, replay, replay_to_json

    if plot_file:
        plot_format(plot_file)  # a bad extension fails before any work
        check_output(plot_file, inputs=(path,))  # as does a path that cannot be written
        if not have_matplotlib():  # a file asked for and not written would be a silent failure
            raise UsageError(f"--plot {plot_file} needs matplotlib: pip install 'ctxc[plot]'")
    manager = ContextManager(
        **opt.pick(locals(), "model window strategy reminders trigger target_ratio tokenizer"),
        keep_last=4 if keep_last is None else keep_last,
        thresholds=opt.parse_thresholds(thresholds),
        settings=opt.parse_sets(settings or []),
    )
    transcript = opt.load_transcript(path, input_format, skip_invalid, max_line_mb)
    r = replay(transcript, manager, conversation=conversation)
    if opt.table_on_terminal(fmt) == "json":
        opt.print_json("replay", **replay_to_json(r))
    else:
        _print_replay(r, turns)
    if plot_file:
        with atomic_output(plot_file, inputs=(path,)) as handle:
            plot(r, handle, fmt=plot_format(plot_file))
        if not quiet:
            opt.note(f"ctxc: wrote {plot_file}")


def _print_replay(r: Replay, every_turn: bool) -> None:
    from ctxc.replay import events, terminal_chart

    console = opt.stdout_console()

    def pct(n: int) -> str:
        return f"{n / r.window:.0%}"

    recorded = f"; the log recorded up to {r.recorded_peak:,}" if r.recorded_peak is not None else ""
    freed = sum(t.compaction.freed for t in r.compactions if t.compaction is not None)
    console.print(
        f"{one_line(r.path)}  {r.format}  ·  {len(r.turns)} turns  ·  window {r.window:,}  ·  {r.strategy}, "
        f"trigger {r.trigger:.0%}\n"
        f"peak context {r.peak_raw:,} ({pct(r.peak_raw)}) without compaction, {r.peak_tokens:,} "
        f"({pct(r.peak_tokens)}) with; {len(r.compactions)} compaction(s) freed {freed:,} tokens; "
        f"{len(r.reminders)} reminder(s){recorded}",
        markup=False,
    )
    console.print(terminal_chart(r, width=max(20, min(100, console.width - 14))))
    if every_turn:
        marks: dict[int, list[str]] = {}
        for turn, _line, kind, detail in events(r):
            marks.setdefault(turn, []).append(f"{kind}: {detail}")
        rows: list[tuple[str, ...]] = [
            (
                str(t.turn),
                str(t.line),
                f"{t.raw_tokens:,}",
                f"{t.tokens:,}",
                str(t.stage),
                f"{t.recorded:,}" if t.recorded is not None else "",
                "\n".join(marks.get(t.turn, [])),
            )
            for t in r.turns
        ]
        columns: tuple[str, ...] = ("turn", "line", "without", "with", "stage", "recorded", "events")
    else:
        rows = [(str(turn), str(line), kind, detail) for turn, line, kind, detail in events(r)]
        columns = ("turn", "line", "event", "detail")
    opt.print_rows(
        columns, rows, console=console, optional=("line", "recorded"), keys=1, fold=("events", "detail")
    )
