"""Counting in worker processes gives exactly the counts of counting in this process.

Run in a fresh interpreter: the workers are forked only when no other thread is running, which a test
session (with its servers and pools) cannot promise.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
from conftest import SAMPLES

SCRIPT = r"""
import sys, orjson
import ctxc.tokens as tokens
from ctxc.analysis import analyze, make_counter
from ctxc.tokens import tiktoken_backend

path, mode = sys.argv[1], sys.argv[2]
if mode == "threads":
    tokens.PROCESS_MIN_BYTES = 1 << 62
used = []
original = tiktoken_backend.worker_processes

def spy(tokenizer, workers):
    cm = original(tokenizer, workers)
    class Wrap:
        def __enter__(self):
            active = cm.__enter__()
            used.append(active)
            return active
        def __exit__(self, *exc):
            return cm.__exit__(*exc)
    return Wrap()

tiktoken_backend.worker_processes = spy
counter = make_counter("o200k_base", use_cache=False)
a = analyze(path, counter=counter, use_cache=False)
doc = {"used": used, "total": a.total_tokens, "rows": [m.tokens for m in a.messages]}
sys.stdout.write(orjson.dumps(doc).decode())
"""


def test_worker_processes_count_exactly_like_threads(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    lines = (SAMPLES / "chat-anthropic.jsonl").read_bytes()
    with big.open("wb") as f:
        while f.tell() < 5 << 20:
            f.write(lines)
    results = {}
    for mode in ("threads", "processes"):
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(big), mode], capture_output=True, check=True, timeout=300
        )
        results[mode] = orjson.loads(out.stdout)
    assert results["processes"]["used"] == [True]
    assert results["threads"]["used"] == []
    assert results["processes"]["rows"] == results["threads"]["rows"]
    assert results["processes"]["total"] == results["threads"]["total"] > 0
