"""``ctxc check``: a token budget gate for CI (the library is :mod:`ctxc.check`)."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

import typer

from ctxc.batch import BatchProgress, expand_paths
from ctxc.cli import options as opt
from ctxc.output import dumps, write_stdout
from ctxc.stages import DEFAULT_THRESHOLDS, DEFAULT_THRESHOLDS_TEXT
from ctxc.terminal import one_line, visible

EPILOG = opt.examples(
    "ctxc check logs/ --max-usage 0.8                      # over 80% of the default window fails",
    "ctxc check session.jsonl --max-tokens 150000 --model claude-opus-4-5",
    "ctxc check logs/ --max-usage 0.8 --format github      # annotations in a GitHub Actions job",
    "ctxc check ~/.claude/projects/ --max-usage 0.9 --tokenizer usage --format json",
    note="A file is [bold]over[/bold] above the budget, [bold]near[/bold] from --warn-usage of the window "
    "(default 0.6, where adaptive compaction starts) up to the budget, else ok; a file that cannot be "
    "read is reported and the others are still checked. [bold]Exit codes[/bold]: 0 every file within "
    "budget (near is only a warning), 6 some file over budget, 12 some of several files unreadable (one "
    "file: its own code, e.g. 3 bad input, 4 unknown format), 2 bad options.",
)


def _print_table(report: Any) -> None:
    """The verdicts as a table that fits the terminal: the sentence wraps, the figures stay whole; on a
    narrow one each verdict goes under its file."""
    from rich.text import Text

    from ctxc.check import message

    styles = {"over": "bold red", "near": "yellow", "ok": "green", "error": "bold red"}
    rows = [
        (
            Text.assemble(
                (f.status.upper() if f.status in ("over", "error") else f.status, styles[f.status])
            ),
            one_line(f.path),
            message(f, report.budget) + (f" (line {f.line})" if f.line else ""),
        )
        for f in report.files
    ]
    columns = ("", "file", "tokens and budget")
    opt.print_rows(columns, rows, box=None, pad_edge=False, fold=columns[1:], stack=columns[1:])
    opt.stdout_console().print(Text(report.headline()))


@opt.app.command(epilog=EPILOG)
def check(
    paths: opt.PathsArg = None,
    max_usage: Annotated[
        float | None, typer.Option(help="Budget as a share of the window, e.g. 0.8.", show_default=False)
    ] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Budget in tokens.", show_default=False)] = None,
    warn_usage: Annotated[
        float,
        typer.Option(help="Warn (near budget) from this share of the window; 0.6 is where stage 2 begins."),
    ] = DEFAULT_THRESHOLDS[0],
    model: opt.ModelOpt = None,
    window: opt.WindowOpt = None,
    tokenizer: Annotated[
        str,
        typer.Option(
            help="o200k_base, cl100k_base, approx, anthropic, or usage (recorded usage only, no counting)."
        ),
    ] = "o200k_base",
    fmt: Annotated[
        Literal["table", "json", "github"],
        typer.Option("--format", "-f", help="table, json (ctxc.check/2), or github (workflow annotations)."),
    ] = "table",
    thresholds: Annotated[
        str, typer.Option(help="Window shares where stages 2-5 begin (for the stage reported).")
    ] = DEFAULT_THRESHOLDS_TEXT,
    fail_fast: Annotated[
        bool, opt.flag("--fail-fast", "Stop at the first file that cannot be read.")
    ] = False,
    no_cache: opt.NoCacheOpt = False,
    glob: opt.GlobOpt = None,
    jobs: opt.JobsOpt = None,
    quiet: opt.QuietOpt = False,
    input_format: opt.InputFormatOpt = None,
    skip_invalid: opt.SkipInvalidOpt = False,
    max_line_mb: opt.MaxLineOpt = 32.0,
) -> None:
    """Exit non-zero when any transcript is over a token budget, saying which and by how much."""
    from ctxc.check import check_paths, resolve_budget
    from ctxc.cli.batch import resolve_jobs

    budget = resolve_budget(
        max_usage=max_usage, max_tokens=max_tokens, warn_usage=warn_usage, model=model, window=window
    )
    options = opt.read_options(skip_invalid, max_line_mb)
    files = expand_paths(paths, glob)
    with BatchProgress(len(files), "checking", quiet=quiet) as progress:
        report = check_paths(
            files,
            budget,
            tokenizer=tokenizer,
            input_format=input_format,
            fail_fast=fail_fast,
            thresholds=opt.parse_thresholds(thresholds),
            options=options,
            use_cache=not no_cache,
            jobs=resolve_jobs(jobs, files),
            on_file=lambda f: progress.advance(tokens=f.tokens or 0),
        )
    _emit(report, fmt)
    raise typer.Exit(report.exit_code)


def _emit(report: Any, fmt: str) -> None:
    """The report on stdout as ``fmt`` asks; each unreadable file also as a diagnostic on stderr."""
    from ctxc.check import render_github, render_table, report_to_json

    for f in report.files:
        if f.status == "error":
            where = f"{f.path}:{f.line}" if f.line is not None else f.path
            opt.note(f"ctxc: error: {where}: {f.error}")
        elif f.skipped_lines:
            opt.note(f"ctxc: {f.path}: skipped {f.skipped_lines} invalid line(s)")
    if fmt == "json":
        write_stdout(dumps(report_to_json(report)))
    elif fmt == "github":
        write_stdout(visible(render_github(report)))
    elif sys.stdout.isatty():
        _print_table(report)
    else:  # a CI log or a pipe: one line per file, never wrapped
        write_stdout(visible(render_table(report)))
