"""The archive with its search index: :class:`~ctxc.archive_store.ArchiveStore` whose hooks index what
is stored and recorded, never failing a run (see :mod:`ctxc.search`)."""

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

    #: Off, the next search indexes what the manifest lists instead: same results, the cost moved there.
    index_on_write: bool = True

    @classmethod
    def open(cls, explicit: str | os.PathLike[str] | None = None, *, index_on_write: bool = True) -> Archive:
        return cls(archive_root(explicit), index_on_write)

    def record_run(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Append one manifest line, then index the run's original unless that was done already."""
        full = ArchiveStore.record_run(self, entry)
        if self.index_on_write:
            index_recorded_quietly(self, full)
        return full

    def index(self, archive_id: str, transcript: Transcript, *, source: str | None = None) -> None:
        if self.index_on_write:
            index_quietly(self, archive_id, transcript, source=source)

    def index_blobs(self, origin: str, notes: Sequence[tuple[str, int, str]]) -> None:
        note_blobs_quietly(self, origin, notes)
