"""recursive: chunked folding into one summary; the invariants shared with ``hierarchical``.

The builders, the hypothesis generator and :func:`check_summary_invariants` here are shared with
``test_strategy_hierarchical``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxc.archive_store import CITATION_RE, citation
from ctxc.compaction.base import CompactContext, Strategy, StrategyResult, parse_config, strategies
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.recursive import Recursive, RecursiveConfig
from ctxc.compaction.run import pinned_indexes
from ctxc.compaction.units import units
from ctxc.formats import load
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.summarize import ESSENTIAL_SECTIONS, SECTIONS, SummaryRequest
from ctxc.summarize.extractive import ExtractiveSummarizer
from ctxc.tokens import make_counter
from ctxc.validate import pairing_problems

ARCHIVE_ID = "3f2a9c1b4d5e" + "7" * 52


class WordCounter:
    """One token per whitespace-separated word: fast, and easy to reason about."""

    name = "words"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


class Recording:
    """The extractive summarizer, remembering every request and answer."""

    name = "recording"

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.requests: list[SummaryRequest] = []
        self.answers: list[str] = []

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        self.requests.append(request)
        self.answers.append(self.inner.summarize(request, count))
        return self.answers[-1]


# ---------------------------------------------------------------------------------------------------
# Builders


def user(text: str) -> Message:
    return Message(role="user", blocks=(TextBlock(text),))


def system(text: str) -> Message:
    return Message(role="system", blocks=(TextBlock(text),))


def assistant(text: str, *calls: ToolUseBlock) -> Message:
    blocks: tuple[Any, ...] = ((TextBlock(text),) if text else ()) + calls
    return Message(role="assistant", blocks=blocks)


def results(*items: tuple[str, str, bool], role: str = "user") -> list[Message]:
    """Results for ``(call id, text, is_error)``: one user message, or one ``tool`` message each."""
    blocks = [ToolResultBlock(tool_use_id=cid, text=text, is_error=err) for cid, text, err in items]
    if role == "tool":
        return [Message(role="tool", blocks=(b,)) for b in blocks]
    return [Message(role="user", blocks=tuple(blocks))]


def numbered(messages: Iterable[Message]) -> tuple[Message, ...]:
    """Give messages their file positions, as an adapter would."""
    return tuple(replace(m, index=i, line=i + 1) for i, m in enumerate(messages))


def make_ctx(
    messages: Sequence[Message],
    target: int,
    *,
    summarizer: Any = None,
    pinned: Iterable[int] | None = None,
    keep_last: int = 2,
    configs: Mapping[str, Any] | None = None,
    ledger: Ledger | None = None,
    instructions: str | None = None,
) -> CompactContext:
    ledger = ledger or Ledger(WordCounter())
    ledger.count_uncounted(messages)
    return CompactContext(
        target=target,
        window=1_000_000,
        ledger=ledger,
        summarizer=summarizer or ExtractiveSummarizer(),
        archive_id=ARCHIVE_ID,
        pinned=frozenset(pinned_indexes(messages, ()) if pinned is None else pinned),
        keep_last=keep_last,
        configs=dict(configs or {}),
        instructions=instructions,
    )


def summaries(out: Sequence[Message]) -> list[Message]:
    return [m for m in out if m.meta.get("ctxc") == "summary"]


def headings(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


# A realistic session: requests, decisions, edits, a failure and its fix, routine reads and searches.
def session(turns: int = 12) -> tuple[Message, ...]:
    msgs: list[Message] = [system("You are a coding agent."), user("Build the inventory service with tests.")]
    for k in range(turns):
        said = (
            f"We'll use approach {k} for step {k} instead of the old one. "
            f"단계 {k}에서는 새 방식을 사용하기로 했습니다. "
            if k % 3 == 0
            else f"Working on step {k}. "
        )
        msgs.append(
            assistant(
                said + "detail " * 40,
                ToolUseBlock(f"r{k}", "Read", {"file_path": f"src/read{k}.py"}),
                ToolUseBlock(
                    f"e{k}", "Edit", {"file_path": f"src/mod{k}.py", "old_string": "a", "new_string": "b"}
                ),
                ToolUseBlock(f"b{k}", "Bash", {"command": f"pytest tests/test_mod{k}.py"}),
                ToolUseBlock(f"g{k}", "Grep", {"pattern": f"step{k}", "path": "src"}),
            )
        )
        failing = k % 4 == 1
        msgs.extend(
            results(
                (f"r{k}", "line\n" * 60, False),
                (f"e{k}", "updated", False),
                (f"b{k}", f"E   AssertionError: step {k} broke" if failing else "1 passed", failing),
                (f"g{k}", f"src/mod{k}.py:1: step{k}", False),
            )
        )
        if k % 3 == 2:
            msgs.append(user(f"Looks good; now do step {k + 1}. 다음 단계도 진행해 주세요."))
    msgs.append(assistant("All steps are done. Next, I will write the README."))
    return numbered(msgs)


# ---------------------------------------------------------------------------------------------------
# Generated conversations

_VOCAB_TEXT = (
    "alpha beta gamma we'll use postgres instead of sqlite 결정 하기로 데이터베이스를 사용하기로 "
    "error: Traceback next todo need to src/a.py tests/b.py ok done the a an"
)
VOCAB = tuple(_VOCAB_TEXT.split())


@st.composite
def texts(draw: st.DrawFn, max_words: int = 80) -> str:
    return " ".join(draw(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=max_words)))


TOOLS = (
    ("Bash", lambda k: {"command": f"pytest tests/t{k}.py"}),
    ("Read", lambda k: {"file_path": f"src/f{k}.py"}),
    ("Edit", lambda k: {"file_path": f"src/f{k}.py", "old_string": "a", "new_string": "b"}),
    ("Grep", lambda k: {"pattern": "x", "path": "src"}),
)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(system(draw(texts(20))))
    msgs.append(user(draw(texts(30))))
    tool_role = draw(st.booleans())
    call_id = 0
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(("user", "text", "tools", "tools")))
        if kind == "user":
            msgs.append(user(draw(texts())))
        elif kind == "text":
            msgs.append(assistant(draw(texts())))
        else:
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                name, make = draw(st.sampled_from(TOOLS))
                calls.append(ToolUseBlock(f"t{call_id}", name, make(call_id)))
                call_id += 1
            msgs.append(assistant(draw(texts(20)) if draw(st.booleans()) else "", *calls))
            outs = [(c.id, draw(texts(120)), draw(st.booleans())) for c in calls]
            msgs.extend(results(*outs, role="tool" if tool_role else "user"))
    return numbered(msgs)


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[Message, ...], CompactContext]:
    msgs = draw(conversations())
    ledger = Ledger(WordCounter())
    total = ledger.total(msgs)
    target = max(1, int(total * draw(st.floats(0.05, 1.1))))
    extra = draw(st.sets(st.sampled_from([m.index for m in msgs]), max_size=2))
    pinned = pinned_indexes(msgs, ()) | extra
    ctx = make_ctx(msgs, target, pinned=pinned, keep_last=draw(st.integers(0, 4)), ledger=ledger)
    return msgs, ctx


# ---------------------------------------------------------------------------------------------------
# Invariants, shared with the hierarchical tests


def fixed_positions(messages: Sequence[Message], ctx: CompactContext, keep_last: int) -> set[int]:
    """Positions of messages that must stay verbatim: units holding pinned or tail messages.

    Computed from :func:`units` directly, independently of the strategies' own layout code.
    """
    tail_start = len(messages) - max(keep_last, 1)
    out: set[int] = set()
    for unit in units(messages):
        span = range(unit.start, unit.stop)
        if unit.stop > tail_start or any(messages[i].index in ctx.pinned for i in span):
            out.update(span)
    return out


def minimum_cost(messages: Sequence[Message], ctx: CompactContext, keep: set[int], essential: bool) -> int:
    """Tokens of the smallest summary of everything summarizable, as a message."""
    span = tuple(m for i, m in enumerate(messages) if i not in keep)
    if not span:
        return 0
    cite = citation(ctx.archive_id, span[0].index, span[-1].index)
    request = SummaryRequest(span, cite, 1, instructions=ctx.instructions, essential=essential)
    text = ExtractiveSummarizer().summarize(request, ctx.ledger.count_text)
    probe = Message(role="user", blocks=(TextBlock(text),))
    return ctx.ledger.tokens(probe)


#: Folding may end with slightly different markers than a one-shot summary ("none recorded" vs
#: "(N older items omitted)"): a few words per section.
SLACK = 20


def check_summary_invariants(
    strategy: Strategy,
    messages: Sequence[Message],
    ctx: CompactContext,
    *,
    keep_last: int,
    essential: bool = False,
    strict_pairing: bool = True,
) -> StrategyResult:
    snapshot = tuple(messages)
    before_problems = pairing_problems(messages, strict=True)
    result = strategy.compact(messages, ctx)
    out = result.messages

    # The input is untouched, and a second run gives the same output.
    assert tuple(messages) == snapshot
    assert all(a is b for a, b in zip(messages, snapshot, strict=True))
    again = strategy.compact(messages, ctx)
    assert again.messages == out
    assert again.actions == result.actions

    total_in = ctx.ledger.total(messages)
    if total_in <= ctx.target:
        assert out == tuple(messages)
        assert result.actions == ()
        return result

    keep = fixed_positions(messages, ctx, keep_last)
    ids = {id(m): i for i, m in enumerate(messages)}
    kept = [ids[id(m)] for m in out if id(m) in ids]
    found = summaries(out)
    assert len(kept) + len(found) == len(out)
    assert len(found) <= 1
    # Pinned and the tail are present, verbatim, in order.
    assert keep <= set(kept)
    assert kept == sorted(kept)
    assert [m.index for m in out] == sorted(m.index for m in out)

    # Pairing: valid stays valid; an invalid input gains no new problem.
    after = pairing_problems(out, strict=True)
    if strict_pairing and not before_problems:
        assert after == []
    else:
        assert {p.tool_id for p in after} <= {p.tool_id for p in before_problems}

    if found:
        summary = found[0]
        first, last = summary.meta["replaces"]
        assert summary.index == first
        assert summary.role == "user"
        assert summary.records == ()
        match = CITATION_RE.search(summary.text)
        assert match is not None
        assert ARCHIVE_ID.startswith(match.group(1)) or ctx.archive_id.startswith(match.group(1))
        assert (int(match.group(2)), int(match.group(3) or match.group(2))) == (first, last)
        assert headings(summary.text) == list(ESSENTIAL_SECTIONS if essential else SECTIONS)
        gone = [i for i in range(len(messages)) if i not in set(kept)]
        replaced = [messages[i] for i in gone]
        assert replaced
        assert (replaced[0].index, replaced[-1].index) == (first, last)
        assert not set(gone) & keep
        # The summary sits where the replaced span began.
        pos = out.index(summary)
        assert all(m.index < first for m in out[:pos])
        (action,) = result.actions
        assert (action.strategy, action.kind, action.first, action.last) == (
            strategy.name,
            "summarize",
            first,
            last,
        )
        assert action.tokens_before == ctx.ledger.total(replaced)
        assert action.tokens_after == ctx.ledger.tokens(summary)
        assert action.tokens_after < action.tokens_before
    else:
        assert out == tuple(messages)
        assert result.actions == ()

    # Under the target whenever the verbatim part plus the smallest possible summary fits.
    reachable = (
        ctx.ledger.total(messages[i] for i in keep) + minimum_cost(messages, ctx, keep, essential) + SLACK
    )
    if reachable <= ctx.target:
        assert ctx.ledger.total(out) <= ctx.target
    return result


# ---------------------------------------------------------------------------------------------------
# Tests


def test_registered_with_options() -> None:
    assert strategies()["recursive"] is Recursive
    cfg = parse_config(Recursive, {"chunk_tokens": "500", "keep_last": "3", "summary_tokens": "800"})
    assert cfg == RecursiveConfig(keep_last=3, chunk_tokens=500, summary_tokens=800)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(20, 3000), st.integers(50, 3000))
def test_invariants_hypothesis(
    case: tuple[tuple[Message, ...], CompactContext], chunk: int, budget: int
) -> None:
    msgs, ctx = case
    cfg = RecursiveConfig(chunk_tokens=chunk, summary_tokens=budget)
    ctx = replace(ctx, configs={"recursive": cfg})
    result = check_summary_invariants(Recursive(), msgs, ctx, keep_last=ctx.keep_last)
    for action in result.actions:
        assert action.note.endswith("fold(s)")


def test_folds_chunks_and_keeps_earlier_facts() -> None:
    msgs = session(12)
    rec = Recording()
    total = Ledger(WordCounter()).total(msgs)
    cfg = RecursiveConfig(keep_last=0, chunk_tokens=250, summary_tokens=900)
    ctx = make_ctx(msgs, total // 2, configs={"recursive": cfg}, keep_last=2)
    check_summary_invariants(Recursive(), msgs, ctx, keep_last=2)
    result = Recursive().compact(msgs, replace(ctx, summarizer=rec))
    assert len(rec.requests) >= 3
    # Each fold hands over the previous summary and the next chunk, oldest first.
    assert rec.requests[0].previous is None
    for earlier, request in zip(rec.answers, rec.requests[1:], strict=False):
        assert request.previous == earlier
    starts = [r.messages[0].index for r in rec.requests]
    assert starts == sorted(starts)
    # Chunks are whole units of about chunk_tokens, never overlapping.
    seen: set[int] = set()
    for request in rec.requests:
        idx = {m.index for m in request.messages}
        assert not idx & seen
        seen |= idx
    (summary,) = summaries(result.messages)
    # The first chunk's decision and edits survive every fold.
    assert "We'll use approach 0 for step 0 instead of the old one." in summary.text
    assert "단계 0에서는 새 방식을 사용하기로 했습니다." in summary.text
    assert "edited src/mod0.py (1 edit, msg 2)" in summary.text
    # Routine counts add up across folds into one line per kind; the state is the newest fold's.
    assert summary.text.count("- routine: ") == 1
    last = result.actions[0].last
    searches = sum(
        1 for m in msgs[:last] for b in m.blocks if isinstance(b, ToolUseBlock) and b.name == "Grep"
    )
    assert f"- routine: {searches} searches" in summary.text
    assert summary.text.count("last assistant message") == 1
    assert f"{len(rec.requests)} fold(s)" in result.actions[0].note


def test_stops_as_soon_as_the_target_is_met() -> None:
    msgs = session(12)
    ledger = Ledger(WordCounter())
    total = ledger.total(msgs)
    cfg = RecursiveConfig(chunk_tokens=300)
    ctx = make_ctx(msgs, total - 200, configs={"recursive": cfg}, keep_last=2, ledger=ledger)
    result = check_summary_invariants(Recursive(), msgs, ctx, keep_last=2)
    (action,) = result.actions
    # Only the oldest stretch was folded: most of the history is still verbatim after the summary.
    verbatim_after = [m for m in result.messages if m.index > action.last]
    assert len(verbatim_after) > len(msgs) // 2
    assert ledger.total(result.messages) <= ctx.target


def test_budget_never_exceeds_what_the_target_leaves() -> None:
    msgs = session(8)
    ledger = Ledger(WordCounter())
    rec = Recording()
    cfg = RecursiveConfig(chunk_tokens=500, summary_tokens=5000)
    ctx = make_ctx(msgs, 900, summarizer=rec, configs={"recursive": cfg}, keep_last=2, ledger=ledger)
    result = check_summary_invariants(Recursive(), msgs, ctx, keep_last=2)
    assert rec.requests
    keep = fixed_positions(msgs, ctx, 2)
    room = ctx.target - ledger.total(msgs[i] for i in keep)
    assert all(r.budget < room for r in rec.requests)
    assert ledger.total(result.messages) <= ctx.target


def test_keep_last_from_config_or_context() -> None:
    msgs = session(6)
    total = Ledger(WordCounter()).total(msgs)
    for cfg_keep, ctx_keep, expect in ((0, 5, 5), (7, 1, 7)):
        ctx = make_ctx(
            msgs, total // 2, configs={"recursive": RecursiveConfig(keep_last=cfg_keep)}, keep_last=ctx_keep
        )
        out = Recursive().compact(msgs, ctx).messages
        tail = msgs[-expect:]
        assert all(any(m is t for m in out) for t in tail)


def test_pinned_inside_the_span_stay_verbatim_after_the_summary() -> None:
    msgs = session(8)
    pin = next(m.index for m in msgs[10:] if m.role == "user" and m.blocks[0].kind == "text")
    total = Ledger(WordCounter()).total(msgs)
    pinned = pinned_indexes(msgs, ()) | {pin}
    ctx = make_ctx(msgs, total // 4, pinned=pinned, keep_last=1)
    result = check_summary_invariants(Recursive(), msgs, ctx, keep_last=1)
    (summary,) = summaries(result.messages)
    first, last = summary.meta["replaces"]
    assert first < pin < last
    positions = [m.index for m in result.messages]
    assert positions.index(pin) > result.messages.index(summary)


def test_nothing_to_summarize_returns_the_input() -> None:
    msgs = numbered([system("s " * 50), user("do it " * 50), assistant("done " * 50)])
    ctx = make_ctx(msgs, 10, keep_last=4)
    assert Recursive().compact(msgs, ctx) == StrategyResult(msgs)


# ---------------------------------------------------------------------------------------------------
# Real transcripts


@pytest.fixture(scope="module")
def o200k_ledger() -> Ledger:
    return Ledger(make_counter("o200k_base", use_cache=False))


def run_corpus(
    strategy: Strategy, path: Path, ledger: Ledger, config: Any = None, *, essential: bool = False
) -> None:
    transcript = load(path)
    for conv in range(transcript.conversations):
        msgs = transcript.conversation(conv)
        if not msgs:
            continue
        total = ledger.total(msgs)
        for ratio in (0.5, 0.2):
            configs = {strategy.name: config} if config is not None else None
            ctx = make_ctx(msgs, max(1, int(total * ratio)), keep_last=4, ledger=ledger, configs=configs)
            # Real logs may already break strict pairing; then only "no new problems" is required.
            keep_last = config.keep_last if config is not None and config.keep_last else 4
            check_summary_invariants(strategy, msgs, ctx, keep_last=keep_last, essential=essential)


@pytest.mark.parametrize("path", corpus_params())
def test_corpus(path: Path, o200k_ledger: Ledger) -> None:
    run_corpus(Recursive(), path, o200k_ledger)


@pytest.mark.parametrize("strategy", ["recursive", "hierarchical"])
def test_a_claude_code_run_counts_what_the_client_sends(strategy: str) -> None:
    """Claude Code resumes from ctxc's boundary: the session's first request, kept where it was before
    the summary and copied after it, is sent (and counted) once. Counting both refused targets that the
    written file meets (the sample at a tenth of its tokens)."""
    from conftest import SAMPLES

    from ctxc.compaction.run import CompactOptions, compact_transcript

    transcript = load(SAMPLES / "claude-code.jsonl")
    counter = make_counter("o200k_base", use_cache=False)
    loose = compact_transcript(
        transcript, CompactOptions(strategy=strategy, target_tokens=1, allow_over=True), counter=counter
    )
    intent = transcript.messages[0]
    assert intent.role == "user"
    assert loose.actions[0].first > intent.index  # the intent precedes the summarized span
    exact = loose.tokens_after  # what the written file holds, as read back
    result = compact_transcript(
        transcript, CompactOptions(strategy=strategy, target_tokens=exact), counter=counter
    )
    assert result.tokens_after <= exact


def test_the_last_request_is_the_users_not_claude_codes_interruption_marker() -> None:
    """Claude Code records "[Request interrupted by user]" as a user message when the user stops a
    turn: not a request, so the one before it is the last request every strategy keeps."""
    msgs = numbered(
        [
            user("start the server"),
            assistant("started"),
            user("scrolling back still does not work"),
            assistant("looking", ToolUseBlock(id="t1", name="Read", input={"path": "app.js"})),
            *results(("t1", "import x", False)),
            user("[Request interrupted by user]"),
        ]
    )
    pinned = pinned_indexes(msgs, ())
    assert {0, 2} <= pinned
