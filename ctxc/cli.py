"""The ``ctxc`` command line: a thin layer over the library with one error boundary.

Data goes to stdout, diagnostics to stderr. Every library error is a :class:`~ctxc.errors.CtxcError`
that :func:`main` prints as one line and turns into its exit code; ``CTXC_DEBUG=1`` shows tracebacks.
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from ctxc._version import __version__
from ctxc.batch import expand_paths
from ctxc.cliutil import (
    ArchiveOpt,
    FailFastOpt,
    GlobOpt,
    InputFormatOpt,
    JobsOpt,
    KeepLastOpt,
    MaxLineOpt,
    ModelOpt,
    NoCacheOpt,
    OutFormat,
    PathsArg,
    PricesOpt,
    QuietOpt,
    SetOpt,
    SkipInvalidOpt,
    TableOrJson,
    TableOrJsonOpt,
    ThresholdsOpt,
    TranscriptOutputOpt,
    WindowOpt,
    cells,
    parse_sets,
    parse_thresholds,
    read_options,
    stdout_console,
    table_on_terminal,
    transcript_output,
)
from ctxc.errors import CtxcError, ExitCode, UsageError, exit_interrupted
from ctxc.stages import DEFAULT_THRESHOLDS_TEXT
from ctxc.terminal import stderr_console, visible

app = typer.Typer(
    name="ctxc",
    help="Read, measure and compact LLM agent transcripts (Claude Code, Codex, chat logs, datasets).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc analyze session.jsonl\n\n"
        "  cat t.jsonl | ctxc compact - > small.jsonl\n\n"
        "  ctxc restore small.jsonl -o original.jsonl\n\n"
        "[bold]Exit codes[/bold]: 0 ok, 1 internal error, 2 usage, 3 bad input, 4 unknown format, "
        "5 invalid transcript, 6 over target, 7 output error, 8 archive error, 9 model API or summary "
        "command failed, 10 API key missing or rejected, 11 unknown model, "
        "12 some files of a batch failed, 130 interrupted. "
        "Data goes to stdout, diagnostics to stderr; NO_COLOR is honoured; CTXC_DEBUG=1 shows tracebacks."
    ),
)


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc analyze ~/.claude/projects/myproj/session.jsonl\n\n"
        "  ctxc analyze logs/ --format json > report.json\n\n"
        "  cat rollout.jsonl | ctxc analyze - --model gpt-5 --format csv\n\n"
        "  ctxc analyze session.jsonl --window 200000 --thresholds 0.5,0.65,0.8,0.9 --messages"
    )
)
def analyze(
    paths: PathsArg = None,
    fmt: Annotated[
        OutFormat | None, typer.Option("--format", "-f", help="table (default on a terminal), json, or csv.")
    ] = None,
    tokenizer: Annotated[
        str,
        typer.Option(
            help="o200k_base, cl100k_base, approx, anthropic (Claude's counts via the API), or usage "
            "(the usage Claude Code and Codex logs recorded; no counting)."
        ),
    ] = "o200k_base",
    model: ModelOpt = None,
    window: WindowOpt = None,
    thresholds: ThresholdsOpt = DEFAULT_THRESHOLDS_TEXT,
    top: Annotated[int, typer.Option(help="How many of the largest messages to list.")] = 10,
    messages: Annotated[
        bool, typer.Option("--messages", help="Table: list every message, not only the largest.")
    ] = False,
    no_cache: NoCacheOpt = False,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="With --tokenizer anthropic: count requests in flight at once.")
    ] = 4,
    prices: PricesOpt = None,
    forecast: Annotated[
        bool,
        typer.Option(
            "--forecast", help="Also dry-run each adaptive stage: the tokens it would remove at this window."
        ),
    ] = False,
    glob: GlobOpt = None,
    jobs: JobsOpt = None,
    fail_fast: FailFastOpt = False,
    quiet: QuietOpt = False,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Report token usage per message and per file, and the compaction stage each file is in."""
    from dataclasses import replace

    from ctxc.cli_batch import resolve_jobs, run_one_or_many
    from ctxc.jobs import AnalyzeJob, analyze_file
    from ctxc.pricing import default_prices

    options = read_options(skip_invalid, max_line_mb)
    files = expand_paths(paths, glob)
    out_fmt = fmt or (OutFormat.table if sys.stdout.isatty() else OutFormat.json)
    if prices:
        default_prices(prices)  # a bad table fails now, once, not in every worker
    if tokenizer == "usage" and (out_fmt is OutFormat.csv or forecast):  # no messages, nothing counted
        raise UsageError("--tokenizer usage has no per-message rows to forecast or list as CSV")
    if out_fmt is OutFormat.table:
        # rich's table is a slow import: import it now, while the counting worker started with the
        # command (ctxc.tokens.workers) is still building the encoding, not after the counts.
        import rich.table  # noqa: F401
    workers = resolve_jobs(jobs, files)
    job = AnalyzeJob(
        "",
        tokenizer=tokenizer,
        use_cache=not no_cache,
        model=model,
        window=window,
        thresholds=parse_thresholds(thresholds),
        input_format=input_format,
        read_options=options,
        top=top,
        # Worker processes already fill the cores; threads inside each would only contend.
        concurrency=concurrency if workers == 1 or tokenizer == "anthropic" else 1,
        forecast=forecast,
        prices=prices,
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

    # A table states skipped lines and pairing problems itself: each warning is said once.
    for a in results if out_fmt is not OutFormat.table else []:
        if a.skipped_lines:
            stderr_console().print(
                f"ctxc: {a.path}: skipped {a.skipped_lines} invalid line(s)", markup=False, soft_wrap=True
            )
        if a.problems:
            p = a.problems[0]
            more = f" (and {len(a.problems) - 1} more)" if len(a.problems) > 1 else ""
            stderr_console().print(
                f"ctxc: warning: {a.path}:{p.line}: {p.message}{more}", markup=False, soft_wrap=True
            )
    if failed:
        raise typer.Exit(failed)


def _emit_analyses(
    results: list[Any],
    out_fmt: OutFormat,
    show_messages: bool,
    *,
    errors: list[dict[str, Any]],
    exit_code: int,
) -> None:
    from ctxc.output import dumps, envelope, write_stdout
    from ctxc.render import analyses_to_csv, analysis_to_json, render_analysis

    if out_fmt is OutFormat.json:
        doc = envelope(
            "analyze", files=[analysis_to_json(a) for a in results], errors=errors, exit_code=exit_code
        )
        write_stdout(dumps(doc))
    elif out_fmt is OutFormat.csv:
        write_stdout(analyses_to_csv(results))
    else:
        console = stdout_console()
        for i, a in enumerate(results):
            if i:
                console.print()
            if a.tokenizer == "usage":  # recorded usage only: no messages to tabulate
                from ctxc.render import render_usage

                parts = render_usage(a)
            else:
                parts = render_analysis(a, show_messages=show_messages)
            for part in parts:
                console.print(part)


class ConvertTarget(StrEnum):
    same = "same"
    chat_anthropic = "chat-anthropic"
    chat_openai = "chat-openai"


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc convert session.jsonl --to chat-anthropic -o messages.jsonl\n\n"
        "  cat rollout.jsonl | ctxc convert - --to chat-openai > openai.jsonl\n\n"
        "  ctxc convert session.jsonl -o copy.jsonl      # own format: identical bytes"
    )
)
def convert(
    paths: PathsArg = None,
    output: TranscriptOutputOpt = None,
    to: Annotated[
        ConvertTarget,
        typer.Option(
            "--to", help="Target: same (the input's own format, byte for byte), chat-anthropic, chat-openai."
        ),
    ] = ConvertTarget.same,
    out_dir: Annotated[
        str | None,
        typer.Option("--out-dir", help="Write each output here, mirroring the input tree (a batch)."),
    ] = None,
    glob: GlobOpt = None,
    jobs: JobsOpt = None,
    fail_fast: FailFastOpt = False,
    quiet: QuietOpt = False,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Write a transcript in another format, keeping every tool call paired with its result."""
    from ctxc.batch import batch_exit_code, check_distinct_outputs, collect_inputs
    from ctxc.cli_batch import run_files
    from ctxc.jobs import ConvertJob, convert_file

    inputs = collect_inputs(paths, glob=glob, exclude=[out_dir] if out_dir else [])
    ropts = read_options(skip_invalid, max_line_mb)
    _batch_mode(paths, inputs, output or "-", out_dir)
    if out_dir is None:
        convert_file(ConvertJob(inputs[0].path, transcript_output(output), to.value, input_format, ropts))
        return
    jobs_list = [
        ConvertJob(i.path, str(Path(out_dir) / i.rel), to.value, input_format, ropts, make_dirs=True)
        for i in inputs
    ]
    check_distinct_outputs([(j.path, j.output) for j in jobs_list])
    outcomes = run_files(
        [(j.path, j) for j in jobs_list],
        convert_file,
        what="converting",
        jobs=jobs,
        fail_fast=fail_fast,
        quiet=quiet,
    )
    rc = batch_exit_code(outcomes, single=fail_fast)
    if rc:
        raise typer.Exit(rc)


def _batch_mode(
    paths: list[str] | None, inputs: list[Any], output: str, out_dir: str | None, in_place: bool | None = None
) -> bool:
    """Whether the run is a batch (``--out-dir``, or ``--in-place`` for a command that has it, else None),
    after refusing what makes no sense: several inputs or a directory without one, ``--output`` with one."""
    if out_dir is not None and in_place:
        raise UsageError("give --out-dir or --in-place, not both")
    batch = out_dir is not None or bool(in_place)
    if not batch and (len(inputs) > 1 or any(Path(p).is_dir() for p in paths or [])):
        alt = "" if in_place is None else " or --in-place"
        raise UsageError(f"several inputs need --out-dir DIR (mirrors the input tree){alt}")
    if batch and output != "-":
        where = "--out-dir" if in_place is None else "--out-dir or in place"
        raise UsageError(f"--output is for one input; a batch writes to {where}")
    return batch


def _load_reminders(path: str | None) -> Any:
    """``--reminders FILE``: the rules, read (and checked) before any work."""
    if path is None:
        return None
    from ctxc.reminders import ReminderRules

    return ReminderRules.load(path)


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc compact session.jsonl -o small.jsonl      # adaptive, to below 60% of the window\n\n"
        "  cat t.jsonl | ctxc compact - > small.jsonl     # in a pipeline\n\n"
        "  ctxc compact t.jsonl --strategy fifo --target-tokens 50000 -o small.jsonl\n\n"
        "  ctxc compact t.jsonl --target-ratio 0.3 --pin 'DO NOT' --pin 0-2 --report r.json > s.jsonl\n\n"
        "  ctxc compact t.jsonl --strategy mask --set mask.keep_last_results=5 --dry-run\n\n"
        "  ctxc compact logs/ --out-dir compacted/ --jobs 2 --report report.json   # a batch\n\n"
        "  ctxc compact t.jsonl --reminders rules.toml -o small.jsonl   # restate instructions after it\n\n"
        "The original is stored in the archive (--archive, $CTXC_ARCHIVE, default "
        "~/.local/share/ctxc/archive) before any output is written; `ctxc restore` gives it back byte "
        "for byte."
    )
)
def compact(
    paths: PathsArg = None,
    output: TranscriptOutputOpt = None,
    out_dir: Annotated[
        str | None,
        typer.Option("--out-dir", help="Write each output here, mirroring the input tree (a batch)."),
    ] = None,
    in_place: Annotated[
        bool, typer.Option("--in-place", help="Replace each input, after its original is archived.")
    ] = False,
    glob: GlobOpt = None,
    jobs: JobsOpt = None,
    fail_fast: FailFastOpt = False,
    force: Annotated[
        bool, typer.Option("--force", help="Redo files the run journal says are already done.")
    ] = False,
    no_index: Annotated[
        bool,
        typer.Option(
            "--no-index",
            help="Do not index the original for `ctxc search` now (bulk runs); the next search does it.",
        ),
    ] = False,
    fmt: Annotated[
        TableOrJson | None,
        typer.Option(
            "--format",
            "-f",
            help="With --out-dir, --in-place or --dry-run: the report on stdout, table (default on a "
            "terminal) or json.",
        ),
    ] = None,
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="See `ctxc strategies`.")] = "adaptive",
    target_tokens: Annotated[
        int | None, typer.Option("--target-tokens", help="Token target for each conversation.")
    ] = None,
    target_ratio: Annotated[
        float | None, typer.Option("--target-ratio", help="Token target as a share of the window.")
    ] = None,
    model: ModelOpt = None,
    window: WindowOpt = None,
    keep_last: KeepLastOpt = None,
    pin: Annotated[
        list[str] | None,
        typer.Option("--pin", help="Keep messages: an index (12), a range (3-7) or a regex. Repeatable."),
    ] = None,
    archive: ArchiveOpt = None,
    summarizer: Annotated[str, typer.Option(help="Summarizer for summarizing strategies.")] = "extractive",
    tokenizer: Annotated[
        str, typer.Option(help="o200k_base, cl100k_base, approx, or anthropic (Claude's counts via the API).")
    ] = "o200k_base",
    thresholds: Annotated[
        str, typer.Option(help="Window shares where adaptive stages 2-5 begin.")
    ] = DEFAULT_THRESHOLDS_TEXT,
    settings: SetOpt = None,
    allow_over: Annotated[
        bool, typer.Option("--allow-over", help="Write the output even if it stays over the target.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan and savings; write nothing, archive nothing.")
    ] = False,
    list_actions: Annotated[
        bool,
        typer.Option(
            "--messages", help="With --dry-run on a terminal: list every action, not only each stage's."
        ),
    ] = False,
    report: Annotated[str | None, typer.Option("--report", help="Write a JSON report to this file.")] = None,
    instructions: Annotated[
        str | None, typer.Option(help="Focus for summaries, like /compact \\[instructions].")
    ] = None,
    reminders: Annotated[
        str | None,
        typer.Option("--reminders", help="Reminder rules (TOML): append the reminders due after compaction."),
    ] = None,
    summary_model: Annotated[
        str | None,
        typer.Option(
            "--summary-model",
            envvar="CTXC_SUMMARY_MODEL",
            help="Model for --summarizer anthropic (default: a current fast Claude model).",
        ),
    ] = None,
    summary_command: Annotated[
        str | None,
        typer.Option("--summary-command", help="For --summarizer command: reads the prompt on stdin."),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Summarizer calls in flight at once.")] = 4,
    max_retries: Annotated[
        int, typer.Option("--max-retries", min=0, max=20, help="Retries of a failed summarizer call.")
    ] = 2,
    segment_tokens: Annotated[
        int,
        typer.Option(
            "--segment-tokens", min=1000, help="Summarize longer spans as segments, concurrently, then merge."
        ),
    ] = 40_000,
    timeout: Annotated[float, typer.Option(min=1.0, help="Seconds one summarizer call may take.")] = 120.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary on stderr.")] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the token count and summary caches.")
    ] = False,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Write a compacted transcript in the format it was read, archiving the original first."""
    from ctxc.compaction.run import DEFAULT_KEEP_LAST, CompactOptions
    from ctxc.stages import check_thresholds
    from ctxc.summarize import SummarizerOptions

    th = parse_thresholds(thresholds)
    sets = parse_sets(settings or [])
    if fmt is not None and not (dry_run or out_dir is not None or in_place):
        # One file's output is the transcript itself: there is no report to format.
        raise UsageError("--format is for a report: give it with --out-dir, --in-place or --dry-run")
    options = CompactOptions(
        strategy=strategy,
        target_tokens=target_tokens,
        target_ratio=target_ratio,
        model=model,
        window=window,
        keep_last=keep_last or DEFAULT_KEEP_LAST,
        strict_keep_last=keep_last is not None,
        pins=tuple(pin or ()),
        summarizer=summarizer,
        tokenizer=tokenizer,
        thresholds=check_thresholds(th),
        allow_over=allow_over,
        settings=sets,
        instructions=instructions,
        use_cache=not no_cache,
        reminders=_load_reminders(reminders),
        summarizer_options=SummarizerOptions(
            model=summary_model,
            concurrency=concurrency,
            max_retries=max_retries,
            timeout=timeout,
            use_cache=not no_cache,
            dry_run=dry_run,
            command=summary_command,
            segment_tokens=segment_tokens,
        ),
    )
    from ctxc.archive_store import archive_root
    from ctxc.batch import collect_inputs
    from ctxc.compaction.files import CompactJob, compact_file

    # A walk never takes the batch's own outputs or archive for inputs (an --out-dir inside the tree).
    inputs = collect_inputs(paths, glob=glob, exclude=[d for d in (out_dir, archive_root(archive)) if d])
    batch = _batch_mode(paths, inputs, output or "-", out_dir, in_place)
    if not (batch or dry_run):
        output = transcript_output(output)
    ropts = read_options(skip_invalid, max_line_mb)
    if report is not None:
        outs = (
            [i.path if in_place else str(Path(out_dir or ".") / i.rel) for i in inputs]
            if batch
            else [output or "-"]
        )
        _check_report(report, inputs=tuple(i.path for i in inputs), outputs=[] if dry_run else outs)
    if not batch:
        job = CompactJob(
            inputs[0].path,
            output or "-",
            options,
            archive,
            input_format,
            ropts,
            dry_run=dry_run,
            index=not no_index,
            report=report,
        )
        doc = compact_file(job)
        if dry_run:
            _emit_plan(doc, table_on_terminal(fmt), every_action=list_actions)
            return
        if not quiet:
            _summary_line(doc)
        return
    jobs_list = [
        CompactJob(
            i.path,
            i.path if in_place else str(Path(out_dir or ".") / i.rel),
            options,
            archive,
            input_format,
            ropts,
            dry_run=dry_run,
            in_place=in_place,
            make_dirs=not in_place,
            index=not no_index,
        )
        for i in inputs
    ]
    from ctxc.cli_batch import run_compact_batch

    rc = run_compact_batch(
        jobs_list,
        archive=archive,
        jobs=jobs,
        fail_fast=fail_fast,
        force=force,
        quiet=quiet,
        fmt=fmt,
        report=report,
    )
    if rc:
        raise typer.Exit(rc)


def _check_report(report: str, *, inputs: tuple[str, ...], outputs: list[str]) -> None:
    """Refuse a ``--report`` that would replace an output or an input, before any work is done."""
    from ctxc.output import check_output, same_file

    for out in outputs:
        if out != "-" and same_file(report, out):
            raise UsageError(f"--report {report} is also the output {out}; give the report another name")
    check_output(report, inputs=inputs)


def _summarizer_spend(run: dict[str, Any]) -> str:
    """'; anthropic: 3 calls, 41,200 input tokens (estimated)' when the summarizer reported its spend."""
    spend = run.get("summarizer") or {}
    if not spend.get("calls"):
        return ""
    estimated = " (estimated)" if spend.get("estimated") else ""
    tokens = spend.get("input_tokens", 0)
    return f"; {spend['name']}: {spend['calls']} call(s), {tokens:,} input tokens{estimated}"


def _summary_line(doc: dict[str, Any]) -> None:
    run = doc["run"]
    before, after = run["tokens_before"], run["tokens_after"]
    pct = (after - before) / before * 100 if before else 0.0
    stages = ", ".join(f"{k} {_signed(-v)}" for k, v in run["savings"].items() if v) or "nothing to do"
    stderr_console().print(
        f"ctxc: {run['input_path']}: {before:,} → {after:,} tokens ({pct:+.1f}%) with {run['strategy']} "
        f"[{stages}]; original in archive {run['archive_id'][:12]}{_summarizer_spend(run)}{_worth(run)}",
        markup=False,
        soft_wrap=True,
    )


def _signed(change: int) -> str:
    """A change in tokens with its sign: "-9,112" removed, "+16" added (a repair's answers)."""
    return f"{change:+,}"


def _worth(run: dict[str, Any]) -> str:
    """'; saves $0.50 a turn at claude-opus-4-5 input prices ($0.05 if cached)', when it can be priced."""
    from ctxc.render import dollars

    worth = run.get("saving_per_turn")
    if not worth:
        return ""
    return (
        f"; saves {dollars(worth['usd_input'])} a turn at {worth['model']} input prices "
        f"({dollars(worth['usd_cache_read'])} if cached)"
    )


def _emit_plan(doc: dict[str, Any], fmt: TableOrJson, *, every_action: bool = False) -> None:
    from ctxc.output import dumps, write_stdout

    if fmt is TableOrJson.json:
        write_stdout(dumps({**doc, "schema": doc["schema"].replace("compact", "compact-plan")}))
        return
    from rich.table import Table

    from ctxc.render import print_table

    console = stdout_console()
    run = doc["run"]
    console.print(
        f"dry run: {run['input_path']} with {run['strategy']}: "
        f"{run['tokens_before']:,} → {run['tokens_after']:,} tokens (nothing written)"
        f"{_summarizer_spend(run)}",
        markup=False,
    )
    actions = [(conv["conversation"], a) for conv in doc["conversations"] for a in conv["actions"]]
    # First what each stage does in all (a few lines), then, if asked, every action (hundreds).
    stages: dict[str, list[int]] = {}
    for _, a in actions:
        total = stages.setdefault(a["strategy"], [0, 0, 0, 0])
        total[0] += 1
        total[1] += a["last"] - a["first"] + 1
        total[2] += a["tokens_before"]
        total[3] += a["tokens_after"]
    if stages:
        table = Table("stage")
        for column in ("actions", "messages", "before", "after", "change"):
            table.add_column(column, justify="right")
        for name, (count, span, before, after) in stages.items():
            table.add_row(
                *cells(name, str(count), str(span), f"{before:,}", f"{after:,}", _signed(after - before))
            )
        print_table(console, table, keys=1)
    if not every_action:
        if actions:
            console.print(f"{len(actions)} action(s); list each with --messages", markup=False, style="dim")
        return
    table = Table("conv", "strategy", "action")
    for column in ("messages", "before", "after", "change"):
        table.add_column(column, justify="right")
    table.add_column("note")
    for conv, a in actions:
        table.add_row(
            *cells(
                str(conv),
                a["strategy"],
                a["kind"],
                f"{a['first']}-{a['last']}",
                f"{a['tokens_before']:,}",
                f"{a['tokens_after']:,}",
                _signed(a["tokens_after"] - a["tokens_before"]),
                a["note"],
            )
        )
    print_table(console, table, optional=("conv", "action"), keys=2, fold=("note",))


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc strategies\n\n"
        "  ctxc strategies --options        # every option with its default and range"
    )
)
def strategies(
    show_options: Annotated[
        bool, typer.Option("--options", help="Also list each strategy's options.")
    ] = False,
) -> None:
    """List the compaction strategies with a one-line description."""
    import dataclasses

    from rich.table import Table

    from ctxc.compaction import strategies as registry
    from ctxc.render import print_table

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("strategy", style="bold")
    table.add_column("description")
    for name, cls in registry().items():
        table.add_row(*cells(name, cls.description))
        if show_options:
            for f in dataclasses.fields(cls.Config):
                lo, hi = f.metadata.get("min"), f.metadata.get("max")
                rng = f" [{lo}..{hi}]" if lo is not None or hi is not None else ""
                help_text = f.metadata.get("help", "")
                table.add_row(*cells("", f"  --set {name}.{f.name}={f.default!r}{rng}  {help_text}"))
    print_table(stdout_console(), table, fold=("description",))


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc restore 3f2a9c1b4d5e -o original.jsonl\n\n"
        "  ctxc restore small.jsonl > original.jsonl     # find the original of a compacted file"
    )
)
def restore(
    ref: Annotated[
        str, typer.Argument(help="An archive id (12+ hex characters) or a compacted file.", metavar="REF")
    ],
    output: TranscriptOutputOpt = None,
    archive: ArchiveOpt = None,
) -> None:
    """Write an archived original back, byte for byte."""
    import re

    from ctxc.archive import Archive
    from ctxc.errors import ArchiveError, InputError
    from ctxc.output import atomic_output

    is_file = Path(ref).is_file()
    if not is_file and not re.fullmatch(r"[0-9a-fA-F]+", ref.strip()):  # no id: a file name, mistyped
        raise InputError("no such file (nor an archive id: those are 12+ hex characters)", path=ref)
    store = Archive.open(archive)
    inputs: tuple[str, ...] = ()
    if is_file:
        found = store.find_original(Path(ref).read_bytes())
        if found is None:
            raise ArchiveError(f"no archived original found for this file in {store.root}", path=ref)
        ident = found
        inputs = (ref,)
    else:
        ident = store.resolve(ref)
    data = store.read(ident)
    # The restored file is as private as the archived original (cp's rule, from the archive's object).
    with atomic_output(
        transcript_output(output), inputs=inputs, like=str(store.object_path(ident))
    ) as handle:
        handle.write(data)


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc validate small.jsonl\n\n"
        "  ctxc validate logs/ --format json\n\n"
        "  ctxc validate session.jsonl --loose     # only results without any earlier call"
    )
)
def validate(
    paths: PathsArg = None,
    loose: Annotated[
        bool, typer.Option("--loose", help="Accept results that answer an earlier, not adjacent, call.")
    ] = False,
    fmt: Annotated[
        TableOrJson | None,
        typer.Option("--format", "-f", help="table (one line per file or problem) or json."),
    ] = None,
    glob: GlobOpt = None,
    jobs: JobsOpt = None,
    fail_fast: FailFastOpt = False,
    quiet: QuietOpt = False,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Report every tool pairing and role problem with its line; exit 5 if there is any."""
    from ctxc.cli_batch import run_one_or_many
    from ctxc.jobs import ValidateJob, validate_file
    from ctxc.output import dumps, envelope, write_stdout

    options = read_options(skip_invalid, max_line_mb)
    files = expand_paths(paths, glob)
    jobs_list = [ValidateJob(f, not loose, input_format, options) for f in files]
    report, errors, failed = run_one_or_many(
        [(j.path, j) for j in jobs_list],
        validate_file,
        what="validating",
        jobs=jobs,
        fail_fast=fail_fast,
        quiet=quiet,
    )
    total = sum(len(r["problems"]) for r in report)
    if fmt is TableOrJson.json:
        rc = failed or (int(ExitCode.INVALID) if total else 0)
        doc = envelope("validate", files=report, problems=total, errors=errors, exit_code=rc)
        write_stdout(dumps(doc))
    else:
        console = stdout_console()
        for r in report:
            if not r["problems"]:
                console.print(f"{r['path']}: ok ({r['format']}, {r['messages']} messages)", markup=False)
            for p in r["problems"]:
                console.print(
                    f"{r['path']}:{p['line']}: {p['code']}: {p['message']}", markup=False, soft_wrap=True
                )
    if failed:
        raise typer.Exit(failed)
    if total:
        raise typer.Exit(int(ExitCode.INVALID))


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc repair broken.jsonl -o fixed.jsonl\n\n"
        "  cat broken.jsonl | ctxc repair - > fixed.jsonl"
    )
)
def repair(
    path: Annotated[str, typer.Argument(help="A transcript file, or - for stdin.", metavar="PATH")],
    output: TranscriptOutputOpt = None,
    archive: ArchiveOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary on stderr.")] = False,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Fix pairing problems: drop orphan results, answer unanswered calls with "no result recorded"."""
    from ctxc.archive import Archive
    from ctxc.archive_store import sha256_hex
    from ctxc.compaction.write import write_transcript
    from ctxc.formats import get_adapter, load
    from ctxc.output import atomic_output
    from ctxc.reader import named_bytes, read_all
    from ctxc.repair import repair_messages

    output = transcript_output(output)
    name, data = read_all(path)
    options = read_options(skip_invalid, max_line_mb)
    transcript = load(named_bytes(name, data), input_format=input_format, options=options)
    store = Archive.open(archive)
    store.check_manifest()
    archive_id = store.store(data)
    outputs: dict[int, Any] = {}
    fixed_total = 0
    for conv in range(transcript.conversations):
        msgs = transcript.conversation(conv)
        fixed_msgs, fixed = repair_messages(msgs)
        outputs[conv] = fixed_msgs
        fixed_total += len(fixed)
    result = write_transcript(transcript, outputs, get_adapter(transcript.format), archive_id=archive_id)
    out_bytes = result.to_bytes()
    entry = {
        "command": "repair",
        "input_path": name,
        "output_path": output,
        "archive_id": archive_id,
        "input_sha256": archive_id,
        "output_sha256": sha256_hex(out_bytes),
        "format": transcript.format,
        "fixed": fixed_total,
    }
    # Recorded before the output takes its place: no output exists that the manifest does not know.
    with atomic_output(
        output, inputs=(name,), like=name, before_commit=lambda: store.record_run(entry)
    ) as handle:
        handle.write(out_bytes)
    if quiet:
        return
    stderr_console().print(
        f"ctxc: {name}: fixed {fixed_total} problem(s); original in archive {archive_id[:12]}",
        markup=False,
        soft_wrap=True,
    )


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc formats\n\n"
        "  ctxc analyze rollout.jsonl --input-format codex     # a name from the list, when sniffing "
        "cannot tell\n\n"
        "Every command sniffs the format from the first records; --input-format forces one, and a file "
        "that the forced format reads as no messages at all is an error naming the format sniffing picks."
    )
)
def formats() -> None:
    """List the transcript formats ctxc reads and writes."""
    from rich.table import Table

    from ctxc.formats import adapters
    from ctxc.render import print_table

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("format", style="bold")
    table.add_column("description")
    for name, adapter in sorted(adapters().items()):
        table.add_row(*cells(name, adapter.description))
    print_table(stdout_console(), table, fold=("description",))


