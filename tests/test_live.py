"""The live context: what a log's client sends next, per format, and what every command makes of it.

These are the cases issue 17 found wrong: counts that included history the model no longer sees, a
window that ignored the log's model, an intent lost after resume, Claude's own summary dropped by
fifo, ctxc's Codex compaction written before the log's own.
"""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from conftest import CORPUS, SAMPLES, corpus_params, run

import ctxc
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.formats import load
from ctxc.live import (
    last_request,
    live_context,
    live_messages,
    quotes,
    request_text,
    sent_messages,
    session_intent,
    side_conversations,
)
from ctxc.model import Message, TextBlock, Transcript
from ctxc.validate import pairing_problems

AUTO = CORPUS / "claude-code" / "entire-cli_auto-compact_summary-records_v2.1.5.jsonl"
MANUAL = CORPUS / "claude-code" / "entire-cli_manual-compact_v2.1.14.jsonl"
CODEX_COMPACTED = CORPUS / "codex" / "localpush_rollout_compacted_text-redacted_0.104.jsonl"
CODEX_ONE_CALL = CORPUS / "codex" / "agent-sessions_schema-coverage_trimmed.jsonl"
PI = CORPUS / "chat-messages" / "pi-coding-agent_before-compaction.jsonl"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
STRATEGIES = ("fifo", "selective", "mask", "offload", "recursive", "hierarchical", "adaptive")


def _user(text: str, index: int = 0, **meta: object) -> Message:
    return Message(role="user", blocks=(TextBlock(text=text),), index=index, meta=meta)


# ----------------------------------------------------------------------------------------- intent


def test_the_intent_is_the_users_own_words() -> None:
    harness = [
        _user("<environment_context>\n  <cwd>/r</cwd>\n</environment_context>", 0),
        _user("<user_instructions>be brief</user_instructions>", 1),
        _user("# AGENTS.md instructions for /r\n\n<INSTRUCTIONS>x</INSTRUCTIONS>", 2),
        _user("<system-reminder>remember</system-reminder>", 3),
        _user("note", 4, is_meta=True),
        _user("Fix the rounding bug in coupons", 5),
        _user("and add a test", 6),
    ]
    intent = session_intent(harness)
    assert intent is not None
    assert intent.index == 5
    last = last_request(harness)
    assert last is not None
    assert last.index == 6


def test_a_slash_command_session_is_known_by_its_arguments() -> None:
    text = "<command-message>review</command-message>\n<command-name>/review</command-name>\n"
    assert request_text(_user(text + "<command-args>the auth module</command-args>")) == "the auth module"
    assert request_text(_user(text + "<command-args></command-args>")) == ""


def test_a_shell_command_the_user_ran_or_a_loaded_skill_is_no_request() -> None:
    """The output of a user's own ``!cmd`` can be huge; pinned as "the last request" it alone could exceed
    the target (pi's before-compaction corpus session: 27,584 tokens of ``find .``)."""
    claude = "<bash-input>find .</bash-input>", "<bash-stdout>./a</bash-stdout><bash-stderr></bash-stderr>"
    codex = "<user_shell_command>\n<command>ls</command>\n<result>a b</result>\n</user_shell_command>"
    asked = _user("List the modules", 0)
    skill = "<skill>\n<name>demo</name>\n<path>skills/demo/SKILL.md</path>\nbody\n</skill>"  # Codex loads it
    for text in (*claude, codex, skill):
        assert request_text(_user(text)) == ""
        assert last_request([asked, _user(text, 1)]) is asked
    pi = _user("Ran `find .`\n```\n./a\n```", 1, injected=True)  # pi's bashExecution, as its adapter reads it
    assert not pi.is_request
    assert last_request([asked, pi]) is asked


def test_sidechain_conversations_are_apart_unless_the_log_is_a_subagents_own() -> None:
    assert side_conversations([(0, False), (1, True), (1, True), (2, True)]) == {1, 2}
    assert side_conversations([(0, True), (1, True)]) == frozenset()  # a 2.x subagent file


# ------------------------------------------------------------------------------- per-format resets


def test_a_chat_log_is_live_from_its_last_compaction_block() -> None:
    lines = [
        {"role": "user", "content": "build the parser"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "now the writer"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "We built the parser."}]},
        {"role": "user", "content": "next"},
    ]
    data = b"".join(orjson.dumps(x) + b"\n" for x in lines)
    t = load(io.BytesIO(data))
    live = live_context(t.boundaries, t.messages)
    history, sent = live.split(t.messages)
    assert [m.index for m in history] == [0, 1, 2]
    assert [m.index for m in sent] == [3, 4]
    a = ctxc.analyze(io.BytesIO(data))
    assert a.live_from_line == 4
    assert (a.history_messages, a.live_messages) == (3, 2)


