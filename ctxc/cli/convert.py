"""``ctxc convert``, ``validate`` and ``repair``: a transcript in another format, checked, or fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ctxc.batch import batch_exit_code, check_distinct_outputs, collect_inputs, expand_paths
from ctxc.cli import options as opt
from ctxc.errors import ExitCode
from ctxc.terminal import one_line

CONVERT_EPILOG = opt.examples(
    "ctxc convert session.jsonl --to chat-anthropic -o messages.jsonl",
    "cat rollout.jsonl | ctxc convert - --to chat-openai > openai.jsonl",
    "ctxc convert session.jsonl -o copy.jsonl      # own format: identical bytes",
)


@opt.app.command(epilog=CONVERT_EPILOG)
def convert(
    paths: opt.PathsArg = None,
    output: opt.TranscriptOutputOpt = None,
    to: Annotated[
        Literal["same", "chat-anthropic", "chat-openai"],
        typer.Option(
            help="Target: same (the input's own format, byte for byte), chat-anthropic, chat-openai."
        ),
    ] = "same",
    out_dir: opt.OutDirOpt = None,
    glob: opt.GlobOpt = None,
    jobs: opt.JobsOpt = None,
    fail_fast: opt.FailFastOpt = False,
    quiet: opt.QuietOpt = False,
    input_format: opt.InputFormatOpt = None,
    skip_invalid: opt.SkipInvalidOpt = False,
    max_line_mb: opt.MaxLineOpt = 32.0,
) -> None:
    """Write a transcript in another format, keeping every tool call paired with its result."""
    from ctxc.cli.batch import run_files
    from ctxc.jobs import ConvertJob, convert_file

    inputs = collect_inputs(paths, glob=glob, exclude=[out_dir] if out_dir else [])
    ropts = opt.read_options(skip_invalid, max_line_mb)
    opt.batch_mode(paths, inputs, output or "-", out_dir)
    if out_dir is None:
        convert_file(ConvertJob(inputs[0].path, opt.transcript_output(output), to, input_format, ropts))
        return
    jobs_list = [
        ConvertJob(i.path, str(Path(out_dir) / i.rel), to, input_format, ropts, make_dirs=True)
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
    raise typer.Exit(batch_exit_code(outcomes, single=fail_fast or len(outcomes) == 1))


VALIDATE_EPILOG = opt.examples(
    "ctxc validate small.jsonl",
    "ctxc validate logs/ --format json",
    "ctxc validate session.jsonl --loose     # only results without any earlier call",
)


@opt.app.command(epilog=VALIDATE_EPILOG)
def validate(
    paths: opt.PathsArg = None,
    loose: Annotated[
        bool, opt.flag("--loose", "Accept results that answer an earlier, not adjacent, call.")
    ] = False,
    fmt: Annotated[
        opt.TableOrJson | None,
        typer.Option("--format", "-f", help="table (one line per file or problem) or json."),
    ] = None,
    glob: opt.GlobOpt = None,
    jobs: opt.JobsOpt = None,
    fail_fast: opt.FailFastOpt = False,
    quiet: opt.QuietOpt = False,
    input_format: opt.InputFormatOpt = None,
    skip_invalid: opt.SkipInvalidOpt = False,
    max_line_mb: opt.MaxLineOpt = 32.0,
) -> None:
    """Report every tool pairing and role problem with its line; exit 5 if there is any."""
    from ctxc.cli.batch import run_one_or_many
    from ctxc.jobs import ValidateJob, validate_file

    options = opt.read_options(skip_invalid, max_line_mb)
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
    rc = failed or (int(ExitCode.INVALID) if total else 0)
    if fmt == "json":
        opt.print_json("validate", files=report, problems=total, errors=errors, exit_code=rc)
    else:
        console = opt.stdout_console()
        for r in report:
            name = one_line(r["path"])
            if not r["problems"]:
                n = r["messages"]
                console.print(
                    f"{name}: ok ({r['format']}, {n:,} message{'' if n == 1 else 's'})", markup=False
                )
            for p in r["problems"]:
                console.print(
                    f"{name}:{p['line']}: {p['code']}: {p['message']}", markup=False, soft_wrap=True
                )
    raise typer.Exit(rc)


REPAIR_EPILOG = opt.examples(
    "ctxc repair broken.jsonl -o fixed.jsonl",
    "cat broken.jsonl | ctxc repair - > fixed.jsonl",
)


@opt.app.command(epilog=REPAIR_EPILOG)
def repair(
    path: opt.PathArg,
    output: opt.TranscriptOutputOpt = None,
    archive: opt.ArchiveOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary on stderr.")] = False,
    input_format: opt.InputFormatOpt = None,
    skip_invalid: opt.SkipInvalidOpt = False,
    max_line_mb: opt.MaxLineOpt = 32.0,
) -> None:
    """Fix pairing problems: drop orphan results, answer unanswered calls with "no result recorded"."""
    from ctxc.jobs import RepairJob, repair_file
    from ctxc.sessions import session_path

    out, ropts = opt.transcript_output(output), opt.read_options(skip_invalid, max_line_mb)
    done = repair_file(RepairJob(session_path(path), out, archive, input_format, ropts))
    if not quiet:
        fixed, archive_id = done["fixed"], done["archive_id"][:12]
        opt.note(f"ctxc: {done['input_path']}: fixed {fixed} problem(s); original in archive {archive_id}")
