"""Claude Code sends only the thinking of the model it resumes with: ctxc counts exactly that thinking.

The sample, recorded with claude-opus-4-5 until its last thinking response and with claude-sonnet-4-6
from there on, is resumed in the real Claude Code, uncompacted and after `compact -s thinking`: the
thinking blocks the request carries are those of ctxc's live context that ctxc does not call unsent,
and analyze's thinking tokens are the count of those texts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import wire
from clients import CLAUDE, PROMPT, installed_or_skip, resume_claude, run_bounded
from conftest import ROOT, SAMPLES

from ctxc.analysis import analyze
from ctxc.formats import load
from ctxc.live import live_context
from ctxc.model import ThinkingBlock
from ctxc.tokens import make_counter

pytestmark = pytest.mark.realclient

EARLIER, LAST = "claude-opus-4-5", "claude-sonnet-4-6"


@pytest.fixture(scope="module")
def exe() -> Path:
    return installed_or_skip(CLAUDE)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with its responses before the last one with thinking recorded with EARLIER."""
    records = [orjson.loads(line) for line in (SAMPLES / "claude-code.jsonl").read_bytes().splitlines()]
    thinking = [
        r["message"]["id"]
        for r in records
        if r.get("type") == "assistant" and any(b.get("type") == "thinking" for b in r["message"]["content"])
    ]
    for r in records:
        if r.get("type") == "assistant":
            r["message"]["model"] = EARLIER if r["message"]["id"] in thinking[:-1] else LAST
    path = tmp_path_factory.mktemp("thinking") / "switched.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _sent_thinking(body: dict[str, Any]) -> list[str]:
    """The thinking texts of the request's conversation, in order."""
    return [
        b.get("thinking", "")
        for m in body["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "thinking"
    ]


def _live_thinking(path: Path) -> list[str]:
    """The thinking texts ctxc counts in the live context, in order."""
    t = load(path)
    live = live_context(t.boundaries, t.messages)
    return [
        b.text
        for m in live.split(t.messages)[1]
        if m.index not in live.unsent_thinking
        for b in m.blocks
        if isinstance(b, ThinkingBlock)
    ]


def _check(exe: Path, path: Path, work: Path) -> int:
    """Resume ``path``: the thinking sent is ctxc's live thinking; returns the conversation's size."""
    run = resume_claude(exe, path, work)
    assert run.ok, run.describe()
    body = wire.first_request(run.requests, "/v1/messages", PROMPT)
    assert body is not None, run.describe()
    assert body["model"].startswith(LAST)
    sent = _sent_thinking(body)
    assert sent == _live_thinking(path)
    counted = analyze(path, use_cache=False).by_kind.get("thinking", 0)
    assert counted == sum(make_counter("o200k_base").count([t for t in sent if t]))
    return wire.conversation_size(body)


def test_claude_sends_the_thinking_ctxc_counts(exe: Path, log: Path, tmp_path: Path) -> None:
    t = load(log)
    assert live_context(t.boundaries, t.messages).unsent_thinking  # the case is a real one
    _check(exe, log, tmp_path)


def test_thinking_strategy_saves_only_thinking_that_is_sent(exe: Path, log: Path, tmp_path: Path) -> None:
    baseline = _check(exe, log, tmp_path / "baseline")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env |= {"PYTHONPATH": str(ROOT), "CTXC_ARCHIVE": str(tmp_path / "archive")}
    argv = [sys.executable, "-m", "ctxc", "compact", str(log), "-s", "thinking", "--keep-last", "1"]
    argv += ["--target-ratio", "0.01", "--allow-over", "--out-dir", str(tmp_path / "out"), "--no-index"]
    done = run_bounded([*argv, "--format", "json"], timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    (report,) = orjson.loads(done.stdout)["files"]
    out = Path(report["output"])
    # What compact reports is analyze's live context before and after, and the request shrank.
    assert report["tokens_before"] == analyze(log, use_cache=False).total_tokens
    assert report["tokens_after"] == analyze(out, use_cache=False).total_tokens < report["tokens_before"]
    assert _check(exe, out, tmp_path / "resume") < baseline
