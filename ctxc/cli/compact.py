"""``ctxc compact``: a compacted transcript, the original archived first (library: :mod:`ctxc.jobs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ctxc.cli.options import (
    ArchiveOpt,
    Commands,
    FailFastOpt,
    GlobOpt,
    InputFormatOpt,
    JobsOpt,
    KeepLastOpt,
    MaxLineOpt,
    ModelOpt,
    PathsArg,
    SetOpt,
    SkipInvalidOpt,
    TableOrJson,
    TranscriptOutputOpt,
    WindowOpt,
    batch_mode,
    cells,
    parse_sets,
    parse_thresholds,
    read_options,
    stdout_console,
    table_on_terminal,
    transcript_output,
)
from ctxc.errors import UsageError
from ctxc.stages import DEFAULT_THRESHOLDS_TEXT
from ctxc.terminal import stderr_console

commands = Commands()
register = commands.register


def _load_reminders(path: str | None) -> Any:
    """``--reminders FILE``: the rules, read (and checked) before any work."""
    if path is None:
        return None
    from ctxc.reminders import ReminderRules

    return ReminderRules.load(path)


@commands.command(
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
    fork: Annotated[
        bool,
        typer.Option(
            "--fork",
            help="A Claude Code or Codex session: write the result as a new session beside it, and print "
            "the command that resumes it.",
        ),
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
    batch = batch_mode(paths, inputs, output or "-", out_dir, in_place)
    if fork and (batch or output is not None):
        raise UsageError(
            "--fork writes a new session beside the original: give no -o, --out-dir or --in-place"
        )
    if not (batch or dry_run or fork):
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
            fork=fork,
        )
        doc = compact_file(job)
        if dry_run:
            _emit_plan(doc, table_on_terminal(fmt), every_action=list_actions)
            return
        if not quiet:
            _summary_line(doc)
        if fork:  # the one thing the user needs next: data, on stdout
            from ctxc.output import write_stdout

            write_stdout(f"{doc['run']['resume']}\n".encode())
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
    from ctxc.cli.batch import run_compact_batch

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
