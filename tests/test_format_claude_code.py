"""The Claude Code session-log adapter, on the real corpus and on small synthetic logs."""

from __future__ import annotations

import dataclasses
import io
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import CORPUS, corpus_params

from ctxc.formats import claude_code, dump, get_adapter, load
from ctxc.formats.claude_code import _Draft
from ctxc.model import (
    Boundary,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    Usage,
)
from ctxc.reader import iter_records

ADAPTER = get_adapter("claude-code")
CC = "claude-code"
NON_MESSAGE_TYPES = {"progress", "file-history-snapshot", "queue-operation", "summary", "pr-link"}


def _corpus(name: str) -> Path:
    path = CORPUS / "claude-code" / name
    if not path.is_file():
        pytest.skip(f"corpus file missing: {path}")
    return path


def _raw_records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _load(data: bytes) -> Transcript:
    return load(io.BytesIO(data), input_format=CC)


def _env(rtype: str, uid: str, parent: str | None, **extra: Any) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "sessionId": "s-1",
        "type": rtype,
        "uuid": uid,
        "timestamp": "2026-01-01T00:00:00.000Z",
        **extra,
    }


def _asst(uid: str, parent: str | None, mid: str, content: list[Any], output: int = 5) -> dict[str, Any]:
    usage = {"input_tokens": 3, "output_tokens": output, "cache_read_input_tokens": 100}
    usage["cache_creation_input_tokens"] = 20
    message = {"id": mid, "type": "message", "role": "assistant", "model": "claude-x", "content": content}
    message["usage"] = usage
    return _env("assistant", uid, parent, requestId=f"req-{mid}", message=message)


def _user(uid: str, parent: str | None, content: Any, **extra: Any) -> dict[str, Any]:
    return _env("user", uid, parent, message={"role": "user", "content": content}, **extra)


