"""Claude Code sends only the thinking of responses recorded with the model it resumes with (the last
response's): ctxc's live context leaves the rest out of every count, and `thinking` saves nothing on it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
from conftest import SAMPLES

from ctxc.agent import ContextManager
from ctxc.analysis import analyze
from ctxc.check import check_file, resolve_budget
from ctxc.compaction.base import CompactContext
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.compaction.thinking import Thinking
from ctxc.evaluate import EvalOptions, Source, run_eval, text_of
from ctxc.evaluate.judge import JudgeScore
from ctxc.evaluate.needles import Planted
from ctxc.formats import load
from ctxc.live import live_context, sent_messages
from ctxc.model import Message, ThinkingBlock, Transcript
from ctxc.replay import replay
from ctxc.summarize import get_summarizer
from ctxc.tokens import make_counter

EARLIER = "claude-opus-4-5-20251101"
SAMPLE = SAMPLES / "claude-code.jsonl"


def _switched(tmp_path: Path, models: dict[str, str]) -> Path:
    """The sample with the responses named (by ``message.id``) recorded with other models."""
    records = [orjson.loads(line) for line in SAMPLE.read_bytes().splitlines()]
    for record in records:
        message = record.get("message")
        if record.get("type") == "assistant" and message.get("id") in models:
            message["model"] = models[message["id"]]
    path = tmp_path / "switched.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _thinking_responses() -> list[str]:
    """The ids of the sample's responses with thinking, in order."""
    found: list[str] = []
    for m in load(SAMPLE).messages:
        mid = m.meta.get("message_id")
        if m.role == "assistant" and any(isinstance(b, ThinkingBlock) for b in m.blocks) and mid not in found:
            found.append(mid)
    return found


def _thinking_tokens(path: Path, ids: list[str]) -> int:
    counter = make_counter("o200k_base")
    texts = [
        b.text
        for m in load(path).messages
        if m.meta.get("message_id") in ids
        for b in m.blocks
        if isinstance(b, ThinkingBlock)
    ]
    return sum(counter.count(texts))


@pytest.fixture
def switched(tmp_path: Path) -> tuple[Path, list[str], list[str]]:
    """The sample recorded with EARLIER until its last response with thinking: (path, the responses
    whose thinking is not sent, those whose thinking is)."""
    ids = _thinking_responses()
    assert len(ids) >= 3
    return _switched(tmp_path, dict.fromkeys(ids[:-1], EARLIER)), ids[:-1], ids[-1:]


def test_analyze_counts_only_the_thinking_of_the_resume_model(
    switched: tuple[Path, list[str], list[str]],
) -> None:
    path, unsent, sent = switched
    before = analyze(SAMPLE, use_cache=False)
    after = analyze(path, use_cache=False)
    cut = _thinking_tokens(path, unsent)
    assert cut > 0
    assert after.total_tokens == before.total_tokens - cut
    assert after.by_kind["thinking"] == before.by_kind["thinking"] - cut == _thinking_tokens(path, sent)
    assert sum(s.tokens for s in after.messages if s.live) == after.total_tokens
    # Nothing new is listed as a compaction.
    assert after.boundaries == () or all(b.kind != "compact_boundary" for b in after.boundaries)


