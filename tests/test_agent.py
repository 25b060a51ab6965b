"""ContextManager on in-memory message lists (Anthropic and OpenAI shapes, Responses-API items), and the
documented agent loop example, run here in both chat shapes and once as a script."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import ROOT

from ctxc.agent import ContextManager, compact_messages, detect_shape, to_messages
from ctxc.archive import Archive
from ctxc.archive_store import CITATION_RE
from ctxc.composer import PromptComposer, Section
from ctxc.errors import UsageError
from ctxc.reminders import ReminderRule, TurnState
from ctxc.tokens.cost import MESSAGE_OVERHEAD
from ctxc.validate import pairing_problems


class RecordingCounter:
    """Four characters a token; remembers every text it was asked to count."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def count(self, texts: Sequence[str]) -> list[int]:
        self.seen.extend(texts)
        return [len(t) // 4 for t in texts]


def anthropic_conversation(turns: int, result_lines: int = 80) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the parser bug without changing the API."}]
    for i in range(turns):
        msgs.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading file {i}."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i}",
                        "name": "Read",
                        "input": {"path": f"src/m{i}.py"},
                    },
                ],
            }
        )
        body = "\n".join(f"{n:4} def f{n}(x): return parse(x, {i})" for n in range(result_lines))
        msgs.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": body}],
            }
        )
    msgs.append({"role": "assistant", "content": [{"type": "text", "text": "Found it."}]})
    msgs.append({"role": "user", "content": "Go on."})
    return msgs


def openai_conversation(turns: int, result_lines: int = 80) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": "Fix the parser bug without changing the API."},
    ]
    for i in range(turns):
        msgs.append(
            {
                "role": "assistant",
                "content": f"Reading file {i}.",
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})},
                    }
                ],
            }
        )
        body = "\n".join(f"{n:4} def f{n}(x): return parse(x, {i})" for n in range(result_lines))
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": body})
    msgs.append({"role": "assistant", "content": "Found it."})
    msgs.append({"role": "user", "content": "Go on."})
    return msgs


def responses_conversation(turns: int, result_lines: int = 80) -> list[dict[str, Any]]:
    """``openai_conversation`` as Responses-API input items, with a reasoning item before each call."""
    msgs: list[dict[str, Any]] = [
        {"type": "message", "role": "system", "content": "You are a careful engineer."},
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "Fix the parser bug without changing the API."}],
        },
    ]
    for i in range(turns):
        msgs.append({"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": "gAAAA"})
        said = {"type": "output_text", "text": f"Reading file {i}."}
        msgs.append({"type": "message", "role": "assistant", "content": [said]})
        arguments = json.dumps({"path": f"src/m{i}.py"})
        msgs.append(
            {"type": "function_call", "call_id": f"call_{i}", "name": "read_file", "arguments": arguments}
        )
        body = "\n".join(f"{n:4} def f{n}(x): return parse(x, {i})" for n in range(result_lines))
        msgs.append({"type": "function_call_output", "call_id": f"call_{i}", "output": body})
    msgs.append(
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Found it."}]}
    )
    msgs.append({"role": "user", "content": "Go on."})
    return msgs


CONVERSATIONS = {
    "anthropic": anthropic_conversation,
    "openai": openai_conversation,
    "responses": responses_conversation,
}


def assert_valid(messages: list[dict[str, Any]], shape: str) -> None:
    parsed = to_messages(messages, shape=shape)  # type: ignore[arg-type]
    assert pairing_problems(parsed, strict=True) == []


def test_detect_shape() -> None:
    assert detect_shape(anthropic_conversation(1)) == "anthropic"
    assert detect_shape(openai_conversation(1)) == "openai"
    assert detect_shape([{"role": "user", "content": "hi"}]) == "openai"  # valid in both
    assert detect_shape(responses_conversation(1)) == "responses"
    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
    assert detect_shape([{"role": "user", "content": "hi"}, said]) == "responses"


def test_responses_items_count_as_the_same_chat_conversation() -> None:
    # Calls, outputs and Responses messages counted 0 tokens, so an agent loop on them never compacted.
    manager = ContextManager(window=100_000)
    items, chat = responses_conversation(3), openai_conversation(3)
    # The same texts; each item the chat shape has not (reasoning, a call apart from its text) is framed.
    framing = MESSAGE_OVERHEAD * (len(items) - len(chat))
    assert manager.count(items) == manager.count(chat) + framing
    calls = [n for m, (n, _) in zip(items, manager._sizes(items), strict=True) if "call_id" in m]
    assert len(calls) == 6
    assert all(n > 0 for n in calls)
    told = ContextManager(window=100_000, shape="responses")
    assert told.count(items) == manager.count(items)


