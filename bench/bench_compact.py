"""Benchmark ``ctxc compact`` against LangChain's ``trim_messages``, from one run (issue 3, section 7).

    python bench/bench_compact.py                      # 100 MiB generated tool-heavy chat transcript
    python bench/bench_compact.py --mb 10              # smaller, quicker
    python bench/bench_compact.py --input FILE         # any transcript ctxc reads
    python bench/bench_compact.py --mb 100 --profile   # also profile the adaptive runs (cProfile)
    python bench/bench_compact.py --memory-only        # peak memory of compact only, both formats

Needs ``langchain-core`` (``pip install langchain-core``) for the baseline; nothing else beyond ctxc.

What is measured, all in one run on one file:

* baseline: the transcript (read with ctxc's own reader) as LangChain messages: SystemMessage,
  HumanMessage, AIMessage with ``tool_calls``, ToolMessage with ``tool_call_id``. Then
  ``trim_messages(strategy="last", include_system=True, allow_partial=False, start_on="human")`` to a
  budget B of 50% of the tokens, with a tiktoken o200k token counter over each message's content and
  tool calls (name + compact JSON arguments, plus the same 4-token framing ctxc uses), the encoding
  built from ctxc's shipped rank file. That call is timed. Orphans (a ToolMessage whose tool_call_id
  has no AIMessage tool_call in the kept output) are counted at 19 budgets, 5%, 10%, ..., 95%. The
  sweep reuses per-message counts (the counter is additive, so trim_messages keeps exactly the same
  messages; checked at 50% against the timed call), because recounting 19 times would take ~25 min.
  The same sweep without ``start_on`` (the function's default) is shown too.
* ``ctxc compact FILE --strategy fifo --target-tokens B --window 10^9 --no-cache`` in a subprocess, B
  being 50% of ``ctxc analyze --format json`` total_tokens, run just before and just after the timed
  trim_messages call: mean time, and ratio to trim_messages (target >= 15x faster); also with
  ``--no-index``, and the time until the search index the run started in the background is ready
  (shown, no target). Then the 19
  budgets, each output checked with ``ctxc validate`` (exit 0) and its reported tokens_after <= the
  budget; the sweep uses a warm count cache, only the 50% run is timed.
* peak memory: the peak RSS of ``ctxc compact`` (the child and its waited-for descendants, from
  ``os.wait4``) for fifo, selective and mask at the fifo budget (mask with ``--allow-over``: it alone
  may not reach it) and adaptive at ``--target-ratio 0.02`` (every stage), each ``--no-cache
  --no-index``, as a ratio to the input's size (target <= 3x). ``--memory-only`` runs just this, on a
  generated Claude Code log and a generated chat log of ``--mb`` each (or on ``--input``), and needs
  no LangChain.
* ``ctxc compact --strategy adaptive`` (extractive summarizer) against ``ctxc analyze --no-cache`` of
  the same file (target: within 2x): (a) ``--target-ratio 0.5 --window <total>`` (the fifo budget) and
  (b) ``--target-ratio 0.02`` of the default 200k window, which runs every stage including the
  summarizing ones. If adaptive is more than 2x slower or fails, it is profiled and the hot spots printed.

Nothing here is asserted by tests: timings are printed, never checked in CI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import pstats
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analyze import (
    MB,
    ROOT,
    ChildRun,
    byte_compile,
    ctxc_cmd,
    ctxc_env,
    input_file,
    load_o200k,
    machine,
    print_table,
    reproduce_line,
    run_child,
    verdict,
)

FRACTIONS = [k / 20 for k in range(1, 20)]  # 5%, 10%, ..., 95%
BIG_WINDOW = 10**9
OVERHEAD = 4  # ctxc.tokens.cost.MESSAGE_OVERHEAD, repeated so the LangChain counter stands alone


# ------------------------------------------------------------------------------------------- LangChain side


def to_langchain(path: Path) -> list[Any]:
    """ctxc's reading of ``path`` as LangChain messages (text, thinking, tool calls and results)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    from ctxc.formats import open_stream
    from ctxc.model import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, UnknownBlock

    out: list[Any] = []
    stream = open_stream(path, keep_records=False)
    try:
        for item in stream.items:
            if not isinstance(item, Message) or not item.blocks:
                continue
            parts: list[dict[str, str]] = []
            calls: list[dict[str, Any]] = []
            for b in item.blocks:
                if isinstance(b, TextBlock | UnknownBlock) and b.text:
                    parts.append({"type": "text", "text": b.text})
                elif isinstance(b, ThinkingBlock) and b.text:
                    parts.append({"type": "thinking", "thinking": b.text})
                elif isinstance(b, ToolUseBlock):
                    args = b.input if isinstance(b.input, dict) else {"input": b.input}
                    calls.append({"name": b.name, "args": args, "id": b.id, "type": "tool_call"})
                elif isinstance(b, ToolResultBlock):
                    # A result is its own ToolMessage, in place; text around it becomes a HumanMessage.
                    if parts and item.role != "assistant":
                        out.append(HumanMessage(content=parts))
                        parts = []
                    out.append(ToolMessage(content=b.text, tool_call_id=b.tool_use_id))
            if item.role == "assistant":
                if parts or calls:
                    out.append(AIMessage(content=parts, tool_calls=calls))
            elif parts:
                out.append(
                    SystemMessage(content=parts) if item.role == "system" else HumanMessage(content=parts)
                )
    finally:
        stream.close()
    return out


