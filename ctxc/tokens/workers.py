"""Counting in worker processes: one process pool, forked, whose worker builds the encoding as it starts
and then forks the others from that state.

tiktoken counts at about one core per process, and builds an encoding in a Rust constructor that holds
the GIL, so no thread of ctxc's can overlap that build. A command that counts with a bundled encoding
therefore gets a pool as it starts (``ctxc/__main__.py`` calls :func:`start_for` before importing the
CLI): its workers build the encoding while ctxc imports and reads, then count the batches it sends
them while it parses the next. One worker for a small input, one per core from
:data:`PROCESS_MIN_BYTES` on. A worker for an input of at most :data:`PARTIAL_INPUT_BYTES` builds no
whole encoding: it parses the rank table and counts each batch with a partial encoding of the tokens
its texts can use (:mod:`ctxc.tokens.partial`). A library caller gets a pool from
:func:`counting_processes`. bench/README.md has the measurements behind each of these choices.

Counts are identical whichever process makes them. Workers ignore Ctrl-C (the parent's to handle),
die at once on SIGTERM (they hold nothing to clean up), and end with their parent even when it is
killed (:func:`ctxc.system.exit_with`). Linux only, and only while no other thread runs: a fork copies
every lock in the state it is in.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ctxc.system import cpu_count, env_flag, exit_with, identity_record, interrupts_held
from ctxc.tokens import tiktoken_backend as backend

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

#: Commands that count tokens and default to o200k_base.
COUNTING_COMMANDS = frozenset({"analyze", "compact", "check"})
BUNDLED = ("o200k_base", "cl100k_base")
#: Inputs from this size on are counted by a worker per core; smaller ones by one worker at most, which
#: builds the encoding while ctxc starts.
PROCESS_MIN_BYTES = 4 << 20
#: Inputs up to this size in all are counted with partial encodings (bench/README.md, "100 KB").
PARTIAL_INPUT_BYTES = 256 << 10
#: A batch of at least this many characters is split among the workers.
SPLIT_MIN_CHARS = 1 << 18


class Plan(NamedTuple):
    """The pool to start for a command."""

    name: str  # the encoding
    size: int  # how many workers
    partial: bool = False  # count with partial encodings (a small input)


def plan(args: Sequence[str]) -> Plan | None:
    """The pool to start for ``ctxc ARGS``, or None where one would not pay for itself.

    A look at the arguments, not a parse: any argument naming a regular file counts toward the input
    size (an existing ``-o`` target too, which only errs toward a larger pool). A folder means a batch,
    which runs its own processes, as do ``--jobs`` over several files. Standard input is of unknown
    size. An ``analyze`` the analysis cache will serve counts nothing.
    """
    if not args or args[0] not in COUNTING_COMMANDS:
        return None
    name, size, inputs, jobs, stdin = "o200k_base", 0, 0, False, False
    files: list[tuple[str, os.stat_result]] = []
    rest = iter(args[1:])
    for arg in rest:
        if arg in ("--help", "-h"):
            return None
        if arg == "--tokenizer":
            name = next(rest, "")
        elif arg.startswith("--tokenizer="):
            name = arg.partition("=")[2]
        elif arg in ("--archive", "--out-dir"):  # folders written, not read
            next(rest, "")
        elif arg in ("--jobs", "-j") or arg.startswith("--jobs="):
            jobs = True
        elif arg == "-":
            inputs += 1
            stdin = True
        elif not arg.startswith("-"):
            try:
                st = os.stat(arg)
            except (OSError, ValueError):
                continue
            if stat.S_ISDIR(st.st_mode):
                return None
            if stat.S_ISREG(st.st_mode):
                size += st.st_size
                inputs += 1
                files.append((arg, st))
    if name not in BUNDLED or not inputs or (jobs and inputs > 1):
        return None
    if args[0] == "analyze" and not stdin and _served_from_cache(args, files):
        return None
    if size < PROCESS_MIN_BYTES:
        return Plan(name, 1, partial=not stdin and size <= PARTIAL_INPUT_BYTES)
    return Plan(name, cpu_count()) if inputs == 1 else None  # several large files: a batch


def _served_from_cache(args: Sequence[str], files: Sequence[tuple[str, os.stat_result]]) -> bool:
    """Whether the analysis cache holds a scan of each file: a guess (a miss is counted here, or by
    workers started when the scan begins), worth it because starting workers costs a cached run most
    of its time (bench/README.md, "Session 11")."""
    if "--no-cache" in args or env_flag("CTXC_NO_CACHE"):
        return False
    return all(identity_record(arg, st).exists() for arg, st in files)


# -- in a worker ------------------------------------------------------------------------------------

#: The worker's counting function, set by its initializer; None when the encoding could not be built.
_count: Callable[[Sequence[str]], list[int]] | None = None


def _start_worker(name: str, path: Path | None, partial: bool, parent: int, twins: int = 0) -> None:
    """Initializer of a worker: signals, then the encoding (or, with ``partial``, its rank table);
    then ``twins`` copies of this worker forked from the built state (see :class:`CountingPool`)."""
    global _count  # noqa: PLW0603 - set once in each worker process, as it starts

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    gc.enable()  # forked while ctxc/__main__.py started up with the collector paused
    exit_with(parent)
    # None of the parent's streams: a pipe reading ctxc's output ends when ctxc does.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    if devnull > 2:  # it is one of them when the parent ran with a standard stream closed
        os.close(devnull)
    spec = backend.SPECS[name]
    try:
        if partial:
            backend.prepare_partial(spec, path)
            _count = lambda texts: list(map(backend.counter_for(spec, path, texts), texts))  # noqa: E731
        else:
            whole = backend.counter_for(spec, path)
            _count = lambda texts: list(map(whole, texts))  # noqa: E731
    except Exception:
        _count = None
    for _ in range(twins):
        _fork_twin()


def _fork_twin() -> None:
    """Fork a copy of this worker, which reads the same call queue once this initializer returns.

    The pool knows only this worker, so each watches the other: a twin ends with its parent, and its
    parent ends when the twin does, which the pool sees and reports as broken (its batches are then
    counted by the caller). :meth:`CountingPool.close` kills them all, never sending the pool's stop
    sentinel, which a twin would answer with a pid the pool does not know."""
    me = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        return
    exit_with(me if pid == 0 else pid)


def _count_in_worker(texts: Sequence[str | bytes]) -> list[int] | None:
    if _count is None:
        return None
    return _count([t if isinstance(t, str) else t.decode("utf-8", "surrogatepass") for t in texts])


def _sendable(texts: Sequence[str]) -> list[str | bytes]:
    """``texts`` with each non-ASCII one as its UTF-8 bytes: pickling such a string would attach a
    UTF-8 copy to it (CPython caches it in the string), which the parent keeps as long as the text."""
    return [t if t.isascii() else t.encode("utf-8", "surrogatepass") for t in texts]


# -- in the parent ----------------------------------------------------------------------------------


class CountingPool:
    """Worker processes counting with encoding ``name`` (see the module docstring)."""

    def __init__(self, name: str, size: int, path: Path | None = None, *, partial: bool = False) -> None:
        """Fork the workers now. Raises OSError if no pipe or process can be had."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.name = name
        self.path = path
        self.size = max(1, size)
        self.owner = os.getpid()
        #: Whether a worker has answered, and the seconds spent waiting for small batches since
        #: (kept by :class:`~ctxc.tokens.tiktoken_backend.TiktokenTokenizer`).
        self.answered = False
        self.waited = 0.0
        # One worker, which forks the others once it has built the encoding: each would otherwise
        # build its own (bench/README.md, "Session 13").
        self._pool: ProcessPoolExecutor = ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_start_worker,
            initargs=(name, path, partial, self.owner, self.size - 1),
        )
        # With the fork start method, the first submit forks every worker (before the pool's threads
        # start), so they build while this process goes on. The pool's threads start with Ctrl-C held,
        # and keep it so: delivered to one of them, it would reach the main thread even while that
        # holds it (ctxc/__main__.py holds it while importing).
        with interrupts_held():
            self._pool.submit(int)

    @property
    def usable(self) -> bool:
        """Whether this process may send work (a process forked from it inherits the object only)."""
        return os.getpid() == self.owner

    def start(self, texts: Sequence[str]) -> Callable[[], list[int] | None]:
        """Send ``texts``; the returned function waits for their counts, or None if a worker failed.

        A large batch is split among the workers, in contiguous parts of about equal length.
        """
        large = self.size > 1 and len(texts) > 1 and sum(map(len, texts)) >= SPLIT_MIN_CHARS
        parts = split(texts, self.size) if large else [(0, len(texts))]
        try:
            futures = [self._pool.submit(_count_in_worker, _sendable(texts[a:b])) for a, b in parts if b > a]
        except RuntimeError:  # a worker died before (BrokenProcessPool), or the pool was stopped
            return lambda: None

        def collect() -> list[int] | None:
            try:
                answers = [f.result() for f in futures]
            except Exception:
                return None
            self.answered = True
            if any(a is None for a in answers):
                return None
            return [n for a in answers for n in a or ()]

        return collect

    @property
    def pids(self) -> list[int]:
        """The workers' process ids: the pool's worker, then the twins it has forked so far."""
        first = list(getattr(self._pool, "_processes", None) or {})
        twins: list[int] = []
        for pid in first:
            with contextlib.suppress(OSError, ValueError):
                twins += map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
        return first + twins

    def close(self) -> None:
        """Stop the workers at once: a worker may still be building an encoding nobody will use."""
        if not self.usable:
            return
        for pid in self.pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)  # a worker dies at once (see _start_worker)
        # Then wait for the pool's own thread, which closes its pipes: one still closing them when the
        # interpreter exits races the exit's wake-up call ("Exception ignored ... Bad file descriptor").
        self._pool.shutdown(wait=True, cancel_futures=True)


