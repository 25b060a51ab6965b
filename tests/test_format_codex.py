"""The Codex rollout adapter: corpus round trips, the encode law, usage, boundaries and edits."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxc.formats import codex as codex_module
from ctxc.formats import dump, get_adapter, load
from ctxc.formats.base import run_timestamp
from ctxc.formats.codex_items import encode_compacted, history_messages
from ctxc.model import (
    Boundary,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    UnknownBlock,
    Usage,
)
from ctxc.reader import iter_records
from tests.conftest import CORPUS, corpus_files, corpus_params

ADAPTER = get_adapter("codex")
LEGACY = "codex/codex-session-viewer_legacy-format_example.jsonl"
LOCALPUSH = "codex/localpush_rollout_compacted_text-redacted_0.104.jsonl"
CLI_058 = "codex/codex-session-view_rollout_cli-0.58.jsonl"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _load_lines(*lines: dict[str, Any]) -> Transcript:
    data = b"".join(orjson.dumps(d) + b"\n" for d in lines)
    return load(io.BytesIO(data), input_format="codex")


def _reparse(record: dict[str, Any]) -> Message:
    """Read one encoded record back through the adapter."""
    (rec,) = iter_records(io.BytesIO(orjson.dumps(record) + b"\n"), "-")
    (item,) = ADAPTER.read([(0, rec)])
    assert isinstance(item, Message)
    return item


def _env(
    payload: dict[str, Any], rtype: str = "response_item", ts: str = "2026-01-01T00:00:00.000Z"
) -> dict[str, Any]:
    return {"timestamp": ts, "type": rtype, "payload": payload}


def _token_count(inp: int, cached: int, out: int, total_in: int, window: int = 200_000) -> dict[str, Any]:
    last = {
        "input_tokens": inp,
        "cached_input_tokens": cached,
        "output_tokens": out,
        "total_tokens": inp + out,
    }
    total = {"input_tokens": total_in, "cached_input_tokens": 0, "output_tokens": 0, "total_tokens": total_in}
    info = {"total_token_usage": total, "last_token_usage": last, "model_context_window": window}
    return _env({"type": "token_count", "info": info, "rate_limits": {}}, "event_msg")


# ------------------------------------------------------------------------------------------- corpus


@pytest.mark.parametrize("path", corpus_params("codex/*.jsonl"))
def test_corpus_sniffed_loaded_and_dumped_identically(path: Path) -> None:
    t = load(path)
    assert t.format == "codex"
    assert t.messages
    assert [m.index for m in t.messages] == list(range(len(t.messages)))
    assert all(len(m.records) == 1 for m in t.messages)
    buf = io.BytesIO()
    dump(t, buf)
    assert buf.getvalue() == path.read_bytes()


@pytest.mark.parametrize("path", corpus_params("codex/*.jsonl"))
def test_corpus_encode_law(path: Path) -> None:
    t = load(path)
    for m in t.messages:
        assert ADAPTER.encode_message(m) == m.raw, f"line {m.line}"
        assert t.records[m.records[0]].data == m.raw


@pytest.mark.parametrize("path", corpus_params("codex/*.jsonl"))
def test_corpus_encode_law_without_the_unchanged_shortcut(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-item rebuild alone must give the record back (the shortcut only saves work)."""
    t = load(path)
    monkeypatch.setattr(codex_module, "parse_item", lambda *a, **k: None)
    for m in t.messages:
        assert ADAPTER.encode_message(m) == m.raw, f"line {m.line}"


@pytest.mark.parametrize("path", corpus_params("codex/*.jsonl"))
def test_corpus_results_pair_with_earlier_calls(path: Path) -> None:
    t = load(path)
    names: dict[str, str] = {}
    unpaired: list[str] = []
    for m in t.messages:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                assert b.id
                names[b.id] = b.name
            elif isinstance(b, ToolResultBlock):
                if b.tool_use_id in names:
                    assert b.name == names[b.tool_use_id]
                else:
                    unpaired.append(b.tool_use_id)
    # Only the schema fixture has an orphan result, and only because its ids were blanked out.
    assert all("[trimmed for fixture]" in i for i in unpaired), unpaired