def test_count_is_memoised_per_message() -> None:
    counter = RecordingCounter()
    manager = ContextManager(window=100_000, counter=counter)
    msgs = anthropic_conversation(5)
    first = manager.count(msgs)
    assert first > 0
    counter.seen.clear()
    assert manager.count(msgs) == first
    assert counter.seen == []  # nothing parsed or counted again
    msgs.append({"role": "assistant", "content": "one more message"})
    assert manager.count(msgs) > first
    assert counter.seen == ["one more message"]  # only the new message


def test_count_matches_the_library_count() -> None:
    import ctxc

    msgs = openai_conversation(3)
    manager = ContextManager(window=100_000)
    assert manager.count(msgs) == ctxc.count_tokens(to_messages(msgs))


def test_needs_compaction_at_the_trigger_and_with_a_system_prompt() -> None:
    msgs = anthropic_conversation(6)
    tokens = ContextManager(window=1_000_000).count(msgs)
    at = ContextManager(window=int(tokens / 0.6))  # exactly 60%
    assert at.needs_compaction(msgs)
    roomy = ContextManager(window=int(tokens / 0.5))
    assert not roomy.needs_compaction(msgs)
    # A system prompt sent beside the messages takes its share of the window.
    assert roomy.needs_compaction(msgs, system="You are careful. " * (tokens // 8))


def test_a_target_beyond_what_the_system_prompt_leaves_is_held_to_the_window() -> None:
    # target_tokens 8,000 of a 10,000 window with a 5,000-token system prompt: the request must still fit.
    msgs = openai_conversation(20)
    system = "rules " * 5_000
    manager = ContextManager(window=10_000, target_tokens=8_000, strategy="fifo")
    out = manager.compact(msgs, system=system)
    assert manager.count(out, system=system) <= 10_000
    assert_valid(out, "openai")


@pytest.mark.parametrize("shape", sorted(CONVERSATIONS))
def test_compact_returns_the_same_shape_paired(shape: str) -> None:
    msgs = CONVERSATIONS[shape](12)
    before = ContextManager(window=1_000_000).count(msgs)
    manager = ContextManager(window=int(before / 0.75))  # stage 3
    assert manager.needs_compaction(msgs)
    out = manager.compact(msgs)
    assert manager.last_compaction is not None
    assert manager.last_compaction.changed
    assert manager.last_compaction.tokens_before == before
    after = manager.count(out)
    assert after == manager.last_compaction.tokens_after
    assert after < manager.trigger * manager.window  # out of compaction territory
    assert_valid(out, shape)
    assert detect_shape(out) == shape
    if shape == "anthropic":
        assert all(m["role"] in ("user", "assistant") for m in out)
        assert not any("tool_calls" in m for m in out)
    else:
        assert out[0] is msgs[0]  # the system message is kept, as the very dict given
        assert any(m.get("role") == "tool" or m.get("type") == "function_call_output" for m in out)
    assert all(any(m is given for given in msgs) for m in out if m in msgs)  # kept: the very dicts
    assert any(m is msgs[-1] for m in out)  # the last message is kept as given
    task = msgs[0] if shape == "anthropic" else msgs[1]
    assert any(m is task for m in out)  # the first request is pinned
    assert msgs == CONVERSATIONS[shape](12)  # untouched
    assert not manager.needs_compaction(out)


def test_compact_with_an_archive_cites_it(tmp_path: Path) -> None:
    msgs = anthropic_conversation(12)
    archive = Archive.open(str(tmp_path / "archive"))
    manager = ContextManager(window=6000, strategy="fifo", archive=archive)
    out = manager.compact(msgs)
    assert_valid(out, "anthropic")
    found = CITATION_RE.search(json.dumps(out))
    assert found is not None  # the placeholder cites what it replaced
    original = archive.read(archive.resolve(found.group(1)))
    assert [json.loads(line) for line in original.splitlines()] == msgs  # the whole list, recoverable


def test_compact_an_empty_list_and_bad_input() -> None:
    manager = ContextManager(window=10_000)
    assert manager.compact([]) == []
    with pytest.raises(UsageError, match="JSON-serialisable"):
        manager.count([{"role": "user", "content": object()}])
    with pytest.raises(UsageError, match="unknown strategy"):
        ContextManager(strategy="nope")
    with pytest.raises(UsageError, match="trigger"):
        ContextManager(trigger=0)


@pytest.mark.parametrize("content", [b"raw bytes", [{"type": "text", "text": "x"}, {1, 2}]])
def test_content_that_is_not_json_is_a_usage_error_everywhere(content: Any) -> None:
    # Parsing reached it before the JSON check did: a bare TypeError from deep inside the parser.
    messages = [{"role": "user", "content": content}]
    manager = ContextManager(window=10_000)
    for call in (
        lambda: manager.compact(messages),
        lambda: manager.turn_state(messages, turn=0),
        lambda: compact_messages(messages, max_tokens=1_000),
    ):
        with pytest.raises(UsageError, match="JSON-serialisable"):
            call()


@pytest.mark.parametrize(
    "reminders", [[{"id": "a", "message": "m", "every_n_turns": 2}], ["rules.toml"], [None], 5]
)
def test_reminders_that_are_not_rules_are_a_usage_error(reminders: Any) -> None:
    # A dict, a path in a list or a number was an AttributeError or TypeError from inside the rules.
    with pytest.raises(UsageError, match="ReminderRule"):
        ContextManager(window=10_000, reminders=reminders)


def test_a_system_prompt_that_is_not_text_is_a_usage_error() -> None:
    # Anthropic's SDK also takes system as a list of text blocks; here that was a TypeError (unhashable).
    manager = ContextManager(window=10_000)
    blocks = [{"type": "text", "text": "You review code.", "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": "Fix it."}]
    for call in (manager.count, manager.needs_compaction, manager.compact):
        with pytest.raises(UsageError, match="system="):
            call(messages, system=blocks)  # type: ignore[operator]


def test_the_manager_refuses_what_compact_messages_refuses() -> None:
    with pytest.raises(UsageError, match="keep_last"):
        ContextManager(window=10_000, keep_last=0)
    with pytest.raises(UsageError, match="token_counter"):
        ContextManager(window=10_000, counter=len)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"messages\[1\] is not a message"):
        ContextManager(window=10_000).compact(
            [{"role": "user", "content": "Fix it."}, {"content": "no role"}]
        )


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("window", "100000"),  # as read from an environment variable
        ("target_tokens", "8000"),
        ("target_ratio", "0.5"),
        ("trigger", "0.7"),
        ("min_growth", "0.1"),
        ("thresholds", (0.6, 0.7, 0.8, "0.9")),
        ("settings", "mask.keep_last=3"),  # as --set takes it
        ("composer", {"id": "role", "content": "You review code."}),
        ("strategy", ["fifo"]),
        ("model", 5),
        ("archive", 5),
    ],
)
def test_an_argument_of_the_wrong_type_is_a_usage_error(keyword: str, value: object) -> None:
    # Each was a TypeError, ValueError or (composer, at the first prompt) AttributeError from inside.
    with pytest.raises(UsageError, match=keyword):
        ContextManager(**{keyword: value}).system_prompt()  # type: ignore[arg-type]


