"""``python -m ctxc.search.indexer ARCHIVE_ROOT``: the background indexer of an archive, started by
:mod:`ctxc.search.background`."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from pathlib import Path

from ctxc.archive_store import ArchiveStore, open_private
from ctxc.search import index_queued
from ctxc.search.background import LOG_NAME, queued, writer_lock


class _PrivateFileHandler(logging.FileHandler):
    """A log file created 0600, as every file of the archive (its warnings may quote transcripts)."""

    def _open(self) -> io.TextIOWrapper:
        return io.TextIOWrapper(open_private(Path(self.baseFilename)), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ctxc.search.indexer ARCHIVE_ROOT", file=sys.stderr)
        return 2
    root = Path(args[0])
    with contextlib.suppress(OSError):
        os.nice(10)  # the user's next command comes first
    handler = _PrivateFileHandler(root / LOG_NAME, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger("ctxc").addHandler(handler)

    archive = ArchiveStore(root)
    try:
        while True:
            with writer_lock(root, wait=False) as held:
                if not held:  # another writer holds it, and looks at the queue before it stops
                    return 0
                if not index_queued(archive):
                    return 1  # said why in the log; what is left, the next search indexes
            if not queued(root):  # anything queued while this process held the lock: go round again
                return 0
    finally:
        logging.getLogger("ctxc").removeHandler(handler)
        handler.close()


if __name__ == "__main__":
    sys.exit(main())
