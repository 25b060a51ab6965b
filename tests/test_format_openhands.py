"""The OpenHands adapter on the evaluation and resolver outputs of the corpus, and on hand-made events."""

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
from ctxc.formats.openhands import encode_line
from ctxc.model import Boundary, Message, Record, TextBlock, ToolResultBlock, ToolUseBlock, UnknownBlock

OH = get_adapter("openhands")
TRAJ = CORPUS / "agent-trajectories"
MULTI = TRAJ / "openhands_multi-swe-bench_output.jsonl"
MOCK = TRAJ / "openhands_resolver_mock-output.jsonl"
needs_corpus = pytest.mark.skipif(not MULTI.is_file(), reason=f"no corpus at {CORPUS}")
FILES = corpus_params("agent-trajectories/openhands_*.jsonl")


def _record(data: dict[str, Any], line: int = 1) -> Record:
    return Record(line=line, raw=orjson.dumps(data), eol=b"\n", data=data)


def _read_line(data: dict[str, Any], line: int = 1) -> list[Message]:
    return [x for x in OH.read([(0, _record(data, line))]) if isinstance(x, Message)]


def _line_of(path: Path, n: int) -> dict[str, Any]:
    return dict(orjson.loads(path.read_bytes().splitlines()[n]))


def _unpaired(messages: list[Message]) -> list[str]:
    calls: set[str] = set()
    out: list[str] = []
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                calls.add(b.id)
            elif isinstance(b, ToolResultBlock) and b.tool_use_id not in calls:
                out.append(b.tool_use_id)
    return out


# ------------------------------------------------------------------------------------------ corpus


@pytest.mark.parametrize("path", FILES)
def test_corpus_sniffs_loads_and_dumps_byte_identical(path: Path) -> None:
    transcript = load(path)
    assert transcript.format == "openhands"
    out = io.BytesIO()
    dump(transcript, out)
    assert out.getvalue() == path.read_bytes()


@pytest.mark.parametrize("path", FILES)
def test_corpus_encode_laws(path: Path) -> None:
    t = load(path)
    for i, m in enumerate(t.messages):
        assert m.index == i
        line = t.records[m.records[0]].data
        assert m.meta["record"] == m.records[0]
        assert m.raw is line["history"][m.meta["event_index"]]
        assert OH.encode_message(m) == m.raw
    for c in range(t.conversations):
        messages = t.conversation(c)
        template = t.records[messages[0].records[0]].data
        assert encode_line(messages, template) == template


@pytest.mark.parametrize("path", FILES)
def test_corpus_every_tool_result_pairs_with_an_earlier_call(path: Path) -> None:
    t = load(path)
    for c in range(t.conversations):
        assert _unpaired(list(t.conversation(c))) == []


@needs_corpus
def test_multi_swe_bench_facts() -> None:
    t = load(MULTI)
    lines = [r.data for r in t.records]
    # SOURCES.md: 3 conversations with 49, 70 and 103 history events.
    assert t.conversations == 3
    assert [len(d["history"]) for d in lines] == [49, 70, 103]
    for c, data in enumerate(lines):
        messages = t.conversation(c)
        history = data["history"]
        recall_actions = sum(e.get("action") == "recall" for e in history)
        assert recall_actions == 1
        # Every event is a message except the recall action, which OpenHands never sends.
        assert len(messages) == len(history) - recall_actions
        assert messages[0].role == "system"
        assert isinstance(messages[0].blocks[1], UnknownBlock)  # the tool definitions sent with it
        assert messages[1].role == "user"
        recall = [m for m in messages if m.meta.get("observation") == "recall"]
        assert len(recall) == 1
        assert recall[0].role == "user"
        assert recall[0].meta["injected"]
        # The text is the knowledge it injects (microagents, runtime hosts), not only its one-line content.
        extras = recall[0].raw["extras"]
        for knowledge in extras["microagent_knowledge"]:
            assert knowledge["content"] in recall[0].text
        for host in extras["runtime_hosts"]:
            assert host in recall[0].text
        # Agent actions: one tool call each, with the id OpenHands recorded.
        for m in messages:
            event = m.raw
            if m.role == "assistant":
                use = next(b for b in m.blocks if isinstance(b, ToolUseBlock))
                assert use.id == event["tool_call_metadata"]["tool_call_id"]
                assert use.name == event["tool_call_metadata"]["function_name"]
            if m.role == "tool":
                cause = next(e for e in history if e.get("id") == event["cause"])
                assert m.blocks[0].tool_use_id == cause["tool_call_metadata"]["tool_call_id"]
    # Errors for malformed tool calls answer no action: OpenHands sends them as user text.
    errors = [m for m in t.messages if m.meta.get("observation") == "error"]
    assert [(m.conversation, m.role) for m in errors] == [(1, "user"), (2, "user")]
    assert all("cause" not in m.raw for m in errors)
    # The finish calls are the only calls nobody answers (the run ends there; the third run hit its
    # iteration limit instead). Ids restart at toolu_01 on every line, so this is per conversation.
    open_calls: list[tuple[int, str]] = []
    for c in range(t.conversations):
        messages = t.conversation(c)
        answered = {b.tool_use_id for m in messages for b in m.blocks if isinstance(b, ToolResultBlock)}
        open_calls += [
            (c, m.meta["action"])
            for m in messages
            for b in m.blocks
            if isinstance(b, ToolUseBlock) and b.id not in answered
        ]
    assert open_calls == [(0, "finish"), (1, "finish")]