@pytest.mark.parametrize("path", corpus_params("codex/*.jsonl"))
def test_corpus_roles_and_non_messages(path: Path) -> None:
    t = load(path)
    lines = _lines(path)
    items = [d.get("payload", d) for d in lines if d.get("type") == "response_item" or "payload" not in d]
    conversation = [i for i in items if i.get("type") not in (None, "ghost_snapshot")]
    assert len(t.messages) == len(conversation)
    for m in t.messages:
        if m.meta.get("source_role") == "developer":
            assert m.role == "system"
        if m.role == "tool":
            assert m.kind == "tool_result"
        if m.meta["item_type"] == "reasoning":
            assert all(isinstance(b, ThinkingBlock) for b in m.blocks)
        if m.meta["item_type"] == "web_search_call":
            assert m.role == "assistant"
            assert isinstance(m.blocks[0], UnknownBlock)


@pytest.mark.parametrize("path", corpus_params("codex/*.jsonl"))
def test_corpus_usage_from_token_count(path: Path) -> None:
    t = load(path)
    by_line = {i + 1: d for i, d in enumerate(orjson.loads(x) for x in path.read_bytes().splitlines())}
    infos = [
        d["payload"]["info"]
        for d in by_line.values()
        if d.get("type") == "event_msg"
        and d["payload"].get("type") == "token_count"
        and d["payload"].get("info")
    ]
    distinct_calls: list[dict[str, Any]] = []
    for info in infos:
        if (
            not distinct_calls or info["total_token_usage"] != distinct_calls[-1]["total_token_usage"]
        ) and info["last_token_usage"]["total_tokens"]:
            distinct_calls.append(info)
    assert len(t.usage) == len(distinct_calls)
    if infos:
        assert t.usage
    for u in t.usage:
        info = by_line[u.line]["payload"]["info"]
        last = info["last_token_usage"]
        assert u.context == last["input_tokens"]  # Codex input_tokens already includes cached tokens
        assert u.cache_read == last["cached_input_tokens"]
        assert u.output == last["output_tokens"]
        assert u.window == info["model_context_window"]


def test_localpush_one_boundary_for_one_compaction() -> None:
    path = CORPUS / LOCALPUSH
    if not path.is_file():
        pytest.skip("corpus missing")
    t = load(path)
    lines = _lines(path)
    compacted = [i + 1 for i, d in enumerate(lines) if d["type"] == "compacted"]
    events = [
        i + 1
        for i, d in enumerate(lines)
        if d["type"] == "event_msg" and d["payload"]["type"] == "context_compacted"
    ]
    assert len(compacted) == 1
    assert len(events) == 1
    assert len(t.boundaries) == 1
    (b,) = t.boundaries
    assert b.kind == "codex_compacted"
    assert b.line == compacted[0]
    before = [u for u in t.usage if u.line < b.line][-1]
    assert b.pre_tokens == before.context + before.output


def test_localpush_replacement_history_messages() -> None:
    path = CORPUS / LOCALPUSH
    if not path.is_file():
        pytest.skip("corpus missing")
    (record,) = (d for d in _lines(path) if d["type"] == "compacted")
    history = record["payload"]["replacement_history"]
    msgs = history_messages(record["payload"], line=1788)
    assert len(msgs) == len([i for i in history if i.get("type") != "ghost_snapshot"])
    assert {m.role for m in msgs} <= {"user", "assistant", "system", "tool"}
    assert [m.raw for m in msgs] == [i for i in history if i.get("type") != "ghost_snapshot"]


def test_legacy_file_parsed() -> None:
    path = CORPUS / LEGACY
    if not path.is_file():
        pytest.skip("corpus missing")
    t = load(path)
    assert t.messages
    assert all(m.meta["dialect"] == "legacy" for m in t.messages)
    assert all("timestamp" not in m.raw for m in t.messages)  # bare items, no envelope
    shells = [b for m in t.messages for b in m.blocks if isinstance(b, ToolUseBlock) and b.name == "shell"]
    assert shells
    for call in shells:
        assert isinstance(call.input, dict)
        assert isinstance(call.input["command"], list)
    # {"record_type": "state"} markers and the header stay as passthrough records.
    assert sum(1 for r in t.records if r.kind != "message") == len(t.records) - len(t.messages)


def test_codex_sniff_does_not_claim_other_corpus_formats() -> None:
    others = [p for p in corpus_files() if p.parent.name != "codex"]
    if not others:
        pytest.skip("corpus missing")
    for path in others:
        with path.open("rb") as handle:
            sample = [r for _, r in zip(range(40), iter_records(handle, str(path)), strict=False)]
        assert ADAPTER.sniff(sample) < 50, path.name


# ---------------------------------------------------------------------------------- synthetic lines


