"""``ctxc search`` and ``ctxc show``: the index beside the archive, its hooks, rebuilding, references."""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import os
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import ROOT, SAMPLES
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxc.search
from ctxc.archive import Archive
from ctxc.archive_store import citation, sha256_hex
from ctxc.cli import main
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.errors import ArchiveError, ExitCode, UsageError
from ctxc.formats import load
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock, Transcript
from ctxc.search import background, index_transcript, indexer, rebuild, search
from ctxc.search.chunks import MAX_CHARS, chunk_messages, chunk_transcript, split_text
from ctxc.search.embed import hybrid_search
from ctxc.search.index import SCHEMA_VERSION, SearchIndex, fts_query
from ctxc.search.show import parse_ref, show

SAMPLE = SAMPLES / "claude-code.jsonl"


def run(*args: str) -> int:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    code = exc.value.code
    return code if isinstance(code, int) else 0


def chat(lines: Sequence[dict[str, object]], name: str = "t.jsonl") -> Transcript:
    stream = io.BytesIO(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    stream.name = name
    return load(stream)


def session(detail: str = "the staging bucket is eu-west-9-quokka") -> Transcript:
    """A small Anthropic-dialect session with one detail buried in an early tool result."""
    lines: list[dict[str, object]] = [
        {"role": "user", "content": "Please fix the flaky upload test in services/upload.py"},
    ]
    for i in range(12):
        lines.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {i}: reading the file."},
                    {
                        "type": "tool_use",
                        "id": f"t{i}",
                        "name": "Read",
                        "input": {"file_path": f"src/mod{i}.py"},
                    },
                ],
            }
        )
        body = "\n".join(f"line {n}: value = compute({n})" for n in range(60))
        if i == 1:
            body += f"\nNOTE: {detail}"
        lines.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": body}]}
        )
    lines.append({"role": "assistant", "content": "All done."})
    return chat(lines, "session.jsonl")


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    return Archive(tmp_path / "archive")


# ------------------------------------------------------------------------------------------- chunking


def test_split_text_respects_the_limit_and_overlaps_short_lines() -> None:
    text = "\n".join(f"row {i} " + "x" * 50 for i in range(200))
    pieces = split_text(text, 500)
    assert all(len(p) <= 500 for p in pieces)
    assert len(pieces) > 20
    # Each piece after the first starts with the last line of the one before it.
    for a, b in itertools.pairwise(pieces):
        assert b.split("\n", 1)[0] == a.rsplit("\n", 1)[-1]
    # Every line of the text is in some piece.
    assert all(any(line in p for p in pieces) for line in text.split("\n"))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "bb", " ", "\n", "\n\n", "word ", "x" * 7]), max_size=80),
    st.integers(min_value=3, max_value=40),
)
def test_split_text_keeps_every_line_in_order_in_pieces_under_the_limit(parts: list[str], limit: int) -> None:
    text = "".join(parts).strip("\n")
    pieces = split_text(text, limit)
    assert all(len(p) <= limit and p.strip() for p in pieces)
    if max(map(len, text.split("\n"))) <= limit:
        # Each piece is a run of the text's lines; together, with overlaps, they hold every non-blank line.
        # A run can match at several places when lines repeat, so every place a piece may end is followed.
        lines = text.split("\n")
        ends = {0}
        for p in pieces:
            run = p.split("\n")
            ends = {
                start + len(run)
                for at in ends
                for start in range(max(at - 1, 0), len(lines))
                if lines[start : start + len(run)] == run
                and not any(line.strip() for line in lines[at:start])  # no line left out
            }
            assert ends, p
        assert any(not any(line.strip() for line in lines[at:]) for at in ends)


def test_split_text_cuts_a_huge_line_at_spaces() -> None:
    words = " ".join(f"w{i}" for i in range(3000))
    pieces = split_text(words, MAX_CHARS)
    assert all(len(p) <= MAX_CHARS for p in pieces)
    assert " ".join(pieces).split() == words.split()


