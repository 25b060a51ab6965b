"""Machine output contracts and safe writing: every JSON document is an envelope whose ``schema``
(``ctxc.<command>/<major>``) changes major only when a field goes or changes meaning; files are written
to a temporary file, synced and renamed, so an interrupted run never leaves half of one."""

from __future__ import annotations

import contextlib
import errno
import glob
import io
import os
import re
import select
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO, cast

import orjson

from ctxc._version import __version__
from ctxc.errors import OutputError
from ctxc.reader import Spool
from ctxc.system import pid_alive, sync_dir

SCHEMA_VERSION = 1
#: Documents that changed meaning: analyze and check measure the live context, no longer the whole file.
_SCHEMA_VERSIONS = {"analyze": 2, "check": 2}
TEMP_SUFFIX = ".ctxc-tmp"


#: Bytes, the parts they are made of (written without joining them), or a spool already on disk.
Data = bytes | list[bytes] | Spool


PRIVATE_DIR = 0o700


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents mode 0700, whatever the umask."""
    for d in reversed([p for p in (path, *path.parents) if not p.exists()]):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            d.mkdir(mode=PRIVATE_DIR)
    return path


def write_atomic(
    target: Path, data: Data, *, sync: bool = True, temp: Path | None = None, mode: int = 0o600
) -> None:
    """Replace ``target`` (creating its directory, owner-only) with ``data`` through a temporary file and a
    rename; ``sync`` first waits for the disk, ``temp`` names the (new) temporary file, ``mode`` is the
    file's (owner-only unless given). Raises OSError."""
    private_dir(target.parent)
    if isinstance(data, Spool):
        data.commit(target, sync=sync)
        return
    if temp is None:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
    else:
        fd, tmp = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), str(temp)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode != 0o600:
                os.fchmod(fd, mode)
            handle.writelines(data if isinstance(data, list) else [data])
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
        if sync:
            sync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def envelope(command: str, **payload: Any) -> dict[str, Any]:
    version = _SCHEMA_VERSIONS.get(command, SCHEMA_VERSION)
    return {"schema": f"ctxc.{command}/{version}", "ctxc_version": __version__, **payload}


