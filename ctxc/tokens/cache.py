"""Token counts cached per text in SQLite (``$CTXC_CACHE_DIR/tokens.sqlite3``, keyed by a BLAKE2b-128
digest and the tokenizer name; agent logs repeat themselves), and the counter that counts through it.
Never a reason to fail; ``CTXC_NO_CACHE=1`` or ``disabled=True`` turns it off."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

from ctxc.sqlite_store import SqliteStore, in_batches
from ctxc.tokens.base import StartingTokenizer, Tokenizer

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
        for tok, digests in by_tok.items():
            for part, marks in in_batches(digests):
                sql = f"SELECT digest, tokens FROM counts WHERE tokenizer = ? AND digest IN ({marks})"
                rows = self._read(sql, (tok, *part))
                if rows is None:  # the store is off or failed
                    return {}
                found.update(((bytes(d), tok), int(n)) for d, n in rows)
        return found

    def put_many(self, items: Iterable[tuple[Key, int]]) -> None:
        """Store counts; a key already present keeps its value (the same text has the same count)."""
        self._write("INSERT OR IGNORE INTO counts VALUES (?, ?, ?)", [(d, tok, n) for (d, tok), n in items])


class CachedCounter:
    """Counts a batch of texts: repeated texts once, cached ones from disk, the rest with count_batch.
    The one path analyze and the strategies use; ``hits``/``misses``/``counted_chars`` say what it saved."""

    def __init__(self, tokenizer: Tokenizer, cache: TokenCache | None = None) -> None:
        self.tokenizer = tokenizer
        self.name = tokenizer.name
        use = cache is not None and cache.enabled and tokenizer.name not in UNCACHED_TOKENIZERS
        self.cache = cache if use else None
        self.hits = 0
        self.misses = 0
        self.counted_chars = 0
        # Counts made in this process, by the text's hash and length (see _memo_key), so that a streamed
        # file's texts are not kept alive.
        self._memo: dict[int, int] = {}
        # Texts a started batch is counting: a later batch that repeats one waits for that count.
        self._inflight: dict[int, _Started] = {}

    def count(self, texts: Sequence[str]) -> list[int]:
        return self.start(texts)()

    def start(self, texts: Sequence[str]) -> Callable[[], list[int]]:
        """Start counting ``texts``; the returned function waits for the counts. Repeats, memo and cache
        hits are settled now; the rest goes to the tokenizer's ``start_count`` when it has one, so a
        caller can parse the next batch meanwhile."""
        memo, inflight = self._memo, self._inflight
        known: dict[str, int] = {}
        elsewhere: list[tuple[str, _Started]] = []  # texts another started batch is counting
        todo: dict[str, int] = {}  # distinct texts to count, with their memo keys
        for text in dict.fromkeys(texts):
            if not text:
                continue
            mkey = _memo_key(text)
            n = memo.get(mkey)
            if n is not None:
                known[text] = n
            elif mkey in inflight:
                elsewhere.append((text, inflight[mkey]))
            else:
                todo[text] = mkey
        keys: dict[str, Key] = {}
        if self.cache is not None and self.cache.enabled and todo:
            keys = {t: (digest(t), self.tokenizer.name) for t in todo}
            found = self.cache.get_many(keys.values())
            for text, key in keys.items():
                if key in found:
                    known[text] = found[key]
                    self._remember(todo.pop(text), found[key])
            self.hits += len(known)
        known[""] = 0
        if not todo and not elsewhere:  # all counted before: what compaction mostly asks
            counted = [known[text] for text in texts]
            return lambda: counted
        started = _Started(self, todo, keys) if todo else None

        def finish() -> list[int]:
            if started is not None:
                known.update(started.settle())
            for text, other in elsewhere:
                known[text] = other.settle()[text]
            return [known[text] for text in texts]

        return finish

    def _remember(self, key: int, n: int) -> None:
        if len(self._memo) > _MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = n


def _memo_key(text: str) -> int:
    # Python's string hash (SipHash under a per-process key, computed anyway) and the length, in one int
    # (a tuple would weigh more): a false match is as unlikely as for a random 64-bit digest, at no cost.
    return hash(text) << 32 | len(text)


class _Started:
    """The texts of one batch the tokenizer is counting, and their counts once it is done."""

    def __init__(self, counter: CachedCounter, todo: dict[str, int], keys: dict[str, Key]) -> None:
        """``todo``: the texts to count, each with its memo key (:func:`_memo_key`)."""
        self.counter = counter
        self.todo = todo
        self.keys = keys
        texts = list(todo)
        if isinstance(counter.tokenizer, StartingTokenizer):
            self._pending: Callable[[], list[int]] = counter.tokenizer.start_count(texts)
        else:
            counts = counter.tokenizer.count_batch(texts)
            self._pending = lambda: counts
        self._counts: dict[str, int] | None = None
        # Only once started: a batch that failed to start must not be waited for.
        counter._inflight.update(dict.fromkeys(todo.values(), self))

    def settle(self) -> dict[str, int]:
        """The counts, by text (waits for them the first time)."""
        if self._counts is None:
            counter = self.counter
            try:
                counts = self._pending()
            finally:
                inflight = counter._inflight
                for key in self.todo.values():
                    if inflight.get(key) is self:
                        del inflight[key]
            self._counts = dict(zip(self.todo, counts, strict=True))
            counter.misses += len(self.todo)
            counter.counted_chars += sum(map(len, self.todo))
            for key, n in zip(self.todo.values(), counts, strict=True):
                counter._remember(key, n)
            if counter.cache is not None and self.keys:
                counter.cache.put_many((self.keys[t], n) for t, n in self._counts.items() if t in self.keys)
        return self._counts