def lc_texts(m: Any) -> Iterator[str]:
    content = m.content
    if isinstance(content, str):
        if content:
            yield content
    else:
        for part in content:
            if isinstance(part, str):
                yield part
            else:
                text = part.get("text") or part.get("thinking") or ""
                if text:
                    yield text
    for call in getattr(m, "tool_calls", None) or ():
        yield call["name"]
        yield orjson.dumps(call["args"], option=orjson.OPT_NON_STR_KEYS).decode()


def make_counter(enc: Any) -> Callable[[list[Any]], int]:
    """What a LangChain user writes: tiktoken over every message, every time it is called."""
    encode = enc.encode_ordinary

    def count(messages: list[Any]) -> int:
        return sum(OVERHEAD + sum(len(encode(t)) for t in lc_texts(m)) for m in messages)

    return count


def memo_counter(messages: Sequence[Any], count: Callable[[list[Any]], int]) -> Callable[[list[Any]], int]:
    """The same counts, looked up by message identity (trim_messages copies no message it keeps whole)."""
    per = {id(m): count([m]) for m in messages}

    def fast(ms: list[Any]) -> int:
        return sum(per[id(m)] if id(m) in per else count([m]) for m in ms)

    return fast


@dataclass(frozen=True)
class Kept:
    messages: int
    tokens: int
    orphans: int  # ToolMessages whose tool_call_id no kept AIMessage has
    unanswered: int  # tool calls of kept AIMessages with no kept ToolMessage


def inspect_kept(kept: Sequence[Any], count: Callable[[list[Any]], int]) -> Kept:
    from langchain_core.messages import AIMessage, ToolMessage

    calls = {c["id"] for m in kept if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in kept if isinstance(m, ToolMessage)}
    orphans = sum(1 for m in kept if isinstance(m, ToolMessage) and m.tool_call_id not in calls)
    return Kept(len(kept), count(list(kept)), orphans, len(calls - results))


# ------------------------------------------------------------------------------------------- ctxc side


def compact_cmd(path: Path, out: Path, tmp: Path, *opts: str, archive: str = "archive") -> list[str]:
    return ctxc_cmd(
        "compact", str(path), "-o", str(out), "--archive", str(tmp / archive),
        "--report", str(out) + ".report", "--quiet", *opts,
    )  # fmt: skip