@app.command(epilog="[bold]Examples[/bold]\n\n  ctxc models\n\n  ctxc models --format json")
def models(
    fmt: TableOrJsonOpt = None,
) -> None:
    """List the model profiles (context window, default tokenizer) that --model accepts."""
    from ctxc.output import dumps, envelope, write_stdout
    from ctxc.profiles import PROFILES

    if table_on_terminal(fmt) is TableOrJson.json:
        rows = [
            {"name": p.name, "provider": p.provider, "window": p.window, "tokenizer": p.tokenizer}
            for p in PROFILES
        ]
        write_stdout(dumps(envelope("models", models=rows)))
        return
    from rich.table import Table

    from ctxc.render import print_table

    table = Table("model", "provider", "window", "tokenizer")
    for p in PROFILES:
        table.add_row(*cells(p.name, p.provider, f"{p.window:,}", p.tokenizer))
    print_table(stdout_console(), table, keys=1)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ctxc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version_callback, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """Global options; the commands do the work."""


# Commands that live in their own modules (``ctxc/commands/``); each module has ``register(app)``.
# A tuple rather than discovery, so the order of ``ctxc --help`` is deliberate and a typo fails loudly.
COMMAND_MODULES: tuple[str, ...] = ("sessions", "search", "eval", "check", "agent", "hooks")


