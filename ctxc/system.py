"""Facts about the machine that several parts of ctxc size their work by, and where it keeps caches."""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import hashlib
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path


@functools.cache
def cpu_count() -> int:
    """Cores this process may use: the affinity mask (a container's or ``taskset``'s share)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cache_dir() -> Path:
    """Where ctxc keeps what it can recompute: ``$CTXC_CACHE_DIR``, else the user's cache folder."""
    if base := os.environ.get("CTXC_CACHE_DIR"):
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ctxc"


def sync_dir(path: str | os.PathLike[str]) -> None:
    """Wait until the entries of folder ``path`` are on disk: a rename into it survives a power cut. A
    folder that cannot be opened or a file system that cannot sync one is skipped; a failing disk raises."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:  # a write-only folder (-wx)
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def identity_record(path: str | os.PathLike[str], st: os.stat_result) -> Path:
    """Where the analysis cache records the content hash of this very file, known by its path, device,
    inode, size, mtime and ctime (ns; any write changes the ctime, which no user tool can set back): a
    file with one has been scanned, so a run needs no counting workers for it."""
    identity = f"{os.path.abspath(path)}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}"
    digest = hashlib.blake2b(f"{identity}|{st.st_ctime_ns}".encode(), digest_size=20).hexdigest()
    return cache_dir() / "analyses" / "by-stat" / digest


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to something other than "", 0, false or no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C back while forking or importing (where it can be lost as "Exception ignored") and
    deliver it right after; called while no other thread runs, so this thread's mask is the process's."""
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
    """Pause the cyclic garbage collector for a bulk read, which makes many containers and no cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # What was read is long-lived: move it to the oldest generation (freeze, then unfreeze into it).
        gc.freeze()
        gc.unfreeze()
        if enabled:
            gc.enable()


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within, SIGTERM raises KeyboardInterrupt in the main thread, so ``kill`` and a CI cancel unwind
    through the same cleanup as Ctrl-C (exit 130)."""
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
    """End this process once process ``pid`` (a batch, whose killed workers would run for ever) has
    ended; a file in work (``busy`` held) is finished first, for at most ``grace`` seconds."""

    def watch() -> None:
        try:
            fd = os.pidfd_open(pid)  # Linux 5.3+: readable once the process has ended, no polling
        except (AttributeError, OSError):
            while pid_alive(pid):  # elsewhere, or already gone: ask once a second
                time.sleep(1.0)
        else:
            select.select([fd], [], [])
            os.close(fd)
        if busy is not None:
            busy.acquire(timeout=grace)
        os._exit(1)

    threading.Thread(target=watch, name="ctxc-exit-with", daemon=True).start()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    # A zombie has ended: a killed worker whose parent died too stays one where nothing reaps orphans.
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


#: The troubles already reported by :func:`warn_once` in this process.
_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(log: logging.Logger, key: str, message: str, *args: object) -> None:
    """Log ``message`` the first time ``key`` comes up in this process: a trouble every file of a batch
    meets alike (an unusable cache or index) is said once."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, *args)