def test_item_mapping_and_pairing() -> None:
    t = _load_lines(
        _env({"id": "s", "timestamp": "x", "cwd": "/"}, "session_meta"),
        _env({"cwd": "/", "model": "gpt-5"}, "turn_context"),
        _env({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]}),
        _env({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
        _env({"type": "user_message", "message": "hi", "images": []}, "event_msg"),
        _env(
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "think"}],
                "encrypted_content": "E",
            }
        ),
        _env({"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}', "call_id": "c1"}),
        _env(
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": '{"output":"a\\n","metadata":{"exit_code":1}}',
            }
        ),
        _env(
            {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch", "call_id": "c2"}
        ),
        _env({"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"}),
        _env(
            {
                "type": "local_shell_call",
                "call_id": "c3",
                "status": "completed",
                "action": {"type": "exec", "command": ["pwd"]},
            }
        ),
        _env({"type": "function_call_output", "call_id": "c3", "output": "/"}),
        _env({"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}}),
        _env({"type": "ghost_snapshot", "ghost_commit": {"id": "g"}}),
        _env(
            {
                "type": "message",
                "role": "assistant",
                "phase": "final_answer",
                "content": [{"type": "output_text", "text": "ok"}],
            }
        ),
    )
    roles = [(m.role, m.meta["item_type"]) for m in t.messages]
    assert roles == [
        ("system", "message"),
        ("user", "message"),
        ("assistant", "reasoning"),
        ("assistant", "function_call"),
        ("tool", "function_call_output"),
        ("assistant", "custom_tool_call"),
        ("tool", "custom_tool_call_output"),
        ("assistant", "local_shell_call"),
        ("tool", "function_call_output"),
        ("assistant", "web_search_call"),
        ("assistant", "message"),
    ]
    m = t.messages
    assert m[0].meta["source_role"] == "developer"
    assert m[2].blocks == (ThinkingBlock(text="think", raw={"type": "summary_text", "text": "think"}),)
    call = m[3].blocks[0]
    assert isinstance(call, ToolUseBlock)
    assert call.input == {"command": ["ls"]}
    assert call.id == "c1"
    result = m[4].blocks[0]
    assert isinstance(result, ToolResultBlock)
    assert result.text == '{"output":"a\\n","metadata":{"exit_code":1}}'  # the whole string the model sees
    assert result.name == "shell"
    assert m[4].meta["exit_code"] == 1
    assert m[5].blocks[0] == ToolUseBlock("c2", "apply_patch", "*** Begin Patch", raw=m[5].raw["payload"])
    assert isinstance(m[6].blocks[0], ToolResultBlock)
    assert m[6].blocks[0].name == "apply_patch"
    shell = m[7].blocks[0]
    assert isinstance(shell, ToolUseBlock)
    assert shell.name == "local_shell"
    assert shell.input["command"] == ["pwd"]
    assert isinstance(m[8].blocks[0], ToolResultBlock)
    assert m[8].blocks[0].name == "local_shell"
    assert isinstance(m[9].blocks[0], UnknownBlock)
    assert "q" in m[9].blocks[0].text
    assert m[10].meta["phase"] == "final_answer"
    for msg in t.messages:
        assert ADAPTER.encode_message(msg) == msg.raw


def test_reasoning_without_summary_and_output_shapes() -> None:
    t = _load_lines(
        _env({"type": "reasoning", "summary": [], "content": None, "encrypted_content": "E"}),
        _env({"type": "custom_tool_call", "name": "view", "input": "x", "call_id": "c"}),
        _env(
            {
                "type": "custom_tool_call_output",
                "call_id": "c",
                "output": [
                    {"type": "input_text", "text": "see"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                ],
            }
        ),
        _env(
            {"type": "function_call_output", "call_id": "c", "output": {"type": "input_text", "text": "one"}}
        ),
    )
    thinking, _, listed, single = t.messages
    assert thinking.blocks == (ThinkingBlock(text=""),)  # encrypted only: nothing countable
    lr = listed.blocks[0]
    assert isinstance(lr, ToolResultBlock)
    assert lr.text == "see"
    assert len(lr.images) == 1
    sr = single.blocks[0]
    assert isinstance(sr, ToolResultBlock)
    assert sr.text == "one"
    for msg in t.messages:
        assert ADAPTER.encode_message(msg) == msg.raw
    # Edits keep each output's shape.
    new_list = ADAPTER.encode_message(
        dataclasses.replace(listed, blocks=(dataclasses.replace(lr, text="cut"),))
    )
    assert new_list["payload"]["output"][0] == {"type": "input_text", "text": "cut"}
    assert new_list["payload"]["output"][1] == lr.images[0].raw
    new_single = ADAPTER.encode_message(
        dataclasses.replace(single, blocks=(dataclasses.replace(sr, text="two"),))
    )
    assert new_single["payload"]["output"] == {"type": "input_text", "text": "two"}


def test_token_count_repeats_are_one_usage() -> None:
    t = _load_lines(
        _env({"type": "token_count", "info": None, "rate_limits": {}}, "event_msg"),
        _token_count(1000, 800, 50, total_in=1000),
        _token_count(1000, 800, 50, total_in=1000),  # rate-limit refresh: same call
        _token_count(1500, 1000, 20, total_in=2500),
        _env(
            {"type": "token_count", "input_tokens": 40, "cached_input_tokens": 10, "output_tokens": 5},
            "event_msg",
        ),
    )
    assert t.usage == (
        Usage(input=200, output=50, cache_read=800, line=2, window=200_000),
        Usage(input=500, output=20, cache_read=1000, line=4, window=200_000),
        Usage(input=30, output=5, cache_read=10, line=5),
    )
    assert t.usage[0].context == 1000


def test_compaction_boundaries_not_double_counted() -> None:
    history = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "sum"}]}]
    t = _load_lines(
        _token_count(1000, 0, 100, total_in=1000),
        encode_compacted("summary", history, "2026-01-01T00:00:01.000Z"),
        _env({"type": "context_compacted"}, "event_msg"),
        _env({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}),
        _env({"type": "context_compacted"}, "event_msg"),  # a compaction with no compacted record
    )
    assert t.boundaries == (
        Boundary(kind="codex_compacted", line=2, pre_tokens=1100, resets=True),
        Boundary(kind="codex_context_compacted", line=5, pre_tokens=1100),
    )
    assert len(t.messages) == 1


