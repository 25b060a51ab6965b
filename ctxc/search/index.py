"""The full-text index beside an archive: ``<archive>/search.sqlite``, SQLite FTS5 ranked by ``bm25()``.
Derived data (:func:`ctxc.search.rebuild` makes it again); each object is added in one immediate
transaction that first checks it is not there, so concurrent indexers store it once."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from ctxc.errors import ArchiveError, UsageError
from ctxc.search.chunks import Chunk
from ctxc.sqlite_store import connect, immediate, in_batches, release

INDEX_NAME = "search.sqlite"
#: Bumped when the schema or the chunking changes; an index of another version is emptied, and the next
#: search rebuilds it from the archive (4: the ``meta`` table that says so; 5: ``sources``, every path an
#: original was archived from).
SCHEMA_VERSION = 5
#: BM25 weights of the FTS columns (about, body, context): the text counts more than its description.
WEIGHTS = (0.3, 1.0, 0.0)
#: Highlight markers in snippets (Markdown bold, which agents and terminals both read).
MARK_OPEN, MARK_CLOSE = "**", "**"
SNIPPET_TOKENS = 24
#: Words too common to be worth an OR branch; dropped unless the query has nothing else.
STOPWORDS = frozenset(
    (
        "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "had", "has",
        "have", "how", "i", "in", "is", "it", "its", "of", "on", "or", "the", "this", "that", "to", "was",
        "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "you",
    )
)  # fmt: skip
#: A token as FTS5's unicode61 tokenizer sees one: letters and digits (so ``user_id`` is two).
_WORD = re.compile(r"[^\W_]+")
#: Han, kana and Hangul: written without spaces between words (or with particles joined to them), so
#: each character is a token of its own and a word is found as a phrase of its characters.
_CJK = re.compile(
    "([\u1100-\u11ff\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f])"
)
#: INVISIBLE SEPARATOR: what the tokenizer cuts at (not a letter), and invisible if a snippet kept it.
_CUT = "\u2063"


def cut_cjk(text: str) -> str:
    """``text`` with a token boundary after each CJK character, as indexed and queried."""
    return _CJK.sub("\\1" + _CUT, text)


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS docs ("
    " archive_id TEXT PRIMARY KEY, kind TEXT NOT NULL, source TEXT NOT NULL, format TEXT NOT NULL,"
    " messages INTEGER NOT NULL, chunks INTEGER NOT NULL, indexed_at TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chunks ("
    " id INTEGER PRIMARY KEY, archive_id TEXT NOT NULL, conversation INTEGER NOT NULL,"
    " message INTEGER NOT NULL, line INTEGER NOT NULL, role TEXT NOT NULL, kind TEXT NOT NULL,"
    " tool TEXT NOT NULL, part INTEGER NOT NULL, parts INTEGER NOT NULL, digest TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS chunks_by_message ON chunks(archive_id, message)",
    "CREATE INDEX IF NOT EXISTS chunks_by_digest ON chunks(digest, part)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5("
    " about, body, context UNINDEXED, tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE TABLE IF NOT EXISTS blobs ("
    " digest TEXT PRIMARY KEY, archive_id TEXT NOT NULL, message INTEGER NOT NULL, tool TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS vectors (chunk INTEGER PRIMARY KEY, model TEXT NOT NULL, vec BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # In the order they were archived from (rowid): docs.source is the first.
    "CREATE TABLE IF NOT EXISTS sources (archive_id TEXT NOT NULL, source TEXT NOT NULL,"
    " UNIQUE (archive_id, source))",
)
_TABLES = ("docs", "chunks", "chunks_fts", "blobs", "vectors", "meta", "sources")


@dataclass(frozen=True, slots=True)
class Copy:
    """Another place a hit's message is: an original (the paths it was archived from) and its index."""

    archive_id: str
    message: int
    line: int
    sources: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.archive_id[:12]}:{self.message}"

    def to_json(self) -> dict[str, Any]:
        doc = {k: getattr(self, k) for k in ("archive_id", "ref", "message", "line")}
        return doc | {"source": self.sources[0] if self.sources else None, "sources": list(self.sources)}


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: where the text is in the archive, what it is, and why it matched."""

    archive_id: str
    conversation: int
    message: int
    line: int
    role: str
    kind: str
    tool: str
    part: int
    parts: int
    source: str  # the original's file name and format, as archived
    format: str
    context: str
    snippet: str  # the chunk's text around the best match, matched terms between ``**`` markers
    text: str  # the whole chunk
    score: float  # higher is better: ``-bm25()``, or the hybrid score
    bm25: float
    similarity: float | None = None
    blob: str | None = None  # the archive id the message's tool output was offloaded to, if it was
    chunk_id: int = 0  # the chunk's row in the index (not part of the JSON)
    digest: str = ""  # what the message says (:func:`message_digests`): hits of one digest are one message
    copies: int = 0  # other indexed copies of the message (later runs' originals repeat what earlier kept)
    sources: tuple[str, ...] = ()  # every path the original was archived from, ``source`` first
    also_in: tuple[Copy, ...] = ()  # the ``copies``: other originals (or places) holding the message

    @property
    def ref(self) -> str:
        """What ``ctxc show`` takes to print the message: ``<id12>:<index>``."""
        return f"{self.archive_id[:12]}:{self.message}" if self.message >= 0 else self.archive_id[:12]

    def to_json(self, *, full: bool = False) -> dict[str, Any]:
        doc = {k: getattr(self, k) for k in _JSON_KEYS + (("text",) if full else ())}
        similarity = None if self.similarity is None else round(self.similarity, 6)
        scores = {"score": round(self.score, 6), "bm25": round(self.bm25, 6), "similarity": similarity}
        places = {
            "sources": [s for s in self.sources or (self.source,) if s],
            "also_in": [c.to_json() for c in self.also_in],
        }
        return doc | {"tool": self.tool or None, "part": self.part + 1} | scores | places


_JSON_KEYS = (
    "archive_id", "ref", "source", "format", "conversation", "message", "line", "role", "kind", "tool",
    "part", "parts", "context", "snippet", "score", "bm25", "similarity", "blob", "copies", "sources",
    "also_in",
)  # fmt: skip


def fts_query(text: str) -> str:
    """A user's words as an FTS5 query that cannot be a syntax error: each word a quoted phrase of its
    tokens (``ORDER-7731`` → ``"ORDER 7731"``), OR-ed, so a chunk with more (and rarer) words ranks higher."""
    phrases: dict[str, None] = {}
    common: dict[str, None] = {}
    for word in text.split():
        tokens = _WORD.findall(cut_cjk(word))
        if not tokens:
            continue
        phrase = '"' + " ".join(tokens) + '"'
        if len(tokens) == 1 and tokens[0].lower() in STOPWORDS:
            common.setdefault(phrase, None)
        else:
            phrases.setdefault(phrase, None)
    return " OR ".join(phrases or common)


class SearchIndex:
    """The index file of one archive (:meth:`for_archive`), connected on first use; a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    @classmethod
    def for_archive(cls, root: Path) -> SearchIndex:
        return cls(root / INDEX_NAME)

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            release(self._conn)
            self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            # Large pages: an original goes into FTS5 in one transaction (bench/README.md).
            self._conn = connect(self.path, 30.0, self._migrate, page_size=16384)
            self._conn.execute("PRAGMA cache_size = -65536")  # KiB: room for the pages of one original
        return self._conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version == SCHEMA_VERSION:
            return
        with immediate(conn):
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # another process may have
            if version == SCHEMA_VERSION:
                return
            if version != 0:  # an index of another version: derived data, so start again
                for table in _TABLES:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in _SCHEMA:
                conn.execute(statement)
            if version != 0:  # catching up would index the manifest's originals, not what else was there
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('emptied', ?)", (f"version {version}",))
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def emptied_by_upgrade(self) -> bool:
        """Whether this index was emptied for being of an older version and not rebuilt since."""
        return self.conn.execute("SELECT 1 FROM meta WHERE key = 'emptied'").fetchone() is not None

    def has(self, archive_id: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM docs WHERE archive_id = ?", (archive_id,)).fetchone() is not None
        )

    def add(
        self,
        archive_id: str,
        chunks: Iterable[Chunk],
        *,
        kind: str = "transcript",
        source: str = "",
        fmt: str = "",
        messages: int = 0,
    ) -> int:
        """Index one archived object's chunks (all or nothing); returns how many were added."""
        rows = list(chunks)  # chunking is CPU work: done before the write lock is taken
        with immediate(self.conn) as c:
            if self.has(archive_id):
                return 0
            first = int(c.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0]) + 1
            c.executemany(
                "INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (first + i, archive_id, *_place(k), d)
                    for i, (k, d) in enumerate(zip(rows, message_digests(archive_id, rows), strict=True))
                ],
            )
            c.executemany(
                "INSERT INTO chunks_fts(rowid, about, body, context) VALUES (?, ?, ?, ?)",
                [
                    (first + i, cut_cjk(k.about or k.context), cut_cjk(k.body), k.context)
                    for i, k in enumerate(rows)
                ],
            )
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            c.execute(
                "INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (archive_id, kind, source, fmt, messages, len(rows), now),
            )
            self._add_sources(archive_id, [source])
        return len(rows)

    def add_sources(self, archive_id: str, sources: Iterable[str | None]) -> None:
        """Record more paths an indexed original was archived from (the same bytes, compacted again
        from elsewhere); a path it has is not added twice."""
        with immediate(self.conn):
            self._add_sources(archive_id, sources)

    def _add_sources(self, archive_id: str, sources: Iterable[str | None]) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO sources VALUES (?, ?)", [(archive_id, s) for s in sources if s]
        )

    def sources(self, archive_ids: Iterable[str] | None = None) -> dict[str, tuple[str, ...]]:
        """The paths each original (all, or those of ``archive_ids``) was archived from, first first."""
        sql = "SELECT archive_id, source FROM sources{} ORDER BY rowid"
        rows = (
            self.conn.execute(sql.format(""))
            if archive_ids is None
            else self._by_id(sql.format(" WHERE archive_id IN ({})"), sorted(set(archive_ids)))
        )
        out: dict[str, tuple[str, ...]] = {}
        for ident, source in rows:
            out[str(ident)] = (*out.get(str(ident), ()), str(source))
        return out

    def add_blobs(self, origin: str, notes: Sequence[tuple[str, int, str]]) -> None:
        """Record that ``origin``'s messages had tool outputs offloaded: ``(digest, message, tool)``."""
        with immediate(self.conn) as c:
            c.executemany(
                "INSERT OR REPLACE INTO blobs VALUES (?, ?, ?, ?)",
                [(digest, origin, message, tool) for digest, message, tool in notes],
            )

    def clear(self) -> None:
        with immediate(self.conn) as c:
            for table in _TABLES:
                c.execute(f"DELETE FROM {table}")

    def stats(self) -> dict[str, int]:
        counted = {"originals": "docs WHERE kind = 'transcript'", "texts": "docs WHERE kind = 'text'"}
        counted.update(chunks="chunks", blobs="blobs")
        return {
            k: int(self.conn.execute(f"SELECT count(*) FROM {q}").fetchone()[0]) for k, q in counted.items()
        }

    def archive_ids(self) -> set[str]:
        return {str(r[0]) for r in self.conn.execute("SELECT archive_id FROM docs")}

    def bm25(self, query: str, *, limit: int, archive_id: str | None = None, raw: bool = False) -> list[Hit]:
        """The best ``limit`` chunks by BM25, at most one per message; ``raw`` passes ``query`` to FTS5."""
        match = cut_cjk(query) if raw else fts_query(query)
        if not match.strip():
            raise UsageError("the search query has no words to look for")
        where = "chunks_fts MATCH ?"
        params: list[Any] = [match]
        if archive_id:
            where += " AND c.archive_id LIKE ?"
            params.append(archive_id.lower() + "%")
        weights = ", ".join(str(w) for w in WEIGHTS)
        tokens = SNIPPET_TOKENS if _CJK.search(match) is None else 64  # a token a character: FTS5's most
        snippet = f"snippet(chunks_fts, 1, '\x02', '\x03', '…', {tokens})"
        sql = _HITS.format(
            f"{snippet}, bm25(chunks_fts, {weights}) AS rank", f"{where} ORDER BY rank LIMIT ?"
        )
        # Fetch more than asked: hits are collapsed to one per message below, and one long output can
        # match in hundreds of chunks, so fetch more again until ``limit`` messages or no more rows.
        fetch = max(limit * 4, limit + 20)
        while True:
            try:
                rows = self.conn.execute(sql, [*params, fetch]).fetchall()
            except sqlite3.OperationalError as exc:
                # FTS5 reports a bad query as an OperationalError ("syntax error", "unterminated string").
                if raw:
                    raise UsageError(f"not a valid FTS5 query ({exc}): {query!r}") from None
                raise
            hits = _collapse([_hit(r) for r in rows], limit)
            if len(hits) >= limit or len(rows) < fetch:
                return hits
            fetch *= 4

    def earliest(
        self, hits: Sequence[Hit], order: Mapping[str, int], archive_id: str | None = None
    ) -> list[Hit]:
        """Each hit cited from the first copy of its message (by ``order``, an original's place in the
        manifest, then indexing order), listing the other copies (``also_in``) and every path each
        original was archived from; ranks and snippets kept."""
        out = []
        within, params = (" AND archive_id LIKE ?", [archive_id.lower() + "%"]) if archive_id else ("", [])
        sql = f"SELECT id, archive_id, message, line FROM chunks WHERE digest = ? AND part = ?{within}"
        copies = {h.chunk_id: self.conn.execute(sql, [h.digest, h.part, *params]).fetchall() for h in hits}
        sources = self.sources(
            {str(r[1]) for rows in copies.values() for r in rows} | {h.archive_id for h in hits}
        )
        for h in hits:
            rows = sorted(copies[h.chunk_id], key=lambda r: (order.get(str(r[1]), len(order)), int(r[0])))
            first = int(rows[0][0]) if rows else h.chunk_id
            cited = h if first == h.chunk_id else self.hits_by_id([first])[first]
            others = tuple(
                Copy(str(r[1]), int(r[2]), int(r[3]), sources.get(str(r[1]), ())) for r in rows[1:]
            )
            out.append(
                replace(
                    cited,
                    snippet=h.snippet,
                    score=h.score,
                    bm25=h.bm25,
                    similarity=h.similarity,
                    copies=len(others),
                    sources=sources.get(cited.archive_id, ()),
                    also_in=others,
                )
            )
        return out

    def chunk_ids(self, archive_id: str | None = None) -> list[int]:
        where, params = (" WHERE archive_id LIKE ?", [archive_id.lower() + "%"]) if archive_id else ("", [])
        return [int(r[0]) for r in self.conn.execute("SELECT id FROM chunks" + where, params)]

    def _by_id(self, sql: str, ids: Sequence[Any], *params: Any) -> Iterator[Any]:
        """The rows of ``sql`` (its ``{}`` the marks of an ``IN``) for ``ids``, in batches."""
        for part, marks in in_batches(ids):
            yield from self.conn.execute(sql.format(marks), [*params, *part])

    def texts(self, ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """(context, body) of chunks by id."""
        rows = self._by_id("SELECT rowid, context, body FROM chunks_fts WHERE rowid IN ({})", ids)
        return {int(row[0]): (str(row[1]), str(row[2]).replace(_CUT, "")) for row in rows}

    def hits_by_id(self, ids: Sequence[int]) -> dict[int, Hit]:
        """Hits (without a BM25 score or highlight) for chunks found another way (embeddings)."""
        sql = _HITS.format("substr(chunks_fts.body, 1, 200), 0.0", "c.id IN ({})")
        return {int(row[0]): _hit(row) for row in self._by_id(sql, ids)}

    def vectors(self, model: str, ids: Sequence[int]) -> dict[int, bytes]:
        sql = "SELECT chunk, vec FROM vectors WHERE model = ? AND chunk IN ({})"
        return {int(row[0]): bytes(row[1]) for row in self._by_id(sql, ids, model)}

    def put_vectors(self, model: str, vectors: Sequence[tuple[int, bytes]]) -> None:
        with immediate(self.conn) as c:
            c.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", [(i, model, v) for i, v in vectors]
            )


