"""ctxc's outputs resumed in the real Claude Code and Codex CLIs: what reaches the model next.

For every corpus log and sample the client resumes uncompacted, the uncompacted resume is the baseline;
then every strategy at 10% and 50% of the live context's tokens compacts the file (the redundancy
strategies, which have no target to reach, once, with ``--allow-over``), the client resumes the output,
and the checks below hold on the first request it sends. How the clients are installed and
isolated: clients.py and docs/testing.md. Checks that fail on today's code are in KNOWN_FAILURES; only
mask and offload may refuse a target (exit 6), other strategies where JUSTIFIED_REFUSALS says why.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import wire
from clients import (
    CLAUDE,
    CODEX,
    PROMPT,
    Client,
    Run,
    Unavailable,
    install,
    resume_claude,
    resume_codex,
    run_bounded,
)
from conftest import CORPUS, ROOT, SAMPLES, corpus_files

pytestmark = pytest.mark.realclient

STRATEGIES = ("fifo", "selective", "mask", "offload", "recursive", "hierarchical", "adaptive")
TARGETS = (0.1, 0.5)
#: Strategies that remove only what is repeated or stale (issue 22): run once, at the last target, with
#: ``--allow-over``, since they stop when nothing redundant is left.
REDUNDANCY = ("dedupe", "thinking", "images")
CHECKS = ("exit", "pairing", "intent", "last_request", "ctxc_summary", "own_summary", "smaller")
BASELINE_CHECKS = ("exit", "pairing", "last_request", "own_summary")
OVER_TARGET = 6  # ctxc.errors.ExitCode.OVER_TARGET: a clean refusal
#: Strategies that may refuse cleanly (exit 6): they only rewrite tool outputs, so what is left may be
#: over the target. Any other strategy must reach it (issue 17), except where JUSTIFIED_REFUSALS says why.
MAY_REFUSE = ("mask", "offload")
CTXC_TIMEOUT = 300
JOBS = max(1, int(os.environ.get("CTXC_REALCLIENT_JOBS", "2")))  # client runs at once

# What fails today: (file ids, strategies, targets, checks, why), each field a space-separated list of
# fnmatch patterns. The cases matched are strict xfails: when a fix makes one pass, its XPASS says to
# narrow or remove the entry. Cases ctxc refuses (exit 6) are skipped before this table applies.
KNOWN_FAILURES: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "samples/claude-code.jsonl",
        "thinking",
        "50%",
        "smaller",
        "Claude Code 2.1.332 no longer offers the model the log was recorded with (claude-sonnet-4-5), so "
        "it resumes with its default model and sends none of the log's thinking; which models a client "
        "has retired cannot be known offline, so ctxc counts the thinking of the log's last model as "
        "sent, and removing it shrinks ctxc's count, not the request",
    ),
    (
        "codex/localpush_rollout_compacted_text-redacted_0.104.jsonl",
        "images",
        "50%",
        "smaller",
        "the corpus file's images are redacted to 50-character stand-ins of the data URLs they were; "
        "ctxc counts each as an image of unknown size (the most an image costs), and its cited "
        "placeholder is longer than the stand-in",
    ),
)

# Refusals by other strategies that are right: (file ids, strategies, targets, why), fnmatch patterns as
# above. One belongs here only when reaching the target would take what issue 17 forbids removing (the
# session's intent or last request verbatim, the log's own summary beyond shortening it); the reason
# says which pinned words are over the target and by how much, as docs/strategies.md does. Any other
# refusal fails the case's `exit` check.
JUSTIFIED_REFUSALS: tuple[tuple[str, str, str, str], ...] = ()


@dataclass(frozen=True)
class Source:
    client: Client
    path: Path

    @property
    def id(self) -> str:
        root = CORPUS if self.path.is_relative_to(CORPUS) else ROOT
        return str(self.path.relative_to(root))

    @property
    def codex(self) -> bool:
        return self.client is CODEX

    @property
    def endpoint(self) -> str:
        return "/v1/responses" if self.codex else "/v1/messages"


def _sources() -> list[Source]:
    out = [Source(CLAUDE, p) for p in corpus_files("claude-code/*.jsonl")]
    out += [Source(CODEX, p) for p in corpus_files("codex/*.jsonl")]
    return [*out, Source(CLAUDE, SAMPLES / "claude-code.jsonl"), Source(CODEX, SAMPLES / "codex.jsonl")]


def _pct(target: float) -> str:
    return f"{round(target * 100)}%"


def _matching(table: tuple[tuple[str, ...], ...], *values: str) -> str | None:
    """The reason of the first entry of ``table`` whose patterns match ``values``, or None."""
    for entry in table:
        *fields, reason = entry
        if all(
            any(fnmatch.fnmatchcase(v, p) for p in f.split()) for v, f in zip(values, fields, strict=True)
        ):
            return reason
    return None


def known_failure(file_id: str, strategy: str, target: str, check: str) -> str | None:
    """Why KNOWN_FAILURES expects this case to fail, or None."""
    return _matching(KNOWN_FAILURES, file_id, strategy, target, check)


def justified_refusal(file_id: str, strategy: str, target: str) -> str | None:
    """Why ctxc may refuse this case (exit 6), or None when it must reach the target."""
    if strategy in MAY_REFUSE:
        return f"{strategy} only rewrites tool outputs"
    return _matching(JUSTIFIED_REFUSALS, file_id, strategy, target)


def _cases() -> list[tuple[str, float]]:
    """Every (strategy, target) a source is compacted with."""
    return [(s, t) for s in STRATEGIES for t in TARGETS] + [(s, TARGETS[-1]) for s in REDUNDANCY]


def _params(checks: tuple[str, ...], *, compacted: bool) -> list[Any]:
    params: list[Any] = []
    for source in _sources():
        cases = _cases() if compacted else [("uncompacted", 0.0)]
        for strategy, target in cases:
            for check in checks:
                pct = _pct(target) if compacted else "-"
                reason = known_failure(source.id, strategy, pct, check) if compacted else None
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                case_id = f"{source.id}-{strategy}-{pct}-{check}" if compacted else f"{source.id}-{check}"
                params.append(pytest.param(source, strategy, target, check, id=case_id, marks=marks))
    return params


# ------------------------------------------------------------------------------------------ running


@dataclass(frozen=True)
class Resumed:
    """A client resume: the run and the first request it sent (None when there was none)."""

    run: Run
    body: dict[str, Any] | None

    @property
    def items(self) -> list[wire.Item]:
        if self.body is None:
            return []
        return wire.codex_items(self.body) if "input" in self.body else wire.claude_items(self.body)


@dataclass(frozen=True)
class Outcome:
    refused: str = ""  # ctxc refused cleanly (over target): its message
    error: str = ""  # ctxc failed
    output: Path | None = None
    removed: bool = False
    resumed: Resumed | None = None


def _ctxc(args: list[str], archive: Path) -> subprocess.CompletedProcess[str]:
    """``python -m ctxc ARGS`` from this checkout, bounded (its worker processes die with it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env |= {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        "PYTHONIOENCODING": "utf-8",
        "CTXC_ARCHIVE": str(archive),
    }
    return run_bounded([sys.executable, "-m", "ctxc", *args], timeout=CTXC_TIMEOUT, env=env)


def live_context_tokens(path: Path, baseline: Resumed, archive: Path) -> int:
    """Tokens of what the client sends next, the base of the 10% / 50% targets.

    ctxc's own figure: ``analyze``'s ``live_context.tokens`` (the messages after the log's own last
    compaction, issue 17 items 1-2), or ``context_tokens`` from an analyze without it. Switch here to
    measure the ``baseline`` request instead.
    """
    del baseline
    done = _ctxc(["analyze", str(path), "-f", "json"], archive)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["files"][0]
    live = report.get("live_context")
    return int(live["tokens"] if isinstance(live, dict) else report["context_tokens"])


_SHRANK = re.compile(r"([\d,]+) (?:→|->) ([\d,]+) tokens")


class Lab:
    """The clients, the baselines and every compact-and-resume, computed once per session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._exes: dict[str, Path | Unavailable] = {}
        self._baselines: dict[Path, Resumed] = {}
        self._outcomes: dict[Path, dict[tuple[str, float], Outcome]] = {}

    def exe(self, client: Client) -> Path:
        with self._lock:
            if client.name not in self._exes:
                try:
                    self._exes[client.name] = install(client)
                except Unavailable as exc:
                    self._exes[client.name] = exc
            got = self._exes[client.name]
        if isinstance(got, Unavailable):
            pytest.skip(f"{client.spec} unavailable: {got}")
        return got

    def _work(self, source: Source, name: str) -> Path:
        # Names padded to one width: the client puts its working directory in the system prompt, and
        # a longer path would make a request a few bytes larger (the `smaller` check compares sizes).
        work = self.root / re.sub(r"[^A-Za-z0-9.]+", "_", source.id) / f"{name:_<32}"
        work.mkdir(parents=True, exist_ok=True)
        return work

    def resume(self, source: Source, log: Path, work: Path) -> Resumed:
        exe = self.exe(source.client)
        run = (resume_codex if source.codex else resume_claude)(exe, log, work)
        return Resumed(run, wire.first_request(run.requests, source.endpoint, PROMPT))

    def baseline(self, source: Source) -> Resumed:
        if source.path not in self._baselines:
            self._baselines[source.path] = self.resume(source, source.path, self._work(source, "uncompacted"))
        return self._baselines[source.path]

    def outcome(self, source: Source, strategy: str, target: float) -> tuple[Resumed, Outcome]:
        baseline = self.baseline(source)
        if not baseline.run.ok or baseline.body is None:
            pytest.skip(f"does not resume uncompacted in {source.client.spec}")
        if source.path not in self._outcomes:
            archive = self._work(source, "archive")
            live = live_context_tokens(source.path, baseline, archive)
            cases = _cases()

            def one(case: tuple[str, float]) -> Outcome:
                return self._compact_and_resume(source, case[0], max(1, round(live * case[1])), archive)

            with ThreadPoolExecutor(max_workers=JOBS) as pool:
                self._outcomes[source.path] = dict(zip(cases, pool.map(one, cases), strict=True))
        return baseline, self._outcomes[source.path][(strategy, target)]

    def _compact_and_resume(self, source: Source, strategy: str, target: int, archive: Path) -> Outcome:
        work = self._work(source, f"{strategy}-{target}")
        output = work / source.path.name
        args = [
            "compact",
            str(source.path),
            "-s",
            strategy,
            "--target-tokens",
            str(target),
            "-o",
            str(output),
            *(["--allow-over"] if strategy in REDUNDANCY else []),
        ]
        done = _ctxc([*args, "--no-index"], archive)
        if done.returncode == OVER_TARGET:
            return Outcome(refused=f"ctxc refused (exit {OVER_TARGET}): {done.stderr.strip()[-600:]}")
        if done.returncode != 0:
            return Outcome(error=f"ctxc compact exited {done.returncode}: {done.stderr.strip()[-400:]}")
        shrank = _SHRANK.search(done.stderr)
        if shrank:
            removed = int(shrank.group(2).replace(",", "")) < int(shrank.group(1).replace(",", ""))
        else:
            removed = output.read_bytes() != source.path.read_bytes()
        return Outcome(output=output, removed=removed, resumed=self.resume(source, output, work))


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return Lab(tmp_path_factory.mktemp("realclient"))


# ------------------------------------------------------------------------------------------- checks


def _request(resumed: Resumed) -> dict[str, Any]:
    assert resumed.run.ok, f"the client failed: {resumed.run.describe()}"
    assert resumed.body is not None, f"no request carried the prompt {PROMPT!r}: {resumed.run.describe()}"
    return resumed.body


def _check_exit(source: Source, resumed: Resumed, baseline: Resumed, outcome: Outcome | None) -> None:
    _request(resumed)


def _check_pairing(source: Source, resumed: Resumed, baseline: Resumed, outcome: Outcome | None) -> None:
    _request(resumed)
    assert wire.pairing_problems(resumed.items) == []


def _requests(source: Source) -> list[str]:
    return wire.codex_requests(source.path) if source.codex else wire.claude_requests(source.path)


def _check_intent(source: Source, resumed: Resumed, baseline: Resumed, outcome: Outcome | None) -> None:
    _request(resumed)
    requests = _requests(source)
    if requests:
        assert wire.contains(wire.request_text(resumed.items), requests[0]), (
            f"intent missing: {requests[0][:300]!r}"
        )


def _check_last_request(source: Source, resumed: Resumed, baseline: Resumed, outcome: Outcome | None) -> None:
    _request(resumed)
    requests = _requests(source)
    if requests:
        last = requests[-1]
        assert wire.contains(wire.request_text(resumed.items), last), (
            f"last user request missing: {last[:300]!r}"
        )


def _written(outcome: Outcome | None, source: Source) -> str | None:
    if outcome is None or outcome.output is None:
        return None
    return wire.ctxc_summary(outcome.output, codex=source.codex)


def _check_ctxc_summary(source: Source, resumed: Resumed, baseline: Resumed, outcome: Outcome | None) -> None:
    _request(resumed)
    summary = _written(outcome, source)
    if summary is not None:
        assert wire.contains_summary(wire.request_text(resumed.items), summary), "ctxc's summary was not sent"


def _check_own_summary(source: Source, resumed: Resumed, baseline: Resumed, outcome: Outcome | None) -> None:
    _request(resumed)
    own = wire.own_summary(source.path, codex=source.codex)
    if own is not None and _written(outcome, source) is None:
        assert wire.contains_summary(wire.request_text(resumed.items), own), (
            "the log's own summary was not sent"
        )


def _check_smaller(source: Source, resumed: Resumed, baseline: Resumed, outcome: Outcome | None) -> None:
    body = _request(resumed)
    if outcome is not None and outcome.removed:
        before = wire.conversation_size(_request(baseline))
        assert wire.conversation_size(body) < before, "ctxc removed content but the request did not shrink"


CHECK: dict[str, Callable[[Source, Resumed, Resumed, Outcome | None], None]] = {
    "exit": _check_exit,
    "pairing": _check_pairing,
    "intent": _check_intent,
    "last_request": _check_last_request,
    "ctxc_summary": _check_ctxc_summary,
    "own_summary": _check_own_summary,
    "smaller": _check_smaller,
}


@pytest.mark.parametrize(("source", "strategy", "target", "check"), _params(BASELINE_CHECKS, compacted=False))
def test_uncompacted_resume(lab: Lab, source: Source, strategy: str, target: float, check: str) -> None:
    """The harness's own baseline: the original log resumes and its first request passes the checks."""
    del strategy, target
    baseline = lab.baseline(source)
    if not baseline.run.ok or baseline.body is None:
        pytest.skip(f"does not resume uncompacted in {source.client.spec}")
    CHECK[check](source, baseline, baseline, None)


@pytest.mark.parametrize(("source", "strategy", "target", "check"), _params(CHECKS, compacted=True))
def test_compacted_resume(lab: Lab, source: Source, strategy: str, target: float, check: str) -> None:
    baseline, outcome = lab.outcome(source, strategy, target)
    if outcome.refused:
        why = justified_refusal(source.id, strategy, _pct(target))
        if why is not None:
            pytest.skip(f"{outcome.refused} (a clean refusal may happen: {why})")
        # A refusal the tables do not justify is one failure, in the case's exit check.
        if check != "exit":
            pytest.skip(f"ctxc refused; see this case's exit check: {outcome.refused}")
        pytest.fail(f"{strategy} must reach the target: {outcome.refused}")
    assert not outcome.error, outcome.error
    assert outcome.resumed is not None
    CHECK[check](source, outcome.resumed, baseline, outcome)


def test_every_known_failure_names_real_cases() -> None:
    """A stale KNOWN_FAILURES or JUSTIFIED_REFUSALS entry (a renamed file, a typo) would silently match
    nothing; mask and offload need no refusal entry."""
    if not CORPUS.is_dir():
        pytest.skip(f"no corpus at {CORPUS}")
    cases = [(src.id, s, _pct(t), c) for src in _sources() for s, t in _cases() for c in CHECKS]
    for entry in KNOWN_FAILURES:
        fields = entry[:4]
        for i, field in enumerate(fields):
            for pattern in field.split():
                assert any(fnmatch.fnmatchcase(case[i], pattern) for case in cases), (pattern, entry[4])
    for refusal in JUSTIFIED_REFUSALS:
        for i, field in enumerate(refusal[:3]):
            for pattern in field.split():
                assert any(fnmatch.fnmatchcase(case[i], pattern) for case in cases), (pattern, refusal[3])
        assert not any(fnmatch.fnmatchcase(s, p) for s in MAY_REFUSE for p in refusal[1].split()), refusal