def test_encode_compacted_shape() -> None:
    rec = encode_compacted("m", [{"type": "message", "role": "user", "content": []}], "T")
    assert rec == {
        "timestamp": "T",
        "type": "compacted",
        "payload": {
            "message": "m",
            "replacement_history": [{"type": "message", "role": "user", "content": []}],
        },
    }
    assert [m.raw for m in history_messages(rec["payload"])] == rec["payload"]["replacement_history"]


# ------------------------------------------------------------------------------------------ editing


def _one(line: dict[str, Any]) -> Message:
    (m,) = _load_lines(line).messages
    return m


def test_edited_text_keeps_part_type_and_envelope() -> None:
    line = _env(
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "long"}],
            "id": "x",
        },
        ts="T1",
    )
    line["ordinal"] = 3
    m = _one(line)
    (block,) = m.blocks
    assert isinstance(block, TextBlock)
    out = ADAPTER.encode_message(dataclasses.replace(m, blocks=(dataclasses.replace(block, text="short"),)))
    assert out == {
        **line,
        "payload": {**line["payload"], "content": [{"type": "input_text", "text": "short"}]},
    }
    added = ADAPTER.encode_message(dataclasses.replace(m, blocks=(block, TextBlock("more"))))
    assert added["payload"]["content"][1] == {"type": "input_text", "text": "more"}


