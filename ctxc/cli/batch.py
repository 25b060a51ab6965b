"""The command line's side of batches (:mod:`ctxc.batch` runs them): how many workers, progress and
errors on stderr."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ctxc.batch import BatchProgress, Outcome, batch_exit_code, run_batch
from ctxc.cli import options as opt
from ctxc.system import cpu_count

T = TypeVar("T")
R = TypeVar("R")


#: Without ``--jobs``, a batch smaller than this runs in one process: each worker pays its own start-up
#: (imports, the tokenizer's build on its first count), which a few small files never repay.
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
                opt.note(f"ctxc: error: {outcome.error}")
            tokens = tokens_of(outcome.value) if outcome.value is not None else 0
            progress.advance(tokens=tokens)

        workers = resolve_jobs(jobs, [path for path, _ in items])
        return run_batch(items, work, jobs=workers, fail_fast=fail_fast, on_outcome=on_outcome)


def run_one_or_many(
    items: Sequence[tuple[str, T]], work: Callable[[T], R], **options: Any
) -> tuple[list[R], list[dict[str, Any]], int]:
    """Results, failed files (path, error, exit code) and the exit code of ``work`` over ``items``. One
    file runs here and its error propagates; several run as a batch (``options`` as :func:`run_files`)."""
    if len(items) == 1:
        return [work(items[0][1])], [], 0
    outcomes = run_files(items, work, **options)
    values = [o.value for o in outcomes if o.value is not None]
    errors = [{"path": o.path, "error": o.error, "exit_code": o.exit_code} for o in outcomes if not o.ok]
    return values, errors, batch_exit_code(outcomes, single=options.get("fail_fast", False))
