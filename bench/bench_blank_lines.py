"""Benchmark reading a transcript that is almost all blank lines against a plain one of the same size.

    python bench/bench_blank_lines.py                 # 1,000,000 blank lines (about 1 MB)
    python bench/bench_blank_lines.py --lines 100000 --repeat 5

Two records with ``--lines`` blank lines between them are read by ``ctxc analyze -f json --no-cache``
and ``ctxc validate`` in fresh subprocesses, interleaved with the same commands on a plain chat
transcript of the same size in bytes (short messages, one per line). The medians of ``--repeat``
rounds and their ratio are printed (issue 18, item 9: the sniffer once made blank lines quadratic).
The same is done with a tenth of the blank lines, to show the time grows linearly.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST = b'{"role":"user","content":"hi"}\n'
LAST = b'{"role":"assistant","content":"hello"}\n'


def blank_file(path: Path, lines: int) -> None:
    path.write_bytes(FIRST + b"\n" * lines + LAST)


def plain_file(path: Path, size: int) -> None:
    """Chat messages of about 40 bytes each, alternating roles, up to ``size`` bytes."""
    out = bytearray()
    i = 0
    while len(out) < size:
        role = "user" if i % 2 == 0 else "assistant"
        out += f'{{"role":"{role}","content":"message {i:09d}"}}\n'.encode()
        i += 1
    path.write_bytes(bytes(out))


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=3600, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"failed (exit {done.returncode}): {shlex.join(cmd)}\n{done.stderr.decode()}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=1_000_000, help="blank lines between the two records")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are compared")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctxc-bench-blank-") as tmp_name:
        tmp = Path(tmp_name)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["CTXC_CACHE_DIR"] = str(tmp / "cache")
        env["CTXC_ARCHIVE"] = str(tmp / "archive")
        for lines in (args.lines // 10, args.lines):
            blank, plain = tmp / f"blank-{lines}.jsonl", tmp / f"plain-{lines}.jsonl"
            blank_file(blank, lines)
            plain_file(plain, blank.stat().st_size)
            size = blank.stat().st_size
            for command in (["analyze", "-f", "json", "--no-cache"], ["validate"]):
                times: dict[Path, list[float]] = {blank: [], plain: []}
                for _ in range(args.repeat):
                    for path in (blank, plain):
                        times[path].append(timed([sys.executable, "-m", "ctxc", *command, str(path)], env))
                b, p = statistics.median(times[blank]), statistics.median(times[plain])
                print(
                    f"{lines:>9,} blank lines ({size / 1e6:.2f} MB)  ctxc {' '.join(command):<30}"
                    f"blank {b:6.2f} s  plain {p:6.2f} s  ratio {b / p:5.2f}"
                )
    print(f"command: python bench/bench_blank_lines.py --lines {args.lines} --repeat {args.repeat}")


if __name__ == "__main__":
    main()