@needs_corpus
def test_pi_keeps_its_tail_and_carries_its_summary() -> None:
    t = load(PI)
    last = [b for b in t.boundaries if b.resets][-1]
    assert last.kept_from is not None
    assert last.kept_from < last.index
    assert last.carried
    assert "<summary>" in last.carried[0].text
    a = ctxc.analyze(PI, use_cache=False)
    kept = [s for s in a.messages if s.live and s.index < last.index]
    assert kept
    assert min(s.index for s in kept) == last.kept_from
    assert a.carried_tokens > 0


@needs_corpus
def test_codex_carries_its_replacement_history() -> None:
    t = load(CODEX_COMPACTED)
    (reset,) = [b for b in t.boundaries if b.resets]
    assert len(reset.carried) == 40  # the compacted record's replacement_history items
    a = ctxc.analyze(CODEX_COMPACTED, use_cache=False)
    assert a.carried_tokens > 0
    assert (a.window, a.window_source) == (258_400, "log")


# ---------------------------------------------------------------------------- analyze and check


@needs_corpus
def test_analyze_reports_the_live_context_and_the_history_apart(capsys: pytest.CaptureFixture[str]) -> None:
    a = ctxc.analyze(AUTO, use_cache=False)
    assert a.live_from_line == 432
    assert a.history_messages == 225
    assert a.total_tokens == a.max_context < 10_000  # what Claude Code sends after its boundary
    assert a.history_tokens > 100_000
    assert a.model is not None
    assert a.model.startswith("claude-opus-4-5")
    assert a.window_source == "log model"
    code, out, _ = run(capsys, "analyze", str(AUTO), "-f", "table")
    assert code == 0
    flat = " ".join(out.split())
    assert f"225 messages, {a.history_tokens:,} tokens before the log's own compaction at line 432" in flat
    assert "not in context" in flat
    # The size the log recorded at its compaction is said to be that, not a second "tokens before" figure
    # (158,105) that reads as contradicting the counted history (118,002).
    (boundary,) = [b for b in a.boundaries if b.resets]
    assert f"compact_boundary (auto), at a recorded context of {boundary.pre_tokens:,} tokens" in flat
    assert flat.count("tokens before") == 1


@needs_corpus
def test_one_recorded_api_call_is_said_in_the_singular(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "analyze", str(CODEX_ONE_CALL), "-f", "table")
    assert code == 0
    assert "recorded usage: 1 API call, last context" in " ".join(out.split())


