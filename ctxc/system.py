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
import stat
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
    """Where ctxc keeps what it can recompute: ``$CTXC_CACHE_DIR``, else the user's cache folder. The first
    call for a folder in a process takes group and other permissions off it (:func:`_make_cache_private`)."""
    explicit = os.environ.get("CTXC_CACHE_DIR")
    if explicit:
        root = Path(explicit)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "ctxc"
    if root not in _private_roots:
        _private_roots.add(root)
        _make_cache_private(root, own_root=not explicit)
    return root


#: Cache folders :func:`cache_dir` has made private in this process.
_private_roots: set[Path] = set()
#: The folders ctxc makes in its cache folder (``analyses``: where ctxc before December 2026 kept scans).
_CACHE_FOLDERS = ("scans", "bpe", "analyses", "analyses/by-stat")


def _make_cache_private(root: Path, *, own_root: bool) -> None:
    """Take group and other permissions off the cache folders an older ctxc (or the user, under umask 022)
    left open: ``root`` when it is ctxc's own (the default ``.../ctxc``; a ``$CTXC_CACHE_DIR`` may be a
    shared folder and keeps its mode), and ctxc's folders in it, by name. Only real folders this user owns,
    never through a symlink; when ``root`` is private already, that one lstat is all."""
    try:
        st = os.lstat(root)
    except OSError:
        return  # not made yet: ctxc makes its folders 0700
    if own_root and stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o077:
        return
    for folder in ([root] if own_root else []) + [root / name for name in _CACHE_FOLDERS]:
        _take_away_group_and_other(folder)


def _take_away_group_and_other(folder: Path) -> None:
    try:
        st = os.lstat(folder)
        if not (stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077):
            return
        # Changed through a descriptor: a symlink put in its place meanwhile is not followed.
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # missing, unreadable
        return
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o700)
    except OSError:
        pass  # best effort: the cache works either way
    finally:
        os.close(fd)


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
    return analysis_entry(f"{digest}.identity")


def analysis_entry(name: str) -> Path:
    """Where the analysis cache keeps entry ``name`` (a hex hash and a suffix): in ``scans/``, in one of
    256 folders by the name's first two digits, each of which scancache keeps to a bounded size."""
    return cache_dir() / "scans" / name[:2] / name


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