def test_chunks_carry_session_turn_tool_and_path() -> None:
    t = session()
    chunks = list(chunk_messages(t.messages, source="logs/session.jsonl", fmt="chat"))
    result = next(c for c in chunks if "NOTE:" in c.body)
    assert result.kind == "tool_result"
    assert result.tool == "Read"
    assert result.role == "user"
    assert result.message == 4
    assert result.line == 5
    assert "session.jsonl (chat)" in result.context
    assert "turn 1" in result.context
    assert "Read `src/mod1.py` result" in result.context
    assert "Request: “Please fix the flaky upload test" in result.context
    # Only the session and what the block is are indexed, not positions or the request.
    assert result.about == "session.jsonl (chat): Read `src/mod1.py` result"
    call = next(c for c in chunks if c.kind == "tool_use" and c.message == 3)
    assert call.body == "file_path: src/mod1.py"


def test_fts_query_never_breaks_on_punctuation() -> None:
    assert fts_query('ORDER-7731 "refund" (why?)') == '"ORDER 7731" OR "refund"'
    assert fts_query("what is the") == '"what" OR "is" OR "the"'  # only stopwords: keep them
    assert fts_query("the user_id of it") == '"user id"'
    assert fts_query("*** -- ::") == ""


# ---------------------------------------------------------------------------- indexing and searching


def test_compaction_indexes_the_original_and_search_finds_what_it_removed(archive: Archive) -> None:
    t = session()
    result = compact_transcript(
        t, CompactOptions(strategy="fifo", target_tokens=1500, window=10_000, keep_last=2), archive=archive
    )
    assert "eu-west-9-quokka" not in result.transcript.to_bytes().decode()
    assert (archive.root / "search.sqlite").is_file()
    hits = search("staging bucket", archive=archive, limit=5)
    assert hits, "the removed detail must be found"
    top = hits[0]
    assert top.archive_id == result.archive_id
    assert (top.message, top.line, top.role, top.kind, top.tool) == (4, 5, "user", "tool_result", "Read")
    assert "**staging** **bucket**" in top.snippet
    assert "eu-west-9-quokka" in top.text
    assert top.ref == f"{result.archive_id[:12]}:4"
    assert top.score > 0
    # What the ref names is the original message, with the detail.
    shown = show(top.ref, archive=archive)
    assert [m.index for m in shown.messages] == [4]
    assert "eu-west-9-quokka" in shown.messages[0].text


def test_one_hit_per_message_best_first(archive: Archive) -> None:
    t = session()
    index_transcript(archive, "a" * 64, t)
    hits = search("value compute", archive=archive, limit=50)
    keys = [(h.archive_id, h.message) for h in hits]
    assert len(keys) == len(set(keys))
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_index_is_idempotent_and_scoped_by_id(archive: Archive) -> None:
    t = session()
    assert index_transcript(archive, "a" * 64, t) > 0
    assert index_transcript(archive, "a" * 64, t) == 0  # already there: nothing added twice
    index_transcript(archive, "b" * 64, session("the staging bucket is us-east-2-wombat"))
    both = search("staging bucket", archive=archive, limit=5)
    assert {h.archive_id[:1] for h in both} == {"a", "b"}
    only_b = search("staging bucket", archive=archive, limit=5, archive_id="b" * 12)
    assert {h.archive_id[:1] for h in only_b} == {"b"}


def test_an_id_the_index_does_not_hold_is_an_archive_error(archive: Archive) -> None:
    """``--id`` with a mistyped id said "no hits", as if the words were not in that original."""
    index_transcript(archive, "a" * 64, session())
    with pytest.raises(ArchiveError, match="holds no object cccc"):
        search("staging bucket", archive=archive, limit=5, archive_id="cccc")
    assert search("staging bucket", archive=archive, limit=5, archive_id="AAAA")


def test_raw_fts_syntax_and_its_errors(archive: Archive) -> None:
    index_transcript(archive, "a" * 64, session())
    assert search('"staging bucket" AND quokka', archive=archive, raw=True)
    assert not search('"staging bucket" NOT quokka', archive=archive, raw=True)
    with pytest.raises(UsageError, match="FTS5"):
        search('"unbalanced', archive=archive, raw=True)
    with pytest.raises(UsageError, match="no words"):
        search("?!", archive=archive)


