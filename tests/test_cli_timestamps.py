"""Issue 20 item 7 through the real command line: records ctxc adds carry the time of the record they
follow, never the epoch (viewers sort by time, and a 1970 record goes first)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import CORPUS, corpus_params, run

EPOCH = ("1970-01-01", '"timestamp":0,', '"timestamp":0}')


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_pi_entries_repair_adds_take_the_time_of_the_entry_before(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def entry(stamp: str, ms: int, role: str, content: list[Any], **more: Any) -> dict[str, Any]:
        message = {"role": role, "content": content, "timestamp": ms, **more}
        return {"type": "message", "timestamp": stamp, "message": message}

    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}
    entries = [
        {"type": "session", "id": "s1", "timestamp": "2025-03-01T10:00:00.000Z", "cwd": "/w"},
        entry("2025-03-01T10:00:01.000Z", 1740823201000, "user", [{"type": "text", "text": "list"}]),
        entry("2025-03-01T10:00:02.500Z", 1740823202500, "assistant", [call], stopReason="toolUse"),
        entry("2025-03-01T10:00:09.000Z", 1740823209000, "user", [{"type": "text", "text": "well?"}]),
    ]
    src = tmp_path / "session.jsonl"
    src.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries))
    out = tmp_path / "fixed.jsonl"
    code, _, err = run(capsys, "repair", str(src), "-o", str(out), "--archive", str(tmp_path / "a"))
    assert code == 0, err
    written = lines(out)
    added = [e for e in written if "no result was recorded" in orjson.dumps(e).decode()]
    assert len(added) == 1  # the answer ctxc gave the unanswered call
    assert added[0]["timestamp"] == "2025-03-01T10:00:02.500Z"
    assert added[0]["message"]["timestamp"] == 1740823202500
    assert not any(e in out.read_text() for e in EPOCH)


def test_openhands_events_repair_adds_take_the_time_of_the_event_before(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def message(n: int, stamp: str, source: str, text: str) -> dict[str, Any]:
        args = {"content": text, "image_urls": None, "wait_for_response": False}
        return {
            "id": n,
            "timestamp": stamp,
            "source": source,
            "message": text,
            "action": "message",
            "args": args,
        }

    run_ls = {
        "id": 5,
        "timestamp": "2025-04-30T16:32:57.821635",
        "source": "agent",
        "message": "Running command: ls",
        "action": "run",
        "args": {"command": "ls", "thought": ""},
        "tool_call_metadata": {
            "function_name": "execute_bash",
            "tool_call_id": "toolu_01",
            "model_response": {},
            "total_calls_in_response": 1,
        },
    }
    history = [
        message(1, "2025-04-30T16:32:54.708196", "user", "fix it"),
        run_ls,
        message(9, "2025-04-30T16:33:10.000000", "user", "and?"),
    ]
    src = tmp_path / "output.jsonl"
    src.write_bytes(orjson.dumps({"instance_id": "x", "instruction": "fix it", "history": history}) + b"\n")
    out = tmp_path / "fixed.jsonl"
    code, _, err = run(capsys, "repair", str(src), "-o", str(out), "--archive", str(tmp_path / "a"))
    assert code == 0, err
    events = lines(out)[0]["history"]
    added = [e for e in events if e.get("cause") == 5]
    assert len(added) == 1
    assert added[0]["timestamp"] == "2025-04-30T16:32:57.821635"
    assert not any(e in out.read_text() for e in EPOCH)


@pytest.mark.parametrize("path", corpus_params("chat-messages/pi-coding-agent_*.jsonl"))
@pytest.mark.parametrize("strategy", ["adaptive", "hierarchical"])
def test_compacted_pi_sessions_have_no_epoch_and_stay_in_time_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, path: Path, strategy: str
) -> None:
    assert CORPUS.is_dir()
    out = tmp_path / "out.jsonl"
    args = ["compact", str(path), "-s", strategy, "--target-ratio", "0.3", "--allow-over", "-q"]
    code, _, err = run(capsys, *args, "-o", str(out), "--archive", str(tmp_path / "a"))
    assert code == 0, err
    text = out.read_text()
    assert not any(e in text for e in EPOCH)
    before = {e["timestamp"] for e in lines(path)}
    stamps = [e["timestamp"] for e in lines(out)]
    # Every time written is one the session had: ctxc's entries borrow their neighbour's.
    assert set(stamps) <= before
    assert all(isinstance(datetime.fromisoformat(s.replace("Z", "+00:00")), datetime) for s in stamps)