@needs_corpus
def test_multi_swe_bench_usage_is_the_model_responses() -> None:
    t = load(MULTI)
    expected: list[tuple[int, int]] = []
    for rec in t.records:
        for e in rec.data["history"]:
            response = e.get("tool_call_metadata", {}).get("model_response")
            if "action" in e and response:
                expected.append((response["usage"]["prompt_tokens"], response["usage"]["completion_tokens"]))
    assert [(u.context, u.output) for u in t.usage] == expected
    assert len(t.usage) == 105
    assert all(m.usage in t.usage for m in t.messages if m.usage is not None)


@needs_corpus
def test_resolver_mock_bare_shape() -> None:
    t = load(MOCK)
    assert t.conversations == 2
    assert [len(r.data["history"]) for r in t.records] == [8, 44]
    first = t.conversation(0)
    assert [m.role for m in first] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert all(m.meta["dialect"] == "bare" for m in t.messages)
    # No ids in this shape: calls get deterministic ids, results pair positionally.
    run = first[1].blocks[-1]
    assert isinstance(run, ToolUseBlock)
    assert (run.id, run.name, run.input["command"]) == ("oh-1-1", "run", "touch LICENSE")
    assert first[1].blocks[0] == TextBlock(first[1].raw["thought"])
    assert first[2].blocks[0].tool_use_id == "oh-1-1"
    tools = Counter(b.name for m in t.messages for b in m.blocks if isinstance(b, ToolUseBlock))
    assert tools == {"run_ipython": 21, "run": 3, "finish": 2}
    assert t.usage == ()


# ------------------------------------------------------------------------------------------ encode


@needs_corpus
def test_encode_line_after_compaction_round_trips() -> None:
    template = _line_of(MULTI, 0)
    messages = _read_line(template)
    cut = [
        dataclasses.replace(m, blocks=(dataclasses.replace(m.blocks[0], text="[cut]"),))
        if m.role == "tool"
        else m
        for m in messages
    ]
    summary = Message(role="user", blocks=(TextBlock("SUMMARY"),))
    # Keep the system prompt, then a summary, then everything from the 12th message (a call) on.
    assert cut[11].role == "assistant"
    kept = [cut[0], summary, *cut[11:]]
    line = encode_line(kept, template)
    assert {k: v for k, v in line.items() if k != "history"} == {
        k: v for k, v in template.items() if k != "history"
    }
    back = _read_line(line)
    assert [m.role for m in back] == [m.role for m in kept]
    assert back[1].text == "SUMMARY"
    assert all(m.text == "[cut]" for m in back if m.role == "tool")
    assert _unpaired(back) == []
    # The recall action (never a message) stays; the summary gets a fresh id after the largest one.
    actions = [e.get("action") for e in line["history"]]
    assert actions.count("recall") == 1
    assert line["history"][1]["id"] == max(e["id"] for e in template["history"]) + 1
    # Changed observations keep their envelope; display texts that were not copies stay.
    obs = next(e for e in line["history"] if e.get("observation") == "run")
    original = next(e for e in template["history"] if e.get("id") == obs["id"])
    assert obs == {**original, "content": "[cut]"}


@needs_corpus
def test_encode_line_new_tool_exchange_is_linked_by_cause() -> None:
    template = _line_of(MULTI, 0)
    messages = _read_line(template)
    call = Message(
        role="assistant",
        blocks=(TextBlock("look"), ToolUseBlock(id="new1", name="execute_bash", input={"command": "ls"})),
    )
    result = Message(
        role="tool", blocks=(ToolResultBlock(tool_use_id="new1", text="a b", name="execute_bash"),)
    )
    line = encode_line([*messages[:3], call, result, *messages[3:]], template)
    action, observation = line["history"][4], line["history"][5]
    assert action["action"] == "execute_bash"
    assert action["args"] == {"command": "ls", "thought": "look"}
    assert observation["cause"] == action["id"]
    assert observation["content"] == "a b"
    back = _read_line(line)
    assert [m.role for m in back[3:5]] == ["assistant", "tool"]
    assert back[4].blocks[0].tool_use_id == back[3].blocks[1].id
    assert _unpaired(back) == []


