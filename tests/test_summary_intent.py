"""A summary quotes the session's intent verbatim (issue 17 item 4).

When the client will not see the session's first request (it lies before the log's own compaction, or
ctxc's summary is where Claude Code resumes), the summary's Session intent section quotes it word for
word, whatever the budget, and no separate copy of it is needed. Strategies that write no summary still
place a copy.
"""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest
from conftest import CORPUS

from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.formats import load
from ctxc.live import live_messages, quotes, request_text, session_intent
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock, Transcript
from ctxc.summarize import SummaryRequest, quoting_intent
from ctxc.summarize.extractive import ExtractiveSummarizer
from ctxc.summarize.facts import INTENT_LABEL
from ctxc.summarize.prompt import INTENT_BULLET, Validation, build_prompt, with_intent

INTENT = (
    "Build a CSV importer for the ledger service.\n"
    "Requirements:\n"
    "  - a --dry-run flag that prints what would change\n"
    "  - reject rows whose amount has more than two decimals\n"
    + "Context: "
    + "the ledger is append-only. " * 40
)
MANUAL = CORPUS / "claude-code" / "entire-cli_manual-compact_v2.1.14.jsonl"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")


def _count(text: str) -> int:
    return max(1, len(text) // 4)


def _span(first: int = 0, with_intent: bool = True) -> tuple[Message, ...]:
    out: list[Message] = []
    if with_intent:
        out.append(Message(role="user", blocks=(TextBlock(INTENT),), index=first))
    for k in range(1, 30):
        i = first + 2 * k
        out.append(
            Message(
                role="assistant",
                blocks=(
                    TextBlock(f"Step {k}: we will use the csv module rather than pandas for file {k}."),
                    ToolUseBlock(f"t{k}", "Read", {"file_path": f"/src/importer_{k}.py"}),
                ),
                index=i - 1,
            )
        )
        out.append(
            Message(role="user", blocks=(ToolResultBlock(f"t{k}", "x = 1\n" * 80, name="Read"),), index=i)
        )
    return tuple(out)


# ---------------------------------------------------------------------------------------- extractive


@pytest.mark.parametrize("budget", [40, 200, 5000])
def test_the_extractive_summary_quotes_the_intent_whole_at_any_budget(budget: int) -> None:
    request = SummaryRequest(_span(), "ctxc archive abc messages 0-58", budget, intent=INTENT)
    text = ExtractiveSummarizer().summarize(request, _count)
    assert quotes(text, INTENT)
    section = text.split("## Session intent\n", 1)[1]
    assert section.startswith(f"- {INTENT_LABEL}Build a CSV importer")
    assert text.count("Build a CSV importer") == 1  # the span's own first request is not repeated


def test_an_intent_from_outside_the_span_is_quoted_too() -> None:
    request = SummaryRequest(_span(100, with_intent=False), "c", 60, intent=INTENT)
    assert quotes(ExtractiveSummarizer().summarize(request, _count), INTENT)
    without = ExtractiveSummarizer().summarize(SummaryRequest(_span(100, with_intent=False), "c", 60), _count)
    assert "Build a CSV importer" not in without


def test_a_folded_summary_quotes_the_intent_once() -> None:
    summarizer = quoting_intent(ExtractiveSummarizer(), INTENT)
    first = summarizer.summarize(SummaryRequest(_span()[:20], "c1", 300), _count)
    folded = summarizer.summarize(
        SummaryRequest(_span(200, with_intent=False), "c2", 300, previous=first), _count
    )
    assert quotes(folded, INTENT)
    assert folded.count("Build a CSV importer") == 1


# -------------------------------------------------------------------------------- model summarizers


def test_the_prompt_gives_the_intent_and_asks_for_it_verbatim() -> None:
    prompt = build_prompt(SummaryRequest(_span(), "c", 500, intent=INTENT))
    assert f"<session_intent>\n{INTENT.strip()}\n</session_intent>" in prompt.user
    assert "word for word" in prompt.system
    assert "<session_intent>" not in build_prompt(SummaryRequest(_span(), "c", 500)).user


ANSWER = (
    "Summary of c.\n\n## Session intent\n- build an importer\n\n## Current state\n- done\n\n"
    "## Next steps\n- none\n"
)


def test_an_answer_that_left_the_intent_out_gets_it_as_the_first_bullet() -> None:
    fixed = with_intent(ANSWER, INTENT)
    assert quotes(fixed, INTENT)
    assert fixed.split("## Session intent\n", 1)[1].startswith(INTENT_BULLET + "Build a CSV importer")
    assert "- build an importer" in fixed
    assert with_intent(fixed, INTENT) == fixed
    assert with_intent(ANSWER, None) == ANSWER


def test_validation_makes_every_accepted_summary_quote_the_intent() -> None:
    request = SummaryRequest(_span(), "c", 100_000, intent=INTENT, essential=True)
    check = Validation(request, _count, who="test")
    accepted = check.offer(ANSWER)
    assert accepted is not None
    assert quotes(accepted, INTENT)


# ------------------------------------------------------------------------------------- compact runs


def _env(rtype: str, uid: str, parent: str | None, ts: int, **extra: Any) -> dict[str, Any]:
    stamp = f"2026-01-01T00:{ts // 60:02d}:{ts % 60:02d}.000Z"
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": "s-1",
        "cwd": "/w",
        "version": "2.1.14",
    } | {
        "type": rtype,
        "uuid": uid,
        "timestamp": stamp,
        **extra,
    }