#: Help panels of the commands with too many options for one list, by parameter name.
HELP_PANELS: dict[str, dict[str, str]] = {
    "compact": {
        **dict.fromkeys(("input_format", "skip_invalid", "max_line_mb"), "Input"),
        **dict.fromkeys(
            ("target_tokens", "target_ratio", "model", "window", "keep_last", "pin", "allow_over"), "Target"
        ),
        **dict.fromkeys(("thresholds", "tokenizer", "no_cache"), "Target"),
        **dict.fromkeys(("strategy", "settings", "summarizer", "instructions", "reminders"), "Strategy"),
        **dict.fromkeys(
            ("summary_model", "summary_command", "concurrency", "max_retries", "segment_tokens", "timeout"),
            "Strategy",
        ),
        **dict.fromkeys(("output", "fmt", "dry_run", "list_actions", "report", "quiet"), "Output"),
        **dict.fromkeys(("out_dir", "in_place", "glob", "jobs", "fail_fast", "force"), "Batch"),
        **dict.fromkeys(("archive", "no_index"), "Archive"),
    }
}


class _Command(typer.core.TyperCommand):
    """A command whose usage line names a required argument plainly (``REF``, not typer's ``{REF}``),
    and whose options go in the panels :data:`HELP_PANELS` gives it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        panels = HELP_PANELS.get(self.name or "", {})
        for param in self.params:
            if param.name in panels:
                param.rich_help_panel = panels[param.name]  # type: ignore[attr-defined]
        # Help shows panels in the order their first option comes; parsing only minds the arguments'
        # order, which a stable sort keeps.
        order = list(dict.fromkeys(panels.values()))
        self.params.sort(key=lambda p: order.index(panels[p.name]) + 1 if p.name in panels else 0)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces: list[str] = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]


def _register_command_modules() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"ctxc.commands.{name}").register(app)
    for info in app.registered_commands:
        if info.cls in (None, typer.core.TyperCommand):
            info.cls = _Command


_register_command_modules()


def _click_command(args: list[str]) -> Any:
    """The click group to run ``args``, built with only the command they name when there is one.

    Typer turns every command's signature into click parameters before running any (evaluating each
    annotation): about 0.15 s for all of ctxc's commands, paid on every call. The group built here
    holds the root options and the one command invoked, so ``ctxc analyze ...`` pays for ``analyze``
    alone; help, bad names and option-only calls get the whole group.
    """
    import copy

    name = args[0] if args and not args[0].startswith("-") else None
    chosen = [
        c
        for c in app.registered_commands
        if c.callback is not None and (c.name or typer.main.get_command_name(c.callback.__name__)) == name
    ]
    if not chosen:
        return typer.main.get_command(app)
    only = copy.copy(app)
    only.registered_commands = chosen
    return typer.main.get_command(only)


def _caused_by(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc`` or an exception it was raised from or while handling is one of ``kinds``."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, kinds):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` stands for a Ctrl-C: CPython wraps a KeyboardInterrupt raised while a class is
    being made (in ``__set_name__``, as a lazily imported module defines its dataclasses) in a
    RuntimeError."""
    return _caused_by(exc, (KeyboardInterrupt,))


