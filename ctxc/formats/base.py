"""The format adapter Protocol and the stream items adapters yield.

An adapter turns the records of one file into messages (and the usage and compaction boundaries the log
recorded), and can encode a message back into a record of its own format. Reading is a generator over
records so that ``analyze`` can stream a 100 MB log without holding it; ``load`` collects the same items
into a :class:`~ctxc.model.Transcript`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from ctxc.model import Boundary, Message, Record, Usage

Item = Message | Usage | Boundary

#: How many leading records sniffing looks at.
SNIFF_RECORDS = 40


@functools.cache
def run_time() -> datetime:
    """When this run started writing (one instant per process): the time of a record ctxc adds where no
    record near it has one, so viewers never sort it to 1970."""
    return datetime.now(UTC)


def run_timestamp() -> str:
    """:func:`run_time` as the ISO 8601 UTC text logs use: ``2026-12-01T16:57:05.123Z``."""
    return run_time().strftime("%Y-%m-%dT%H:%M:%S.") + f"{run_time().microsecond // 1000:03d}Z"


@runtime_checkable
class FormatAdapter(Protocol):
    """One transcript format. Register an instance with :func:`ctxc.formats.register`."""

    #: The name used by ``--input-format`` and stored in ``Transcript.format``.
    name: str
    #: One line for ``ctxc formats`` and the README.
    description: str
    #: Whether the client resumes from a summary ctxc writes and sends nothing before it (Claude Code's
    #: compact_boundary): what must survive is then placed after the summary.
    summary_resets: bool
    #: Whether its writer can replace what the log's own compaction record carries into the live context
    #: (Codex: a new compacted record): compaction then works on those messages too.
    rewrites_carried: bool

    def sniff(self, sample: Sequence[Record]) -> int:
        """How sure (0-100) this adapter is that ``sample`` (the first non-blank records) is its format."""
        ...

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        """Yield messages (with ``records`` set to the given indexes), usage and boundaries, in order.

        Message ``index`` values must count up from 0 across the whole file. Records the adapter does not
        turn into messages are simply not referenced: they stay in place when the file is written.
        """
        ...

    def encode_message(self, message: Message) -> dict[str, Any]:
        """The JSON object for ``message`` as one record of this format.

        Built from the blocks (``raw`` supplies only envelope fields and blocks ctxc does not model), so
        that encoding a message read from a single record gives back that record's JSON.
        """
        ...
