"""The ``ctxc`` command line: a thin layer over the library with one error boundary.

Data goes to stdout, diagnostics to stderr. Every library error is a :class:`~ctxc.errors.CtxcError`
that :func:`main` prints as one line and turns into its exit code; ``CTXC_DEBUG=1`` shows tracebacks.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxc import __version__
from ctxc.cliutil import (
    InputFormatOpt,
    MaxLineOpt,
    OutFormat,
    SkipInvalidOpt,
    expand_paths,
    parse_thresholds,
    read_options,
    stderr_console,
    stdout_console,
)
from ctxc.errors import CtxcError, ExitCode, UsageError

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
        "command failed, 10 API key missing or rejected, 11 unknown model, 130 interrupted. "
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
    paths: Annotated[
        list[str], typer.Argument(help="Transcript files, directories (walked for *.jsonl), or - for stdin.")
    ],
    fmt: Annotated[
        OutFormat | None, typer.Option("--format", "-f", help="table (default on a terminal), json, or csv.")
    ] = None,
    tokenizer: Annotated[
        str, typer.Option(help="o200k_base, cl100k_base, approx, or anthropic (Claude's counts via the API).")
    ] = "o200k_base",
    model: Annotated[
        str | None, typer.Option(help="Model profile for the window (see `ctxc models`).")
    ] = None,
    window: Annotated[int | None, typer.Option(help="Context window in tokens (overrides --model).")] = None,
    thresholds: Annotated[
        str, typer.Option(help="Window shares where stages 2-5 begin.")
    ] = "0.6,0.7,0.8,0.9",
    top: Annotated[int, typer.Option(help="How many of the largest messages to list.")] = 10,
    messages: Annotated[
        bool, typer.Option("--messages", help="Table: list every message, not only the largest.")
    ] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the token count cache.")
    ] = False,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="With --tokenizer anthropic: count requests in flight at once.")
    ] = 4,
    forecast: Annotated[
        bool,
        typer.Option(
            "--forecast", help="Also dry-run each adaptive stage: the tokens it would remove at this window."
        ),
    ] = False,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Report token usage per message and per file, and the compaction stage each file is in."""
    from ctxc.analysis import Analysis, make_counter
    from ctxc.analysis import analyze as run_analyze

    options = read_options(skip_invalid, max_line_mb)
    files = expand_paths(paths)
    out_fmt = fmt or (OutFormat.table if sys.stdout.isatty() else OutFormat.json)
    counter = make_counter(tokenizer, use_cache=not no_cache, model=model, concurrency=concurrency)
    results: list[Analysis] = []
    failures: list[CtxcError] = []
    err = stderr_console()
    th = parse_thresholds(thresholds)
    with _progress(len(files), "analyzing") as advance:
        for f in files:
            try:
                src: Any = f
                second_pass = forecast or tokenizer == "anthropic"
                if second_pass:  # both read the transcript again: read the input once for all
                    name, data = _read_input(f)
                    src = _named_bytes(name, data)
                result = run_analyze(
                    src,
                    counter=counter,
                    window=window,
                    model=model,
                    thresholds=th,
                    input_format=input_format,
                    options=options,
                    top=top,
                )
                if forecast:
                    result = _with_forecast(result, data, input_format, options, counter, th)
                if tokenizer == "anthropic":
                    result = _with_o200k_ratio(result, data, input_format, options, counter)
                results.append(result)
            except CtxcError as exc:
                if len(files) == 1 or isinstance(exc, UsageError):
                    raise
                failures.append(exc)
                err.print(f"ctxc: error: {exc}", markup=False, soft_wrap=True)
            advance()
    _emit_analyses(results, out_fmt, messages)

    for a in results:
        if a.skipped_lines:
            err.print(
                f"ctxc: {a.path}: skipped {a.skipped_lines} invalid line(s)", markup=False, soft_wrap=True
            )
        if a.problems:
            p = a.problems[0]
            more = f" (and {len(a.problems) - 1} more)" if len(a.problems) > 1 else ""
            err.print(f"ctxc: warning: {a.path}:{p.line}: {p.message}{more}", markup=False, soft_wrap=True)
    if failures:
        raise typer.Exit(int(failures[0].exit_code))


