"""hierarchical: one tiered summary of the history; the essential mode the adaptive pipeline uses."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import corpus_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_strategy_recursive import (
    Recording,
    WordCounter,
    cases,
    check_summary_invariants,
    fixed_positions,
    make_ctx,
    run_corpus,
    session,
    summaries,
)

from ctxc.compaction.base import CompactContext, parse_config, strategies
from ctxc.compaction.hierarchical import BUDGET_FLOOR, Hierarchical, HierarchicalConfig
from ctxc.compaction.ledger import Ledger
from ctxc.model import Message
from ctxc.summarize import ESSENTIAL_SECTIONS, SECTIONS, SummaryRequest
from ctxc.summarize.extractive import ExtractiveSummarizer


def test_registered_with_options() -> None:
    assert strategies()["hierarchical"] is Hierarchical
    cfg = parse_config(Hierarchical, {"essential": "true", "summary_tokens": "500", "keep_last": "2"})
    assert cfg == HierarchicalConfig(keep_last=2, summary_tokens=500, essential=True)
    # The adaptive pipeline's stage 5 builds its config this way: these field names are an interface.
    assert replace(HierarchicalConfig(), essential=True, keep_last=3) == HierarchicalConfig(3, 3000, True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(50, 4000), st.booleans())
def test_invariants_hypothesis(
    case: tuple[tuple[Message, ...], CompactContext], budget: int, essential: bool
) -> None:
    msgs, ctx = case
    cfg = HierarchicalConfig(summary_tokens=budget, essential=essential)
    ctx = replace(ctx, configs={"hierarchical": cfg})
    result = check_summary_invariants(Hierarchical(), msgs, ctx, keep_last=ctx.keep_last, essential=essential)
    for action in result.actions:
        assert action.note.endswith("essential sections)" if essential else "tiered sections)")


def _summary_text(target_share: float, **cfg: object) -> tuple[str, tuple[Message, ...], int]:
    msgs = session(12)
    ledger = Ledger(WordCounter())
    total = ledger.total(msgs)
    ctx = make_ctx(msgs, int(total * target_share), keep_last=2, ledger=ledger)
    ctx = replace(ctx, configs={"hierarchical": HierarchicalConfig(**cfg)})  # type: ignore[arg-type]
    result = check_summary_invariants(
        Hierarchical(), msgs, ctx, keep_last=2, essential=bool(cfg.get("essential"))
    )
    (summary,) = summaries(result.messages)
    return summary.text, result.messages, result.actions[0].last


def test_tiers_in_one_structured_summary() -> None:
    text, _, _ = _summary_text(0.3)
    assert [ln[3:] for ln in text.splitlines() if ln.startswith("## ")] == list(SECTIONS)
    # Tier 1: decisions and user instructions quoted verbatim, all of them.
    for k in (0, 3, 6, 9):
        assert f'(assistant): "We\'ll use approach {k} for step {k} instead of the old one."' in text
        assert f'(assistant): "단계 {k}에서는 새 방식을 사용하기로 했습니다."' in text
    assert "(user): Looks good; now do step 3. 다음 단계도 진행해 주세요." in text
    # Tier 2: one line per changed file and per failure with its outcome; the oldest go first.
    edited = re.findall(r"^- edited src/mod(\d+)\.py \(1 edit, msg \d+\)$", text, re.M)
    assert len(edited) >= 5
    assert edited == sorted(edited, key=int)
    assert edited[-1] == "11"
    assert "E AssertionError: step 9 broke [Bash `pytest tests/test_mod9.py`]" in text
    # Tier 3: routine work as counts, the first thing given up when the budget is tight.
    assert "src/read" not in text


def test_tier3_routine_work_as_counts() -> None:
    msgs = session(12)
    rec = Recording()
    ctx = make_ctx(msgs, 700, keep_last=2, summarizer=rec)
    Hierarchical().compact(msgs, ctx)
    # Given room, the material the strategy hands over collapses routine work into counts.
    text = ExtractiveSummarizer().summarize(replace(rec.requests[-1], budget=100_000), ctx.ledger.count_text)
    reads = re.search(r"^- read (\d+) files \(src/read0\.py, src/read1\.py, .*, \+(\d+) more\)$", text, re.M)
    assert reads is not None
    n = int(reads.group(1))
    assert n > 6
    assert int(reads.group(2)) == n - 6
    assert re.search(rf"^- routine: {n} searches$", text, re.M)
    assert re.search(rf"^- ran {n} commands \(pytest tests/test_mod0\.py, .*, …\)$", text, re.M)
    assert "src/read6.py" not in text


def test_least_loss_summarizes_only_the_oldest_stretch_needed() -> None:
    _, generous, last_generous = _summary_text(0.8)
    _, tight, last_tight = _summary_text(0.3)
    assert last_generous < last_tight
    assert len(generous) > len(tight)


def test_essential_mode_as_the_adaptive_pipeline_calls_it() -> None:
    msgs = session(12)
    ledger = Ledger(WordCounter())
    total = ledger.total(msgs)
    # Just over the target: an essential summary still takes the whole history (stage 5 keeps only
    # the last few messages), unlike the normal mode's least-loss prefix.
    ctx = make_ctx(msgs, total - 10, keep_last=4, ledger=ledger)
    cfg = replace(ctx.config(Hierarchical), essential=True, keep_last=3)
    ctx = replace(ctx, configs={"hierarchical": cfg})
    result = check_summary_invariants(Hierarchical(), msgs, ctx, keep_last=3, essential=True)
    (summary,) = summaries(result.messages)
    assert [ln[3:] for ln in summary.text.splitlines() if ln.startswith("## ")] == list(ESSENTIAL_SECTIONS)
    keep = fixed_positions(msgs, ctx, 3)
    assert [m for m in result.messages if m is not summary] == [msgs[i] for i in sorted(keep)]


class Overshooting:
    """A summarizer that ignores its budget: twice as many words as asked (a model might)."""

    name = "overshooting"

    def __init__(self, factor: int = 2, floor: int = 0) -> None:
        self.factor = factor
        self.floor = floor
        self.budgets: list[int] = []

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        self.budgets.append(request.budget)
        return request.citation + " " + "w " * max(self.floor, request.budget * self.factor)


def test_budget_halves_until_the_summary_fits() -> None:
    msgs = session(12)
    ledger = Ledger(WordCounter())
    fake = Overshooting(factor=3)
    ctx = make_ctx(msgs, 1000, keep_last=2, ledger=ledger, summarizer=fake)
    ctx = replace(ctx, configs={"hierarchical": HierarchicalConfig(essential=True)})
    keep = fixed_positions(msgs, ctx, 2)
    room = ctx.target - ledger.total(msgs[i] for i in keep) - 4  # 4 = the summary message's framing
    assert 800 < room < 3000
    result = Hierarchical().compact(msgs, ctx)
    # 3x the budget is over the room until the budget is a quarter of it.
    assert fake.budgets == [room, room // 2, room // 4]
    assert ledger.total(result.messages) <= ctx.target


def test_gives_up_at_the_floor_with_the_smallest_result() -> None:
    msgs = session(12)
    ledger = Ledger(WordCounter())
    fake = Overshooting(factor=1, floor=5000)  # never fits, whatever the budget
    ctx = make_ctx(msgs, 1000, keep_last=2, ledger=ledger, summarizer=fake)
    result = Hierarchical().compact(msgs, ctx)
    assert fake.budgets[-1] == BUDGET_FLOOR
    assert fake.budgets == sorted(fake.budgets, reverse=True)
    # A 5000-word summary costs more than the history it would replace: nothing is gained, so the
    # input comes back (the run reports it as over target).
    assert result.messages == msgs
    assert result.actions == ()


def test_summarizer_gets_the_instructions_and_the_whole_span() -> None:
    msgs = session(6)
    rec = Recording()
    ledger = Ledger(WordCounter())
    ctx = make_ctx(msgs, 400, keep_last=2, ledger=ledger, summarizer=rec, instructions="focus on step 2")
    result = Hierarchical().compact(msgs, ctx)
    (summary,) = summaries(result.messages)
    request = rec.requests[-1]
    assert request.instructions == "focus on step 2"
    assert request.previous is None
    first, last = summary.meta["replaces"]
    assert (request.messages[0].index, request.messages[-1].index) == (first, last)
    assert "Focus: focus on step 2" in summary.text


@pytest.fixture(scope="module")
def o200k_ledger() -> Ledger:
    from ctxc.tokens import make_counter

    return Ledger(make_counter("o200k_base", use_cache=False))


@pytest.mark.parametrize("path", corpus_params())
def test_corpus(path: Path, o200k_ledger: Ledger) -> None:
    run_corpus(Hierarchical(), path, o200k_ledger)


@pytest.mark.parametrize("path", corpus_params())
def test_corpus_essential(path: Path, o200k_ledger: Ledger) -> None:
    run_corpus(
        Hierarchical(), path, o200k_ledger, HierarchicalConfig(essential=True, keep_last=3), essential=True
    )