#: A hit's columns and joins; ``{0}`` gives the snippet and rank, ``{1}`` the condition.
_HITS = (
    "SELECT c.id, c.archive_id, c.conversation, c.message, c.line, c.role, c.kind, c.tool, c.part, c.parts,"
    " d.source, d.format, chunks_fts.context, chunks_fts.body, {0}, b.digest, c.digest"
    " FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid JOIN docs d ON d.archive_id = c.archive_id"
    " LEFT JOIN blobs b ON b.archive_id = c.archive_id AND b.message = c.message WHERE {1}"
)


def _place(k: Chunk) -> tuple[Any, ...]:
    return (k.conversation, k.message, k.line, k.role, k.kind, k.tool, k.part, k.parts)


#: A hit row's columns from ``archive_id`` to ``context``: Hit's first fields, in order.
_Place = tuple[str, int, int, int, str, str, str, int, int, str, str, str]


def _hit(row: Sequence[Any]) -> Hit:
    """A :data:`_HITS` row as a hit."""
    snippet = str(row[14]).replace(_CUT, "").replace("\x02", MARK_OPEN).replace("\x03", MARK_CLOSE)
    rank = -float(row[15])
    place = cast("_Place", tuple(row[1:13]))
    text = str(row[13]).replace(_CUT, "")
    blob = row[16] or None
    return Hit(*place, " ".join(snippet.split()), text, rank, rank, None, blob, row[0], str(row[17]))


