"""Decisions survive trimming: what fifo and selective remove, their placeholders quote verbatim (the
user's instructions and the decisions stated), and the adaptive pipeline summarizes rather than lose
them. Through the whole run (strategy, repair, writer, reading the output back)."""

from __future__ import annotations

import io
import re

import orjson
import pytest

from ctxc.compaction.ledger import Ledger
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.formats import load
from ctxc.model import Transcript
from ctxc.tokens import make_counter

DECISION = (
    "Decision: we will use Redis Streams rather than Kafka for the job queue, because the deployment "
    "already runs Redis and the volume is small."
)
INSTRUCTION = "Always run the tests with -x"


def _session() -> Transcript:
    """A tool-heavy session: the decision and the instruction sit early, among large tool outputs."""
    lines: list[dict[str, object]] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": "Build the background job queue for the web app."},
    ]
    n = 0

    def tool_turn(text: str) -> None:
        nonlocal n
        n += 1
        lines.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": text},
                    {"type": "tool_use", "id": f"c{n}", "name": "Bash", "input": {"command": f"cat f{n}.py"}},
                ],
            }
        )
        output = "\n".join(f"line {k} of f{n}.py: value = compute({k}, {n})" for k in range(120))
        lines.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{n}", "content": output}]}
        )

    for k in range(4):
        tool_turn(f"Looking at module {k}.")
    lines.append(
        {"role": "assistant", "content": f"I compared the options. {DECISION} Next I write the worker."}
    )
    for k in range(4):
        tool_turn(f"Writing part {k} of the worker.")
    lines.append({"role": "user", "content": f"{INSTRUCTION}. The suite is slow otherwise."})
    for k in range(6):
        tool_turn(f"Running the tests, round {k}.")
    lines.append({"role": "assistant", "content": "All green: the worker is in place."})
    lines.append({"role": "user", "content": "Now add retries."})
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    return load(io.BytesIO(data))


@pytest.mark.parametrize("strategy", ["fifo", "selective", "adaptive"])
def test_decisions_and_instructions_survive_a_tenth(strategy: str) -> None:
    t = _session()
    counter = make_counter("o200k_base", use_cache=False)
    total = Ledger(counter).total(t.messages)
    target = total // 10
    result = compact_transcript(t, CompactOptions(strategy=strategy, target_tokens=target), counter=counter)
    assert result.tokens_after <= target
    out = result.transcript
    text = "\n".join(m.text for m in out.messages)
    assert DECISION in text, strategy
    assert INSTRUCTION in text, strategy
    # Something was removed, and not by leaving the messages in place.
    assert len(out.messages) < len(t.messages)
    # Written and read back, the quotes are still there (they are content, not metadata).
    back = load(io.BytesIO(out.to_bytes()))
    assert DECISION in "\n".join(m.text for m in back.messages)


def _decisions_session(n: int = 12) -> Transcript:
    """``n`` tool turns, each stating its own decision beside a call with a sizeable output."""
    lines: list[dict[str, object]] = [{"role": "user", "content": "Build the queue."}]
    for k in range(n):
        lines.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": _choice(k)},
                    {"type": "tool_use", "id": f"c{k}", "name": "Bash", "input": {"command": "ls"}},
                ],
            }
        )
        output = " ".join(f"w{j}" for j in range(150))
        lines.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{k}", "content": output}]}
        )
    lines += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Next."}]
    return load(io.BytesIO(b"".join(orjson.dumps(line) + b"\n" for line in lines)))


def _choice(k: int) -> str:
    return f"Decision: we will use option {k} rather than option {k + 100} for component {k}."


