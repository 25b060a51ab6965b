"""The analysis cache: a file's scan, stored by the hash of the file's content.

A scan depends only on the file's bytes, the tokenizer, the read options and ctxc's code, so CI
re-analyzing unchanged logs finds it under a key of exactly those. Entries live in ``scans/`` beside
the token count cache, written atomically; any error reading or writing them is ignored (logged). The
cache is bounded: each of its 256 folders keeps its ``_FOLDER_LIMIT`` most recently used entries.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

import orjson

from ctxc.model import Boundary, Usage
from ctxc.output import write_atomic
from ctxc.reader import ReadOptions
from ctxc.report import Scan
from ctxc.system import analysis_entry, cache_dir, identity_record, warn_once
from ctxc.validate import Problem

log = logging.getLogger(__name__)
#: Bump when the stored layout changes (the fingerprint of ctxc's modules, its version's among them, is in
#: the key too).
_LAYOUT = 10  # 10: the key hashes the file's content hash, which its identity records
#: How long a file must have been unchanged before its identity stands in for its content hash.
_STILL_NS = 2_000_000_000
#: Entries each of the cache's 256 folders keeps (a scan, and a file's identity record, are one each):
#: a store removes the least recently used beyond it, so a run's work stays small however many logs CI
#: has analyzed, and the cache holds at most 256 times this.
_FOLDER_LIMIT = 128
#: Files of the folder ctxc before December 2026 kept scans in (``analyses/``, which no version reads
#: any more) removed per process that stores a scan, until it is gone.
_OLD_FOLDER_STEP = 1000


def scan_key(
    path: str | os.PathLike[str], tokenizer: str, input_format: str | None, options: ReadOptions
) -> str | None:
    """The cache key of a file's scan (a hash of its content and the settings), or None when the file
    cannot be read or is not a regular file (a pipe is read once, by the scan).

    The content hash is also recorded under the file's identity (path, device, inode, size, mtime and
    ctime in ns; any write changes the ctime), once the file has been still for two seconds, so a write
    in the same clock tick as the hashing cannot go unnoticed; a later run reads it instead of the file.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    record = identity_record(path, st)
    content = None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        content = record.read_text(encoding="ascii").strip()
        _mark_used(record)
    if not (content and _is_hash(content)):
        try:
            with open(path, "rb") as handle:
                content = hashlib.file_digest(handle, lambda: hashlib.blake2b(digest_size=20)).hexdigest()
        except OSError:
            return None
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _STILL_NS:
            _write_atomic(record, content.encode())
    read = f"{input_format}|{options.skip_invalid}|{options.max_line_bytes}"
    settings = f"{_LAYOUT}|{_code_fingerprint()}|{tokenizer}|{read}"
    return hashlib.blake2b(f"{settings}|{content}".encode(), digest_size=20).hexdigest()


@functools.cache
def _code_fingerprint() -> str:
    """The names, sizes and modification times of ctxc's modules, hashed: a scan made by other code (an
    editable install after a pull, a reinstall under the same version) is not read."""
    digest = hashlib.blake2b(digest_size=8)
    folders = [os.path.dirname(__file__)]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir() and entry.name != "__pycache__":
                    folders.append(entry.path)
                elif entry.name.endswith(".py"):
                    st = entry.stat()
                    digest.update(f"{entry.path}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _warn(what: str, exc: BaseException) -> None:
    warn_once(log, f"analysis cache: {what}", "ctxc: warning: %s: %s", what, exc)


def _write_atomic(target: Path, data: bytes) -> None:
    try:
        write_atomic(target, data, sync=False)  # a cache: a lost entry is recomputed
    except OSError as exc:
        _warn("not caching the analysis", exc)
        return
    _keep_bounded(target.parent)
    if (root := cache_dir()) not in _old_folder_gone:
        _old_folder_gone.add(root)
        _remove_old_folder(root / "analyses")


def _mark_used(entry: Path) -> None:
    """Give ``entry`` the time of now: the folder bound removes the least recently used first."""
    with contextlib.suppress(OSError):
        os.utime(entry)


def _keep_bounded(folder: Path) -> None:
    """Remove the least recently used entries of ``folder`` beyond :data:`_FOLDER_LIMIT` (a temp file a
    killed writer left is old, and goes first)."""
    try:
        with os.scandir(folder) as listing:
            entries = list(listing)
    except OSError:
        return
    if len(entries) <= _FOLDER_LIMIT:
        return
    used: list[tuple[int, str]] = []
    for entry in entries:
        with contextlib.suppress(OSError):
            used.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.path))
    used.sort()
    for _, path in used[: len(used) - _FOLDER_LIMIT]:
        with contextlib.suppress(OSError):  # another process removed it first
            os.unlink(path)


