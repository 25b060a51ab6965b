"""Writing compacted Claude Code logs the way Claude Code records its own compaction."""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import corpus_params

from ctxc.archive_store import citation
from ctxc.compaction.units import units
from ctxc.compaction.write import write_transcript
from ctxc.formats import get_adapter, load
from ctxc.formats.claude_code import ClaudeCodeAdapter
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock, Transcript
from ctxc.repair import NO_RESULT, repair_messages
from ctxc.validate import pairing_problems

ADAPTER = get_adapter("claude-code")
assert isinstance(ADAPTER, ClaudeCodeAdapter)
AID = "0123456789abcdef" * 4
CC = "claude-code"


# ---------------------------------------------------------------------------------------------- helpers


def _jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _load(data: bytes) -> Transcript:
    return load(io.BytesIO(data), input_format=CC)


def _objects(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


def _write(t: Transcript, out: Sequence[Message]) -> bytes:
    # Each chain is its own conversation (inline sidechain runs included): group the output by it.
    outputs = {c: tuple(m for m in out if m.conversation == c) for c in range(t.conversations)}
    return b"".join(r.to_bytes() for r in ADAPTER.write_compacted(t, outputs, archive_id=AID))


def chain_problems(output: bytes, source: bytes) -> list[str]:
    """Every ``parentUuid`` in ``output`` names a uuid in ``output`` or is null; uuids are unique.

    The one exception is a link that already pointed outside the source file (excerpted logs start
    mid-session): it is allowed when the record carries it unchanged from the source.
    """
    out, src = _objects(output), _objects(source)
    src_uuids = {o["uuid"] for o in src if isinstance(o.get("uuid"), str)}
    src_parent = {o["uuid"]: o.get("parentUuid") for o in src if isinstance(o.get("uuid"), str)}
    uuids = [o["uuid"] for o in out if isinstance(o.get("uuid"), str)]
    problems = [f"duplicate uuid {u}" for u in sorted({u for u in uuids if uuids.count(u) > 1})]
    present = set(uuids)
    for n, o in enumerate(out, 1):
        parent = o.get("parentUuid")
        if parent is None or parent in present:
            continue
        if parent not in src_uuids and src_parent.get(o.get("uuid")) == parent:
            continue  # dangling in the source already, left as it was
        problems.append(f"line {n}: parentUuid {parent} is not in the output")
    return problems


def _summary(first: int, last: int, conversation: int = 0, **meta: Any) -> Message:
    text = f"Summary of messages {first}-{last}. Full detail: {citation(AID, first, last)}"
    return Message(
        role="user",
        blocks=(TextBlock(text),),
        index=first,
        conversation=conversation,
        meta={"ctxc": "summary", "replaces": (first, last), **meta},
    )


def _compact_by_hand(t: Transcript) -> tuple[tuple[Message, ...], Message, Message | None]:
    """Drop the middle half of the units for a summary and mask one later tool result, then repair
    as the pipeline does. Returns the messages, the summary and the masked message (if any)."""
    msgs = t.conversation(0)
    us = units(msgs)
    lo = max(1, len(us) // 4)
    hi = min(len(us) - 1, max(lo + 1, 3 * len(us) // 4))
    start, stop = us[lo].start, us[hi - 1].stop
    summary = _summary(msgs[start].index, msgs[stop - 1].index)
    tail = list(msgs[stop:])
    masked: Message | None = None
    for k, m in enumerate(tail[:-1]):
        if m.meta.get("has_tool_use_result") and any(isinstance(b, ToolResultBlock) for b in m.blocks):
            blocks = tuple(
                replace(b, text=f"[output masked: {citation(AID, m.index)}]")
                if isinstance(b, ToolResultBlock)
                else b
                for b in m.blocks
            )
            masked = tail[k] = replace(m, blocks=blocks)
            break
    repaired, _ = repair_messages((*msgs[:start], summary, *tail))
    return repaired, summary, masked


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _captured_warnings() -> Iterator[_Warnings]:
    handler = _Warnings()
    log = logging.getLogger("claude_code_log")
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)


def _claude_code_log() -> Any:
    # CI installs the test extras, so a missing package fails there instead of skipping silently.
    if os.environ.get("CI"):
        import claude_code_log.converter

        return claude_code_log.converter
    return pytest.importorskip("claude_code_log.converter")


def _ccl_load(path: Path) -> tuple[list[Any], str, list[str]]:
    """claude-code-log's parse of ``path``: entries, what it printed (its parse errors), DAG warnings."""
    converter = _claude_code_log()
    from claude_code_log.dag import build_dag_from_entries

    printed = io.StringIO()
    with _captured_warnings() as warnings, contextlib.redirect_stdout(printed):
        entries = converter.load_transcript(path, silent=True)
        build_dag_from_entries(entries)
    return entries, printed.getvalue(), warnings.messages


def _ccl_expected_entries(data: bytes) -> int:
    """How many entries claude-code-log makes of these records when none fails to parse."""
    converter = _claude_code_log()
    parsed = {"user", "assistant", "summary", "ai-title", "system", "queue-operation", "attachment"}
    n = 0
    for o in _objects(data):
        kind = o.get("type")
        if kind in parsed or (
            kind not in converter.SILENT_SKIP_TYPES and o.get("uuid") and o.get("sessionId")
        ):
            n += 1
    return n


# ---------------------------------------------------------------------------------------------- corpus


@pytest.mark.parametrize("path", corpus_params("claude-code/*.jsonl"))
def test_corpus_compacted_log_is_consistent_and_reads_back(path: Path) -> None:
    source = path.read_bytes()
    t = load(path)
    out_msgs, summary, masked = _compact_by_hand(t)
    data = _write(t, out_msgs)
    assert _write(t, out_msgs) == data  # deterministic

    assert chain_problems(data, source) == []
    objs = _objects(data)
    src_lines = {line for line in source.splitlines() if line.strip()}
    src_by_uuid = {o["uuid"]: o for o in _objects(source) if isinstance(o.get("uuid"), str)}

    # The boundary and the summary, as Claude Code writes them.
    (b_at,) = [
        n
        for n, o in enumerate(objs)
        if o.get("subtype") == "compact_boundary" and o["uuid"] not in src_by_uuid
    ]
    boundary, summary_rec = objs[b_at], objs[b_at + 1]
    assert boundary["parentUuid"] is None
    assert boundary["content"] == "Conversation compacted"
    assert boundary["level"] == "info"
    assert boundary["compactMetadata"]["trigger"] == "manual"
    assert isinstance(boundary["compactMetadata"].get("preTokens", 0), int)
    # The last record of the boundary's own thread before it (inline sidechain runs are other threads).
    before = [
        o["uuid"]
        for o in objs[:b_at]
        if isinstance(o.get("uuid"), str) and o.get("isSidechain") == boundary["isSidechain"]
    ]
    assert boundary["logicalParentUuid"] == (before[-1] if before else None)
    assert summary_rec["parentUuid"] == boundary["uuid"]
    assert summary_rec["isCompactSummary"] is True
    assert summary_rec["isVisibleInTranscriptOnly"] is True
    assert summary_rec["message"] == {"role": "user", "content": summary.blocks[0].text}  # type: ignore[union-attr]
    for key in ("sessionId", "cwd", "version"):
        if key in objs[0] or any(key in o for o in src_by_uuid.values()):
            assert key in boundary
            assert key in summary_rec
    # What hung off the dropped span now hangs off the summary.
    assert any(o.get("parentUuid") == summary_rec["uuid"] for o in objs)
    # Resuming walks parentUuid back from the last record: it passes the summary and stops at the
    # boundary (or at a later boundary the log already had).
    by_uuid = {o["uuid"]: o for o in objs if isinstance(o.get("uuid"), str)}
    last = next(
        o
        for o in reversed(objs)
        if o.get("type") in ("user", "assistant") and o["isSidechain"] == boundary["isSidechain"]
    )
    walk = [last]
    while isinstance(walk[-1].get("parentUuid"), str) and walk[-1]["parentUuid"] in by_uuid:
        walk.append(by_uuid[walk[-1]["parentUuid"]])
    assert walk[-1].get("subtype") == "compact_boundary"
    assert walk[-1] is boundary or walk[-1]["uuid"] in src_by_uuid

    # Kept records keep their bytes unless a link had to change.
    for line, o in zip((ln for ln in data.splitlines() if ln.strip()), objs, strict=True):
        if line in src_lines or o.get("uuid") not in src_by_uuid:
            continue
        orig = src_by_uuid[o["uuid"]]
        differing = {k for k in o.keys() | orig.keys() if o.get(k) != orig.get(k)}
        if masked is not None and o["uuid"] in masked.meta["uuids"]:
            assert differing <= {"message", "toolUseResult", "parentUuid"}
            assert o["toolUseResult"] == (
                f"[ctxc] tool output compacted; the full output is in {citation(AID, masked.index)}"
            )
        else:
            assert differing == {"parentUuid"}, f"{o['uuid']}: {differing}"

    # Our own reader: strict pairing, the summary as a compact-summary user message, the boundary.
    back = _load(data)
    assert pairing_problems(back.messages, strict=True) == []
    summaries = [m for m in back.messages if m.text == summary.blocks[0].text]  # type: ignore[union-attr]
    assert len(summaries) == 1
    assert summaries[0].role == "user"
    assert summaries[0].meta["is_compact_summary"] is True
    assert (
        "compact_boundary",
        b_at + 1,
        "manual",
        boundary["compactMetadata"].get("preTokens"),
        True,
    ) in [(b.kind, b.line, b.trigger, b.pre_tokens, b.resets) for b in back.boundaries]
    # Read back, the messages are the ones written, in order (inline sidechain runs cut by the span
    # are dropped with it, so there the written messages are a subsequence).
    written = [(m.role if m.role != "tool" else "user", m.text) for m in out_msgs]
    got = [(m.role, m.text) for m in back.messages]
    it = iter(written)
    assert all(g in it for g in got)
    if not any(m.meta.get("is_sidechain") for m in t.messages) or all(
        m.meta.get("is_sidechain") for m in t.messages
    ):
        assert got == written


@pytest.mark.parametrize("path", corpus_params("claude-code/*.jsonl"))
def test_corpus_compacted_log_loads_in_claude_code_log(path: Path, tmp_path: Path) -> None:
    t = load(path)
    out_msgs, summary, _ = _compact_by_hand(t)
    data = _write(t, out_msgs)
    out = tmp_path / path.name
    out.write_bytes(data)

    entries, printed, warnings = _ccl_load(out)
    assert printed == ""  # claude-code-log prints every line it cannot parse or validate
    assert len(entries) == _ccl_expected_entries(data)
    _, _, source_warnings = _ccl_load(path)
    # Excerpted corpus logs start with links into records that are not in the file; claude-code-log
    # warns about those on the source too. The compacted log must not add any warning.
    assert [w for w in warnings if w not in source_warnings] == []

    converter = _claude_code_log()
    html = converter.convert_jsonl_to_html(
        out, tmp_path / "out.html", use_cache=False, silent=True, generate_individual_sessions=False
    )
    assert citation(AID, *summary.meta["replaces"]) in html.read_text()  # the summary is rendered


# ------------------------------------------------------------------------------------------- synthetic


def _env(rtype: str, uid: str, parent: str | None, ts: int, **extra: Any) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/work",
        "sessionId": "s-1",
        "version": "2.1.14",
        "gitBranch": "main",
        "type": rtype,
        "uuid": uid,
        "timestamp": f"2026-01-01T00:00:{ts:02d}.000Z",
        **extra,
    }


def _asst(
    uid: str, parent: str | None, ts: int, mid: str, content: list[Any], **extra: Any
) -> dict[str, Any]:
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 1000}
    usage["cache_creation_input_tokens"] = 200
    message = {"id": mid, "type": "message", "role": "assistant", "model": "claude-x", "content": content}
    message["usage"] = usage
    return _env("assistant", uid, parent, ts, requestId=f"req-{mid}", message=message, **extra)


def _user(uid: str, parent: str | None, ts: int, content: Any, **extra: Any) -> dict[str, Any]:
    return _env("user", uid, parent, ts, message={"role": "user", "content": content}, **extra)


def _call(tid: str, name: str = "Bash", **inp: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": inp or {"command": tid}}


def _result(tid: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": text}


def _text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def _session() -> bytes:
    """Messages: 0 u0, 1 a1, 2 r1+u2 (u2 hangs off r1: one message, as the client sends it), 3 a2,
    4 r2, 5 a3, 6 u4, 7 a5."""
    return _jsonl(
        {"type": "summary", "summary": "a title", "leafUuid": "a5"},
        {"type": "file-history-snapshot", "messageId": "u0", "snapshot": {"messageId": "u0"}},
        _user("u0", None, 1, "first request"),
        _asst("a1", "u0", 2, "msg_1", [_call("t1")]),
        {
            "type": "progress",
            "uuid": "p1",
            "parentUuid": "a1",
            "sessionId": "s-1",
            "timestamp": "x",
            "data": {},
        },
        _user("r1", "p1", 3, [_result("t1", "one")], toolUseResult={"stdout": "one"}),
        {"type": "file-history-snapshot", "messageId": "u2", "snapshot": {"messageId": "u2"}},
        _user("u2", "r1", 4, "second request"),
        {"type": "queue-operation", "operation": "enqueue", "timestamp": "t", "sessionId": "s-1"},
        _asst("a2", "u2", 5, "msg_2", [_call("t2")]),
        _user("r2", "a2", 6, [_result("t2", "x" * 300)], toolUseResult={"stdout": "x" * 300, "stderr": ""}),
        _asst("a3", "r2", 7, "msg_3", [_text("done")]),
        _user("u4", "a3", 8, "third request"),
        _asst("a5", "u4", 9, "msg_4", [_text("ok")]),
    )


def test_summary_relinks_drops_and_keeps_in_place() -> None:
    source = _session()
    t = _load(source)
    m = t.messages
    masked = replace(m[4], blocks=(replace(m[4].blocks[0], text=f"[masked: {citation(AID, 4)}]"),))
    summary = _summary(1, 2)
    data = _write(t, [m[0], summary, m[3], masked, *m[5:]])
    assert chain_problems(data, source) == []
    objs = _objects(data)
    kinds = [o.get("uuid") or o["type"] for o in objs]
    b_uuid, s_uuid = kinds[3], kinds[4]
    assert kinds == [
        "summary",  # the title: its leaf is kept
        "file-history-snapshot",  # of u0, kept
        "u0",
        b_uuid,
        s_uuid,
        "queue-operation",  # in place; the snapshot of u2 and the progress record went with their span
        "a2",
        "r2",
        "a3",
        "u4",
        "a5",
    ]
    lines = source.splitlines()
    out_lines = data.splitlines()
    assert out_lines[:3] == [lines[0], lines[1], lines[2]]
    assert objs[3]["logicalParentUuid"] == "u0"
    assert objs[3]["sessionId"] == objs[4]["sessionId"] == "s-1"
    assert objs[3]["cwd"] == "/work"
    assert objs[3]["timestamp"] == objs[4]["timestamp"] == "2026-01-01T00:00:04.000Z"  # the span's end
    assert list(objs[3])[:4] == ["parentUuid", "logicalParentUuid", "isSidechain", "userType"]
    # a2 hung off u2, which the summary replaced; only its parentUuid bytes changed.
    assert objs[6]["parentUuid"] == s_uuid
    assert out_lines[6] == lines[9].replace(b'"parentUuid":"u2"', f'"parentUuid":"{s_uuid}"'.encode())
    # The masked result: re-encoded, the client's full copy replaced by a note with the citation.
    r2 = objs[7]
    assert r2["message"]["content"] == [_result("t2", f"[masked: {citation(AID, 4)}]")]
    assert r2["toolUseResult"] == f"[ctxc] tool output compacted; the full output is in {citation(AID, 4)}"
    assert {k: v for k, v in r2.items() if k not in ("message", "toolUseResult")} == {
        k: v for k, v in _objects(source)[10].items() if k not in ("message", "toolUseResult")
    }
    assert out_lines[8:] == lines[11:]
    # preTokens: what the window held at the last recorded call within the span (a1: 10 + 1000 + 200).
    assert objs[3]["compactMetadata"] == {"trigger": "manual", "preTokens": 1210}


def test_title_and_snapshot_of_dropped_messages_go() -> None:
    source = _session().replace(b'"leafUuid":"a5"', b'"leafUuid":"u2"')
    t = _load(source)
    m = t.messages
    objs = _objects(_write(t, [m[0], _summary(1, 4), *m[5:]]))
    assert [o["type"] for o in objs if "uuid" not in o] == ["file-history-snapshot", "queue-operation"]
    assert objs[0]["messageId"] == "u0"


def test_pre_tokens_from_meta_and_records_are_deterministic() -> None:
    t = _load(_session())
    m = t.messages
    out = [m[0], _summary(1, 2, pre_tokens=4321), *m[3:]]
    data = _write(t, out)
    assert _objects(data)[3]["compactMetadata"]["preTokens"] == 4321
    assert _write(t, out) == data
    other = ADAPTER.write_compacted(t, {0: tuple(out)}, archive_id="f" * 64)
    assert orjson.loads(other[3].raw)["uuid"] != _objects(data)[3]["uuid"]  # ids are per archive


def test_unchanged_output_is_the_input() -> None:
    source = _session()
    t = _load(source)
    assert _write(t, t.messages) == source
    assert write_transcript(t, {0: t.messages}, ADAPTER, archive_id=AID).to_bytes() == source


def test_write_transcript_uses_the_hook() -> None:
    t = _load(_session())
    m = t.messages
    out = write_transcript(t, {0: (m[0], _summary(1, 2), *m[3:])}, ADAPTER, archive_id=AID)
    assert any(r.data.get("subtype") == "compact_boundary" for r in out.records if isinstance(r.data, dict))


def test_pinned_message_inside_the_span_stays_before_the_boundary() -> None:
    source = _jsonl(
        _user("u0", None, 1, "first request"),
        _asst("a1", "u0", 2, "msg_1", [_call("t1")]),
        _user("r1", "a1", 3, [_result("t1", "one")]),
        _asst("ax", "r1", 4, "msg_x", [_text("read it")]),
        _user("u2", "ax", 5, "second request"),
        _asst("a2", "u2", 6, "msg_2", [_call("t2")]),
        _user("r2", "a2", 7, [_result("t2", "two")]),
        _asst("a3", "r2", 8, "msg_3", [_text("done")]),
    )
    t = _load(source)
    m = t.messages
    # u2 (index 4) is pinned: kept, placed before the summary that replaces the rest of 1..6.
    data = _write(t, [m[0], m[4], _summary(1, 6), *m[7:]])
    assert chain_problems(data, source) == []
    objs = _objects(data)
    uuids = [o.get("uuid") for o in objs]
    at = uuids.index("u2")
    boundary = next(o for o in objs if o.get("subtype") == "compact_boundary")
    assert uuids.index(boundary["uuid"]) == at + 1
    assert objs[at]["parentUuid"] == "u0"  # its parent ax was dropped: nearest kept ancestor, no forward link
    assert boundary["logicalParentUuid"] == "u2"
    a3 = objs[uuids.index("a3")]
    assert a3["parentUuid"] == objs[uuids.index(boundary["uuid"]) + 1]["uuid"]


def test_several_summaries() -> None:
    source = _session()
    t = _load(source)
    m = t.messages
    first, second = _summary(1, 2), _summary(5, 5)
    data = _write(t, [m[0], first, m[3], m[4], second, *m[6:]])
    assert chain_problems(data, source) == []
    objs = _objects(data)
    boundaries = [n for n, o in enumerate(objs) if o.get("subtype") == "compact_boundary"]
    assert len(boundaries) == 2
    for n in boundaries:
        assert objs[n + 1]["isCompactSummary"] is True
        assert objs[n + 1]["parentUuid"] == objs[n]["uuid"]
    s1, s2 = objs[boundaries[0] + 1]["uuid"], objs[boundaries[1] + 1]["uuid"]
    by_uuid = {o.get("uuid"): o for o in objs}
    assert by_uuid["a2"]["parentUuid"] == s1
    assert by_uuid["u4"]["parentUuid"] == s2
    assert objs[boundaries[1]]["logicalParentUuid"] == "r2"
    back = _load(data)
    assert [x.text for x in back.messages if x.meta["is_compact_summary"]] == [first.text, second.text]
    assert len(back.boundaries) == 2
    assert pairing_problems(back.messages, strict=True) == []


def test_placeholder_and_repair_and_tool_messages_are_chained() -> None:
    source = _session()
    t = _load(source)
    m = t.messages
    placeholder = Message(
        role="user",
        blocks=(TextBlock(f"[2 messages removed: {citation(AID, 1, 2)}]"),),
        index=1,
        meta={"ctxc": "placeholder", "replaces": (1, 2)},
    )
    # a2's result is gone and repaired; a tool-role message answers nothing here, so pair it with a
    # call of its own: a new assistant turn followed by a tool message.
    repair = Message(
        role="user", blocks=(ToolResultBlock("t2", NO_RESULT, is_error=True),), meta={"ctxc": "repair"}
    )
    call = Message(
        role="assistant", blocks=(ToolUseBlock("t9", "Read", {"p": 1}),), index=5, meta={"ctxc": "new"}
    )
    tool = Message(role="tool", blocks=(ToolResultBlock("t9", "file body", name="Read"),), index=5)
    data = _write(t, [m[0], placeholder, m[3], repair, call, tool, *m[5:]])
    assert chain_problems(data, source) == []
    objs = _objects(data)
    by_uuid = {o.get("uuid"): o for o in objs}
    new = [o for o in objs if o.get("uuid") not in {x.get("uuid") for x in _objects(source)}]
    assert [o["type"] for o in new] == ["user", "user", "assistant", "user"]
    p_rec, r_rec, c_rec, t_rec = new
    assert p_rec["parentUuid"] == "u0"
    assert by_uuid["a2"]["parentUuid"] == p_rec["uuid"]  # a2 hung off u2, replaced by the placeholder
    assert r_rec["parentUuid"] == "a2"
    assert c_rec["parentUuid"] == r_rec["uuid"]
    assert t_rec["parentUuid"] == c_rec["uuid"]
    assert by_uuid["a3"]["parentUuid"] == t_rec["uuid"]  # r2 (its parent) was dropped: the last new record
    for o in new:
        assert (o["sessionId"], o["cwd"], o["version"], o["isSidechain"]) == ("s-1", "/work", "2.1.14", False)
        assert "isCompactSummary" not in o
    assert t_rec["message"]["content"] == [_result("t9", "file body")]
    back = _load(data)
    assert pairing_problems(back.messages, strict=True) == []
    # The placeholder hangs off u0: read back, they are one user message, as the client sends them.
    roles = ["user", "assistant", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert [x.role for x in back.messages] == roles


def _split() -> bytes:
    """One response over two records (a1, a1b) with a result written between its parts."""
    return _jsonl(
        _user("u0", None, 1, "go"),
        _asst("a1", "u0", 2, "msg_A", [_call("t1")]),
        _user("r1", "a1", 3, [_result("t1", "one")], sourceToolAssistantUUID="a1"),
        _asst("a1b", "r1", 4, "msg_A", [_call("t2")]),
        _user("r2", "a1b", 5, [_result("t2", "two")], sourceToolAssistantUUID="a1b"),
        _asst("a2", "r2", 6, "msg_B", [_text("done")]),
    )


def test_changed_split_response_keeps_unchanged_parts() -> None:
    source = _split()
    t = _load(source)
    merged = t.messages[1]
    assert merged.records == (1, 3)
    blocks = (merged.blocks[0], replace(merged.blocks[1], input={"command": "short"}))
    data = _write(t, [t.messages[0], replace(merged, blocks=blocks), *t.messages[2:]])
    lines, out_lines = source.splitlines(), data.splitlines()
    assert len(out_lines) == len(lines)
    assert [out_lines[k] == lines[k] for k in range(len(lines))] == [True, True, True, False, True, True]
    assert _objects(data)[3]["message"]["content"] == [_call("t2", command="short")]
    assert chain_problems(data, source) == []


def test_changed_split_response_with_other_blocks_becomes_one_record() -> None:
    source = _split()
    t = _load(source)
    merged = t.messages[1]
    grown = replace(merged, blocks=(TextBlock("note"), *merged.blocks))
    data = _write(t, [t.messages[0], grown, *t.messages[2:]])
    objs = _objects(data)
    assert [o["uuid"] for o in objs] == ["u0", "a1b", "r1", "r2", "a2"]
    assert objs[1]["parentUuid"] == "u0"
    assert objs[2]["parentUuid"] == "a1b"  # a1 was merged into the record that kept a1b's uuid
    assert objs[2]["sourceToolAssistantUUID"] == "a1b"
    assert chain_problems(data, source) == []
    back = _load(data)
    assert back.messages[1].blocks[0] == TextBlock("note", raw={"type": "text", "text": "note"})
    assert pairing_problems(back.messages, strict=True) == []


def _inline() -> bytes:
    """A 1.0.x log: the Task call's subagent run is written inline, before the call's result."""
    side = {"isSidechain": True}
    return _jsonl(
        _user("u0", None, 1, "delegate"),
        _asst("a1", "u0", 2, "msg_A", [_call("t1", "Task", prompt="do X", description="x")]),
        {**_user("s0", None, 3, "do X"), **side},
        {**_asst("s1", "s0", 4, "msg_S1", [_call("st1")]), **side},
        {**_user("s2", "s1", 5, [_result("st1", "side out")]), **side},
        {**_asst("s3", "s2", 6, "msg_S2", [_text("X done")]), **side},
        _user("r1", "a1", 7, [_result("t1", "X done")]),
        _user("u2", "r1", 8, "thanks"),
        _asst("a3", "u2", 9, "msg_B", [_text("welcome")]),
    )


def test_inline_sidechain_of_a_dropped_call_goes_with_it() -> None:
    source = _inline()
    t = _load(source)
    m = t.messages
    assert [x.meta["is_sidechain"] for x in m] == [False, False, True, True, True, True, False, False]
    answer = Message(
        role="user", blocks=(ToolResultBlock("st1", NO_RESULT, is_error=True),), meta={"ctxc": "repair"}
    )
    summary = _summary(1, 1)
    # The strategy dropped the Task call and its result (repair took the result out of r1+u2) but kept
    # the run: the run goes too, with the new message answering one of its calls.
    thanks = replace(m[6], blocks=m[6].blocks[1:])
    data = _write(t, [m[0], summary, m[2], m[3], answer, m[5], thanks, m[7]])
    objs = _objects(data)
    assert not any(o.get("isSidechain") for o in objs)
    assert [o["type"] for o in objs] == ["user", "system", "user", "user", "assistant"]
    assert objs[3]["parentUuid"] == objs[2]["uuid"]  # u2 -> r1 (dropped) -> a1, replaced by the summary
    assert chain_problems(data, source) == []


def test_rest_of_a_cut_sidechain_run_stays_in_its_run() -> None:
    source = _inline()
    t = _load(source)
    m = t.messages
    # s0..s2 dropped (no placeholder), s3 kept while its Task call stays: s3 stays a sidechain record,
    # now the root of what is left of its run; nothing of the main chain hangs off it or it off that.
    data = _write(t, [m[0], m[1], m[5], m[6], m[7]])
    objs = _objects(data)
    assert [o["uuid"] for o in objs] == ["u0", "a1", "s3", "r1", "u2", "a3"]
    assert (objs[2]["isSidechain"], objs[2]["parentUuid"]) == (True, None)
    assert [o["parentUuid"] for o in objs[3:]] == ["a1", "r1", "u2"]
    assert chain_problems(data, source) == []
    # The run kept whole while its call stays: nothing changes.
    assert _write(t, m) == source


def test_subagent_file_keeps_its_own_thread() -> None:
    """In a subagent file every record is a sidechain: that is the file's thread, not an inline run."""
    side = {"isSidechain": True, "agentId": "abc"}
    source = _jsonl(
        {**_user("u0", None, 1, "task"), **side},
        {**_asst("a1", "u0", 2, "msg_A", [_text("thinking aloud")]), **side},
        {**_user("u1", "a1", 3, "more"), **side},
        {**_asst("a2", "u1", 4, "msg_B", [_text("answer")]), **side},
    )
    t = _load(source)
    m = t.messages
    data = _write(t, [m[0], _summary(1, 2), m[3]])
    objs = _objects(data)
    assert [o["type"] for o in objs] == ["user", "system", "user", "assistant"]
    assert all(o["isSidechain"] is True and o["agentId"] == "abc" for o in objs)
    assert objs[3]["parentUuid"] == objs[2]["uuid"]
    assert chain_problems(data, source) == []


def _log_boundary(*, logical_parent: str) -> dict[str, Any]:
    """The log's own compact_boundary record (uuid b0, line 4), as Claude Code writes it."""
    return _env(
        "system",
        "b0",
        None,
        4,
        subtype="compact_boundary",
        content="Conversation compacted",
        logicalParentUuid=logical_parent,
        compactMetadata={"trigger": "auto", "preTokens": 9},
    )


def test_old_boundary_in_a_dropped_span_goes_and_links_outside_the_file_stay() -> None:
    old_boundary = _log_boundary(logical_parent="a1")
    source = _jsonl(
        _user("u0", "elsewhere", 1, "start"),  # its parent is in an earlier file
        _asst("a1", "u0", 2, "msg_A", [_text("one")]),
        _user("u1", "a1", 3, "two"),
        old_boundary,
        _user("s0", "b0", 5, "old summary", isCompactSummary=True, isVisibleInTranscriptOnly=True),
        _user("u2", "s0", 6, "three"),
        _asst("a2", "u2", 7, "msg_B", [_text("four")]),
    )
    t = _load(source)
    m = t.messages
    assert len(t.boundaries) == 1
    data = _write(t, [m[0], _summary(1, 3), *m[4:]])
    objs = _objects(data)
    assert data.splitlines()[0] == source.splitlines()[0]
    assert [o.get("subtype") for o in objs].count("compact_boundary") == 1
    assert "b0" not in {o["uuid"] for o in objs}
    assert objs[3]["uuid"] == "u2"
    assert objs[3]["parentUuid"] == objs[2]["uuid"]
    assert chain_problems(data, source) == []


def test_ctxc_boundary_after_the_logs_own_is_the_newest_main_boundary() -> None:
    """Compacting what follows the log's own boundary (the part Claude Code still sends): ctxc's
    boundary is the last main-chain compact_boundary in the file, the log's stays before it, and the
    resumed chain runs from the last message through ctxc's summary to ctxc's boundary."""
    old_boundary = _log_boundary(logical_parent="u1")
    source = _jsonl(
        _user("u0", None, 1, "start"),
        _asst("a1", "u0", 2, "msg_A", [_text("one")]),
        _user("u1", "a1", 3, "two"),
        old_boundary,
        _user("s0", "b0", 5, "old summary", isCompactSummary=True, isVisibleInTranscriptOnly=True),
        _user("u2", "s0", 6, "three"),
        _asst("a2", "u2", 7, "msg_B", [_text("four")]),
        _user("u3", "a2", 8, "five"),
        _asst("a3", "u3", 9, "msg_C", [_text("six")]),
    )
    t = _load(source)
    m = t.messages
    assert [x.text for x in m[3:6]] == ["old summary", "three", "four"]
    data = _write(t, [*m[:3], m[3], _summary(m[4].index, m[5].index), *m[6:]])
    objs = _objects(data)
    boundaries = [o for o in objs if o.get("subtype") == "compact_boundary"]
    assert len(boundaries) == 2
    assert boundaries[0]["uuid"] == "b0"
    ours = boundaries[-1]
    assert ours["uuid"] != "b0"
    assert not ours["isSidechain"]
    by_uuid = {o["uuid"]: o for o in objs}
    walk = [objs[-1]]
    while walk[-1].get("parentUuid") in by_uuid:
        walk.append(by_uuid[walk[-1]["parentUuid"]])
    assert [o["uuid"] for o in walk][:3] == ["a3", "u3", walk[2]["uuid"]]
    assert walk[2].get("isCompactSummary") is True
    assert walk[-1] is ours
    assert chain_problems(data, source) == []


def test_final_line_ending_follows_the_input() -> None:
    source = _session().rstrip(b"\n")
    t = _load(source)
    m = t.messages
    data = _write(t, [m[0], _summary(1, 6), m[7]])
    assert not data.endswith(b"\n")
    assert data.count(b"\n") == len(_objects(data)) - 1
    crlf = _session().replace(b"\n", b"\r\n")
    t2 = _load(crlf)
    data2 = _write(t2, [t2.messages[0], _summary(1, 6), t2.messages[7]])
    assert data2.endswith(b"\r\n")
    assert data2.count(b"\r\n") == len(_objects(data2))


def test_a_summary_inside_a_kept_run_is_a_sidechain_record_of_that_run() -> None:
    """The Task call stays, its run is summarized: the summary is an ordinary sidechain message of the
    run (no boundary), chained inside it, and the main chain is untouched byte for byte."""
    source = _inline()
    t = _load(source)
    m = t.messages
    run = m[2].conversation
    assert run != 0
    assert m[3].conversation == run
    data = _write(t, [m[0], m[1], m[2], _summary(m[3].index, m[4].index, run), m[5], m[6], m[7]])
    objs = _objects(data)
    assert not any(o.get("subtype") == "compact_boundary" for o in objs)
    new = [o for o in objs if o["uuid"] not in {"u0", "a1", "s0", "s3", "r1", "u2", "a3"}]
    assert len(new) == 1
    (summary,) = new
    assert (summary["isSidechain"], summary["parentUuid"], summary["type"]) == (True, "s0", "user")
    assert "isCompactSummary" not in summary
    s3 = next(o for o in objs if o["uuid"] == "s3")
    assert s3["parentUuid"] == summary["uuid"]
    main = [line for line, o in zip(data.splitlines(), objs, strict=True) if not o.get("isSidechain")]
    assert main == [source.splitlines()[k] for k in (0, 1, 6, 7, 8)]
    # In the file, the summary sits where the part it replaced was, inside its run.
    assert [o["uuid"] for o in objs].index(summary["uuid"]) == 3
    assert chain_problems(data, source) == []


# ------------------------------------------------------------------ inline subagent runs, end to end

INLINE = Path(
    corpus_params("claude-code/claude-code-viewer_inline-sidechains_v1.0.98.jsonl")[0].values[0] or ""
)


def _resumed_chain(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Claude Code resumes: the newest main-chain message record, walked back by parentUuid."""
    by_uuid = {o["uuid"]: o for o in objs if isinstance(o.get("uuid"), str)}
    leaf = [o for o in objs if o.get("type") in ("user", "assistant") and not o.get("isSidechain")][-1]
    chain = [leaf]
    while isinstance(chain[-1].get("parentUuid"), str) and chain[-1]["parentUuid"] in by_uuid:
        chain.append(by_uuid[chain[-1]["parentUuid"]])
        assert len(chain) <= len(objs), "parentUuid cycle"
    return chain[::-1]


def _chain_tokens(chain: list[dict[str, Any]]) -> int:
    from ctxc.tokens import make_counter

    texts = [orjson.dumps((o.get("message") or {}).get("content")).decode() for o in chain]
    return sum(make_counter("approx", use_cache=False).count(texts))


@pytest.mark.skipif(not INLINE.is_file(), reason="no corpus")
@pytest.mark.parametrize("ratio", [0.1, 0.5])
@pytest.mark.parametrize(
    "strategy", ["fifo", "selective", "hierarchical", "recursive", "adaptive", "mask", "offload"]
)
def test_inline_subagent_runs_never_become_the_resumed_chain(strategy: str, ratio: float) -> None:
    """A 1.0.x log with subagent runs written inline: compacted at a tenth and a half of its main chain,
    the chain Claude Code resumes (from the newest main-chain record) is the log's own thread, with no
    sidechain record in it, ctxc's summary in it when one was written, and fewer tokens than before.
    Whatever is left of a run stays sidechain records linked only among themselves."""
    from ctxc.compaction.ledger import Ledger
    from ctxc.compaction.run import CompactOptions, compact_transcript
    from ctxc.tokens import make_counter

    source = INLINE.read_bytes()
    t = load(INLINE)
    counter = make_counter("approx", use_cache=False)
    main_tokens = Ledger(counter).total(t.conversation(0))
    options = CompactOptions(strategy=strategy, target_tokens=int(main_tokens * ratio), allow_over=True)
    data = compact_transcript(t, options, counter=counter).transcript.to_bytes()
    objs = _objects(data)
    src_uuids = {o["uuid"] for o in _objects(source) if isinstance(o.get("uuid"), str)}
    before, after = _resumed_chain(_objects(source)), _resumed_chain(objs)

    assert not any(o.get("isSidechain") for o in after)
    assert after[-1]["uuid"] == before[-1]["uuid"]  # the last message is always kept: it is the leaf
    new_boundaries = [
        o for o in objs if o.get("subtype") == "compact_boundary" and o["uuid"] not in src_uuids
    ]
    assert not any(o.get("isSidechain") for o in new_boundaries)
    if strategy in ("hierarchical", "recursive"):
        assert len(new_boundaries) == 1  # the main thread is summarized, not only the runs
    if new_boundaries:  # ctxc summarized the log's own thread: resuming starts at its summary
        assert after[0] is new_boundaries[-1]
        assert after[1].get("isCompactSummary") is True
    if strategy != "offload":  # (offload finds no tool output large enough to move in this thread)
        assert _chain_tokens(after) < _chain_tokens(before)
    # Runs stay apart: no link between a sidechain record and a main-chain one, in either direction.
    side = {o["uuid"]: bool(o.get("isSidechain")) for o in objs if isinstance(o.get("uuid"), str)}
    for o in objs:
        parent = o.get("parentUuid")
        if isinstance(parent, str) and parent in side and "uuid" in o:
            assert side[parent] == bool(o.get("isSidechain")), o["uuid"]
    assert chain_problems(data, source) == []
