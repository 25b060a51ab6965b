"""ctxc's redundancy strategies against cozempic's, side by side (issue 22).

    python bench/bench_redundancy.py                  # every corpus Claude Code log + a generated one
    python bench/bench_redundancy.py --mb 2 --no-resume
    python bench/bench_redundancy.py --input FILE ... # these files only

On each file (a copy of it, in a temporary directory):

* ctxc: ``ctxc compact -s dedupe``, then ``-s thinking``, then ``-s images``, each on the previous
  output (``--allow-over``: these strategies have no target to meet); then the same with
  ``--set dedupe.edited_reads=false`` (reads followed by an edit of the file kept, which the default
  replaces as cozempic's stale-reads does). Each step's archive must give its
  input back byte for byte (``ctxc restore``), and every citation the output holds must resolve
  (``ctxc show``).
* cozempic 1.8.39, installed once into ``~/.cache/ctxc-bench/cozempic-1.8.39`` (a venv of its own):
  ``cozempic strategy NAME FILE --execute`` for stale-reads, system-reminder-dedup, document-dedup,
  thinking-blocks and image-strip in turn, always with a throwaway ``HOME`` and
  ``COZEMPIC_NO_GLOBAL_INIT=1 COZEMPIC_NO_AUTO_INIT=1`` (by default it installs hooks into the user's
  ``~/.claude/settings.json``).
* Both outputs measured by ``ctxc analyze -f json``'s live-context tokens (what Claude Code sends on
  resume), and, unless ``--no-resume``, resumed in the real Claude Code (tests/realclient: isolated
  network namespace, fake API): the first request must come, with valid tool pairing and the log's last
  user request in it.

The ratios are ctxc's live tokens removed over cozempic's (target: at least 0.9 on each file). Timings
are not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("CTXC_CORPUS", "/work/shared/corpus")) / "claude-code"
COZEMPIC_VERSION = "1.8.39"
COZEMPIC_STRATEGIES = (
    "stale-reads",
    "system-reminder-dedup",
    "document-dedup",
    "thinking-blocks",
    "image-strip",
)
CTXC_STRATEGIES = ("dedupe", "thinking", "images")
#: The opt-in that also replaces reads followed by an edit of the file, as cozempic's stale-reads does.
KEEP_EDITED_READS = "dedupe.edited_reads=false"
TIMEOUT = 600
CITATION = re.compile(r"ctxc archive ([0-9a-f]{12}) messages (\d+(?:-\d+)?)")


def run(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=cwd
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}… exited {done.returncode}: {done.stderr[-800:]}")
    return done.stdout


def ctxc_env(archive: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["CTXC_ARCHIVE"] = str(archive)
    # A cache of this run's own: scans cached by other ctxc versions never stand in for a count.
    env["CTXC_CACHE_DIR"] = str(archive.parent.parent / "cache")
    return env


def ctxc(args: list[str], archive: Path) -> str:
    return run([sys.executable, "-m", "ctxc", *args], env=ctxc_env(archive))


def live_tokens(path: Path, archive: Path) -> int:
    report = json.loads(ctxc(["analyze", str(path), "-f", "json"], archive))["files"][0]
    live = report.get("live_context")
    return int(live["tokens"] if isinstance(live, dict) else report["context_tokens"])


# ------------------------------------------------------------------------------------------- cozempic


def cozempic(cache: Path) -> Path:
    """The cozempic executable, installed once into a venv of its own."""
    venv = cache / f"cozempic-{COZEMPIC_VERSION}"
    exe = venv / "bin" / "cozempic"
    if not exe.is_file():
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(venv / "bin" / "pip"), "install", "-q", f"cozempic=={COZEMPIC_VERSION}"])
    return exe


def run_cozempic(exe: Path, log: Path, home: Path, archive: Path) -> dict[str, int]:
    """Apply cozempic's redundancy strategies in turn; the live tokens each one removed."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "COZEMPIC_NO_GLOBAL_INIT": "1",
        "COZEMPIC_NO_AUTO_INIT": "1",
        "LANG": "C.UTF-8",
    }
    saved: dict[str, int] = {}
    tokens = live_tokens(log, archive)
    for name in COZEMPIC_STRATEGIES:
        run([str(exe), "strategy", name, str(log), "--execute"], env=env, cwd=log.parent)
        after = live_tokens(log, archive)
        saved[name], tokens = tokens - after, after
    if (home / ".claude").exists():
        raise RuntimeError(f"cozempic wrote into its HOME's .claude ({home}): refusing to trust this run")
    return saved


