"""Odd inputs and leftovers: a million blank lines, corrupt derived files, crashed stores, API-invalid ids.

Each test here holds one promise of docs/reliability.md, "Secrets, terminals and odd inputs".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import SAMPLES, run

from ctxc.archive import Archive
from ctxc.archive_store import sha256_hex
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.errors import ArchiveError, ExitCode
from ctxc.formats import load

ROOT = Path(__file__).resolve().parents[1]


def ctxc_subprocess(
    *args: str, tmp: Path, timeout: float = 60, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m ctxc ARGS`` in a fresh process with a private cache and archive."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CTXC_CACHE_DIR": str(tmp / "cache"),
        "CTXC_ARCHIVE": str(tmp / "archive"),
    }
    return subprocess.run(
        [sys.executable, "-m", "ctxc", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_million_blank_lines_read_in_linear_time(tmp_path: Path) -> None:
    # The sniffer used to recount its whole sample for each record: blank lines made it quadratic
    # (100,000 of them took 82 s). The timeout is generous; finishing at all is the assertion.
    f = tmp_path / "blank.jsonl"
    f.write_bytes(
        b'{"role":"user","content":"hi"}\n' + b"\n" * 1_000_000 + b'{"role":"assistant","content":"hello"}\n'
    )
    done = ctxc_subprocess("analyze", str(f), "-f", "json", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert b'"message_count": 2' in done.stdout
    done = ctxc_subprocess("validate", str(f), tmp=tmp_path)
    assert done.returncode == 0, done.stderr


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid


def test_temp_files_of_killed_stores_are_swept(tmp_path: Path) -> None:
    # A store killed mid-write (SIGKILL skips every cleanup) leaves its temp file; the next store of
    # any process removes those whose process is gone, and leaves a live one's alone.
    bucket = tmp_path / "objects" / "ab"
    bucket.mkdir(parents=True)
    dead = bucket / f".tmp-{dead_pid()}-0123456789ab"
    live = bucket / f".tmp-{os.getppid()}-0123456789ab"
    dead.write_bytes(b"partial original")
    live.write_bytes(b"being written")
    ident = Archive(tmp_path).store(b'{"role":"user","content":"hi"}\n')
    assert not dead.exists()
    assert live.exists()
    assert Archive(tmp_path).read(ident)
    assert [p.name for p in (tmp_path / "objects").rglob(".tmp-*")] == [live.name]


def test_a_store_killed_mid_write_is_swept_by_the_next(tmp_path: Path) -> None:
    # A real SIGKILL while the original is on its way to disk (held in fsync here, to kill it there).
    script = (
        "import os, sys, time\n"
        "from ctxc.archive import Archive\n"
        "def stuck(fd):\n"
        "    print('syncing', flush=True)\n"
        "    time.sleep(60)\n"
        "os.fsync = stuck\n"
        "Archive.open(sys.argv[1]).store(b'original ' * 100_000)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=env, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"syncing\n"
    finally:
        child.kill()
        child.wait(timeout=30)
    left = list((tmp_path / "objects").rglob(".tmp-*"))
    assert [p.name.startswith(f".tmp-{child.pid}-") for p in left] == [True]
    Archive(tmp_path).store(b"next")
    assert list((tmp_path / "objects").rglob(".tmp-*")) == []


def test_a_failed_store_leaves_no_offloaded_blobs(tmp_path: Path) -> None:
    # The original cannot be stored (here: a directory squats its object path, as a full disk
    # would fail the write); the outputs offload stored meanwhile are cited by nothing: removed.
    big = "\n".join(f"row {i:05d}: value={i * 7} status=ok" for i in range(3000))
    lines = [
        {"role": "user", "content": "export the table"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": '{"cmd":"x"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": big},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "welcome"},
        {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "bye"},
    ]
    src = tmp_path / "t.jsonl"
    src.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    archive = Archive(tmp_path / "archive")
    archive.object_path(sha256_hex(src.read_bytes())).mkdir(parents=True)
    options = CompactOptions(
        strategy="offload", settings={"offload.threshold_tokens": "100"}, window=10**9, allow_over=True
    )
    with pytest.raises(ArchiveError, match="cannot write to the archive"):
        compact_transcript(load(src), options, archive=archive, original_bytes=src.read_bytes())
    assert [p for p in (tmp_path / "archive" / "objects").rglob("*") if p.is_file()] == []
    # The same run with room to store keeps them (the blob is what the output points to).
    archive.object_path(sha256_hex(src.read_bytes())).rmdir()
    result = compact_transcript(load(src), options, archive=archive, original_bytes=src.read_bytes())
    assert any(a.kind == "offload" for c in result.conversations for a in c.actions)
    assert len([p for p in (tmp_path / "archive" / "objects").rglob("*") if p.is_file()]) == 2


@pytest.mark.parametrize("damage", ["not-a-database", "pages-overwritten"])
def test_reindex_sets_a_damaged_index_aside_and_rebuilds(
    damage: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "archive"
    monkeypatch.setenv("CTXC_ARCHIVE", str(root))
    for sample in ("chat-openai.jsonl", "codex.jsonl"):
        code, _, err = run(
            capsys, "compact", str(SAMPLES / sample), "-s", "mask", "-o", str(tmp_path / sample)
        )
        assert code == 0, err
    index = root / "search.sqlite"
    assert index.stat().st_size > 8192
    if damage == "not-a-database":
        index.write_bytes(os.urandom(8192))
    else:  # the header survives, the pages after it do not
        with open(index, "r+b") as f:
            f.seek(100)
            f.write(os.urandom(index.stat().st_size - 100))
    # A compact with a damaged index still succeeds, and says so once (it used to say it twice).
    done = ctxc_subprocess(
        "compact", str(SAMPLES / "dataset.jsonl"), "-s", "mask", "-o", str(tmp_path / "d.jsonl"), tmp=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(b"--reindex") == 1, done.stderr
    code, _, err = run(capsys, "search", "--reindex")
    assert code == 0, err
    assert "moved it to" in err
    assert "indexed 3 original(s)" in err
    assert len(list(root.glob("search.sqlite.corrupt-*"))) == 1
    code, out, err = run(capsys, "search", "the", "-f", "json")
    assert code == 0, err
    assert orjson.loads(out)["hits"]


def _call(ident: object) -> dict[str, object]:
    return {"id": ident, "type": "function", "function": {"name": "sh", "arguments": "{}"}}


#: Transcripts an API would reject for their ids, with the problem validate must name.
BAD_IDS: dict[str, tuple[str, list[dict[str, object]]]] = {
    "duplicate-in-one-turn": (
        "duplicate_call",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [_call("c1"), _call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "first output"},
            {"role": "assistant", "content": "done"},
        ],
    ),
    "duplicate-across-turns": (
        "duplicate_call",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "first output"},
            {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "second output"},
            {"role": "assistant", "content": "done"},
        ],
    ),
    "null-ids": (
        "missing_id",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [_call(None)]},
            {"role": "tool", "tool_call_id": None, "content": "first output"},
            {"role": "assistant", "content": "done"},
        ],
    ),
    "tool-message-without-tool-call-id": (
        "missing_id",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
            {"role": "tool", "content": "first output"},
            {"role": "assistant", "content": "done"},
        ],
    ),
    "anthropic-null-ids": (
        "missing_id",
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "running it"},
                    {"type": "tool_use", "id": None, "name": "sh", "input": {}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": None, "content": "x"}]},
            {"role": "assistant", "content": "done"},
        ],
    ),
}


def _api_ids_valid(data: bytes) -> None:
    """Every call id present, a string, unique; every tool message and result names one of them."""
    calls: list[object] = []
    answers: list[object] = []
    for line in data.splitlines():
        msg = orjson.loads(line)
        for call in msg.get("tool_calls") or ():
            calls.append(call.get("id"))
        if msg["role"] == "tool":
            answers.append(msg.get("tool_call_id"))
        for block in msg["content"] if isinstance(msg.get("content"), list) else ():
            if block.get("type") == "tool_use":
                calls.append(block.get("id"))
            if block.get("type") == "tool_result":
                answers.append(block.get("tool_use_id"))
    assert all(isinstance(c, str) and c for c in calls), calls
    assert len(set(calls)) == len(calls), calls
    assert all(a in calls for a in answers), (answers, calls)


@pytest.mark.parametrize("case", sorted(BAD_IDS))
def test_api_invalid_ids_are_reported_and_repaired(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXC_ARCHIVE", str(tmp_path / "archive"))
    code_wanted, lines = BAD_IDS[case]
    src = tmp_path / "t.jsonl"
    src.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    code, out, err = run(capsys, "validate", str(src), "-f", "json")
    assert code == ExitCode.INVALID, (out, err)
    assert code_wanted in {p["code"] for p in orjson.loads(out)["files"][0]["problems"]}
    for command in (
        ("repair", str(src), "-o", str(tmp_path / "repaired.jsonl")),
        ("compact", str(src), "-s", "mask", "-o", str(tmp_path / "compacted.jsonl")),
    ):
        code, _, err = run(capsys, *command)
        assert code == 0, err
        written = Path(command[-1]).read_bytes()
        _api_ids_valid(written)
        code, out, err = run(capsys, "validate", command[-1])
        assert code == 0, out + err
        if case != "anthropic-null-ids":  # there nothing can tell what the result answers: it goes
            assert b"first output" in written
        if case == "duplicate-across-turns":
            assert b"second output" in written


@pytest.mark.parametrize("sample", ["claude-code", "codex"])
@pytest.mark.parametrize("odd", [{}, [1]])
def test_a_record_whose_type_is_not_a_string_is_no_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sample: str, odd: object
) -> None:
    # A record's "type" of an object or a list (a hand-edited or damaged log) reached a set membership
    # test in the sniffers and readers: "internal error: TypeError: unhashable type" and exit 1. It is
    # a record of no known type: kept verbatim, as any record the adapter does not understand.
    lines = (SAMPLES / f"{sample}.jsonl").read_bytes().splitlines()
    middle = len(lines) // 2
    record = orjson.loads(lines[middle])
    record["type"] = odd
    lines[middle] = orjson.dumps(record)
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    code, out, err = run(capsys, "analyze", str(path), "-f", "json")
    assert code == 0, err
    assert orjson.loads(out)["files"][0]["format"] == sample
    code, _, err = run(capsys, "convert", str(path), "-o", str(tmp_path / "same.jsonl"))
    assert code == 0, err
    assert (tmp_path / "same.jsonl").read_bytes() == path.read_bytes()


@pytest.mark.parametrize("odd", [{}, [1]])
def test_a_pi_message_whose_role_is_not_a_string_is_no_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], odd: object
) -> None:
    # The same for pi: a message entry's role went to a tuple membership test (TypeError, exit 1).
    at = "2026-01-01T00:00:00.000Z"
    roles = ["user", odd, "user"]
    entries = [{"type": "session", "id": "s1", "timestamp": at, "cwd": "/work"}] + [
        {"type": "message", "id": str(k), "timestamp": at, "message": {"role": role, "content": f"m{k}"}}
        for k, role in enumerate(roles)
    ]
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries))
    code, out, err = run(capsys, "analyze", str(path), "-f", "json")
    assert code == 0, err
    assert orjson.loads(out)["files"][0]["format"] == "pi"
    code, _, err = run(capsys, "convert", str(path), "-o", str(tmp_path / "same.jsonl"))
    assert code == 0, err
    assert (tmp_path / "same.jsonl").read_bytes() == path.read_bytes()
