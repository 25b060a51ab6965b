"""Converting messages of any format to Anthropic or OpenAI chat lines, keeping every tool pairing."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxc.convert import convert_transcript, to_anthropic, to_openai
from ctxc.errors import FormatError
from ctxc.formats import get_adapter, load
from ctxc.model import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
)
from tests.conftest import CORPUS, corpus_params

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 24).decode()


def jsonl(*objs: Any) -> bytes:
    return b"".join(orjson.dumps(o) + b"\n" for o in objs)


def load_bytes(data: bytes) -> Transcript:
    return load(io.BytesIO(data))


def msg(role: Any, *blocks: Any, **meta: Any) -> Message:
    return Message(role=role, blocks=tuple(blocks), meta=meta)


def call(cid: str, name: str = "f", args: Any = None) -> ToolUseBlock:
    return ToolUseBlock(id=cid, name=name, input=args if args is not None else {"q": cid})


def result(cid: str, text: str = "ok") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=cid, text=text)


# -------------------------------------------------------------------------------- pairing checkers


def anthropic_pairs(lines: list[dict[str, Any]]) -> tuple[list[str], int]:
    """Check that every tool_result sits in the user message right after the assistant message with its
    tool_use, before any text. Returns the paired ids in order and the number of orphans (results whose
    id no earlier tool_use has)."""
    paired: list[str] = []
    orphans = 0
    seen: set[str] = set()
    for i, line in enumerate(lines):
        assert set(line) == {"role", "content"}
        content = line["content"]
        assert isinstance(content, str | list)
        # The API refuses a message without content or with an empty text block (system is no message).
        assert line["role"] == "system" or content, (i, line)
        assert all(b.get("text") != "" for b in content if isinstance(b, dict)), (i, line)
        if not isinstance(content, list):
            continue
        kinds = [b["type"] for b in content]
        results = [b for b in content if b["type"] == "tool_result"]
        if results:
            assert line["role"] == "user"
            assert kinds[: len(results)] == ["tool_result"] * len(results), kinds
        for b in results:
            rid = b["tool_use_id"]
            if rid not in seen:
                orphans += 1
                continue
            prev = lines[i - 1]
            assert prev["role"] == "assistant", (i, rid)
            prev_ids = [x["id"] for x in prev["content"] if isinstance(x, dict) and x["type"] == "tool_use"]
            assert rid in prev_ids, (i, rid, prev_ids)
            paired.append(rid)
        if line["role"] == "assistant":
            assert "tool_result" not in kinds
            seen.update(b["id"] for b in content if b["type"] == "tool_use")
    return paired, orphans


def openai_pairs(lines: list[dict[str, Any]]) -> tuple[list[str], int]:
    """Check that every tool message follows the assistant message holding its call, with only tool
    messages between. Returns the paired ids in order and the number of orphans."""
    window: set[str] = set()
    seen: set[str] = set()
    paired: list[str] = []
    orphans = 0
    for line in lines:
        role = line["role"]
        if role == "tool":
            rid = line["tool_call_id"]
            assert isinstance(line["content"], str)
            if rid not in seen:
                orphans += 1
                continue
            assert rid in window, (rid, window)
            window.discard(rid)
            paired.append(rid)
            continue
        window = set()
        assert "tool_call_id" not in line
        if role == "assistant":
            for c in line.get("tool_calls", []):
                assert c["type"] == "function"
                assert isinstance(c["function"]["arguments"], str)
                window.add(c["id"])
                seen.add(c["id"])
    return paired, orphans


def source_orphans(messages: tuple[Message, ...]) -> int:
    """Results in the source whose id no earlier call has."""
    seen: set[str] = set()
    orphans = 0
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolResultBlock) and b.tool_use_id not in seen:
                orphans += 1
        seen.update(b.id for b in m.blocks if isinstance(b, ToolUseBlock))
    return orphans


# ------------------------------------------------------------------------------------ synthetic


ANTHROPIC_LINES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Check two files."},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "read both", "signature": "SIG=="},
            {"type": "text", "text": "Reading both."},
            {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a"}},
            {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {"path": "b"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_a",
                "content": [
                    {"type": "text", "text": "A"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                ],
                "is_error": True,
            },
            {"type": "text", "text": "Also summarise."},
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "A failed, B is B."}]},
]


def test_anthropic_multi_block_to_openai() -> None:
    t = load_bytes(jsonl(*ANTHROPIC_LINES))
    lines = to_openai(t.messages)
    assert [x["role"] for x in lines] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
        "assistant",
    ]
    assistant = lines[2]
    assert assistant["content"] == "Reading both."
    assert assistant["reasoning_content"] == "read both"
    assert [c["id"] for c in assistant["tool_calls"]] == ["toolu_a", "toolu_b"]
    assert assistant["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"path":"a"}'}
    assert [x["tool_call_id"] for x in lines[3:5]] == ["toolu_b", "toolu_a"]
    assert lines[4]["content"] == "A"
    # The image a tool returned follows the tool messages; then the text that came with the results.
    assert lines[5]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    ]
    assert lines[6] == {"role": "user", "content": "Also summarise."}
    assert openai_pairs(lines) == (["toolu_b", "toolu_a"], 0)


def test_anthropic_multi_block_to_anthropic() -> None:
    t = load_bytes(jsonl(*ANTHROPIC_LINES))
    lines = to_anthropic(t.messages)
    assert [x["role"] for x in lines] == ["system", "user", "assistant", "user", "assistant"]
    assert lines[2]["content"][0] == {"type": "thinking", "thinking": "read both", "signature": "SIG=="}
    user = lines[3]["content"]
    assert [b["type"] for b in user] == ["tool_result", "tool_result", "text"]
    assert user[1]["is_error"] is True
    assert user[1]["content"][1]["source"]["data"] == PNG
    assert "is_error" not in user[0]
    assert anthropic_pairs(lines)[1] == 0
    assert len(anthropic_pairs(lines)[0]) == 2


def test_openai_parallel_calls_to_anthropic_merge_results() -> None:
    lines_in = [
        {"role": "developer", "content": "rules"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "two lookups",
            "tool_calls": [
                {"id": "Bash:1", "type": "function", "function": {"name": "Bash", "arguments": '{"c": 1}'}},
                {"id": "Bash_1", "type": "function", "function": {"name": "Bash", "arguments": "not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "Bash:1", "content": "one"},
        {"role": "tool", "tool_call_id": "Bash_1", "content": "two"},
        {"role": "assistant", "content": "done"},
    ]
    t = load_bytes(jsonl(*lines_in))
    lines = to_anthropic(t.messages)
    assert [x["role"] for x in lines] == ["system", "user", "assistant", "user", "assistant"]
    assert lines[0] == {"role": "system", "content": "rules"}
    assert lines[1]["content"][1] == {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    thinking, use1, use2 = lines[2]["content"]
    assert thinking == {"type": "thinking", "thinking": "two lookups"}
    # Ids made valid for the Anthropic API, distinct, and the same in call and result.
    assert (use1["id"], use2["id"]) == ("Bash_1_2", "Bash_1") or (use1["id"], use2["id"]) == (
        "Bash_1",
        "Bash_1_2",
    )
    assert use1["id"] != use2["id"]
    assert use2["input"] == "not json"
    assert [b["tool_use_id"] for b in lines[3]["content"]] == [use1["id"], use2["id"]]
    assert [b["content"] for b in lines[3]["content"]] == ["one", "two"]
    assert anthropic_pairs(lines)[1] == 0
    assert len(anthropic_pairs(lines)[0]) == 2
    # And to OpenAI: the developer role stays, the ids stay as they were.
    back = to_openai(t.messages)
    assert back[0] == {"role": "developer", "content": "rules"}
    assert back[2]["tool_calls"][1]["function"]["arguments"] == "not json"
    assert openai_pairs(back) == (["Bash:1", "Bash_1"], 0)


def test_split_calls_and_late_results_are_grouped() -> None:
    """Codex-style: each parallel call its own message, results later, one after a user interjection."""
    messages = [
        msg("user", TextBlock(text="go")),
        msg("assistant", ThinkingBlock(text="")),
        msg("assistant", call("c1")),
        msg("assistant", call("c2")),
        msg("tool", result("c1")),
        msg("user", TextBlock(text="hurry")),
        msg("tool", result("c2")),
        msg("assistant", TextBlock(text="done")),
    ]
    oa = to_openai(messages)
    assert [x["role"] for x in oa] == ["user", "assistant", "assistant", "tool", "tool", "user", "assistant"]
    assert oa[1] == {"role": "assistant", "content": ""}  # the empty reasoning item has nothing to carry
    assert [c["id"] for c in oa[2]["tool_calls"]] == ["c1", "c2"]
    assert openai_pairs(oa) == (["c1", "c2"], 0)
    an = to_anthropic(messages)
    # The empty reasoning item is no message at all: the Anthropic API refuses one without content.
    assert [x["role"] for x in an] == ["user", "assistant", "user", "user", "assistant"]
    assert [b["tool_use_id"] for b in an[2]["content"]] == ["c1", "c2"]
    assert anthropic_pairs(an) == (["c1", "c2"], 0)


def test_no_empty_text_or_message_in_the_anthropic_dialect() -> None:
    """OpenAI logs write ``"content": ""`` beside tool calls, and an empty user turn happens: the Anthropic
    API refuses an empty text block and a message without content, so neither is written."""
    t = load_bytes(
        jsonl(
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
            {"role": "user", "content": ""},
            {"role": "assistant", "content": "one file"},
        )
    )  # fmt: skip
    an = to_anthropic(t.messages)
    assert an[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "ls", "input": {}}]
    assert [x["role"] for x in an] == ["user", "assistant", "user", "assistant"]
    assert anthropic_pairs(an) == (["c1"], 0)


def test_orphan_result_stays_in_place() -> None:
    messages = [msg("tool", result("gone", "lost")), msg("user", TextBlock(text="next"))]
    oa = to_openai(messages)
    assert oa == [
        {"role": "tool", "tool_call_id": "gone", "content": "lost"},
        {"role": "user", "content": "next"},
    ]
    assert openai_pairs(oa) == ([], 1)
    an = to_anthropic(messages)
    assert an[0] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "gone", "content": "lost"}],
    }
    assert anthropic_pairs(an) == ([], 1)


def test_checkers_catch_a_misplaced_result() -> None:
    calls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"arguments": ""}}],
    }
    with pytest.raises(AssertionError):
        openai_pairs(
            [calls, {"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "a", "content": ""}]
        )
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}
    res = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": ""}]}
    with pytest.raises(AssertionError):
        anthropic_pairs([use, {"role": "assistant", "content": "x"}, res])


def test_thinking_signature_from_other_raw_shapes() -> None:
    pi_thinking = ThinkingBlock(
        text="hmm", raw={"type": "thinking", "thinking": "hmm", "thinkingSignature": "S"}
    )
    redacted = ThinkingBlock(text="", raw={"type": "redacted_thinking", "data": "XYZ"})
    encrypted = ThinkingBlock(text="", raw={"type": "reasoning", "encrypted_content": "E"})
    lines = to_anthropic([msg("assistant", pi_thinking, redacted, encrypted, TextBlock(text="ok"))])
    assert lines[0]["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": "S"},
        {"type": "redacted_thinking", "data": "XYZ"},
        {"type": "text", "text": "ok"},
    ]


def test_images_between_dialects() -> None:
    pi_image = ImageBlock(media_type="image/png", raw={"type": "image", "data": PNG, "mimeType": "image/png"})
    data_url = ImageBlock(raw={"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{PNG}"}})
    bare = ImageBlock()
    an = to_anthropic([msg("user", pi_image, data_url, bare)])
    assert an[0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
        {"type": "text", "text": "[image]"},
    ]
    oa = to_openai([msg("user", pi_image)])
    assert oa[0]["content"] == [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]


def test_legacy_function_calls_become_tool_calls() -> None:
    line = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": '{"a": 1}'}},
            {"role": "function", "name": "f", "content": "r"},
            {"role": "assistant", "content": "y"},
        ]
    }
    t = load_bytes(jsonl(line))
    oa = to_openai(t.messages)
    assert oa[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "fc-1-1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
        ],
    }
    assert oa[2] == {"role": "tool", "tool_call_id": "fc-1-1", "content": "r"}
    assert anthropic_pairs(to_anthropic(t.messages)) == (["fc-1-1"], 0)


def test_bad_target() -> None:
    t = load_bytes(jsonl({"role": "user", "content": "x"}))
    with pytest.raises(FormatError):
        convert_transcript(t, "chat-gemini")


# ---------------------------------------------------------------------------------------- files


def _reload(data: bytes) -> Transcript:
    assert data.endswith(b"\n")
    assert b"\r" not in data.replace(b"\\r", b"")
    return load_bytes(data)


def _counts(t: Transcript) -> tuple[int, int]:
    return _counts_of(t.messages)


def _counts_of(messages: tuple[Message, ...]) -> tuple[int, int]:
    blocks = [b for m in messages for b in m.blocks]
    # A terminal call (OpenHands finish) is converted to text: a chat API call must be answered.
    return sum(isinstance(b, ToolUseBlock) and not b.terminal for b in blocks), sum(
        isinstance(b, ToolResultBlock) for b in blocks
    )


def _check_file_conversion(t: Transcript) -> None:
    for target in ("chat-anthropic", "chat-openai"):
        data = convert_transcript(t, target)
        back = _reload(data)
        assert back.format == "chat"
        assert back.conversations == t.conversations
        assert _counts(back) == _counts(t), target
        objs = [orjson.loads(x) for x in data.splitlines()]
        assert not [o for o in objs if o["role"] == "system" and not o["content"]], target
        for n in range(t.conversations):
            if t.conversations > 1:
                start = objs.index({"role": "_conversation", "index": n})
                rest = objs[start + 1 :]
                end = next((k for k, o in enumerate(rest) if o["role"] == "_conversation"), len(rest))
                lines = rest[:end]
            else:
                lines = objs
            check = openai_pairs if target == "chat-openai" else anthropic_pairs
            paired, orphans = check(lines)
            # Conversion makes no new orphan: every result whose call came first still follows it.
            assert orphans == source_orphans(t.conversation(n)), (target, n)
            assert len(paired) + orphans == _counts_of(t.conversation(n))[1]


@pytest.mark.parametrize("path", corpus_params("chat-messages/kimi-cli_*.jsonl"))
def test_kimi_files_convert(path: Path) -> None:
    t = load(path)
    _check_file_conversion(t)
    lines = [orjson.loads(x) for x in convert_transcript(t, "chat-anthropic").splitlines()]
    ids = [
        b["id"]
        for x in lines
        if isinstance(x["content"], list)
        for b in x["content"]
        if b["type"] == "tool_use"
    ]
    assert ids
    assert all(":" not in i for i in ids)


def test_functionary_converts_with_conversation_markers() -> None:
    path = CORPUS / "conversation-datasets" / "functionary_small_tests_function-call.jsonl"
    if not path.is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    t = load(path)
    _check_file_conversion(t)
    back = _reload(convert_transcript(t, "chat-openai"))
    assert [len(back.conversation(n)) for n in range(20)] == [len(t.conversation(n)) for n in range(20)]
    assert back.records[0].data == {"role": "_conversation", "index": 0}


_EXPECTED_FORMAT = {
    "claude-code": "claude-code",
    "codex": "codex",
    "conversation-datasets": "dataset",
    "chat-messages/kimi-cli": "chat",
    "chat-messages/pi-coding-agent": "pi",
    "agent-trajectories/openhands": "openhands",
    "agent-trajectories/swe-agent": "swe-agent",
}


@pytest.mark.parametrize("path", corpus_params())
def test_every_corpus_format_converts(path: Path) -> None:
    rel = str(path.relative_to(CORPUS))
    name = next(v for k, v in _EXPECTED_FORMAT.items() if rel.startswith(k))
    if get_adapter(name).description == "skeleton":
        pytest.skip(f"the {name} adapter is not written yet")
    t = load(path)
    assert t.format == name
    assert t.messages
    _check_file_conversion(t)


def test_no_empty_system_message() -> None:
    """Claude Code's turn_duration and stop_hook_summary records are system records without text: a
    conversion writes no empty system message for them, in either dialect."""
    base = {"sessionId": "s", "isSidechain": False, "timestamp": "2026-01-01T00:00:00Z"}
    t = load_bytes(
        jsonl(
            base | {"type": "user", "uuid": "u1", "parentUuid": None,
                    "message": {"role": "user", "content": "hi"}},
            base | {"type": "assistant", "uuid": "a1", "parentUuid": "u1",
                    "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}},
            base | {"type": "system", "subtype": "turn_duration", "durationMs": 5, "uuid": "s1",
                    "parentUuid": "a1"},
            base | {"type": "system", "subtype": "informational", "content": "note", "uuid": "s2",
                    "parentUuid": "s1"},
        )
    )  # fmt: skip
    assert t.format == "claude-code"
    for convert in (to_openai, to_anthropic):
        lines = convert(t.messages)
        assert [x["role"] for x in lines] == ["user", "assistant", "system"]
        assert lines[-1]["content"] == "note"
