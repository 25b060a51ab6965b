"""``ctxc sessions`` over many sessions, cold and warm, against ``ctxc analyze`` of the same files.

    python bench/bench_sessions.py                  # 1,000 Claude Code sessions, 3 rounds
    python bench/bench_sessions.py --sessions 5000 --repeat 5

The sessions are copies of ``samples/claude-code.jsonl`` (one id each) under a throwaway
``CLAUDE_CONFIG_DIR``, with a throwaway count cache. Cold is the first listing (every session
counted); warm lists again with the cache filled, which is what a user who runs it twice waits for.
The target (issue 21): 1,000 sessions list in under 2 s warm. The baseline is ``ctxc analyze`` of the
same folder, warm, in the same run, so the ratio shows what listing adds to reading the cached scans.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_ID = "68138cc8-ffd2-4577-9120-9a555bb4d510"


def timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ctxc", *args], env=env, stdout=subprocess.DEVNULL, check=True, timeout=600
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sample = (ROOT / "samples" / "claude-code.jsonl").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp, "claude", "projects", "-bench")
        project.mkdir(parents=True)
        for i in range(args.sessions):
            session = str(uuid.UUID(int=i + 1))
            (project / f"{session}.jsonl").write_text(sample.replace(SAMPLE_ID, session))
        env = {
            **os.environ,
            "CLAUDE_CONFIG_DIR": str(Path(tmp, "claude")),
            "CODEX_HOME": str(Path(tmp, "codex")),
            "CTXC_CACHE_DIR": str(Path(tmp, "cache")),
            "PYTHONPATH": str(ROOT),
        }
        listing = ["sessions", "-f", "json", "-q"]
        cold = timed(listing, env)
        time.sleep(2.1)  # a file's identity stands in for its hash once it has been still for 2 s
        timed(listing, env)
        warm, analyze = [], []
        for _ in range(args.repeat):  # interleaved: the machine is shared and noisy
            warm.append(timed(listing, env))
            analyze.append(timed(["analyze", str(project), "-f", "json", "-q"], env))
    w, a = statistics.median(warm), statistics.median(analyze)
    print(f"{args.sessions} sessions: cold {cold:.2f} s, warm {w:.2f} s (target < 2 s)")
    print(f"analyze of the same folder, warm: {a:.2f} s; sessions/analyze = {w / a:.2f}")


if __name__ == "__main__":
    main()