def _collapse(hits: Iterable[Hit], limit: int) -> list[Hit]:
    """The best hit of each distinct message (copies in several originals are one), best first, at most
    ``limit``."""
    best: dict[str, Hit] = {}
    for h in hits:
        best.setdefault(h.digest, h)
    return list(best.values())[:limit]


def message_digests(archive_id: str, chunks: Sequence[Chunk]) -> list[str]:
    """Each chunk's message digest: a hash of what the message says (role, blocks, texts), not where it
    sits, so a message copied into a later run's original has the same one; an archived text's parts
    are each their own."""
    texts: dict[int, list[str]] = {}
    for k in chunks:
        if k.message >= 0:
            texts.setdefault(k.message, []).extend((k.role, k.kind, k.tool, k.body))
    digests = {
        m: hashlib.sha256("\0".join(t).encode("utf-8", "surrogatepass")).hexdigest() for m, t in texts.items()
    }
    return [digests[k.message] if k.message >= 0 else f"{archive_id}:{k.part}" for k in chunks]


def open_index(root: Path, *, must_exist: bool = False) -> SearchIndex:
    """The index of the archive at ``root``; an unusable file is an :class:`ArchiveError`."""
    if must_exist and not root.is_dir():
        raise ArchiveError(
            f"no archive at {root} (compact something first, or pass {{archive}})", options=("archive",)
        )
    index = SearchIndex.for_archive(root)
    try:
        _ = index.conn
    except (OSError, sqlite3.Error) as exc:
        advice = "; `ctxc search --reindex` sets it aside and rebuilds it" if is_corrupt(exc) else ""
        raise ArchiveError(f"cannot open the search index: {exc}{advice}", path=str(index.path)) from exc
    return index


#: SQLite's primary result codes for a damaged file (as opposed to a busy or locked one).
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def is_corrupt(exc: BaseException) -> bool:
    """Whether an SQLite error says the file is damaged or not a database at all."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


@contextlib.contextmanager
def cleared_index(root: Path) -> Iterator[tuple[SearchIndex, Path | None]]:
    """The archive's index emptied for a rebuild (the caller holds the writer lock); a damaged file is
    set aside as ``search.sqlite.corrupt-<time>`` (with its -wal and -shm) and a new one made."""
    index = SearchIndex.for_archive(root)
    try:
        index.clear()
    except sqlite3.DatabaseError as exc:
        index.close()
        if not is_corrupt(exc):
            raise ArchiveError(f"cannot open the search index: {exc}", path=str(index.path)) from exc
    else:
        with index:
            yield index, None
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = index.path.with_name(f"{index.path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{index.path}{suffix}", f"{aside}{suffix}")
    with SearchIndex.for_archive(root) as fresh:
        fresh.clear()  # creates the tables
        yield fresh, aside