def test_adaptive_summarizes_the_decisions_its_trimming_cannot_fit() -> None:
    """At a target selective's quotes do not fit, stage 4 summarizes them; every decision is then in the
    output verbatim or counted as omitted in the summary's Decisions section: none vanish."""
    t = _decisions_session()
    counter = make_counter("o200k_base", use_cache=False)
    target = Ledger(counter).total(t.messages) * 15 // 100
    options = CompactOptions(strategy="adaptive", target_tokens=target, keep_last=2)
    result = compact_transcript(t, options, counter=counter)
    assert result.tokens_after <= target
    assert {a.strategy for a in result.actions} >= {"selective", "hierarchical"}
    text = "\n".join(m.text for m in result.transcript.messages)
    present = sum(_choice(k) in text for k in range(12))
    decisions = text.split("## Decisions", 1)[1].split("##", 1)[0]
    omitted = re.search(r"\((\d+) older items? omitted\)", decisions)
    assert present + (int(omitted.group(1)) if omitted else 0) == 12
    assert present >= 3


@pytest.mark.parametrize("keep_quotes", [False, True])
def test_selective_gives_up_quotes_only_to_meet_the_target_and_says_so(keep_quotes: bool) -> None:
    t = _decisions_session()
    counter = make_counter("o200k_base", use_cache=False)
    target = Ledger(counter).total(t.messages) * 5 // 100
    options = CompactOptions(
        strategy="selective",
        target_tokens=target,
        keep_last=2,
        allow_over=True,
        settings={"selective.keep_quotes": str(keep_quotes)},
    )
    result = compact_transcript(t, options, counter=counter)
    (action,) = result.actions
    quoted = int(re.search(r"(\d+) instruction/decision sentence\(s\) quoted", action.note).group(1))
    # 12 decisions, at most 8 quoted (the cap); the rest are counted, and in the archive.
    assert "not quoted (in the archive)" in action.note
    text = "\n".join(m.text for m in result.transcript.messages)
    assert f"({12 - quoted} more are only in the archive)" in text
    if keep_quotes:  # what the adaptive pipeline asks for: over the target, no quote given up
        assert (quoted, result.tokens_after > target) == (8, True)
    else:  # fewer quotes, to meet the target
        assert quoted < 8
        assert result.tokens_after <= target


def test_trimming_twice_quotes_what_the_first_placeholder_quoted() -> None:
    """A written placeholder read back (no metadata left) is ctxc's note, not a user instruction: a
    second trimming quotes its quotes again, and never quotes the note itself as something said."""
    t = _decisions_session()
    counter = make_counter("o200k_base", use_cache=False)
    total = Ledger(counter).total(t.messages)
    once = compact_transcript(t, CompactOptions(strategy="fifo", target_tokens=total // 2), counter=counter)
    twice = compact_transcript(
        once.transcript, CompactOptions(strategy="fifo", target_tokens=total // 5), counter=counter
    )
    assert once.transcript.format == "chat"
    text = "\n".join(m.text for m in twice.transcript.messages)
    assert sum(_choice(k) in text for k in range(12)) >= 8
    assert "(user): [ctxc]" not in text


def test_fifo_gives_up_quotes_in_steps_and_says_what_is_left_out() -> None:
    """Standalone fifo meets its target: fewer quotes first, then only a count of what is not quoted,
    then (only when even that does not fit) no placeholder; the action always counts the unquoted."""
    t = _decisions_session()
    counter = make_counter("o200k_base", use_cache=False)
    total = Ledger(counter).total(t.messages)
    seen: list[str] = []
    for percent in (4, 2.5, 2):
        target = int(total * percent / 100)
        options = CompactOptions(strategy="fifo", target_tokens=target, keep_last=2)
        result = compact_transcript(t, options, counter=counter)
        assert result.tokens_after <= target
        (action,) = result.actions
        quoted = re.search(r"(\d+) instruction/decision sentence\(s\) quoted", action.note)
        n = int(quoted.group(1)) if quoted else 0
        assert f"{12 - n} not quoted (in the archive)" in action.note
        text = "\n".join(m.text for m in result.transcript.messages)
        if n:
            seen.append("quotes")
            assert f"({12 - n} more are only in the archive)" in text
        elif "no placeholder" not in action.note:
            seen.append("count")
            assert "(12 instruction or decision sentence(s) in them are only in the archive)" in text
        else:
            seen.append("none")
    assert seen == ["quotes", "count", "none"]
