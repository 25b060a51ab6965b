"""Claude Code's live context is a chain, not a stretch of the file (issue 17).

A Claude Code log is a tree of records linked by ``parentUuid``. A rewind or an edited prompt leaves the
old branch in the file; the client resumes the chain that ends at the newest main-chain row, back to
its compact_boundary. Consecutive user records on that chain go to the model as one user message.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import corpus_params, run

import ctxc
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.formats import claude_code, dump, load
from ctxc.live import BRANCHES, last_request, live_context, live_messages, request_text, session_intent
from ctxc.model import ToolResultBlock, Transcript
from ctxc.validate import pairing_problems


def _env(rtype: str, uid: str, parent: str | None, ts: int, **extra: Any) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/work",
        "sessionId": "s-1",
        "version": "2.1.14",
        "type": rtype,
        "uuid": uid,
        "timestamp": f"2026-01-01T00:{ts // 60:02d}:{ts % 60:02d}.000Z",
        **extra,
    }


def _user(uid: str, parent: str | None, ts: int, content: Any, **extra: Any) -> dict[str, Any]:
    return _env("user", uid, parent, ts, message={"role": "user", "content": content}, **extra)


def _asst(uid: str, parent: str | None, ts: int, mid: str, content: list[Any]) -> dict[str, Any]:
    message = {"id": mid, "type": "message", "role": "assistant", "model": "claude-x", "content": content}
    message["usage"] = {"input_tokens": 10, "output_tokens": 5}
    return _env("assistant", uid, parent, ts, message=message)


def _text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def _call(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": f"run {tid}"}}


def _result(tid: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": text}


def _boundary(uid: str, ts: int, logical: str) -> dict[str, Any]:
    return _env(
        "system",
        uid,
        None,
        ts,
        subtype="compact_boundary",
        content="Conversation compacted",
        logicalParentUuid=logical,
        compactMetadata={"trigger": "manual", "preTokens": 900},
    )


def _jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _load(data: bytes) -> Transcript:
    return load(io.BytesIO(data), input_format="claude-code")


WORDS = " ".join(f"word{k}" for k in range(120))


def _rewound() -> bytes:
    """The user rewound to their second prompt and wrote another: the Kafka branch is abandoned."""
    return _jsonl(
        _user("u0", None, 1, "Build the event pipeline for the billing service"),
        _asst("a0", "u0", 2, "m0", [_text("Sure, which broker? " + WORDS)]),
        _user("u1", "a0", 3, "Use Kafka for the queue"),
        _asst("a1", "u1", 4, "m1", [_text("Kafka it is. " + WORDS)]),
        _user("u2", "a1", 5, "Add consumer groups with Kafka"),
        _asst("a2", "u2", 6, "m2", [_text("Consumer groups added. " + WORDS)]),
        _user("v1", "a0", 7, "Use Redis Streams for the queue"),
        _asst("b1", "v1", 8, "m3", [_text("Redis Streams it is. " + WORDS)]),
    )


# ------------------------------------------------------------------------------------------- chain


def test_a_rewound_branch_is_not_in_the_live_context() -> None:
    t = _load(_rewound())
    texts = [m.text.split(".")[0].split(",")[0] for m in live_messages(t)]
    assert texts == [
        "Build the event pipeline for the billing service",
        "Sure",
        "Use Redis Streams for the queue",
        "Redis Streams it is",
    ]
    (branches,) = [b for b in t.boundaries if b.kind == BRANCHES]
    assert branches.abandoned == (2, 3, 4, 5)
    assert not branches.resets
    assert branches.line == 8  # the leaf the client resumes
    last = last_request(live_messages(t))
    assert last is not None
    assert last.text == "Use Redis Streams for the queue"
    intent = session_intent(live_messages(t))
    assert intent is not None
    assert intent.index == 0


def test_analyze_counts_the_chain_and_reports_the_abandoned_branch_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rewound.jsonl"
    path.write_bytes(_rewound())
    a = ctxc.analyze(path, use_cache=False)
    live = [s for s in a.messages if s.live]
    assert [s.index for s in live] == [0, 1, 6, 7]
    assert a.total_tokens == sum(s.tokens for s in live)
    assert (a.branch_messages, a.history_messages) == (4, 0)
    assert a.branch_tokens == sum(s.tokens for s in a.messages if not s.live)
    assert a.live_messages == 4
    code, out, _ = run(capsys, "analyze", str(path), "-f", "json")
    assert code == 0
    doc = orjson.loads(out)["files"][0]
    assert doc["abandoned_branches"] == {"messages": 4, "tokens": a.branch_tokens}
    assert doc["live_context"]["messages"] == 4
    assert all(b["kind"] != BRANCHES for b in doc["boundaries"])  # no compaction is reported
    code, out, _ = run(capsys, "analyze", str(path), "-f", "table")
    assert code == 0
    flat = " ".join(out.split())
    assert f"4 messages, {a.branch_tokens:,} tokens on abandoned branches" in flat
    # A cached scan gives the same answer.
    assert ctxc.analyze(path).branch_messages == 4
    assert ctxc.analyze(path).branch_messages == 4


def test_the_chain_runs_back_to_the_compact_boundary_and_what_precedes_it_is_history() -> None:
    data = _jsonl(
        _user("u0", None, 1, "Port the CLI to Rust"),
        _asst("a0", "u0", 2, "m0", [_text("Porting. " + WORDS)]),
        _boundary("b0", 3, "a0"),
        _user(
            "s0", "b0", 4, "Summary: porting the CLI", isCompactSummary=True, isVisibleInTranscriptOnly=True
        ),
        _user("u1", "s0", 5, "Now add the config parser"),
        _asst("a1", "u1", 6, "m1", [_text("Parser with serde. " + WORDS)]),
        _user("u2", "a1", 7, "Use toml instead"),
        _asst("a2", "u2", 8, "m2", [_text("Switched to toml. " + WORDS)]),
        _user("u2b", "a1", 9, "Use a hand-written parser instead"),
        _asst("a2b", "u2b", 10, "m3", [_text("Hand-written it is. " + WORDS)]),
    )
    t = _load(data)
    live = live_context(t.boundaries, t.messages)
    states = [("live" if live.is_live(m.index, 0) else "off", m.index in live.abandoned) for m in t.messages]
    assert states == [
        ("off", False),  # before the boundary: history
        ("off", False),
        ("live", False),  # the log's own summary
        ("live", False),
        ("live", False),
        ("off", True),  # the toml branch
        ("off", True),
        ("live", False),
        ("live", False),
    ]


def test_parallel_results_on_the_parts_of_a_response_are_live_and_one_message() -> None:
    # Claude Code 2.x writes a response with two calls as two records and hangs each result off the part
    # holding its call: the results are not on the parentUuid walk, yet the client sends them.
    data = _jsonl(
        _user("u0", None, 1, "Run both checks"),
        _asst("a1", "u0", 2, "m1", [_call("t1")]),
        _asst("a1b", "a1", 3, "m1", [_call("t2")]),
        _user("r1", "a1", 4, [_result("t1", "ok one")], sourceToolAssistantUUID="a1"),
        _user("r2", "a1b", 5, [_result("t2", "ok two")], sourceToolAssistantUUID="a1b"),
        _asst("a2", "r2", 6, "m2", [_text("Both pass.")]),
    )
    t = _load(data)
    assert [(m.role, m.records) for m in t.messages] == [
        ("user", (0,)),
        ("assistant", (1, 2)),
        ("user", (3, 4)),
        ("assistant", (5,)),
    ]
    assert not [b for b in t.boundaries if b.kind == BRANCHES]
    assert len(live_messages(t)) == 4
    assert pairing_problems(live_messages(t), strict=True) == []


def test_progress_records_and_hook_notes_after_the_leaf_are_on_the_chain() -> None:
    progress = {"type": "progress", "uuid": "p1", "parentUuid": "a1", "sessionId": "s-1", "data": {}}
    data = _jsonl(
        _user("u0", None, 1, "Run it"),
        _asst("a1", "u0", 2, "m1", [_call("t1")]),
        progress,
        _user("r1", "p1", 3, [_result("t1", "done")]),
        _asst("a2", "r1", 4, "m2", [_text("Done.")]),
        _env("system", "h1", "a2", 5, subtype="stop_hook_summary", content="hooks ran"),
    )
    t = _load(data)
    assert not [b for b in t.boundaries if b.kind == BRANCHES]
    assert len(live_messages(t)) == len(t.messages) == 5


def test_a_chain_broken_by_a_missing_record_says_nothing_about_branches() -> None:
    # Another tool cut records out of the middle: the walk cannot reach the start, so nothing is called
    # abandoned (the client would fall back on timestamps).
    data = _jsonl(
        _user("u0", None, 1, "Start"),
        _asst("a0", "u0", 2, "m0", [_text("ok")]),
        _user("u1", "gone", 3, "Go on"),
        _asst("a1", "u1", 4, "m1", [_text("ok")]),
    )
    t = _load(data)
    assert not [b for b in t.boundaries if b.kind == BRANCHES]
    assert len(live_messages(t)) == 4


def test_an_edited_prompt_with_no_reply_is_its_own_abandoned_message() -> None:
    # The user sent a prompt, interrupted before any reply and sent another: both hang off a0. They are
    # consecutive user records in the file but not on one chain, so they are not one message.
    data = _jsonl(
        _user("u0", None, 1, "Start"),
        _asst("a0", "u0", 2, "m0", [_text("ok")]),
        _user("u1", "a0", 3, "Delete the database"),
        _user("u1b", "a0", 4, "Back up the database"),
        _asst("a1", "u1b", 5, "m1", [_text("Backed up.")]),
    )
    t = _load(data)
    assert [m.records for m in t.messages] == [(0,), (1,), (2,), (3,), (4,)]
    assert [m.text for m in live_messages(t)] == ["Start", "ok", "Back up the database", "Backed up."]


@pytest.mark.parametrize("path", corpus_params("claude-code/*.jsonl"))
def test_corpus_logs_have_no_abandoned_branch(path: Path) -> None:
    """Every corpus log is one chain (parallel results, hook notes and sidechains included)."""
    assert not [b for b in load(path).boundaries if b.kind == BRANCHES]


# ------------------------------------------------------------------------------------------ compact


@pytest.mark.parametrize("strategy", ["fifo", "selective", "mask", "recursive", "hierarchical", "adaptive"])
def test_compact_leaves_an_abandoned_branch_byte_for_byte(strategy: str) -> None:
    source = _rewound()
    t = _load(source)
    before = sum(1 for _ in live_messages(t))
    result = compact_transcript(t, CompactOptions(strategy=strategy, target_tokens=150, allow_over=True))
    out = result.transcript.to_bytes()
    lines = out.splitlines()
    for k in (2, 3, 4, 5):  # u1, a1, u2, a2: the Kafka branch
        assert source.splitlines()[k] in lines
    back = _load(out)
    live = live_messages(back)
    assert "Kafka" not in " ".join(m.text for m in live if not m.meta.get("ctxc"))
    assert pairing_problems(live, strict=True) == []
    last = last_request(live)
    assert last is not None
    assert "Use Redis Streams for the queue" in last.text
    assert len(live) <= before + 2


# ------------------------------------------------------------------------------------------- merge


def _interrupted() -> bytes:
    """A tool result, then the user's words on the same chain: one API message."""
    return _jsonl(
        _user("u0", None, 1, "Run the migration"),
        _asst("a1", "u0", 2, "m1", [_call("t1")]),
        _user("r1", "a1", 3, [_result("t1", "migrated 3 tables " + WORDS)], toolUseResult={"stdout": "x"}),
        _user("u2", "r1", 4, "Now also seed the test data"),
        _asst("a2", "u2", 5, "m2", [_text("Seeded.")]),
        _user("u3", "a2", 6, "Thanks, now write the docs"),
        _asst("a3", "u3", 7, "m3", [_text("Written.")]),
    )


