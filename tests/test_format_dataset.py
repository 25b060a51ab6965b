"""The dataset adapter: one conversation per line, legacy function calling, whole-line re-encoding."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxc.formats import dump, get_adapter, load
from ctxc.formats.dataset import encode_line
from ctxc.model import Message, Record, TextBlock, ToolResultBlock, ToolUseBlock, Transcript
from tests.conftest import CORPUS, corpus_params

DATASET = get_adapter("dataset")
FUNCTIONARY = CORPUS / "conversation-datasets" / "functionary_small_tests_function-call.jsonl"


def jsonl(*objs: Any, eol: bytes = b"\n") -> bytes:
    return b"".join(orjson.dumps(o) + eol for o in objs)


def load_bytes(data: bytes) -> Transcript:
    return load(io.BytesIO(data))


def dumped(t: Transcript) -> bytes:
    out = io.BytesIO()
    dump(t, out)
    return out.getvalue()


def line_messages(t: Transcript, record_index: int) -> list[Message]:
    return [m for m in t.messages if m.records == (record_index,)]


def assert_laws(t: Transcript) -> None:
    for m in t.messages:
        assert DATASET.encode_message(m) == m.raw, (m.line, m.raw)
    for i, rec in enumerate(t.records):
        if isinstance(rec.data, dict) and "messages" in rec.data:
            assert encode_line(line_messages(t, i), rec.data) == rec.data, rec.line


# ------------------------------------------------------------------------------------------ corpus


@pytest.mark.parametrize("path", corpus_params("conversation-datasets/*.jsonl"))
def test_corpus_round_trip_and_laws(path: Path) -> None:
    data = path.read_bytes()
    t = load(path)
    assert t.format == "dataset"
    assert dumped(t) == data
    assert_laws(t)
    lines = [orjson.loads(x) for x in data.splitlines()]
    assert t.conversations == len(lines)
    # One conversation per line, numbered by line; indexes count on across lines.
    assert [m.conversation for m in t.messages] == [m.line - 1 for m in t.messages]
    assert [m.index for m in t.messages] == list(range(len(t.messages)))
    assert len(t.messages) == sum(len(o["messages"]) for o in lines)


@pytest.mark.parametrize("path", corpus_params("conversation-datasets/*.jsonl"))
def test_corpus_legacy_calls_pair_within_their_line(path: Path) -> None:
    t = load(path)
    for n in range(t.conversations):
        open_calls: dict[str, str] = {}
        for m in t.conversation(n):
            for b in m.blocks:
                if isinstance(b, ToolUseBlock):
                    assert b.id == f"fc-{m.line}-{m.meta['position']}"
                    open_calls[b.id] = b.name
                elif isinstance(b, ToolResultBlock):
                    assert m.role == "tool"
                    assert m.meta["source_role"] == "function"
                    assert open_calls.pop(b.tool_use_id) == b.name


def test_functionary_known_counts() -> None:
    """The counts SOURCES.md gives for the functionary file."""
    if not FUNCTIONARY.is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    t = load(FUNCTIONARY)
    roles = [m.role for m in t.messages]
    assert (len(roles), roles.count("user"), roles.count("assistant"), roles.count("tool")) == (
        86,
        30,
        43,
        13,
    )
    assert t.conversations == 20
    calls = [b for m in t.messages for b in m.blocks if isinstance(b, ToolUseBlock)]
    assert len(calls) == 13
    # The functions the model was offered ride on each conversation's first message.
    firsts = [t.conversation(n)[0] for n in range(20)]
    assert all(m.meta.get("tools_key") in (None, "functions") for m in firsts)
    assert any(m.meta.get("tools") for m in firsts)


def test_sniff() -> None:
    recs = [Record(line=1, raw=b"", eol=b"\n", data={"messages": [], "source": "x"})]
    assert DATASET.sniff(recs) == 90
    chat = [Record(line=1, raw=b"", eol=b"\n", data={"role": "user", "content": "x"})]
    assert DATASET.sniff(chat) == 0
    assert get_adapter("chat").sniff(recs) == 0


# -------------------------------------------------------------------------------------- synthetic

LINE_A = {
    "messages": [
        {"role": "system", "content": "You call tools."},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"city":"Oslo"}'}},
                {"id": "c2", "type": "function", "function": {"name": "w", "arguments": '{"city":"Rome"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "hot"},
        {"role": "tool", "tool_call_id": "c1", "content": "cold"},
        {"role": "assistant", "content": "Cold in Oslo, hot in Rome."},
    ],
    "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
    "split": "train",
}
LINE_B = {
    "system": "Be terse.",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a b"}]},
        {"role": "_note", "text": "not a message"},
        {"role": "assistant", "content": "a and b"},
    ],
}


def test_synthetic_lines() -> None:
    data = jsonl(LINE_A, LINE_B)
    t = load_bytes(data)
    assert t.format == "dataset"
    assert dumped(t) == data
    assert_laws(t)
    a, b = t.conversation(0), t.conversation(1)
    assert [m.role for m in a] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert [m.role for m in b] == ["system", "user", "assistant", "user", "assistant"]
    assert b[0].text == "Be terse."
    assert b[0].meta["dataset_field"] == "system"
    assert [r.name for m in a for r in m.blocks if isinstance(r, ToolResultBlock)] == ["w", "w"]
    result = b[3].blocks[0]
    assert isinstance(result, ToolResultBlock)
    assert (result.tool_use_id, result.name) == ("t1", "ls")
    assert a[0].meta["tools"] == LINE_A["tools"]
    assert b[0].meta["dialect"] == "anthropic"


def test_crlf_and_missing_final_newline() -> None:
    data = jsonl(LINE_A, eol=b"\r\n") + orjson.dumps(LINE_B)
    t = load_bytes(data)
    assert dumped(t) == data
    assert t.conversations == 2
    assert_laws(t)


def test_encode_line_after_changes_keeps_other_keys_and_pseudo_entries() -> None:
    t = load_bytes(jsonl(LINE_A, LINE_B))
    b = list(t.conversation(1))
    # Drop the first user message, shorten the last answer, append a new note.
    last = dataclasses.replace(b[-1], blocks=(TextBlock(text="ab"),))
    new = Message(role="user", blocks=(TextBlock(text="thanks"),), meta={"dialect": "anthropic"})
    out = encode_line([b[0], b[2], b[3], last, new], LINE_B)
    assert out["system"] == "Be terse."
    assert out["messages"] == [
        LINE_B["messages"][1],
        LINE_B["messages"][2],
        {"role": "_note", "text": "not a message"},
        {"role": "assistant", "content": "ab"},
        {"role": "user", "content": "thanks"},
    ]
    # Without its system message the line loses the system key; the other keys stay.
    out = encode_line(list(t.conversation(0))[1:], LINE_A)
    assert out["tools"] == LINE_A["tools"]
    assert out["split"] == "train"
    assert out["messages"] == LINE_A["messages"][1:]
    assert "system" not in encode_line(b[1:], LINE_B)


def test_encode_line_without_template() -> None:
    msgs = [
        Message(role="user", blocks=(TextBlock(text="q"),)),
        Message(role="assistant", blocks=(TextBlock(text="a"),)),
    ]
    assert encode_line(msgs, None) == {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    }


def test_legacy_result_changed_keeps_function_shape() -> None:
    line = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": '{"a": 1}'}},
            {"role": "function", "name": "f", "content": "long"},
        ],
        "functions": [],
    }
    t = load_bytes(jsonl(line))
    call, res = t.messages[1], t.messages[2]
    r = res.blocks[0]
    assert isinstance(r, ToolResultBlock)
    cut = dataclasses.replace(res, blocks=(dataclasses.replace(r, text="short"),))
    assert DATASET.encode_message(cut) == {"role": "function", "name": "f", "content": "short"}
    c = call.blocks[0]
    assert isinstance(c, ToolUseBlock)
    changed = dataclasses.replace(call, blocks=(dataclasses.replace(c, input={"a": 2}),))
    assert DATASET.encode_message(changed) == {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "arguments": '{"a":2}'},
    }
    # The unchanged call keeps its original argument string (with its space).
    assert DATASET.encode_message(call)["function_call"]["arguments"] == '{"a": 1}'
