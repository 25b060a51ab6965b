"""``ctxc.jobs.repair_file``: the library side of ``ctxc repair`` archives, writes and records the run."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from conftest import ROOT

from ctxc.archive import Archive
from ctxc.cli import main
from ctxc.jobs import RepairJob, ValidateJob, repair_file, validate_file


def test_repair_file_archives_the_original_writes_the_fix_and_records_the_run(tmp_path: Path) -> None:
    lines = (ROOT / "samples" / "chat-anthropic.jsonl").read_bytes().splitlines(keepends=True)
    # Drop every tool result: each call is left unanswered, which repair answers.
    kept = [ln for ln in lines if b'"tool_result"' not in ln]
    assert len(kept) < len(lines)
    src = tmp_path / "broken.jsonl"
    src.write_bytes(b"".join(kept))
    out = tmp_path / "fixed.jsonl"
    entry = repair_file(RepairJob(str(src), str(out), archive=str(tmp_path / "a")))
    assert entry["fixed"] > 0
    store = Archive.open(str(tmp_path / "a"))
    assert store.read(entry["archive_id"]) == src.read_bytes()
    runs = [r for r in store.manifest() if r.get("command") == "repair"]
    assert [r["output_sha256"] for r in runs] == [entry["output_sha256"]]
    assert b"no result" in out.read_bytes()
    assert all(orjson.loads(ln) for ln in out.read_bytes().splitlines())


def test_a_pi_session_without_results_gets_tool_results_pi_reads(tmp_path: Path) -> None:
    # pi answers a call with a ``toolResult`` message; a session with no result yet gives repair no
    # example of the role to copy, so the format's own fact must decide it.
    entries = [
        {"type": "session", "id": "s1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"},
        {"type": "message", "timestamp": "2026-01-01T00:00:01.000Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "read a.txt"}]}},
        {"type": "message", "timestamp": "2026-01-01T00:00:02.000Z",
         "message": {"role": "assistant", "stopReason": "toolUse",
                     "content": [{"type": "toolCall", "id": "call-1", "name": "read",
                                  "arguments": {"path": "a.txt"}}]}},
    ]  # fmt: skip
    src = tmp_path / "pi.jsonl"
    src.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries))
    out = tmp_path / "fixed.jsonl"
    entry = repair_file(RepairJob(str(src), str(out), archive=str(tmp_path / "a")))
    assert (entry["format"], entry["fixed"]) == ("pi", 1)
    added = orjson.loads(out.read_bytes().splitlines()[-1])["message"]
    assert (added["role"], added["toolCallId"], added["isError"]) == ("toolResult", "call-1", True)
    assert validate_file(ValidateJob(str(out)))["problems"] == []


@pytest.mark.parametrize(
    ("call", "answer_role"),
    [
        ({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}, "tool"),
        ({"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}]}, "user"),
    ],
    ids=["openai", "anthropic"],
)  # fmt: skip
@pytest.mark.parametrize("command", ["repair", "compact"])
def test_a_chat_log_without_results_is_answered_in_its_own_dialect(
    tmp_path: Path, call: dict[str, object], answer_role: str, command: str
) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_bytes(
        orjson.dumps({"role": "user", "content": "list files"}) + b"\n" + orjson.dumps(call) + b"\n"
    )
    out = tmp_path / "fixed.jsonl"
    with pytest.raises(SystemExit) as exited:
        main([command, str(src), "-o", str(out), "--archive", str(tmp_path / "a")])
    assert exited.value.code in (0, None)
    lines = out.read_bytes().splitlines()
    assert (len(lines), orjson.loads(lines[-1])["role"]) == (3, answer_role)
    assert validate_file(ValidateJob(str(out)))["problems"] == []
