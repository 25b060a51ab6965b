"""adaptive reaches every target fifo reaches: its stages aim at what the run writes, repair included
(a turn cut short leaves calls unanswered, and repair answers each one after the last stage)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import corpus_params, sample_files

from ctxc.compaction.ledger import Ledger
from ctxc.compaction.run import CompactionResult, CompactOptions, compact_transcript
from ctxc.errors import OverTargetError
from ctxc.formats import load
from ctxc.live import sent_messages
from ctxc.tokens import Counter, make_counter


class WordCounter:
    """A fast, deterministic stand-in tokenizer: one token per whitespace-separated word."""

    name = "words"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def compact(source: bytes | Path, strategy: str, target: int, counter: Counter) -> CompactionResult | None:
    """The run's result, or None when it ends over the target (OverTargetError)."""
    options = CompactOptions(strategy=strategy, target_tokens=target)
    transcript = load(source) if isinstance(source, Path) else load(io.BytesIO(source))
    try:
        return compact_transcript(transcript, options, counter=counter)
    except OverTargetError:
        return None


def _entry(message: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "timestamp": "2025-11-20T23:33:50.804Z", "message": message}


def _text(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


def pi_session(turns: int = 30, *, unanswered_late: bool = False) -> bytes:
    """A pi session with a turn of six edit calls none of which has a result (pi was stopped before
    they ran), and ``turns`` tool turns: the unanswered turn early, or (``unanswered_late``) among the
    last four messages. (An errored turn would not do: pi never sends it, so ctxc counts none of it.)"""
    header = {
        "type": "session",
        "id": "s1",
        "timestamp": "2025-11-20T23:33:50.805Z",
        "cwd": "/w",
        "provider": "anthropic",
        "modelId": "claude-sonnet-4-5",
        "thinkingLevel": "off",
    }
    edits = [
        {"type": "toolCall", "id": f"e{k}", "name": "edit", "arguments": {"path": f"src/s{k}.ts"}}
        for k in range(6)
    ]
    unanswered = [
        _entry({"role": "assistant", "stopReason": "toolUse", "content": [*_text("Replacing all"), *edits]}),
        _entry({"role": "user", "content": _text("go on")}),
    ]
    lines = [header, _entry({"role": "user", "content": _text("Task: port the theme to every selector")})]
    lines += [] if unanswered_late else unanswered
    for k in range(turns):
        tool = ("edit", "bash", "read")[k % 3]
        call = {"type": "toolCall", "id": f"c{k}", "name": tool, "arguments": {"path": f"src/f{k}.ts"}}
        output = " ".join(f"line{k}x{n}" for n in range(30 + 7 * (k % 5)))
        lines += [
            _entry({"role": "assistant", "stopReason": "toolUse", "content": [*_text(f"step {k}"), call]}),
            _entry({"role": "toolResult", "toolCallId": f"c{k}", "toolName": tool, "content": _text(output)}),
        ]
    lines += unanswered if unanswered_late else []
    lines.append(_entry({"role": "assistant", "stopReason": "stop", "content": _text("Done: all themed")}))
    if unanswered_late:
        lines.append(_entry({"role": "user", "content": _text("thanks a lot")}))
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def test_adaptive_reaches_what_fifo_reaches_past_unanswered_calls() -> None:
    data = pi_session()
    assert load(io.BytesIO(data)).format == "pi"
    total = Ledger(WordCounter()).total(load(io.BytesIO(data)).messages)
    missed = [
        target
        for target in range(total // 10, total // 2, 5)
        if compact(data, "fifo", target, WordCounter()) is not None
        and compact(data, "adaptive", target, WordCounter()) is None
    ]
    assert missed == []


def test_adaptive_stays_in_stage_3_when_trimming_reaches_the_written_target() -> None:
    """Repair's results are aimed for by trimming a little more, not by summarizing the history."""
    data = pi_session()
    total = Ledger(WordCounter()).total(load(io.BytesIO(data)).messages)
    result = compact(data, "adaptive", total * 45 // 100, WordCounter())
    assert result is not None
    assert {a.strategy for a in result.actions} <= {"mask", "selective", "repair"}


@pytest.mark.parametrize("strategy", ["fifo", "selective", "adaptive"])
def test_a_larger_target_is_reached_when_a_smaller_one_is(strategy: str) -> None:
    """With the unanswered calls among the last four messages, meeting the target as written takes
    keeping fewer of them verbatim: the run tries that whenever repair's results put it over."""
    data = pi_session(unanswered_late=True)
    targets = range(1, 120, 2)
    reached = [t for t in targets if compact(data, strategy, t, WordCounter()) is not None]
    assert reached
    assert reached == [t for t in targets if t >= reached[0]]


@pytest.mark.parametrize("ratio", [0.1, 0.5])
@pytest.mark.parametrize(
    "path", [*corpus_params(), *(pytest.param(p, id=f"samples/{p.name}") for p in sample_files())]
)
def test_adaptive_reaches_every_target_fifo_reaches(path: Path, ratio: float) -> None:
    """At a tenth and a half of each file's live context, the targets in the bug report among them."""
    counter = make_counter("o200k_base")
    target = max(1, int(Ledger(counter).total(sent_messages(load(path))) * ratio))
    result = compact(path, "adaptive", target, counter)
    assert result is not None or compact(path, "fifo", target, counter) is None
