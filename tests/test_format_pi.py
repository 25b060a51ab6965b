"""The pi coding-agent adapter on the real sessions of the corpus, and on hand-made entries."""

from __future__ import annotations

import dataclasses
import io
import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import CORPUS, corpus_params, run
from hypothesis import given
from hypothesis import strategies as st

from ctxc.formats import dump, get_adapter, load
from ctxc.live import live_messages
from ctxc.model import (
    Boundary,
    Message,
    Record,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

PI = get_adapter("pi")
BEFORE = CORPUS / "chat-messages" / "pi-coding-agent_before-compaction.jsonl"
LARGE = CORPUS / "chat-messages" / "pi-coding-agent_large-session.jsonl"
needs_corpus = pytest.mark.skipif(not BEFORE.is_file(), reason=f"no corpus at {CORPUS}")


def _record(data: dict[str, Any], line: int = 1) -> Record:
    return Record(line=line, raw=orjson.dumps(data), eol=b"\n", data=data)


def _read(*entries: dict[str, Any]) -> list[Any]:
    return list(PI.read((i, _record(e, i + 1)) for i, e in enumerate(entries)))


def _messages(*entries: dict[str, Any]) -> list[Message]:
    return [x for x in _read(*entries) if isinstance(x, Message)]


def _strip(blocks: tuple[Any, ...]) -> tuple[Any, ...]:
    """Blocks without their raw JSON, to compare what a message says rather than where it came from."""
    return tuple(dataclasses.replace(b, raw=None) for b in blocks)


# ------------------------------------------------------------------------------------------ corpus


@pytest.mark.parametrize("path", corpus_params("chat-messages/pi-coding-agent_*.jsonl"))
def test_corpus_sniffs_loads_and_dumps_byte_identical(path: Path) -> None:
    transcript = load(path)
    assert transcript.format == "pi"
    out = io.BytesIO()
    dump(transcript, out)
    assert out.getvalue() == path.read_bytes()


@pytest.mark.parametrize("path", corpus_params("chat-messages/pi-coding-agent_*.jsonl"))
def test_corpus_encode_law_and_structure(path: Path) -> None:
    transcript = load(path)
    assert transcript.messages
    for i, m in enumerate(transcript.messages):
        assert m.index == i
        assert len(m.records) == 1
        assert PI.encode_message(m) == m.raw
        assert m.raw == transcript.records[m.records[0]].data
    # The session header is metadata: no message comes from it.
    assert transcript.records[0].data["type"] == "session"
    assert all(m.records[0] != 0 for m in transcript.messages)
    # Every non-message entry is left alone (written back as it was, never a message).
    used = {m.records[0] for m in transcript.messages}
    for i, rec in enumerate(transcript.records):
        if rec.data and rec.data.get("type") != "message":
            assert i not in used


@pytest.mark.parametrize("path", corpus_params("chat-messages/pi-coding-agent_*.jsonl"))
def test_corpus_every_tool_result_pairs_with_an_earlier_call(path: Path) -> None:
    transcript = load(path)
    calls: set[str] = set()
    unpaired: list[tuple[int, str]] = []
    for m in transcript.messages:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                assert b.id
                calls.add(b.id)
            elif isinstance(b, ToolResultBlock) and b.tool_use_id not in calls:
                unpaired.append((m.line, b.tool_use_id))
    assert unpaired == []


@needs_corpus
def test_before_compaction_facts() -> None:
    t = load(BEFORE)
    # SOURCES.md: 2 compaction entries with tokensBefore 175,004 and 185,014.
    assert [(b.kind, b.pre_tokens) for b in t.boundaries] == [
        ("pi_compaction", 175004),
        ("pi_compaction", 185014),
    ]
    # 990 message entries, 3 of them bashExecution; 49 thinking blocks. 19 are aborted or errored
    # assistant turns (3 thinking blocks) pi never sends again: no messages.
    assert len(t.messages) == 971
    bash = [m for m in t.messages if m.meta.get("source_role") == "bashExecution"]
    assert len(bash) == 3
    assert all(m.role == "user" and m.text.startswith("Ran `") for m in bash)
    thinking = [b for m in t.messages for b in m.blocks if isinstance(b, ThinkingBlock)]
    assert len(thinking) == 46
    assert not any(m.meta.get("stop_reason") in ("aborted", "error") for m in t.messages)
    # Boundaries sit on the compaction lines.
    lines = [r.line for r in t.records if r.data and r.data.get("type") == "compaction"]
    assert [b.line for b in t.boundaries] == lines


@needs_corpus
def test_large_session_facts() -> None:
    t = load(LARGE)
    roles = Counter(m.role for m in t.messages)
    # SOURCES.md: 88 user, 453 assistant, 373 toolResult; 391 toolCall blocks. 22 assistant turns are
    # aborted or errored, their 18 calls never run: pi sends 431 and 373 calls, each answered.
    assert roles == {"user": 88, "assistant": 431, "tool": 373}
    assert sum(isinstance(b, ToolUseBlock) for m in t.messages for b in m.blocks) == 373
    names = {b.name for m in t.messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    assert names == {"bash", "edit", "read", "write"}
    # Usage is recorded on every assistant message.
    assistants = [m for m in t.messages if m.role == "assistant"]
    assert all(m.usage is not None for m in assistants)
    assert len(t.usage) == 453
    assert t.boundaries == ()


@needs_corpus
def test_usage_matches_the_recorded_fields() -> None:
    t = load(BEFORE)
    for m in t.messages:
        if m.role != "assistant":
            continue
        raw = m.raw["message"]["usage"]
        assert m.usage == Usage(
            input=raw["input"],
            output=raw["output"],
            cache_read=raw["cacheRead"],
            cache_write=raw["cacheWrite"],
            line=m.line,
            model=m.raw["message"]["model"],
        )
    # Every call is an item, in file order: the aborted and errored turns' too (billed, in no message).
    calls = [r.line for r in t.records if r.data and r.data.get("message", {}).get("role") == "assistant"]
    assert [u.line for u in t.usage] == calls
    assert {m.usage for m in t.messages if m.usage is not None} < set(t.usage)


@needs_corpus
def test_read_is_streaming() -> None:
    """The first message comes out before the rest of the file is read."""
    with BEFORE.open("rb") as fh:
        head = [orjson.loads(line) for line in itertools.islice(fh, 3)]

    def records() -> Iterator[tuple[int, Record]]:
        for i, data in enumerate(head):
            yield i, _record(data, i + 1)
        raise AssertionError("read() asked for more records than it needed")

    first = next(x for x in PI.read(records()) if isinstance(x, Message))
    assert first.role == "user"


# ---------------------------------------------------------------------------------- hand-made entries

HEADER = {
    "type": "session",
    "id": "s1",
    "timestamp": "2025-01-01T00:00:00.000Z",
    "cwd": "/w",
    "provider": "x",
}
USER = {
    "type": "message",
    "timestamp": "t",
    "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
}
ASSISTANT = {
    "type": "message",
    "timestamp": "t",
    "message": {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"},
            {"type": "text", "text": "running"},
            {
                "type": "toolCall",
                "id": "c1",
                "name": "bash",
                "arguments": {"command": "ls"},
                "partialJson": "{",
            },
        ],
        "usage": {"input": 5, "output": 7, "cacheRead": 11, "cacheWrite": 13, "totalTokens": 36},
        "stopReason": "toolUse",
        "timestamp": 1,
    },
}
RESULT = {
    "type": "message",
    "timestamp": "t",
    "message": {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "bash",
        "content": [{"type": "text", "text": "a\nb"}],
        "isError": True,
        "details": {"x": 1},
        "timestamp": 2,
    },
}
BASH = {
    "type": "message",
    "timestamp": "t",
    "message": {
        "role": "bashExecution",
        "command": "false",
        "output": "",
        "exitCode": 1,
        "cancelled": False,
        "truncated": False,
        "timestamp": 3,
    },
}


def test_entries_map_to_blocks() -> None:
    items = _read(HEADER, USER, ASSISTANT, RESULT, BASH)
    messages = [x for x in items if isinstance(x, Message)]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user"]
    assert [m.records for m in messages] == [(1,), (2,), (3,), (4,)]
    assert _strip(messages[1].blocks) == (
        ThinkingBlock("hmm"),
        TextBlock("running"),
        ToolUseBlock(id="c1", name="bash", input={"command": "ls"}),
    )
    assert _strip(messages[2].blocks) == (
        ToolResultBlock(tool_use_id="c1", text="a\nb", is_error=True, name="bash"),
    )
    assert messages[3].text == "Ran `false`\n(no output)\n\nCommand exited with code 1"
    usage = [x for x in items if isinstance(x, Usage)]
    assert usage == [Usage(input=5, output=7, cache_read=11, cache_write=13, line=3)]
    assert messages[1].usage == usage[0]
    assert all(PI.encode_message(m) == m.raw for m in messages)


def test_non_message_entries() -> None:
    items = _read(
        HEADER,
        {"type": "model_change", "timestamp": "t", "provider": "p", "modelId": "m"},
        {"type": "thinking_level_change", "timestamp": "t", "thinkingLevel": "high"},
        {
            "type": "compaction",
            "timestamp": "t",
            "summary": "s",
            "firstKeptEntryIndex": 1,
            "tokensBefore": 99,
        },
        {"type": "message", "timestamp": "t", "message": {**BASH["message"], "excludeFromContext": True}},
        USER,
    )
    assert [type(x).__name__ for x in items] == ["Message", "Boundary"]
    assert items[1] == Boundary(kind="pi_compaction", line=4, pre_tokens=99, resets=True, kept_from=0)
    assert items[0].index == 0  # indexes count messages only


def test_first_kept_entry_index_counts_entries_not_blank_lines() -> None:
    """pi skips blank lines when it loads a session, so ``firstKeptEntryIndex`` counts entries: a blank
    line in the file must not move where the kept tail starts."""
    second = {**USER, "message": {**USER["message"], "content": [{"type": "text", "text": "two"}]}}
    compaction = {"type": "compaction", "timestamp": "t", "summary": "s", "firstKeptEntryIndex": 2}
    lines = [orjson.dumps(HEADER), b"", *(orjson.dumps(e) for e in (USER, second, compaction))]
    t = load(io.BytesIO(b"\n".join(lines) + b"\n"))
    assert [m.text for m in t.messages] == ["hi", "two"]
    [boundary] = t.boundaries
    assert boundary.kept_from == 1  # entry 2 (the header is entry 0) is the second message, "two"


def test_newer_entry_kinds_are_context_messages() -> None:
    custom = {"type": "custom_message", "id": "a1", "parentId": None, "timestamp": "t", "customType": "k"}
    branch = {
        "type": "branch_summary",
        "id": "a2",
        "parentId": "a1",
        "timestamp": "t",
        "fromId": "z",
        "summary": "S",
    }
    messages = _messages({**custom, "content": "injected", "display": True}, branch)
    assert [m.role for m in messages] == ["user", "user"]
    assert messages[0].text == "injected"
    assert messages[0].meta["parent_id"] is None
    assert messages[1].meta == {"entry_type": "branch_summary", "id": "a2", "parent_id": "a1"}
    assert "<summary>\nS</summary>" in messages[1].text
    for m in messages:
        assert PI.encode_message(m) == m.raw
    changed = [dataclasses.replace(m, blocks=(TextBlock("NEW"),)) for m in messages]
    assert PI.encode_message(changed[0])["content"] == "NEW"  # a bare string stays a bare string
    assert PI.encode_message(changed[1])["summary"] == "NEW"


def test_changed_messages_encode_from_their_blocks() -> None:
    user, assistant, result, bash = _messages(USER, ASSISTANT, RESULT, BASH)

    cut = dataclasses.replace(result, blocks=(dataclasses.replace(result.blocks[0], text="[cut]"),))
    entry = PI.encode_message(cut)
    assert entry["message"]["content"] == [{"type": "text", "text": "[cut]"}]
    assert entry["message"]["details"] == {"x": 1}  # envelope and unmodeled fields stay
    assert _strip(_messages(entry)[0].blocks) == _strip(cut.blocks)

    tool = assistant.blocks[2]
    assert isinstance(tool, ToolUseBlock)
    edited = dataclasses.replace(
        assistant, blocks=(assistant.blocks[1], dataclasses.replace(tool, input={"command": "pwd"}))
    )
    entry = PI.encode_message(edited)
    assert entry["message"]["content"] == [
        {"type": "text", "text": "running"},
        {
            "type": "toolCall",
            "id": "c1",
            "name": "bash",
            "arguments": {"command": "pwd"},
        },  # no stale partialJson
    ]
    assert entry["message"]["usage"] == ASSISTANT["message"]["usage"]
    assert _strip(_messages(entry)[0].blocks) == _strip(edited.blocks)

    # A rewritten bashExecution becomes the plain user message pi would have sent the model.
    short = dataclasses.replace(bash, blocks=(TextBlock("Ran `false`\n(cut)"),))
    entry = PI.encode_message(short)
    assert entry["message"] == {
        "role": "user",
        "content": [{"type": "text", "text": "Ran `false`\n(cut)"}],
        "timestamp": 3,
    }
    assert _messages(entry)[0].text == "Ran `false`\n(cut)"
    assert PI.encode_message(user) == USER


def test_new_messages_encode_to_valid_entries() -> None:
    new = [
        Message(role="user", blocks=(TextBlock("summary of earlier work"),)),
        Message(
            role="assistant",
            blocks=(TextBlock("ok"), ToolUseBlock(id="n1", name="read", input={"path": "a"})),
        ),
        Message(role="tool", blocks=(ToolResultBlock(tool_use_id="n1", text="contents", name="read"),)),
    ]
    entries = [PI.encode_message(m) for m in new]
    assert all(e["type"] == "message" and isinstance(e["timestamp"], str) for e in entries)
    assert [e["message"]["role"] for e in entries] == ["user", "assistant", "toolResult"]
    back = _messages(HEADER, *entries)
    assert [(m.role, _strip(m.blocks)) for m in back] == [(m.role, m.blocks) for m in new]
    assert PI.sniff([_record(e) for e in entries]) == 95


@given(st.text(), st.text(), st.booleans())
def test_new_text_and_results_round_trip(text: str, output: str, is_error: bool) -> None:
    user = Message(role="user", blocks=(TextBlock(text),))
    result = Message(
        role="tool", blocks=(ToolResultBlock(tool_use_id="x", text=output, is_error=is_error, name="t"),)
    )
    back = _messages(orjson.loads(orjson.dumps(PI.encode_message(user))), PI.encode_message(result))
    assert [_strip(m.blocks) for m in back] == [user.blocks, result.blocks]


def _aborted_session() -> bytes:
    """A task, an aborted turn holding a tool call (pi ran none), then the turn pi did answer."""

    def entry(n: int, message: dict[str, Any]) -> dict[str, Any]:
        parent = f"e{n - 1}" if n > 1 else None
        return {"type": "message", "id": f"e{n}", "parentId": parent, "timestamp": "t", "message": message}

    def text(words: str) -> list[dict[str, str]]:
        return [{"type": "text", "text": words}]

    usage = {"input": 5, "output": 24, "cacheRead": 100, "cacheWrite": 0}
    edit = {"type": "toolCall", "id": "t1", "name": "edit", "arguments": {"path": "p.py"}}
    read = {"type": "toolCall", "id": "t2", "name": "read", "arguments": {"path": "p.py"}}
    output = " ".join(f"w{k}" for k in range(300))
    entries = [
        HEADER,
        entry(1, {"role": "user", "content": text("Task: fix the parser")}),
        entry(2, {"role": "assistant", "content": [edit], "stopReason": "aborted", "usage": usage}),
        entry(3, {"role": "user", "content": text("go on")}),
        entry(4, {"role": "assistant", "content": [*text("Reading"), read], "stopReason": "toolUse"}),
        entry(5, {"role": "toolResult", "toolCallId": "t2", "toolName": "read", "content": text(output)}),
        entry(6, {"role": "assistant", "content": text("Fixed."), "stopReason": "stop"}),
    ]
    return b"".join(orjson.dumps(e) + b"\n" for e in entries)


def test_aborted_turns_are_in_the_file_not_the_context(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """pi-ai's ``transformMessages`` skips assistant turns that stopped ``aborted`` or ``error``: their
    tool calls are never sent, so none is unanswered; the call is billed all the same."""
    source = tmp_path / "s.jsonl"
    source.write_bytes(_aborted_session())
    t = load(source)
    assert [m.line for m in t.messages] == [2, 4, 5, 6, 7]
    assert [u.line for u in t.usage] == [3]
    assert run(capsys, "validate", str(source))[0] == 0
    code, out, _ = run(capsys, "convert", "--to", "chat-anthropic", str(source))
    assert code == 0
    assert '"t1"' not in out  # the aborted call
    assert '"t2"' in out
    compacted = tmp_path / "out.jsonl"
    args = ["--target-tokens", "60", "--keep-last", "1", "--allow-over", "--archive", str(tmp_path / "a")]
    assert run(capsys, "compact", str(source), "--strategy", "fifo", *args, "-o", str(compacted))[0] == 0
    assert source.read_bytes().splitlines()[2] in compacted.read_bytes().splitlines()  # written back as is
    assert run(capsys, "validate", str(compacted))[0] == 0


def test_kept_tail_from_an_aborted_turn_starts_at_the_next_message() -> None:
    """pi may cut at any assistant entry, an aborted one too: its kept tail starts at the next message."""
    aborted = {
        "type": "message",
        "id": "a",
        "timestamp": "t",
        "message": {"role": "assistant", "content": []},
    }
    aborted["message"]["stopReason"] = "aborted"
    compaction = {"type": "compaction", "timestamp": "t", "summary": "s", "firstKeptEntryId": "a"}
    items = _read(HEADER, USER, aborted, USER, compaction)
    assert [type(x).__name__ for x in items] == ["Message", "Message", "Boundary"]
    assert items[2].kept_from == 1


def test_sniff() -> None:
    assert PI.sniff([_record(HEADER), _record(USER)]) == 95
    assert PI.sniff([_record(RESULT)]) == 95  # a fragment without its header
    assert PI.sniff([_record(USER)]) == 80
    claude = {"type": "user", "uuid": "u", "sessionId": "s", "message": {"role": "user", "content": "hi"}}
    assert PI.sniff([_record(claude)]) == 0
    assert PI.sniff([_record({"timestamp": "t", "type": "session_meta", "payload": {}})]) == 0
    assert PI.sniff([_record({"role": "user", "content": "hi"})]) == 0


def _entry(n: int, parent: int | None, role: str, words: str) -> dict[str, Any]:
    message = {"role": role, "content": [{"type": "text", "text": words}]}
    parent_id = f"e{parent}" if parent else None
    return {"type": "message", "id": f"e{n}", "parentId": parent_id, "timestamp": "t", "message": message}


def _compact_fifo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, entries: list[dict[str, Any]]
) -> list[Any]:
    """The entries of ``entries`` compacted with fifo down to the last three messages."""
    source = tmp_path / "s.jsonl"
    source.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [HEADER, *entries]))
    compacted = tmp_path / "out.jsonl"
    args = ["--target-tokens", "400", "--keep-last", "3", "--allow-over", "--archive", str(tmp_path / "a")]
    assert run(capsys, "compact", str(source), "--strategy", "fifo", *args, "-o", str(compacted))[0] == 0
    return [orjson.loads(line) for line in compacted.read_bytes().splitlines()[1:]]


