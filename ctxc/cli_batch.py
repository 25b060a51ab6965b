"""The command line's side of batches: progress, errors on stderr, the run journal, the JSON report.

:mod:`ctxc.batch` runs the files; this module decides what the user sees and what the exit code is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ctxc.batch import BatchProgress, Outcome, batch_exit_code, run_batch
from ctxc.cliutil import TableOrJson, cells
from ctxc.system import cpu_count
from ctxc.terminal import stderr_console

T = TypeVar("T")
R = TypeVar("R")


#: Without ``--jobs``, a batch smaller than this runs in one process: each worker pays its own start-up
#: (imports, and the tokenizer's 0.35 s build on its first count), which a few small files never repay.
AUTO_JOBS_MIN_BYTES = 4 << 20


def resolve_jobs(jobs: int | None, paths: Sequence[str]) -> int:
    """``--jobs``, never more than there are files; by default the cores this process may use, or one
    for a batch under :data:`AUTO_JOBS_MIN_BYTES`."""
    if jobs is None:
        size = 0
        for p in paths:
            with contextlib.suppress(OSError):
                size += os.stat(p).st_size if p != "-" else 0
        jobs = cpu_count() if size >= AUTO_JOBS_MIN_BYTES else 1
    return max(1, min(jobs, len(paths)))


def run_files(
    items: Sequence[tuple[str, T]],
    work: Callable[[T], R],
    *,
    what: str,
    jobs: int | None,
    fail_fast: bool = False,
    quiet: bool = False,
    tokens_of: Callable[[R], int] = lambda _r: 0,
) -> list[Outcome[R]]:
    """Run a per-file job over a batch with progress on stderr and each failure reported as it happens."""
    with BatchProgress(len(items), what, quiet=quiet) as progress:

        def on_outcome(outcome: Outcome[R]) -> None:
            if not outcome.ok:
                stderr_console().print(f"ctxc: error: {outcome.error}", markup=False, soft_wrap=True)
            tokens = tokens_of(outcome.value) if outcome.value is not None else 0
            progress.advance(tokens=tokens, ok=outcome.ok)

        workers = resolve_jobs(jobs, [path for path, _ in items])
        return run_batch(items, work, jobs=workers, fail_fast=fail_fast, on_outcome=on_outcome)


def run_one_or_many(
    items: Sequence[tuple[str, T]],
    work: Callable[[T], R],
    *,
    what: str,
    jobs: int | None,
    fail_fast: bool = False,
    quiet: bool = False,
    tokens_of: Callable[[R], int] = lambda _r: 0,
) -> tuple[list[R], list[dict[str, Any]], int]:
    """Results, failed files (path, error, exit code) and the exit code of ``work`` over ``items``.

    One file runs here with no batch machinery, and its error propagates with its own exit code (as
    for every single-file command); several run as a batch in which a failure is reported and counted.
    """
    if len(items) == 1:
        return [work(items[0][1])], [], 0
    outcomes = run_files(
        items,
        work,
        what=what,
        jobs=jobs,
        fail_fast=fail_fast,
        quiet=quiet,
        tokens_of=tokens_of,
    )
    values = [o.value for o in outcomes if o.value is not None]
    errors = [{"path": o.path, "error": o.error, "exit_code": o.exit_code} for o in outcomes if not o.ok]
    return values, errors, batch_exit_code(outcomes, single=fail_fast)


def run_compact_batch(
    jobs_list: Sequence[Any],
    *,
    archive: str | None,
    jobs: int | None,
    fail_fast: bool,
    force: bool,
    quiet: bool,
    fmt: TableOrJson | None,
    report: str | None,
) -> int:
    """Compact many files (``--out-dir`` or ``--in-place``), resuming from the journal. Returns the exit code.

    A file is skipped when the journal holds an entry with its input sha256, the same options and the
    same output path (resolved) whose output is still on disk unchanged; for ``--in-place`` also when
    the input *is* that recorded output (the file was already compacted with these options). A file
    the manifest records as done by a batch with these options but the journal missed (the run was
    killed between the two lines) is journaled now and skipped too, so no file is compacted twice.
    """
    from dataclasses import replace

    from ctxc.archive import Archive
    from ctxc.archive_store import archive_root
    from ctxc.batch import Journal, already_done, check_distinct_outputs, file_sha256, fingerprint
    from ctxc.compaction.files import options_fingerprint_doc
    from ctxc.jobs import compact_journaled, journal_entry
    from ctxc.output import atomic_output, dumps, envelope, sweep_stale_temps, write_stdout

    check_distinct_outputs([(j.path, j.output) for j in jobs_list])
    dry_run = bool(jobs_list) and jobs_list[0].dry_run
    root = archive_root(archive)
    journal = Journal(root)
    done_entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    if not (force or dry_run):
        done_entries = {**_manifest_entries(Archive(root)), **journal.entries()}
    for d in {str(Path(j.output).parent) for j in jobs_list}:
        sweep_stale_temps(d)  # leftovers of a run that was killed (SIGKILL runs no cleanup)
    # For --in-place: the entries by the output they wrote, so a file that *is* one is found at once.
    by_output: dict[tuple[str, str, str], dict[str, Any]] = {}
    for (_, o, out), e in done_entries.items():
        if isinstance(e.get("output_sha256"), str):
            by_output.setdefault((o, out, e["output_sha256"]), e)

    rows: list[dict[str, Any] | None] = [None] * len(jobs_list)
    todo: list[tuple[int, Any]] = []
    for k, job in enumerate(jobs_list):
        opts = fingerprint(options_fingerprint_doc(job))
        try:
            sha = file_sha256(job.path)
        except OSError:
            sha = ""  # unreadable: let the job report it properly
        resolved = os.path.realpath(job.output)
        entry = done_entries.get((sha, opts, resolved))
        if entry is None and job.in_place:
            entry = by_output.get((opts, resolved, sha))
        if entry is not None and already_done(entry):
            if entry.get("from_manifest"):
                journal.record(journal_entry(entry, path=job.path, output=job.output, options=opts))
            rows[k] = {**_row_from_entry(job, entry), "status": "skipped"}
        else:
            todo.append((k, replace(job, batch_options=opts)))

    outcomes = run_files(
        [(job.path, job) for _, job in todo],
        compact_journaled,
        what="compacting",
        jobs=jobs,
        fail_fast=fail_fast,
        quiet=quiet,
        tokens_of=lambda doc: int(doc["run"]["tokens_before"]),
    )
    for outcome in outcomes:
        k, job = todo[outcome.index]
        if outcome.ok and outcome.value is not None:
            run = outcome.value["run"]
            row = _row(job, run, status="planned" if dry_run else "ok", seconds=outcome.seconds)
        else:
            row = {
                "path": job.path,
                "output": None,
                "status": "failed",
                "error": outcome.error,
                "exit_code": outcome.exit_code,
                "seconds": round(outcome.seconds, 3),
            }
        rows[k] = row
    finished = [r for r in rows if r is not None]
    rc = batch_exit_code(outcomes, single=fail_fast)
    totals = {
        "files": len(jobs_list),
        "ok": sum(r["status"] == "ok" for r in finished),
        # Written byte for byte as read: nothing to remove (the archive id is the input's sha256).
        "unchanged": sum(
            r["status"] == "ok" and r.get("output_sha256") == r.get("archive_id") for r in finished
        ),
        "planned": sum(r["status"] == "planned" for r in finished),
        "skipped": sum(r["status"] == "skipped" for r in finished),
        "failed": sum(r["status"] == "failed" for r in finished),
        "not_run": len(jobs_list) - len(finished),
        "tokens_before": sum(r.get("tokens_before") or 0 for r in finished),
        "tokens_after": sum(r.get("tokens_after") or 0 for r in finished),
    }
    doc = envelope("compact-batch", files=finished, totals=totals, exit_code=rc)
    if report:
        with atomic_output(report, inputs=tuple(j.path for j in jobs_list)) as handle:
            handle.write(dumps(doc))
    if fmt is TableOrJson.json:
        write_stdout(dumps(doc))
    elif fmt is TableOrJson.table:
        _print_table(finished)
    if not quiet:
        _print_totals(totals)
    return rc


def _manifest_entries(store: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The files batches recorded in the manifest, keyed as :meth:`ctxc.batch.Journal.entries` keys them."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in store.manifest():
        batch = run.get("batch")
        if not isinstance(batch, dict):
            continue
        sha, options, output = run.get("input_sha256"), batch.get("options"), batch.get("output")
        if isinstance(sha, str) and isinstance(options, str) and isinstance(output, str):
            out[(sha, options, output)] = {**run, "output_path": output, "from_manifest": True}
    return out


def _row(job: Any, run: dict[str, Any], *, status: str, seconds: float) -> dict[str, Any]:
    return {
        "path": job.path,
        "output": None if status == "planned" else job.output,
        "status": status,
        "format": run["format"],
        "tokens_before": run["tokens_before"],
        "tokens_after": run["tokens_after"],
        "archive_id": run["archive_id"],
        "output_sha256": run.get("output_sha256"),
        "output_path": job.output,
        "error": None,
        "exit_code": 0,
        "seconds": round(seconds, 3),
    }


def _row_from_entry(job: Any, entry: dict[str, Any]) -> dict[str, Any]:
    keys = ("format", "tokens_before", "tokens_after", "archive_id", "output_sha256")
    return {
        "path": job.path,
        "output": job.output,
        **{k: entry.get(k) for k in keys},
        "output_path": job.output,
        "error": None,
        "exit_code": 0,
        "seconds": 0.0,
    }


def _print_table(rows: Sequence[dict[str, Any]]) -> None:
    from rich.table import Table

    from ctxc.cliutil import stdout_console
    from ctxc.render import print_table

    table = Table("file", "status", "format", "before", "after", "archive")
    for r in rows:
        table.add_row(
            *cells(
                r["path"],
                r["status"],
                r.get("format") or "",
                f"{r['tokens_before']:,}" if r.get("tokens_before") is not None else "",
                f"{r['tokens_after']:,}" if r.get("tokens_after") is not None else "",
                (r.get("archive_id") or "")[:12],
            )
        )
    print_table(stdout_console(), table, optional=("format", "archive"), keys=1, fold=("file",))


def _print_totals(t: dict[str, Any]) -> None:
    parts = [f"{t['ok'] - t['unchanged']} compacted"]
    for key, label in (
        ("unchanged", "unchanged"),
        ("planned", "planned"),
        ("skipped", "already done"),
        ("failed", "failed"),
    ):
        if t[key]:
            parts.append(f"{t[key]} {label}")
    if t["not_run"]:
        parts.append(f"{t['not_run']} not run (--fail-fast)")
    stderr_console().print(
        f"ctxc: {t['files']} files: {', '.join(parts)}; "
        f"{t['tokens_before']:,} → {t['tokens_after']:,} tokens",
        markup=False,
        soft_wrap=True,
    )
