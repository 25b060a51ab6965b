"""One dataset record compacted on its own, as a pure function to map over records (pools, Spark, Ray
Data): plain picklable results, never an exception for a bad record. With a :class:`RecordSource` the
output is exactly the line ``ctxc compact FILE`` writes for it. See docs/ray.md."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import orjson

from ctxc.archive import Archive
from ctxc.archive_store import archive_root, sha256_hex
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.errors import CtxcError, ExitCode
from ctxc.formats import load
from ctxc.output import Data
from ctxc.reader import named_bytes

Status = Literal["ok", "skipped", "error"]


@dataclass(frozen=True, slots=True)
class RecordSource:
    """Where a record sits in its dataset file, so citations match ``ctxc compact FILE``'s."""

    archive_id: str  # the whole file's (its sha256, as ``ctxc compact`` reports it)
    first_index: int = 0  # the record's first message, counted across the file
    line: int = 1  # the record's 1-based line number in the file


@dataclass(frozen=True, slots=True)
class RecordResult:
    """What became of one record. ``line`` is the output record as a JSON line (no newline)."""

    status: Status
    line: str | None
    tokens_before: int = 0
    tokens_after: int = 0
    archive_id: str | None = None  # what the output cites: the record's own, or the source file's
    savings: dict[str, int] = field(default_factory=dict)  # tokens each strategy removed
    error: str | None = None
    exit_code: int = 0

    @property
    def record(self) -> dict[str, Any] | None:
        """The output record, parsed."""
        if self.line is None:
            return None
        value = orjson.loads(self.line)
        return value if isinstance(value, dict) else None

    def to_row(self) -> dict[str, Any]:
        """A flat dict of plain values (a Ray Data or pandas row)."""
        keys = ("status", "line", "tokens_before", "tokens_after", "archive_id", "error", "exit_code")
        return {key: getattr(self, key) for key in keys}


@dataclass(frozen=True, slots=True)
class _CitingArchive(Archive):
    """Cites ``cite_as`` for the record's bytes without storing them (its file is the original); anything
    else offloaded goes to ``backing``, or nowhere."""

    cite_as: str = ""
    original: bytes = b""
    backing: Archive | None = None

    def object_id(self, data: Data) -> str:
        return self.cite_as if self._is_original(data) else sha256_hex(data)

    def store(self, data: Data, digest: str | None = None, *, sync: bool = True) -> str:
        if self._is_original(data):
            return self.cite_as
        if self.backing is not None:
            return self.backing.store(data, digest, sync=sync)
        return digest or sha256_hex(data)

    def _is_original(self, data: Data) -> bool:
        return (b"".join(data) if isinstance(data, list) else data) == self.original

    def index(self, archive_id: str, transcript: Any, *, source: str | None = None) -> None:
        if self.backing is not None:
            self.backing.index(archive_id, transcript, source=source)

    def index_blobs(self, origin: str, notes: Sequence[tuple[str, int, str]]) -> None:
        if self.backing is not None:
            self.backing.index_blobs(origin, notes)


def compact_record(
    record: str | bytes | Mapping[str, Any],
    options: CompactOptions = CompactOptions(),
    *,
    archive: Archive | None = None,
    source: RecordSource | None = None,
) -> RecordResult:
    """Compact one dataset record as ``ctxc compact`` compacts each line of a file (without ``archive``
    nothing is written); a record with no ``messages`` list is ``skipped``, a bad one an ``error``. By
    default a record is cited on its own (the sha256 of its line, messages from 0)."""
    name = f"<record {source.line}>" if source is not None else "<record>"
    try:
        raw = _record_bytes(record)
    except (TypeError, UnicodeEncodeError) as exc:  # orjson's errors are TypeErrors
        return RecordResult("error", None, error=f"{name}: not JSON ({exc})", exit_code=ExitCode.INPUT)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return RecordResult(
            "error", None, error=f"{name}: not valid JSON ({exc.msg})", exit_code=ExitCode.INPUT
        )
    if not (isinstance(data, dict) and isinstance(data.get("messages"), list)):
        return RecordResult("skipped", raw.decode("utf-8", errors="replace"))
    body = raw + b"\n"  # the record as a one-line file: what `ctxc compact` of that file would archive
    try:
        transcript = load(named_bytes(name, body), input_format="dataset")
        store: Archive | None = archive
        if source is not None:
            shift, line = source.first_index, source.line
            moved = tuple(replace(m, index=m.index + shift, line=line) for m in transcript.messages)
            transcript = replace(transcript, messages=moved)
            root = archive.root if archive is not None else archive_root()
            store = _CitingArchive(root=root, cite_as=source.archive_id, original=body, backing=archive)
        result = compact_transcript(transcript, options, archive=store, original_bytes=body)
    except CtxcError as exc:
        return RecordResult("error", None, error=str(exc), exit_code=int(exc.exit_code))
    out = result.transcript.to_bytes().rstrip(b"\r\n").decode("utf-8")
    stats = (result.tokens_before, result.tokens_after, result.archive_id, result.savings_by_strategy())
    return RecordResult("ok", out, *stats)


def _record_bytes(record: object) -> bytes:
    if isinstance(record, Mapping):
        return orjson.dumps(dict(record))
    if isinstance(record, str | bytes | bytearray | memoryview):
        return (record.encode("utf-8") if isinstance(record, str) else bytes(record)).rstrip(b"\r\n")
    raise TypeError(f"a record is a JSON line or a dict, got {type(record).__name__}")


def compact_row(row: Mapping[str, Any], options: CompactOptions = CompactOptions()) -> dict[str, Any]:
    """:func:`compact_record` over a ``{"text": line}`` row (``ray.data.read_text``), for ``Dataset.map``;
    optional ``archive_id``, ``first_index`` and ``line`` keys give the record's source."""
    source = None
    if row.get("archive_id"):
        source = RecordSource(str(row["archive_id"]), int(row.get("first_index", 0)), int(row.get("line", 1)))
    return compact_record(row["text"], options, source=source).to_row()


def record_sources(path: str | os.PathLike[str]) -> list[RecordSource | None]:
    """The source of each line of a dataset file (None for lines that hold no conversation): what
    :func:`compact_record` needs to write exactly what ``ctxc compact FILE`` writes."""
    data = Path(path).read_bytes()
    transcript = load(named_bytes(os.fspath(path), data), input_format="dataset")
    first = {m.line: m.index for m in reversed(transcript.messages)}  # each line's first message
    archive_id = sha256_hex(data)
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return [RecordSource(archive_id, first[n], n) if n in first else None for n in range(1, lines + 1)]


__all__ = ["RecordResult", "RecordSource", "compact_record", "compact_row", "record_sources"]