def index_ready(root: Path, started: float, timeout: float = 900.0) -> float:
    """Seconds from ``started`` (a ``time.perf_counter()``) until the search index of archive ``root``
    holds an original: a large original is indexed by a background process the run starts, so the
    run returns first. Waiting here also keeps that process from weighing on the next measurement."""
    from ctxc.search.background import writer_lock
    from ctxc.search.index import SearchIndex

    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if (root / "search.sqlite").exists():
            with writer_lock(root), SearchIndex.for_archive(root) as index:
                if index.stats()["originals"]:
                    return time.perf_counter() - started
        time.sleep(0.05)
    raise SystemExit(f"the search index of {root} was not ready after {timeout:.0f} s")


def report_of(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(Path(str(out) + ".report").read_bytes())
    return data


def validate(path: Path, env: dict[str, str], tmp: Path) -> tuple[int, str]:
    run = run_child(
        ctxc_cmd("validate", str(path)), env=env, cwd=tmp, stdout=tmp / "validate.txt", check=False
    )
    text = (tmp / "validate.txt").read_text(errors="replace").strip() + run.stderr.strip()
    return run.rc, text.splitlines()[0] if text else ""


def profile_child(cmd: Sequence[str], env: dict[str, str], tmp: Path, top: int = 18) -> str:
    """Run ``cmd`` (a ``python -m ctxc ...`` command) under cProfile; the top functions by own time
    and by cumulative time."""
    prof = tmp / "adaptive.prof"
    full = [sys.executable, "-m", "cProfile", "-o", str(prof), *cmd[1:]]
    run_child(full, env=env, cwd=tmp, check=False)
    buf = io.StringIO()
    stats = pstats.Stats(str(prof), stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top * 2)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip() and not ln.startswith("   Ordered")]
    return "\n".join(ln.replace(str(ROOT) + "/", "") for ln in lines)


MEMORY_TARGET = 3.0  # peak RSS of compact / input size (issue 19, item 8)


@dataclass(frozen=True)
class MemoryRun:
    label: str
    run: ChildRun
    input_bytes: int
    cmd: list[str]

    @property
    def ratio(self) -> float:
        return self.run.maxrss_mb * 2**20 / self.input_bytes


def memory_runs(path: Path, total: int, env: dict[str, str], tmp: Path, label: str) -> list[MemoryRun]:
    """Peak RSS of ``ctxc compact`` with each strategy on ``path``, whose ``total_tokens`` is ``total``:
    fifo, selective and mask to half of it in an unbounded window, adaptive (extractive summarizer) to
    2% of the default window, so that every stage runs."""
    budget = ["--target-tokens", str(int(total * 0.5)), "--window", str(BIG_WINDOW)]
    plans = {
        "fifo": budget,
        "selective": budget,
        "mask": [*budget, "--allow-over"],  # masking alone need not reach the budget
        "adaptive": ["--summarizer", "extractive", "--target-ratio", "0.02"],
    }
    out: list[MemoryRun] = []
    for strategy, opts in plans.items():
        dest = tmp / f"memory-{strategy}.jsonl"
        cmd = compact_cmd(path, dest, tmp, "--strategy", strategy, *opts, "--no-cache", "--no-index",
                          archive=f"archive-memory-{label}-{strategy}")  # fmt: skip
        run = run_child(cmd, env=env, cwd=tmp, check=False)
        if run.rc != 0:
            print(f"  compact -s {strategy} failed (exit {run.rc}): {run.stderr.strip()[-300:]}")
        dest.unlink(missing_ok=True)
        out.append(MemoryRun(f"{label} {strategy}", run, path.stat().st_size, cmd))
    return out


def memory_rows(runs: Sequence[MemoryRun]) -> list[list[str]]:
    return [
        [
            f"peak RSS / input, {m.label}",
            f"<= {MEMORY_TARGET:.1f}x",
            f"{m.ratio:.2f}x ({m.run.maxrss_mb:.0f} MiB / {m.input_bytes / 2**20:.1f} MiB)"
            + ("" if m.run.rc == 0 else f" FAILED exit {m.run.rc}"),
            verdict(m.run.rc == 0 and m.ratio <= MEMORY_TARGET),
        ]
        for m in runs
    ]