# ----------------------------------------------------------------------------------------------- ctxc


@dataclass
class CtxcRun:
    output: Path
    cited: int = 0
    restorable: bool = True
    problems: tuple[str, ...] = ()


def run_ctxc(log: Path, work: Path, archive: Path, settings: tuple[str, ...] = ()) -> CtxcRun:
    """The three strategies chained; each step's original restorable and every citation resolving.
    ``settings``: ``--set`` values (``dedupe.edited_reads=false``)."""
    current = log
    problems: list[str] = []
    cited: set[tuple[str, str]] = set()
    for name in CTXC_STRATEGIES:
        out = work / f"{log.stem}.{name}.jsonl"
        report = work / f"{name}.report.json"
        args = ["compact", str(current), "-s", name, "--allow-over", "--no-index", "-q", "-o", str(out)]
        args += [a for v in settings if v.startswith(f"{name}.") for a in ("--set", v)]
        ctxc([*args, "--report", str(report)], archive)
        rep = json.loads(report.read_text())
        archive_id = str(rep["run"]["archive_id"])
        restored = work / f"{name}.restored"
        ctxc(["restore", archive_id[:12], "-o", str(restored)], archive)
        if restored.read_bytes() != current.read_bytes():
            problems.append(f"{name}: the archive does not give its input back")
        # Citations in the output (pointers, placeholders) and in the report's actions (thinking).
        text = out.read_text(encoding="utf-8") + report.read_text(encoding="utf-8")
        new = {c for c in CITATION.findall(text) if c[0] == archive_id[:12]}
        for short, span in sorted(new):
            try:
                ctxc(["show", f"{short}:{span}", "-f", "json"], archive)
            except RuntimeError as exc:
                problems.append(f"{name}: citation {short}:{span} does not resolve: {exc}")
        cited |= new
        current = out
    return CtxcRun(current, len(cited), not problems, tuple(problems))


# -------------------------------------------------------------------------------------------- resume


def resume_check(log: Path, original: Path, work: Path) -> str:
    """Resume ``log`` in the real Claude Code; "ok" or what went wrong."""
    sys.path.insert(0, str(ROOT / "tests" / "realclient"))
    import wire
    from clients import CLAUDE, PROMPT, Unavailable, install, resume_claude

    try:
        exe = install(CLAUDE)
    except Unavailable as exc:
        return f"skipped ({exc})"
    got = resume_claude(exe, log, work)
    if not got.ok:
        return f"failed: {got.describe()[:200]}"
    body = wire.first_request(got.requests, "/v1/messages", PROMPT)
    if body is None:
        return "failed: no request carried the prompt"
    items = wire.claude_items(body)
    pairing = wire.pairing_problems(items)
    if pairing:
        return f"pairing: {pairing[0]}"
    requests = wire.claude_requests(original)
    if requests and not wire.contains(wire.request_text(items), requests[-1]):
        return "last request missing"
    return "ok"


# ---------------------------------------------------------------------------------------------- main


@dataclass
class Row:
    name: str
    before: int
    ctxc_after: int
    kept_after: int
    coz_after: int
    cited: int
    restorable: bool
    resume_ctxc: str
    resume_coz: str
    problems: tuple[str, ...]
    coz_by_strategy: dict[str, int]

    @property
    def ratio(self) -> float | None:
        coz = self.before - self.coz_after
        return None if coz <= 0 else (self.before - self.ctxc_after) / coz

    @property
    def kept_ratio(self) -> float | None:
        coz = self.before - self.coz_after
        return None if coz <= 0 else (self.before - self.kept_after) / coz