#: Cache folders whose old scan folder this process has removed a step of.
_old_folder_gone: set[Path] = set()


def _remove_old_folder(old: Path) -> None:
    """Remove up to :data:`_OLD_FOLDER_STEP` of the entries an older ctxc left in ``old``, then the folder
    once it is empty. Only files named as ctxc named them go: a folder of that name that is not ctxc's
    loses nothing."""
    budget = _OLD_FOLDER_STEP
    for folder in (old / "by-stat", old):
        with contextlib.suppress(OSError), os.scandir(folder) as listing:
            for entry in listing:
                if budget == 0:
                    return
                budget -= 1
                with contextlib.suppress(OSError):  # another process removed it first
                    if _left_by_old_ctxc(entry):
                        os.unlink(entry.path)
        with contextlib.suppress(OSError):  # only once empty
            folder.rmdir()


def _left_by_old_ctxc(entry: os.DirEntry[str]) -> bool:
    """A scan (``<hash>.json``), an identity record (``<hash>``), or a temp file an hour old."""
    if entry.name.startswith(".tmp-"):
        return time.time() - entry.stat(follow_symlinks=False).st_mtime > 3600
    return _is_hash(entry.name.removesuffix(".json"))


def _is_hash(name: str) -> bool:
    return len(name) == 40 and all(c in "0123456789abcdef" for c in name)


def load_scan(key: str, path: str) -> Scan | None:
    """The cached scan for ``key`` (reported under ``path``, the name the user gave), if there is one."""
    try:
        entry = analysis_entry(f"{key}.json")
        data = orjson.loads(entry.read_bytes())
        _mark_used(entry)
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        _warn("ignoring an unreadable analysis cache entry", exc)
        return None
    try:
        return Scan(
            path=path,
            format=data["format"],
            tokenizer=data["tokenizer"],
            rows=tuple(tuple(r) for r in data["rows"]),
            usage=tuple(Usage(**u) for u in data["usage"]),
            boundaries=tuple(
                Boundary(**{**b, **{k: tuple(b.get(k, ())) for k in ("abandoned", "unsent_thinking")}})
                for b in data["boundaries"]
            ),
            problems=tuple(Problem(**p) for p in data["problems"]),
            skipped_lines=int(data["skipped_lines"]),
            sidechains=tuple(int(c) for c in data["sidechains"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        _warn("ignoring a malformed analysis cache entry", exc)
        return None


def store_scan(key: str, scan: Scan) -> None:
    doc: dict[str, Any] = {
        "format": scan.format,
        "tokenizer": scan.tokenizer,
        "rows": scan.rows,
        "usage": [_fields(u) for u in scan.usage],
        # A scan's boundaries carry no messages (their cost is in carried_tokens).
        "boundaries": [{k: v for k, v in _fields(b).items() if k != "carried"} for b in scan.boundaries],
        "problems": [_fields(p) for p in scan.problems],
        "skipped_lines": scan.skipped_lines,
        "sidechains": scan.sidechains,
    }
    _write_atomic(analysis_entry(f"{key}.json"), orjson.dumps(doc))


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}
