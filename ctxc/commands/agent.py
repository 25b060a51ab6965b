"""``ctxc remind``, ``ctxc compose`` and ``ctxc replay``: the agent-loop pieces from the command line.

Thin: options in, :mod:`ctxc.reminders`, :mod:`ctxc.composer` and :mod:`ctxc.replay` do the work
(through :class:`ctxc.agent.ContextManager`), rendering out. Imports stay inside the commands so
that registering them costs nothing at start-up.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ctxc.cliutil import (
    InputFormatOpt,
    KeepLastOpt,
    MaxLineOpt,
    ModelOpt,
    SetOpt,
    SkipInvalidOpt,
    TableOrJson,
    TableOrJsonOpt,
    ThresholdsOpt,
    WindowOpt,
    cells,
    parse_sets,
    parse_thresholds,
    read_options,
    stdout_console,
    table_on_terminal,
)
from ctxc.stages import DEFAULT_THRESHOLDS_TEXT
from ctxc.terminal import stderr_console

if TYPE_CHECKING:
    from ctxc.replay import Replay


ConversationOpt = Annotated[
    int | None,
    typer.Option("--conversation", help="Which conversation of the file (default: the largest)."),
]


class ComposeFormat(StrEnum):
    text = "text"
    json = "json"


REMIND_EPILOG = (
    "[bold]Examples[/bold]\n\n"
    "  ctxc remind session.jsonl --rules rules.toml\n\n"
    "  ctxc remind rollout.jsonl --rules rules.toml --window 128000 --format json\n\n"
    "Rules are [\\[reminder]] tables with one trigger each: every_n_turns, token_threshold (tokens, or "
    "a share of the window), tool_call, keyword_in_response or after_compaction; a message; and an "
    "optional max_repeats. A turn is one model call; the context is what that call would be sent."
)

COMPOSE_EPILOG = (
    "[bold]Examples[/bold]\n\n"
    "  ctxc compose prompt.toml --budget 2000 > system.txt\n\n"
    "  ctxc compose prompt.toml --budget 800 --fill --format json\n\n"
    "  ctxc compose prompt.toml --base 'You are a reviewer. Only comment.'   # override the sections\n\n"
    "Sections are [\\[section]] tables: id, priority (0-100 or safety, role, task, tools, output_format, "
    "examples, background), required, and content or file. Exit 6 if the required sections alone "
    "exceed the budget."
)

REPLAY_EPILOG = (
    "[bold]Examples[/bold]\n\n"
    "  ctxc replay session.jsonl --window 100000\n\n"
    "  ctxc replay rollout.jsonl --strategy fifo --reminders rules.toml --format json > replay.json\n\n"
    "  ctxc replay session.jsonl --model claude-opus-4-5 --plot replay.svg     # needs ctxc\\[plot]\n\n"
    "  ctxc replay session.jsonl --trigger 0.8 --target-ratio 0.5 --turns\n\n"
    "Each turn (model call) is measured twice: the context as recorded, and as ctxc would have kept it "
    "(compacted when the context reaches --trigger of the window, reminders injected). Logs that "
    "recorded usage (Claude Code, Codex, pi, Kimi) add the size the real run reported."
)


def _load(path: str, input_format: str | None, skip_invalid: bool, max_line_mb: float) -> Any:
    from ctxc.formats import load

    return load(path, input_format=input_format, options=read_options(skip_invalid, max_line_mb))


# ------------------------------------------------------------------------------------------- remind


def remind_command(
    path: Annotated[str, typer.Argument(help="A transcript file, or - for stdin.", metavar="PATH")],
    rules: Annotated[
        str, typer.Option("--rules", "-r", help="Reminder rules (TOML, [\\[reminder]] tables).")
    ],
    model: ModelOpt = None,
    window: WindowOpt = None,
    tokenizer: Annotated[str, typer.Option(help="o200k_base, cl100k_base or approx.")] = "o200k_base",
    conversation: ConversationOpt = None,
    fmt: TableOrJsonOpt = None,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Show where in a transcript each reminder rule would have fired."""
    from ctxc.agent import ContextManager
    from ctxc.output import dumps, envelope, write_stdout
    from ctxc.reminders import ReminderRules
    from ctxc.replay import replay

    rule_set = ReminderRules.load(rules)
    transcript = _load(path, input_format, skip_invalid, max_line_mb)
    manager = ContextManager(model=model, window=window, tokenizer=tokenizer, reminders=rule_set)
    r = replay(transcript, manager, conversation=conversation, compact=False)
    fired = manager.fired
    rows = [(t, x) for t in r.turns for x in t.reminders]
    if table_on_terminal(fmt) is TableOrJson.json:
        doc = envelope(
            "remind",
            path=r.path,
            format=r.format,
            conversation=r.conversation,
            window=r.window,
            turns=len(r.turns),
            rules=[
                {"id": u.id, "trigger": u.trigger, "fired": fired.get(u.id, 0), "max_repeats": u.max_repeats}
                for u in rule_set.rules
            ],
            reminders=[
                {
                    "turn": t.turn,
                    "index": t.index,
                    "line": t.line,
                    "tokens": t.tokens_before,
                    "rule": x.rule,
                    "trigger": x.trigger,
                    "detail": x.detail,
                }
                for t, x in rows
            ],
        )
        write_stdout(dumps(doc))
        return
    from rich.table import Table

    from ctxc.render import print_table

    console = stdout_console()
    console.print(
        f"{r.path}  {r.format}  ·  {len(r.turns)} turns  ·  "
        f"{len(rows)} reminder(s) from {len(rule_set)} rule(s)",
        markup=False,
    )
    table = Table("turn", "line", "context", "rule", "trigger", "why")
    for t, x in rows:
        table.add_row(*cells(str(t.turn), str(t.line), f"{t.tokens_before:,}", x.rule, x.trigger, x.detail))
    print_table(console, table, optional=("line",), keys=1, fold=("why",))
    summary = Table("rule", "trigger", "fired", "max repeats")
    for rule in rule_set.rules:
        summary.add_row(
            *cells(rule.id, rule.describe(), str(fired.get(rule.id, 0)), str(rule.max_repeats or "-"))
        )
    print_table(console, summary, keys=1, fold=("trigger",))