def _log() -> bytes:
    """A Claude Code session whose first request is the multi-line INTENT, then many tool turns."""
    records = [_env("user", "u0", None, 0, message={"role": "user", "content": INTENT})]
    parent = "u0"
    for k in range(1, 25):
        call = {"type": "tool_use", "id": f"t{k}", "name": "Read", "input": {"file_path": f"/src/f{k}.py"}}
        text = {"type": "text", "text": f"Reading file {k}; we will keep the csv module."}
        message = {"id": f"m{k}", "role": "assistant", "model": "claude-x", "content": [text, call]}
        records.append(_env("assistant", f"a{k}", parent, 2 * k, message=message))
        result = {"type": "tool_result", "tool_use_id": f"t{k}", "content": "line\n" * 120}
        records.append(
            _env("user", f"r{k}", f"a{k}", 2 * k + 1, message={"role": "user", "content": [result]})
        )
        parent = f"r{k}"
    last = {
        "id": "mz",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "Done."}],
    }
    records.append(_env("assistant", "az", parent, 60, message=last))
    records.append(
        _env("user", "uz", "az", 61, message={"role": "user", "content": "Now add the dry-run flag"})
    )
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _copies_of_the_intent(t: Transcript, intent: str) -> int:
    """Live messages, other than a summary, that are the intent itself (the original or a copy)."""
    return sum(
        1
        for m in live_messages(t)
        if not m.meta.get("is_compact_summary") and m.is_request and request_text(m) == intent
    )


def _compact(t: Transcript, strategy: str, target: int) -> Transcript:
    options = CompactOptions(strategy=strategy, target_tokens=target, allow_over=True)
    return compact_transcript(t, options).transcript


def _ctxc_summary(t: Transcript) -> str:
    summaries = [m.text for m in live_messages(t) if m.meta.get("is_compact_summary")]
    assert summaries
    return summaries[0]


@pytest.mark.parametrize("strategy", ["recursive", "hierarchical", "adaptive"])
def test_a_summary_that_replaces_the_start_quotes_the_intent_and_no_copy_is_made(strategy: str) -> None:
    t = load(io.BytesIO(_log()), input_format="claude-code")
    intent = request_text(session_intent(t.messages) or t.messages[0])
    out = _compact(t, strategy, 400)
    assert quotes(_ctxc_summary(out), intent)
    assert _copies_of_the_intent(out, intent) == 0


@pytest.mark.parametrize("strategy", ["fifo", "selective"])
def test_strategies_without_a_summary_still_carry_the_intent(strategy: str) -> None:
    t = load(io.BytesIO(_log()), input_format="claude-code")
    out = _compact(t, strategy, 400)
    text = "\n".join(m.text for m in live_messages(out))
    assert quotes(text, INTENT)


@needs_corpus
@pytest.mark.parametrize("strategy", ["recursive", "hierarchical", "fifo", "selective"])
def test_an_intent_before_the_logs_own_compaction(strategy: str) -> None:
    t = load(MANUAL)
    intent = session_intent(t.messages)
    assert intent is not None
    assert intent.line < min(b.line for b in t.boundaries if b.resets)
    said = request_text(intent)
    out = _compact(t, strategy, 3000)
    assert quotes("\n".join(m.text for m in live_messages(out)), said)
    if strategy in ("recursive", "hierarchical"):
        ours = [m for m in live_messages(out) if m.meta.get("is_compact_summary") and "ctxc" in m.text]
        assert ours
        assert quotes(ours[-1].text.split("## Session intent", 1)[1], said)
        assert _copies_of_the_intent(out, said) == 0
