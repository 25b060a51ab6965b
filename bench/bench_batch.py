"""Batch compaction: ``--jobs 2`` against ``--jobs 1`` on a folder of transcripts, and worker memory.

    python bench/bench_batch.py [--files 200] [--kb 100] [--big-mb 100] [--repeat 1]
                                [--against OTHER_CHECKOUT] [--fresh-archive]

Issue 5 section 4. From one run it prints:

* the wall time of ``ctxc compact FOLDER --out-dir OUT --jobs 1`` and ``--jobs 2`` over ``--files``
  generated transcripts of about ``--kb`` KiB each (Claude Code logs and chat logs, one seed each),
  with ``--no-cache`` and ``--force`` so every run does all the work, interleaved ``--repeat`` times
  (medians), and their ratio (target: at least 1.7);
* the peak resident memory of every process of a ``--jobs 2`` run over the same folder plus one
  ``--big-mb`` MiB transcript (``VmHWM`` of each worker, read from /proc while it runs), next to the
  peak of compacting the big transcript alone in one process: a worker's peak follows the largest
  transcript it handled, not the size of the folder (``--big-mb 0`` leaves this out).

``--against`` times another checkout of ctxc (``git worktree add /tmp/main main``) on the same folder,
the two interleaved and their order swapped every repeat, and compares their outputs byte for byte.
``--fresh-archive`` gives every timed run an empty archive (the first compaction of each log, as CI
over new logs has it); by default the runs share one, so all but the first find the originals stored
and indexed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def env_for(tmp: Path, root: Path = ROOT) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "CTXC_CACHE_DIR": str(tmp / "cache"),
        "CTXC_ARCHIVE": str(tmp / "archive"),
        "NO_COLOR": "1",
    }


def generate(out: Path, mb: float, fmt: str, seed: int) -> None:
    cmd = [sys.executable, str(BENCH / "gen_transcript.py"), str(out), "--mb", str(mb), "--format", fmt]
    subprocess.run([*cmd, "--seed", str(seed)], check=True, stderr=subprocess.DEVNULL)


def make_folder(folder: Path, files: int, kb: float) -> int:
    folder.mkdir(parents=True)
    for k in range(files):
        fmt = "claude-code" if k % 2 == 0 else "chat"
        sub = folder / f"team{k % 4}"
        sub.mkdir(exist_ok=True)
        generate(sub / f"session-{k:03}.jsonl", kb / 1024, fmt, seed=k)
    return sum(p.stat().st_size for p in folder.rglob("*.jsonl"))


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        kids = [int(c) for c in children]
        out.extend(kids)
        todo.extend(kids)
    return out


def vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run(cmd: list[str], env: dict[str, str], *, watch: bool = False) -> tuple[float, dict[int, float]]:
    """Wall time, and (``watch``) the last seen peak RSS of the process and each of its descendants."""
    peaks: dict[int, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for pid in [proc.pid, *descendants(proc.pid)]:
                hwm = vm_hwm_mb(pid)
                if hwm is not None:
                    peaks[pid] = max(peaks.get(pid, 0.0), hwm)
            stop.wait(0.05)

    watcher = threading.Thread(target=poll, daemon=True)
    if watch:
        watcher.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    if watch:
        watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{err.decode(errors='replace')}")
    return wall, peaks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--kb", type=float, default=100.0, help="size of each transcript (KiB)")
    ap.add_argument("--big-mb", type=float, default=100.0, help="size of the one large transcript (MiB)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--against", type=Path, help="another checkout of ctxc to time the same way")
    ap.add_argument("--fresh-archive", action="store_true", help="an empty archive for every timed run")
    args = ap.parse_args(argv)

    trees = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    for root in trees.values():  # byte-compiled, as `pip install` leaves ctxc
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "ctxc")], check=True)
    with tempfile.TemporaryDirectory(prefix="ctxc-bench-batch-") as tmp_name:
        tmp = Path(tmp_name)
        env = env_for(tmp)
        folder = tmp / "logs"
        size = make_folder(folder, args.files, args.kb)
        print(f"folder: {args.files} transcripts, {size / 1048576:.1f} MiB ({folder})")
        base = [sys.executable, "-m", "ctxc", "compact", str(folder), "--target-ratio", "0.3"]
        base += ["--window", "20000", "--no-cache", "--force", "--quiet", "--allow-over"]
        times: dict[tuple[str, int], list[float]] = {(t, j): [] for t in trees for j in (1, 2)}
        for k in range(args.repeat):
            for tree in list(trees)[:: -1 if k % 2 else 1]:
                for jobs in (1, 2):
                    run_env = env_for(tmp, trees[tree])
                    if args.fresh_archive:
                        shutil.rmtree(tmp / "archive", ignore_errors=True)
                    cmd = [*base, "--out-dir", str(tmp / f"out-{tree}-{jobs}"), "--jobs", str(jobs)]
                    times[tree, jobs].append(run(cmd, run_env)[0])
        for tree in trees:
            one, two = statistics.median(times[tree, 1]), statistics.median(times[tree, 2])
            print(
                f"{tree} ({trees[tree]}): --jobs 1: {one:.2f} s   --jobs 2: {two:.2f} s   "
                f"speed-up {one / two:.2f}x (target >= 1.7)   runs: "
                + ", ".join(f"{t:.2f}" for j in (1, 2) for t in times[tree, j])
            )
        if args.against:
            for jobs in (1, 2):
                ratio = statistics.median(times["this", jobs]) / statistics.median(times["against", jobs])
                print(f"--jobs {jobs}: this / against = {ratio:.3f}")
        first = tmp / "out-this-1"
        same = all(
            (first / p.relative_to(out)).read_bytes() == p.read_bytes()
            for out in tmp.glob("out-*")
            for p in out.rglob("*.jsonl")
        )
        print(f"outputs identical across --jobs 1 and 2 (and the checkouts): {same}")
        if args.big_mb <= 0:
            return 0

        big = tmp / "big" / "big.jsonl"
        big.parent.mkdir()
        generate(big, args.big_mb, "claude-code", seed=99)
        print(f"big transcript: {big.stat().st_size / 1048576:.1f} MiB")
        # --no-index: a 100 MB original is indexed for search by a background process of its own
        # (ctxc.search.background), not by the worker; leaving it out keeps that process from
        # running into the next measurement here (bench_compact times it).
        alone_cmd = [sys.executable, "-m", "ctxc", "compact", str(big), "-o", str(tmp / "big.out.jsonl")]
        alone_cmd += ["--target-ratio", "0.3", "--no-cache", "--quiet", "--allow-over", "--no-index"]
        wall, peaks = run(alone_cmd, env, watch=True)
        alone = max(peaks.values())
        print(f"one process, big transcript alone: {alone:.0f} MB peak RSS, {wall:.1f} s")
        (folder / "big.jsonl").symlink_to(big)
        mixed = [*base, "--out-dir", str(tmp / "out-mixed"), "--jobs", "2", "--no-index"]
        wall, peaks = run(mixed, env, watch=True)
        workers = sorted(peaks.values(), reverse=True)
        print(
            f"--jobs 2 over the folder + the big transcript: {wall:.1f} s; peak RSS per process (MB): "
            + ", ".join(f"{p:.0f}" for p in workers)
        )
        print(f"largest worker / big transcript alone: {workers[0] / alone:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