# ------------------------------------------------------------------------------------------ compose


def compose_command(
    file: Annotated[
        str, typer.Argument(help="Prompt sections (TOML, [\\[section]] tables).", metavar="FILE")
    ],
    budget: Annotated[
        int | None, typer.Option("--budget", "-b", min=1, help="Token budget (default: no limit).")
    ] = None,
    base: Annotated[
        str | None, typer.Option("--base", help="An override prompt that replaces every section.")
    ] = None,
    fill: Annotated[
        bool, typer.Option("--fill", help="Also keep lower-priority sections that still fit.")
    ] = False,
    tokenizer: Annotated[str, typer.Option(help="o200k_base, cl100k_base or approx.")] = "o200k_base",
    fmt: Annotated[
        ComposeFormat, typer.Option("--format", "-f", help="text: the prompt; json: prompt and sections.")
    ] = ComposeFormat.text,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No section table on stderr.")] = False,
) -> None:
    """Compose a system prompt from prioritised sections within a token budget."""
    from ctxc.composer import PromptComposer
    from ctxc.output import dumps, envelope, write_stdout
    from ctxc.tokens import make_counter

    composer = PromptComposer.load(file)
    if base is not None:
        composer = composer.with_base(base)
    result = composer.compose(budget, counter=make_counter(tokenizer), fill=fill)
    if fmt is ComposeFormat.json:
        doc = envelope(
            "compose",
            path=file,
            budget=budget,
            tokens=result.tokens,
            base=result.base,
            prompt=result.prompt,
            sections=[
                {
                    "id": o.section.id,
                    "priority": o.section.priority,
                    "required": o.section.required,
                    "tokens": o.tokens,
                    "kept": o.kept,
                    "reason": o.reason,
                }
                for o in result.sections
            ],
        )
        write_stdout(dumps(doc))
    else:
        write_stdout(result.prompt + "\n")
    if quiet:
        return
    from rich.table import Table

    from ctxc.render import print_table

    table = Table("section", "priority", "required", "tokens", "kept", title=None)
    for o in result.sections:
        table.add_row(
            *cells(
                o.section.id,
                str(o.section.priority),
                "yes" if o.section.required else "",
                f"{o.tokens:,}",
                "kept" if o.kept else (o.reason if result.base else f"dropped: {o.reason}"),
            )
        )
    err = stderr_console()
    print_table(err, table, keys=1, fold=("kept",))
    limit = f" of a {budget:,} budget" if budget is not None else ""
    if result.base:
        what = f"the override prompt replaced {len(result.sections)} section(s)"
    else:
        what = f"{len(result.kept)} section(s) kept, {len(result.dropped)} dropped"
    err.print(
        f"ctxc: {what}; {result.tokens:,} tokens{limit}",
        markup=False,
        soft_wrap=True,
    )


# ------------------------------------------------------------------------------------------- replay


