"""The archive with its search index: :class:`~ctxc.archive_store.ArchiveStore` (objects, manifest)
plus the index kept beside them for ``ctxc search``.

Each stored original is indexed as it is written (:meth:`Archive.index`, called by the compaction run),
offloaded outputs are noted (:meth:`Archive.index_blobs`), and a recorded run's original is indexed if
nothing did yet (:meth:`Archive.record_run`). None of that ever fails a run: see :mod:`ctxc.search`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxc.archive_store import ArchiveStore, archive_root
from ctxc.search import index_quietly, index_recorded_quietly, note_blobs_quietly

if TYPE_CHECKING:
    from ctxc.model import Transcript


@dataclass(frozen=True, slots=True)
class Archive(ArchiveStore):
    """The archive at ``root``, indexing what is stored in it for ``ctxc search``."""

    #: Index each stored original for ``ctxc search`` as it is written (about 0.1 s per MB; a large one
    #: by a background process, :mod:`ctxc.search.background`). Off, the next search indexes what the
    #: manifest lists instead: same results, the cost moved to that search.
    index_on_write: bool = True

    @classmethod
    def open(cls, explicit: str | os.PathLike[str] | None = None, *, index_on_write: bool = True) -> Archive:
        return cls(archive_root(explicit), index_on_write)

    def record_run(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Append one manifest line, then index the run's original unless that was done already."""
        full = ArchiveStore.record_run(self, entry)
        if self.index_on_write:
            index_recorded_quietly(self, full)  # a no-op when the run's hook already indexed the original
        return full

    def index(self, archive_id: str, transcript: Transcript, *, source: str | None = None) -> None:
        """Add a stored original to the search index beside the archive (``ctxc search``).

        Never raises: the archive is the source of truth and ``ctxc search --reindex`` rebuilds the
        index, so a failure is a warning on stderr and the caller's run goes on.
        """
        if self.index_on_write:
            index_quietly(self, archive_id, transcript, source=source)

    def index_blobs(self, origin: str, notes: Sequence[tuple[str, int, str]]) -> None:
        """Tell the search index that outputs of ``origin`` were offloaded: ``(digest, message, tool)``."""
        note_blobs_quietly(self, origin, notes)


__all__ = ["Archive"]