FILLER = " ".join(f"w{k}" for k in range(300))


def _walk_from_leaf(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries pi sends from, root first: session-manager.ts ``buildSessionContext`` starts at the last
    entry and follows ``parentId`` until it names no entry."""
    by_id = {e["id"]: e for e in entries}
    path, current = [], entries[-1]
    while current is not None:
        path.insert(0, current)
        current = by_id.get(current["parentId"]) if current["parentId"] else None
    return path


def test_compacted_entries_stay_on_the_chain_pi_walks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Dropped entries are unlinked: what follows hangs off the entry written before it, and ctxc's own
    placeholder gets an id and a place on the chain; an abandoned branch is written as it was, its
    dropped parent too (pi's tree makes it a root), off the chain."""

    entries = [_entry(1, None, "user", "Task: fix the parser")]
    entries += [_entry(n, n - 1, "assistant" if n % 2 == 0 else "user", f"{n} {FILLER}") for n in range(2, 9)]
    entries += [
        _entry(9, 7, "assistant", "abandoned"),
        _entry(10, 8, "user", "go on"),
        _entry(11, 10, "assistant", "ok"),
    ]
    written = _compact_fifo(capsys, tmp_path, entries)
    assert len({e["id"] for e in written}) == len(written)
    branch = next(e for e in written if e["id"] == "e9")
    assert branch == entries[8]
    assert "e7" not in {e["id"] for e in written}
    live = [e for e in written if e is not branch]
    assert len(live) < len(entries) - 1  # some entries were dropped
    assert _walk_from_leaf(written) == live
    texts = [e["message"]["content"][0]["text"] for e in live]
    assert texts[0] == "Task: fix the parser"
    new = [text for e, text in zip(live, texts, strict=True) if e["id"] not in {x["id"] for x in entries}]
    assert len(new) == 1
    assert new[0].startswith("[ctxc]")


def test_a_dropped_first_kept_entry_moves_to_the_next_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """pi sends a compaction's kept tail from its ``firstKeptEntryId`` on: when ctxc drops that entry, the
    tail starts at the next entry written on the chain (here ctxc's own), or pi would send none of it."""
    entries = [_entry(1, None, "user", "Task")]
    entries += [_entry(n, n - 1, "assistant" if n % 2 == 0 else "user", f"{n} {FILLER}") for n in range(2, 7)]
    compaction = {"type": "compaction", "id": "c1", "parentId": "e6", "timestamp": "t", "summary": "s"}
    entries += [
        {**compaction, "firstKeptEntryId": "e3"},
        {**_entry(7, None, "user", "go on"), "parentId": "c1"},
    ]
    written = _compact_fifo(capsys, tmp_path, entries)
    assert _walk_from_leaf(written) == written
    ids = [e["id"] for e in written]
    assert "e3" not in ids
    first_kept = next(e["firstKeptEntryId"] for e in written if e["type"] == "compaction")
    assert first_kept == ids[ids.index("e2") + 1]
    assert first_kept not in {e["id"] for e in entries}


def _branched_session() -> list[dict[str, Any]]:
    """root -> u1 -> a1 -> u2 -> a2, then the user went back to a1: u3 (parent a1) -> a3, the leaf. pi
    sends root to a3 along ``parentId``; u2 and a2 stay in the file, never sent (session-manager.ts)."""
    usage = {"input": 900, "output": 5, "cacheRead": 0, "cacheWrite": 0}
    root = {"type": "model_change", "id": "e0", "parentId": None, "timestamp": "t", "modelId": "m"}
    a2 = _entry(5, 4, "assistant", f"abandoned answer {FILLER}")
    a2["message"]["usage"] = usage
    return [
        root,
        {**_entry(1, None, "user", "Task: fix the parser"), "parentId": "e0"},
        _entry(2, 1, "assistant", f"a1 {FILLER}"),
        _entry(4, 2, "user", f"abandoned question {FILLER}"),
        a2,
        _entry(6, 2, "user", f"u3 {FILLER}"),
        _entry(7, 6, "assistant", "a3"),
    ]


def test_abandoned_branch_is_not_in_the_live_context(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "s.jsonl"
    source.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [HEADER, *_branched_session()]))
    code, out, _ = run(capsys, "analyze", str(source), "--format", "json", "--tokenizer", "approx")
    assert code == 0
    doc = orjson.loads(out)["files"][0]
    live_lines = [m["line"] for m in doc["messages"] if m["live"]]
    assert live_lines == [3, 4, 7, 8]  # u1, a1, u3, a3 (line 1 is the header, 2 the root)
    assert doc["live_context"]["messages"] == 4
    branch = [m["tokens"] for m in doc["messages"] if m["line"] in (5, 6)]
    assert doc["abandoned_branches"] == {"messages": 2, "tokens": sum(branch)}
    assert doc["live_context"]["tokens"] == sum(m["tokens"] for m in doc["messages"] if m["live"])
    t = load(source)
    assert [u.abandoned for u in t.usage] == [True]  # billed, but in no context


