"""The SWE-agent adapter on the three .traj documents of the corpus, and on hand-made documents."""

from __future__ import annotations

import dataclasses
import io
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import CORPUS, corpus_params
from hypothesis import given
from hypothesis import strategies as st

from ctxc.formats import dump, get_adapter, load
from ctxc.formats.swe_agent import encode_document
from ctxc.model import Message, Record, TextBlock, ToolResultBlock, ToolUseBlock

SWE = get_adapter("swe-agent")
TRAJ = CORPUS / "agent-trajectories"
FC = TRAJ / "swe-agent_marshmallow-1867_function-calling.traj.json"
CLASSIC = TRAJ / "swe-agent_pydicom-1458_classic.traj.json"
ENIGMA = TRAJ / "swe-agent-enigma_ctf-web-i_got_id.traj.json"
needs_corpus = pytest.mark.skipif(not FC.is_file(), reason=f"no corpus at {CORPUS}")
FILES = corpus_params("agent-trajectories/*.traj.json")


def _record(data: dict[str, Any]) -> Record:
    return Record(line=1, raw=orjson.dumps(data, option=orjson.OPT_INDENT_2), eol=b"", data=data)


def _read(data: dict[str, Any]) -> list[Message]:
    return [x for x in SWE.read([(0, _record(data))]) if isinstance(x, Message)]


def _cut_results(messages: list[Message] | tuple[Message, ...]) -> list[Message]:
    return [
        dataclasses.replace(m, blocks=(dataclasses.replace(m.blocks[0], text="[cut]"),))
        if m.role == "tool"
        else m
        for m in messages
    ]


# ------------------------------------------------------------------------------------------ corpus


@pytest.mark.parametrize("path", FILES)
def test_corpus_sniffs_loads_and_dumps_byte_identical(path: Path) -> None:
    transcript = load(path)
    assert transcript.format == "swe-agent"
    assert len(transcript.records) == 1  # one pretty-printed document
    out = io.BytesIO()
    dump(transcript, out)
    assert out.getvalue() == path.read_bytes()


@pytest.mark.parametrize("path", FILES)
def test_corpus_encode_laws(path: Path) -> None:
    t = load(path)
    document = t.records[0].data
    assert len(t.messages) == len(document["history"])  # trajectory adds no messages
    for i, m in enumerate(t.messages):
        assert (m.index, m.records, m.conversation, m.meta["history_index"]) == (i, (0,), 0, i)
        assert m.raw is document["history"][i]
        assert SWE.encode_message(m) == m.raw
    assert encode_document(t.messages, document) == document


@pytest.mark.parametrize("path", FILES)
def test_corpus_every_tool_result_pairs_with_an_earlier_call(path: Path) -> None:
    calls: set[str] = set()
    unpaired: list[str] = []
    for m in load(path).messages:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                calls.add(b.id)
            elif isinstance(b, ToolResultBlock) and b.tool_use_id not in calls:
                unpaired.append(b.tool_use_id)
    assert unpaired == []


@needs_corpus
def test_function_calling_facts() -> None:
    t = load(FC)
    # SOURCES.md: 24 history messages; assistant tool_calls and tool messages with tool_call_ids.
    assert len(t.messages) == 24
    assert Counter(m.role for m in t.messages) == {"system": 1, "user": 1, "assistant": 11, "tool": 11}
    names = {b.name for m in t.messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    assert names == {"bash", "edit", "create", "insert", "find_file", "open", "submit"}
    for m in t.messages:
        if m.role == "tool":
            assert [b.tool_use_id for b in m.blocks] == m.raw["tool_call_ids"]
        if m.role == "assistant":
            assert m.blocks[0] == TextBlock(m.raw["content"])
            assert m.meta["thought"] == m.raw["thought"]
    # This replayed demonstration reuses call ids (the same id is called and answered several times).
    ids = Counter(b.id for m in t.messages for b in m.blocks if isinstance(b, ToolUseBlock))
    assert ids["call_5iDdbOYybq7L19vqXmR0DPaU"] == 4
    assert len(t.records[0].data["trajectory"]) == 11
    assert t.usage == ()  # model_stats are run totals, not per-call usage


@needs_corpus
def test_classic_facts() -> None:
    t = load(CLASSIC)
    assert len(t.messages) == 26
    assert all(b.kind == "text" for m in t.messages for b in m.blocks)  # no tool structure is invented
    demo = t.messages[1]
    assert demo.role == "user"
    assert demo.meta["is_demo"] is True
    assert [m.index for m in t.messages if m.meta.get("is_demo")] == [1]
    assert "```" in t.messages[3].text  # the command is a fenced block in the assistant text
    e = load(ENIGMA)
    assert Counter(m.role for m in e.messages) == {"assistant": 21, "user": 21, "system": 1}


# ------------------------------------------------------------------------------------------ encode


@needs_corpus
@pytest.mark.parametrize("path", [FC, CLASSIC])
def test_encode_document_after_compaction_round_trips(path: Path) -> None:
    t = load(path)
    document = t.records[0].data
    messages = _cut_results(t.messages)
    summary = Message(role="user", blocks=(TextBlock("SUMMARY"),))
    kept = [*messages[:2], summary, *messages[10:]]
    new = encode_document(kept, document)
    assert {k: v for k, v in new.items() if k != "history"} == {
        k: v for k, v in document.items() if k != "history"
    }
    assert new["history"][2] == {
        "role": "user",
        "agent": document["history"][0]["agent"],
        "content": "SUMMARY",
    }
    back = _read(orjson.loads(orjson.dumps(new)))
    assert [(m.role, m.text) for m in back] == [(m.role, m.text) for m in kept]
    for old, m in zip(kept, back, strict=True):
        if old.raw is not None and old.role == "tool":
            # A changed observation keeps its envelope (agent, message_type, ids), only content moves.
            assert m.raw == {**old.raw, "content": "[cut]"}


def test_changed_assistant_keeps_thought_in_step() -> None:
    message = {
        "role": "assistant",
        "content": "I will look",
        "thought": "I will look",
        "action": "ls",
        "agent": "main",
        "message_type": "action",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}
        ],
    }
    doc = {"trajectory": [], "history": [message], "info": {}}
    (m,) = _read(doc)
    assert m.blocks[1] == ToolUseBlock(
        id="c1", name="bash", input={"command": "ls"}, raw=message["tool_calls"][0]
    )
    shorter = dataclasses.replace(m, blocks=(TextBlock("look"), m.blocks[1]))
    out = SWE.encode_message(shorter)
    assert out == {**message, "content": "look", "thought": "look"}
    dropped = SWE.encode_message(dataclasses.replace(m, blocks=(TextBlock("done"),)))
    assert "tool_calls" not in dropped