def test_consecutive_user_records_are_one_message_as_sent() -> None:
    source = _interrupted()
    t = _load(source)
    assert [(m.role, m.records) for m in t.messages] == [
        ("user", (0,)),
        ("assistant", (1,)),
        ("user", (2, 3)),
        ("assistant", (4,)),
        ("user", (5,)),
        ("assistant", (6,)),
    ]
    merged = t.messages[2]
    assert [b.kind for b in merged.blocks] == ["tool_result", "text"]
    assert merged.meta["uuids"] == ("r1", "u2")
    last = last_request(t.messages[:4])
    assert last is merged
    assert pairing_problems(t.messages, strict=True) == []
    buf = io.BytesIO()
    dump(t, buf)
    assert buf.getvalue() == source


def test_a_changed_merged_message_is_written_record_by_record() -> None:
    source = _interrupted()
    t = _load(source)
    options = CompactOptions(
        strategy="mask",
        target_tokens=60,
        keep_last=1,
        allow_over=True,
        settings={"mask.keep_last_results": "0", "mask.placeholder_only": "true"},
    )
    result = compact_transcript(t, options)
    out = result.transcript.to_bytes()
    src_lines, out_lines = source.splitlines(), out.splitlines()
    assert len(out_lines) == len(src_lines)
    assert out_lines[3] == src_lines[3]  # the user's words: their record is untouched
    masked = orjson.loads(out_lines[2])
    assert masked["uuid"] == "r1"
    assert masked["message"]["content"][0]["type"] == "tool_result"
    assert "migrated 3 tables word0 word1" not in masked["message"]["content"][0]["content"]
    back = _load(out)
    assert [m.records for m in back.messages] == [(0,), (1,), (2, 3), (4,), (5,), (6,)]
    assert isinstance(back.messages[2].blocks[0], ToolResultBlock)