#: DEL, the C1 controls and the bidi embeddings, overrides and isolates (U+202A-E, U+2066-9) in UTF-8,
#: which orjson writes raw (JSON allows it) and a terminal may obey (U+009B can be read as CSI; U+202E
#: reorders what is shown): :func:`dumps` writes them as ``\u`` escapes, the same JSON.
_RAW_CONTROL = re.compile(b"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def _escaped(match: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(match[0].decode())


def dumps(doc: Any) -> bytes:
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    # The usual case, told by two quick scans rather than the regex, which tries each byte in turn.
    if data.isascii() and b"\x7f" not in data:
        return data
    return _RAW_CONTROL.sub(_escaped, data)


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


def _mode_for(target: str, like: str | None) -> int:
    """The permission bits ``cp`` would give a new output (the input ``like``'s, else 0666, less the umask);
    a replaced file keeps its own, less any the input lacks: never more readable than the input."""
    source = None
    if like is not None and like != "-":
        with contextlib.suppress(OSError):
            source = stat.S_IMODE(os.stat(like).st_mode) & 0o777
    try:
        existing = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        base = 0o666 if source is None else source
        return base & ~_current_umask()
    return existing if source is None else existing & source


def check_output(target: str | os.PathLike[str], *, inputs: tuple[str, ...] = ()) -> None:
    """Raise :class:`OutputError` if ``target`` is one of ``inputs`` or its directory is missing; a command
    that writes only after long work calls it first, so a bad path fails at once."""
    name = str(target)
    if name == "-":
        return
    for src in inputs:
        if src != "-" and Path(name).exists() and same_file(name, src):
            raise OutputError("refusing to overwrite an input file; write the output elsewhere", path=name)
    directory = Path(name).resolve().parent
    if not directory.is_dir():
        raise OutputError(f"directory {directory} does not exist", path=name)


# Every byte for stdout is written whole or raises: with PYTHONUNBUFFERED, sys.stdout.buffer is the raw
# file, whose write() returns a short count on a full disk, and a text write through it loses the rest.

#: Standard descriptors closed when ctxc started (now /dev/null): ``-o /dev/stdout`` to one is an error.
_CLOSED_AT_START: set[int] = set()


class _ClosedStdout:
    """``sys.stdout`` when the process was started with it closed (``>&-``): any write is an error."""

    encoding = "utf-8"
    errors = "strict"

    @property
    def buffer(self) -> _ClosedStdout:
        return self

    def write(self, data: object) -> int:
        raise OutputError("stdout is closed; redirect it to a file, or write one with -o")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("stdout is closed")


def guard_standard_streams() -> None:
    """Give closed standard descriptors ``/dev/null``, so a file ctxc opens never takes number 1 (where
    stray output would land in it); writing to a closed stdout, or reading a closed stdin, stays an error."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _CLOSED_AT_START.add(fd)
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = cast(TextIO, _ClosedStdout())


class ReaderGone(Exception):
    """The reader of stdout went away (``| head``): the CLI stops quietly. Not an OSError or a
    BrokenPipeError, which click or rich would turn into exit 1."""


def _write_failure(exc: OSError, name: str | None = None) -> Exception:
    """OutputError naming ``name``; None is stdout, whose reader going away is :class:`ReaderGone`."""
    if name is None and isinstance(exc, BrokenPipeError):
        return ReaderGone()
    return OutputError(f"cannot write: {exc.strerror or exc}", path=name or "stdout")


def make_parents(target: str) -> None:
    """Create the folders ``target`` goes in (a batch's mirrored tree); failing, an OutputError naming it."""
    folder = Path(target).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, no permission: exit 7, not an internal error
        raise OutputError(f"cannot create the folder {folder}: {exc.strerror or exc}", path=target) from exc


@contextlib.contextmanager
def _write_errors(name: str | None = None) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise _write_failure(exc, name) from exc


def _wait_writable(fd: int) -> None:
    # poll, not select: select cannot watch a descriptor numbered 1024 or more.
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    poller.poll()


def _write_all(stream: Any, data: bytes) -> None:
    """Write all of ``data`` to a binary stream, buffered or raw, blocking or not."""
    rest: bytes | memoryview = data
    while rest:
        try:
            n = stream.write(rest)
        except BlockingIOError as exc:  # a non-blocking pipe is full: wait until it drains
            rest = memoryview(rest)[exc.characters_written :]
            _wait_writable(stream.fileno())
            continue
        if n is None:  # a raw non-blocking stream took nothing
            _wait_writable(stream.fileno())
            continue
        if n == len(rest):  # the usual case: all of it at once
            return
        if n == 0:
            raise OSError(errno.EIO, "the stream took no bytes")
        rest = memoryview(rest)[n:]


def write_stdout(data: bytes | str) -> None:
    """Write ``data`` to stdout, all of it, and flush: a full disk or a closed stdout raises
    :class:`OutputError`, a reader that went away :class:`ReaderGone`."""
    stream = sys.stdout
    with _write_errors():
        stream.flush()  # whatever was written as text goes first
        if isinstance(data, str):
            data = data.encode(stream.encoding or "utf-8", stream.errors or "strict")
        _write_all(stream.buffer, data)
        stream.buffer.flush()


def flush_stdout() -> None:
    """Flush stdout, raising :class:`OutputError` if what was written cannot reach it."""
    with _write_errors():
        sys.stdout.flush()


class CheckedStdout:
    """stdout for rich consoles (text, each write flushed) and :func:`atomic_output`'s ``-`` (bytes): every
    byte written, or OutputError (:class:`ReaderGone` when the reader went away)."""

    def write(self, data: str | bytes) -> int:
        if isinstance(data, str):
            write_stdout(data)
            return len(data)
        try:
            _write_all(sys.stdout.buffer, data)
        except OSError as exc:  # inline rather than _write_errors: formats.dump writes each line
            raise _write_failure(exc) from exc
        return len(data)

    def flush(self) -> None:
        with _write_errors():
            sys.stdout.buffer.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()

    @property
    def encoding(self) -> str:
        return sys.stdout.encoding or "utf-8"


#: Names of this process's own descriptors: written through a copy of the descriptor, as a shell does.
_OWN_FD = re.compile(r"/dev/(?:fd/(\d+)|(stdout|stderr))|/proc/(?:self|thread-self)/fd/(\d+)")


def _open_directly(name: str) -> BinaryIO | None:
    """A handle on ``name`` if it must be written in place, not replaced: an existing device, FIFO or
    socket, or one of this process's descriptors (``/dev/stdout`` appended to a log); None for a file."""
    own = _OWN_FD.fullmatch(os.path.abspath(name))
    with _write_errors(name):
        if own:
            number = own[1] or own[3]
            fd = int(number) if number else (1 if own[2] == "stdout" else 2)
            if fd in _CLOSED_AT_START:
                raise OutputError("that descriptor is closed", path=name)
            return os.fdopen(os.dup(fd), "wb")
        try:
            if stat.S_ISREG(os.stat(name).st_mode):
                return None
        except FileNotFoundError:
            return None
        # No O_TRUNC (a device or FIFO has nothing to cut) and no O_CREAT (it exists).
        return os.fdopen(os.open(name, os.O_WRONLY | os.O_CLOEXEC), "wb")


@contextlib.contextmanager
def atomic_output(
    target: str | os.PathLike[str],
    *,
    inputs: tuple[str, ...] = (),
    like: str | None = None,
    before_commit: Callable[[], object] = lambda: None,
    swept: bool = False,
) -> Iterator[BinaryIO]:
    """Open ``target`` (``-`` is stdout) to write, never one of ``inputs``. A file is written beside itself
    with ``like``'s permission bits (as ``cp``) and renamed into place once whole, after ``before_commit``
    (whose failure leaves the target as it was); a device or FIFO is written directly. ``swept``: the
    caller swept the folder's stale temporary files already (a batch, once: listing a folder of
    thousands of outputs for each file costs as much as the file). Raises OutputError."""
    name = str(target)
    if name == "-":
        sink = CheckedStdout()
        yield cast(BinaryIO, sink)
        sink.flush()
        before_commit()
        return
    check_output(name, inputs=inputs)
    direct = _open_directly(name)
    if direct is not None:
        with _write_errors(name), direct:
            yield direct
            direct.flush()
        before_commit()
        return
    # A link is followed, as a shell's > or cp does: the file it names is replaced, not the link.
    final = Path(name).resolve()
    if not swept:
        sweep_stale_temps(final.parent, final.name)  # a killed run's (SIGKILL runs no cleanup)
    with _write_errors(name):
        # The pid in the name lets a later run tell a dead run's leftover from a live run's file.
        fd, tmp = tempfile.mkstemp(
            prefix=f".{final.name}.{os.getpid()}.", suffix=TEMP_SUFFIX, dir=final.parent
        )
    try:
        with _write_errors(name):
            os.fchmod(fd, _mode_for(str(final), like))  # mkstemp made it 0600
            with os.fdopen(fd, "wb") as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
        before_commit()
        with _write_errors(name):
            os.replace(tmp, final)
            sync_dir(final.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def sweep_stale_temps(directory: str | os.PathLike[str], name: str | None = None) -> None:
    """Remove the temporary files (``.<name>.<pid>.<random>.ctxc-tmp``) that killed runs left under
    ``directory`` (only those of the file ``name`` in it, when given); a live process's are left alone."""
    root = Path(directory)
    if not root.is_dir():
        return
    found = root.glob(f".{glob.escape(name)}.*{TEMP_SUFFIX}") if name else root.rglob(f".*{TEMP_SUFFIX}")
    for tmp in found:
        parts = tmp.name.split(".")  # ['', name..., pid, random, 'ctxc-tmp']
        if len(parts) >= 5 and parts[-3].isdigit() and not pid_alive(int(parts[-3])):
            with contextlib.suppress(OSError):
                tmp.unlink()