@needs_corpus
def test_encode_line_bare_shape() -> None:
    template = _line_of(MOCK, 0)
    messages = _read_line(template)
    changed = [
        dataclasses.replace(m, blocks=(dataclasses.replace(m.blocks[0], text="[cut]"),))
        if m.role == "tool"
        else m
        for m in messages
    ]
    line = encode_line([changed[0], Message(role="user", blocks=(TextBlock("S"),)), *changed[1:]], template)
    assert line["history"][1] == {
        "action": "message",
        "content": "S",
        "image_urls": None,
        "wait_for_response": False,
    }
    assert line["history"][3] == {**template["history"][2], "content": "[cut]"}
    assert all("id" not in e for e in line["history"])  # the bare shape has no ids: none are invented
    back = _read_line(line)
    assert [m.role for m in back] == ["user", "user", *[m.role for m in messages[1:]]]
    assert _unpaired(back) == []


def test_changed_thought_and_input_go_back_into_args() -> None:
    event = {
        "id": 5,
        "source": "agent",
        "message": "Running command: ls",
        "action": "run",
        "tool_call_metadata": {
            "function_name": "execute_bash",
            "tool_call_id": "t5",
            "total_calls_in_response": 1,
        },
        "args": {"command": "ls", "is_input": False, "thought": "let me look", "blocking": False},
    }
    (m,) = _read_line({"instruction": "x", "history": [event]})
    assert m.blocks == (
        TextBlock("let me look"),
        ToolUseBlock(
            id="t5", name="execute_bash", input={"command": "ls", "is_input": False, "blocking": False}
        ),
    )
    assert OH.encode_message(m) is event
    quiet = dataclasses.replace(m, blocks=(dataclasses.replace(m.blocks[1], input={"command": "pwd"}),))
    out = OH.encode_message(quiet)
    assert out == {**event, "args": {"command": "pwd", "thought": ""}}
    assert _read_line({"instruction": "x", "history": [out]})[0].blocks == (quiet.blocks[0],)


@pytest.mark.parametrize("odd", [{}, [1]])
def test_an_event_id_or_cause_that_is_not_a_number_is_no_internal_error(odd: object) -> None:
    # An event's id (or an observation's cause) of an object or a list went to a dict as a key: TypeError
    # (unhashable), "internal error", exit 1. It is no id: the call gets a synthesized one, unanswered.
    call = {"id": odd, "source": "agent", "action": "run", "args": {"command": "ls"}}
    out = {"id": 2, "cause": odd, "source": "agent", "observation": "run", "content": "a.txt"}
    messages = _read_line({"instruction": "x", "history": [call, out]})
    assert [b.kind for m in messages for b in m.blocks] == ["tool_use", "text"]


def test_think_keeps_its_thought_as_the_argument() -> None:
    event = {"id": 1, "source": "agent", "action": "think", "args": {"thought": "ponder"}}
    (m,) = _read_line({"instruction": "x", "history": [event]})
    assert [b.kind for b in m.blocks] == ["tool_use"]
    assert m.blocks[0].input == {"thought": "ponder"}
    assert m.blocks[0].id == "oh-1-1"


def test_non_context_events_and_condensation() -> None:
    history = [
        {"id": 0, "source": "user", "action": "message", "message": "hi", "args": {"content": "hi"}},
        {"id": 1, "source": "environment", "observation": "agent_state_changed", "content": "", "extras": {}},
        {"id": 2, "source": "agent", "action": "condensation", "args": {"forgotten_event_ids": [0]}},
        {"id": 3, "source": "agent", "action": "message", "message": "done", "args": {"content": "done"}},
    ]
    items = list(OH.read([(0, _record({"instance_id": "i", "history": history}))]))
    assert [type(x).__name__ for x in items] == ["Message", "Boundary", "Message"]
    assert items[1] == Boundary(kind="openhands_condensation", line=1, trigger="forget")
    assert [m.role for m in items if isinstance(m, Message)] == ["user", "assistant"]


