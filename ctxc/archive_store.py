"""The archive's store: every original is stored before any output is written, so nothing is lost.
Objects (``objects/ab/ab12...``) are named by their sha256 and written by temp file + rename;
``manifest.jsonl`` has one line per run. All of it is 0700/0600. See docs/archive-and-search.md."""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import orjson

from ctxc._version import __version__
from ctxc.errors import ArchiveError, OutputError, UsageError
from ctxc.output import PRIVATE_DIR, Data, private_dir, write_atomic
from ctxc.reader import Spool
from ctxc.system import pid_alive, warn_once
from ctxc.terminal import one_line

if TYPE_CHECKING:
    from ctxc.model import Transcript

log = logging.getLogger(__name__)

#: A project-local archive, used where it exists (in the current directory or a parent).
LOCAL_ARCHIVE = Path(".ctxc") / "archive"
MIN_PREFIX = 12
#: How summaries and placeholders cite what they replaced; ``ctxc restore``/``show`` parse it back.
CITATION_RE = re.compile(r"ctxc archive ([0-9a-f]{12,64})(?: messages (\d+)(?:-(\d+))?)?")


def is_archive(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds an archive: a manifest beside its objects (False where it cannot be
    looked into: ``os.path`` answers so, where ``Path.is_file`` raises)."""
    manifest, objects = os.path.join(directory, "manifest.jsonl"), os.path.join(directory, "objects")
    return os.path.isfile(manifest) and os.path.isdir(objects)


def archive_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``--archive``, else ``$CTXC_ARCHIVE``, else ``.ctxc/archive`` here or in a parent, else the user's."""
    chosen = explicit or os.environ.get("CTXC_ARCHIVE")
    if str(chosen) == "-":  # it would make a folder named "-" here
        raise UsageError(
            "the archive is a folder, not - (give its path with {archive} or $CTXC_ARCHIVE)",
            options=("archive",),
        )
    if chosen and not isinstance(chosen, str | os.PathLike):
        raise UsageError(f"the archive is a folder's path, not {chosen!r}", options=("archive",))
    if chosen:
        return Path(chosen)
    here = Path.cwd()
    for directory in (here, *here.parents):
        if (directory / LOCAL_ARCHIVE).is_dir():
            return directory / LOCAL_ARCHIVE
    data = os.environ.get("XDG_DATA_HOME")
    return (Path(data) if data else Path.home() / ".local" / "share") / "ctxc" / "archive"


def sha256_hex(data: Data | Iterable[bytes]) -> str:
    if isinstance(data, Spool):
        return data.hexdigest()
    digest = hashlib.sha256()
    for part in [data] if isinstance(data, bytes) else data:
        digest.update(part)
    return digest.hexdigest()


def citation(archive_id: str, first: int | None = None, last: int | None = None) -> str:
    """The marker text placed in outputs: ``ctxc archive <id12> messages 3-17``."""
    short = archive_id[:MIN_PREFIX]
    if first is None:
        return f"ctxc archive {short}"
    # Below 0: messages a log's compaction record carries, copies of its history from message 0 on.
    first, last = max(first, 0), None if last is None else max(last, 0)
    span = f"{first}" if last is None or last == first else f"{first}-{last}"
    return f"ctxc archive {short} messages {span}"


PRIVATE_FILE = 0o600


def tighten(path: Path, mode: int) -> None:
    """Take group and other permissions off ``path`` if it has any (best effort)."""
    with contextlib.suppress(OSError):
        if stat.S_IMODE(path.stat().st_mode) & ~mode:
            path.chmod(mode)


def open_private(path: Path, mode: str = "ab") -> BinaryIO:
    """Open an archive file for appending (``ab``) or reading and appending (``a+b``), 0600."""
    flags = os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (os.O_RDWR if "+" in mode else os.O_WRONLY)
    fd = os.open(path, flags, PRIVATE_FILE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & ~PRIVATE_FILE:
            with contextlib.suppress(OSError):
                os.fchmod(fd, PRIVATE_FILE)
        return cast(BinaryIO, os.fdopen(fd, mode))
    except BaseException:
        os.close(fd)
        raise


def private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 if it is missing, else tighten it, with SQLite's companion files.
    An existing file is never opened: closing a descriptor of a database drops every POSIX lock the process
    holds on it, and another process closing its connection would then delete the WAL under ours."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, PRIVATE_FILE))
    for extra in ("", "-wal", "-shm", "-journal"):
        tighten(path.with_name(path.name + extra), PRIVATE_FILE)


#: Temp files of stores in progress are ``.tmp-<pid>-<random>``.
TMP_PREFIX = ".tmp-"
#: A temp file without a pid in its name (ctxc before December 2026) older than this is a leftover.
_LEGACY_TMP_AGE = 3600.0
#: (pid, archive root) pairs whose objects folder was prepared.
_prepared: set[tuple[int, str]] = set()
#: Objects stored inside :func:`discard_new_objects_on_failure` (in this thread or task), or None.
_created: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar("ctxc_created", default=None)


def sweep_dead_temps(objects: Path) -> None:
    """Remove the temp files of stores whose process is gone from every bucket under ``objects``."""
    for path in objects.glob(f"*/{TMP_PREFIX}*"):
        pid, sep, _ = path.name[len(TMP_PREFIX) :].partition("-")
        with contextlib.suppress(OSError):
            if sep and pid.isdigit():
                dead = int(pid) != os.getpid() and not pid_alive(int(pid))
            else:
                dead = time.time() - path.lstat().st_mtime > _LEGACY_TMP_AGE
            if dead:
                path.unlink()


@contextlib.contextmanager
def discard_new_objects_on_failure() -> Iterator[None]:
    """Remove the objects the body stored (in this thread) if it raises: a failed run's offloads would be
    orphans. Nested, the outer one takes over what the inner one stored once the inner body succeeds."""
    outer = _created.get()
    created: list[Path] = []
    token = _created.set(created)
    try:
        yield
    except BaseException:
        for path in created:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    else:
        if outer is not None:
            outer.extend(created)
    finally:
        _created.reset(token)


#: How long a command waits for a lock another process holds before it gives up (a stopped run, say).
LOCK_WAIT_SECONDS = 60.0


class LockTimeout(ArchiveError):
    """Another process held a lock past the wait."""


@contextlib.contextmanager
def exclusive_lock(path: Path, *, wait: bool = True, seconds: float = LOCK_WAIT_SECONDS) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path``, waiting at most ``seconds`` (then :class:`LockTimeout`);
    without ``wait``, yield False at once, holding nothing, if another process holds it."""
    try:
        private_dir(path.parent)
        lock = open_private(path, "a+b")
    except OSError as exc:  # a read-only archive, say
        raise ArchiveError(
            f"cannot take the lock {path.name}: {exc.strerror or exc}", path=str(path)
        ) from exc
    with lock:
        if not _take(lock.fileno(), seconds if wait else 0.0):
            if wait:
                raise LockTimeout(
                    f"another process has held {path.name} for {seconds:g} s (a stopped ctxc?); "
                    "try again once it ends",
                    path=str(path),
                )
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _take(fd: int, seconds: float) -> bool:
    """Whether the flock on ``fd`` was taken within ``seconds``: polled, since a blocking flock has no
    timeout, more slowly the longer it waits."""
    deadline, pause = time.monotonic() + seconds, 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.1)


def append_jsonl(path: Path, doc: dict[str, Any]) -> None:
    """Append ``doc`` to ``path`` as one line, in one write under ``<name>.lock``, fsynced."""
    line = orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS) + b"\n"
    with exclusive_lock(path.with_suffix(".lock")), open_private(path, "a+b") as handle:
        if end := handle.seek(0, os.SEEK_END):
            handle.seek(end - 1)
            if handle.read(1) != b"\n":  # a line torn by a killed writer: this one must not join it
                line = b"\n" + line
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The objects of a JSON-lines file with their line numbers; a line torn by a crash is skipped."""
    return jsonl_objects(path.read_bytes()) if path.exists() else iter(())


def jsonl_objects(data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`read_jsonl` of bytes read already."""
    for n, raw in enumerate(data.splitlines(), 1):
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            yield n, entry


@dataclass(frozen=True, slots=True)
class ArchiveStore:
    """The objects and the manifest; :class:`ctxc.archive.Archive` adds the search index beside them."""

    root: Path

    def __post_init__(self) -> None:
        if not isinstance(self.root, Path):  # Archive("folder"), as open() takes it
            object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def open(cls, explicit: str | os.PathLike[str] | None = None) -> ArchiveStore:
        return cls(archive_root(explicit))

    def object_path(self, digest: str) -> Path:
        return self.root / "objects" / digest[:2] / digest

    def object_id(self, data: Data) -> str:
        return sha256_hex(data)

    def store(self, data: Data, digest: str | None = None, *, sync: bool = True) -> str:
        """Store bytes (or the parts they join to) under their sha256 (``digest`` if known), idempotent and
        atomic; return the id. ``sync`` waits for the disk, as an original must."""
        digest = digest or sha256_hex(data)
        path = self.object_path(digest)
        size = sum(map(len, data)) if isinstance(data, list) else len(data)
        existed = path.exists()
        if existed and path.stat().st_size == size and _file_sha256(path) == digest:
            return digest
        with self._writing():  # new, or a damaged copy (a flipped bit keeps the size) made whole again
            write_atomic(path, data, sync=sync, temp=self._temp(path.parent))
        if (created := _created.get()) is not None and not existed:
            created.append(path)
        return digest

    def spool(self) -> Spool:
        """A spool to read an original into: a temp file among the objects, which :meth:`store` moves."""
        with self._writing():
            return Spool(self._temp(self.root / "objects" / "tmp"))

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Once per process and archive, make the objects folder private and sweep the temp files of
        killed stores; an OSError in the body is an ArchiveError."""
        try:
            key = (os.getpid(), str(self.root))
            if key not in _prepared:
                objects = private_dir(self.root / "objects")
                tighten(objects, PRIVATE_DIR)
                sweep_dead_temps(objects)
                _prepared.add(key)
            yield
        except OSError as exc:
            raise ArchiveError(
                f"cannot write to the archive: {exc.strerror or exc}", path=str(self.root)
            ) from exc

    @staticmethod
    def _temp(folder: Path) -> Path:
        # Named by this pid, so a store killed midway is swept by the next.
        return private_dir(folder) / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"

    def path_of(self, ref: str) -> Path:
        """The file of an object, given its id or a unique prefix of at least 12 hex characters."""
        return self.object_path(self.resolve(ref))

    def resolve(self, ref: str) -> str:
        ref = ref.strip().lower()
        if not re.fullmatch(rf"[0-9a-f]{{{MIN_PREFIX},64}}", ref):
            raise ArchiveError(f"not an archive id: {ref!r} (ids are {MIN_PREFIX}+ hex characters)")
        if not self.root.is_dir():  # a mistyped --archive: the id is not what is wrong
            raise ArchiveError(
                f"no archive at {self.root} (compact something first, or pass {{archive}})",
                options=("archive",),
            )
        if len(ref) == 64:
            if self.object_path(ref).exists():
                return ref
            raise ArchiveError(f"archive {self.root} holds no object {ref[:MIN_PREFIX]}")
        bucket = self.root / "objects" / ref[:2]
        found = bucket.glob(ref + "*") if bucket.is_dir() else []
        matches = sorted(p.name for p in found)  # a temp file's name starts with a dot, not hex
        if not matches:
            raise ArchiveError(f"archive {self.root} holds no object {ref}")
        if len(matches) > 1:
            raise ArchiveError(f"archive id prefix {ref} is ambiguous ({len(matches)} objects)")
        return matches[0]

    def read(self, ref: str) -> bytes:
        path = self.path_of(ref)
        if sha256_hex(data := path.read_bytes()) != path.name:
            raise ArchiveError(
                f"archive object {path.name[:MIN_PREFIX]} is corrupt (sha256 mismatch)", path=str(path)
            )
        return data

    def check_manifest(self) -> None:
        """Raise :class:`ArchiveError` now if :meth:`record_run` is bound to fail, before any output."""
        path = self.root / "manifest.jsonl"
        if path.exists() and not path.is_file():
            raise ArchiveError("the manifest is not a file", path=str(path))
        if path.exists() and not os.access(path, os.W_OK):
            raise ArchiveError("cannot write the manifest: permission denied", path=str(path))

    def refuse_output_inside(self, output: str) -> None:
        """Raise :class:`OutputError` if ``output`` is in the archive, where it would replace an original
        or the record of every run."""
        if output == "-":
            return
        root, target = self.root.resolve(), Path(output).resolve()
        if target == root or root in target.parents:
            raise OutputError(
                f"refusing to write into the archive ({self.root}); write elsewhere", path=output
            )

    def record_run(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Append one manifest line (under the lock, one write, fsynced); an input file named relative
        to this directory is also recorded by its absolute path, ``input_abspath``."""
        full = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "ctxc_version": __version__,
            **entry,
        }
        typed = full.get("input_path")
        if isinstance(typed, str) and (absolute := absolute_path(typed)) != typed:
            full["input_abspath"] = absolute
        try:
            append_jsonl(self.root / "manifest.jsonl", full)
        except OSError as exc:
            raise ArchiveError(
                f"cannot write the manifest: {exc.strerror or exc}", path=str(self.root)
            ) from exc
        return full

    # A store keeps no search index; an ``Archive`` does, and adds originals and offloaded outputs to it.
    def index(self, archive_id: str, transcript: Transcript, *, source: str | None = None) -> None: ...

    def index_blobs(self, origin: str, notes: Sequence[tuple[str, int, str]]) -> None: ...

    def manifest(self) -> list[dict[str, Any]]:
        return self._manifest()[0]

    def _manifest(self) -> tuple[list[dict[str, Any]], list[int]]:
        """The manifest's runs, and the numbers of its damaged lines (each said once, then skipped)."""
        path = self.root / "manifest.jsonl"
        data = path.read_bytes() if path.exists() else b""
        runs = list(jsonl_objects(data))
        read = {n for n, _ in runs}
        damaged = [n for n, raw in enumerate(data.splitlines(), 1) if raw.strip() and n not in read]
        for n in damaged:
            warn_once(
                log,
                f"manifest {path}:{n}",
                "ctxc: warning: %s line %d is damaged (not a JSON object) and was skipped: restore and "
                "search do not know the run it recorded; mend or delete that line",
                one_line(str(path)),
                n,
            )
        return [e for _, e in runs], damaged

    def find_original(self, data: bytes) -> str | None:
        """The archive id of the first original ``data`` (an output, maybe compacted again) was made from."""
        digest = sha256_hex(data)
        made_from: dict[str, str] = {}  # output sha256 -> input sha256, the newest run winning
        runs, damaged = self._manifest()
        for entry in runs:
            out, src = entry.get("output_sha256"), entry.get("input_sha256")
            if isinstance(out, str) and isinstance(src, str) and out != src:
                made_from[out] = src
        if digest in made_from:
            return _first(digest, made_from)
        match = CITATION_RE.search(data.decode("utf-8", errors="replace"))
        if self.object_path(digest).exists():
            if damaged and match:  # an archived original, or an output whose run was on the damaged line
                raise ArchiveError(
                    f"line {damaged[0]} is damaged, so this file may be an original or a compacted output "
                    f"(it cites ctxc archive {match.group(1)}): give the id to restore, "
                    f"`ctxc restore {match.group(1)}` or `ctxc restore {digest[:MIN_PREFIX]}`",
                    path=str(self.root / "manifest.jsonl"),
                )
            return digest
        if match:
            return _first(self.resolve(match.group(1)), made_from)
        return None


def absolute_path(name: str) -> str:
    """A file named relative to this directory as its absolute path (so the original's folder is known
    from anywhere: two sessions called ``s.jsonl`` in two folders are told apart); anything else as is."""
    if name and not os.path.isabs(name) and os.path.isfile(name):
        return os.path.abspath(name)
    return name


def recorded_path(entry: Mapping[str, Any]) -> str | None:
    """The path a manifest line says its input was read from: absolute where the run knew it."""
    for key in ("input_abspath", "input_path"):
        if isinstance(value := entry.get(key), str):
            return value
    return None


def _file_sha256(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def _first(digest: str, made_from: dict[str, str]) -> str:
    """Follow output-to-input links from ``digest`` to where they end (stopping at a cycle)."""
    seen = {digest}
    while digest in made_from and made_from[digest] not in seen:
        digest = made_from[digest]
        seen.add(digest)
    return digest


@dataclass(frozen=True, slots=True)
class UnwrittenArchive(ArchiveStore):
    """The archive at ``root`` as a dry run plans against it: the ids and paths storing would give,
    nothing written (so a dry run's offload pointers cost what a real run's do)."""

    def store(self, data: Data, digest: str | None = None, *, sync: bool = True) -> str:
        return digest or sha256_hex(data)