def test_edited_tool_call_and_result_read_back() -> None:
    call = _one(
        _env({"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "c"})
    )
    (block,) = call.blocks
    assert isinstance(block, ToolUseBlock)
    out = ADAPTER.encode_message(
        dataclasses.replace(call, blocks=(dataclasses.replace(block, input={"command": []}),))
    )
    assert out["payload"]["arguments"] == '{"command":[]}'
    assert _reparse(out).blocks[0] == dataclasses.replace(block, input={"command": []}, raw=out["payload"])

    res = _one(_env({"type": "function_call_output", "call_id": "c", "output": "x" * 100}))
    (rblock,) = res.blocks
    assert isinstance(rblock, ToolResultBlock)
    edited = dataclasses.replace(res, blocks=(dataclasses.replace(rblock, text="[cut]"),))
    out = ADAPTER.encode_message(edited)
    assert out["payload"] == {"type": "function_call_output", "call_id": "c", "output": "[cut]"}
    assert out["timestamp"] == res.raw["timestamp"]

    patch = _one(
        _env(
            {
                "type": "custom_tool_call",
                "name": "apply_patch",
                "input": "A",
                "call_id": "p",
                "status": "completed",
            }
        )
    )
    (pblock,) = patch.blocks
    assert isinstance(pblock, ToolUseBlock)
    out = ADAPTER.encode_message(dataclasses.replace(patch, blocks=(dataclasses.replace(pblock, input="B"),)))
    assert out["payload"] == {**patch.raw["payload"], "input": "B"}


def test_edited_reasoning_summary() -> None:
    m = _one(
        _env(
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": "b"}],
                "content": [{"type": "reasoning_text", "text": "raw"}],
                "encrypted_content": "E",
            }
        )
    )
    assert [b.text for b in m.blocks if isinstance(b, ThinkingBlock)] == ["a", "b", "raw"]
    out = ADAPTER.encode_message(dataclasses.replace(m, blocks=(m.blocks[0], m.blocks[2])))
    assert out["payload"]["summary"] == [{"type": "summary_text", "text": "a"}]
    assert out["payload"]["content"] == [{"type": "reasoning_text", "text": "raw"}]
    assert out["payload"]["encrypted_content"] == "E"


def test_legacy_bare_item_encodes_bare() -> None:
    bare = {"type": "function_call_output", "call_id": "c", "output": "long"}
    state = {"record_type": "state"}
    t = load(io.BytesIO(orjson.dumps(state) + b"\n" + orjson.dumps(bare) + b"\n"), input_format="codex")
    (m,) = t.messages
    assert m.meta["dialect"] == "legacy"
    (b,) = m.blocks
    assert isinstance(b, ToolResultBlock)
    assert ADAPTER.encode_message(dataclasses.replace(m, blocks=(dataclasses.replace(b, text="x"),))) == {
        **bare,
        "output": "x",
    }


def test_mismatched_blocks_are_refused() -> None:
    call = _one(_env({"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}))
    with pytest.raises(ValueError, match="exactly one"):
        ADAPTER.encode_message(dataclasses.replace(call, blocks=(TextBlock("no"),)))
    with pytest.raises(ValueError, match="tool"):
        ADAPTER.encode_message(Message(role="tool", blocks=(TextBlock("orphan"),)))
    with pytest.raises(ValueError, match="image"):
        ADAPTER.encode_message(Message(role="user", blocks=(ImageBlock(),)))


# ------------------------------------------------------------------------------------- new messages


def test_new_messages() -> None:
    summary = ADAPTER.encode_message(Message(role="system", blocks=(TextBlock("summary"),)))
    assert summary == {
        "timestamp": run_timestamp(),  # no neighbour to take it from: the run's time, never 1970
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "summary"}],
        },
    }
    reply = ADAPTER.encode_message(
        Message(
            role="assistant", blocks=(TextBlock("done"),), meta={"timestamp": "T", "phase": "final_answer"}
        )
    )
    assert reply["timestamp"] == "T"
    assert reply["payload"] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "done"}],
        "phase": "final_answer",
    }
    legacy = ADAPTER.encode_message(
        Message(role="user", blocks=(TextBlock("hi"),), meta={"dialect": "legacy"})
    )
    assert legacy == {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    call = ADAPTER.encode_message(
        Message(role="assistant", blocks=(ToolUseBlock("c9", "shell", {"command": ["ls"]}),))
    )
    assert call["payload"] == {
        "type": "function_call",
        "name": "shell",
        "arguments": '{"command":["ls"]}',
        "call_id": "c9",
    }
    result = ADAPTER.encode_message(Message(role="tool", blocks=(ToolResultBlock("c9", "out"),)))
    assert result["payload"] == {"type": "function_call_output", "call_id": "c9", "output": "out"}
    think = ADAPTER.encode_message(Message(role="assistant", blocks=(ThinkingBlock("hmm"),)))
    assert think["payload"]["summary"] == [{"type": "summary_text", "text": "hmm"}]
    for rec in (summary, reply, call, result, think):
        back = _reparse(rec)
        assert back.raw == rec
        assert ADAPTER.encode_message(back) == rec


@given(
    role=st.sampled_from(["system", "user", "assistant"]), texts=st.lists(st.text(), min_size=1, max_size=4)
)
def test_new_text_messages_read_back(role: str, texts: list[str]) -> None:
    msg = Message(role=role, blocks=tuple(TextBlock(t) for t in texts))  # type: ignore[arg-type]
    back = _reparse(ADAPTER.encode_message(msg))
    assert back.role == role
    assert [b.text for b in back.blocks if isinstance(b, TextBlock)] == texts
