"""``ctxc analyze --tokenizer usage`` against ccusage over the same Claude Code logs: speed, token sums
(issue 5, section 4), and each session's cost to the cent (issue 21), saying why any differ.

    python bench/bench_usage.py                  # ~54 MiB of generated logs, 7 interleaved rounds
    python bench/bench_usage.py --mb 10 --repeat 3
    python bench/bench_usage.py --logs DIR       # an existing folder of Claude Code logs (*.jsonl)

ccusage 20.0.24 is installed once with npm into a cache directory (``$CTXC_BENCH_CACHE``, default
``~/.cache/ctxc-bench``) and reused. Its npm package is a small Node launcher that starts a native
binary; both are timed: ``ccusage`` (the launcher, what ``npx ccusage`` runs) and ``ccusage-native``
(the binary alone, the stricter baseline). ccusage finds logs through ``CLAUDE_CONFIG_DIR`` (a folder
holding ``projects/``) and runs ``claude daily --offline --json`` (offline: cached prices, no network).

The logs are ``gen_transcript.py`` Claude Code sessions (``--sessions`` files of ``--mb/--sessions``
MiB each, one seed per file, so message and request ids never collide) under
``<tmp>/claude/projects/-bench/``. Rounds are interleaved (ccusage, native, ctxc, ...) and medians are
compared, because the machine is shared and noisy. The token sums are checked to agree: ctxc's recorded
input, output, cache read and cache write over all files against ccusage's totals.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from bench_analyze import byte_compile

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
CCUSAGE_VERSION = "20.0.24"


def cache_dir() -> Path:
    base = os.environ.get("CTXC_BENCH_CACHE") or str(Path.home() / ".cache" / "ctxc-bench")
    return Path(base) / f"ccusage-{CCUSAGE_VERSION}"


def find_ccusage() -> tuple[Path, Path | None]:
    """The ccusage launcher and its native binary (None if the platform package is missing)."""
    where = cache_dir()
    launcher = where / "node_modules" / ".bin" / "ccusage"
    if not launcher.exists():
        if shutil.which("npm") is None:
            sys.exit("npm is needed to install ccusage (apt-get install npm)")
        where.mkdir(parents=True, exist_ok=True)
        print(f"installing ccusage@{CCUSAGE_VERSION} into {where}", file=sys.stderr)
        subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(where),
                f"ccusage@{CCUSAGE_VERSION}",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    natives = sorted((where / "node_modules" / "@ccusage").glob("ccusage-*/bin/ccusage"))
    native = natives[0] if natives else None
    if native is not None:
        native.chmod(0o755)  # npm leaves the platform binary without its execute bit
    return launcher, native


def build_logs(root: Path, mb: float, sessions: int) -> Path:
    """``sessions`` generated Claude Code logs under ``root/claude/projects/-bench`` (~``mb`` MiB)."""
    sys.path.insert(0, str(BENCH))
    from gen_transcript import generate

    project = root / "claude" / "projects" / "-bench"
    project.mkdir(parents=True)
    for n in range(sessions):
        generate(project / f"session-{n:02d}.jsonl", mb / sessions, "claude-code", seed=1000 + n)
    return root / "claude"


def timed(cmd: Sequence[str], env: dict[str, str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(
            f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}"
        )
    return elapsed, done.stdout


def ctxc_totals(doc: dict[str, Any]) -> dict[str, int]:
    keys = {"input": "inputTokens", "output": "outputTokens", "cache_read": "cacheReadTokens"}
    keys["cache_write"] = "cacheCreationTokens"
    sums = dict.fromkeys(keys.values(), 0)
    for f in doc["files"]:
        for ours, theirs in keys.items():
            sums[theirs] += f["recorded_usage"][ours]
    sums["totalTokens"] = sum(sums.values())
    return sums


def compare_costs(
    files: Sequence[Path], ours: dict[str, Any], launcher: Path, env: dict[str, str], daily: dict[str, Any]
) -> bool:
    """Each session's cost by ctxc against ``ccusage session`` (to the cent), saying why any differ."""
    done = subprocess.run(
        [str(launcher), "claude", "session", "--offline", "--json"],
        env=env,
        capture_output=True,
        check=True,
        timeout=600,
    )
    theirs = {s["sessionId"]: float(s["totalCost"]) for s in orjson.loads(done.stdout)["sessions"]}
    mine = {
        Path(f["path"]).stem: (f["recorded_usage"].get("cost") or {}).get("usd", 0.0) for f in ours["files"]
    }
    by_file = {f.stem: f for f in files}
    print("cost per session, ccusage session --offline against ctxc analyze (to the cent):")
    explained = True
    for stem in sorted(mine):
        their, our = theirs.get(stem, 0.0), mine[stem]
        if round(their, 2) == round(our, 2):
            verdict = "agree"
        else:
            calls, as_ccusage = ccusage_long_context_rule([by_file[stem]])
            ok = calls > 0 and round(their, 2) == round(as_ccusage, 2)
            explained &= ok
            verdict = (
                f"{calls} call(s) above 200k input tokens: ctxc bills each whole at the long-context "
                "rates (Anthropic's rule), ccusage only the tokens above 200k; "
                f"by its rule ${as_ccusage:,.2f}"
                if ok
                else "DIFFER, unexplained"
            )
        print(f"  {stem[:40]:40} ccusage ${their:,.2f}  ctxc ${our:,.2f}  {verdict}")
    their_sum, our_sum = sum(theirs.values()), sum(mine.values())
    print(f"  total: ccusage ${their_sum:,.2f}, ctxc ${our_sum:,.2f}")
    if round(float(daily["totalCost"]), 2) != round(their_sum, 2):
        print(
            f"  (ccusage daily says ${float(daily['totalCost']):,.2f}: its daily view counts some records "
            "more than once, those without a requestId; its session view does not)"
        )
    return explained


