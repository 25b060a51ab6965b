"""The summary cache the summarizers and the judge share: answers by prompt hash, in SQLite.
Its own module so the command summarizer uses it without loading asyncio."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from ctxc.sqlite_store import SqliteStore

if TYPE_CHECKING:
    from ctxc.summarize import SummaryRequest


class SummaryCache(SqliteStore):
    """Summaries by prompt hash; like every ctxc cache, an unusable file turns it off with one warning."""

    NAME = "summary"
    FILENAME = "summaries.sqlite3"
    TABLE = "summaries"
    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS summaries ("
        " key BLOB PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL,"
        " input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL) WITHOUT ROWID"
    )
    PURPOSE = "summarizing without it"

    @staticmethod
    def key(*parts: object) -> bytes:
        """An answer's key: the hash of all that shaped it (who answers, the prompt, the output limit)."""
        return hashlib.sha256(orjson.dumps(parts)).digest()

    def lookup(self, key: bytes, spent: Spent) -> str | None:
        """The cached answer, counted in ``spent.cache_hits``."""
        rows = self._read("SELECT text FROM summaries WHERE key = ?", (key,))
        spent.cache_hits += bool(rows)
        return str(rows[0][0]) if rows else None

    def put(self, key: bytes, model: str, text: str, input_tokens: int, output_tokens: int) -> None:
        row = (key, model, text, input_tokens, output_tokens)
        self._write("INSERT OR REPLACE INTO summaries VALUES (?, ?, ?, ?, ?)", [row])


@dataclass
class Spent:
    """What a summarizer that asks someone else has spent so far, for its ``usage()`` report."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_hits: int = 0

    def stand_in(self, request: SummaryRequest, count: Callable[[str], int], input_tokens: int) -> str:
        """A dry run's answer: the extractive summary, counting the call it replaces."""
        from ctxc.summarize.extractive import ExtractiveSummarizer

        self.calls += 1
        self.input_tokens += input_tokens
        self.output_tokens += request.budget
        return ExtractiveSummarizer().summarize(request, count)


def summary_cache(use: bool, cache: SummaryCache | None = None) -> SummaryCache:
    """The cache given (or the default one) while caching is on, else one that is off."""
    return (cache or SummaryCache()) if use else SummaryCache(disabled=True)
