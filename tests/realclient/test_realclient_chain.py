"""Claude Code resumes a chain, not a file: the real client sends what ctxc calls the live context.

A log with a rewound branch (the Kafka prompts, abandoned for Redis Streams) and a tool result followed
by the user's words on the same chain is resumed in the real Claude Code, uncompacted and after each
strategy: the abandoned branch never reaches the model, the two user records go as one message, and
ctxc's live context is exactly the request's conversation.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import wire
from clients import CLAUDE, PROMPT, installed_or_skip, resume_claude, run_bounded
from conftest import ROOT

from ctxc.formats import load
from ctxc.live import live_messages
from ctxc.model import TextBlock

pytestmark = pytest.mark.realclient

SID = "5f0c7a4e-1b2d-4c3e-9a8b-7d6e5f4a3b2c"
INTENT = "Build the event pipeline for the billing service"
LAST = "Also add a dead-letter stream and document the retry policy"
ABANDONED = "Kafka"
OVER_TARGET = 6


def _u(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def _env(rtype: str, name: str, parent: str | None, ts: int, **extra: Any) -> dict[str, Any]:
    return {
        "parentUuid": _u(parent) if parent else None,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/work/project",
        "sessionId": SID,
        "version": "2.1.14",
        "gitBranch": "main",
        "type": rtype,
        "uuid": _u(name),
        "timestamp": f"2026-01-01T00:{ts // 60:02d}:{ts % 60:02d}.000Z",
        **extra,
    }


def _user(name: str, parent: str, ts: int, content: Any, **extra: Any) -> dict[str, Any]:
    return _env("user", name, parent, ts, message={"role": "user", "content": content}, **extra)


def _asst(name: str, parent: str | None, ts: int, content: list[Any]) -> dict[str, Any]:
    message = {
        "id": f"msg_{name}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    return _env("assistant", name, parent, ts, requestId=f"req_{name}", message=message)


def _text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def _log() -> bytes:
    out = [
        _env("user", "u0", None, 1, message={"role": "user", "content": INTENT}),
        _asst("a0", "u0", 2, [_text("Sure, which broker should I use?")]),
        _user("u1", "a0", 3, "Use Kafka for the queue"),
        _asst("a1", "u1", 4, [_text("Kafka it is: topics created.")]),
        _user("u2", "a1", 5, "Add consumer groups with Kafka"),
        _asst("a2", "u2", 6, [_text("Consumer groups added to Kafka.")]),
        _user("v1", "a0", 7, "Use Redis Streams for the queue"),
    ]
    parent = "v1"
    for k in range(1, 7):
        call = {"type": "tool_use", "id": f"toolu_{k}", "name": "Bash", "input": {"command": f"make s{k}"}}
        words = _text(f"Step {k} of the Redis Streams pipeline.")
        out.append(_asst(f"b{k}", parent, 8 + 3 * k, [words, call]))
        output = "\n".join(f"step {k} line {n}: stream entry written" for n in range(60))
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": output}
        copy = {"stdout": output, "stderr": ""}
        out.append(_user(f"r{k}", f"b{k}", 9 + 3 * k, [result], toolUseResult=copy))
        parent = f"r{k}"
    out.append(_user("v2", parent, 40, LAST))  # after a tool result on the same chain: one message
    out.append(_asst("z", "v2", 41, [_text("Dead-letter stream added; retries back off exponentially.")]))
    return b"".join(json.dumps(r).encode() + b"\n" for r in out)


@pytest.fixture(scope="module")
def exe() -> Path:
    return installed_or_skip(CLAUDE)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chain") / f"{SID}.jsonl"
    path.write_bytes(_log())
    return path


@pytest.fixture(scope="module")
def baseline(exe: Path, log: Path, tmp_path_factory: pytest.TempPathFactory) -> int:
    """The size of the uncompacted resume's conversation."""
    return wire.conversation_size(_resume(exe, log, tmp_path_factory.mktemp("baseline")))


def _resume(exe: Path, log: Path, work: Path) -> dict[str, Any]:
    run = resume_claude(exe, log, work)
    assert run.ok, run.describe()
    body = wire.first_request(run.requests, "/v1/messages", PROMPT)
    assert body is not None, run.describe()
    return body


def _conversation(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") in ("user", "assistant")]


def _texts(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


def test_claude_sends_exactly_the_live_context(exe: Path, log: Path, tmp_path: Path) -> None:
    body = _resume(exe, log, tmp_path)
    sent = _conversation(body)
    live = live_messages(load(log))
    assert ABANDONED not in json.dumps(body["messages"])
    # The request is the live context, message for message, then the resume prompt.
    assert [m["role"] for m in sent[: len(live)]] == [m.role for m in live]
    for m, api in zip(live, sent, strict=False):
        words = "\n".join(b.text for b in m.blocks if isinstance(b, TextBlock))
        assert wire.normalize(words) in wire.normalize(_texts(api))
    merged = next(m for m in live if LAST in m.text)
    assert [b.kind for b in merged.blocks] == ["tool_result", "text"]
    assert PROMPT in _texts(sent[len(live)])


@pytest.mark.parametrize("strategy", ["fifo", "selective", "mask", "recursive", "hierarchical", "adaptive"])
def test_a_compacted_branched_log_resumes_without_the_branch(
    exe: Path, log: Path, baseline: int, tmp_path: Path, strategy: str
) -> None:
    out = tmp_path / log.name
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env |= {"PYTHONPATH": str(ROOT), "CTXC_ARCHIVE": str(tmp_path / "archive")}
    argv = [sys.executable, "-m", "ctxc", "compact", str(log), "-s", strategy, "--target-tokens", "1500"]
    done = run_bounded([*argv, "-o", str(out), "--no-index"], timeout=300, env=env)
    if done.returncode == OVER_TARGET:
        pytest.skip(f"{strategy} cannot reach the target")
    assert done.returncode == 0, done.stderr
    kept = set(out.read_bytes().splitlines())
    assert all(line in kept for line in log.read_bytes().splitlines()[2:6])  # the branch, byte for byte
    body = _resume(exe, out, tmp_path / "resume")
    items = wire.claude_items(body)
    text = wire.request_text(items)
    assert ABANDONED not in json.dumps(body["messages"])
    assert wire.pairing_problems(items) == []
    assert wire.contains(text, INTENT)
    assert wire.contains(text, LAST)
    summary = wire.ctxc_summary(out, codex=False)
    if summary is not None:
        assert wire.contains_summary(text, summary)
    assert wire.conversation_size(body) < baseline
