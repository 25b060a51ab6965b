"""The chat adapter: Anthropic and OpenAI message lines, Kimi CLI context files, exact round trips."""

from __future__ import annotations

import base64
import dataclasses
import io
import struct
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxc.errors import ValidationError
from ctxc.formats import dump, get_adapter, load
from ctxc.formats.dicts import ChatState, detect_dialect, encode_chat_message, parse_chat_message
from ctxc.model import (
    ImageBlock,
    Message,
    Record,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    Usage,
)
from tests.conftest import CORPUS, corpus_params

CHAT = get_adapter("chat")


def jsonl(*objs: Any, eol: bytes = b"\n") -> bytes:
    return b"".join(orjson.dumps(o) + eol for o in objs)


def load_bytes(data: bytes, input_format: str | None = None) -> Transcript:
    return load(io.BytesIO(data), input_format=input_format)


def dumped(t: Transcript) -> bytes:
    out = io.BytesIO()
    dump(t, out)
    return out.getvalue()


def records(*objs: dict[str, Any]) -> list[Record]:
    return [Record(line=n + 1, raw=orjson.dumps(o), eol=b"\n", data=o) for n, o in enumerate(objs)]


def png(width: int, height: int) -> str:
    """A real (tiny, header-correct) PNG, base64, so the image size comes from its header."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    body = struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + body).decode()


def assert_law(t: Transcript) -> None:
    adapter = get_adapter(t.format)
    for m in t.messages:
        assert adapter.encode_message(m) == m.raw, (m.line, m.raw)


# ------------------------------------------------------------------------------------------ corpus


@pytest.mark.parametrize("path", corpus_params("chat-messages/kimi-cli_*.jsonl"))
def test_kimi_corpus_round_trip(path: Path) -> None:
    data = path.read_bytes()
    t = load(path)
    assert t.format == "chat"
    assert dumped(t) == data
    assert_law(t)
    lines = [orjson.loads(x) for x in data.splitlines()]
    real = [o for o in lines if not o["role"].startswith("_")]
    assert len(t.messages) == len(real)
    assert [m.index for m in t.messages] == list(range(len(t.messages)))
    # Pseudo-lines are not messages, and each _usage line is one Usage of its token_count.
    message_lines = {m.line for m in t.messages}
    for n, o in enumerate(lines, 1):
        assert (n in message_lines) == (not o["role"].startswith("_"))
    usage = [(n, o["token_count"]) for n, o in enumerate(lines, 1) if o["role"] == "_usage"]
    assert [(u.line, u.input) for u in t.usage] == usage
    assert all(m.meta["dialect"] == "openai" for m in t.messages if m.role != "user")


@pytest.mark.parametrize("path", corpus_params("chat-messages/kimi-cli_*.jsonl"))
def test_kimi_corpus_pairing_and_names(path: Path) -> None:
    t = load(path)
    calls: dict[str, str] = {}
    for m in t.messages:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                assert b.id.startswith(b.name + ":")  # Kimi ids are <Tool>:<n>
                calls[b.id] = b.name
            elif isinstance(b, ToolResultBlock):
                assert m.role == "tool"
                assert calls.get(b.tool_use_id) == b.name
    assert calls
    assert sum(1 for m in t.messages if m.role == "tool") > 0


def test_kimi_corpus_known_counts() -> None:
    """The counts SOURCES.md gives for the main Kimi file."""
    path = CORPUS / "chat-messages" / "kimi-cli_context_swebench-sklearn-26323_d8447fa8.jsonl"
    if not path.is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    t = load(path)
    roles = [m.role for m in t.messages]
    assert (roles.count("user"), roles.count("assistant"), roles.count("tool")) == (1, 47, 46)
    assert len(t.usage) == 94
    assert max(u.input for u in t.usage) == 36444


# --------------------------------------------------------------------------------------- sniffing


def test_sniff_scores() -> None:
    plain = records({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})
    assert CHAT.sniff(plain) == 60
    openai = records({"role": "assistant", "content": None, "tool_calls": []})
    assert CHAT.sniff(openai) == 80
    anthropic = records(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": ""}]}
    )
    assert CHAT.sniff(anthropic) == 80
    kimi = records({"role": "_checkpoint", "id": 0}, {"role": "user", "content": "x"})
    assert CHAT.sniff(kimi) == 80
    envelope = records({"type": "response_item", "payload": {"role": "user"}, "role": "user"})
    assert CHAT.sniff(envelope) == 0
    codex_legacy = records(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    )
    assert CHAT.sniff(codex_legacy) == 0
    other = records({"type": "user", "message": {"role": "user", "content": "x"}, "uuid": "u"})
    assert CHAT.sniff(other) == 0
    dataset = records({"messages": [{"role": "user", "content": "x"}]})
    assert CHAT.sniff(dataset) == 0


def test_sniff_picks_chat_for_plain_lines() -> None:
    t = load_bytes(jsonl({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}))
    assert t.format == "chat"


# -------------------------------------------------------------------------------------- synthetic


def test_anthropic_image_block() -> None:
    line = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(640, 480)}},
        ],
    }
    t = load_bytes(jsonl(line))
    (m,) = t.messages
    assert m.meta["dialect"] == "anthropic"
    assert m.role == "user"
    img = m.blocks[1]
    assert isinstance(img, ImageBlock)
    assert (img.width, img.height, img.media_type) == (640, 480, "image/png")
    assert_law(t)


def test_openai_image_url_part() -> None:
    url = "data:image/png;base64," + png(32, 16)
    line = {
        "role": "user",
        "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}],
    }
    t = load_bytes(jsonl(line))
    (m,) = t.messages
    assert m.meta["dialect"] == "openai"
    img = m.blocks[1]
    assert isinstance(img, ImageBlock)
    assert (img.width, img.height) == (32, 16)
    assert_law(t)


def test_parallel_tool_calls_pair_and_name_results() -> None:
    lines = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "time", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": "12:00"},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "assistant", "content": "Sunny in Paris; noon in Oslo."},
    ]
    t = load_bytes(jsonl(*lines))
    assert [m.role for m in t.messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    call_a, call_b = t.messages[2].blocks
    assert isinstance(call_a, ToolUseBlock)
    assert isinstance(call_b, ToolUseBlock)
    assert (call_a.id, call_a.name, call_a.input) == ("call_a", "weather", {"city": "Paris"})
    assert call_b.input == {"city": "Oslo"}
    r_b, r_a = t.messages[3].blocks[0], t.messages[4].blocks[0]
    assert isinstance(r_b, ToolResultBlock)
    assert isinstance(r_a, ToolResultBlock)
    assert (r_b.tool_use_id, r_b.name, r_b.text) == ("call_b", "time", "12:00")
    assert (r_a.tool_use_id, r_a.name, r_a.text) == ("call_a", "weather", "sunny")
    assert t.messages[2].meta["content"] == "null"
    assert_law(t)
    assert dumped(t) == jsonl(*lines)


def test_legacy_function_call_pairs_positionally() -> None:
    lines = [
        {"role": "user", "content": "languages?"},
        {"role": "assistant", "content": None, "function_call": {"name": "langs", "arguments": "{}"}},
        {"role": "function", "name": "langs", "content": '["en","fr"]'},
        {"role": "assistant", "content": "English and French."},
    ]
    t = load_bytes(jsonl(*lines))
    call = t.messages[1].blocks[0]
    result = t.messages[2].blocks[0]
    assert isinstance(call, ToolUseBlock)
    assert isinstance(result, ToolResultBlock)
    assert call.id == "fc-2"  # synthesized from the call's line
    assert (result.tool_use_id, result.name) == ("fc-2", "langs")
    assert t.messages[2].role == "tool"
    assert t.messages[2].meta["source_role"] == "function"
    assert_law(t)
    # No id is invented in the written record.
    encoded = CHAT.encode_message(t.messages[2])
    assert "tool_call_id" not in encoded
    assert encoded["role"] == "function"


def test_developer_role_is_system() -> None:
    t = load_bytes(jsonl({"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}))
    m = t.messages[0]
    assert m.role == "system"
    assert m.meta["source_role"] == "developer"
    assert CHAT.encode_message(m) == {"role": "developer", "content": "rules"}


def test_checkpoint_line_kept_in_place() -> None:
    data = (
        b'{"role": "_checkpoint", "id": 0}\n'
        b'{"role":"user","content":"hi"}\n'
        b'{"role": "_checkpoint", "id": 1}\n'
        b'{"role": "_usage", "token_count": 120}\n'
        b'{"role":"assistant","content":[{"type":"text","text":"hello"}]}\n'
    )
    t = load_bytes(data)
    assert [m.line for m in t.messages] == [2, 5]
    assert [r.kind for r in t.records] == ["passthrough", "message", "passthrough", "passthrough", "message"]
    assert t.usage == (Usage(input=120, line=4),)
    assert dumped(t) == data


def test_last_line_without_newline() -> None:
    data = b'{"role":"user","content":"hi"}\n{"role":"assistant","content":"hello"}'
    t = load_bytes(data)
    assert len(t.messages) == 2
    assert t.records[-1].eol == b""
    assert dumped(t) == data


def test_crlf_lines() -> None:
    data = jsonl({"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, eol=b"\r\n")
    t = load_bytes(data)
    assert [m.text for m in t.messages] == ["hi", "yo"]
    assert dumped(t) == data
    assert_law(t)


def test_reasoning_content_is_thinking() -> None:
    line = {"role": "assistant", "content": "4", "reasoning_content": "2+2 is 4"}
    t = load_bytes(jsonl({"role": "user", "content": "2+2?"}, line))
    m = t.messages[1]
    assert m.blocks == (ThinkingBlock(text="2+2 is 4"), TextBlock(text="4"))
    assert_law(t)
    # Dropping the thinking drops the key, nothing else.
    assert encode_chat_message(_replace_blocks(m, m.blocks[1:])) == {"role": "assistant", "content": "4"}


def test_anthropic_tool_result_in_user_line() -> None:
    lines = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "use ls", "signature": "sig"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "a.txt"}],
                },
                {"type": "text", "text": "and now?"},
            ],
        },
    ]
    t = load_bytes(jsonl(*lines))
    assert all(m.meta["dialect"] == "anthropic" for m in t.messages[1:])
    user = t.messages[2]
    assert user.role == "user"
    result = user.blocks[0]
    assert isinstance(result, ToolResultBlock)
    assert (result.tool_use_id, result.name, result.text) == ("toolu_1", "bash", "a.txt")
    assert isinstance(t.messages[1].blocks[0], ThinkingBlock)
    assert_law(t)


def test_string_line_follows_file_dialect() -> None:
    lines = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]},
        {"role": "user", "content": "plain"},
    ]
    t = load_bytes(jsonl(*lines))
    assert t.messages[1].meta["dialect"] == "anthropic"
    assert t.messages[1].meta["dialect_from"] == "file"
    assert detect_dialect(lines[1]) is None


def test_usage_on_a_stored_response() -> None:
    line = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 100},
    }
    t = load_bytes(jsonl({"role": "user", "content": "hey"}, line))
    m = t.messages[1]
    assert m.usage == Usage(input=10, output=3, cache_read=100, line=2)
    assert t.usage == (m.usage,)
    assert m.meta["dialect"] == "anthropic"


def _replace_blocks(m: Message, blocks: tuple[Any, ...]) -> Message:
    return dataclasses.replace(m, blocks=blocks)


def test_changed_tool_result_keeps_envelope() -> None:
    lines = [
        {
            "role": "assistant",
            "content": [],
            "tool_calls": [{"id": "B:1", "type": "function", "function": {"name": "B", "arguments": "{}"}}],
        },
        {"role": "tool", "content": [{"type": "text", "text": "long output"}], "tool_call_id": "B:1"},
    ]
    t = load_bytes(jsonl(*lines))
    m = t.messages[1]
    (r,) = m.blocks
    assert isinstance(r, ToolResultBlock)
    short = _replace_blocks(m, (dataclasses.replace(r, text="[cut]"),))
    assert encode_chat_message(short) == {
        "role": "tool",
        "content": [{"type": "text", "text": "[cut]"}],
        "tool_call_id": "B:1",
    }
    # Removing every call from an assistant message removes tool_calls.
    a = t.messages[0]
    assert encode_chat_message(_replace_blocks(a, ())) == {"role": "assistant", "content": []}


def test_new_messages_without_raw() -> None:
    summary = Message(role="user", blocks=(TextBlock(text="summary"),))
    assert CHAT.encode_message(summary) == {"role": "user", "content": "summary"}
    anth = Message(role="assistant", blocks=(TextBlock(text="ok"),), meta={"dialect": "anthropic"})
    assert CHAT.encode_message(anth) == {"role": "assistant", "content": "ok"}
    tool = Message(role="tool", blocks=(ToolResultBlock(tool_use_id="c1", text="done"),))
    assert CHAT.encode_message(tool) == {"role": "tool", "content": "done", "tool_call_id": "c1"}
    call = Message(role="assistant", blocks=(ToolUseBlock(id="c1", name="f", input={"a": 1}),))
    assert CHAT.encode_message(call) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"type": "function", "id": "c1", "function": {"name": "f", "arguments": '{"a":1}'}}],
    }
    anth_tool = Message(
        role="tool", blocks=(ToolResultBlock(tool_use_id="c1", text="done"),), meta={"dialect": "anthropic"}
    )
    assert CHAT.encode_message(anth_tool) == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "done"}],
    }


def test_openai_tool_message_with_two_results_is_refused() -> None:
    two = Message(
        role="tool",
        blocks=(ToolResultBlock(tool_use_id="a", text="1"), ToolResultBlock(tool_use_id="b", text="2")),
        meta={"dialect": "openai"},
    )
    with pytest.raises(ValidationError):
        CHAT.encode_message(two)


def test_tool_call_without_id_gets_one_and_keeps_record() -> None:
    lines = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "r"},
    ]
    t = load_bytes(jsonl(*lines))
    call = t.messages[0].blocks[0]
    result = t.messages[1].blocks[0]
    assert isinstance(call, ToolUseBlock)
    assert isinstance(result, ToolResultBlock)
    assert call.id == "fc-1-0"
    assert (result.tool_use_id, result.name) == ("fc-1-0", "f")
    assert_law(t)


def test_unknown_roles_are_not_messages() -> None:
    state = ChatState()
    assert parse_chat_message({"role": "narrator", "content": "x"}, state, synth_id="s") is None
    assert parse_chat_message({"role": "_usage", "token_count": 3}, state, synth_id="s") is None


_text = st.text(max_size=40)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | _text,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_text, kids, max_size=3),
    max_leaves=8,
)


@st.composite
def openai_lines(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 4))):
        content = draw(
            st.none() | _text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, _text), max_size=3)
        )
        line: dict[str, Any] = {"role": "assistant", "content": content}
        if draw(st.booleans()):
            args = draw(_json.map(lambda v: orjson.dumps(v).decode()) | _text)
            line["tool_calls"] = [
                {"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": args}}
            ]
        if draw(st.booleans()):
            line["reasoning_content"] = draw(_text)
        out.append(line)
        if "tool_calls" in line:
            out.append({"role": "tool", "tool_call_id": f"c{n}", "content": draw(_text)})
    return out


@settings(max_examples=80, deadline=None)
@given(openai_lines())
def test_encode_law_on_generated_openai_lines(lines: list[dict[str, Any]]) -> None:
    data = jsonl({"role": "user", "content": "go"}, *lines)
    t = load_bytes(data, input_format="chat")
    assert dumped(t) == data
    assert_law(t)