def measure(path: Path, tmp: Path, exe: Path, resume: bool) -> Row:
    work = tmp / re.sub(r"[^A-Za-z0-9.]+", "_", path.stem)
    (work / "ctxc").mkdir(parents=True)
    (work / "coz").mkdir()
    archive = work / "archive"
    source = work / path.name
    shutil.copyfile(path, source)
    before = live_tokens(source, archive)
    shutil.copyfile(path, work / "ctxc" / path.name)
    ours = run_ctxc(work / "ctxc" / path.name, work / "ctxc", archive)
    (work / "ctxc-kept").mkdir()
    shutil.copyfile(path, work / "ctxc-kept" / path.name)
    kept = run_ctxc(work / "ctxc-kept" / path.name, work / "ctxc-kept", archive, (KEEP_EDITED_READS,))
    theirs = work / "coz" / path.name
    shutil.copyfile(path, theirs)
    by_strategy = run_cozempic(exe, theirs, work / "coz-home", archive)
    resumed = ("-", "-")
    if resume:
        resumed = (
            resume_check(ours.output, source, work / "resume-ctxc"),
            resume_check(theirs, source, work / "resume-coz"),
        )
    return Row(
        path.name,
        before,
        live_tokens(ours.output, archive),
        live_tokens(kept.output, archive),
        live_tokens(theirs, archive),
        ours.cited + kept.cited,
        ours.restorable and kept.restorable,
        *resumed,
        ours.problems + kept.problems,
        by_strategy,
    )


def table(rows: list[Row]) -> str:
    lines = [
        "| file | live tokens | ctxc removes | ratio | keeping edited reads | ratio | cozempic removes "
        "| cozempic by strategy | ctxc cited / restorable | resumed (ctxc / cozempic) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        kept = "-" if r.kept_ratio is None else f"{r.kept_ratio:.2f}"
        by = ", ".join(f"{k} {v:,}" for k, v in r.coz_by_strategy.items() if v) or "-"
        lines.append(
            f"| {r.name} | {r.before:,} | {r.before - r.ctxc_after:,} | {ratio} "
            f"| {r.before - r.kept_after:,} | {kept} | {r.before - r.coz_after:,} | {by} "
            f"| {r.cited} / {'yes' if r.restorable else 'NO'} | {r.resume_ctxc} / {r.resume_coz} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", nargs="*", type=Path, help="measure these files only")
    parser.add_argument(
        "--mb", type=float, default=2.0, help="size of the generated Claude Code log (0: none)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-resume", action="store_true", help="skip resuming in the real Claude Code")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ctxc-bench")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    exe = cozempic(args.cache)
    with tempfile.TemporaryDirectory(prefix="ctxc-redundancy-") as name:
        tmp = Path(name)
        files = list(args.input or sorted(CORPUS.glob("*.jsonl")))
        if args.input is None and args.mb > 0:
            gen = tmp / f"generated-{args.mb:g}mb.jsonl"
            script = str(ROOT / "bench" / "gen_transcript.py")
            run(
                [
                    sys.executable,
                    script,
                    str(gen),
                    "--mb",
                    str(args.mb),
                    "--format",
                    "claude-code",
                    "--seed",
                    str(args.seed),
                ]
            )
            files.append(gen)
        rows: list[Row] = []
        for path in files:
            row = measure(path, tmp, exe, not args.no_resume)
            rows.append(row)
            print(
                f"{row.name}: {row.before:,} live tokens; ctxc -{row.before - row.ctxc_after:,}, "
                f"cozempic -{row.before - row.coz_after:,}",
                file=sys.stderr,
            )
            for p in row.problems:
                print(f"  problem: {p}", file=sys.stderr)
    print(table(rows))
    short = [r.name for r in rows if r.ratio is not None and r.ratio < 0.9]
    print(f"\nbelow 0.9x of cozempic (default): {', '.join(short) or 'none'}")
    short = [r.name for r in rows if r.kept_ratio is not None and r.kept_ratio < 0.9]
    print(f"below 0.9x of cozempic (with {KEEP_EDITED_READS}): {', '.join(short) or 'none'}")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ | {"ratio": r.ratio} for r in rows], indent=2))
    return 1 if any(not r.restorable for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
