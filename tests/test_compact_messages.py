"""``ctxc.compact_messages``: plain dict messages in, plain dict messages out, within ``max_tokens``
(the ``trim_messages`` shape), through the same kernel as ``ctxc compact``."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxc
from ctxc.agent import ContextManager, detect_shape, to_messages
from ctxc.compaction.base import strategies
from ctxc.errors import CtxcError, OverTargetError, UsageError
from ctxc.validate import pairing_problems


class QuarterCounter:
    """Four characters a token; counts how many texts it was asked for (it must be the one used)."""

    name = "quarter"

    def __init__(self) -> None:
        self.calls = 0

    def count(self, texts: Sequence[str]) -> list[int]:
        self.calls += 1
        return [len(t) // 4 for t in texts]


def anthropic(turns: int, lines: int = 40) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the parser bug without changing the API."}]
    for i in range(turns):
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"path": f"m{i}.py"}}
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": f"Reading {i}."}, call]})
        body = "\n".join(f"{n:4} def f{n}(x): return parse(x, {i})" for n in range(lines))
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": body}
        msgs.append({"role": "user", "content": [result]})
    msgs.append({"role": "assistant", "content": "The bug is in m3.py."})
    return msgs


def openai(turns: int, lines: int = 40) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": "Find why the build fails."},
    ]
    for i in range(turns):
        fn = {"name": "run", "arguments": f'{{"cmd": "make step{i}"}}'}
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
            }
        )
        out = "\n".join(f"step {i} line {n}: compiling module_{n}.c" for n in range(lines))
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": out})
    msgs.append({"role": "assistant", "content": "The linker flags are wrong."})
    return msgs


def responses(turns: int, lines: int = 40) -> list[dict[str, Any]]:
    """``openai`` as Responses-API input items."""
    msgs: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Find the failure."}]},
    ]
    for i in range(turns):
        msgs.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": f"Run step {i}."}]})
        msgs.append(
            {"type": "function_call", "call_id": f"c{i}", "name": "run", "arguments": f'{{"n": {i}}}'}
        )
        out = "\n".join(f"step {i} line {n}: compiling module_{n}.c" for n in range(lines))
        msgs.append({"type": "function_call_output", "call_id": f"c{i}", "output": out})
    msgs.append(
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Flags."}]}
    )
    return msgs


def tokens(messages: list[dict[str, Any]], counter: Any) -> int:
    return ContextManager(window=1_000_000, counter=counter).count(messages)


def paired(messages: list[dict[str, Any]]) -> bool:
    return not pairing_problems(to_messages(messages, shape=detect_shape(messages)), strict=True)


@pytest.mark.parametrize("build", [anthropic, openai, responses])
@pytest.mark.parametrize("strategy", ["fifo", "selective", "mask", "adaptive", "hierarchical"])
def test_within_budget_paired_unmutated(build: Any, strategy: str) -> None:
    messages = build(20)
    before = copy.deepcopy(messages)
    counter = QuarterCounter()
    budget = tokens(messages, counter) // 3
    out = ctxc.compact_messages(messages, max_tokens=budget, strategy=strategy, token_counter=counter)
    assert messages == before  # the input is never mutated
    assert tokens(out, counter) <= budget
    assert paired(out)
    assert all(isinstance(m, dict) for m in out)
    assert detect_shape(out) == detect_shape(messages)
    ids = {id(m) for m in messages}
    assert any(id(m) in ids for m in out)  # kept messages are the very dicts given
    assert out[-1] is messages[-1]
    again = ctxc.compact_messages(messages, max_tokens=budget, strategy=strategy, token_counter=counter)
    assert again == out  # the same input gives the same output


def test_under_budget_is_returned_as_given() -> None:
    messages = anthropic(2)
    out = ctxc.compact_messages(messages, max_tokens=1_000_000, strategy="fifo")
    assert len(out) == len(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_counter_is_the_one_given() -> None:
    counter = QuarterCounter()
    ctxc.compact_messages(anthropic(5), max_tokens=400, strategy="fifo", token_counter=counter)
    assert counter.calls > 0


def test_tokenizer_by_name() -> None:
    messages = openai(10)
    out = ctxc.compact_messages(messages, max_tokens=800, strategy="fifo", token_counter="approx")
    assert ContextManager(window=10**6, tokenizer="approx").count(out) <= 800


def test_bad_arguments_fail_up_front() -> None:
    for bad in (0, -5, True, 1.5):
        with pytest.raises(UsageError):
            ctxc.compact_messages(anthropic(2), max_tokens=bad)
    with pytest.raises(UsageError):
        ctxc.compact_messages(anthropic(2), max_tokens=100, strategy="no-such-strategy")


def test_an_impossible_budget_raises_unless_allowed() -> None:
    messages = anthropic(3)
    with pytest.raises(OverTargetError):
        ctxc.compact_messages(messages, max_tokens=5, strategy="fifo", token_counter=QuarterCounter())
    out = ctxc.compact_messages(
        messages, max_tokens=5, strategy="fifo", token_counter=QuarterCounter(), allow_over=True
    )
    assert paired(out)
    assert out[-1] is messages[-1]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=st.integers(1, 15), lines=st.integers(1, 30), share=st.floats(0.2, 1.0))
def test_fifo_budget_invariant(turns: int, lines: int, share: float) -> None:
    messages = openai(turns, lines)
    counter = QuarterCounter()
    budget = max(1, int(tokens(messages, counter) * share))
    try:
        out = ctxc.compact_messages(messages, max_tokens=budget, strategy="fifo", token_counter=counter)
    except OverTargetError:
        return  # what must be kept (the system prompt, the request, the last message) is over budget
    assert tokens(out, counter) <= budget
    assert paired(out)


def rich_anthropic(turns: int) -> list[dict[str, Any]]:
    """Old thinking, old images and a repeated result: what the single-purpose strategies act on."""
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K" * 200},
    }
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the parser bug without changing the API."}]
    for i in range(turns):
        thinking = {"type": "thinking", "thinking": f"Which module next? {i}", "signature": "c2ln"}
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"path": "m.py"}}
        msgs.append({"role": "assistant", "content": [thinking, call]})
        result = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{i}",
            "content": [image, {"type": "text", "text": "x = 1"}],
        }
        msgs.append({"role": "user", "content": [result]})
    msgs.append({"role": "assistant", "content": "The bug is in m.py."})
    return msgs


@pytest.mark.parametrize("strategy", sorted(strategies()))
def test_a_list_within_budget_comes_back_as_given(strategy: str) -> None:
    messages = rich_anthropic(6)
    budget = tokens(messages, ContextManager(window=10**6).counter)
    out = ctxc.compact_messages(messages, max_tokens=budget, strategy=strategy)
    assert len(out) == len(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))


@pytest.mark.parametrize("build", [anthropic, openai, rich_anthropic, responses])
@pytest.mark.parametrize("strategy", sorted(strategies()))
def test_every_strategy_pairs_and_leaves_the_input(build: Any, strategy: str) -> None:
    messages = build(12)
    before = copy.deepcopy(messages)
    counter = QuarterCounter()
    budget = tokens(messages, counter) // 2
    out = ctxc.compact_messages(
        messages, max_tokens=budget, strategy=strategy, token_counter=counter, allow_over=True
    )
    assert messages == before
    assert paired(out)
    assert out[-1] is messages[-1]


@pytest.mark.parametrize("build", [anthropic, responses])
@pytest.mark.parametrize("strategy", ["fifo", "selective", "adaptive", "hierarchical", "recursive"])
def test_the_providers_compaction_block_is_kept(build: Any, strategy: str) -> None:
    # The provider ignores what precedes its own compaction block or item; a strategy that dropped it
    # made the provider read that history again, over the budget and larger than the input.
    if build is anthropic:
        block: dict[str, Any] = {
            "role": "assistant",
            "content": [{"type": "compaction", "content": "We fixed m1."}],
        }
    else:
        block = {"type": "compaction", "encrypted_content": "gAAAA" + "x" * 200}
    later = json.loads(
        json.dumps(build(8)[1 if build is anthropic else 2 :])
        .replace("toolu_", "toolu_b")
        .replace('id": "c', 'id": "d')
    )
    messages = [*build(6), block, *later]
    budget = tokens(messages, QuarterCounter()) // 2
    out = ctxc.compact_messages(
        messages, max_tokens=budget, strategy=strategy, token_counter=QuarterCounter()
    )
    assert any(m is block for m in out)
    assert tokens(out, QuarterCounter()) <= budget
    assert paired(out)
    # The session's intent, from before the block, is copied after it (before, the provider ignores it).
    after = json.dumps(out[[m is block for m in out].index(True) :])
    assert "Fix the parser bug without changing the API." in after or "Find the failure." in after


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "Fix the bug."}, "ok"],
        [{"role": "user", "content": "Fix the bug."}, {"content": "no role"}],
        [{"role": "user", "content": "Fix the bug."}, {"role": "wizard", "content": "unknown role"}],
        [{"role": "user", "content": "Fix the bug."}, None],
    ],
)
def test_entries_that_are_not_messages_are_refused(messages: list[Any]) -> None:
    # Dropping them silently would lose what the caller sends; a list it cannot read is a usage error.
    before = copy.deepcopy(messages)
    with pytest.raises(UsageError, match=r"messages\[1\]"):
        ctxc.compact_messages(messages, max_tokens=1_000)
    assert messages == before


def test_one_message_is_not_a_list() -> None:
    with pytest.raises(UsageError, match="a list of message dicts"):
        ctxc.compact_messages({"role": "user", "content": "Fix the bug."}, max_tokens=1_000)  # type: ignore[arg-type]


def test_a_token_counter_must_count() -> None:
    def per_text(text: str) -> int:
        return len(text) // 4

    with pytest.raises(UsageError, match="token_counter"):
        ctxc.compact_messages(anthropic(2), max_tokens=1_000, token_counter=per_text)  # type: ignore[arg-type]
    # analyze and compose took it too, and failed with an AttributeError at the first count.
    with pytest.raises(UsageError, match="token_counter"):
        ctxc.analyze(SAMPLES / "chat-openai.jsonl", counter=per_text, use_cache=False)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="token_counter"):
        ctxc.PromptComposer((ctxc.Section("a", "Be careful."),)).compose(counter=per_text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "answer",
    [lambda t: [1], lambda t: [-1] * len(t), lambda t: ["3"] * len(t), lambda t: None],
    ids=["too-few", "negative", "strings", "none"],
)
def test_a_token_counter_must_answer_one_count_per_text(answer: Any, tmp_path: Any) -> None:
    # A missing or wrong count would misplace every cut after it, silently.
    class Wrong:
        name = "wrong"

        def count(self, texts: Sequence[str]) -> Any:
            return answer(texts)

    with pytest.raises(UsageError, match="'wrong' must return one int >= 0 per text"):
        ctxc.compact_messages(anthropic(3), max_tokens=100, strategy="fifo", token_counter=Wrong())
    with pytest.raises(UsageError, match="one int >= 0 per text"):
        ContextManager(counter=Wrong()).count(anthropic(3))
    log = tmp_path / "chat.jsonl"
    log.write_text("".join(json.dumps(m) + "\n" for m in anthropic(3)))
    with pytest.raises(UsageError, match="one int >= 0 per text"):
        ctxc.analyze(log, counter=Wrong(), use_cache=False)


@pytest.mark.parametrize("keep_last", [0, -1])
def test_keep_last_below_one_is_refused(keep_last: int) -> None:
    with pytest.raises(UsageError, match="keep_last"):
        ctxc.compact_messages(anthropic(2), max_tokens=1_000, keep_last=keep_last)


def test_every_error_is_a_ctxc_error() -> None:
    # The documented base class: one except clause catches whatever ctxc raises on bad input.
    calls = [
        lambda: ctxc.compact_messages(anthropic(2), max_tokens=0),
        lambda: ctxc.compact_messages(anthropic(2), max_tokens=10, strategy="nope"),
        lambda: ctxc.compact_messages(anthropic(3), max_tokens=5, token_counter=QuarterCounter()),
        lambda: ctxc.compact_messages(["x", "y"], max_tokens=10),
        lambda: ctxc.compact_messages(anthropic(2), max_tokens=10, token_counter=len),  # type: ignore[arg-type]
        lambda: ctxc.compact_messages(anthropic(2), max_tokens=10, token_counter="gpt2"),
    ]
    for call in calls:
        with pytest.raises(CtxcError):
            call()


def openai_adjacent(messages: list[dict[str, Any]]) -> bool:
    """OpenAI's rule: an assistant message's tool calls are answered by the tool messages right after it."""
    waiting: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            if m["tool_call_id"] not in waiting:
                return False
            waiting.discard(m["tool_call_id"])
        elif waiting:
            return False
        else:
            waiting = {c["id"] for c in m.get("tool_calls") or ()}
    return True


def test_an_openai_call_is_answered_before_the_next_assistant_message() -> None:
    # A loop that died mid-call left calls unanswered with more said after them: the answers ctxc adds go
    # right after the call, where OpenAI looks for them (consecutive assistant messages are not one turn).
    def calls(*ids: str) -> dict[str, Any]:
        fn = {"name": "run", "arguments": "{}"}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": i, "type": "function", "function": fn} for i in ids],
        }

    late = [
        {"role": "user", "content": "Build it."},
        calls("a", "b"),
        {"role": "assistant", "content": "The build was interrupted."},
        {"role": "user", "content": "Try again."},
        calls("c"),
        {"role": "assistant", "content": "Done."},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]
    for messages in (late[:4], late):
        out = ctxc.compact_messages(messages, max_tokens=10_000, strategy="fifo")
        assert openai_adjacent(out), out
        assert paired(out)
        assert [m["content"] for m in out if m["role"] != "tool"] == [
            m["content"] for m in messages if m["role"] != "tool"
        ]


@st.composite
def broken_openai(draw: st.DrawFn) -> list[dict[str, Any]]:
    """OpenAI conversations whose calls are answered in part, or late, as a loop that died leaves them."""
    text = st.text(alphabet="ab \n", max_size=80)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": draw(text)}]
    for turn in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["user", "assistant", "calls"]))
        if kind != "calls":
            msgs.append({"role": kind, "content": draw(text)})
            continue
        ids = [f"t{turn}-{k}" for k in range(draw(st.integers(1, 3)))]
        fn = {"name": "run", "arguments": "{}"}
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": i, "type": "function", "function": fn} for i in ids],
            }
        )
        msgs.extend(
            {"role": "tool", "tool_call_id": i, "content": draw(text)}
            for i in draw(st.lists(st.sampled_from(ids), unique=True))
        )
    return msgs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=broken_openai(), strategy=st.sampled_from(sorted(strategies())), budget=st.integers(1, 400))
def test_outputs_are_paired_whatever_the_input(
    messages: list[dict[str, Any]], strategy: str, budget: int
) -> None:
    before = copy.deepcopy(messages)
    out = ctxc.compact_messages(
        messages, max_tokens=budget, strategy=strategy, token_counter=QuarterCounter(), allow_over=True
    )
    assert messages == before
    assert paired(out)
    assert openai_adjacent(out)


def test_an_offloaded_output_is_in_a_file_there_is_and_none_without_an_archive(tmp_path: Path) -> None:
    """Offload points the model at a file: only where the archive holds it."""
    huge = " ".join(f"line{i} of the build log" for i in range(25_000))
    make = {"name": "sh", "arguments": json.dumps({"cmd": "make"})}
    messages = [
        {"role": "user", "content": "run the build"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": make}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": huge},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "and now?"},
    ]
    budget = {"max_tokens": 60_000, "window": 100_000, "strategy": "adaptive"}
    plain = ctxc.compact_messages(messages, **budget)  # type: ignore[arg-type]
    assert not any("ctxc offloaded" in str(m["content"]) for m in plain)
    archive = tmp_path / "archive"
    stored = ctxc.compact_messages(messages, **budget, archive=archive)  # type: ignore[arg-type]
    [pointer] = [str(m["content"]) for m in stored if "ctxc offloaded" in str(m["content"])]
    path = Path(pointer.split(" to ", 1)[1].split(";", 1)[0])
    assert path.is_relative_to(archive.resolve())
    assert path.read_text() == huge
