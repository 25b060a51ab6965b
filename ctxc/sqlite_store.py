"""The SQLite file behind ctxc's caches, shared by processes (WAL, busy timeout); a store that never
fails a run: an error turns it off with one warning per file and process (as ``CTXC_NO_CACHE=1`` does)."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ctxc.archive_store import private_file
from ctxc.output import private_dir
from ctxc.system import cache_dir, env_flag, warn_once

T = TypeVar("T")


def in_batches(values: Sequence[T], size: int = 500) -> Iterator[tuple[list[T], str]]:
    """``values`` in slices under SQLite's limit on variables, each with its ``?,?,...`` for an ``IN``."""
    for start in range(0, len(values), size):
        part = list(values[start : start + size])
        yield part, ",".join("?" * len(part))


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One immediate transaction: one writer at a time, waiting up to the busy timeout."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


log = logging.getLogger(__name__)


def open_wal(
    path: Path,
    timeout: float,
    setup: Callable[[sqlite3.Connection], object] = lambda conn: None,
    *,
    page_size: int | None = None,
) -> sqlite3.Connection:
    """Create ``path`` 0600 (and its -wal, -shm) in a 0700 folder whatever the umask (caches and the index
    quote transcripts), connect in autocommit mode, switch to WAL and run ``setup``, retried within
    ``timeout``: switching to WAL can fail with "database is locked" at once, without the busy handler."""
    private_file(private_dir(path.parent) / path.name)
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        conn = sqlite3.connect(path, timeout=timeout, check_same_thread=False, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            if page_size is not None:
                conn.execute(f"PRAGMA page_size = {int(page_size)}")
            conn.execute("PRAGMA journal_mode = WAL")
            # WAL + NORMAL never corrupts the file; a power cut may lose entries, which are recomputed.
            conn.execute("PRAGMA synchronous = NORMAL")
            setup(conn)
            return conn
        except BaseException as exc:
            conn.close()
            busy = isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


#: While :func:`kept_open` is in force: connections by (process, thread, file), reused until it ends.
_kept: dict[tuple[int, int, str], sqlite3.Connection] | None = None
#: Connections a forked process copied from its parent: never used nor closed here (either can corrupt the
#: file under the parent), only held, so that garbage collection does not close them either.
_inherited: list[sqlite3.Connection] = []


def connect(
    path: Path,
    timeout: float,
    setup: Callable[[sqlite3.Connection], object] = lambda conn: None,
    *,
    page_size: int | None = None,
) -> sqlite3.Connection:
    """:func:`open_wal`, or this process's connection to ``path`` kept open by :func:`kept_open`."""
    if _kept is None:
        return open_wal(path, timeout, setup, page_size=page_size)
    # The process: a forked child never uses its parent's connection; the thread: nor do two at once.
    key = os.getpid(), threading.get_ident(), str(path)
    conn = _kept.get(key)
    if conn is None:
        conn = _kept[key] = open_wal(path, timeout, setup, page_size=page_size)
    return conn


def release(conn: sqlite3.Connection, *, broken: bool = False) -> None:
    """Close ``conn`` unless :func:`kept_open` keeps it; a ``broken`` one is closed and forgotten."""
    kept = _kept or {}
    keys = [key for key, c in kept.items() if c is conn]
    if keys and not broken:
        return
    for key in keys:
        del kept[key]
    with contextlib.suppress(sqlite3.Error):
        conn.close()


def keep_open() -> None:
    """From now on, each store or index file is opened once per process and thread, not once per use:
    the many files of a batch then pay no open, close, checkpoint and WAL restart (with their fsyncs)
    each. :func:`close_kept` ends it."""
    global _kept  # noqa: PLW0603 - one set of kept connections per process
    if _kept is None:
        _kept = {}


def close_kept() -> None:
    """Close the connections this process kept (a forked parent's are left to it) and stop keeping."""
    global _kept
    kept, _kept = _kept or {}, None
    for (pid, _, _), conn in kept.items():
        if pid != os.getpid():
            _inherited.append(conn)
            continue
        with contextlib.suppress(sqlite3.Error):
            conn.close()


@contextlib.contextmanager
def kept_open() -> Iterator[None]:
    """:func:`keep_open` for the body (a batch's files in this process), then :func:`close_kept`."""
    if _kept is not None:  # an outer scope keeps them and closes them
        yield
        return
    keep_open()
    try:
        yield
    finally:
        close_kept()


class SqliteStore:
    """Subclasses give ``NAME`` ("token"), ``FILENAME`` (in the cache folder), ``TABLE``, ``SCHEMA`` and
    ``PURPOSE`` ("counting without it")."""

    NAME: ClassVar[str]
    FILENAME: ClassVar[str]
    TABLE: ClassVar[str]
    SCHEMA: ClassVar[str]
    PURPOSE: ClassVar[str]

    def __init__(self, path: Path | None = None, *, disabled: bool = False, timeout: float = 10.0) -> None:
        self.path = path if path is not None else cache_dir() / self.FILENAME
        self._timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._owner = os.getpid()  # the process that opened ``_conn``
        self._lock = threading.Lock()
        self._off = disabled or env_flag("CTXC_NO_CACHE")

    @property
    def enabled(self) -> bool:
        return not self._off

    def _fail(self, exc: BaseException) -> None:
        self._off = True
        if self._conn is not None:
            release(self._conn, broken=True)
            self._conn = None
        message = "ctxc: warning: %s cache at %s is unusable (%s); %s"
        warn_once(log, f"cache {self.path}", message, self.NAME, self.path, exc, self.PURPOSE)

    def _connect(self) -> sqlite3.Connection | None:
        if self._off:
            return None
        if self._conn is not None and self._owner != os.getpid():  # a store a batch worker inherited
            _inherited.append(self._conn)
            self._conn = None
        if self._conn is None:
            self._owner = os.getpid()
            try:
                self._conn = connect(self.path, self._timeout, lambda conn: conn.execute(self.SCHEMA))
            except (OSError, sqlite3.Error) as exc:
                self._fail(exc)
        return self._conn

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[Any] | None:
        """All rows of a query, or None when the store is off or fails."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return None
            try:
                return conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                self._fail(exc)
                return None

    def _write(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """Run ``sql`` for every row in one immediate transaction."""
        with self._lock:
            conn = self._connect() if rows else None
            if conn is None:
                return
            try:
                with immediate(conn):
                    conn.executemany(sql, rows)
            except sqlite3.Error as exc:
                self._fail(exc)

    def size(self) -> int:
        """Stored entries (0 when the store is off). Not ``__len__``: an empty store must stay truthy."""
        rows = self._read(f"SELECT count(*) FROM {self.TABLE}")
        return int(rows[0][0]) if rows else 0

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                if self._owner == os.getpid():
                    release(self._conn)
                else:
                    _inherited.append(self._conn)
                self._conn = None

    def __del__(self) -> None:
        # A connection is in a reference cycle with its own statement cache, so dropping the last store
        # would leave it open until a full garbage collection: a long-lived process (an agent loop, a
        # test session) ran out of file descriptors.
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