def _tool_use(tid: str, name: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": {"path": tid}}


def _tool_result(tid: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": text}


# ---------------------------------------------------------------------------------------------- corpus


@pytest.mark.parametrize("path", corpus_params("claude-code/*.jsonl"))
def test_corpus_sniffed_loaded_and_dumped_identically(path: Path) -> None:
    with path.open("rb") as fh:
        sample = [r for r in iter_records(fh, str(path)) if r.kind == "passthrough"][:40]
    assert ADAPTER.sniff(sample) == 95
    t = load(path)
    assert t.format == CC
    out = io.BytesIO()
    dump(t, out)
    assert out.getvalue() == path.read_bytes()


@pytest.mark.parametrize("path", corpus_params("claude-code/*.jsonl"))
def test_corpus_encode_law_on_single_record_messages(path: Path) -> None:
    t = load(path)
    singles = [m for m in t.messages if len(m.records) == 1]
    assert singles
    for m in singles:
        assert isinstance(m.raw, dict)
        assert ADAPTER.encode_message(m) == m.raw, f"line {m.line}"


@pytest.mark.parametrize("path", corpus_params("claude-code/*.jsonl"))
def test_corpus_message_structure(path: Path) -> None:
    """Counts derived independently from the raw JSON: one message per response id, user, and system."""
    raw = _raw_records(path)
    t = load(path)
    assert [m.index for m in t.messages] == list(range(len(t.messages)))
    referenced = Counter(i for m in t.messages for i in m.records)
    assert all(n == 1 for n in referenced.values())
    for i, rec in enumerate(raw):
        is_boundary = rec.get("subtype") in ("compact_boundary", "microcompact_boundary")
        expected = rec.get("type") in ("user", "assistant", "system") and not is_boundary
        assert (i in referenced) == expected, f"record {i} type {rec.get('type')}"
    response_ids = {r["message"]["id"] for r in raw if r.get("type") == "assistant"}
    assert sum(1 for m in t.messages if m.role == "assistant") == len(response_ids)
    real_ids = {
        r["message"]["id"]
        for r in raw
        if r.get("type") == "assistant" and r["message"].get("model") != "<synthetic>"
    }
    assert len(t.usage) == len(real_ids)
    assert len(t.boundaries) == sum(
        1 for r in raw if r.get("subtype") in ("compact_boundary", "microcompact_boundary")
    )
    for m in t.messages:
        assert m.line == t.records[m.records[0]].line
        assert m.records == tuple(sorted(m.records))
        if m.role == "assistant" and len(m.records) > 1:
            assert isinstance(m.raw, tuple)
            assert len({r["message"]["id"] for r in m.raw}) == 1
            assert sum(len(r["message"]["content"]) for r in m.raw) == len(m.blocks)


@pytest.mark.parametrize("path", corpus_params("claude-code/*.jsonl"))
def test_corpus_every_result_follows_its_call_and_is_named(path: Path) -> None:
    t = load(path)
    calls: dict[str, str] = {}
    results = 0
    for m in t.messages:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                calls[b.id] = b.name
            elif isinstance(b, ToolResultBlock):
                results += 1
                assert b.tool_use_id in calls, f"line {m.line}: result before its call"
                assert b.name == calls[b.tool_use_id]
    raw_results = sum(
        1
        for r in _raw_records(path)
        if r.get("type") == "user" and isinstance(r["message"].get("content"), list)
        for blk in r["message"]["content"]
        if blk.get("type") == "tool_result"
    )
    assert results == raw_results


@pytest.mark.parametrize("path", corpus_params("claude-code/*.jsonl"))
def test_corpus_tool_use_result_is_not_content(path: Path) -> None:
    t = load(path)
    for m in t.messages:
        if m.meta["has_tool_use_result"]:
            # Consecutive user records on one chain are one message, with every record's dict.
            parts = m.raw if isinstance(m.raw, tuple) else (m.raw,)
            assert all(isinstance(p, dict) for p in parts)
            assert any("toolUseResult" in p for p in parts)
            contents = [p["message"]["content"] for p in parts]
            expected = sum(1 if isinstance(c, str) else len(c) for c in contents)
            assert len(m.blocks) == expected


def test_manual_compact_facts() -> None:
    t = load(_corpus("entire-cli_manual-compact_v2.1.14.jsonl"))
    blocks = [b for m in t.messages for b in m.blocks]
    assert sum(isinstance(b, ToolUseBlock) for b in blocks) == 39
    assert sum(isinstance(b, ToolResultBlock) for b in blocks) == 39
    assert t.boundaries == (
        Boundary(
            kind="compact_boundary", line=71, trigger="manual", pre_tokens=153739, resets=True, index=24
        ),
    )
    after = [m for m in t.messages if m.line > 71]
    summary = after[0]
    assert summary.role == "user"
    assert summary.meta["is_compact_summary"] is True
    assert summary.meta["is_visible_in_transcript_only"] is True
    assert summary.meta["content_string"] is True
    assert summary.text.startswith("This session is being continued from a previous conversation")
    assert not any(m.meta["subtype"] == "compact_boundary" for m in t.messages)


def test_auto_compact_boundaries() -> None:
    t = load(_corpus("entire-cli_auto-compact_summary-records_v2.1.5.jsonl"))
    assert t.boundaries == (
        Boundary(
            kind="compact_boundary", line=432, trigger="auto", pre_tokens=158105, resets=True, index=225
        ),
    )
    t2 = load(_corpus("entire-cli_auto-compact_v2.0.76.jsonl"))
    assert [(b.trigger, b.pre_tokens) for b in t2.boundaries] == [("auto", 155250)]


def test_summary_records_are_not_messages() -> None:
    path = _corpus("entire-cli_auto-compact_summary-records_v2.1.5.jsonl")
    raw = _raw_records(path)
    t = load(path)
    summaries = [i for i, r in enumerate(raw) if r.get("type") == "summary"]
    assert summaries[:20] == list(range(20))
    used = {i for m in t.messages for i in m.records}
    assert not used & set(summaries)
    assert all(t.records[i].kind == "passthrough" for i in summaries)
    assert t.messages[0].records[0] > 19


def test_subagent_split_response_is_one_message() -> None:
    t = load(_corpus("spotter_subagent-sidechain_agent-a2898e3.jsonl"))
    big = [m for m in t.messages if len(m.records) == 10]
    assert len(big) == 1
    m = big[0]
    assert m.role == "assistant"
    assert isinstance(m.raw, tuple)
    assert len(m.raw) == 10
    assert len(m.meta["uuids"]) == 10
    assert m.meta["agent_id"] is not None
    assert m.meta["is_sidechain"] is True
    calls = [b.id for b in m.blocks if isinstance(b, ToolUseBlock)]
    assert len(calls) == 9
    # The results written between the parts come right after the merged response, in file order, as
    # one user message (the client sends consecutive user records as one).
    following = t.messages[m.index + 1]
    answered = [b.tool_use_id for b in following.blocks if isinstance(b, ToolResultBlock)]
    assert answered == calls
    assert len(following.records) == len(calls)
    assert following.line > m.line
    # Usage counted once: one Usage item on the merged message's first line.
    assert m.usage is not None
    assert [u.line for u in t.usage].count(m.line) == 1
    assert sum(1 for u in t.usage if u == m.usage) >= 1


def test_synthetic_turn_has_no_recorded_usage() -> None:
    t = load(_corpus("entire-cli_auto-compact_v2.0.76.jsonl"))
    synthetic = [m for m in t.messages if m.meta["synthetic"]]
    assert len(synthetic) == 1
    assert synthetic[0].usage is None
    assert synthetic[0].meta["model"] == "<synthetic>"
    assert all(u.line != synthetic[0].line for u in t.usage)


def test_inline_sidechains_and_string_content() -> None:
    t = load(_corpus("claude-code-viewer_inline-sidechains_v1.0.98.jsonl"))
    side = [m for m in t.messages if m.meta["is_sidechain"]]
    main = [m for m in t.messages if not m.meta["is_sidechain"]]
    assert side
    assert main
    strings = [m for m in t.messages if m.meta["content_string"]]
    assert len(strings) == 7
    assert all(len(m.blocks) == 1 and isinstance(m.blocks[0], TextBlock) for m in strings)


def test_microcompact_boundaries_and_images() -> None:
    t = load(_corpus("kimi-cli-dev_images_microcompact_v2.1.56.jsonl"))
    assert len(t.boundaries) == 9
    assert {b.kind for b in t.boundaries} == {"microcompact_boundary"}
    assert {b.trigger for b in t.boundaries} == {"auto"}
    images = [b for m in t.messages for b in m.blocks if isinstance(b, ImageBlock)]
    assert images
    assert all(i.width and i.height and i.data_bytes > 10_000 for i in images)
    # requestId is missing from every assistant record of this file.
    assert all(m.meta["request_id"] is None for m in t.messages if m.role == "assistant")


def test_system_records_without_content_are_empty_system_messages() -> None:
    t = load(_corpus("entire-cli_manual-compact_v2.1.14.jsonl"))
    system = [m for m in t.messages if m.role == "system"]
    assert {m.meta["subtype"] for m in system} == {"stop_hook_summary", "turn_duration"}
    assert all(m.blocks == () for m in system)
    local = [m for m in load(_corpus("spotter_tool-heavy_v2.1.38.jsonl")).messages if m.role == "system"]
    assert [m.meta["subtype"] for m in local] == ["local_command", "local_command"]
    assert "<command-name>/mcp</command-name>" in local[0].text


# ------------------------------------------------------------------------------------------- synthetic


def _interleaved() -> bytes:
    return _jsonl(
        {"type": "summary", "summary": "a title", "leafUuid": "nowhere"},
        _user("u0", None, "read two files"),
        _asst("a1", "u0", "msg_A", [_tool_use("t1", "Read")], output=1),
        _user("r1", "a1", [_tool_result("t1", "one")], toolUseResult={"file": {"content": "one"}}),
        _asst("a2", "r1", "msg_A", [_tool_use("t2", "Grep")], output=40),
        {"type": "progress", "uuid": "p1", "parentUuid": "a2", "sessionId": "s-1", "data": {"type": "x"}},
        _user("r2", "p1", [_tool_result("t2", "two")]),
        _asst("a3", "r2", "msg_B", [{"type": "text", "text": "done"}]),
    )


def test_interleaved_split_response_comes_before_its_results() -> None:
    data = _interleaved()
    t = _load(data)
    assert [(m.role, m.records) for m in t.messages] == [
        ("user", (1,)),
        ("assistant", (2, 4)),
        ("user", (3, 6)),  # parallel results, each hanging off its part: one message, as sent
        ("assistant", (7,)),
    ]
    merged = t.messages[1]
    assert [b.id for b in merged.blocks if isinstance(b, ToolUseBlock)] == ["t1", "t2"]
    assert merged.meta["uuids"] == ("a1", "a2")
    assert merged.meta["message_id"] == "msg_A"
    assert merged.usage == Usage(input=3, output=40, cache_read=100, cache_write=20, line=3, model="claude-x")
    assert t.usage == (
        merged.usage,
        Usage(input=3, output=5, cache_read=100, cache_write=20, line=8, model="claude-x"),
    )
    names = [b.name for m in t.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert names == ["Read", "Grep"]
    assert t.messages[2].meta["has_tool_use_result"] is True
    assert t.messages[2].text == "one\ntwo"
    out = io.BytesIO()
    dump(t, out)
    assert out.getvalue() == data


def test_streaming_order_of_items() -> None:
    records = list(enumerate(iter_records(io.BytesIO(_interleaved()), "x")))
    items = list(ADAPTER.read(records))
    kinds = [(type(i).__name__, i.line) for i in items]
    # The usage comes last, once the record tree tells which calls are on abandoned branches.
    assert kinds == [
        ("Message", 2),
        ("Message", 3),
        ("Message", 4),
        ("Message", 8),
        ("Usage", 3),
        ("Usage", 8),
    ]


def test_boundary_read_while_response_open_keeps_its_place() -> None:
    boundary = _env(
        "system",
        "b1",
        None,
        subtype="compact_boundary",
        content="Conversation compacted",
        compactMetadata={"trigger": "auto", "preTokens": 1234},
    )
    data = _jsonl(
        _asst("a1", None, "msg_A", [{"type": "text", "text": "x"}]),
        boundary,
        _asst("a2", "a1", "msg_A", [{"type": "text", "text": "y"}]),
    )
    items = list(ADAPTER.read(enumerate(iter_records(io.BytesIO(data), "x"))))
    assert [type(i).__name__ for i in items] == ["Message", "Boundary", "Usage"]  # usage comes last
    assert items[1] == Boundary(
        kind="compact_boundary", line=2, trigger="auto", pre_tokens=1234, resets=True, index=1
    )
    assert isinstance(items[0], Message)
    assert items[0].records == (0, 2)


def test_pending_buffer_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claude_code, "_MAX_PENDING", 2)
    data = _jsonl(
        _asst("a1", None, "msg_A", [_tool_use("t1", "Read")]),
        _user("r1", "a1", [_tool_result("t1", "1")]),
        _user("r2", "r1", "hello"),
        _asst("a2", "r2", "msg_A", [_tool_use("t2", "Read")]),
        _user("r3", "a2", [_tool_result("t2", "2")]),
    )
    t = _load(data)
    # The buffer filled up, so the first part was yielded alone; the late part is a continuation
    # whose usage is not counted a second time.
    # r2 hangs off r1: one user message, as the client sends it.
    assert [m.records for m in t.messages] == [(0,), (1, 2), (3,), (4,)]
    assert t.messages[2].meta["continuation"] is True
    assert t.messages[2].usage is None
    assert t.messages[0].meta["continuation"] is False
    assert len(t.usage) == 1


def test_unknown_record_type_kept_in_place() -> None:
    data = _jsonl(
        _user("u0", None, "hi"),
        {"type": "brand-new-thing", "uuid": "z", "payload": [1, 2, 3]},
        {"type": "pr-link", "sessionId": "s-1", "prNumber": 1},
        _asst("a1", "u0", "msg_A", [{"type": "text", "text": "hello"}]),
    )
    t = _load(data)
    assert [m.records for m in t.messages] == [(0,), (3,)]
    assert t.records[1].kind == "passthrough"
    out = io.BytesIO()
    dump(t, out)
    assert out.getvalue() == data


def test_sidechain_and_meta_flags() -> None:
    rec = _user("u0", "p0", "sub prompt", isSidechain=True, agentId="abc", isMeta=True, importance="high")
    t = _load(_jsonl(rec))
    (m,) = t.messages
    assert m.meta["is_sidechain"] is True
    assert m.meta["agent_id"] == "abc"
    assert m.meta["is_meta"] is True
    assert m.meta["parent_uuid"] == "p0"
    assert m.meta["session_id"] == "s-1"
    assert m.importance == "high"


def test_unknown_block_and_empty_content_round_trip() -> None:
    odd = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}
    recs = [
        _asst("a1", None, "msg_A", [odd]),
        _user("u1", "a1", []),
        _env("user", "u2", "u1", message={"role": "user"}),
        _env("system", "s1", "u2", subtype="turn_duration", durationMs=5),
    ]
    t = _load(_jsonl(*recs))
    # u2 hangs off u1: one user message of two records, each encoded back as it was.
    assert [m.records for m in t.messages] == [(0,), (1, 2), (3,)]
    single = [t.messages[0], t.messages[2]]
    assert [ADAPTER.encode_message(m) for m in single] == [recs[0], recs[3]]
    assert t.messages[1].raw == (recs[1], recs[2])
    assert t.messages[1].blocks == ()
    out = io.BytesIO()
    dump(t, out)
    assert out.getvalue() == _jsonl(*recs)
    assert t.messages[0].blocks[0].kind == "unknown"
    assert t.messages[2].blocks == ()


def test_encode_changed_tool_result_keeps_envelope() -> None:
    rec = _user("r1", "a1", [_tool_result("t1", "x" * 500)], toolUseResult={"stdout": "x" * 500})
    t = _load(_jsonl(_asst("a1", None, "msg_A", [_tool_use("t1", "Bash")]), rec))
    m = t.messages[1]
    block = m.blocks[0]
    assert isinstance(block, ToolResultBlock)
    assert block.name == "Bash"
    changed = Message(
        role=m.role,
        blocks=(ToolResultBlock(tool_use_id="t1", text="[cut]", name="Bash", raw=block.raw),),
        meta=m.meta,
        raw=m.raw,
    )
    out = ADAPTER.encode_message(changed)
    assert out["message"]["content"] == [{"type": "tool_result", "tool_use_id": "t1", "content": "[cut]"}]
    assert out["toolUseResult"] == rec["toolUseResult"]
    envelope = {k: v for k, v in rec.items() if k != "message"}
    assert {k: v for k, v in out.items() if k != "message"} == envelope


def test_encode_string_content_stays_string_when_changed() -> None:
    t = _load(_jsonl(_user("u0", None, "a long prompt")))
    m = t.messages[0]
    out = ADAPTER.encode_message(Message(role="user", blocks=(TextBlock("short"),), meta=m.meta, raw=m.raw))
    assert out["message"]["content"] == "short"
    assert out["uuid"] == "u0"


def test_encode_merged_message_is_one_record() -> None:
    t = _load(_interleaved())
    merged = t.messages[1]
    out = ADAPTER.encode_message(merged)
    assert out["type"] == "assistant"
    assert out["uuid"] == "a2"  # the last part's uuid: records that pointed at it still link
    assert out["parentUuid"] == "u0"  # the first part's parent
    assert out["message"]["id"] == "msg_A"
    assert out["message"]["usage"]["output_tokens"] == 40
    assert [b["id"] for b in out["message"]["content"]] == ["t1", "t2"]
    reread = _load(_jsonl(out)).messages[0]
    assert reread.blocks == tuple(b for b in merged.blocks)


def test_encode_new_messages() -> None:
    summary = Message(role="user", blocks=(TextBlock("summary of earlier turns"),), index=4)
    rec = ADAPTER.encode_message(summary)
    assert rec["type"] == "user"
    assert rec["message"] == {"role": "user", "content": "summary of earlier turns"}
    assert rec["parentUuid"] is None
    assert rec["isSidechain"] is False
    assert rec["userType"] == "external"
    assert rec["uuid"] == ADAPTER.encode_message(summary)["uuid"]  # reproducible
    other = ADAPTER.encode_message(Message(role="user", blocks=summary.blocks, index=5))
    assert other["uuid"] != rec["uuid"]
    assert len(rec["uuid"]) == 36

    flagged = Message(
        role="user",
        blocks=summary.blocks,
        meta={"is_compact_summary": True, "parent_uuid": "p", "session_id": "s-9"},
    )
    frec = ADAPTER.encode_message(flagged)
    assert frec["isCompactSummary"] is True
    assert frec["parentUuid"] == "p"
    assert frec["sessionId"] == "s-9"

    reply = Message(role="assistant", blocks=(TextBlock("ok"), ToolUseBlock("t9", "Read", {"p": 1})))
    arec = ADAPTER.encode_message(reply)
    assert arec["type"] == "assistant"
    assert arec["message"]["type"] == "message"
    assert arec["message"]["model"] == "ctxc"
    assert arec["message"]["content"] == [
        {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "t9", "name": "Read", "input": {"p": 1}},
    ]
    assert "usage" not in arec["message"]
    with_model = Message(role="assistant", blocks=(TextBlock("ok"),), meta={"model": "claude-opus-4"})
    assert ADAPTER.encode_message(with_model)["message"]["model"] == "claude-opus-4"

    tool = Message(role="tool", blocks=(ToolResultBlock("t9", "file body", name="Read"),))
    trec = ADAPTER.encode_message(tool)
    assert trec["type"] == "user"
    wire = {"type": "tool_result", "tool_use_id": "t9", "content": "file body"}
    assert trec["message"]["content"] == [wire]

    note = ADAPTER.encode_message(Message(role="system", blocks=(TextBlock("note"),)))
    assert (note["type"], note["subtype"], note["content"]) == ("system", "informational", "note")

    # Every new record reads back as the message it was made from.
    t = _load(_jsonl(rec, arec, trec))
    assert [m.role for m in t.messages] == ["user", "assistant", "user"]
    assert t.messages[0].blocks == summary.blocks
    assert t.messages[2].blocks[0] == ToolResultBlock(
        "t9", "file body", name="Read", raw=trec["message"]["content"][0]
    )


def test_sniff_scores() -> None:
    def sample(*recs: dict[str, Any]) -> list[Any]:
        return list(iter_records(io.BytesIO(_jsonl(*recs)), "x"))

    assert ADAPTER.sniff(sample({"type": "summary", "summary": "t", "leafUuid": "u"})) == 95
    assert ADAPTER.sniff(sample(_user("u", None, "x"))) == 95
    assert ADAPTER.sniff(sample({"role": "user", "content": "hi"})) == 0
    assert ADAPTER.sniff(sample({"type": "message", "role": "user", "content": []})) == 0
    assert ADAPTER.sniff(sample({"type": "user", "content": "no ids"})) == 0
    assert ADAPTER.sniff(sample({"timestamp": "t", "type": "session_meta", "payload": {}})) == 0


def test_placed_and_named_are_replace() -> None:
    # The reader's placed messages and ToolResultBlock.named build positionally, for speed: they must stay
    # in step with the fields.
    m = Message(
        role="assistant",
        blocks=(TextBlock(text="hi"),),
        line=7,
        index=1,
        records=(3, 4),
        conversation=2,
        importance="critical",
        usage=Usage(input=1, output=2, cache_read=3, cache_write=4, line=7),
        meta={"uuid": "u"},
        raw={"type": "assistant"},
    )
    draft = _Draft(
        "assistant", m.blocks, 7, (3, 4), "critical", {"uuid": "u"}, {"type": "assistant"}, usage=m.usage
    )
    assert draft.placed(9, 5) == dataclasses.replace(m, index=9, conversation=5)
    assert [f.name for f in dataclasses.fields(Message)] == [
        "role", "blocks", "line", "index", "records", "conversation", "importance", "usage", "meta", "raw"
    ]  # fmt: skip
    result = ToolResultBlock(tool_use_id="t", text="out", is_error=True, raw={"x": 1}, images=(ImageBlock(),))
    assert result.named("Bash") == dataclasses.replace(result, name="Bash")
    assert [f.name for f in dataclasses.fields(ToolResultBlock)] == [
        "tool_use_id", "text", "is_error", "name", "raw", "images"
    ]  # fmt: skip
