"""Counting in a worker process: a one-process pool, forked, whose worker builds the encoding as it starts.

tiktoken builds an encoding in a Rust constructor that holds the GIL, and ctxc's parsing holds it too,
so counting runs in another process. A command that counts with a bundled encoding gets the worker as
it starts (``ctxc/__main__.py`` calls :func:`start_for` before importing the CLI): it builds the
encoding while ctxc imports and reads, then counts the batches sent to it while ctxc parses the next.
tiktoken releases the GIL while it encodes, so the worker counts a large batch on one thread per core
with the one encoding it built (a worker per core would build it once each). A worker for an input of
at most :data:`PARTIAL_INPUT_BYTES` builds no whole encoding: it parses the rank table and counts each
batch with a partial encoding of the tokens its texts can use (:mod:`ctxc.tokens.partial`). A library
caller gets a worker from :func:`counting_processes`. bench/README.md has the measurements behind
each of these choices.

Counts are identical whichever process makes them. Workers ignore Ctrl-C (the parent's to handle),
die at once on SIGTERM (they hold nothing to clean up), and end with their parent even when it is
killed (:func:`ctxc.system.exit_with`). Linux only, and only while no other thread runs: a fork copies
every lock in the state it is in.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ctxc.system import cpu_count, env_flag, exit_with, interrupts_held
from ctxc.tokens import base
from ctxc.tokens import tiktoken_backend as backend

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

#: Commands that count tokens and default to o200k_base.
COUNTING_COMMANDS = frozenset({"analyze", "compact", "check"})
BUNDLED = ("o200k_base", "cl100k_base")
#: Inputs from this size on are counted on a thread per core, smaller ones on one.
PROCESS_MIN_BYTES = base.PROCESS_MIN_BYTES
#: Inputs up to this size in all are counted with partial encodings (bench/README.md, "100 KB").
PARTIAL_INPUT_BYTES = 256 << 10
#: A batch of at least this many characters is split among the worker's threads.
SPLIT_MIN_CHARS = 1 << 18


class Plan(NamedTuple):
    """The pool to start for a command."""

    name: str  # the encoding
    size: int  # how many counting threads
    partial: bool = False  # count with partial encodings (a small input)


def plan(args: Sequence[str]) -> Plan | None:
    """The pool to start for ``ctxc ARGS``, or None where one would not pay for itself.

    A scan, not a parse: any argument naming a regular file counts toward the input size (an existing
    ``-o`` target too, which only errs toward a larger pool). A folder means a batch, which runs its
    own processes, as do ``--jobs`` over several files. Standard input is of unknown size.
    """
    if not args or args[0] not in COUNTING_COMMANDS:
        return None
    name, size, inputs, jobs, stdin = "o200k_base", 0, 0, False, False
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
    if name not in BUNDLED or not inputs or (jobs and inputs > 1):
        return None
    if size < PROCESS_MIN_BYTES:
        return Plan(name, 1, partial=not stdin and size <= PARTIAL_INPUT_BYTES)
    return Plan(name, cpu_count()) if inputs == 1 else None  # several large files: a batch


# -- in a worker ------------------------------------------------------------------------------------

#: The worker's counting function, set by its initializer; None when the encoding could not be built.
_count: Callable[[Sequence[str]], list[int]] | None = None


def _start_worker(name: str, path: Path | None, partial: bool, parent: int, threads: int) -> None:
    """Initializer of the worker: signals, then the encoding (or, with ``partial``, its rank table)."""
    global _count  # noqa: PLW0603 - set once in each worker process, as it starts

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
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
            _count = _in_threads(backend.counter_for(spec, path), threads)
    except Exception:
        _count = None


def _in_threads(count: Callable[[str], int], threads: int) -> Callable[[Sequence[str]], list[int]]:
    """Count a batch with ``count``, a large one split among ``threads`` threads in contiguous parts."""
    if threads < 2:
        return lambda texts: list(map(count, texts))
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(threads)

    def count_part(part: Sequence[str]) -> list[int]:
        return list(map(count, part))

    def count_batch(texts: Sequence[str]) -> list[int]:
        if len(texts) < 2 or sum(map(len, texts)) < SPLIT_MIN_CHARS:
            return count_part(texts)
        parts = [texts[a:b] for a, b in split(texts, threads)]
        return [n for counts in pool.map(count_part, parts) for n in counts]

    return count_batch


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
    """A worker process counting with encoding ``name`` on ``size`` threads (see the module docstring)."""

    def __init__(self, name: str, size: int, path: Path | None = None, *, partial: bool = False) -> None:
        """Fork the worker now. Raises OSError if no pipe or process can be had."""
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
        self._pool: ProcessPoolExecutor = ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_start_worker,
            initargs=(name, path, partial, self.owner, self.size),
        )
        # With the fork start method, the first submit forks the worker (before the pool's threads
        # start), so it builds while this process goes on. The pool's threads start with Ctrl-C held,
        # and keep it so: delivered to one of them, it would reach the main thread even while that
        # holds it (ctxc/__main__.py holds it while importing).
        with interrupts_held():
            self._pool.submit(int)

    @property
    def usable(self) -> bool:
        """Whether this process may send work (a process forked from it inherits the object only)."""
        return os.getpid() == self.owner

    def start(self, texts: Sequence[str]) -> Callable[[], list[int] | None]:
        """Send ``texts``; the returned function waits for their counts, or None if the worker failed."""
        try:
            future = self._pool.submit(_count_in_worker, _sendable(texts))
        except RuntimeError:  # the worker died before (BrokenProcessPool), or the pool was stopped
            return lambda: None

        def collect() -> list[int] | None:
            try:
                counts = future.result()
            except Exception:
                return None
            self.answered = True
            return counts

        return collect

    def close(self) -> None:
        """Stop the worker at once: it may still be building an encoding nobody will use."""
        if not self.usable:
            return
        for pid in list(getattr(self._pool, "_processes", None) or {}):
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
    return (
        sys.platform == "linux"
        and cpu_count() >= 2
        and threading.active_count() == 1
        and _standard_streams_open()
    )


def _standard_streams_open() -> bool:
    """Whether descriptors 0-2 are open: the pool's pipes would otherwise take the number of a closed
    one, which the CLI may close or replace under them."""
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
    """Count large batches of encoding ``name`` on ``workers`` threads of a worker process; yields
    whether it is used.

    The worker the command started with serves when it has that many threads; else one is started
    now and stopped on exit. None is started when ``workers < 2``, in a process that is itself a
    worker of a pool (a batch's workers already fill the cores), or while other threads run.
    """
    pool = backend.pool_for(name, path)
    if pool is not None and pool.size >= workers:
        yield True
        return
    import multiprocessing

    if workers < 2 or multiprocessing.parent_process() is not None:
        yield False
        return
    stop()  # a smaller pool, whose threads would make the fork unsafe
    if not _fork_is_safe():
        yield False
        return
    try:
        start(name, workers, path)
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        stop()