def test_offloaded_output_is_found_and_names_its_blob(archive: Archive) -> None:
    big = (
        "\n".join(f"{i:05d} log line with nothing special in it" for i in range(3000))
        + "\nPANIC: disk quota ZX-81"
    )
    t = chat(
        [
            {"role": "user", "content": "Run the job"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "b1", "name": "Bash", "input": {"command": "./job"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b1", "content": big}]},
            {"role": "assistant", "content": "It failed."},
            {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "bye"},
        ]
    )
    opts = CompactOptions(strategy="offload", window=1_000_000, target_tokens=1_000_000, keep_last=2)
    result = compact_transcript(
        t, replace_settings(opts, {"offload.threshold_tokens": "1000"}), archive=archive
    )
    assert "PANIC" not in result.transcript.to_bytes().decode()
    hits = search("disk quota", archive=archive, limit=3)
    assert hits
    assert hits[0].message == 2
    assert hits[0].blob is not None
    assert archive.read(hits[0].blob).decode().endswith("PANIC: disk quota ZX-81")


def replace_settings(options: CompactOptions, settings: dict[str, str]) -> CompactOptions:
    from dataclasses import replace

    return replace(options, settings=settings)


def test_an_index_failure_never_fails_the_compaction(
    archive: Archive, caplog: pytest.LogCaptureFixture
) -> None:
    (archive.root).mkdir(parents=True)
    (archive.root / "search.sqlite").mkdir()  # sqlite cannot open a directory
    with caplog.at_level(logging.WARNING, logger="ctxc.search"):
        result = compact_transcript(
            session(),
            CompactOptions(strategy="fifo", target_tokens=1500, window=10_000, keep_last=2),
            archive=archive,
        )
    assert result.tokens_after <= 1500
    assert archive.read(result.archive_id)  # the original is archived all the same
    assert any("not updated" in r.getMessage() and "--reindex" in r.getMessage() for r in caplog.records)
    # Once the index can be written again, --reindex brings the original back.
    (archive.root / "search.sqlite").rmdir()
    report = rebuild(archive)
    assert report.originals == 1
    assert search("staging bucket", archive=archive)


def test_cli_compaction_warns_on_stderr_when_indexing_fails(tmp_path: Path) -> None:
    arch = tmp_path / "archive"
    (arch / "search.sqlite").mkdir(parents=True)
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "ctxc", "compact", str(SAMPLE), "-s", "fifo", "--target-ratio", "0.02",
         "--archive", str(arch), "-o", str(out)],
        capture_output=True, text=True, check=False, env={**os.environ, "CTXC_CACHE_DIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert out.is_file()
    assert "search index" in proc.stderr
    assert "ctxc search --reindex" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_index_env_turns_the_hooks_off_and_search_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arch = tmp_path / "archive"
    monkeypatch.setenv("CTXC_NO_INDEX", "1")
    assert run("compact", str(SAMPLE), "-s", "fifo", "--target-ratio", "0.02", "--archive", str(arch), "-q",
               "-o", str(tmp_path / "o.jsonl")) == 0  # fmt: skip
    assert not (arch / "search.sqlite").exists()
    monkeypatch.delenv("CTXC_NO_INDEX")
    # The manifest lists the original: the search indexes it first.
    hits = search("coupon rounding", archive=Archive(arch))
    assert hits
    assert hits[0].source == str(SAMPLE)


def test_no_index_option_leaves_indexing_to_the_next_search(tmp_path: Path) -> None:
    arch = tmp_path / "archive"
    assert run("compact", str(SAMPLE), "-s", "fifo", "--target-ratio", "0.02", "--archive", str(arch), "-q",
               "--no-index", "-o", str(tmp_path / "o.jsonl")) == 0  # fmt: skip
    assert not (arch / "search.sqlite").exists()
    hits = search("coupon rounding", archive=Archive(arch))
    assert hits
    assert hits[0].source == str(SAMPLE)


def test_rebuild_from_objects_and_manifest(archive: Archive, tmp_path: Path) -> None:
    t = session()
    compact_transcript(
        t, CompactOptions(strategy="fifo", target_tokens=1500, window=10_000, keep_last=2), archive=archive
    )
    lone = archive.store(b"an offloaded output whose original is gone: PELICAN-42 overflow\n")
    (archive.root / "search.sqlite").unlink()
    report = rebuild(archive)
    # No manifest (a library run): the original is recognised as a transcript, the other as text.
    assert (report.originals, report.texts) == (1, 1)
    hits = search("PELICAN-42", archive=archive)
    assert hits[0].archive_id == lone
    assert hits[0].message == -1
    assert hits[0].ref == lone[:12]
    assert search("staging bucket", archive=archive)


def test_two_processes_index_one_archive_at_once(tmp_path: Path) -> None:
    arch = tmp_path / "archive"
    script = (
        "import sys\n"
        "from ctxc.archive import Archive\n"
        "from ctxc.archive_store import sha256_hex\n"
        "from ctxc.formats import load\n"
        "from ctxc.search import index_transcript\n"
        "a = Archive.open(sys.argv[1])\n"
        "for f in sys.argv[2:]:\n"
        # An id from the path's hash: its hex spelling cut to 64 would collide in a deep checkout.
        "    index_transcript(a, sha256_hex(f.encode()), load(f))\n"
    )
    files = [str(p) for p in sorted(SAMPLES.glob("*.jsonl"))]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(arch), *files[::step]], env=env, stderr=subprocess.PIPE
        )
        for step in (1, -1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    with SearchIndex.for_archive(arch) as index:
        assert index.stats()["originals"] == len(files)  # each indexed once, whoever came first
        rows = index.conn.execute("SELECT archive_id, count(*) FROM chunks GROUP BY archive_id")
        counts = dict(rows.fetchall())
    for f in files:
        ident = sha256_hex(f.encode())
        assert counts[ident] == len(list(chunk_transcript(load(f))))


# ------------------------------------------------------------------------------- background indexing


def indexed_within(root: Path, ident: str, timeout: float = 120.0) -> bool:
    """Whether the index of ``root`` holds ``ident`` within ``timeout`` seconds (a background indexer
    may be at work; the timeout only bounds a failing test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (root / "search.sqlite").exists():
            with SearchIndex.for_archive(root) as index:
                if index.has(ident):
                    return True
        time.sleep(0.05)
    return False


def test_a_large_original_is_indexed_by_a_process_of_its_own(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ctxc.search, "BACKGROUND_BYTES", 1)  # every stored original counts as large

    def not_here(*args: object, **kwargs: object) -> int:
        raise AssertionError("indexed in the compacting process")

    monkeypatch.setattr(ctxc.search, "index_transcript", not_here)
    monkeypatch.setattr(ctxc.search, "_index_object", not_here)
    started: list[str] = []

    def index_later(root: Path, archive_id: str, *, fmt: str, source: str | None) -> None:
        started.append(archive_id)
        background.index_later(root, archive_id, fmt=fmt, source=source)

    monkeypatch.setattr(ctxc.search, "index_later", index_later)
    result = compact_transcript(
        session(), CompactOptions(strategy="fifo", target_tokens=1500, window=10_000, keep_last=2),
        archive=archive,
    )  # fmt: skip
    assert started == [result.archive_id]
    # The manifest line's hook leaves it to that process too.
    archive.record_run({"archive_id": result.archive_id, "format": "chat", "input_path": "session.jsonl"})
    assert started == [result.archive_id]
    assert indexed_within(archive.root, result.archive_id)
    hits = search("staging bucket", archive=archive, catch_up=False)
    assert (hits[0].archive_id, hits[0].message, hits[0].source) == (result.archive_id, 4, "session.jsonl")
    assert not (archive.root / background.LOG_NAME).exists()


def test_cli_compaction_of_a_large_log_has_it_indexed_in_the_background(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.write(b'{"role": "user", "content": "Deploy the service, then tidy up."}\n')
        f.write(b'{"role": "assistant", "content": "Deploying with the key PELICAN-7731-ZULU."}\n')
        n = 0
        while f.tell() < background.BACKGROUND_BYTES + 4096:
            role = ("assistant", "user")[n % 2]
            text = f"step {n}: " + " ".join(f"word{n * 7 + i}" for i in range(150))
            f.write(orjson.dumps({"role": role, "content": text}) + b"\n")
            n += 1
    arch = tmp_path / "archive"
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "CTXC_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "ctxc", "compact", str(big), "-s", "fifo", "--target-tokens", "20000",
         "--archive", str(arch), "-o", str(out), "--report", str(tmp_path / "report.json")],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    assert b"PELICAN-7731" not in out.read_bytes()
    ident = orjson.loads((tmp_path / "report.json").read_bytes())["run"]["archive_id"]
    assert indexed_within(arch, ident)  # by the background process: nothing else indexes it
    found = subprocess.run(
        [sys.executable, "-m", "ctxc", "search", "PELICAN-7731", "--archive", str(arch), "--format", "json"],
        capture_output=True, check=False, env=env,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    hits = orjson.loads(found.stdout)["hits"]
    assert (hits[0]["archive_id"], hits[0]["message"]) == (ident, 1)
    assert not (arch / background.LOG_NAME).exists()


def test_a_background_indexer_that_fails_says_why_in_the_archive(tmp_path: Path) -> None:
    arch = tmp_path / "archive"
    arch.mkdir()
    entry = {"archive_id": "ab" * 32, "format": "chat", "input_path": "t.jsonl"}  # never stored
    (arch / background.QUEUE_NAME).write_bytes(orjson.dumps(entry) + b"\n")
    command = [sys.executable, "-m", "ctxc.search.indexer", str(arch)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 1
    log = (arch / background.LOG_NAME).read_text()
    assert "abababababab" in log
    assert "ctxc search --reindex" in log
    assert not background.queued(arch)  # trying again would fail again
    bad = subprocess.run(command[:3], capture_output=True, text=True, check=False, env=env)
    assert bad.returncode == 2
    assert "usage" in bad.stderr


def stored_sessions(archive: Archive, count: int) -> list[str]:
    """Store ``count`` sessions, each with its own detail ``HERON-<n>``; their archive ids."""
    return [archive.store(session(f"the detail is HERON-{n}").to_bytes()) for n in range(count)]


def test_one_indexer_takes_every_queued_original(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        child = real_popen(*args, **kwargs)
        spawned.append(child)
        return child

    monkeypatch.setattr(background.subprocess, "Popen", popen)
    ids = stored_sessions(archive, 3)
    with background.writer_lock(archive.root):  # as an indexer at work holds it
        for n, ident in enumerate(ids):
            background.index_later(archive.root, ident, fmt="chat", source=f"s{n}.jsonl")
        assert spawned == []  # the one at work takes the queue again once it lets go
        assert [e["archive_id"] for e in background.queue_entries(archive.root)] == ids
    background.start_indexer(archive.root)
    assert len(spawned) == 1
    assert spawned[0].wait(timeout=120) == 0
    assert not background.queued(archive.root)
    for n, ident in enumerate(ids):
        hits = search(f"HERON-{n}", archive=archive, catch_up=False)
        assert (hits[0].archive_id, hits[0].source) == (ident, f"s{n}.jsonl")


def test_an_indexer_goes_round_again_for_what_was_queued_while_it_worked(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(background, "start_indexer", lambda root: None)  # no process: main runs here
    monkeypatch.setattr(indexer.os, "nice", lambda n: 0)
    first, second = stored_sessions(archive, 2)
    background.index_later(archive.root, first, fmt="chat", source="first.jsonl")
    rounds: list[list[str]] = []
    real = ctxc.search.index_queued

    def index_queued(store: Archive, index: SearchIndex | None = None) -> bool:
        rounds.append([e["archive_id"] for e in background.queue_entries(store.root)])
        done = real(store, index)
        if len(rounds) == 1:  # another run queues one while this indexer holds the lock
            background.index_later(store.root, second, fmt="chat", source="second.jsonl")
        return done

    monkeypatch.setattr(indexer, "index_queued", index_queued)
    assert indexer.main([str(archive.root)]) == 0
    assert rounds == [[first], [second]]
    assert search("HERON-1", archive=archive, catch_up=False)[0].archive_id == second
    assert not logging.getLogger("ctxc").handlers  # the indexer's log handler is gone with it


def test_search_indexes_what_waits_in_the_queue(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "start_indexer", lambda root: None)  # as if the indexer was killed
    (ident,) = stored_sessions(archive, 1)
    background.index_later(archive.root, ident, fmt="chat", source="lone.jsonl")
    hits = search("HERON-0", archive=archive)  # no manifest line: only the queue names it
    assert (hits[0].archive_id, hits[0].source) == (ident, "lone.jsonl")
    assert not background.queued(archive.root)


def test_search_catches_up_holding_the_index_lock(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    compact_transcript(
        session(), CompactOptions(strategy="fifo", target_tokens=1500, window=10_000, keep_last=2),
        archive=archive,
    )  # fmt: skip
    held: list[bool] = []
    real_sync = ctxc.search.sync

    def sync(store: Archive, index: SearchIndex, *read: Any) -> None:
        held.append(background.indexer_running(store.root))  # another descriptor: it cannot take it
        real_sync(store, index, *read)

    monkeypatch.setattr(ctxc.search, "sync", sync)
    assert search("staging bucket", archive=archive)
    assert held == [True]
    assert not background.indexer_running(archive.root)


def test_cli_search_says_it_waits_for_a_background_indexer(archive: Archive) -> None:
    compact_transcript(
        session(), CompactOptions(strategy="fifo", target_tokens=1500, window=10_000, keep_last=2),
        archive=archive,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with background.writer_lock(archive.root):  # as a background indexer holds it
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxc", "search", "staging bucket", "--archive", str(archive.root),
             "--format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )  # fmt: skip
        assert proc.stderr is not None
        note = proc.stderr.readline().decode()
        assert "waiting for the background indexer" in note
        assert proc.poll() is None  # still waiting
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert orjson.loads(out)["hits"]


# ------------------------------------------------------------------------------------------ hybrid


class KeywordEmbedder:
    """A stand-in embedding model: one dimension per topic word, so similarity is predictable."""

    name = "test-keywords/1"
    topics = ("database", "postgres", "mysql", "cache", "upload")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for t in texts:
            low = t.lower()
            vec = [float(low.count(w)) for w in self.topics]
            if "postgres" in low or "mysql" in low:
                vec[0] += 1.0  # both are databases
            out.append([*vec, 0.01])
        return out


def test_hybrid_ranks_by_bm25_and_meaning(archive: Archive) -> None:
    t = chat(
        [
            {"role": "user", "content": "We settled on Postgres for the ledger."},
            {"role": "assistant", "content": "Noted: the upload cache is in Redis."},
            {"role": "user", "content": "Which database again?"},
            {"role": "assistant", "content": "The database question: see above."},
        ]
    )
    index_transcript(archive, "c" * 64, t)
    with SearchIndex.for_archive(archive.root) as index:
        hits = hybrid_search(index, "database", limit=3, embedder=KeywordEmbedder())
        # BM25 alone never finds message 0 (it does not say "database"); by meaning it is a database.
        assert 0 in [h.message for h in hits]
        assert all(h.similarity is not None for h in hits)
        for h in hits:
            assert h.score == pytest.approx(0.4 * h.bm25 / max(x.bm25 for x in hits) + 0.6 * h.similarity)
        stored = index.conn.execute("SELECT count(*) FROM vectors WHERE model = ?", ("test-keywords/1",))
        assert stored.fetchone()[0] == index.stats()["chunks"]  # embedded once, kept for next time


def test_hybrid_without_the_extra_says_how_to_get_it(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_transcript(archive, "a" * 64, session())
    monkeypatch.setitem(sys.modules, "static_model", None)  # as if ctxc[embed] were not installed
    with pytest.raises(UsageError, match=r"ctxc\[embed\]"):
        search("staging", archive=archive, hybrid=True)


def test_hybrid_with_the_bundled_model(archive: Archive) -> None:
    pytest.importorskip("static_model", reason="ctxc[embed] is not installed")
    index_transcript(archive, "a" * 64, session())
    hits = search("where is the staging bucket", archive=archive, hybrid=True, limit=3)
    assert hits[0].message == 4
    assert hits[0].similarity is not None
    assert 0 <= hits[0].similarity <= 1


# -------------------------------------------------------------------------------------------- show


def test_parse_ref_accepts_every_form_ctxc_writes() -> None:
    ident = "0123456789abcdef" * 4
    assert parse_ref(citation(ident, 3, 17)).__str__() == "0123456789ab:3-17"
    assert (parse_ref(f"[ctxc offloaded 40 tokens to /x; {citation(ident, 5, 5)}]").first) == 5
    assert (parse_ref("0123456789AB:4").first, parse_ref("0123456789ab:4").last) == (4, 4)
    assert (parse_ref("0123456789ab:2-9").first, parse_ref("0123456789ab:2-9").last) == (2, 9)
    assert parse_ref("0123456789ab").first is None
    for bad in ("xyz", "0123:4", "0123456789ab:9-2", ""):
        with pytest.raises(UsageError):
            parse_ref(bad)


def test_show_cli_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arch = tmp_path / "archive"
    assert run("compact", str(SAMPLE), "-s", "fifo", "--target-ratio", "0.02", "--archive", str(arch), "-q",
               "-o", str(tmp_path / "o.jsonl")) == 0  # fmt: skip
    ident = Archive(arch).manifest()[-1]["archive_id"]
    capsys.readouterr()
    # Unquoted citation words are joined back together.
    assert (
        run("show", "ctxc", "archive", ident[:12], "messages", "20-21", "--archive", str(arch), "-f", "text")
        == 0
    )
    out = capsys.readouterr().out
    assert "[20] assistant (line 40)" in out
    assert "[21] user (line 42)" in out
    assert "git commit" in out
    assert run("show", f"{ident[:12]}:20-21", "--archive", str(arch), "-f", "json") == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["schema"] == "ctxc.show/1"
    assert doc["format"] == "claude-code"
    assert [m["index"] for m in doc["messages"]] == [20, 21]
    assert doc["messages"][0]["blocks"][-1]["type"].startswith("tool call Bash")
    assert run("show", f"{ident[:12]}:0", "--archive", str(arch), "-f", "raw") == 0
    raw = capsys.readouterr().out.encode()
    original_lines = SAMPLE.read_bytes().splitlines(keepends=True)
    assert raw
    assert raw in b"".join(original_lines)
    assert raw.endswith(b"\n")
    assert run("show", f"{ident[:12]}:0", "--archive", str(arch), "-f", "table") == 0
    assert "user" in capsys.readouterr().out


def test_show_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arch = tmp_path / "archive"
    a = Archive(arch)
    ident = a.store(SAMPLE.read_bytes())
    assert run("show", "not-a-ref", "--archive", str(arch)) == ExitCode.USAGE
    assert run("show", "ffffffffffff:1", "--archive", str(arch)) == ExitCode.ARCHIVE
    assert run("show", f"{ident[:12]}:900-901", "--archive", str(arch)) == ExitCode.ARCHIVE
    err = capsys.readouterr().err
    assert "none in 900-901" in err
    assert run("show", f"{ident[:12]}:900", "--archive", str(arch)) == ExitCode.ARCHIVE
    assert "; no message 900" in capsys.readouterr().err  # not "none in 900-900"
    assert "Traceback" not in err
    blob = a.store(b"plain offloaded text\n")
    with pytest.raises(UsageError, match="offloaded output"):
        show(f"{blob[:12]}:3", archive=a)
    assert show(blob[:12], archive=a).text == "plain offloaded text\n"
    with pytest.raises(ArchiveError):
        show("abcdefabcdef", archive=a)


def test_show_of_an_offloaded_output_ends_its_line_but_raw_is_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arch = tmp_path / "archive"
    blob = Archive(arch).store(b"an offloaded output without a final newline")
    for fmt in ("text", "table"):
        assert run("show", blob[:12], "--archive", str(arch), "-f", fmt) == 0
        assert capsys.readouterr().out == "an offloaded output without a final newline\n"
    assert run("show", blob[:12], "--archive", str(arch), "-f", "raw") == 0
    assert capsys.readouterr().out == "an offloaded output without a final newline"


# --------------------------------------------------------------------------------------------- CLI


def test_search_cli_json_table_and_reindex(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arch = tmp_path / "archive"
    assert run("compact", str(SAMPLE), "-s", "fifo", "--target-ratio", "0.02", "--archive", str(arch), "-q",
               "-o", str(tmp_path / "o.jsonl")) == 0  # fmt: skip
    capsys.readouterr()
    assert run("search", "coupon rounding", "--archive", str(arch), "-k", "2", "-f", "json", "--full") == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["schema"] == "ctxc.search/1"
    assert doc["ranking"] == "bm25"
    assert len(doc["hits"]) == 2
    hit = doc["hits"][0]
    for key in (
        "archive_id",
        "ref",
        "message",
        "line",
        "role",
        "kind",
        "tool",
        "snippet",
        "score",
        "context",
        "text",
    ):
        assert key in hit
    assert "**" in hit["snippet"]
    assert run("search", "coupon rounding", "--archive", str(arch), "-k", "2", "-f", "table") == 0
    table = capsys.readouterr().out
    assert hit["ref"] in table
    assert run("search", "--reindex", "--archive", str(arch)) == 0
    assert "indexed 1 original(s)" in capsys.readouterr().err
    assert run("search", "--archive", str(arch)) == ExitCode.USAGE
    assert run("search", "x", "--archive", str(tmp_path / "nowhere")) == ExitCode.ARCHIVE
    assert run("search", '"open', "--raw", "--archive", str(arch)) == ExitCode.USAGE


def test_the_raw_query_of_the_help_example_is_valid_fts5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxc.cli.archive import SEARCH_EPILOG

    arch = tmp_path / "archive"
    Archive(arch).store(SAMPLE.read_bytes())
    examples = [shlex.split(line.split("#")[0]) for line in SEARCH_EPILOG.splitlines() if "--raw" in line]
    assert examples
    for words in examples:
        assert run(*words[1:], "--archive", str(arch), "-f", "json") == 0, words
    capsys.readouterr()


def test_messages_without_text_are_not_indexed() -> None:
    m = Message(role="assistant", blocks=(ToolUseBlock("x", "Noop", {}),), index=0)
    r = Message(role="user", blocks=(ToolResultBlock("x", ""), TextBlock("")), index=1)
    chunks = list(chunk_messages([m, r], source="-", fmt="chat"))
    assert [c.kind for c in chunks] == []


def test_an_index_of_an_older_version_is_rebuilt_whole_by_the_next_search(
    archive: Archive, caplog: pytest.LogCaptureFixture
) -> None:
    # Catching up indexes the manifest's originals; an upgrade that emptied the index also lost the
    # offloaded outputs' origins and the texts no manifest line names, which only a rebuild finds.
    test_offloaded_output_is_found_and_names_its_blob(archive)
    lone = archive.store(b"a text no manifest line names: PELICAN-42 overflow\n")
    rebuild(archive)
    before = {h.archive_id: h.blob for h in search("disk quota", archive=archive, limit=3)}
    path = archive.root / "search.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    with SearchIndex(path) as emptied:
        assert emptied.emptied_by_upgrade()
        assert not emptied.archive_ids()
    with caplog.at_level(logging.WARNING, logger="ctxc.search"):
        after = search("disk quota", archive=archive, limit=3)
    assert {h.archive_id: h.blob for h in after} == before
    assert any(h.archive_id == lone for h in search("PELICAN", archive=archive, limit=3))
    assert any("older ctxc" in r.getMessage() for r in caplog.records)
    with SearchIndex(path) as rebuilt:
        assert not rebuilt.emptied_by_upgrade()