def replay_command(
    path: Annotated[str, typer.Argument(help="A transcript file, or - for stdin.", metavar="PATH")],
    window: WindowOpt = None,
    model: ModelOpt = None,
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="See `ctxc strategies`.")] = "adaptive",
    reminders: Annotated[
        str | None, typer.Option("--reminders", help="Reminder rules (TOML) to inject as the run goes.")
    ] = None,
    trigger: Annotated[
        float | None,
        typer.Option(help="Compact when the context reaches this share of the window (default: stage 2)."),
    ] = None,
    target_ratio: Annotated[
        float | None, typer.Option("--target-ratio", help="Compact down to this share of the window.")
    ] = None,
    keep_last: KeepLastOpt = 4,
    thresholds: ThresholdsOpt = DEFAULT_THRESHOLDS_TEXT,
    settings: SetOpt = None,
    tokenizer: Annotated[str, typer.Option(help="o200k_base, cl100k_base or approx.")] = "o200k_base",
    conversation: ConversationOpt = None,
    fmt: TableOrJsonOpt = None,
    turns: Annotated[bool, typer.Option("--turns", help="Table: list every turn, not only events.")] = False,
    plot_file: Annotated[
        str | None,
        typer.Option("--plot", help="Also draw the replay to an .svg or .png file (needs ctxc\\[plot])."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Nothing on stderr but errors.")] = False,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Replay a transcript turn by turn as if its agent had run with ctxc's context manager."""
    from ctxc.agent import ContextManager
    from ctxc.errors import UsageError
    from ctxc.output import atomic_output, check_output, dumps, envelope, write_stdout
    from ctxc.replay import have_matplotlib, plot, plot_format, replay, replay_to_json

    fmt_of_plot = plot_format(plot_file) if plot_file else None  # a bad extension fails before any work
    if plot_file:
        check_output(plot_file, inputs=(path,))  # as does a path that cannot be written
        if not have_matplotlib():  # a file asked for and not written would be a silent failure
            raise UsageError(f"--plot {plot_file} needs matplotlib: pip install 'ctxc[plot]'")
    manager = ContextManager(
        model=model,
        window=window,
        strategy=strategy,
        reminders=reminders,
        trigger=trigger,
        target_ratio=target_ratio,
        keep_last=4 if keep_last is None else keep_last,
        thresholds=parse_thresholds(thresholds),
        settings=parse_sets(settings or []),
        tokenizer=tokenizer,
    )
    transcript = _load(path, input_format, skip_invalid, max_line_mb)
    r = replay(transcript, manager, conversation=conversation)
    if table_on_terminal(fmt) is TableOrJson.json:
        write_stdout(dumps(envelope("replay", **replay_to_json(r))))
    else:
        _print_replay(r, turns)
    if plot_file is None:
        return
    assert fmt_of_plot is not None
    with atomic_output(plot_file, inputs=(path,)) as handle:
        plot(r, handle, fmt=fmt_of_plot)
    if not quiet:
        stderr_console().print(f"ctxc: wrote {plot_file}", markup=False, soft_wrap=True)


def _print_replay(r: Replay, every_turn: bool) -> None:
    from rich.table import Table

    from ctxc.render import print_table
    from ctxc.replay import events, terminal_chart

    console = stdout_console()

    def pct(n: int) -> str:
        return f"{n / r.window:.0%}"

    recorded = f"; the log recorded up to {r.recorded_peak:,}" if r.recorded_peak is not None else ""
    freed = sum(t.compaction.freed for t in r.compactions if t.compaction is not None)
    console.print(
        f"{r.path}  {r.format}  ·  {len(r.turns)} turns  ·  window {r.window:,}  ·  {r.strategy}, "
        f"trigger {r.trigger:.0%}\n"
        f"peak context {r.peak_raw:,} ({pct(r.peak_raw)}) without compaction, {r.peak_tokens:,} "
        f"({pct(r.peak_tokens)}) with; {len(r.compactions)} compaction(s) freed {freed:,} tokens; "
        f"{len(r.reminders)} reminder(s){recorded}",
        markup=False,
    )
    console.print(terminal_chart(r, width=max(20, min(100, console.width - 14))))
    if every_turn:
        table = Table("turn", "line", "without", "with", "stage", "recorded", "events")
        marks: dict[int, list[str]] = {}
        for turn, _line, kind, detail in events(r):
            marks.setdefault(turn, []).append(f"{kind}: {detail}")
        for t in r.turns:
            table.add_row(
                *cells(
                    str(t.turn),
                    str(t.line),
                    f"{t.raw_tokens:,}",
                    f"{t.tokens:,}",
                    str(t.stage),
                    f"{t.recorded:,}" if t.recorded is not None else "",
                    "\n".join(marks.get(t.turn, [])),
                )
            )
    else:
        table = Table("turn", "line", "event", "detail")
        for turn, line, kind, detail in events(r):
            table.add_row(*cells(str(turn), str(line), kind, detail))
    print_table(console, table, optional=("line", "recorded"), keys=1, fold=("events", "detail"))


def register(app: typer.Typer) -> None:
    app.command("remind", epilog=REMIND_EPILOG)(remind_command)
    app.command("compose", epilog=COMPOSE_EPILOG)(compose_command)
    app.command("replay", epilog=REPLAY_EPILOG)(replay_command)