def test_compaction_leaves_an_abandoned_branch_as_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    entries = _branched_session()
    source = tmp_path / "s.jsonl"
    source.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [HEADER, *entries]))
    compacted = tmp_path / "out.jsonl"
    args = ["--target-tokens", "200", "--keep-last", "1", "--allow-over", "--archive", str(tmp_path / "a")]
    assert run(capsys, "compact", str(source), "--strategy", "fifo", *args, "-o", str(compacted))[0] == 0
    lines = compacted.read_bytes().splitlines()
    branch = source.read_bytes().splitlines()[4:6]
    at = lines.index(branch[0])
    assert lines[at : at + 2] == branch  # byte for byte, together
    written = [orjson.loads(line) for line in lines[1:]]
    assert "e2" not in {e["id"] for e in written}  # a1, the branch's parent, was dropped
    live = [e for e in written if e["id"] not in ("e4", "e5")]
    assert _walk_from_leaf(written) == live
    kept = [e["id"] for e in written if e in entries]
    assert kept == [e["id"] for e in entries if e["id"] in kept]  # nothing kept moved


def test_a_compaction_on_an_abandoned_branch_is_not_where_pi_resumes(tmp_path: Path) -> None:
    """pi resumes from the last compaction on its walk: one on a branch the user left resets nothing."""
    compaction = {"type": "compaction", "id": "c1", "parentId": "e2", "timestamp": "t", "summary": "s"}
    entries = [
        _entry(1, None, "user", "Task"),
        _entry(2, 1, "assistant", "a1"),
        {**compaction, "firstKeptEntryId": "e2"},
        {**_entry(3, None, "user", "after the compaction"), "parentId": "c1"},
        _entry(4, 2, "user", "the other way"),
    ]
    source = tmp_path / "s.jsonl"
    source.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [HEADER, *entries]))
    t = load(source)
    assert [m.meta["id"] for m in live_messages(t)] == ["e1", "e2", "e4"]
    assert [b.resets for b in t.boundaries if b.kind == "pi_compaction"] == [False]
