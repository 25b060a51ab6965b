"""Find what compaction removed: full-text search over an archive's originals. The archive's hooks keep
the index up to date and never fail a run; :func:`search` catches up with the queue and the manifest."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxc.archive_store import ArchiveStore, LockTimeout, absolute_path, recorded_path
from ctxc.errors import ArchiveError, CtxcError, UsageError
from ctxc.formats import load
from ctxc.model import ToolResultBlock, ToolUseBlock
from ctxc.reader import ReadOptions, named_bytes
from ctxc.search.background import (
    BACKGROUND_BYTES,
    LOCK_NAME,
    dequeue,
    index_later,
    queue_entries,
    start_indexer,
    writer_lock,
)
from ctxc.search.chunks import Chunk, chunk_transcript, split_text
from ctxc.search.index import Hit, SearchIndex, cleared_index, fts_query, open_index
from ctxc.system import env_flag, warn_once
from ctxc.terminal import one_line

if TYPE_CHECKING:
    from ctxc.model import Transcript
    from ctxc.search.embed import Embedder

__all__ = ["Hit", "SearchIndex", "fts_query"]  # re-exports; names defined here need no listing

log = logging.getLogger(__name__)

#: Texts shorter than this were never offloaded, so a rebuild does not hash them to find blobs' origins.
_BLOB_MIN_CHARS = 200
#: What an indexing hook turns into a warning.
_HOOK_ERRORS = (CtxcError, OSError, sqlite3.Error, ValueError, RuntimeError)
#: How long a search waits for a busy indexer before it searches the index as it is.
CATCH_UP_SECONDS = 30.0


def _warn(root: Path, what: str, exc: BaseException) -> None:
    warn_once(
        log,
        f"index {root}",
        "ctxc: warning: the search index of %s was not updated (%s); %s is safe in the archive, "
        "and `ctxc search --reindex` rebuilds the index",
        one_line(str(root)),
        f"{type(exc).__name__}: {one_line(str(exc))}",
        what,
    )


def index_transcript(
    archive: ArchiveStore, archive_id: str, transcript: Transcript, *, source: str | None = None
) -> int:
    """Index an archived original (by its archive id); returns the chunks added (0 if already there)."""
    with SearchIndex.for_archive(archive.root) as index:
        return _add_transcript(index, archive_id, transcript, source)


def _add_transcript(index: SearchIndex, archive_id: str, transcript: Transcript, source: str | None) -> int:
    name = source if source is not None else transcript.source
    if index.has(archive_id):  # the same bytes archived again, maybe from another path
        index.add_sources(archive_id, [name])
        return 0
    chunks = chunk_transcript(transcript, source=name)
    return index.add(
        archive_id, chunks, source=name, fmt=transcript.format, messages=len(transcript.messages)
    )


@contextlib.contextmanager
def _quietly(root: Path, what: str) -> Iterator[None]:
    """An indexing hook's failure as one warning, never an exception: the archive is the truth."""
    try:
        yield
    except _HOOK_ERRORS as exc:
        _warn(root, what, exc)


def index_quietly(
    archive: ArchiveStore, archive_id: str, transcript: Transcript, *, source: str | None = None
) -> None:
    """:func:`index_transcript` for the archive's hooks (a large original in the background)."""
    if env_flag("CTXC_NO_INDEX"):
        return
    source = absolute_path(source or transcript.source or "") or None
    with _quietly(archive.root, f"original {archive_id[:12]}"):
        if _in_background(archive, archive_id):
            index_later(archive.root, archive_id, fmt=transcript.format, source=source)
        else:
            index_transcript(archive, archive_id, transcript, source=source)


def note_blobs_quietly(archive: ArchiveStore, origin: str, notes: Sequence[tuple[str, int, str]]) -> None:
    """Record where offloaded outputs came from, ``(digest, message, tool)`` each, in one transaction."""
    if env_flag("CTXC_NO_INDEX") or not notes:
        return
    with (
        _quietly(archive.root, f"offloaded outputs of {origin[:12]}"),
        SearchIndex.for_archive(archive.root) as index,
    ):
        index.add_blobs(origin, notes)


