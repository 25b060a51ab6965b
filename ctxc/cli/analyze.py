"""``ctxc analyze``: token usage per message and per file, and each file's compaction stage."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer

from ctxc.batch import expand_paths
from ctxc.cli import options as opt
from ctxc.errors import UsageError
from ctxc.output import write_stdout
from ctxc.stages import DEFAULT_THRESHOLDS_TEXT

TokenizerOpt = Annotated[
    str,
    typer.Option(
        help="o200k_base, cl100k_base, approx, anthropic (Claude's counts via the API), or usage "
        "(the usage Claude Code and Codex logs recorded; no counting)."
    ),
]
ForecastOpt = Annotated[
    bool,
    opt.flag("--forecast", "Also dry-run each adaptive stage: the tokens it would remove at this window."),
]

ANALYZE_EPILOG = opt.examples(
    "ctxc analyze ~/.claude/projects/myproj/session.jsonl",
    "ctxc analyze logs/ --format json > report.json",
    "cat rollout.jsonl | ctxc analyze - --model gpt-5 --format csv",
    "ctxc analyze session.jsonl --window 200000 --thresholds 0.5,0.65,0.8,0.9 --messages",
)


@opt.app.command(epilog=ANALYZE_EPILOG)
def analyze(
    paths: opt.PathsArg = None,
    fmt: opt.OutFormatOpt = None,
    tokenizer: TokenizerOpt = "o200k_base",
    model: opt.ModelOpt = None,
    window: opt.WindowOpt = None,
    thresholds: opt.ThresholdsOpt = DEFAULT_THRESHOLDS_TEXT,
    top: Annotated[int, typer.Option(min=0, help="How many of the largest messages to list.")] = 10,
    messages: Annotated[
        bool, opt.flag("--messages", "Table: list every message, not only the largest.")
    ] = False,
    no_cache: opt.NoCacheOpt = False,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="With --tokenizer anthropic: count requests in flight at once.")
    ] = 4,
    prices: opt.PricesOpt = None,
    forecast: ForecastOpt = False,
    glob: opt.GlobOpt = None,
    jobs: opt.JobsOpt = None,
    fail_fast: opt.FailFastOpt = False,
    quiet: opt.QuietOpt = False,
    input_format: opt.InputFormatOpt = None,
    skip_invalid: opt.SkipInvalidOpt = False,
    max_line_mb: opt.MaxLineOpt = 32.0,
) -> None:
    """Report token usage per message and per file, and the compaction stage each file is in."""
    from ctxc.analysis import AnalyzeJob, analyze_file
    from ctxc.cli.batch import resolve_jobs, run_one_or_many
    from ctxc.pricing import default_prices

    options = opt.read_options(skip_invalid, max_line_mb)
    files = expand_paths(paths, glob)
    out_fmt = opt.table_on_terminal(fmt)
    if prices:
        default_prices(prices)  # a bad table fails now, once, not in every worker
    if tokenizer == "usage" and (out_fmt == "csv" or forecast):  # no messages, nothing counted
        raise UsageError("--tokenizer usage has no per-message rows to forecast or list as CSV")
    if out_fmt == "table":
        # A slow import, made while the counting worker (ctxc.tokens.workers) builds its encoding.
        import rich.table  # noqa: F401
    workers = resolve_jobs(jobs, files)
    job = AnalyzeJob(
        "",
        **opt.pick(locals(), "tokenizer model window input_format top forecast prices"),
        use_cache=not no_cache,
        thresholds=opt.parse_thresholds(thresholds),
        read_options=options,
        # Worker processes already fill the cores; threads inside each would only contend.
        concurrency=concurrency if workers == 1 or tokenizer == "anthropic" else 1,
    )
    results, errors, failed = run_one_or_many(
        [(f, replace(job, path=f)) for f in files],
        analyze_file,
        what="analyzing",
        jobs=workers,
        fail_fast=fail_fast,
        quiet=quiet,
        tokens_of=lambda a: a.total_tokens,
    )
    _emit_analyses(results, out_fmt, messages, errors=errors, exit_code=failed)
    if out_fmt != "table":  # a table states these itself: each warning is said once
        _warn(results)
    raise typer.Exit(failed)


def _warn(results: list[Any]) -> None:
    """Skipped lines and the first pairing problem of each file, on stderr."""
    for a in results:
        if a.skipped_lines:
            opt.note(f"ctxc: {a.path}: skipped {a.skipped_lines} invalid line(s)")
        if a.problems:
            p = a.problems[0]
            more = f" (and {len(a.problems) - 1} more)" if len(a.problems) > 1 else ""
            opt.note(f"ctxc: warning: {a.path}:{p.line}: {p.message}{more}")


def _emit_analyses(
    results: list[Any], out_fmt: str, show_messages: bool, *, errors: list[dict[str, Any]], exit_code: int
) -> None:
    from ctxc.render import analyses_to_csv, analysis_to_json, render_analysis, render_usage

    if out_fmt == "json":
        files = [analysis_to_json(a) for a in results]
        opt.print_json("analyze", files=files, errors=errors, exit_code=exit_code)
    elif out_fmt == "csv":
        write_stdout(analyses_to_csv(results))
    else:
        console = opt.stdout_console()
        for i, a in enumerate(results):
            if i:
                console.print()
            # Recorded usage only has no messages to tabulate.
            usage_only = a.tokenizer == "usage"
            for part in render_usage(a) if usage_only else render_analysis(a, show_messages=show_messages):
                console.print(part)
