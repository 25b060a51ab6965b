"""Index large originals in a process of their own (``python -m ctxc.search.indexer``), so that a
compaction does not wait for its index: queued in the archive, indexed by one indexer at a time holding
:data:`LOCK_NAME`, and taken out of the queue only once indexed. See docs/archive-and-search.md."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ctxc.archive_store import LOCK_WAIT_SECONDS, exclusive_lock, jsonl_objects, open_private

#: Originals at least this large (bytes) are indexed in the background (a smaller one costs less inline).
BACKGROUND_BYTES = 4 << 20
LOCK_NAME = "index.lock"
QUEUE_NAME = "index.queue"
LOG_NAME = "index.log"

# Started indexers, kept so they are reaped (not left as zombies of a long-lived library caller).
_children: list[subprocess.Popen[bytes]] = []


def index_later(root: Path, archive_id: str, *, fmt: str, source: str | None) -> None:
    """Queue the stored original ``archive_id`` for the background indexer, and start one."""
    with _queue(root) as queue:
        queue.write(orjson.dumps({"archive_id": archive_id, "format": fmt, "input_path": source}) + b"\n")
    start_indexer(root)


def start_indexer(root: Path) -> None:
    """Start a background indexer for archive ``root`` if originals are queued and none is running."""
    if not queued(root) or indexer_running(root):
        return
    _children[:] = [child for child in _children if child.poll() is None]
    # The child must run this process's ctxc, wherever that was imported from (a checkout, say).
    home = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (home, os.environ.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "ctxc.search.indexer", str(root)]
    null, env = subprocess.DEVNULL, {**os.environ, "PYTHONPATH": path}
    child = subprocess.Popen(command, stdin=null, stdout=null, stderr=null, start_new_session=True, env=env)
    _children.append(child)


@contextlib.contextmanager
def _queue(root: Path) -> Iterator[BinaryIO]:
    path = root / QUEUE_NAME
    with exclusive_lock(path), open_private(path, "a+b") as queue:
        yield queue


def queued(root: Path) -> bool:
    try:
        return (root / QUEUE_NAME).stat().st_size > 0
    except OSError:
        return False


def queue_entries(root: Path) -> list[dict[str, Any]]:
    """What the queue holds, oldest first (a line torn by a crash is skipped)."""
    if not queued(root):
        return []
    with _queue(root) as queue:
        return _entries(queue)


def _entries(queue: BinaryIO) -> list[dict[str, Any]]:
    queue.seek(0)
    return [e for _, e in jsonl_objects(queue.read()) if isinstance(e.get("archive_id"), str)]


def dequeue(root: Path, done: set[str]) -> None:
    """Take the originals ``done`` (archive ids) out of the queue, keeping any queued meanwhile."""
    if not done:
        return
    with _queue(root) as queue:
        # A torn line goes too: the manifest still lists its run, and search catches up with that.
        kept = [orjson.dumps(e) + b"\n" for e in _entries(queue) if e["archive_id"] not in done]
        queue.seek(0)
        queue.truncate()
        queue.write(b"".join(kept))


def writer_lock(
    root: Path, *, wait: bool = True, seconds: float = LOCK_WAIT_SECONDS
) -> contextlib.AbstractContextManager[bool]:
    """Hold the archive's index lock (see :func:`~ctxc.archive_store.exclusive_lock`)."""
    return exclusive_lock(root / LOCK_NAME, wait=wait, seconds=seconds)


def indexer_running(root: Path) -> bool:
    """Whether an index writer (a background indexer, mostly) holds the archive's lock."""
    if not (root / LOCK_NAME).exists():
        return False
    with writer_lock(root, wait=False) as held:
        return not held