def split(texts: Sequence[str], parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges of ``texts`` (some maybe empty) of about equal total length."""
    import itertools

    total = sum(map(len, texts))
    bounds = [0]
    before = 0  # characters before text i
    for i, text in enumerate(texts):
        # A range ends before the text whose middle lies past the range's share of the total.
        while len(bounds) < parts and (2 * before + len(text)) * parts >= 2 * total * len(bounds):
            bounds.append(i)
        before += len(text)
    bounds += [len(texts)] * (parts + 1 - len(bounds))
    return list(itertools.pairwise(bounds))


def _fork_is_safe() -> bool:
    """Linux, two cores or more, no other thread, and descriptors 0-2 open: the pool's pipes would
    otherwise take the number of a closed one, which the CLI may close or replace under them."""
    if sys.platform != "linux" or cpu_count() < 2 or threading.active_count() != 1:
        return False
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return False
    return True


def start(name: str, size: int, path: Path | None = None, *, partial: bool = False) -> CountingPool:
    """Start a pool and make it the one :func:`~ctxc.tokens.tiktoken_backend.pool_for` finds, stopping
    any other. Raises OSError."""
    stop()
    pool = CountingPool(name, size, path, partial=partial)
    backend.pools.append(pool)
    return pool


def start_for(args: Sequence[str]) -> None:
    """Start the pool for ``ctxc ARGS`` when :func:`plan` says it pays; ``CTXC_NO_PREBUILD=1`` never.

    Only an optimisation: where no process can be forked, ctxc counts in this process.
    """
    if backend.pools or env_flag("CTXC_NO_PREBUILD") or not _fork_is_safe():
        return
    planned = plan(args)
    if planned is not None:
        with contextlib.suppress(OSError):
            start(planned.name, planned.size, partial=planned.partial)


def stop() -> None:
    """Stop the pool, if any: this process counts on its own from now on."""
    while backend.pools:
        backend.pools.pop().close()


@contextlib.contextmanager
def worker_processes(name: str, path: Path | None, workers: int) -> Iterator[bool]:
    """Count large batches of encoding ``name`` in ``workers`` processes; yields whether they are used.

    The pool the command started with serves when it has that many workers; else one is started now
    and stopped on exit. None is started when ``workers < 2``, in a process that is itself a worker
    of a pool (a batch's workers already fill the cores), or while other threads run.
    """
    pool = backend.pool_for(name, path)
    if pool is not None and pool.size >= workers:
        yield True
        return
    import multiprocessing

    started = False
    if workers >= 2 and multiprocessing.parent_process() is None:
        stop()  # a smaller pool, whose threads would make the fork unsafe
        if _fork_is_safe():
            with contextlib.suppress(OSError):
                start(name, workers, path)
                started = True
    try:
        yield started
    finally:
        if started:
            stop()