def test_user_run_action_is_user_context() -> None:
    run = {
        "id": 0,
        "source": "user",
        "action": "run",
        "message": "Running command: ls",
        "args": {"command": "ls"},
    }
    output = {"id": 1, "source": "user", "cause": 0, "observation": "run", "content": "a", "extras": {}}
    messages = _read_line({"instruction": "x", "history": [run, output]})
    assert [m.role for m in messages] == ["user", "user"]  # no tool call: the user ran it, not the model
    assert isinstance(messages[0].blocks[0], UnknownBlock)
    assert messages[0].blocks[0].raw == {"command": "ls"}
    assert [OH.encode_message(m) for m in messages] == [run, output]
    changed = dataclasses.replace(messages[0], blocks=(UnknownBlock(raw={"command": "pwd"}, text="pwd"),))
    assert OH.encode_message(changed) == {**run, "args": {"command": "pwd"}}


def test_new_messages_without_a_line() -> None:
    event = OH.encode_message(Message(role="user", blocks=(TextBlock("note"),)))
    assert (event["action"], event["source"], event["args"]["content"]) == ("message", "user", "note")
    system = OH.encode_message(Message(role="system", blocks=(TextBlock("be brief"),)))
    assert system["action"] == "system"
    assert system["args"] == {"content": "be brief"}
    two_calls = Message(
        role="assistant",
        blocks=(ToolUseBlock(id="a", name="run", input={}), ToolUseBlock(id="b", name="run", input={})),
    )
    with pytest.raises(ValueError, match="encode_line"):
        OH.encode_message(two_calls)


@given(st.text(), st.text())
def test_new_text_messages_round_trip(user_text: str, reply: str) -> None:
    messages = [
        Message(role="user", blocks=(TextBlock(user_text),)),
        Message(role="assistant", blocks=(TextBlock(reply),)),
    ]
    line = encode_line(messages, {"instance_id": "i", "instruction": "x", "history": []})
    back = _read_line(orjson.loads(orjson.dumps(line)))
    assert [(m.role, m.blocks) for m in back] == [(m.role, m.blocks) for m in messages]


def test_sniff() -> None:
    line = {"instance_id": "i", "instruction": "x", "history": [{"action": "message", "content": "hi"}]}
    assert OH.sniff([_record(line)]) == 95
    assert OH.sniff([_record({"history": [{"action": "run", "command": "ls"}]})]) == 70
    assert OH.sniff([_record({"trajectory": [], "history": [], "instruction": "x"})]) == 0  # SWE-agent
    assert OH.sniff([_record({"messages": [{"role": "user", "content": "hi"}]})]) == 0
    assert OH.sniff([_record({"role": "user", "content": "hi"})]) == 0


# ------------------------------------------------------------------------------- terminal actions


def test_terminal_actions_are_the_adapters_fact() -> None:
    assert OH.terminal_actions == frozenset({"finish", "reject"})
    finish = {
        "id": 1,
        "source": "agent",
        "action": "finish",
        "message": "done",
        "args": {"final_thought": "done", "thought": "all tests pass"},
    }
    run = {"id": 2, "source": "agent", "action": "run", "message": "", "args": {"command": "ls"}}
    messages = _read_line({"instance_id": "i", "history": [run, finish]})
    uses = [b for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)]
    assert [(b.name, b.terminal) for b in uses] == [("run", False), ("finish", True)]
    assert OH.encode_message(messages[1]) == finish  # the flag is the reader's, never written


@pytest.mark.parametrize("path", FILES)
def test_validate_accepts_every_corpus_file(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """finish ends the run: no observation follows it, and validate must not call that a problem."""
    from conftest import run

    code, out, err = run(capsys, "validate", str(path))
    assert code == 0, out + err


@pytest.mark.parametrize("path", FILES)
@pytest.mark.parametrize("strategy", ["adaptive", "fifo", "selective", "mask", "hierarchical"])
def test_compact_never_adds_tokens(path: Path, strategy: str, tmp_path: Path) -> None:
    """No stand-in observation is appended for a finish call, so compaction never grows a file."""
    from ctxc.compaction.run import CompactOptions, compact_transcript
    from ctxc.validate import pairing_problems

    t = load(path)
    for options in (
        CompactOptions(strategy=strategy),
        CompactOptions(strategy=strategy, target_ratio=0.02, allow_over=True),
    ):
        result = compact_transcript(t, options)
        assert result.tokens_after <= result.tokens_before, options
        assert not any(a.strategy == "repair" for a in result.actions)
        assert pairing_problems(result.transcript.messages, strict=True) == []


@needs_corpus
def test_convert_writes_a_terminal_call_as_text() -> None:
    from ctxc.convert import convert_transcript

    for target in ("chat-anthropic", "chat-openai"):
        lines = [orjson.loads(x) for x in convert_transcript(load(MULTI), target).splitlines()]
        texts = [orjson.dumps(x).decode() for x in lines if x.get("role") == "assistant"]
        assert sum('[finish] {\\"final_thought\\"' in t for t in texts) == 2, target
        assert not any('"name":"finish"' in t for t in texts)