def test_a_merged_message_that_lost_a_record_s_blocks_becomes_one_record_with_a_note() -> None:
    # Repair took the tool result out (its call was summarized away): the blocks no longer split over
    # the records, so the message is one record; the client's copy of the removed output goes too.
    t = _load(_interrupted())
    merged = t.messages[2]
    words = replace(merged, blocks=merged.blocks[1:])
    records = claude_code.ClaudeCodeAdapter().write_compacted(
        t, {0: (t.messages[0], t.messages[1], words, *t.messages[3:])}, archive_id="a" * 64
    )
    objs = [orjson.loads(r.raw) for r in records]
    assert [o["uuid"] for o in objs] == ["u0", "a1", "u2", "a2", "u3", "a3"]
    one = objs[2]
    assert one["message"]["content"] == [{"type": "text", "text": "Now also seed the test data"}]
    assert one["toolUseResult"].startswith("[ctxc] tool output compacted")


def test_the_interruption_note_is_not_the_users_request() -> None:
    data = _jsonl(
        _user("u0", None, 1, "Run the suite"),
        _asst("a1", "u0", 2, "m1", [_call("t1")]),
        _user("r1", "a1", 3, [_result("t1", "The user doesn't want to proceed with this tool use.")]),
        _user("i1", "r1", 4, [_text("[Request interrupted by user for tool use]")]),
        _user("u2", "i1", 5, "Use pytest -x instead"),
        _asst("a2", "u2", 6, "m2", [_text("Running pytest -x.")]),
        _user("i2", "a2", 7, [_text("[Request interrupted by user]")]),
    )
    t = _load(data)
    # The interruption note stays apart from the results before it (a strategy may drop them and keep
    # the note); what the user typed after the note joins it.
    assert [m.records for m in t.messages] == [(0,), (1,), (2,), (3, 4), (5,), (6,)]
    assert request_text(t.messages[3]) == "Use pytest -x instead"
    assert request_text(t.messages[5]) == ""
    last = last_request(t.messages)
    assert last is not None
    assert last.index == 3


def test_a_log_whose_records_name_no_parent_has_no_branches() -> None:
    # Written by another tool without parentUuid links: there is no tree to follow, only file order.
    data = _jsonl(
        _user("u0", None, 1, "Start"),
        _asst("a0", None, 2, "m0", [_text("ok")]),
        _user("u1", None, 3, "Go on"),
        _asst("a1", None, 4, "m1", [_text("ok")]),
    )
    t = _load(data)
    assert not [b for b in t.boundaries if b.kind == BRANCHES]
    assert len(live_messages(t)) == 4
