"""Counting in worker processes (ctxc.tokens.workers) gives exactly the counts of counting here.

Run in a fresh interpreter: the workers are forked only when no other thread is running, which a test
session (with its servers and pools) cannot promise.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import SAMPLES

SCRIPT = r"""
import sys, orjson
from ctxc.analysis import analyze, make_counter
from ctxc.tokens import tiktoken_backend, workers as pool

path, mode = sys.argv[1], sys.argv[2]
if mode == "here":
    pool.PROCESS_MIN_BYTES = 1 << 62
used = []
original = pool.worker_processes

def spy(name, path, workers):
    cm = original(name, path, workers)
    class Wrap:
        def __enter__(self):
            active = cm.__enter__()
            used.append(active)
            return active
        def __exit__(self, *exc):
            return cm.__exit__(*exc)
    return Wrap()

pool.worker_processes = spy
counter = make_counter("o200k_base", use_cache=False)
a = analyze(path, counter=counter, use_cache=False)
doc = {
    "used": used,
    "total": a.total_tokens,
    "rows": [m.tokens for m in a.messages],
    # The workers build the encoding; this process only sends them batches.
    "built_here": bool(tiktoken_backend._encodings),
}
sys.stdout.write(orjson.dumps(doc).decode())
"""


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """A chat log over the 4 MB from which ctxc counts in worker processes."""
    path = tmp_path / "big.jsonl"
    lines = (SAMPLES / "chat-anthropic.jsonl").read_bytes()
    with path.open("wb") as f:
        while f.tell() < 5 << 20:
            f.write(lines)
    return path


def test_worker_processes_count_exactly_like_this_process(big: Path) -> None:
    results = {}
    for mode in ("here", "processes"):
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(big), mode], capture_output=True, check=True, timeout=300
        )
        results[mode] = orjson.loads(out.stdout)
    assert results["processes"]["used"] == [True]
    assert results["here"]["used"] == []
    assert results["processes"]["rows"] == results["here"]["rows"]
    assert results["processes"]["total"] == results["here"]["total"] > 0
    assert results["processes"]["built_here"] is False


COMPACT = r"""
import sys
from ctxc.compaction.files import CompactJob, compact_file
from ctxc.compaction.run import CompactOptions
from ctxc.tokens import workers

src, out, archive, mode = sys.argv[1:5]
if mode == "here":
    workers.PROCESS_MIN_BYTES = 1 << 62
opts = CompactOptions(strategy=sys.argv[5], target_ratio=0.2, window=200_000, use_cache=False)
compact_file(CompactJob(path=src, output=out, archive=archive, options=opts, index=False))
"""


def test_compaction_with_worker_processes_writes_the_same_bytes(tmp_path: Path, big: Path) -> None:
    for strategy in ("fifo", "adaptive"):
        outs = {}
        for mode in ("here", "processes"):
            out = tmp_path / f"{strategy}-{mode}.jsonl"
            subprocess.run(
                [sys.executable, "-c", COMPACT, str(big), str(out), str(tmp_path / mode), mode, strategy],
                capture_output=True,
                check=True,
                timeout=300,
            )
            outs[mode] = out.read_bytes()
        assert outs["processes"] == outs["here"] != b""


BROKEN = r"""
import sys
from ctxc.errors import CtxcError
from ctxc.tokens.tiktoken_backend import TiktokenTokenizer
from ctxc.tokens.workers import worker_processes

tok = TiktokenTokenizer("o200k_base", path=__import__("pathlib").Path(sys.argv[1]))
with worker_processes(tok.name, tok.path, 2) as active:
    assert active
    try:
        tok.count_batch(["x" * 300_000, "y"])
    except CtxcError as exc:
        print(exc)
"""


def test_workers_that_cannot_build_the_encoding_leave_the_error_to_this_process(tmp_path: Path) -> None:
    corrupt = tmp_path / "o200k_base.tiktoken"
    corrupt.write_bytes(b"not a rank file\n")
    out = subprocess.run(
        [sys.executable, "-c", BROKEN, str(corrupt)], capture_output=True, check=True, timeout=120, text=True
    )
    assert "corrupt" in out.stdout
