"""Odd inputs and leftovers: a million blank lines, corrupt derived files, crashed stores, API-invalid ids.

Each test here holds one promise of docs/reliability.md, "Secrets, terminals and odd inputs".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