def memory_only(args: argparse.Namespace) -> int:
    """``--memory-only``: the peak memory of compact, with each strategy, on each generated format."""
    started = dt.datetime.now(dt.UTC)
    print(f"bench_compact --memory-only  {started:%Y-%m-%d %H:%M UTC}  {machine()}")
    print(f"reproduce: {reproduce_line('bench_compact.py')}")
    byte_compile()
    runs: list[MemoryRun] = []
    with tempfile.TemporaryDirectory(prefix="ctxc-bench-") as tmp_name:
        tmp = Path(tmp_name)
        env = ctxc_env(tmp / "no-cache")
        formats = [args.format] if args.input else ["claude-code", "chat"]
        for fmt in formats:
            path = input_file(argparse.Namespace(**{**vars(args), "format": fmt}), tmp)
            analyze = ctxc_cmd("analyze", str(path), "--format", "json", "--no-cache")
            an = run_child(analyze, env=env, cwd=tmp, stdout=tmp / "analyze.json")
            total = sum(f["total_tokens"] for f in orjson.loads((tmp / "analyze.json").read_bytes())["files"])
            label = "input" if args.input else fmt
            print(f"{label}: {path.stat().st_size / 2**20:.1f} MiB, total_tokens {total:,}; "
                  f"analyze peak {an.maxrss_mb:.0f} MiB")  # fmt: skip
            found = memory_runs(path, total, env, tmp, label)
            for m in found:
                print(f"  {m.label}: peak {m.run.maxrss_mb:.0f} MiB ({m.ratio:.2f}x), {m.run.wall:.2f} s")
                print(f"    {shlex.join(m.cmd)}")
            runs.extend(found)
            if not args.input:
                path.unlink()
    print_table("peak memory of compact", ["check", "target", "measured", "result"], memory_rows(runs))
    print(f"reproduce: {reproduce_line('bench_compact.py')}   (finished; load avg {os.getloadavg()[0]:.2f})")
    return 0