@needs_corpus
def test_check_gates_on_the_live_context(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", str(AUTO), "--max-usage", "0.5", "-f", "json")
    assert code == 0, out
    doc = orjson.loads(out)
    assert doc["schema"] == "ctxc.check/2"
    assert doc["files"][0]["status"] == "ok"


def test_check_applies_the_share_to_each_logs_window(capsys: pytest.CaptureFixture[str]) -> None:
    codex = str(SAMPLES / "codex.jsonl")
    a = ctxc.analyze(codex)
    code, out, _ = run(capsys, "check", codex, "--max-usage", "0.5", "-f", "json")
    doc = orjson.loads(out)
    assert doc["files"][0]["window"] == a.window
    assert doc["files"][0]["limit"] == round(0.5 * a.window)
    assert code in (0, 6)


# ----------------------------------------------------------------------------------------- compact


def _sent_text(t: Transcript) -> str:
    return "\n".join(m.text for m in sent_messages(t))


@needs_corpus
@pytest.mark.parametrize("path", corpus_params("claude-code/entire-cli_*.jsonl"))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_keeps_the_intent_and_last_request_in_the_live_context(
    path: Path, strategy: str, tmp_path: Path
) -> None:
    t = load(path)
    intent = session_intent(t.messages)
    last = last_request(t.messages)
    assert intent is not None
    assert last is not None
    size = ctxc.analyze(path).total_tokens
    out = tmp_path / "out.jsonl"
    args = ("compact", str(path), "-s", strategy, "--target-tokens", str(size // 2), "-o", str(out), "-q")
    with pytest.raises(SystemExit) as exc:
        ctxc.cli.main(list(args))
    if exc.value.code == 6:  # over target: an honest refusal, nothing written
        assert not out.exists()
        return
    assert exc.value.code in (0, None)
    written = load(out, input_format="claude-code")
    text = _sent_text(written)
    assert quotes(text, request_text(intent))  # verbatim; a summary indents the lines it quotes
    assert quotes(text, request_text(last))
    assert pairing_problems(live_messages(written), strict=True) == []
    # What the client no longer sends is left as it was.
    before = live_context(t.boundaries, t.messages)
    history = [m for m in t.messages if not before.is_live(m.index, m.conversation)]
    assert [m.text for m in written.messages[: len(history)]] == [m.text for m in history]


@needs_corpus
@pytest.mark.parametrize("strategy", ["fifo", "selective"])
def test_fifo_and_selective_keep_the_logs_own_summary(strategy: str) -> None:
    t = load(MANUAL)
    own = next(m for m in t.messages if m.meta.get("is_compact_summary"))
    size = ctxc.analyze(MANUAL).total_tokens
    result = compact_transcript(t, CompactOptions(strategy=strategy, target_tokens=size // 2))
    live = live_context(result.transcript.boundaries, result.transcript.messages)
    sent = live.split(result.transcript.messages)[1]
    assert any(m.text == own.text for m in sent)


@needs_corpus
def test_ctxc_writes_its_codex_compaction_after_the_logs_own(tmp_path: Path) -> None:
    t = load(CODEX_COMPACTED)
    own = max(b.line for b in t.boundaries if b.resets)
    size = ctxc.analyze(CODEX_COMPACTED).total_tokens
    result = compact_transcript(t, CompactOptions(strategy="hierarchical", target_tokens=size // 2))
    written = result.transcript
    resets = [b.line for b in written.boundaries if b.resets]
    assert len(resets) == 2
    assert resets[0] == own < resets[1]
    # Everything the log had before its own compaction is still there, unchanged.
    assert written.records[: own - 1] == t.records[: own - 1]


@needs_corpus
@pytest.mark.parametrize("strategy", ["fifo", "hierarchical"])
def test_codex_replacement_history_is_compacted_with_the_rest(strategy: str) -> None:
    """What the log's compacted record carries is part of the live context: at 10% of it, a new
    compacted record after the log's own carries less."""
    t = load(CODEX_COMPACTED)
    own = max(b.line for b in t.boundaries if b.resets)
    size = ctxc.analyze(CODEX_COMPACTED).total_tokens
    result = compact_transcript(t, CompactOptions(strategy=strategy, target_tokens=size // 10))
    assert result.tokens_after <= size // 10
    written = result.transcript
    ours = [b for b in written.boundaries if b.resets]
    assert ours[-1].line > own
    assert written.records[: own - 1] == t.records[: own - 1]
    text = _sent_text(written)
    intent = session_intent(t.messages)
    assert intent is not None
    assert request_text(intent) in text


@needs_corpus
@pytest.mark.parametrize("strategy", ["fifo", "adaptive"])
def test_a_target_above_the_size_leaves_a_compacted_log_as_it_is(strategy: str) -> None:
    """Nothing compacted, nothing added: the intent from before the log's own compaction is copied in
    only when ctxc compacts something (it grew the file, saying "nothing to do")."""
    t = load(CODEX_COMPACTED)
    size = ctxc.analyze(CODEX_COMPACTED).total_tokens
    result = compact_transcript(t, CompactOptions(strategy=strategy, target_tokens=size * 2))
    assert result.tokens_after == result.tokens_before
    assert b"".join(result.transcript.parts()) == CODEX_COMPACTED.read_bytes()


@needs_corpus
def test_the_request_copied_in_shows_in_the_savings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Over target with nothing offload can move, the session's first request is still copied into the live
    context: the summary line said "+0.1% ... [nothing to do]"; the copy is an action of its own."""
    out = tmp_path / "out.jsonl"
    args = ("compact", str(CODEX_COMPACTED), "-s", "offload", "--target-ratio", "0.05", "--allow-over")
    code, _, err = run(capsys, *args, "-o", str(out))
    assert code == 0, err
    assert "nothing to do" not in err
    result = compact_transcript(
        load(CODEX_COMPACTED), CompactOptions(strategy="offload", target_ratio=0.05, allow_over=True)
    )
    assert result.tokens_after > result.tokens_before
    assert sum(result.savings_by_strategy().values()) == result.tokens_before - result.tokens_after
    assert f"keep {result.tokens_after - result.tokens_before:+,}" in err


@needs_corpus
def test_fifo_again_keeps_its_own_copy_of_the_intent_instead_of_growing() -> None:
    """A second run finds the copy of the session's first request that the first run put in the live
    context: it stays pinned, rather than being dropped, quoted in a placeholder and copied in again."""
    size = ctxc.analyze(PI).total_tokens
    options = CompactOptions(strategy="fifo", target_tokens=size // 8, allow_over=True)
    once = compact_transcript(load(PI), options).transcript
    again = compact_transcript(once, options)
    assert again.tokens_after <= again.tokens_before
