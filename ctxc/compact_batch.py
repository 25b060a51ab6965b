"""A batch of compactions that resumes: the run journal says which files are done, so a batch run again
(after a crash, a kill or a failure) compacts only the rest, and never a file twice."""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import orjson

from ctxc.archive import Archive
from ctxc.archive_store import append_jsonl, archive_root, read_jsonl
from ctxc.batch import BatchInterrupted, Outcome, batch_exit_code, check_distinct_outputs
from ctxc.compaction.files import CompactJob, compact_file, options_fingerprint_doc
from ctxc.errors import ArchiveError, ExitCode
from ctxc.output import atomic_output, dumps, envelope, sweep_stale_temps

_Key = tuple[str, str, str]
JOURNAL = "journal.jsonl"
#: What a batch's row and journal line take from a file's manifest run.
RUN_FIELDS = ("format", "tokens_before", "tokens_after", "archive_id", "output_sha256")


def fingerprint(doc: Any) -> str:
    """A stable hash of options (sorted keys), for deciding whether a finished file needs redoing."""
    return hashlib.sha256(
        orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    ).hexdigest()


def journal_entries(root: Path) -> dict[_Key, dict[str, Any]]:
    """``journal.jsonl`` beside the archive's manifest (one line per file a batch finished, appended whole
    and fsynced): the newest entry per (input sha256, options fingerprint, resolved output path)."""
    out: dict[_Key, dict[str, Any]] = {}
    for _, entry in read_jsonl(root / JOURNAL):
        path = entry.get("output_path")
        if isinstance(path, str) and {"input_sha256", "options"} <= entry.keys():
            out[(entry["input_sha256"], entry["options"], os.path.realpath(path))] = entry
    return out


def file_sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def already_done(entry: dict[str, Any]) -> bool:
    """True when a journal entry's output is still on disk with the bytes it recorded."""
    out, want = entry.get("output_path"), entry.get("output_sha256")
    try:
        return isinstance(out, str) and isinstance(want, str) and file_sha256(out) == want
    except OSError:
        return False


def compact_journaled(job: CompactJob) -> dict[str, Any]:
    """Compact one file of a batch and append its journal line at once, in the worker: the batch's own
    process may be killed at any moment."""
    start = time.perf_counter()
    doc = compact_file(job)
    if not job.dry_run:
        entry = journal_entry(doc["run"], path=job.path, output=job.output, options=job.batch_options or "")
        _journal(archive_root(job.archive), {**entry, "seconds": round(time.perf_counter() - start, 3)})
    return doc