def _emit_analyses(results: list[Any], out_fmt: OutFormat, show_messages: bool) -> None:
    from ctxc.output import dumps, envelope
    from ctxc.render import analyses_to_csv, analysis_to_json, render_analysis

    if out_fmt is OutFormat.json:
        doc = envelope("analyze", files=[analysis_to_json(a) for a in results])
        sys.stdout.buffer.write(dumps(doc))
    elif out_fmt is OutFormat.csv:
        sys.stdout.write(analyses_to_csv(results))
    else:
        console = stdout_console()
        for i, a in enumerate(results):
            if i:
                console.print()
            for part in render_analysis(a, show_messages=show_messages):
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
    path: Annotated[str, typer.Argument(help="A transcript file, or - for stdin.")],
    output: Annotated[str, typer.Option("--output", "-o", help="Output file, or - for stdout.")] = "-",
    to: Annotated[
        ConvertTarget,
        typer.Option(
            "--to", help="Target: same (the input's own format, byte for byte), chat-anthropic, chat-openai."
        ),
    ] = ConvertTarget.same,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Write a transcript in another format, keeping every tool call paired with its result."""
    from ctxc.convert import convert_transcript
    from ctxc.formats import dump, load
    from ctxc.output import atomic_output

    transcript = load(path, input_format=input_format, options=read_options(skip_invalid, max_line_mb))
    with atomic_output(output, inputs=(path,)) as handle:
        if to is ConvertTarget.same:
            dump(transcript, handle)
        else:
            handle.write(convert_transcript(transcript, to.value))


def _read_input(path: str) -> tuple[str, bytes]:
    """The whole input, read once: compaction archives exactly these bytes before writing anything."""
    from ctxc.reader import open_binary

    name, handle = open_binary(path)
    try:
        return name, handle.read()
    finally:
        if name != "-":
            handle.close()


def _named_bytes(name: str, data: bytes) -> Any:
    """A binary stream over ``data`` that reports ``name`` in errors, as the file would."""
    import io

    stream = io.BytesIO(data)
    stream.name = name
    return stream


def _load_bytes(name: str, data: bytes, input_format: str | None, options: Any) -> Any:
    from ctxc.formats import load

    return load(_named_bytes(name, data), input_format=input_format, options=options)


def _with_forecast(
    result: Any, data: bytes, input_format: str | None, options: Any, counter: Any, th: tuple[float, ...]
) -> Any:
    from dataclasses import replace

    from ctxc.compaction.forecast import forecast

    transcript = _load_bytes(result.path, data, input_format, options)
    return replace(
        result, forecast=forecast(transcript, window=result.window, counter=counter, thresholds=th)
    )


def _with_o200k_ratio(result: Any, data: bytes, input_format: str | None, options: Any, counter: Any) -> Any:
    """How far Claude's counts are from o200k's on this file (the offline estimate's error)."""
    from dataclasses import replace

    from ctxc.formats import open_stream
    from ctxc.model import Message
    from ctxc.tokens.anthropic_backend import compare_with_o200k

    stream = open_stream(_named_bytes(result.path, data), input_format=input_format, options=options)
    try:
        messages = (m for m in stream.items if isinstance(m, Message))
        return replace(result, versus_o200k=compare_with_o200k(messages, counter))
    finally:
        stream.close()


@contextlib.contextmanager
def _progress(total: int, what: str) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for work over several files, only when stderr is a terminal."""
    if total < 2 or not sys.stderr.isatty():
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=stderr_console(),
        transient=True,
    ) as bar:
        task = bar.add_task(what, total=total)
        yield lambda: bar.advance(task)


def _parse_sets(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set takes strategy.option=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc compact session.jsonl -o small.jsonl      # adaptive, to below 60% of the window\n\n"
        "  cat t.jsonl | ctxc compact - > small.jsonl     # in a pipeline\n\n"
        "  ctxc compact t.jsonl --strategy fifo --target-tokens 50000 -o small.jsonl\n\n"
        "  ctxc compact t.jsonl --target-ratio 0.3 --pin 'DO NOT' --pin 0-2 --report r.json > s.jsonl\n\n"
        "  ctxc compact t.jsonl --strategy mask --set mask.keep_last_results=5 --dry-run\n\n"
        "The original is stored in the archive (--archive, $CTXC_ARCHIVE, default ./.ctxc/archive) "
        "before any "
        "output is written; `ctxc restore` gives it back byte for byte."
    )
)
def compact(
    path: Annotated[str, typer.Argument(help="A transcript file, or - for stdin.")],
    output: Annotated[
        str, typer.Option("--output", "-o", help="Output file, or - for stdout (the default).")
    ] = "-",
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="See `ctxc strategies`.")] = "adaptive",
    target_tokens: Annotated[
        int | None, typer.Option("--target-tokens", help="Token target for each conversation.")
    ] = None,
    target_ratio: Annotated[
        float | None, typer.Option("--target-ratio", help="Token target as a share of the window.")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model profile for the window (see `ctxc models`).")
    ] = None,
    window: Annotated[int | None, typer.Option(help="Context window in tokens (overrides --model).")] = None,
    keep_last: Annotated[
        int, typer.Option("--keep-last", min=1, help="Messages at the end always kept verbatim.")
    ] = 4,
    pin: Annotated[
        list[str] | None,
        typer.Option("--pin", help="Keep messages: an index (12), a range (3-7) or a regex. Repeatable."),
    ] = None,
    archive: Annotated[str | None, typer.Option("--archive", help="Archive directory.")] = None,
    summarizer: Annotated[str, typer.Option(help="Summarizer for summarizing strategies.")] = "extractive",
    tokenizer: Annotated[
        str, typer.Option(help="o200k_base, cl100k_base, approx, or anthropic (Claude's counts via the API).")
    ] = "o200k_base",
    thresholds: Annotated[
        str, typer.Option(help="Window shares where adaptive stages 2-5 begin.")
    ] = "0.6,0.7,0.8,0.9",
    settings: Annotated[
        list[str] | None,
        typer.Option("--set", help="Strategy option, e.g. mask.keep_last_results=5. Repeatable."),
    ] = None,
    allow_over: Annotated[
        bool, typer.Option("--allow-over", help="Write the output even if it stays over the target.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan and savings; write nothing, archive nothing.")
    ] = False,
    report: Annotated[str | None, typer.Option("--report", help="Write a JSON report to this file.")] = None,
    instructions: Annotated[
        str | None, typer.Option(help="Focus for summaries, like /compact [instructions].")
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
    from ctxc.archive import Archive
    from ctxc.compaction.run import CompactOptions, compact_transcript
    from ctxc.output import atomic_output, dumps
    from ctxc.summarize import SummarizerOptions

    th = parse_thresholds(thresholds)
    from ctxc.analysis import check_thresholds

    sets = _parse_sets(settings or [])
    if strategy == "adaptive":  # --thresholds is shorthand for the adaptive stage settings
        for key, value in zip(("stage2", "stage3", "stage4", "stage5"), check_thresholds(th), strict=True):
            sets.setdefault(f"adaptive.{key}", str(value))
    options = CompactOptions(
        strategy=strategy,
        target_tokens=target_tokens,
        target_ratio=target_ratio,
        model=model,
        window=window,
        keep_last=keep_last,
        pins=tuple(pin or ()),
        summarizer=summarizer,
        tokenizer=tokenizer,
        thresholds=check_thresholds(th),
        allow_over=allow_over,
        settings=sets,
        instructions=instructions,
        use_cache=not no_cache,
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
    name, data = _read_input(path)
    transcript = _load_bytes(name, data, input_format, read_options(skip_invalid, max_line_mb))
    store = None if dry_run else Archive.open(archive)
    result = compact_transcript(transcript, options, archive=store, original_bytes=data)
    doc = _compaction_report(result, options, name, output)
    if dry_run:
        _emit_plan(doc)
        return
    out_bytes = result.transcript.to_bytes()
    with atomic_output(output, inputs=(name,)) as handle:
        handle.write(out_bytes)
    assert store is not None
    from ctxc.archive import sha256_hex

    entry = store.record_run({**doc["run"], "output_sha256": sha256_hex(out_bytes)})
    if report:
        with atomic_output(report, inputs=(name,)) as handle:
            handle.write(dumps({**doc, "run": entry}))
    if not quiet:
        _summary_line(doc)


def _compaction_report(result: Any, options: Any, name: str, output: str) -> dict[str, Any]:
    from dataclasses import asdict

    from ctxc.output import envelope

    before, after = result.tokens_before, result.tokens_after
    return envelope(
        "compact",
        run={
            "input_path": name,
            "output_path": output,
            "archive_id": result.archive_id,
            "input_sha256": result.input_sha256,
            "format": result.transcript.format,
            "strategy": options.strategy,
            "options": {
                "target_tokens": options.target_tokens,
                "target_ratio": options.target_ratio,
                "model": options.model,
                "window": result.window,
                "keep_last": options.keep_last,
                "pins": list(options.pins),
                "summarizer": options.summarizer,
                "tokenizer": options.tokenizer,
                "settings": dict(options.settings),
            },
            "tokens_before": before,
            "tokens_after": after,
            "savings": result.savings_by_strategy(),
            "summarizer": {"name": options.summarizer, **dict(result.summarizer_usage or {})},
        },
        conversations=[
            {
                "conversation": c.conversation,
                "tokens_before": c.tokens_before,
                "tokens_after": c.tokens_after,
                "target": c.target,
                "pinned_tokens": c.pinned_tokens,
                "actions": [asdict(a) for a in c.actions],
                "repaired": [p.message for p in c.repaired],
            }
            for c in result.conversations
        ],
    )


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
    pct = (1 - after / before) * 100 if before else 0.0
    stages = ", ".join(f"{k} -{v:,}" for k, v in run["savings"].items() if v) or "nothing to do"
    stderr_console().print(
        f"ctxc: {run['input_path']}: {before:,} → {after:,} tokens (-{pct:.1f}%) with {run['strategy']} "
        f"[{stages}]; original in archive {run['archive_id'][:12]}{_summarizer_spend(run)}",
        markup=False,
        soft_wrap=True,
    )


def _emit_plan(doc: dict[str, Any]) -> None:
    from ctxc.output import dumps

    if not sys.stdout.isatty():
        sys.stdout.buffer.write(dumps({**doc, "schema": doc["schema"].replace("compact", "compact-plan")}))
        return
    from rich.table import Table

    console = stdout_console()
    run = doc["run"]
    console.print(
        f"dry run: {run['input_path']} with {run['strategy']}: "
        f"{run['tokens_before']:,} → {run['tokens_after']:,} tokens (nothing written)"
        f"{_summarizer_spend(run)}",
        markup=False,
    )
    table = Table("conv", "strategy", "action", "messages", "tokens before", "after", "saved", "note")
    for conv in doc["conversations"]:
        for a in conv["actions"]:
            table.add_row(
                str(conv["conversation"]),
                a["strategy"],
                a["kind"],
                f"{a['first']}-{a['last']}",
                f"{a['tokens_before']:,}",
                f"{a['tokens_after']:,}",
                f"{a['tokens_before'] - a['tokens_after']:,}",
                a["note"],
            )
    console.print(table)


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

    from rich.markup import escape
    from rich.table import Table

    from ctxc.compaction import strategies as registry

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("strategy", style="bold", no_wrap=True)
    table.add_column("description")
    for name, cls in registry().items():
        table.add_row(name, escape(cls.description))
        if show_options:
            for f in dataclasses.fields(cls.Config):
                lo, hi = f.metadata.get("min"), f.metadata.get("max")
                rng = f" [{lo}..{hi}]" if lo is not None or hi is not None else ""
                help_text = f.metadata.get("help", "")
                table.add_row("", escape(f"  --set {name}.{f.name}={f.default!r}{rng}  {help_text}"))
    stdout_console().print(table)


@app.command(
    epilog=(
        "[bold]Examples[/bold]\n\n"
        "  ctxc restore 3f2a9c1b4d5e -o original.jsonl\n\n"
        "  ctxc restore small.jsonl > original.jsonl     # find the original of a compacted file"
    )
)
def restore(
    ref: Annotated[str, typer.Argument(help="An archive id (12+ hex characters) or a compacted file.")],
    output: Annotated[str, typer.Option("--output", "-o", help="Output file, or - for stdout.")] = "-",
    archive: Annotated[str | None, typer.Option("--archive", help="Archive directory.")] = None,
) -> None:
    """Write an archived original back, byte for byte."""
    from ctxc.archive import Archive
    from ctxc.errors import ArchiveError
    from ctxc.output import atomic_output

    store = Archive.open(archive)
    inputs: tuple[str, ...] = ()
    if Path(ref).is_file():
        found = store.find_original(Path(ref).read_bytes())
        if found is None:
            raise ArchiveError(f"no archived original found for this file in {store.root}", path=ref)
        ident = found
        inputs = (ref,)
    else:
        ident = store.resolve(ref)
    data = store.read(ident)
    with atomic_output(output, inputs=inputs) as handle:
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
    paths: Annotated[list[str], typer.Argument(help="Transcript files, directories, or - for stdin.")],
    loose: Annotated[
        bool, typer.Option("--loose", help="Accept results that answer an earlier, not adjacent, call.")
    ] = False,
    fmt: Annotated[OutFormat | None, typer.Option("--format", "-f", help="table or json.")] = None,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Report every tool pairing and role problem with its line; exit 5 if there is any."""
    from ctxc.formats import load
    from ctxc.output import dumps, envelope
    from ctxc.validate import all_problems

    options = read_options(skip_invalid, max_line_mb)
    files = expand_paths(paths)
    report: list[dict[str, Any]] = []
    total = 0
    for f in files:
        t = load(f, input_format=input_format, options=options)
        problems = all_problems(t.messages, strict=not loose)
        total += len(problems)
        report.append(
            {
                "path": t.source,
                "format": t.format,
                "messages": len(t.messages),
                "problems": [
                    {
                        "code": p.code,
                        "line": p.line,
                        "index": p.index,
                        "conversation": p.conversation,
                        "tool_id": p.tool_id,
                        "message": p.message,
                    }
                    for p in problems
                ],
            }
        )
    if fmt is OutFormat.json:
        sys.stdout.buffer.write(dumps(envelope("validate", files=report, problems=total)))
    else:
        console = stdout_console()
        for r in report:
            if not r["problems"]:
                console.print(f"{r['path']}: ok ({r['format']}, {r['messages']} messages)", markup=False)
            for p in r["problems"]:
                console.print(
                    f"{r['path']}:{p['line']}: {p['code']}: {p['message']}", markup=False, soft_wrap=True
                )
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
    path: Annotated[str, typer.Argument(help="A transcript file, or - for stdin.")],
    output: Annotated[str, typer.Option("--output", "-o", help="Output file, or - for stdout.")] = "-",
    archive: Annotated[str | None, typer.Option("--archive", help="Archive directory.")] = None,
    input_format: InputFormatOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    max_line_mb: MaxLineOpt = 32.0,
) -> None:
    """Fix pairing problems: drop orphan results, answer unanswered calls with "no result recorded"."""
    from ctxc.archive import Archive, sha256_hex
    from ctxc.compaction.write import write_transcript
    from ctxc.formats import get_adapter
    from ctxc.output import atomic_output
    from ctxc.repair import repair_messages

    name, data = _read_input(path)
    transcript = _load_bytes(name, data, input_format, read_options(skip_invalid, max_line_mb))
    store = Archive.open(archive)
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
    with atomic_output(output, inputs=(name,)) as handle:
        handle.write(out_bytes)
    store.record_run(
        {
            "command": "repair",
            "input_path": name,
            "output_path": output,
            "archive_id": archive_id,
            "input_sha256": archive_id,
            "output_sha256": sha256_hex(out_bytes),
            "format": transcript.format,
            "fixed": fixed_total,
        }
    )
    stderr_console().print(
        f"ctxc: {name}: fixed {fixed_total} problem(s); original in archive {archive_id[:12]}",
        markup=False,
        soft_wrap=True,
    )