@pytest.mark.parametrize("wrong", [None, "Fix it.", {"role": "user", "content": "Fix it."}], ids=repr)
def test_count_of_something_not_a_list_is_a_usage_error_not_zero(wrong: object) -> None:
    # A single dict or a string counted 0 tokens (needs_compaction never fired); None was a TypeError.
    manager = ContextManager(window=10_000)
    with pytest.raises(UsageError, match="a list of message dicts"):
        manager.count(wrong)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="a list of message dicts"):
        manager.needs_compaction(wrong)  # type: ignore[arg-type]


class _SdkMessage:
    """Not a dict: what an SDK returns (an OpenAI ``ChatCompletionMessage``, a LangChain message)."""

    role = "assistant"
    content = "I will run the tests now. " * 200


def test_an_entry_that_is_not_a_dict_is_a_usage_error_not_zero_tokens() -> None:
    # It counted 0 tokens, so needs_compaction stayed False while the context grew; compact refused it.
    manager = ContextManager(window=1_000)
    msgs: list[Any] = [{"role": "user", "content": "Fix the failing test."}, _SdkMessage()]
    with pytest.raises(UsageError, match=r"messages\[1\] is not a message"):
        manager.count(msgs)
    with pytest.raises(UsageError, match=r"messages\[1\] is not a message"):
        manager.needs_compaction(msgs)