def ccusage_long_context_rule(files: Sequence[Path]) -> tuple[int, float]:
    """The calls above a model's long-context threshold, and every call priced at ctxc's rates but
    with ccusage's rule for the long tier: each kind of token up to the threshold at the base rate,
    the rest at the long-context rate."""
    sys.path.insert(0, str(ROOT))
    from ctxc.formats import load
    from ctxc.pricing import default_prices

    table = default_prices()
    total, long_calls = 0.0, 0
    for f in files:
        for u in load(str(f)).usage:
            found = table.find(u.model)
            if found is None:
                continue
            price = found[1]
            if price.long_rates is None or u.context <= price.long_above:
                total += price.of(u)
                continue
            long_calls += 1
            base, high, cut = price.rates, price.long_rates, price.long_above
            five_minute = u.cache_write - u.cache_write_1h
            for tokens, low_rate, high_rate in (
                (u.input, base.input, high.input),
                (u.output, base.output, high.output),
                (five_minute, base.cache_write, high.cache_write),
                (u.cache_write_1h, base.cache_write_1h, high.cache_write_1h),
                (u.cache_read, base.cache_read, high.cache_read),
            ):
                total += 1e-6 * (min(tokens, cut) * low_rate + max(tokens - cut, 0) * high_rate)
    return long_calls, total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--mb", type=float, default=51.3, help="MiB to ask the generator for (default 51.3: ~54 MiB written)"
    )
    ap.add_argument("--sessions", type=int, default=18, help="how many session files (default 18)")
    ap.add_argument("--repeat", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--logs", type=Path, help="an existing Claude config folder (holding projects/) to use")
    args = ap.parse_args(argv)

    launcher, native = find_ccusage()
    byte_compile()  # as `pip install` leaves ctxc
    with tempfile.TemporaryDirectory(prefix="ctxc-bench-usage-") as tmp:
        logs = args.logs or build_logs(Path(tmp), args.mb, args.sessions)
        files = sorted((logs / "projects").rglob("*.jsonl")) if (logs / "projects").is_dir() else []
        size = sum(f.stat().st_size for f in files)
        env = {**os.environ, "CLAUDE_CONFIG_DIR": str(logs), "TZ": "UTC", "NO_COLOR": "1"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        commands = {"ccusage": [str(launcher), "claude", "daily", "--offline", "--json"]}
        if native is not None:
            commands["ccusage-native"] = [str(native), "claude", "daily", "--offline", "--json"]
        target = str(logs / "projects")
        commands["ctxc"] = [
            sys.executable,
            "-m",
            "ctxc",
            "analyze",
            target,
            "--tokenizer",
            "usage",
            "-f",
            "json",
        ]

        times: dict[str, list[float]] = {name: [] for name in commands}
        outputs: dict[str, bytes] = {}
        for name, cmd in commands.items():  # warm-up: page cache, and npm's first launch
            outputs[name] = timed(cmd, env)[1]
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                elapsed, _out = timed(cmd, env)
                times[name].append(elapsed)

        print(f"{len(files)} Claude Code logs, {size / 2**20:.1f} MiB ({size / 1e6:.1f} MB), in {target}")
        print(f"{args.repeat} interleaved rounds; median (min) wall time of each command, end to end:")
        med = {name: statistics.median(ts) for name, ts in times.items()}
        for name, cmd in commands.items():
            print(f"  {name:15} {med[name]:.3f} s ({min(times[name]):.3f} s)   {' '.join(cmd)}")
        for base in ("ccusage-native", "ccusage"):
            if base in med:
                print(f"ctxc / {base}: {med['ctxc'] / med[base]:.2f}x (target <= 3x)")

        theirs = orjson.loads(outputs["ccusage"])["totals"]
        ours = ctxc_totals(orjson.loads(outputs["ctxc"]))
        print("token sums (input, output, cache read, cache write, total):")
        names = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheCreationTokens", "totalTokens")
        print("  ccusage " + ", ".join(f"{theirs[k]:,}" for k in names))
        print("  ctxc    " + ", ".join(f"{ours[k]:,}" for k in names))
        agree = all(theirs[k] == ours[k] for k in names)
        print("  agree" if agree else "  DIFFER")
        costs_agree = compare_costs(files, orjson.loads(outputs["ctxc"]), launcher, env, theirs)
        return 0 if agree and costs_agree else 1


if __name__ == "__main__":
    sys.exit(main())