def _reader_gone() -> NoReturn:
    """The reader of stdout went away (``| head``): stop quietly, exit 0, and keep Python from
    complaining at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(int(ExitCode.OK))


def _usage_message(exc: Exception) -> str:
    """A bad command line as ctxc's one line, naming the help to read (not click's four lines)."""
    ctx = getattr(exc, "ctx", None)
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"ctxc: error: {str(message).rstrip('.')}{hint}"


def main(argv: list[str] | None = None) -> None:
    """Console entry point: the one place errors become messages and exit codes."""
    args = sys.argv[1:] if argv is None else argv
    debug = os.environ.get("CTXC_DEBUG", "") not in ("", "0")
    from ctxc.output import ReaderGone, flush_stdout, guard_standard_streams

    guard_standard_streams()
    try:
        rc = _click_command(args).main(args=args, prog_name="ctxc", standalone_mode=False)
        flush_stdout()  # inside the boundary: output that cannot be written is an error, not exit 0
    except CtxcError as exc:
        if debug:
            raise
        stderr_console().print(f"ctxc: error: {exc}", markup=False, soft_wrap=True)
        sys.exit(int(exc.exit_code))
    except typer.TyperException as exc:  # bad options and arguments (typer's click exceptions)
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare ``ctxc``: its message is the help
            exc.show()  # type: ignore[attr-defined]
        else:
            sys.stderr.write(visible(_usage_message(exc)) + "\n")
        sys.exit(int(ExitCode.USAGE))
    except (KeyboardInterrupt, typer.Abort):  # typer turns a Ctrl-C while parsing into Abort
        exit_interrupted()
    except (BrokenPipeError, ReaderGone):
        _reader_gone()
    except SystemExit as exc:
        # rich meets a closed pipe (help, tables printed by typer) with SystemExit(1): still a reader gone.
        if _caused_by(exc, (BrokenPipeError, ReaderGone)):
            _reader_gone()
        raise
    except Exception as exc:
        if _interrupted(exc):
            exit_interrupted()
        if debug:
            raise
        stderr_console().print(
            f"ctxc: internal error: {type(exc).__name__}: {exc} (rerun with CTXC_DEBUG=1 for the traceback)",
            markup=False,
            soft_wrap=True,
        )
        sys.exit(int(ExitCode.INTERNAL))
    if rc == ExitCode.INTERRUPTED:  # typer turns Ctrl-C inside a command into this return code
        exit_interrupted("ctxc: interrupted; no partial output was left")
    sys.exit(rc if isinstance(rc, int) else 0)