@pytest.mark.parametrize("shape", ["openai", "responses"])
@pytest.mark.parametrize(
    "wrong",
    [{"foo": 1}, {"role": "wizard", "content": "x"}, {"type": "message", "role": "wizard", "content": []}],
    ids=repr,
)
def test_a_dict_that_is_no_message_is_a_usage_error_not_zero_tokens(shape: str, wrong: object) -> None:
    # It counted 0 tokens (compact refused it), in a chat list and in a list of Responses items alike.
    manager = ContextManager(window=100_000)
    msgs: list[Any] = [*CONVERSATIONS[shape](1), wrong]
    assert manager.count(msgs[:-1]) > 0  # the messages before it are memoised: only the new one is read
    with pytest.raises(UsageError, match=rf"messages\[{len(msgs) - 1}\] is not a message"):
        manager.count(msgs)
    with pytest.raises(UsageError, match=rf"messages\[{len(msgs) - 1}\] is not a message"):
        manager.compact(msgs)


def test_the_next_compaction_waits_for_growth() -> None:
    msgs = anthropic_conversation(12)
    manager = ContextManager(window=8000, strategy="mask", min_growth=0.2)
    assert manager.over_trigger(4800)  # 60%
    manager.compact(msgs)
    assert manager.last_compaction is not None
    left = manager.last_compaction.tokens_after
    assert left < 4800
    assert not manager.over_trigger(left + 1599)  # over the trigger, but not 20% of the window more
    assert manager.over_trigger(left + 1600)


def test_reminders_are_tracked_by_the_manager() -> None:
    rules = [
        ReminderRule("shell", "Check side effects.", tool_call="read_file", max_repeats=1),
        ReminderRule("every2", "Run the tests.", every_n_turns=2),
    ]
    manager = ContextManager(window=100_000, reminders=rules)
    msgs = openai_conversation(2)
    msgs.pop()  # end on the assistant's tool call and its result
    msgs.pop()
    state = manager.turn_state(msgs, turn=2)
    assert state.tool_calls == ("read_file",)
    assert state.response == "Reading file 1."
    assert [r.rule for r in manager.reminders_due(state)] == ["shell", "every2"]
    assert [
        r.rule for r in manager.reminders_due(TurnState(turn=3, tokens=0, tool_calls=("read_file",)))
    ] == []
    assert manager.fired == {"shell": 1, "every2": 1}
    note = manager.reminder_message(manager.reminders_due(TurnState(turn=4, tokens=0)))
    assert note["role"] == "user"
    assert '<system-reminder id="every2">' in note["content"]


def test_system_prompt_within_budget() -> None:
    composer = PromptComposer(
        (
            Section("safety", "Never delete user data.", 100, required=True),
            Section("examples", "An example of good work. " * 50, 40),
        )
    )
    manager = ContextManager(window=100_000, composer=composer)
    assert manager.system_prompt().startswith("Never delete user data.")
    assert manager.system_prompt(20) == "Never delete user data."
    with pytest.raises(UsageError, match="no composer"):
        ContextManager(window=1000).system_prompt()


# --------------------------------------------------------------------------------- the example loop


def load_example() -> ModuleType:
    path = ROOT / "examples" / "agent_loop.py"
    spec = importlib.util.spec_from_file_location("agent_loop_example", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("shape", ["anthropic", "openai"])
def test_the_agent_loop_example(shape: str) -> None:
    example = load_example()
    window = 12_000
    messages, log = example.run(turns=40, window=window, shape=shape)
    compactions = [e for e in log if e.compacted]
    assert len(compactions) >= 3
    assert all(e.tokens_after < window for e in log)  # never near the window's edge
    assert max(e.tokens for e in log) < 0.85 * window
    turns = [e.turn for e in compactions]
    assert min(b - a for a, b in itertools.pairwise(turns)) >= 5  # not every few turns (the prompt cache)
    assert all("api" in e.reminders for e in compactions)  # the task is restated after each compaction
    assert sum("careful-shell" in e.reminders for e in log) == 2  # max_repeats
    assert_valid(messages, shape)
    assert messages[0]["content"] == example.TASK_TEXT  # the task survives every compaction


def test_the_agent_loop_example_as_a_script() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent_loop.py"), "--turns", "20", "--shape", "openai"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "20 turns," in proc.stdout
    assert "compacted to" in proc.stdout
