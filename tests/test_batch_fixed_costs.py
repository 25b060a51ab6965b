"""What a batch pays once instead of once per file, and the promises that still hold.

Each SQLite file (token cache, search index) stays open across the files a process handles
(``ctxc.sqlite_store.kept_open``): each file's writes stay visible, forks never share a connection, and
every connection is closed when the batch ends. The output folders are swept of a killed run's
temporary files once, when the batch starts, not listed again for each file."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLES

import ctxc.compact_batch
import ctxc.output
from ctxc.cli import main
from ctxc.search.chunks import Chunk
from ctxc.search.index import SearchIndex
from ctxc.sqlite_store import connect, kept_open, release
from ctxc.tokens.cache import TokenCache, digest


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CTXC_NO_CACHE", raising=False)
    return tmp_path / "cache"


def _chunk(text: str) -> Chunk:
    return Chunk(0, 0, 1, "user", "text", "", part=0, parts=1, context="", body=text)


def test_a_store_reused_across_files_still_sees_each_files_writes(cache_dir: Path, tmp_path: Path) -> None:
    key = (digest("first file"), "o200k_base")
    with kept_open():
        with TokenCache() as first:  # one file's counter
            first.put_many([(key, 3)])
            conn = first._connect()
        with TokenCache() as second:  # the next file's
            assert second._connect() is conn  # the same connection, not closed in between
            assert second.get_many([key]) == {key: 3}
        for n in range(2):
            with SearchIndex.for_archive(tmp_path) as index:
                assert index.add(f"id{n}", [_chunk(f"word{n}")]) == 1
                assert index.has("id0")
        # Committed: another connection (another process's) reads both files' writes meanwhile.
        other = sqlite3.connect(tmp_path / "search.sqlite")
        assert other.execute("SELECT count(*) FROM docs").fetchone()[0] == 2
        assert sqlite3.connect(cache_dir / "tokens.sqlite3").execute(
            "SELECT tokens FROM counts"
        ).fetchall() == [(3,)]
    with pytest.raises(sqlite3.ProgrammingError):  # closed when the batch ends
        conn.execute("SELECT 1")
    # Outside a batch each use opens and closes its own, as before.
    with TokenCache() as a, TokenCache() as b:
        assert a._connect() is not b._connect()
        assert b.get_many([key]) == {key: 3}


def test_a_broken_kept_connection_is_not_handed_out_again(cache_dir: Path) -> None:
    path = cache_dir / "t.sqlite3"
    with kept_open():
        conn = connect(path, 5.0)
        release(conn, broken=True)
        with pytest.raises(sqlite3.ProgrammingError):
            conn.execute("SELECT 1")
        again = connect(path, 5.0)
        assert again is not conn
        assert again.execute("SELECT 1").fetchone() == (1,)


def _wait(pid: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    raise AssertionError("the child did not end")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents(cache_dir: Path) -> None:
    mine, theirs = (digest("parent"), "o200k_base"), (digest("child"), "o200k_base")
    with kept_open():
        store = TokenCache()
        store.put_many([(mine, 1)])
        parent_conn = store._connect()
        pid = os.fork()
        if pid == 0:  # the child: a batch worker forked while the parent kept its connection
            code = 1
            try:
                from ctxc.sqlite_store import close_kept

                child = TokenCache()
                ok = child._connect() is not parent_conn and child.get_many([mine]) == {mine: 1}
                child.put_many([(theirs, 2)])
                close_kept()
                code = 0 if ok else 2
            finally:
                os._exit(code)
        assert _wait(pid) == 0
        # The parent's connection still works and sees what the child wrote.
        assert store._connect() is parent_conn
        assert store.get_many([mine, theirs]) == {mine: 1, theirs: 2}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_batch_indexes_every_file_and_closes_the_index(tmp_path: Path, jobs: str) -> None:
    src = tmp_path / "logs"
    src.mkdir()
    names = sorted(p.name for p in SAMPLES.glob("*.jsonl"))
    for name in names:
        shutil.copy(SAMPLES / name, src / name)
    archive = tmp_path / "archive"
    args = ["compact", str(src), "--out-dir", str(tmp_path / "out"), "--archive", str(archive), "--quiet"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--target-ratio", "0.5", "--window", "20000", "--jobs", jobs])
    assert exc.value.code in (0, None)
    conn = sqlite3.connect(archive / "search.sqlite")
    assert conn.execute("SELECT count(*) FROM docs").fetchone()[0] == len(names)
    conn.close()
    if jobs == "1":  # this process's connections were closed at the end: the WAL folded back, removed
        assert not (archive / "search.sqlite-wal").exists()
    # (Two workers closing at the same moment may each see the other and leave the WAL to the next open.)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid


def test_a_batch_lists_each_output_folder_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "logs"
    src.mkdir()
    for p in SAMPLES.glob("*.jsonl"):
        shutil.copy(p, src / p.name)
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f".codex.jsonl.{_dead_pid()}.abc123.ctxc-tmp"
    stale.write_bytes(b"half an output")
    calls: list[tuple[str, str | None]] = []
    real = ctxc.output.sweep_stale_temps

    def counted(directory: str | os.PathLike[str], name: str | None = None) -> None:
        calls.append((str(directory), name))
        real(directory, name)

    monkeypatch.setattr(ctxc.output, "sweep_stale_temps", counted)
    monkeypatch.setattr(ctxc.compact_batch, "sweep_stale_temps", counted)
    args = ["compact", str(src), "--out-dir", str(out), "--archive", str(tmp_path / "archive"), "--quiet"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--target-ratio", "0.5", "--window", "20000", "--jobs", "1"])
    assert exc.value.code in (0, None)
    assert calls == [(str(out), None)]  # once, for the folder: not once more per file
    assert not stale.exists()
    assert len(list(out.glob("*.jsonl"))) == len(list(src.glob("*.jsonl")))


def test_an_in_place_batch_sweeps_beside_the_file_a_link_names(tmp_path: Path) -> None:
    real_dir, links = tmp_path / "real", tmp_path / "links"
    real_dir.mkdir()
    links.mkdir()
    for name in ("chat-openai.jsonl", "codex.jsonl"):
        shutil.copy(SAMPLES / name, real_dir / name)
        (links / name).symlink_to(real_dir / name)
    # A killed run's temporary file where the output is really written: beside the link's target.
    stale = real_dir / f".codex.jsonl.{_dead_pid()}.abc123.ctxc-tmp"
    stale.write_bytes(b"half an output")
    args = ["compact", str(links), "--in-place", "--archive", str(tmp_path / "archive"), "--quiet"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--target-ratio", "0.5", "--window", "20000", "--jobs", "1"])
    assert exc.value.code in (0, None)
    assert not stale.exists()
    assert sorted(p.name for p in real_dir.iterdir()) == ["chat-openai.jsonl", "codex.jsonl"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_store_inherited_through_fork_never_uses_the_parents_connection(cache_dir: Path) -> None:
    # A process-wide counter (ctxc.analysis.process_counter) keeps its token cache open; a batch worker
    # forked from that process inherits the very object. Used there, the parent's connection corrupts the
    # file ("database disk image is malformed" for every later run).
    mine, theirs = (digest("parent"), "o200k_base"), (digest("child"), "o200k_base")
    store = TokenCache()
    store.put_many([(mine, 1)])
    parent_conn = store._connect()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fresh = store._connect() is not parent_conn
            seen = store.get_many([mine]) == {mine: 1}
            store.put_many([(theirs, 2)])
            store.close()  # sets the parent's connection aside, unclosed
            code = 0 if fresh and seen else 2
        finally:
            os._exit(code)
    assert _wait(pid) == 0
    assert store._connect() is parent_conn
    assert store.get_many([mine, theirs]) == {mine: 1, theirs: 2}
    assert parent_conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store.close()
