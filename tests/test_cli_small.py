"""Issue 20 item 10 through the real command line: search hits name their file, a batch tells compacted
from unchanged files, a mistyped file for ``restore`` is "no such file", and a transcript is not poured
onto a terminal unless ``-o -`` asks for it."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from conftest import ROOT, SAMPLES, run

from ctxc.errors import ExitCode

CODEX = SAMPLES / "codex.jsonl"


def on_a_terminal(args: list[str], env: dict[str, str], timeout: float = 60.0) -> tuple[int, bytes, str]:
    """``python -m ctxc ARGS`` with stdout on a pseudo-terminal: exit code, what the terminal got, stderr."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxc", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    os.close(slave)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            shown += chunk
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), shown, err
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "CTXC_ARCHIVE": str(tmp_path / "archive"), "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


@pytest.mark.parametrize(
    "args",
    [
        ["compact", str(CODEX), "--window", "20000"],
        ["convert", str(CODEX)],
        ["repair", str(CODEX)],
    ],
    ids=lambda a: a[0],
)
def test_a_transcript_is_not_poured_onto_a_terminal(env: dict[str, str], args: list[str]) -> None:
    code, shown, err = on_a_terminal(args, env)
    assert code == ExitCode.USAGE
    assert shown == b""
    assert (
        err
        == "ctxc: error: stdout is a terminal: give -o FILE for the transcript (or -o - to print it here)\n"
    )
    assert not Path(env["CTXC_ARCHIVE"]).exists()  # refused before any work


def test_dash_o_dash_prints_the_transcript_on_the_terminal_anyway(env: dict[str, str]) -> None:
    code, shown, err = on_a_terminal(["compact", str(CODEX), "--window", "20000", "-o", "-", "-q"], env)
    assert (code, err) == (0, "")
    lines = shown.replace(b"\r\n", b"\n").splitlines()
    assert len(lines) > 5
    assert all(isinstance(orjson.loads(line), dict) for line in lines)


def test_dry_run_on_a_terminal_needs_no_output(env: dict[str, str]) -> None:
    code, shown, _ = on_a_terminal(["compact", str(CODEX), "--window", "20000", "--dry-run"], env)
    assert code == 0
    assert b"dry run:" in shown


def test_restore_of_a_mistyped_file_is_no_such_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before any archive exists, and with one.
    code, _, err = run(capsys, "restore", "typo.jsonl", "--archive", str(tmp_path / "none"))
    assert code == ExitCode.INPUT
    assert err == "ctxc: error: typo.jsonl: no such file (nor an archive id: those are 12+ hex characters)\n"
    assert (
        run(capsys, "compact", str(CODEX), "--archive", str(tmp_path / "a"), "-q", "-o", str(tmp_path / "s"))[
            0
        ]
        == 0
    )
    code, _, err = run(capsys, "restore", "typo.jsonl", "--archive", str(tmp_path / "a"))
    assert code == ExitCode.INPUT
    assert "typo.jsonl: no such file" in err


def test_a_batch_tells_compacted_from_unchanged(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("codex.jsonl", "claude-code.jsonl", "dataset.jsonl"):
        shutil.copy(SAMPLES / name, logs / name)
    args = ["compact", str(logs), "--out-dir", str(tmp_path / "out"), "--archive", str(tmp_path / "a")]
    # codex.jsonl is over 60% of this window and gets compacted; the two smaller ones are left as they are.
    code, out, err = run(capsys, *args, "--window", "22000", "-f", "json")
    assert code == 0
    doc = orjson.loads(out)
    unchanged = [f["path"] for f in doc["files"] if f["output_sha256"] == f["archive_id"]]
    assert len(unchanged) == 2
    assert doc["totals"]["ok"] == 3
    assert doc["totals"]["unchanged"] == 2
    assert "3 files: 1 compacted, 2 unchanged; " in err


def test_search_hits_name_their_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    arch = str(tmp_path / "a")
    for name in ("codex.jsonl", "claude-code.jsonl"):
        out = str(tmp_path / name)
        assert run(capsys, "compact", str(SAMPLES / name), "--archive", arch, "-q", "-s", "fifo",
                   "--target-ratio", "0.02", "--window", "20000", "-o", out)[0] == 0  # fmt: skip
    code, out, _ = run(capsys, "search", "the", "--archive", arch, "-k", "50", "-f", "table")
    assert code == 0
    assert "file" in out.splitlines()[1]  # the header row
    assert "codex.jsonl" in out
    assert "claude-code.jsonl" in out
