"""Tool-call pairing checks (ctxc.validate), loose and strict, message by message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLES, run
from hypothesis import given
from hypothesis import strategies as st

from ctxc.model import Block, Message, Role, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.validate import Pairing, pairing_problems


def msg(role: Role, *blocks: Block, index: int = 0, conversation: int = 0) -> Message:
    return Message(role=role, blocks=blocks, line=index + 1, index=index, conversation=conversation)


def call(tid: str) -> ToolUseBlock:
    return ToolUseBlock(id=tid, name=f"tool_{tid}", input={})


def result(tid: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tid, text="ok")


def codes(messages: list[Message], strict: bool) -> list[tuple[str, int, str]]:
    return [(p.code, p.index, p.tool_id) for p in pairing_problems(messages, strict=strict)]


def test_each_problem_loose_and_strict() -> None:
    messages = [
        msg("user", TextBlock("go"), index=0),
        msg("assistant", call("a"), call("b"), index=1),
        msg("user", result("a"), index=2),
        msg("assistant", TextBlock("thinking aloud"), index=3),
        msg("user", result("b"), result("a"), result("z"), index=4),  # late, duplicate, orphan
        msg("assistant", call("c"), index=5),  # never answered
    ]
    assert codes(messages, strict=False) == [
        ("duplicate_result", 4, "a"),
        ("orphan_result", 4, "z"),
        ("unanswered_call", 5, "c"),
    ]
    assert codes(messages, strict=True) == [
        ("unanswered_call", 1, "b"),  # no result before the next assistant turn (message 3)
        ("duplicate_result", 4, "a"),
        ("orphan_result", 4, "z"),
        ("result_not_adjacent", 4, "b"),
        ("unanswered_call", 5, "c"),
    ]


def test_consecutive_assistant_messages_are_one_turn_and_results_may_span_messages() -> None:
    messages = [
        msg("assistant", call("a"), index=0),
        msg("assistant", call("b"), index=1),  # Codex writes parallel calls as items of their own
        msg("tool", result("a"), index=2),
        msg("system", TextBlock("a reminder"), index=3),  # does not end the turn
        msg("tool", result("b"), index=4),
    ]
    assert codes(messages, strict=True) == []


def test_a_reused_id_is_a_new_call_and_conversations_are_apart() -> None:
    messages = [
        msg("assistant", call("a"), index=0),
        msg("user", result("a"), index=1),
        msg("assistant", call("a"), index=2),  # replayed logs reuse ids: this one is unanswered
        msg("user", result("a"), index=0, conversation=1),  # another conversation's orphan
    ]
    problems = pairing_problems(messages)
    assert [(p.code, p.conversation, p.index) for p in problems] == [
        ("duplicate_call", 0, 2),  # an API rejects the reused id itself (repair gives it a new one)
        ("unanswered_call", 0, 2),
        ("orphan_result", 1, 0),
    ]
    assert problems[1].message == "tool call 'a' (tool_a) is never answered"


ROLES: list[Role] = ["user", "assistant", "tool", "system"]
BLOCK = st.one_of(
    st.sampled_from("abc").map(call), st.sampled_from("abcd").map(result), st.just(TextBlock("x"))
)
MESSAGES = st.lists(
    st.tuples(st.sampled_from(ROLES), st.lists(BLOCK, max_size=3), st.integers(0, 1)), max_size=10
)


@given(MESSAGES, st.booleans())
def test_asking_twice_and_asking_midway_change_nothing(
    spec: list[tuple[Role, list[Block], int]], strict: bool
) -> None:
    messages = [msg(role, *blocks, index=i, conversation=c) for i, (role, blocks, c) in enumerate(spec)]
    pairing = Pairing(strict=strict)
    for i, m in enumerate(messages):
        pairing.add(m)
        if i == len(messages) // 2:
            pairing.problems()  # what analyze may ask before the end: it must not mark anything
    assert pairing.problems() == pairing.problems() == pairing_problems(messages, strict=strict)
    found = pairing.problems()
    assert [(p.conversation, p.index) for p in found] == sorted((p.conversation, p.index) for p in found)


def test_a_terminal_call_awaits_no_result() -> None:
    """A call the adapter marked terminal (it ended the run) is never unanswered; an answer to it is fine."""
    from ctxc.repair import repair_messages

    finish = ToolUseBlock(id="f", name="finish", input={}, terminal=True)
    messages = [
        msg("user", TextBlock("go"), index=0),
        msg("assistant", call("a"), index=1),
        msg("tool", result("a"), index=2),
        msg("assistant", TextBlock("done"), finish, index=3),
    ]
    for strict in (False, True):
        assert codes(messages, strict) == []
        answered = [*messages, msg("tool", result("f"), index=4)]
        assert codes(answered, strict) == []
        # Followed by another turn, it is still not waiting for anything.
        assert codes([*messages, msg("user", TextBlock("again"), index=4)], strict) == []
    assert repair_messages(messages) == (tuple(messages), ())
    # The same call without the adapter's mark is a problem, and repair answers it.
    plain = [*messages[:3], msg("assistant", TextBlock("done"), call("f"), index=3)]
    assert codes(plain, True) == [("unanswered_call", 3, "f")]
    assert len(repair_messages(plain)[0]) == 5


def test_repair_of_a_result_repeated_in_one_message_keeps_the_first() -> None:
    """A duplicated result line that its format reads into the same message as the first (Claude Code
    joins consecutive user records) loses only the copy: the call stays answered."""
    from ctxc.repair import repair_messages

    messages = [
        msg("user", TextBlock("go"), index=0),
        msg("assistant", call("a"), index=1),
        msg("user", result("a"), result("a"), index=2),
        msg("assistant", TextBlock("done"), index=3),
    ]
    fixed, found = repair_messages(messages)
    assert [p.code for p in found] == ["duplicate_result"]
    assert fixed[2].blocks == (result("a"),)
    assert codes(list(fixed), True) == []


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_validate_warns_of_a_last_record_cut_off_and_exits_0(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # A log cut off mid-record (a crash, a full disk, or an agent still writing it) has lost its last
    # record: the reader leaves that line out without an error, so validate must say it did.
    complete = (SAMPLES / "chat-anthropic.jsonl").read_bytes()
    lines = complete.count(b"\n")
    log = tmp_path / "cut.jsonl"
    log.write_bytes(complete + b'{"role": "user", "content": "and now the docs, plea')
    code, out, _ = run(capsys, "validate", str(log), "-f", fmt)
    assert code == 0  # a session still being written is normal: a warning, not a problem
    said = f"{log}:{lines + 1}: cut off mid-record (no newline, not JSON): not read"
    if fmt == "json":
        [entry] = json.loads(out)["files"]
        assert entry["problems"] == []
        assert entry["messages"] == 19  # the complete lines are all read
        [warning] = entry["warnings"]
        assert warning["code"] == "cut_off"
        assert f"{entry['path']}:{warning['line']}: {warning['message']}".startswith(said)
    else:
        assert out == f"{log}: ok (chat, 19 messages)\n"
    # A diagnostic on ctxc's logger (stderr), as from every command that reads such a log (compact...).
    assert f"ctxc: {said}" in caplog.text
    caplog.clear()
    assert run(capsys, "compact", str(log), "-s", "fifo", "-o", str(tmp_path / "o.jsonl"), "-q")[0] == 0
    assert f"ctxc: {said}" in caplog.text


def test_validate_of_a_complete_log_has_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = SAMPLES / "chat-anthropic.jsonl"
    code, out, err = run(capsys, "validate", str(log), "-f", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["files"][0]["warnings"] == []
    code, out, _ = run(capsys, "validate", str(log))
    assert out == f"{log}: ok (chat, 19 messages)\n"
