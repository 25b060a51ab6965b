"""An on-disk cache of token counts, and the counter that counts texts through it.

Agent logs repeat themselves (the same file read twice, a transcript re-analyzed after each edit), and
exact BPE counting runs at ~5-10 MB/s, so counts are kept per text in SQLite, keyed by a 128-bit
BLAKE2b digest of the text's UTF-8 and the tokenizer name. The database lives at
``$CTXC_CACHE_DIR/tokens.sqlite3`` (default ``$XDG_CACHE_HOME/ctxc`` or ``~/.cache/ctxc``), in WAL
mode with a busy timeout so two ctxc processes can share it.

The cache is an optimisation and never a reason to fail (see :mod:`ctxc.sqlite_store`, shared with
the summary cache). ``CTXC_NO_CACHE=1`` or ``disabled=True`` turns it off.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Callable, Iterable, Sequence

from ctxc.sqlite_store import SqliteStore, in_batches
from ctxc.tokens.base import StartingTokenizer, Tokenizer

log = logging.getLogger(__name__)

#: Texts shorter than this are counted directly. Every text is cached: a warm run that finds every
#: count in the cache never builds the BPE encoding (0.35-0.5 s), which matters more than the lookups.
MIN_CACHED_CHARS = 1
#: Tokenizers whose counts are not cached: recomputing the estimate is cheaper than looking it up,
#: and its coefficients may change between versions without changing its name.
UNCACHED_TOKENIZERS = frozenset({"approx"})

Key = tuple[bytes, str]
#: Counts remembered in memory per counter (about 150 bytes each).
_MEMO_LIMIT = 2_000_000


def digest(text: str) -> bytes:
    """The cache key of ``text``: BLAKE2b-128 of its UTF-8 (lone surrogates from JSON kept as-is)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class TokenCache(SqliteStore):
    """Per-text token counts in SQLite. Thread-safe; safe for several processes at once."""

    NAME = "token"
    FILENAME = "tokens.sqlite3"
    TABLE = "counts"
    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS counts ("
        " digest BLOB NOT NULL, tokenizer TEXT NOT NULL, tokens INTEGER NOT NULL,"
        " PRIMARY KEY (digest, tokenizer)) WITHOUT ROWID"
    )
    PURPOSE = "counting without it"

    def get_many(self, keys: Iterable[Key]) -> dict[Key, int]:
        """Cached counts of those ``keys`` (digest, tokenizer) that are present."""
        by_tok: dict[str, list[bytes]] = {}
        for d, tok in keys:
            by_tok.setdefault(tok, []).append(d)
        found: dict[Key, int] = {}
        if not by_tok:
            return found
        with self._lock:
            conn = self._connect()
            if conn is None:
                return found
            try:
                for tok, digests in by_tok.items():
                    for part, marks in in_batches(digests):
                        sql = f"SELECT digest, tokens FROM counts WHERE tokenizer = ? AND digest IN ({marks})"
                        for d, n in conn.execute(sql, (tok, *part)):
                            found[(bytes(d), tok)] = int(n)
            except sqlite3.Error as exc:
                self._fail(exc)
                return {}
        return found

    def put_many(self, items: Iterable[tuple[Key, int]]) -> None:
        """Store counts; a key already present keeps its value (the same text has the same count)."""
        self._write("INSERT OR IGNORE INTO counts VALUES (?, ?, ?)", [(d, tok, n) for (d, tok), n in items])