# ------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0, help="generated size, MiB (default 100)")
    ap.add_argument("--format", choices=["chat", "claude-code"], default="chat", help="generated format")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input", type=Path, help="use this transcript instead of generating one")
    ap.add_argument("--profile", action="store_true", help="profile the adaptive runs even if within 2x")
    ap.add_argument("--no-sweep", action="store_true", help="skip the 19-budget ctxc sweep (quicker)")
    ap.add_argument("--memory-only", action="store_true", help="only the peak memory of compact")
    args = ap.parse_args(argv)
    if args.memory_only:
        return memory_only(args)

    try:
        lc_version = dist_version("langchain-core")
    except Exception:
        raise SystemExit("langchain-core is needed for the baseline: pip install langchain-core") from None
    started = dt.datetime.now(dt.UTC)
    print(f"bench_compact  {started:%Y-%m-%d %H:%M UTC}  {machine()}")
    print(f"langchain-core {lc_version}, tiktoken {dist_version('tiktoken')}")
    print(f"reproduce: {reproduce_line('bench_compact.py')}")
    byte_compile()

    with tempfile.TemporaryDirectory(prefix="ctxc-bench-") as tmp_name:
        tmp = Path(tmp_name)
        path = input_file(args, tmp)
        file_bytes = path.stat().st_size
        env = ctxc_env(tmp / "no-cache")  # every timed run also passes --no-cache

        # ctxc analyze: the total that fixes every budget, and the time adaptive is compared with.
        analyze = ctxc_cmd("analyze", str(path), "--format", "json", "--no-cache")
        an = run_child(analyze, env=env, cwd=tmp, stdout=tmp / "analyze.json")
        total = sum(f["total_tokens"] for f in orjson.loads((tmp / "analyze.json").read_bytes())["files"])
        budget = int(total * 0.5)
        print(f"input: {path} ({file_bytes / 2**20:.1f} MiB); ctxc total_tokens {total:,}; B = {budget:,}")
        print(f"  ctxc analyze {an.wall:.2f} s, peak {an.maxrss_mb:.0f} MB: {shlex.join(analyze)}")

        # Peak memory of each strategy (run_child reads each command's own peak, whatever this holds).
        memory = memory_runs(path, total, env, tmp, args.format if not args.input else "input")

        # LangChain baseline.
        from langchain_core.messages.utils import trim_messages

        t0 = time.perf_counter()
        lc_messages = to_langchain(path)
        enc = load_o200k()
        count = make_counter(enc)
        print(f"  {len(lc_messages):,} LangChain messages built in {time.perf_counter() - t0:.1f} s")
        trim_kw: dict[str, Any] = {
            "strategy": "last",
            "include_system": True,
            "allow_partial": False,
            "start_on": "human",
        }
        calls = 0

        def counted(ms: list[Any]) -> int:
            nonlocal calls
            calls += 1
            return count(ms)

        # ctxc fifo to the same budget (--no-cache), run just before and just after trim_messages: the
        # mean of the two is compared, so a burst of load from elsewhere weighs on both sides alike.
        # Each run gets a new archive, so each pays for storing the original and having it indexed as
        # a first run does. A large original is indexed by a background process the run starts; the
        # bench waits for the index (and prints when it was ready) before measuring anything else. The
        # same pair with --no-index shows the run without starting that process.
        fifo_out = tmp / "fifo-50.jsonl"
        fifo_opts = [
            "--strategy",
            "fifo",
            "--target-tokens",
            str(budget),
            "--window",
            str(BIG_WINDOW),
            "--no-cache",
        ]

        def fifo_cmd(n: int, *extra: str) -> list[str]:
            return compact_cmd(path, fifo_out, tmp, *fifo_opts, *extra, archive=f"archive-fifo-{n}")

        ready: list[float] = []

        def fifo_run(n: int, *extra: str) -> ChildRun:
            started = time.perf_counter()
            run = run_child(fifo_cmd(n, *extra), env=env, cwd=tmp)
            if "--no-index" not in extra:
                ready.append(index_ready(tmp / f"archive-fifo-{n}", started))
            return run

        fifo_runs = [fifo_run(1)]
        bare_runs = [fifo_run(2, "--no-index")]
        t0 = time.perf_counter()
        kept = trim_messages(lc_messages, max_tokens=budget, token_counter=counted, **trim_kw)
        trim_s = time.perf_counter() - t0
        fifo_runs.append(fifo_run(3))
        bare_runs.append(fifo_run(4, "--no-index"))
        fifo_no_index = sum(r.wall for r in bare_runs) / len(bare_runs)
        fifo_s = sum(r.wall for r in fifo_runs) / len(fifo_runs)
        fifo_peak = max(r.maxrss_mb for r in fifo_runs)
        print(
            f"  trim_messages(max_tokens={budget}, {', '.join(f'{k}={v!r}' for k, v in trim_kw.items())}): "
            f"{trim_s:.1f} s, {calls} token_counter calls, kept {len(kept):,} messages"
        )
        fast = memo_counter(lc_messages, count)
        lc_total = fast(lc_messages)
        print(f"  LangChain counter total {lc_total:,} ({(lc_total - total) / total * 100:+.3f}% vs ctxc)")
        check = trim_messages(lc_messages, max_tokens=budget, token_counter=fast, **trim_kw)
        if [id(m) for m in check] != [id(m) for m in kept]:
            raise SystemExit(
                "the memoized counter changed what trim_messages keeps; the sweep would be wrong"
            )

        lc_rows: list[tuple[float, Kept, Kept]] = []
        for frac in FRACTIONS:
            b = int(total * frac)
            human = inspect_kept(
                trim_messages(lc_messages, max_tokens=b, token_counter=fast, **trim_kw), fast
            )
            plain_kw = {**trim_kw, "start_on": None}
            plain = inspect_kept(
                trim_messages(lc_messages, max_tokens=b, token_counter=fast, **plain_kw), fast
            )
            lc_rows.append((frac, human, plain))
        del lc_messages, kept, check

        fifo_rc, fifo_msg = validate(fifo_out, env, tmp)
        fifo_after = report_of(fifo_out)["run"]["tokens_after"]
        print(f"  ctxc fifo {fifo_runs[0].wall:.2f} s before trim_messages, {fifo_runs[1].wall:.2f} s after; "
              f"{fifo_no_index:.2f} s with --no-index ({bare_runs[0].wall:.2f}, {bare_runs[1].wall:.2f}); "
              f"the search index ready {ready[0]:.2f} s, {ready[1]:.2f} s after the start (indexed by a "
              f"background process); peak {fifo_peak:.0f} MB, {fifo_after:,} tokens; validate exit "
              f"{fifo_rc}: {fifo_msg}")  # fmt: skip
        print(f"    {shlex.join(fifo_cmd(1))}")

        # The 19 budgets, with a warm count cache (correctness, not timing).
        sweep_env = ctxc_env(tmp / "sweep-cache")
        ctxc_rows: list[tuple[float, int, int, str, float]] = []
        if not args.no_sweep:
            for frac in FRACTIONS:
                b = int(total * frac)
                out = tmp / f"fifo-{int(frac * 100)}.jsonl"
                cmd = compact_cmd(path, out, tmp, "--strategy", "fifo", "--target-tokens", str(b),
                                  "--window", str(BIG_WINDOW))  # fmt: skip
                run = run_child(cmd, env=sweep_env, cwd=tmp, check=False)
                if run.rc != 0:
                    ctxc_rows.append((frac, -1, run.rc, run.stderr.strip().splitlines()[-1], run.wall))
                    continue
                after = report_of(out)["run"]["tokens_after"]
                rc, msg = validate(out, env, tmp)
                ctxc_rows.append((frac, after, rc, msg, run.wall))
                out.unlink()

        # adaptive (extractive summarizer) vs analyze, interleaved: analyze, adaptive a, analyze, adaptive b.
        variants = {
            "a: --target-ratio 0.5 --window <total>": ["--target-ratio", "0.5", "--window", str(total)],
            "b: --target-ratio 0.02 (200k window)": ["--target-ratio", "0.02"],
        }
        adaptive: dict[str, tuple[ChildRun, float, str]] = {}
        for i, (name, opts) in enumerate(variants.items()):
            an_again = run_child(analyze, env=env, cwd=tmp, stdout=tmp / "analyze.json")
            out = tmp / f"adaptive-{i}.jsonl"
            # --no-index: the strategy's own cost (indexing is the same for every strategy; see fifo).
            cmd = compact_cmd(path, out, tmp, "--strategy", "adaptive", "--summarizer", "extractive",
                              *opts, "--no-cache", "--no-index", archive=f"archive-adaptive-{i}")  # fmt: skip
            run = run_child(cmd, env=env, cwd=tmp, check=False)
            if run.rc == 0:
                rep = report_of(out)["run"]
                rc, msg = validate(out, env, tmp)
                stages = ", ".join(f"{k} -{v:,}" for k, v in rep["savings"].items())
                detail = f"{rep['tokens_before']:,} -> {rep['tokens_after']:,} [{stages}]; validate exit {rc}"
            else:
                detail = f"FAILED exit {run.rc}: {run.stderr.strip()[-500:]}"
            adaptive[name] = (run, an_again.wall, detail)
            print(f"  adaptive {name}: {run.wall:.2f} s (analyze {an_again.wall:.2f} s), "
                  f"peak {run.maxrss_mb:.0f} MB; {detail}")  # fmt: skip
            print(f"    {shlex.join(cmd)}")
            if args.profile or run.rc != 0 or run.wall > 2 * an_again.wall:
                print(f"  profile of adaptive {name}:")
                print("    " + profile_child(cmd, env, tmp).replace("\n", "\n    "))

    # ---------------------------------------------------------------------------------- report
    print_table(
        "orphans at 19 budgets (share of ctxc total_tokens)",
        ["budget", "LC start_on=human: kept / tokens / orphans / unanswered", "LC start_on=None: orphans",
         "ctxc fifo: tokens / validate"],
        [
            [
                f"{int(frac * 100)}%",
                f"{h.messages:,} / {h.tokens:,} / {h.orphans} / {h.unanswered}",
                f"{p.orphans} (unanswered {p.unanswered})",
                next(
                    (f"{a:,} {'<=' if 0 <= a <= int(total * frac) else '>'} B, exit {rc}" if a >= 0
                     else f"compact exit {rc}: {m}"
                     for f, a, rc, m, _ in ctxc_rows if f == frac),
                    "not run",
                ),
            ]
            for frac, h, p in lc_rows
        ],
    )  # fmt: skip
    lc_orphan_budgets = sum(1 for _, h, _ in lc_rows if h.orphans)
    lc_plain_orphan_budgets = sum(1 for _, _, p in lc_rows if p.orphans)
    ctxc_bad = [f"{int(f * 100)}%" for f, a, rc, _, _ in ctxc_rows if rc != 0 or a < 0 or a > int(total * f)]
    speedup = trim_s / fifo_s
    speedup_no_index = trim_s / fifo_no_index
    index_s = sum(ready) / len(ready)  # the mean of the runs before and after trim_messages
    rows = [
        ["fifo vs trim_messages, 50% budget", ">= 15x faster",
         f"{speedup:.1f}x ({trim_s:.1f} s / {fifo_s:.2f} s)", verdict(speedup >= 15)],
        ["the same, compact --no-index", ">= 15x faster",
         f"{speedup_no_index:.1f}x ({trim_s:.1f} s / {fifo_no_index:.2f} s)",
         verdict(speedup_no_index >= 15)],
        ["the same, until the search index is ready", "(shown)",
         f"{trim_s / index_s:.1f}x ({trim_s:.1f} s / {index_s:.2f} s)", ""],
        ["fifo orphans / validate, 19 budgets", "0 of 19 bad",
         f"{len(ctxc_bad)} of {len(ctxc_rows)} bad" + (f" ({', '.join(ctxc_bad)})" if ctxc_bad else ""),
         "not run (--no-sweep)" if args.no_sweep else verdict(len(ctxc_rows) == 19 and not ctxc_bad)],
        ["fifo 50% output validates, within B", "exit 0, <= B", f"exit {fifo_rc}, {fifo_after:,}",
         verdict(fifo_rc == 0 and fifo_after <= budget)],
    ]  # fmt: skip
    for name, (run, an_s, _) in adaptive.items():
        ratio = run.wall / an_s
        ok = run.rc == 0 and ratio <= 2
        rows.append([f"adaptive {name} / analyze", "<= 2.0x",
                     f"{ratio:.2f}x ({run.wall:.2f} s / {an_s:.2f} s)" + ("" if run.rc == 0 else " FAILED"),
                     verdict(ok)])  # fmt: skip
    rows.extend(memory_rows(memory))
    lc_orphans = f"start_on=human {lc_orphan_budgets} of 19; start_on=None {lc_plain_orphan_budgets} of 19"
    rows.append(["(info) trim_messages budgets with orphans", "issue: 5 of 19", lc_orphans, ""])
    print_table(f"summary ({file_bytes / 2**20:.1f} MiB input, {os.cpu_count()} cores)",
                ["check", "target", "measured", "result"], rows)  # fmt: skip
    print(f"\nabsolute: ctxc analyze {an.wall:.2f} s ({file_bytes / MB / an.wall:.1f} MB/s of file, peak "
          f"{an.maxrss_mb:.0f} MB); fifo {fifo_s:.2f} s (peak {fifo_peak:.0f} MB); "
          f"trim_messages {trim_s:.1f} s")  # fmt: skip
    load = os.getloadavg()[0]
    print(f"reproduce: {reproduce_line('bench_compact.py')}   (finished; load avg {load:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