@app.command(epilog="[bold]Example[/bold]\n\n  ctxc formats")
def formats() -> None:
    """List the transcript formats ctxc reads and writes."""
    from ctxc.formats import adapters

    console = stdout_console()
    for name, adapter in sorted(adapters().items()):
        console.print(f"[bold]{name:12}[/bold] {adapter.description}")


@app.command(epilog="[bold]Examples[/bold]\n\n  ctxc models\n\n  ctxc models --format json")
def models(
    fmt: Annotated[OutFormat | None, typer.Option("--format", "-f", help="table or json.")] = None,
) -> None:
    """List the model profiles (context window, default tokenizer) that --model accepts."""
    from ctxc.output import dumps, envelope
    from ctxc.profiles import PROFILES

    if fmt is OutFormat.json or (fmt is None and not sys.stdout.isatty()):
        rows = [
            {"name": p.name, "provider": p.provider, "window": p.window, "tokenizer": p.tokenizer}
            for p in PROFILES
        ]
        sys.stdout.buffer.write(dumps(envelope("models", models=rows)))
        return
    from rich.table import Table

    table = Table("model", "provider", "window", "tokenizer")
    for p in PROFILES:
        table.add_row(p.name, p.provider, f"{p.window:,}", p.tokenizer)
    stdout_console().print(table)


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
COMMAND_MODULES: tuple[str, ...] = ()


