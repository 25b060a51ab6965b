"""The analysis cache: a file's scan, stored by the hash of the file's content.

A scan depends only on the file's bytes, the tokenizer, the read options and the ctxc version, so CI
re-analyzing unchanged logs finds it under a key of exactly those. Entries live in ``analyses/`` beside
the token count cache, written atomically; any error reading or writing them is ignored (logged).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

import orjson

from ctxc._version import __version__
from ctxc.model import Boundary, Usage
from ctxc.output import write_atomic
from ctxc.reader import ReadOptions
from ctxc.report import Scan
from ctxc.system import cache_dir, identity_record, warn_once
from ctxc.validate import Problem

log = logging.getLogger(__name__)
#: Bump when the stored layout changes (the ctxc version is in the key as well).
_LAYOUT = 10  # 10: the key hashes the file's content hash, which its identity records
#: How long a file must have been unchanged before its identity stands in for its content hash.
_STILL_NS = 2_000_000_000


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
    if not (content and len(content) == 40 and all(c in "0123456789abcdef" for c in content)):
        try:
            with open(path, "rb") as handle:
                content = hashlib.file_digest(handle, lambda: hashlib.blake2b(digest_size=20)).hexdigest()
        except OSError:
            return None
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _STILL_NS:
            _write_atomic(record, content.encode())
    settings = (
        f"{_LAYOUT}|{__version__}|{tokenizer}|{input_format}|{options.skip_invalid}|{options.max_line_bytes}"
    )
    return hashlib.blake2b(f"{settings}|{content}".encode(), digest_size=20).hexdigest()


def _warn(what: str, exc: BaseException) -> None:
    warn_once(log, f"analysis cache: {what}", "ctxc: warning: %s: %s", what, exc)


def _write_atomic(target: Path, data: bytes) -> None:
    try:
        write_atomic(target, data, sync=False)  # a cache: a lost entry is recomputed
    except OSError as exc:
        _warn("not caching the analysis", exc)


def load_scan(key: str, path: str) -> Scan | None:
    """The cached scan for ``key`` (reported under ``path``, the name the user gave), if there is one."""
    try:
        data = orjson.loads((cache_dir() / "analyses" / f"{key}.json").read_bytes())
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
    _write_atomic(cache_dir() / "analyses" / f"{key}.json", orjson.dumps(doc))


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}
