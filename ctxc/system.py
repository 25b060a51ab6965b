"""Facts about the machine that several parts of ctxc size their work by, and where it keeps caches."""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading


@functools.cache
def cpu_count() -> int:
    """Cores this process may use: the affinity mask (a container's or ``taskset``'s share), not the
    machine's total. Asked once per process; counting asks for every batch."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cache_dir() -> Path:
    """Where ctxc keeps what it can recompute (token counts, scans, the parsed rank table, summaries):
    ``$CTXC_CACHE_DIR``, else ``$XDG_CACHE_HOME/ctxc``, else ``~/.cache/ctxc``."""
    base = os.environ.get("CTXC_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ctxc"


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to something other than "", 0, false or no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C back while forking or importing, and deliver it right after.

    CPython runs the at-fork hooks (logging's among them) as Python code in this process too; an
    interrupt raised inside one is printed as "Exception ignored" and then lost, and the run goes on.
    An interrupt inside an import can be lost the same way, or worse (``ctxc/__main__.py`` says how).
    Callers do this only while no other thread runs, so the mask of this thread is the process's.
    Forked children inherit the mask and ignore SIGINT anyway: Ctrl-C is the parent's to handle.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk read of a transcript.

    Reading allocates a few container objects per record (orjson's dicts and lists, blocks, messages),
    almost none in a reference cycle, and the collector walks the young ones again every 700
    allocations: about a fifth of parsing a 100 MB log. Reference counting frees what it always did;
    whatever cycles the block leaves are collected by the next full collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # What was read is long-lived: move it to the oldest generation (freeze, then unfreeze into
        # it) rather than have the next young collections walk all of it, once as the youngest and
        # again as the middle generation.
        gc.freeze()
        gc.unfreeze()
        if enabled:
            gc.enable()


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within, SIGTERM does what Ctrl-C does: it raises :class:`KeyboardInterrupt` in the main thread.

    ``kill PID`` and a CI runner's cancel send SIGTERM; by default it ends the process at once, leaving
    temp files, worker processes and their semaphores behind. As an interrupt it unwinds through the
    same cleanup as Ctrl-C, and the command exits 130. Outside the main thread this does nothing (only
    the main thread may set handlers).
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_with(pid: int, *, busy: threading.Lock | None = None, grace: float = 60.0) -> None:
    """End this process once process ``pid`` has ended, from a daemon thread.

    For a batch's workers: their parent is the forkserver, not the batch, and a queue they all hold
    keeps each other's pipes open, so a killed batch would leave them (and the forkserver and resource
    tracker, which wait for them) running for ever, holding the caller's stdout and stderr. ``busy``
    is held while a file is in work: that file is finished first (output, manifest, journal), for at
    most ``grace`` seconds.
    """
    import threading

    def watch() -> None:
        _wait_gone(pid)
        if busy is not None:
            busy.acquire(timeout=grace)
        os._exit(1)

    threading.Thread(target=watch, name="ctxc-exit-with", daemon=True).start()


def _wait_gone(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)  # Linux 5.3+: readable once the process has ended, no polling
    except (AttributeError, OSError):
        while _alive(pid):  # elsewhere, or already gone: ask once a second
            time.sleep(1.0)
        return
    try:
        import select

        select.select([fd], [], [])
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
