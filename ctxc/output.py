"""Machine output contracts and safe file writing.

Every ``--format json`` document is an envelope with a ``schema`` string (``ctxc.<command>/<major>``):
the major number changes only when a field is removed or changes meaning, so scripts can rely on it.
Files are written atomically: a temporary file in the target directory, fsync, then ``os.replace``; an
interrupted run leaves the old file (or nothing), never half of a new one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ctxc import __version__
from ctxc.errors import OutputError

SCHEMA_VERSION = 1
#: Commands whose documents changed meaning since version 1: analyze and check measure the live
#: context (after the log's own compaction), no longer the whole file.
_SCHEMA_VERSIONS = {"analyze": 2, "check": 2}
TEMP_SUFFIX = ".ctxc-tmp"


def write_atomic(target: Path, data: bytes, *, sync: bool = True) -> None:
    """Write ``data`` to ``target`` (its directory created if need be) through a temporary file beside
    it and a rename, so a reader sees the old file or the whole new one, never part of it. ``sync``
    waits for the bytes to reach the disk first. Raises ``OSError``: the caller knows what is lost."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def envelope(command: str, **payload: Any) -> dict[str, Any]:
    version = _SCHEMA_VERSIONS.get(command, SCHEMA_VERSION)
    return {"schema": f"ctxc.{command}/{version}", "ctxc_version": __version__, **payload}


def dumps(doc: Any) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def _current_umask() -> int:
    # Linux reports it without changing it; elsewhere set-and-restore (a brief race with other threads
    # creating files, acceptable for a mode bit).
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(target: str) -> int:
    """An existing file keeps its permission bits; a new one gets 0666 less the umask."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~_current_umask()


def check_output(target: str | os.PathLike[str], *, inputs: tuple[str, ...] = ()) -> None:
    """Raise :class:`OutputError` if ``target`` cannot be written: it is one of ``inputs``, or its
    directory is missing. :func:`atomic_output` checks this; a command that writes only after long work
    calls it first, so a bad path fails at once."""
    name = str(target)
    if name == "-":
        return
    for src in inputs:
        if src != "-" and Path(name).exists() and same_file(name, src):
            raise OutputError("refusing to overwrite an input file; choose another -o", path=name)
    directory = Path(name).resolve().parent
    if not directory.is_dir():
        raise OutputError(f"directory {directory} does not exist", path=name)


@contextlib.contextmanager
def atomic_output(target: str | os.PathLike[str], *, inputs: tuple[str, ...] = ()) -> Iterator[BinaryIO]:
    """Open ``target`` for writing atomically (``-`` is stdout). Refuses to overwrite any of ``inputs``."""
    name = str(target)
    if name == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    check_output(name, inputs=inputs)
    directory = Path(name).resolve().parent
    try:
        # The pid in the name lets a later run tell a dead run's leftover from a live run's file.
        fd, tmp = tempfile.mkstemp(
            prefix=f".{Path(name).name}.{os.getpid()}.", suffix=TEMP_SUFFIX, dir=directory
        )
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror or exc}", path=name) from exc
    try:
        # mkstemp creates the file 0600; give it the mode a plain open() would (or the replaced file's).
        os.fchmod(fd, _mode_for(name))
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, name)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"cannot write: {exc.strerror or exc}", path=name) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _pid_alive(pid: int) -> bool:
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


def sweep_stale_temps(directory: str | os.PathLike[str]) -> list[Path]:
    """Remove temp files that killed runs left under ``directory`` (``SIGKILL`` skips every cleanup).

    Only ctxc's own temp files (``.<name>.<pid>.<random>.ctxc-tmp``) whose process is gone are removed;
    a concurrent run's files in progress are left alone.
    """
    removed: list[Path] = []
    root = Path(directory)
    if not root.is_dir():
        return removed
    for tmp in root.rglob(f".*{TEMP_SUFFIX}"):
        parts = tmp.name.split(".")  # ['', name..., pid, random, 'ctxc-tmp']
        if len(parts) >= 5 and parts[-3].isdigit() and not _pid_alive(int(parts[-3])):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    return removed