class CachedCounter:
    """Counts a batch of texts: repeated texts once, cached ones from disk, the rest with count_batch.

    This is the one path analyze and the strategies use, so every count is cached the same way.
    ``hits``/``misses``/``counted_chars`` say how much work the cache saved.
    """

    def __init__(self, tokenizer: Tokenizer, cache: TokenCache | None = None) -> None:
        self.tokenizer = tokenizer
        self.name = tokenizer.name
        use = cache is not None and cache.enabled and tokenizer.name not in UNCACHED_TOKENIZERS
        self.cache = cache if use else None
        self.hits = 0
        self.misses = 0
        self.counted_chars = 0
        # Counts already made in this process (compaction re-measures its own output, and logs repeat
        # themselves), keyed by the text's hash and length rather than by the text, which would keep
        # every text of a streamed file alive. Python's string hash is SipHash under a random key per
        # process, so a false match is as unlikely as for a random 64-bit digest (about 1 in 10^7 over
        # a million distinct texts of one length), and it is free: grouping the texts computed it.
        self._memo: dict[tuple[int, int], int] = {}
        # Texts being counted by a started batch, by the same key: a later batch that repeats one waits
        # for that count instead of counting it again.
        self._inflight: dict[tuple[int, int], _Started] = {}

    def count(self, texts: Sequence[str]) -> list[int]:
        return self.start(texts)()

    def start(self, texts: Sequence[str]) -> Callable[[], list[int]]:
        """Start counting ``texts``; the returned function waits for the counts (see :meth:`count`).

        Repeats, memo hits and cache hits are settled now; what is left goes to the tokenizer's
        ``start_count`` when it has one (tiktoken with worker processes returns at once), so a caller
        can parse the next batch while this one is counted.
        """
        out = [0] * len(texts)
        # Distinct texts to count, each with the positions it fills.
        where: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            if text:
                where.setdefault(text, []).append(i)
        known: dict[str, int] = {}
        elsewhere: list[tuple[str, _Started]] = []  # texts another started batch is counting
        todo: list[str] = []
        for text in where:
            mkey = _memo_key(text)
            n = self._memo.get(mkey)
            if n is not None:
                known[text] = n
            elif mkey in self._inflight:
                elsewhere.append((text, self._inflight[mkey]))
            else:
                todo.append(text)
        keys: dict[str, Key] = {}
        if self.cache is not None and self.cache.enabled and todo:
            name = self.tokenizer.name
            keys = {t: (digest(t), name) for t in todo if len(t) >= MIN_CACHED_CHARS}
            if keys:
                found = self.cache.get_many(keys.values())
                for text, key in keys.items():
                    n = found.get(key)
                    if n is not None:
                        known[text] = n
                self.hits += len(known)
                todo = [t for t in todo if t not in known]
        for text in keys:
            if text in known:
                self._remember(text, known[text])  # found in the disk cache
        started = _Started(self, todo, keys) if todo else None

        def finish() -> list[int]:
            if started is not None:
                known.update(started.settle())
            for text, other in elsewhere:
                known[text] = other.settle()[text]
            for text, positions in where.items():
                n = known[text]
                for i in positions:
                    out[i] = n
            return out

        return finish

    def _remember(self, text: str, n: int) -> None:
        if len(self._memo) > _MEMO_LIMIT:
            self._memo.clear()
        self._memo[_memo_key(text)] = n


def _memo_key(text: str) -> tuple[int, int]:
    # The in-process memo's key: Python's string hash (SipHash, keyed per process) and the length,
    # cheaper than a BLAKE2b of every text; the disk cache keeps digests.
    return (hash(text), len(text))


class _Started:
    """The texts of one batch the tokenizer is counting, and their counts once it is done."""

    def __init__(self, counter: CachedCounter, todo: list[str], keys: dict[str, Key]) -> None:
        self.counter = counter
        self.todo = todo
        self.keys = keys
        if isinstance(counter.tokenizer, StartingTokenizer):
            self._pending: Callable[[], list[int]] = counter.tokenizer.start_count(todo)
        else:
            counts = counter.tokenizer.count_batch(todo)
            self._pending = lambda: counts
        self._counts: dict[str, int] | None = None
        # Only once started: a batch that failed to start must not be waited for.
        for text in todo:
            counter._inflight[_memo_key(text)] = self

    def settle(self) -> dict[str, int]:
        """The counts, by text (waits for them the first time)."""
        if self._counts is None:
            counter = self.counter
            try:
                counts = self._pending()
            finally:
                for text in self.todo:
                    key = _memo_key(text)
                    if counter._inflight.get(key) is self:
                        del counter._inflight[key]
            self._counts = dict(zip(self.todo, counts, strict=True))
            counter.misses += len(self.todo)
            counter.counted_chars += sum(map(len, self.todo))
            for text, n in self._counts.items():
                counter._remember(text, n)
            if counter.cache is not None and self.keys:
                counter.cache.put_many((self.keys[t], n) for t, n in self._counts.items() if t in self.keys)
        return self._counts