def _journal(root: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the journal; a failure (a full disk) is the file's, and the manifest, which
    records its run, lets the re-run skip it."""
    try:
        append_jsonl(root / JOURNAL, entry)
    except OSError as exc:
        raise ArchiveError(f"cannot write the run journal: {exc.strerror or exc}", path=str(root)) from exc


def journal_entry(run: dict[str, Any], *, path: str, output: str, options: str) -> dict[str, Any]:
    """The journal's line for a finished file, from its manifest run."""
    row = _row(run, path, output, status="ok", seconds=0.0) | {"output_path": os.path.realpath(output)}
    return {**row, "input_sha256": run.get("input_sha256"), "options": options}


class FileRunner(Protocol):
    """Runs ``work`` over ``(path, job)`` items; one outcome per item run, in any order."""

    def __call__(
        self,
        items: Sequence[tuple[str, CompactJob]],
        work: Callable[[CompactJob], dict[str, Any]],
        *,
        tokens_of: Callable[[dict[str, Any]], int],
    ) -> list[Outcome[dict[str, Any]]]: ...


def compact_batch(
    jobs_list: Sequence[CompactJob],
    *,
    archive: str | None,
    force: bool,
    fail_fast: bool,
    report: str | None,
    run_files: FileRunner,
) -> dict[str, Any]:
    """Compact many files with ``run_files``, skipping those the journal or the manifest records as done;
    returns the ``compact-batch`` document, also written to ``report`` when given, and then too when
    Ctrl-C or SIGTERM stops the batch (:class:`~ctxc.batch.BatchInterrupted`, raised again after)."""
    check_distinct_outputs([(j.path, j.output) for j in jobs_list])
    dry_run = bool(jobs_list) and jobs_list[0].dry_run
    # Leftovers of a run that was killed (SIGKILL runs no cleanup), beside each output as named and as
    # resolved (where atomic_output writes): once here, not again for each file.
    outputs = [Path(j.output) for j in jobs_list]
    for d in {p.parent.resolve() for p in outputs} | {p.resolve().parent for p in outputs}:
        sweep_stale_temps(d)
    rows, todo = _plan(jobs_list, archive=archive, resume=not (force or dry_run))
    interrupted: BatchInterrupted | None = None
    try:
        outcomes = run_files(
            [(job.path, job) for _, job in todo],
            compact_journaled,
            tokens_of=lambda doc: int(doc["run"]["tokens_before"]),
        )
    except BatchInterrupted as exc:  # the report still tells what was done, then the interrupt goes on
        outcomes, interrupted = exc.outcomes, exc
    for outcome in outcomes:
        k, job = todo[outcome.index]
        if outcome.ok and outcome.value is not None:
            status = "planned" if dry_run else "ok"
            rows[k] = _row(outcome.value["run"], job.path, job.output, status=status, seconds=outcome.seconds)
        else:
            rows[k] = {
                "path": job.path,
                "output": None,
                "status": "failed",
                "error": outcome.error,
                "exit_code": outcome.exit_code,
                "seconds": round(outcome.seconds, 3),
            }
    finished = [r for r in rows if r is not None]
    rc = batch_exit_code(outcomes, single=fail_fast or len(jobs_list) == 1)  # one file: its own code
    totals = _totals(finished, files=len(jobs_list))
    doc = envelope(
        "compact-batch",
        files=finished,
        totals=totals,
        interrupted=interrupted is not None,
        exit_code=int(ExitCode.INTERRUPTED) if interrupted else rc,
    )
    if report:
        with atomic_output(report, inputs=tuple(j.path for j in jobs_list)) as handle:
            handle.write(dumps(doc))
    if interrupted is not None:
        raise interrupted
    return doc


def _plan(
    jobs_list: Sequence[CompactJob], *, archive: str | None, resume: bool
) -> tuple[list[dict[str, Any] | None], list[tuple[int, CompactJob]]]:
    """The rows of the files already done (None for the others), and the jobs left to run by index.
    Done: an entry with the input's sha256, options and output, whose output is unchanged (for
    ``--in-place``, also when the input *is* that output); one only the manifest has is journaled now."""
    root = archive_root(archive)
    done_entries = {**_manifest_entries(Archive(root)), **journal_entries(root)} if resume else {}
    # For --in-place: the entries by the output they wrote, so a file that *is* one is found at once.
    by_output: dict[_Key, dict[str, Any]] = {}
    for (_, o, out), e in done_entries.items():
        if isinstance(e.get("output_sha256"), str):
            by_output.setdefault((o, out, e["output_sha256"]), e)
    rows: list[dict[str, Any] | None] = [None] * len(jobs_list)
    todo: list[tuple[int, CompactJob]] = []
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
                _journal(root, journal_entry(entry, path=job.path, output=job.output, options=opts))
            row = _row(entry, job.path, job.output, status="skipped", seconds=0.0)
            row["status"] = row.pop("status")  # a skipped row lists its status last
            rows[k] = row
        else:
            todo.append((k, replace(job, batch_options=opts)))
    return rows, todo


def _totals(finished: Sequence[dict[str, Any]], *, files: int) -> dict[str, Any]:
    count = Counter(r["status"] for r in finished)
    return {
        "files": files,
        "ok": count["ok"],
        # Written byte for byte as read: nothing to remove (the archive id is the input's sha256).
        "unchanged": sum(
            r["status"] == "ok" and r.get("output_sha256") == r.get("archive_id") for r in finished
        ),
        **{status: count[status] for status in ("planned", "skipped", "failed")},
        "not_run": files - len(finished),
        "tokens_before": sum(r.get("tokens_before") or 0 for r in finished),
        "tokens_after": sum(r.get("tokens_after") or 0 for r in finished),
    }


def _manifest_entries(store: Archive) -> dict[_Key, dict[str, Any]]:
    """The files batches recorded in the manifest, keyed as :func:`journal_entries` keys them."""
    out: dict[_Key, dict[str, Any]] = {}
    for run in store.manifest():
        batch = run.get("batch")
        if not isinstance(batch, dict):
            continue
        sha, options, output = run.get("input_sha256"), batch.get("options"), batch.get("output")
        if isinstance(sha, str) and isinstance(options, str) and isinstance(output, str):
            out[(sha, options, output)] = {**run, "output_path": output, "from_manifest": True}
    return out


def _row(run: dict[str, Any], path: str, output: str, *, status: str, seconds: float) -> dict[str, Any]:
    return {
        "path": path,
        "output": None if status == "planned" else output,
        "status": status,
        **{k: run.get(k) for k in RUN_FIELDS},
        "output_path": output,
        "error": None,
        "exit_code": 0,
        "seconds": round(seconds, 3),
    }
