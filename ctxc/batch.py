"""Many transcripts in one run: inputs, worker processes and progress. A per-file function's
:class:`~ctxc.errors.CtxcError` becomes a failed :class:`Outcome`, not an exception."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ctxc.archive_store import is_archive
from ctxc.errors import (
    CtxcError,
    ExitCode,
    InputError,
    UsageError,
    name_options_as_flags,
    options_named_as_flags,
)
from ctxc.sessions import looks_like_reference, resolve_session
from ctxc.system import exit_with, terminate_as_interrupt
from ctxc.terminal import stderr_console

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Input:
    """One file of a batch, and its path relative to the argument that named it (for ``--out-dir``)."""

    path: str
    rel: str


def collect_inputs(
    paths: Sequence[str] | None,
    *,
    glob: str | None = None,
    exclude: Sequence[str | os.PathLike[str]] = (),
) -> list[Input]:
    """Files as given (each once, by any spelling; stdin too), directories walked recursively in sorted order
    for ``glob`` (default: each format's suffixes), never entering ``exclude`` or an archive. A directory
    the walk cannot list is kept as an input, so the batch reports it as a failure."""
    if not paths:
        if glob is None:
            raise UsageError("give a transcript file, a directory, or - for stdin")
        paths = ["."]
    skip = {os.path.realpath(e) for e in exclude}
    out: list[Input] = []
    seen: set[str] = set()

    def take(full: str, rel: str) -> None:
        key = os.path.realpath(full)
        if key not in seen:
            seen.add(key)
            out.append(Input(full, rel))

    for p in paths:
        path = Path(p)
        if p == "-":
            if "-" not in seen:  # stdin reads once: a second "-" would be an empty file
                seen.add("-")
                out.append(Input("-", "-"))
        elif path.is_dir():
            found, unreadable = _walk(path, glob, skip)
            if not found and not unreadable:
                raise InputError(f"directory holds no transcripts ({glob or _default_glob()})", path=p)
            for rel in found:
                take(str(path / rel), rel)
            for rel in unreadable:
                take(str(path / rel), path.name if rel == "." else rel)
        elif not path.exists() and looks_like_reference(p):
            session = resolve_session(p)
            take(str(session.path), session.path.name)
        else:
            take(str(path), path.name)
    return out


def expand_paths(paths: list[str] | None, glob: str | None = None) -> list[str]:
    """Files as given, directories walked for transcripts (sorted, so output order is stable)."""
    return [i.path for i in collect_inputs(paths, glob=glob)]


def _default_glob() -> str:
    """What a walk takes without ``--glob``, as a user would write it: ``*.jsonl, *.traj, *.traj.json``."""
    from ctxc.formats import transcript_suffixes

    return ", ".join(f"*{s}" for s in transcript_suffixes())


def _walk(top: Path, glob: str | None, skip: set[str]) -> tuple[list[str], list[str]]:
    """Transcripts under ``top`` and the directories that could not be listed, both relative to it."""
    from ctxc.formats import transcript_suffixes  # the adapters: a single file's run has no need of them

    found: list[str] = []
    unreadable: list[str] = []

    def failed(exc: OSError) -> None:
        where = exc.filename if isinstance(exc.filename, str) else str(top)
        unreadable.append(Path(os.path.relpath(where, top)).as_posix())

    def matches(rel: str, name: str) -> bool:
        if glob is None:
            return rel.endswith(transcript_suffixes())
        # A pattern without a slash matches the file name at any depth, like .gitignore.
        return fnmatch.fnmatch(rel if "/" in glob else name, glob)

    def enters(subdir: str) -> bool:  # an archive's manifest and journal are JSONL, no transcripts
        return os.path.realpath(subdir) not in skip and not is_archive(subdir)

    for directory, subdirs, files in os.walk(top, onerror=failed):
        subdirs[:] = [d for d in subdirs if enters(os.path.join(directory, d))]
        base = Path(os.path.relpath(directory, top))
        for name in files:
            rel = (base / name).as_posix()
            if matches(rel, name) and not name.startswith(".") and os.path.isfile(Path(directory, name)):
                found.append(rel)
    return sorted(found), sorted(unreadable)


def check_distinct_outputs(pairs: Sequence[tuple[str, str]]) -> None:
    """Refuse ``(input, output)`` pairs in which two inputs write one output or an output is another
    input (paths compared resolved)."""
    inputs = {os.path.realpath(i): i for i, _ in pairs if i != "-"}
    writers: dict[str, str] = {}
    for src, dst in pairs:
        if dst == "-":
            continue
        key = os.path.realpath(dst)
        if key in writers:
            raise UsageError(f"{writers[key]} and {src} would both be written to {dst}")
        writers[key] = src
        other = inputs.get(key)
        if other is not None and os.path.realpath(src) != key:
            raise UsageError(f"the output of {src} would overwrite the input {other} ({dst})")


@dataclass(frozen=True, slots=True)
class Outcome(Generic[R]):
    """What became of one input: a value, or the error that stopped it (message and exit code)."""

    index: int
    path: str
    value: R | None = None
    error: str | None = None
    exit_code: int = 0
    seconds: float = 0.0
    line: int | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a batch; ``outcomes`` are those of the files that finished first (their
    outputs whole), in input order, for a report of what was done."""

    def __init__(self, outcomes: Sequence[Outcome[Any]]) -> None:
        super().__init__()
        self.outcomes = list(outcomes)


#: In a worker process, held while a file is in work (see :func:`_worker_init`).
_busy: threading.Lock | None = None


class _Terminated(BaseException):
    """SIGTERM reached a worker with a file in work: the file unwinds (its temporary output removed)."""


def _terminated(signum: int, _frame: object) -> None:
    """A worker's SIGTERM (a CI cancel or timeout(1) signals the whole group): it dies of it as before,
    but a file in work unwinds first, so no temporary output is left for the next run to sweep."""
    if _busy is not None and _busy.locked():
        # Another SIGTERM must not cut the unwinding short: once one worker has died, the pool sends
        # one to each of the others. Ignored until _call ends this worker.
        signal.signal(signum, signal.SIG_IGN)
        raise _Terminated
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _call(work: Callable[[T], R], index: int, path: str, item: T) -> Outcome[R]:
    try:
        return _run(work, index, path, item)
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # the file unwound: the worker ends here, of the signal
        raise


def _run(work: Callable[[T], R], index: int, path: str, item: T) -> Outcome[R]:
    with _busy or contextlib.nullcontext():
        start = time.perf_counter()
        try:
            if path != "-" and os.path.isdir(path):
                # Only a directory the walk could not list reaches here: count it as a failed input.
                try:
                    with os.scandir(path):
                        why = "it changed while the batch ran"
                except OSError as exc:
                    why = exc.strerror or str(exc)
                raise InputError(f"cannot read this directory: {why}", path=path)
            value = work(item)
        except CtxcError as exc:
            seconds = time.perf_counter() - start
            return Outcome(index, path, None, str(exc), int(exc.exit_code), seconds, exc.line, exc.message)
        return Outcome(index, path, value=value, seconds=time.perf_counter() - start)


def _worker_init(parent: int, as_flags: bool) -> None:
    """Set up a worker process of :func:`run_batch`; ``parent`` is the batch's process, which it ends with,
    and whose way of naming options in errors (``as_flags``) it keeps for its life."""
    global _busy  # noqa: PLW0603 - set once in each worker process, as it starts
    name_options_as_flags(as_flags)  # a forkserver's worker would not inherit it
    # Ctrl-C is the parent's: it cancels what has not started and waits for the files in flight.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminated)  # not the batch's handler, which a fork inherits
    _busy = threading.Lock()
    exit_with(parent, busy=_busy)
    from multiprocessing.util import Finalize

    from ctxc.sqlite_store import close_kept, keep_open

    keep_open()  # the stores and index, opened once for all the files this worker takes
    Finalize(None, close_kept, exitpriority=0)


def run_batch(
    items: Sequence[tuple[str, T]],
    work: Callable[[T], R],
    *,
    jobs: int = 1,
    fail_fast: bool = False,
    on_outcome: Callable[[Outcome[R]], None] | None = None,
) -> list[Outcome[R]]:
    """Run ``work`` over ``(path, argument)`` items, in a pool when ``jobs > 1``; outcomes in input order.
    ``fail_fast``, Ctrl-C and SIGTERM cancel the files not started and let running ones finish (the
    signals then raise :class:`BatchInterrupted`); workers end with this process, even one SIGKILLed."""
    notify = on_outcome or (lambda _o: None)
    outcomes: dict[int, Outcome[R]] = {}

    def finished(outcome: Outcome[R]) -> bool:
        outcomes[outcome.index] = outcome
        notify(outcome)
        return fail_fast and not outcome.ok

    with terminate_as_interrupt():
        if jobs <= 1 or len(items) <= 1:
            from ctxc.sqlite_store import kept_open

            with kept_open():
                try:
                    for i, (path, item) in enumerate(items):
                        if finished(_call(work, i, path, item)):
                            break
                except KeyboardInterrupt as exc:  # the file in work unwound: it has no outcome
                    raise BatchInterrupted(list(outcomes.values())) from exc
            return list(outcomes.values())
        from concurrent.futures import FIRST_COMPLETED, wait  # a single-file run never needs them

        pool = _pool(min(jobs, len(items)))
        # A KeyboardInterrupt raised inside concurrent.futures can leave a future's lock held, and the
        # shutdown below then waits for ever: here Ctrl-C and SIGTERM only ask, and the loop stops.
        asked = threading.Event()
        previous = {
            sig: signal.signal(sig, lambda *_: asked.set()) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            pending: dict[Future[Outcome[R]], int] = {
                pool.submit(_call, work, i, path, item): i for i, (path, item) in enumerate(items)
            }
            stop = False
            while pending and not stop:
                done, _ = wait(pending, timeout=_POLL, return_when=FIRST_COMPLETED)
                if asked.is_set():
                    _finish_running(pool, pending, finished)
                    raise BatchInterrupted([outcomes[i] for i in sorted(outcomes)])
                for future in sorted(done, key=pending.__getitem__):
                    pending.pop(future)
                    stop = finished(future.result()) or stop
            for future in pending:
                future.cancel()
            # Files already running finish (their outputs are whole); report them too.
            for future in pending:
                if not future.cancelled():
                    finished(future.result())
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        pool.shutdown(wait=True)
    return [outcomes[i] for i in sorted(outcomes)]


#: How often (seconds) a pooled batch looks whether it was asked to stop, between files' ends.
_POLL = 0.1


def _finish_running(
    pool: ProcessPoolExecutor, pending: dict[Future[Outcome[R]], int], finished: Callable[[Outcome[R]], bool]
) -> None:
    """After Ctrl-C or SIGTERM: cancel the files not started, wait for those running, and take the outcomes
    of those that ended whole (a worker the signal reached too died with its file, and has none)."""
    pool.shutdown(wait=True, cancel_futures=True)
    for future in sorted(pending, key=pending.__getitem__):
        if future.done() and not future.cancelled() and future.exception() is None:
            finished(future.result())


def _pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes, forked from this one unless another thread runs (the progress
    bar's may hold the console's lock, which a fork would copy held): then from a ``forkserver``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    safe = sys.platform == "linux" and threading.active_count() == 1
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("fork" if safe else "forkserver"),
        initializer=_worker_init,
        initargs=(os.getpid(), options_named_as_flags()),
    )


def batch_exit_code(outcomes: Sequence[Outcome[Any]], *, single: bool) -> int:
    """0 when every file succeeded, else ``PARTIAL``; ``single`` keeps the first failure's own code."""
    failed = [o for o in outcomes if not o.ok]
    if not failed:
        return int(ExitCode.OK)
    return failed[0].exit_code if single else int(ExitCode.PARTIAL)


class BatchProgress:
    """Progress on stderr (files, tokens, rate, ETA): a rich bar on a terminal, for more than one file,
    shown after :attr:`SHOW_AFTER` seconds (a quick run ends as quietly as it began)."""

    SHOW_AFTER = 1.0

    def __init__(self, total: int, what: str, *, quiet: bool = False) -> None:
        self.total = total
        self.what = what
        self.enabled = total > 1 and not quiet and sys.stderr.isatty()
        self.tokens = 0
        self._start = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> BatchProgress:
        if self.enabled:
            from rich import progress

            start, delay = self._start, self.SHOW_AFTER

            class LateProgress(progress.Progress):
                def get_renderables(self) -> Any:
                    if time.monotonic() - start >= delay:
                        yield from super().get_renderables()

            self._bar = LateProgress(
                progress.TextColumn(self.what),
                progress.BarColumn(),
                progress.MofNCompleteColumn(),
                progress.TextColumn("{task.fields[tokens]}"),
                progress.TimeElapsedColumn(),
                progress.TimeRemainingColumn(),
                console=stderr_console(),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=self.total, tokens="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def advance(self, *, tokens: int = 0) -> None:
        self.tokens += tokens
        if self._bar is not None:
            elapsed = max(time.monotonic() - self._start, 1e-9)
            # A command that counts nothing (validate) shows no "0 tokens, 0/s".
            text = f"{self.tokens:,} tokens, {self.tokens / elapsed:,.0f}/s" if self.tokens else ""
            self._bar.update(self._task, advance=1, tokens=text)