def index_recorded_quietly(archive: ArchiveStore, entry: Mapping[str, Any]) -> None:
    """After a manifest line: index the run's original if no hook did (``ctxc repair``, other tools)."""
    ident = entry.get("archive_id") or entry.get("input_sha256")
    if env_flag("CTXC_NO_INDEX") or not isinstance(ident, str):
        return
    with _quietly(archive.root, f"original {ident[:12]}"):
        if any(e["archive_id"] == ident for e in queue_entries(archive.root)):
            return  # the background indexer has it
        with SearchIndex.for_archive(archive.root) as index:
            if index.has(ident):
                index.add_sources(ident, [recorded_path(entry)])
                return
            if _in_background(archive, ident):
                fmt = entry_text(entry, "format")
                index_later(archive.root, ident, fmt=fmt or "", source=recorded_path(entry))
            else:
                _index_object(archive, index, ident, entry)


def _in_background(archive: ArchiveStore, archive_id: str) -> bool:
    """Whether a background indexer takes this stored original: it is large (and stored here)."""
    try:
        return archive.object_path(archive_id).stat().st_size >= BACKGROUND_BYTES
    except OSError:  # not stored here (a library caller's citation): index what is in memory
        return False


def entry_text(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return value if isinstance(value, str) else None


def load_archived(data: bytes, name: str, fmt: str | None = None) -> Transcript:
    """An archived object's bytes as a transcript, reading whatever the original run accepted."""
    options = ReadOptions(skip_invalid=True, max_line_bytes=1 << 40)
    return load(named_bytes(name, data), input_format=fmt or None, options=options, say_skipped=False)


def _index_object(
    archive: ArchiveStore, index: SearchIndex, ident: str, entry: Mapping[str, Any]
) -> Transcript:
    """Load the archived original ``entry`` describes and index it, with every path it was archived from
    (``sources``, from :func:`_manifest_originals`, else the entry's own); returns the transcript."""
    transcript = load_archived(archive.read(ident), ident[:12], entry_text(entry, "format"))
    sources = entry.get("sources") or [recorded_path(entry)]
    _add_transcript(index, ident, transcript, sources[0])
    index.add_sources(ident, sources)
    return transcript


def index_queued(archive: ArchiveStore, index: SearchIndex | None = None) -> bool:
    """Index the queued originals (the caller holds the writer lock); False if any failed (a warning)."""
    if not (entries := queue_entries(archive.root)):
        return True
    ok = True
    done: set[str] = set()
    try:
        with contextlib.nullcontext(index) if index else SearchIndex.for_archive(archive.root) as db:
            for entry in entries:
                ident = entry["archive_id"]
                try:
                    if db.has(ident):
                        db.add_sources(ident, [recorded_path(entry)])
                    else:
                        _index_object(archive, db, ident, entry)
                except _HOOK_ERRORS as exc:
                    _warn(archive.root, f"original {ident[:12]}", exc)
                    ok = False
                done.add(ident)  # failed too: retrying would fail again (`--reindex` says why)
    finally:
        dequeue(archive.root, done)
    return ok


def _manifest_originals(archive: ArchiveStore) -> dict[str, dict[str, Any]]:
    """The latest manifest entry of each archived original (by full archive id, in the order they were
    first archived), with ``sources``: every path it was archived from, in that order."""
    originals: dict[str, dict[str, Any]] = {}
    for e in archive.manifest():
        ident = e.get("archive_id") or e.get("input_sha256")
        if isinstance(ident, str) and len(ident) == 64:
            sources = originals.get(ident, {}).get("sources", [])
            path = recorded_path(e)
            originals[ident] = {**e, "sources": [*sources, path] if path and path not in sources else sources}
    return originals


def sync(archive: ArchiveStore, index: SearchIndex, originals: Mapping[str, Mapping[str, Any]]) -> None:
    """Index every original the manifest lists (``originals``) that the index lacks, and every path an
    indexed one was archived from that it lacks (a run with ``--no-index``)."""
    have, known = index.archive_ids(), index.sources()
    for ident, entry in originals.items():
        if ident in have:
            if missing := [s for s in entry["sources"] if s not in known.get(ident, ())]:
                index.add_sources(ident, missing)
        elif archive.object_path(ident).exists():
            try:
                _index_object(archive, index, ident, entry)
            except CtxcError as exc:
                log.warning(
                    "ctxc: warning: cannot index archived original %s: %s", ident[:12], one_line(str(exc))
                )


@dataclass(frozen=True, slots=True)
class RebuildReport:
    originals: int
    texts: int
    blobs: int
    chunks: int
    skipped: tuple[str, ...] = ()
    set_aside: Path | None = None  # where a damaged index file was moved, if it was


def _strings(value: Any) -> Iterator[str]:
    """The strings in a tool call's input, however deep."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping | list):
        for v in value.values() if isinstance(value, Mapping) else value:
            yield from _strings(v)


def _blob_candidates(transcript: Transcript) -> Iterator[tuple[str, int, str]]:
    """(sha256 of a text offload could have stored, message index, tool) for every tool text."""
    names = {b.id: b.name for m in transcript.messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    for m in transcript.messages:
        for b in m.blocks:
            texts, tool = [], ""
            if isinstance(b, ToolResultBlock):
                texts, tool = [b.text], names.get(b.tool_use_id) or b.name or ""
            elif isinstance(b, ToolUseBlock):
                texts, tool = list(_strings(b.input)), b.name
            for text in texts:
                if len(text) >= _BLOB_MIN_CHARS:
                    yield hashlib.sha256(text.encode("utf-8")).hexdigest(), m.index, tool


def rebuild(archive: ArchiveStore) -> RebuildReport:
    """Make the index again from the archive: the manifest's originals, then every other object as an
    offloaded output of one of them (by its sha256), another transcript, or plain text."""
    if not archive.root.is_dir():
        raise ArchiveError(f"no archive at {archive.root}")
    with writer_lock(archive.root):
        return _rebuild(archive)


def _rebuild(archive: ArchiveStore) -> RebuildReport:
    """:func:`rebuild`, the caller holding the writer lock."""
    skipped: list[str] = []
    origins: dict[str, tuple[str, int, str]] = {}  # blob digest -> (original, message, tool)
    loaded: set[str] = set()

    def indexed(ident: str, transcript: Transcript | None) -> None:
        loaded.add(ident)
        for digest, message, tool in () if transcript is None else _blob_candidates(transcript):
            origins.setdefault(digest, (ident, message, tool))

    with cleared_index(archive.root) as (index, set_aside):
        for ident, entry in _manifest_originals(archive).items():
            if archive.object_path(ident).exists():
                try:
                    indexed(ident, _index_object(archive, index, ident, entry))
                except CtxcError as exc:
                    skipped.append(f"{ident[:12]}: {exc}")
                    loaded.add(ident)  # said once: the loop over every object passes it by
        stored = (p.name for p in (archive.root / "objects").glob("*/*") if len(p.name) == 64 and p.is_file())
        for ident in sorted(stored):  # temp files have other names
            if ident in loaded:
                continue
            if ident in origins:
                origin, message, tool = origins[ident]
                index.add_blobs(origin, [(ident, message, tool)])
                continue
            try:
                indexed(ident, _index_other(archive, index, ident))
            except (ArchiveError, UnicodeDecodeError) as exc:
                skipped.append(f"{ident[:12]}: {exc}")
        index_queued(archive, index)  # every stored object is indexed now: this empties the queue
        return RebuildReport(**index.stats(), skipped=tuple(skipped), set_aside=set_aside)


def _index_other(archive: ArchiveStore, index: SearchIndex, ident: str) -> Transcript | None:
    """Index an object no manifest line names: as a transcript if it reads as one (returned), else as text."""
    data = archive.read(ident)
    try:
        found: Transcript | None = load_archived(data, ident[:12])
    except CtxcError:
        found = None
    if found is not None and found.messages:
        _add_transcript(index, ident, found, f"archive {ident[:12]}")
        return found
    pieces = split_text(data.decode("utf-8"))
    context = f"archived text {ident[:12]} (an offloaded output whose original is not archived here)"
    chunks = (Chunk(0, -1, 0, "tool", "text", "", n, len(pieces), context, p) for n, p in enumerate(pieces))
    index.add(ident, chunks, kind="text", source=f"archive {ident[:12]}", fmt="text")
    return None


def search(
    query: str,
    *,
    archive: ArchiveStore | None = None,
    limit: int = 10,
    hybrid: bool = False,
    archive_id: str | None = None,
    raw: bool = False,
    catch_up: bool = True,
    embedder: Embedder | None = None,
) -> list[Hit]:
    """The best ``limit`` hits for ``query`` (at most one per message), after indexing what the manifest
    lists and the index lacks (``catch_up``); the rest as :meth:`SearchIndex.bm25` and ``--hybrid`` take."""
    if limit < 1:
        raise UsageError("{limit} must be at least 1", options=("limit",))
    store = archive if archive is not None else ArchiveStore.open()
    with open_index(store.root, must_exist=True) as index:
        # Read once: what catching up indexes and the order that cites a message's first original. A run
        # recorded meanwhile is indexed by that run, or queued for index_queued.
        originals = _manifest_originals(store)
        if catch_up:
            _catch_up(store, index, originals)
        if archive_id and not any(i.startswith(archive_id.lower()) for i in index.archive_ids()):
            raise ArchiveError(f"archive {store.root} holds no object {archive_id}")
        order = {ident: n for n, ident in enumerate(originals)}
        return search_index(
            index,
            query,
            limit=limit,
            hybrid=hybrid,
            archive_id=archive_id,
            raw=raw,
            embedder=embedder,
            order=order,
        )


def _catch_up(store: ArchiveStore, index: SearchIndex, originals: Mapping[str, Mapping[str, Any]]) -> None:
    """Index what the index lacks, after any background indexer (so nothing is done twice); one still
    busy after :data:`CATCH_UP_SECONDS` (a large batch, or a stopped process) leaves the index as it is."""
    try:
        with writer_lock(store.root, seconds=CATCH_UP_SECONDS):
            if index.emptied_by_upgrade():  # the manifest alone names neither offloaded outputs nor texts
                log.warning("ctxc: the search index was from an older ctxc: rebuilding it from the archive")
                _rebuild(store)
            else:
                index_queued(store, index)
                sync(store, index, originals)
    except LockTimeout:
        log.warning(
            "ctxc: warning: an indexer has held %s for %g s; searching the index as it is (what is still "
            "being indexed may be missing)",
            one_line(str(store.root / LOCK_NAME)),
            CATCH_UP_SECONDS,
        )
        return
    start_indexer(store.root)  # for anything queued while this search held the lock


def search_index(
    index: SearchIndex,
    query: str,
    *,
    limit: int,
    hybrid: bool = False,
    archive_id: str | None = None,
    raw: bool = False,
    embedder: Embedder | None = None,
    order: Mapping[str, int] | None = None,
) -> list[Hit]:
    """:func:`search` in an index the caller has open (many queries, one connection), without catch-up;
    a message several originals hold is cited from the first (``order``: originals in manifest order)."""
    if hybrid:
        from ctxc.search.embed import default_embedder, hybrid_search

        embedder = embedder or default_embedder()
        hits = hybrid_search(index, query, limit=limit, embedder=embedder, archive_id=archive_id, raw=raw)
    else:
        hits = index.bm25(query, limit=limit, archive_id=archive_id, raw=raw)
    return index.earliest(hits, order or {}, archive_id)
