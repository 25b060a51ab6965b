"""Index a large original in a process of its own, so that a compaction does not wait for its index.

Indexing an original for ``ctxc search`` costs about 0.1 s of CPU per MB: chunking, FTS5's tokenizer
and the commit. For a 100 MB log that is as long as the whole fifo compaction, and a compaction's
output does not depend on it. So an original of :data:`BACKGROUND_BYTES` or more is handed, once it is
stored, to ``python -m ctxc.search.background``: a process in a session of its own (Ctrl-C on the
compaction does not reach it), at a lower priority, which reads the stored original back and indexes
it. Smaller originals are indexed inline, where that costs less than starting a process.

Background indexers work one at a time: each holds :data:`LOCK_NAME` in the archive while it works,
and a search holds it while it catches up with the manifest, so a search started while an indexer
runs waits for it and then sees everything. (A run indexing a small original inline takes no such
lock: it must not wait behind a large one, and the index's own transactions keep concurrent writers
correct.) Nothing depends on the indexer finishing: if it is killed, the next search indexes what the
manifest lists and the index lacks, and the index's transaction per original
(:meth:`ctxc.search.index.SearchIndex.add`) keeps it whole. Warnings go to :data:`LOG_NAME` in the
archive, since the process has no terminal.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

#: Originals at least this large (bytes) are indexed in the background; indexing a smaller one inline
#: costs under 0.4 s, not much more than the 0.1 s of starting a process to do it.
BACKGROUND_BYTES = 4 << 20
#: The lock file in the archive that the one index writer at a time holds.
LOCK_NAME = "index.lock"
#: Where a background indexer's warnings go (created on the first one).
LOG_NAME = "index.log"

# What this process handed to background indexers, by (archive root, archive id), so that the hook
# after the manifest line (``index_recorded_quietly``) does not index the same original inline.
_handed_off: set[tuple[str, str]] = set()
# Started indexers, kept so they are reaped (not left as zombies of a long-lived library caller).
_children: list[subprocess.Popen[bytes]] = []


def index_later(root: Path, archive_id: str, *, fmt: str, source: str | None) -> None:
    """Start a background process that indexes the stored original ``archive_id`` of archive ``root``."""
    _children[:] = [child for child in _children if child.poll() is None]
    command = [sys.executable, "-m", "ctxc.search.background", str(root), archive_id, fmt, source or ""]
    # The child must run this process's ctxc, wherever that was imported from (a checkout, say).
    home = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (home, os.environ.get("PYTHONPATH")) if p)
    _children.append(
        subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": path},
        )
    )
    _handed_off.add((str(root), archive_id))


def handed_off(root: Path, archive_id: str) -> bool:
    """Whether this process started a background indexer for ``archive_id`` of archive ``root``."""
    return (str(root), archive_id) in _handed_off


@contextlib.contextmanager
def writer_lock(root: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the archive's index lock; yields False at once, holding nothing, if ``wait`` is off and
    another process holds it. The kernel drops the lock when its holder dies."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_NAME, "a+b") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def indexer_running(root: Path) -> bool:
    """Whether an index writer (a background indexer, mostly) holds the archive's lock right now."""
    if not (root / LOCK_NAME).exists():
        return False
    with writer_lock(root, wait=False) as held:
        return not held


def main(argv: list[str] | None = None) -> int:
    """``python -m ctxc.search.background ROOT ARCHIVE_ID FORMAT SOURCE``: index one stored original."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m ctxc.search.background ROOT ARCHIVE_ID FORMAT SOURCE", file=sys.stderr)
        return 2
    root, ident, fmt, source = Path(args[0]), args[1], args[2], args[3]
    with contextlib.suppress(OSError):
        os.nice(10)  # the user's next command comes first
    handler = logging.FileHandler(root / LOG_NAME, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger("ctxc").addHandler(handler)

    import sqlite3

    from ctxc.archive import Archive
    from ctxc.errors import CtxcError
    from ctxc.search import _index_object, _warn
    from ctxc.search.index import SearchIndex

    archive = Archive(root)
    try:
        with writer_lock(root), SearchIndex.for_archive(root) as index:
            if not index.has(ident):
                _index_object(archive, index, ident, {"format": fmt, "input_path": source or None})
    except (CtxcError, OSError, sqlite3.Error, ValueError, RuntimeError) as exc:
        _warn(root, f"original {ident[:12]}", exc)
        return 1
    finally:
        handler.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
