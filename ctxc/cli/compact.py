"""``ctxc compact``: a compacted transcript, the original archived first (library: :mod:`ctxc.jobs`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import typer

from ctxc.archive_store import archive_root
from ctxc.batch import collect_inputs
from ctxc.cli import options as opt
from ctxc.errors import UsageError
from ctxc.output import check_output, dumps, same_file, write_stdout
from ctxc.stages import DEFAULT_THRESHOLDS_TEXT, check_thresholds
from ctxc.terminal import one_line

EPILOG = opt.examples(
    "ctxc compact session.jsonl -o small.jsonl      # adaptive, to below 60% of the window",
    "cat t.jsonl | ctxc compact - > small.jsonl     # in a pipeline",
    "ctxc compact t.jsonl --strategy fifo --target-tokens 50000 -o small.jsonl",
    "ctxc compact t.jsonl --target-ratio 0.3 --pin 'DO NOT' --pin 0-2 --report r.json > s.jsonl",
    "ctxc compact t.jsonl --strategy mask --set mask.keep_last_results=5 --dry-run",
    "ctxc compact logs/ --out-dir compacted/ --jobs 2 --report report.json   # a batch",
    "ctxc compact t.jsonl --reminders rules.toml -o small.jsonl   # restate instructions after it",
    note="The original is stored in the archive (--archive, $CTXC_ARCHIVE, default "
    "~/.local/share/ctxc/archive) before any output is written; `ctxc restore` gives it back byte for "
    "byte.",
)

# compact's own options that take more than a line (the shared ones are in ctxc.cli.options).
ForkOpt = Annotated[
    bool,
    opt.flag(
        "--fork",
        "A Claude Code or Codex session: write the result as a new session beside it, and print "
        "the command that resumes it.",
    ),
]
NoIndexOpt = Annotated[
    bool,
    opt.flag(
        "--no-index", "Do not index the original for `ctxc search` now (bulk runs); the next search does it."
    ),
]
ReportFormatOpt = Annotated[
    opt.TableOrJson | None,
    typer.Option(
        "--format",
        "-f",
        help="With --out-dir, --in-place or --dry-run: the report on stdout, table or json (by default a "
        "batch prints only its totals, on stderr; a dry run of one file, a table on a terminal, else json).",
    ),
]
SummaryModelOpt = Annotated[
    str | None,
    typer.Option(
        envvar="CTXC_SUMMARY_MODEL",
        help="Model for --summarizer anthropic (default: a current fast Claude model).",
    ),
]


@opt.app.command(epilog=EPILOG)
def compact(
    paths: opt.PathsArg = None,
    input_format: opt.InputFormatOpt = None,
    skip_invalid: opt.SkipInvalidOpt = False,
    max_line_mb: opt.MaxLineOpt = 32.0,
    target_tokens: Annotated[int | None, typer.Option(help="Token target for each conversation.")] = None,
    target_ratio: Annotated[float | None, typer.Option(help="Token target as a share of the window.")] = None,
    model: opt.ModelOpt = None,
    window: opt.WindowOpt = None,
    keep_last: opt.KeepLastOpt = None,
    pin: Annotated[
        list[str] | None,
        typer.Option(help="Keep messages: an index (12), a range (3-7) or a regex. Repeatable."),
    ] = None,
    tokenizer: Annotated[
        str, typer.Option(help="o200k_base, cl100k_base, approx, or anthropic (Claude's counts via the API).")
    ] = "o200k_base",
    thresholds: Annotated[
        str, typer.Option(help="Window shares where adaptive stages 2-5 begin.")
    ] = DEFAULT_THRESHOLDS_TEXT,
    allow_over: Annotated[
        bool,
        opt.flag(
            "--allow-over",
            "Write the output even if it stays over the target (adaptive without one: the window).",
        ),
    ] = False,
    no_cache: Annotated[
        bool, opt.flag("--no-cache", "Do not read or write the token count and summary caches.")
    ] = False,
    strategy: opt.StrategyOpt = "adaptive",
    summarizer: Annotated[str, typer.Option(help="Summarizer for summarizing strategies.")] = "extractive",
    settings: opt.SetOpt = None,
    instructions: Annotated[
        str | None, typer.Option(help="Focus for summaries, like /compact \\[instructions].")
    ] = None,
    reminders: Annotated[
        str | None, typer.Option(help="Reminder rules (TOML): append the reminders due after compaction.")
    ] = None,
    summary_model: SummaryModelOpt = None,
    summary_command: Annotated[
        str | None, typer.Option(help="For --summarizer command: reads the prompt on stdin.")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Summarizer calls in flight at once.")] = 4,
    max_retries: Annotated[int, typer.Option(min=0, max=20, help="Retries of a failed summarizer call.")] = 2,
    segment_tokens: Annotated[
        int, typer.Option(min=1000, help="Summarize longer spans as segments, concurrently, then merge.")
    ] = 40_000,
    timeout: Annotated[float, opt.seconds("Seconds one summarizer call may take.")] = 120.0,
    output: opt.TranscriptOutputOpt = None,
    fork: ForkOpt = False,
    fmt: ReportFormatOpt = None,
    dry_run: Annotated[
        bool, opt.flag("--dry-run", "Print the plan and savings; write nothing, archive nothing.")
    ] = False,
    list_actions: Annotated[
        bool,
        opt.flag("--messages", "With --dry-run on a terminal: list every action, not only each stage's."),
    ] = False,
    report: Annotated[str | None, typer.Option(help="Write a JSON report to this file.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary on stderr.")] = False,
    out_dir: opt.OutDirOpt = None,
    in_place: Annotated[
        bool, opt.flag("--in-place", "Replace each input, after its original is archived.")
    ] = False,
    glob: opt.GlobOpt = None,
    jobs: opt.JobsOpt = None,
    fail_fast: opt.FailFastOpt = False,
    force: Annotated[bool, opt.flag("--force", "Redo files the run journal says are already done.")] = False,
    no_index: NoIndexOpt = False,
    archive: opt.ArchiveOpt = None,
) -> None:
    """Write a compacted transcript in the format it was read, archiving the original first."""
    flags = SimpleNamespace(**locals())  # read by name in the helpers below
    _run(_compact_options(flags), flags)


def _compact_options(flags: SimpleNamespace) -> Any:
    """The compaction's options from compact's flags (the strategy's settings and the rules checked now)."""
    from ctxc.compaction.run import DEFAULT_KEEP_LAST, CompactOptions
    from ctxc.reminders import ReminderRules
    from ctxc.summarize import SummarizerOptions

    th = opt.parse_thresholds(flags.thresholds)
    sets = opt.parse_sets(flags.settings or [])
    if flags.fmt is not None and not (flags.dry_run or flags.out_dir is not None or flags.in_place):
        # One file's output is the transcript itself: there is no report to format.
        raise UsageError("--format is for a report: give it with --out-dir, --in-place or --dry-run")
    # The flags named as the options they set, passed on as they are.
    same = "strategy target_tokens target_ratio model window summarizer tokenizer allow_over instructions"
    calls = "concurrency max_retries timeout dry_run segment_tokens"
    return CompactOptions(
        **opt.pick(vars(flags), same),
        keep_last=flags.keep_last or DEFAULT_KEEP_LAST,
        strict_keep_last=flags.keep_last is not None,
        pins=tuple(flags.pin or ()),
        thresholds=check_thresholds(th),
        settings=sets,
        use_cache=not flags.no_cache,
        reminders=None if flags.reminders is None else ReminderRules.load(flags.reminders),
        summarizer_options=SummarizerOptions(
            **opt.pick(vars(flags), calls),
            model=flags.summary_model,
            use_cache=not flags.no_cache,
            command=flags.summary_command,
        ),
    )


def _run(options: Any, flags: SimpleNamespace) -> None:
    """One file, or a batch (``--out-dir``, ``--in-place``, several inputs), compacted with ``options``."""
    from ctxc.compaction.files import CompactJob, compact_file

    # A walk never takes the batch's own outputs or archive for inputs (an --out-dir inside the tree).
    inputs = collect_inputs(
        flags.paths, glob=flags.glob, exclude=[d for d in (flags.out_dir, archive_root(flags.archive)) if d]
    )
    batch = opt.batch_mode(flags.paths, inputs, flags.output or "-", flags.out_dir, flags.in_place)
    if flags.fork and (batch or flags.output is not None):
        raise UsageError(
            "--fork writes a new session beside the original: give no -o, --out-dir or --in-place"
        )
    output = flags.output if batch or flags.dry_run or flags.fork else opt.transcript_output(flags.output)
    outputs = [output or "-"]
    if batch:
        outputs = [i.path if flags.in_place else str(Path(flags.out_dir or ".") / i.rel) for i in inputs]
    ropts = opt.read_options(flags.skip_invalid, flags.max_line_mb)
    stdout_taken = flags.dry_run or flags.fork or flags.fmt is not None or "-" in outputs
    if flags.report == "-" and stdout_taken:  # two documents in one stream would parse as neither
        raise UsageError("--report - would share stdout with the transcript or the table; give it a file")
    if flags.report is not None:  # refused before any work if it would replace an output or an input
        for out in [] if flags.dry_run else outputs:
            if out != "-" and same_file(flags.report, out):
                raise UsageError(
                    f"--report {flags.report} is also the output {out}; give the report another name"
                )
        check_output(flags.report, inputs=tuple(i.path for i in inputs))
    jobs = [
        CompactJob(
            i.path,
            out,
            options,
            flags.archive,
            flags.input_format,
            ropts,
            **opt.pick(vars(flags), "dry_run in_place fork"),
            make_dirs=batch and not flags.in_place,
            index=not flags.no_index,
            report=None if batch else flags.report,
        )
        for i, out in zip(inputs, outputs, strict=True)
    ]
    if batch:
        raise typer.Exit(_run_batch(jobs, flags))
    doc = compact_file(jobs[0])
    if flags.dry_run:
        _emit_plan(doc, opt.table_on_terminal(flags.fmt), every_action=flags.list_actions)
    elif not flags.quiet:
        _summary_line(doc)
    if flags.fork and not flags.dry_run:  # the one thing the user needs next: data, on stdout
        write_stdout(f"{doc['run']['resume']}\n".encode())


def _run_batch(jobs: list[Any], flags: SimpleNamespace) -> int:
    """Compact many files, resuming from the journal (:func:`ctxc.compact_batch.compact_batch`), with
    progress and errors on stderr and the result as ``--format`` asks. Returns the exit code."""
    from ctxc.cli.batch import run_files
    from ctxc.compact_batch import compact_batch

    run = partial(run_files, what="compacting", jobs=flags.jobs, fail_fast=flags.fail_fast, quiet=flags.quiet)
    doc = compact_batch(
        jobs,
        archive=flags.archive,
        force=flags.force,
        fail_fast=flags.fail_fast,
        report=flags.report,
        run_files=run,
    )
    if flags.fmt == "json":
        write_stdout(dumps(doc))
    elif flags.fmt == "table":
        _print_batch(doc["files"])
    if not flags.quiet:
        _print_totals(doc["totals"])
    return int(doc["exit_code"])


def _print_batch(rows: Sequence[dict[str, Any]]) -> None:
    def tokens(value: int | None) -> str:
        return "" if value is None else f"{value:,}"

    cells = [
        (
            one_line(r["path"]),
            r["status"],
            r.get("format") or "",
            tokens(r.get("tokens_before")),
            tokens(r.get("tokens_after")),
            (r.get("archive_id") or "")[:12],
        )
        for r in rows
    ]
    columns = ("file", "status", "format", "before", "after", "archive")
    opt.print_rows(columns, cells, optional=("format", "archive"), keys=1, fold=("file",))


_TOTALS = {
    "unchanged": "unchanged",
    "planned": "planned",
    "skipped": "already done",
    "failed": "failed",
    "not_run": "not run (--fail-fast)",
}


def _print_totals(t: dict[str, Any]) -> None:
    counted = (f"{t[key]} {label}" for key, label in _TOTALS.items() if t[key])
    parts = [f"{t['ok'] - t['unchanged']} compacted", *counted]
    files = f"{t['files']} file{'' if t['files'] == 1 else 's'}"
    # Only files written, planned or already done have tokens to tell (a failed one has none).
    told = t["ok"] or t["planned"] or t["skipped"]
    tokens = f"; {t['tokens_before']:,} → {t['tokens_after']:,} tokens" if told else ""
    opt.note(f"ctxc: {files}: {', '.join(parts)}{tokens}")


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
    stages = ", ".join(f"{k} {-v:+,}" for k, v in run["savings"].items() if v) or "nothing to do"
    worth, saving = run.get("saving_per_turn"), ""
    if worth:  # '; saves $0.50 a turn at claude-opus-4-5 input prices ($0.05 if cached)'
        from ctxc.render import dollars

        usd, cached = dollars(worth["usd_input"]), dollars(worth["usd_cache_read"])
        saving = f"; saves {usd} a turn at {worth['model']} input prices ({cached} if cached)"
    opt.note(
        f"ctxc: {run['input_path']}: {before:,} → {after:,} tokens ({pct:+.1f}%) with {run['strategy']} "
        f"[{stages}]; original in archive {run['archive_id'][:12]}{_summarizer_spend(run)}{saving}"
    )


def _print_stage_totals(actions: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """Per stage: its actions, the messages they touch and their tokens before and after, each message
    once (mask may shrink a result, then mask what is left of it)."""
    spans: dict[str, dict[tuple[int, int, int], list[int]]] = defaultdict(dict)
    touched: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for conv, a in actions:
        tokens = spans[a["strategy"]].setdefault((conv, a["first"], a["last"]), [a["tokens_before"], 0])
        tokens[1] = a["tokens_after"]
        touched[a["strategy"]].update((conv, i) for i in range(a["first"], a["last"] + 1))
    counts = Counter(a["strategy"] for _, a in actions)
    lines = []
    for stage, by_span in spans.items():
        before, after = (sum(t[k] for t in by_span.values()) for k in (0, 1))
        n, messages = str(counts[stage]), str(len(touched[stage]))
        lines.append((stage, n, messages, f"{before:,}", f"{after:,}", f"{after - before:+,}"))
    if lines:
        totals = ("stage", "actions", "messages", "before", "after", "change")
        opt.print_rows(totals, lines, right=totals[1:], keys=1)


def _emit_plan(doc: dict[str, Any], fmt: str, *, every_action: bool = False) -> None:
    if fmt == "json":
        write_stdout(dumps({**doc, "schema": doc["schema"].replace("compact", "compact-plan")}))
        return
    run = doc["run"]
    opt.stdout_console().print(
        f"dry run: {one_line(run['input_path'])} with {run['strategy']}: "
        f"{run['tokens_before']:,} → {run['tokens_after']:,} tokens (nothing written)"
        f"{_summarizer_spend(run)}",
        markup=False,
    )
    actions = [(conv["conversation"], a) for conv in doc["conversations"] for a in conv["actions"]]
    # First what each stage does in all (a few lines), then, if asked, every action (hundreds).
    _print_stage_totals(actions)
    if actions and not every_action:
        opt.stdout_console().print(
            f"{len(actions)} action(s); list each with --messages", markup=False, style="dim"
        )
    if not every_action:
        return
    columns = ("conv", "strategy", "action", "messages", "before", "after", "change", "note")
    rows = [
        (
            str(conv),
            a["strategy"],
            a["kind"],
            f"{a['first']}-{a['last']}",
            f"{a['tokens_before']:,}",
            f"{a['tokens_after']:,}",
            f"{a['tokens_after'] - a['tokens_before']:+,}",
            a["note"],
        )
        for conv, a in actions
    ]
    right = ("messages", "before", "after", "change")
    opt.print_rows(columns, rows, right=right, optional=("conv", "action"), keys=2, fold=("note",))