def test_new_messages_encode_to_history_entries() -> None:
    call = Message(
        role="assistant", blocks=(TextBlock("x"), ToolUseBlock(id="n1", name="bash", input={"c": 1}))
    )
    result = Message(role="tool", blocks=(ToolResultBlock(tool_use_id="n1", text="out"),))
    doc = encode_document([call, result], {"trajectory": [], "history": [], "info": {}})
    assert doc["history"][1] == {
        "role": "tool",
        "agent": "main",
        "content": "out",
        "tool_call_ids": ["n1"],
        "message_type": "observation",
    }
    back = _read(doc)
    assert [(m.role, tuple(dataclasses.replace(b, raw=None) for b in m.blocks)) for m in back] == [
        (call.role, call.blocks),
        (result.role, result.blocks),
    ]


def test_several_ids_share_one_observation() -> None:
    doc = {"trajectory": [], "history": [{"role": "tool", "content": "both", "tool_call_ids": ["a", "b"]}]}
    (m,) = _read(doc)
    assert [(b.tool_use_id, b.text) for b in m.blocks] == [("a", "both"), ("b", "")]
    assert SWE.encode_message(m) == doc["history"][0]


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "system"]), st.text()), max_size=6))
def test_new_text_histories_round_trip(turns: list[tuple[str, str]]) -> None:
    messages = [Message(role=role, blocks=(TextBlock(text),)) for role, text in turns]  # type: ignore[arg-type]
    doc = encode_document(messages, {"environment": "e", "trajectory": [], "history": [], "info": {}})
    back = _read(orjson.loads(orjson.dumps(doc)))
    assert [(m.role, m.blocks) for m in back] == [(m.role, m.blocks) for m in messages]


def test_sniff() -> None:
    assert SWE.sniff([_record({"trajectory": [], "history": [], "info": {}})]) == 95
    assert SWE.sniff([_record({"instance_id": "i", "history": []})]) == 0  # OpenHands line
    assert SWE.sniff([_record({"role": "user", "content": "hi"})]) == 0
    two = [_record({"trajectory": [], "history": []}), _record({"trajectory": [], "history": []})]
    assert SWE.sniff(two) == 80


def test_a_rewritten_document_keeps_its_framing() -> None:
    """A changed .traj is written pretty-printed again, framed as it was read: its byte-order mark,
    CRLF line ends and final newline (it lost all three)."""
    from ctxc.compaction.write import write_transcript
    from ctxc.reader import BOM

    turns = [("system", "rules"), ("user", "task"), ("assistant", "look"), ("user", "observation")]
    history = [{"role": role, "content": text, "agent": "main"} for role, text in turns]
    document = {"environment": "e", "trajectory": [], "history": history, "info": {}}
    raw = BOM + orjson.dumps(document, option=orjson.OPT_INDENT_2).replace(b"\n", b"\r\n") + b"\r\n"
    t = load(io.BytesIO(raw))
    changed = dataclasses.replace(t.messages[2], blocks=(TextBlock("seen"),))
    written = write_transcript(t, {0: (*t.messages[:2], changed, t.messages[3])}, SWE, archive_id="0" * 64)
    out = io.BytesIO()
    dump(written, out)
    data = out.getvalue()
    assert data.startswith(BOM + b"{\r\n")
    assert data.endswith(b"}\r\n")
    assert data.count(b"\n") == data.count(b"\r\n")
    assert [m.text for m in load(io.BytesIO(data)).messages] == ["rules", "task", "seen", "observation"]