def test_a_cached_scan_gives_the_answer_of_a_fresh_one(
    switched: tuple[Path, list[str], list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    path = switched[0]
    fresh = analyze(path)
    assert analyze(path) == fresh == analyze(path, use_cache=False)


def test_the_resume_model_is_the_last_real_response_of_the_resumed_thread(tmp_path: Path) -> None:
    ids = _thinking_responses()
    last = [m for m in load(SAMPLE).messages if m.role == "assistant"][-1].meta["message_id"]
    # Only the last response changes model: every thinking block was signed by another model.
    path = _switched(tmp_path, {last: "claude-sonnet-4-6"})
    live = live_context(load(path).boundaries, load(path).messages)
    everything = {m.index for m in load(path).messages if m.meta.get("message_id") in ids}
    assert live.unsent_thinking == everything
    # A date is no other model, and a message the client made up ("<synthetic>") names none.
    for model in ("claude-sonnet-4-5", "<synthetic>"):
        path = _switched(tmp_path, {last: model})
        assert live_context(load(path).boundaries, load(path).messages).unsent_thinking == frozenset()


def test_check_and_compact_count_the_live_context_as_sent(
    switched: tuple[Path, list[str], list[str]],
) -> None:
    path = switched[0]
    total = analyze(path, use_cache=False).total_tokens
    assert total < analyze(SAMPLE, use_cache=False).total_tokens
    assert check_file(path, resolve_budget(max_tokens=total), use_cache=False).status != "over"
    assert check_file(path, resolve_budget(max_tokens=total - 1), use_cache=False).status == "over"
    options = CompactOptions(strategy="thinking", target_ratio=0.9, keep_last=0)
    assert compact_transcript(load(path), options).tokens_before == total


def test_thinking_strategy_saves_nothing_on_thinking_not_sent(
    switched: tuple[Path, list[str], list[str]],
) -> None:
    path, unsent, _ = switched
    t = load(path)
    live = live_context(t.boundaries, t.messages)
    ledger = Ledger(make_counter("o200k_base"))
    ledger.withhold_thinking(m for m in t.messages if m.index in live.unsent_thinking)
    ctx = CompactContext(
        target=1, window=200_000, ledger=ledger, summarizer=get_summarizer("extractive"), keep_last=0
    )
    result = Thinking().compact(t.messages, ctx)
    touched = {m.meta.get("message_id") for m in t.messages if m.index in {a.first for a in result.actions}}
    assert touched
    assert touched.isdisjoint(unsent)
    assert all(a.saved > 0 for a in result.actions)
    kept = [m for m in result.messages if m.meta.get("message_id") in unsent]
    assert kept
    assert all(any(isinstance(b, ThinkingBlock) for b in m.blocks) for m in kept)


def test_the_ledger_counts_unsent_thinking_in_one_call() -> None:
    messages = [m for m in load(SAMPLE).messages if any(isinstance(b, ThinkingBlock) for b in m.blocks)]
    assert len(messages) > 1
    inner = make_counter("o200k_base", use_cache=False)
    calls: list[int] = []

    class Recording:
        name = inner.name

        def count(self, texts: Sequence[str]) -> list[int]:
            calls.append(len(texts))
            return inner.count(texts)

    ledger = Ledger(Recording())
    ledger.count_uncounted(messages)
    before = len(calls)
    ledger.withhold_thinking(messages)
    assert len(calls) - before == 1  # a round trip to a counting worker each would be one per message
    assert all(not ledger.sends_thinking(m) for m in messages)


def _thinking_before(path: Path, ids: list[str], index: int) -> int:
    """Tokens of the thinking of responses ``ids`` that precede message ``index``."""
    counter = make_counter("o200k_base")
    texts = [
        b.text
        for m in load(path).messages
        if m.index < index and m.meta.get("message_id") in ids
        for b in m.blocks
        if isinstance(b, ThinkingBlock)
    ]
    return sum(counter.count(texts)) if texts else 0


@pytest.mark.parametrize("earlier", [slice(0, -1), slice(1, -1)], ids=["switch-once", "switch-and-back"])
def test_replay_counts_the_thinking_each_turn_sent_and_the_resume_sends(
    tmp_path: Path, earlier: slice
) -> None:
    ids = _thinking_responses()
    unsent = ids[earlier]  # recorded with EARLIER; the rest, the last included, with the sample's model
    path = _switched(tmp_path, dict.fromkeys(unsent, EARLIER))
    as_recorded = replay(load(SAMPLE), ContextManager(window=10_000_000))
    r = replay(load(path), ContextManager(window=10_000_000))
    model = {m.index: m.meta.get("model") for m in load(path).messages}
    by_response = {m.meta.get("message_id"): m.meta.get("model") for m in load(path).messages}
    assert {model[t.index] for t in r.turns} == {EARLIER, model[r.turns[-1].index]}
    for old, new in zip(as_recorded.turns, r.turns, strict=True):
        # A turn is sent the thinking recorded with its own model, not another's.
        other = [i for i in ids if by_response[i] != model[new.index]]
        assert new.raw_tokens == new.tokens == old.raw_tokens - _thinking_before(path, other, new.index)
    assert any(t.raw_tokens < o.raw_tokens for o, t in zip(as_recorded.turns, r.turns, strict=True))
    # The context after the last message is the one a resume sends: analyze's.
    assert r.final_raw == r.final_tokens == analyze(path, use_cache=False).total_tokens
    assert r.final_raw == as_recorded.final_raw - _thinking_tokens(path, unsent)
    assert r.peak_raw == r.final_raw


def test_replay_compacts_the_context_as_sent(switched: tuple[Path, list[str], list[str]]) -> None:
    path = switched[0]
    r = replay(load(path), ContextManager(window=16_000))
    assert r.compactions
    for t in r.compactions:
        assert t.compaction is not None
        assert t.compaction.tokens_before == t.tokens_before
        assert t.tokens == t.compaction.tokens_after <= t.raw_tokens
    assert r.final_raw == analyze(path, use_cache=False).total_tokens


def test_what_eval_measures_is_what_the_client_sends(switched: tuple[Path, list[str], list[str]]) -> None:
    path, unsent, sent = switched
    t = load(path)
    text = text_of(sent_messages(t))
    thinking = {
        mid: [
            b.text
            for m in t.messages
            if m.meta.get("message_id") == mid
            for b in m.blocks
            if isinstance(b, ThinkingBlock)
        ]
        for mid in unsent + sent
    }
    assert all(x not in text for mid in unsent for x in thinking[mid])
    assert all(x in text for mid in sent for x in thinking[mid])
    # The default window is the size of the context as sent, as compaction counts it.
    options = EvalOptions(strategies=("fifo",), targets=(0.5,), needles=2, use_cache=False)
    judged: list[Sequence[Message]] = []

    class Recording:
        def score(self, output: Sequence[Message], planted: Planted, original: Transcript) -> JudgeScore:
            judged.append(output)
            return JudgeScore({})

    (case,) = run_eval([Source(str(path), path.read_bytes())], options, judge=Recording()).cases
    assert case.error is None
    assert case.window == case.tokens_before < analyze(SAMPLE, use_cache=False).total_tokens
    # The judge reads what the client sends of the output, too.
    (read,) = judged
    sent_thinking = [b for m in read if m.meta.get("message_id") in sent for b in m.blocks]
    assert any(isinstance(b, ThinkingBlock) for b in sent_thinking)
    unsent_thinking = [b for m in read if m.meta.get("message_id") in unsent for b in m.blocks]
    assert not any(isinstance(b, ThinkingBlock) for b in unsent_thinking)