def _register_command_modules() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"ctxc.commands.{name}").register(app)


_register_command_modules()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: the one place errors become messages and exit codes."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["--version"], ["-V"]):  # answered before importing the rest: scripts call this often
        sys.stdout.write(f"ctxc {__version__}\n")
        return
    debug = os.environ.get("CTXC_DEBUG", "") not in ("", "0")
    command = typer.main.get_command(app)
    try:
        rc = command.main(args=args, prog_name="ctxc", standalone_mode=False)
    except CtxcError as exc:
        if debug:
            raise
        stderr_console().print(f"ctxc: error: {exc}", markup=False, soft_wrap=True)
        sys.exit(int(exc.exit_code))
    except typer.Abort:
        sys.stderr.write("ctxc: interrupted\n")
        sys.exit(int(ExitCode.INTERRUPTED))
    except typer.TyperException as exc:  # bad options and arguments (typer's click exceptions)
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            sys.stderr.write(f"ctxc: error: {exc}\n")
        sys.exit(int(ExitCode.USAGE))
    except KeyboardInterrupt:
        sys.stderr.write("ctxc: interrupted\n")
        sys.exit(int(ExitCode.INTERRUPTED))
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly and keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(int(ExitCode.OK))
    except Exception as exc:
        if debug:
            raise
        stderr_console().print(
            f"ctxc: internal error: {type(exc).__name__}: {exc} (rerun with CTXC_DEBUG=1 for the traceback)",
            markup=False,
            soft_wrap=True,
        )
        sys.exit(int(ExitCode.INTERNAL))
    if rc == ExitCode.INTERRUPTED:  # typer turns Ctrl-C inside a command into this return code
        sys.stderr.write("ctxc: interrupted; no partial output was left\n")
    sys.exit(rc if isinstance(rc, int) else 0)
