"""fifo: oldest whole units first, pinned and the tail kept, placeholders citing the archive.

The conversation builders, the hypothesis generator and the invariant checks here are shared with
``test_strategy_selective``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxc.archive_store import CITATION_RE, citation
from ctxc.compaction.base import (
    CompactContext,
    Strategy,
    StrategyResult,
    parse_config,
    protected_units,
    strategies,
)
from ctxc.compaction.fifo import Carry, Fifo, FifoConfig, drop_units, placeholder_text
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.run import pinned_indexes
from ctxc.compaction.selective import Selective
from ctxc.compaction.units import units
from ctxc.errors import UsageError
from ctxc.formats import load
from ctxc.model import ImageBlock, Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from ctxc.tokens import make_counter
from ctxc.validate import pairing_problems

ARCHIVE_ID = "3f2a9c1b4d5e" + "0" * 52


class WordCounter:
    """One token per whitespace-separated word: easy to reason about in expected values."""

    name = "words"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


class NoSummarizer:
    """Trimming strategies must never ask for a summary."""

    name = "none"

    def summarize(self, request: Any, count: Any) -> str:
        raise AssertionError("a trimming strategy asked for a summary")


# ---------------------------------------------------------------------------------------------------
# Builders


def words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


def user(text: str, **kw: Any) -> Message:
    return Message(role="user", blocks=(TextBlock(text),), **kw)


def assistant(text: str, *calls: tuple[str, str], thinking: str = "", **kw: Any) -> Message:
    blocks: list[Any] = []
    if thinking:
        blocks.append(ThinkingBlock(thinking))
    if text:
        blocks.append(TextBlock(text))
    blocks.extend(ToolUseBlock(id=cid, name=name, input={"arg": cid}) for cid, name in calls)
    return Message(role="assistant", blocks=tuple(blocks), **kw)


def results(*items: tuple[str, str], role: str = "user", **kw: Any) -> Message:
    """Tool results (``(call id, text)``) in one message; role ``tool`` for the OpenAI shape."""
    blocks = tuple(ToolResultBlock(tool_use_id=cid, text=text) for cid, text in items)
    return Message(role=role, blocks=blocks, **kw)  # type: ignore[arg-type]


def system(text: str, **kw: Any) -> Message:
    return Message(role="system", blocks=(TextBlock(text),), **kw)


def numbered(messages: Iterable[Message]) -> tuple[Message, ...]:
    """Give messages their file positions, as an adapter would."""
    return tuple(replace(m, index=i, line=i + 1) for i, m in enumerate(messages))


def make_ctx(
    messages: Sequence[Message],
    target: int,
    *,
    pinned: Iterable[int] = (),
    keep_last: int = 0,
    configs: Mapping[str, Any] | None = None,
    archive_id: str = ARCHIVE_ID,
    ledger: Ledger | None = None,
) -> CompactContext:
    ledger = ledger or Ledger(WordCounter())
    ledger.count_uncounted(messages)
    return CompactContext(
        target=target,
        window=1_000_000,
        ledger=ledger,
        summarizer=NoSummarizer(),  # type: ignore[arg-type]
        archive_id=archive_id,
        pinned=frozenset(pinned),
        keep_last=keep_last,
        configs=dict(configs or {}),
    )


def originals(out: Sequence[Message], messages: Sequence[Message]) -> list[Message]:
    ids = {id(m) for m in messages}
    return [m for m in out if id(m) in ids]


def placeholders(out: Sequence[Message]) -> list[Message]:
    return [m for m in out if m.meta.get("ctxc") == "placeholder"]


# ---------------------------------------------------------------------------------------------------
# Invariants, shared with the selective tests


def check_invariants(
    strategy: Strategy,
    messages: Sequence[Message],
    ctx: CompactContext,
    *,
    undroppable: set[int],
) -> StrategyResult:
    """Run ``strategy`` and check what every trimming strategy promises.

    ``undroppable`` holds positions of messages the strategy may not drop (pinned, the tail, and for
    selective the critical units), computed by the caller independently of the strategy's code.
    """
    snapshot = tuple(messages)
    values = copy.deepcopy(snapshot)  # catches a change inside a message's meta or raw, too
    problems_before = pairing_problems(messages, strict=True)
    result = strategy.compact(messages, ctx)
    out = result.messages

    # The input is untouched: same objects, same values.
    assert tuple(messages) == values
    assert all(a is b for a, b in zip(messages, snapshot, strict=True))

    # Deterministic: a second run gives equal messages and actions.
    again = strategy.compact(messages, ctx)
    assert again.messages == out
    assert again.actions == result.actions

    # Selective may keep a critical message with its images shed: the original is kept, lighter.
    lighter = lighter_copies(out, messages)
    ids = {id(m) for m in messages}
    kept = [lighter.get(id(m), m) for m in out if id(m) in lighter or id(m) in ids]
    kept_ids = {id(m) for m in kept}
    # Kept messages keep their order, and nothing but originals and placeholders is output.
    assert [m.index for m in kept] == sorted(m.index for m in kept)
    assert len(kept) + len(placeholders(out)) == len(out)
    # Pinned (and everything else undroppable) is present.
    for pos in undroppable:
        assert id(messages[pos]) in kept_ids, f"message {messages[pos].index} was dropped"
    assert not messages or id(messages[-1]) in kept_ids

    # Pairing: valid stays valid; an invalid input gains no problem on a pair that was fine.
    after = pairing_problems(out, strict=True)
    if not problems_before:
        assert after == []
    else:
        assert {p.tool_id for p in after} <= {p.tool_id for p in problems_before}

    total = ctx.ledger.total(out)
    if total > ctx.target:
        # Best effort: everything droppable is gone, only the undroppable remains (with placeholders).
        assert {i for i, m in enumerate(messages) if id(m) in kept_ids} == undroppable
    if ctx.ledger.total(messages) <= ctx.target:
        assert out == tuple(messages)
        assert result.actions == ()

    # Every placeholder cites the archive range it replaced, and every drop is recorded.
    dropped = [m for m in messages if id(m) not in kept_ids]
    covered: set[int] = set()
    shrunk = {id(original): copy for copy in out if (original := lighter.get(id(copy))) is not None}
    for action in result.actions:
        assert action.strategy == strategy.name
        if action.kind == "shrink":  # the images of one kept message
            (original,) = (m for m in messages if m.index == action.first and id(m) in shrunk)
            assert action.tokens_before == ctx.ledger.tokens(original)
            assert action.tokens_after == ctx.ledger.tokens(shrunk[id(original)])
            continue
        assert action.kind == "drop"
        # Indexes count across the file, so another conversation's messages may sit inside a range.
        run = [m for m in messages if action.first <= m.index <= action.last]
        covered |= {m.index for m in run}
        assert action.tokens_before == ctx.ledger.total(run)
        assert action.tokens_after < action.tokens_before or action.tokens_after == 0
    assert covered == {m.index for m in dropped}
    for ph in placeholders(out):
        first, last = ph.meta["replaces"]
        match = CITATION_RE.search(ph.text)
        assert match is not None
        assert ctx.archive_id.startswith(match.group(1))
        assert (int(match.group(2)), int(match.group(3) or match.group(2))) == (first, last)
        assert ph.index == first
        assert ph.records == ()
        assert ph.role == "user"
        assert any(
            a.first == first and a.last == last and a.tokens_after == ctx.ledger.tokens(ph)
            for a in result.actions
        )
    return result


def lighter_copies(out: Sequence[Message], messages: Sequence[Message]) -> dict[int, Message]:
    """Output messages that are an input user message with each image replaced by a note citing the
    archive (its words kept, in order), by id, with that original."""
    by_index = {m.index: m for m in messages}
    found: dict[int, Message] = {}
    for m in out:
        original = by_index.get(m.index)
        if original is None or original is m or m.meta.get("ctxc") or m.role != "user":
            continue
        assert len(m.blocks) == len(original.blocks)
        for new, old in zip(m.blocks, original.blocks, strict=True):
            if isinstance(old, ImageBlock):
                assert isinstance(new, TextBlock)
                assert new.text.startswith("[ctxc: image removed")
                assert CITATION_RE.search(new.text) is not None
            else:
                assert new == old
        found[id(m)] = original
    return found


def tail_and_pinned(messages: Sequence[Message], ctx: CompactContext) -> set[int]:
    """Positions fifo may not drop, from :func:`units` and the rules, not from the strategy's code."""
    out: set[int] = set()
    tail = len(messages) - max(ctx.keep_last, 1)
    for unit in units(messages):
        span = range(unit.start, unit.stop)
        if unit.stop > tail or any(messages[i].index in ctx.pinned for i in span):
            out.update(span)
    return out


# ---------------------------------------------------------------------------------------------------
# Generated conversations

IMPORTANCE = st.sampled_from([None, None, None, "critical", "normal", "ephemeral"])
TOOLS = st.sampled_from(["Read", "Bash", "Edit", "grep", "web_search", "TodoWrite", "apply_patch"])


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    """Valid conversations: a request, then user turns, plain answers, thinking, and tool turns whose
    results come as one user message (Anthropic) or one ``tool`` message per call (OpenAI)."""
    size = st.integers(1, 40)
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(system(words(draw(size), "sys")))
    msgs.append(user(words(draw(size), "ask"), importance=draw(IMPORTANCE)))
    openai = draw(st.booleans())
    for turn in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "answer", "tools", "tools", "thinking"]))
        imp = draw(IMPORTANCE)
        if kind == "user":
            msgs.append(user(words(draw(size), "u"), importance=imp))
        elif kind == "answer":
            msgs.append(assistant(words(draw(size), "a"), importance=imp))
        elif kind == "thinking":
            msgs.append(assistant("", thinking=words(draw(size), "hmm"), importance=imp))
            msgs.append(assistant(words(draw(size), "a"), importance=draw(IMPORTANCE)))
        else:
            calls = [(f"call{turn}_{k}", draw(TOOLS)) for k in range(draw(st.integers(1, 3)))]
            msgs.append(assistant(words(draw(st.integers(0, 10)), "a"), *calls, importance=imp))
            outputs = [(cid, words(draw(size), "out")) for cid, _ in calls]
            if openai:
                msgs.extend(results(o, role="tool", importance=draw(IMPORTANCE)) for o in outputs)
            else:
                msgs.append(results(*outputs, importance=draw(IMPORTANCE)))
    return numbered(msgs)


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[Message, ...], CompactContext]:
    messages = draw(conversations())
    ledger = Ledger(WordCounter())
    total = ledger.total(messages)
    pinned = {m.index for m in messages if m.role == "system"} | {messages[-1].index}
    pinned |= set(draw(st.lists(st.sampled_from([m.index for m in messages]), max_size=3)))
    ctx = make_ctx(
        messages,
        draw(st.integers(0, total + 5)),
        pinned=pinned,
        keep_last=draw(st.integers(0, 5)),
        configs={"fifo": FifoConfig(placeholder=draw(st.booleans()))},
        ledger=ledger,
    )
    return messages, ctx


def test_generated_conversations_are_valid() -> None:
    @given(conversations())
    @settings(max_examples=50, deadline=None)
    def check(messages: tuple[Message, ...]) -> None:
        assert pairing_problems(messages, strict=True) == []

    check()


# ---------------------------------------------------------------------------------------------------
# Unit tests


def story() -> tuple[Message, ...]:
    """system, request, then four 10-word exchanges and a last question."""
    return numbered(
        [
            system(words(5, "sys")),  # 0
            user(words(5, "ask")),  # 1
            assistant(words(10, "a1")),  # 2
            user(words(10, "u2")),  # 3
            assistant(words(10, "a3")),  # 4
            user(words(10, "u4")),  # 5
            assistant(words(10, "a5")),  # 6
            user(words(10, "u6")),  # 7
            assistant(words(10, "a7")),  # 8
        ]
    )


def test_registered_with_a_description() -> None:
    assert strategies()["fifo"] is Fifo
    assert Fifo.description
    assert isinstance(Fifo(), Strategy)


def test_under_target_returns_the_input_untouched() -> None:
    msgs = story()
    ledger = Ledger(WordCounter())
    ctx = make_ctx(msgs, ledger.total(msgs), ledger=ledger)
    res = Fifo().compact(msgs, ctx)
    assert res.messages == msgs
    assert all(a is b for a, b in zip(res.messages, msgs, strict=True))
    assert res.actions == ()


def test_drops_the_oldest_units_and_stops_as_soon_as_under_target() -> None:
    msgs = story()
    ledger = Ledger(WordCounter())
    total = ledger.total(msgs)
    per = ledger.tokens(msgs[2])
    # Room for everything but three of the 10-word messages (plus a placeholder of about 25 words).
    ph = ledger.tokens(Message(role="user", blocks=(TextBlock(placeholder_text(3, 2, 4, ARCHIVE_ID)),)))
    target = total - 3 * per + ph
    # The filler user turns here are not instructions worth quoting: this is about the arithmetic.
    plain = {"fifo": FifoConfig(carry=0)}
    ctx = make_ctx(msgs, target, pinned={0, 1, 8}, ledger=ledger, configs=plain)
    res = Fifo().compact(msgs, ctx)
    assert [m.index for m in originals(res.messages, msgs)] == [0, 1, 5, 6, 7, 8]
    (placeholder,) = placeholders(res.messages)
    assert res.messages[2] is placeholder
    assert placeholder.text == (
        f"[ctxc] 3 earlier messages (indexes 2-4) were removed to fit the context; "
        f"the originals are in {citation(ARCHIVE_ID, 2, 4)}"
    )
    assert placeholder.meta == {"ctxc": "placeholder", "replaces": (2, 4), "quoted": ()}
    assert ledger.total(res.messages) == target
    (action,) = res.actions
    assert (action.strategy, action.kind, action.first, action.last) == ("fifo", "drop", 2, 4)
    assert (action.tokens_before, action.tokens_after) == (3 * per, ph)
    # One token less and a fourth message has to go.
    res2 = Fifo().compact(msgs, make_ctx(msgs, target - 1, pinned={0, 1, 8}, ledger=ledger, configs=plain))
    assert [m.index for m in originals(res2.messages, msgs)] == [0, 1, 6, 7, 8]


def test_pinned_messages_stay_in_place_and_split_the_dropped_runs() -> None:
    msgs = story()
    ctx = make_ctx(msgs, 0, pinned={0, 1, 4, 8}, configs={"fifo": FifoConfig(carry=0)})
    res = Fifo().compact(msgs, ctx)
    assert [m.index for m in res.messages] == [0, 1, 2, 4, 5, 8]
    assert [m.meta.get("replaces") for m in res.messages] == [None, None, (2, 3), None, (5, 7), None]
    assert [(a.first, a.last) for a in res.actions] == [(2, 3), (5, 7)]


def test_a_tool_turn_is_dropped_whole() -> None:
    msgs = numbered(
        [
            user("start here"),
            assistant("reading", ("c1", "Read"), ("c2", "Grep")),
            results(("c1", words(30)), role="tool"),
            results(("c2", words(30)), role="tool"),
            assistant(words(20)),
            user("thanks"),
        ]
    )
    ledger = Ledger(WordCounter())
    ctx = make_ctx(msgs, ledger.total(msgs) - 10, pinned={0, 5}, ledger=ledger)
    res = Fifo().compact(msgs, ctx)
    assert [m.index for m in originals(res.messages, msgs)] == [0, 4, 5]
    assert res.actions[0].first == 1
    assert res.actions[0].last == 3
    assert pairing_problems(res.messages, strict=True) == []


def test_keep_last_is_a_floor_even_when_the_target_is_missed() -> None:
    msgs = numbered(
        [
            user("go"),
            user(words(10)),
            assistant("look", ("c1", "Bash")),
            results(("c1", words(40))),  # in the tail: its call must stay with it
            assistant(words(10)),
            user(words(10)),
        ]
    )
    ctx = make_ctx(msgs, 1, pinned={0, 5}, keep_last=3)
    res = Fifo().compact(msgs, ctx)
    assert [m.index for m in originals(res.messages, msgs)] == [0, 2, 3, 4, 5]
    assert [a.first for a in res.actions] == [1]
    check_invariants(Fifo(), msgs, ctx, undroppable=tail_and_pinned(msgs, ctx))


def test_the_last_message_stays_even_with_keep_last_zero_and_nothing_pinned() -> None:
    msgs = story()
    res = Fifo().compact(msgs, make_ctx(msgs, 0, keep_last=0))
    assert [m.index for m in originals(res.messages, msgs)] == [8]


def test_no_placeholder_when_it_would_cost_more_than_what_it_replaces() -> None:
    msgs = numbered([user("go"), assistant("ok"), user(words(50)), assistant("done")])
    ledger = Ledger(WordCounter())
    ctx = make_ctx(msgs, ledger.total(msgs) - ledger.tokens(msgs[1]), pinned={0, 2, 3}, ledger=ledger)
    res = Fifo().compact(msgs, ctx)
    assert [m.index for m in res.messages] == [0, 2, 3]
    assert res.actions[0].tokens_after == 0
    assert "no placeholder" in res.actions[0].note


class RecordingCounter(WordCounter):
    """Counts as :class:`WordCounter` does, and how often it is asked."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, texts: Sequence[str]) -> list[int]:
        self.calls += 1
        return super().count(texts)


def test_units_in_doubt_are_weighed_against_their_placeholders_in_one_count() -> None:
    # Each request costs about what a placeholder quoting it would: whether it is cheaper kept needs
    # counting, once for all of them (one count per unit was a round trip to a worker each).
    msgs = numbered(
        m for k in range(40) for m in (user(f"Please rename module {k} " + words(40)), assistant(words(20)))
    )
    counter = RecordingCounter()
    ledger = Ledger(counter)
    ctx = make_ctx(msgs, ledger.total(msgs) // 2, ledger=ledger)
    before = counter.calls
    res = Fifo().compact(msgs, ctx)
    assert counter.calls - before <= 5
    assert ledger.total(res.messages) <= ctx.target


def test_placeholders_of_runs_are_costed_together_once_the_output_may_be_within() -> None:
    # Dropped apart (every other unit first), the runs do not merge: each new run's placeholder is
    # costed only once the output without it is within the target, all of them in one count.
    msgs = numbered(m for _ in range(60) for m in (user(words(60)), assistant(words(60))))
    counter = RecordingCounter()
    ledger = Ledger(counter)
    ctx = make_ctx(msgs, int(ledger.total(msgs) * 0.6), ledger=ledger)
    parts = units(msgs)
    order = [(u, None) for u in [*range(0, len(parts) - 1, 2), *range(1, len(parts) - 1, 2)]]
    before = counter.calls
    res = drop_units(msgs, ctx, parts, order, strategy="fifo", placeholders=True, carry=Carry(0))
    assert counter.calls - before <= 6
    assert len(res.actions) == 51
    assert ledger.total(res.messages) <= ctx.target
    # Never within (what is kept between the runs is over): every run is costed at the end, together.
    before = counter.calls
    apart = order[: len(parts) // 2]
    res = drop_units(
        msgs, replace(ctx, target=1), parts, apart, strategy="fifo", placeholders=True, carry=Carry(0)
    )
    assert counter.calls - before <= 3
    assert len(res.actions) == len(apart)


def test_placeholder_option_off() -> None:
    msgs = story()
    cfg = parse_config(Fifo, {"placeholder": "no"})
    assert cfg == FifoConfig(placeholder=False)
    res = Fifo().compact(msgs, make_ctx(msgs, 0, pinned={0, 1, 8}, configs={"fifo": cfg}))
    assert placeholders(res.messages) == []
    assert [m.index for m in res.messages] == [0, 1, 8]
    assert all(a.tokens_after == 0 for a in res.actions)


def test_bad_config_values_are_loud() -> None:
    with pytest.raises(UsageError, match="placeholder"):
        parse_config(Fifo, {"placeholder": "maybe"})
    with pytest.raises(UsageError, match="no option"):
        parse_config(Fifo, {"keep": "3"})


def test_config_values_a_library_caller_gives_as_python_values() -> None:
    # settings={"fifo.placeholder": False} was an AttributeError (False.strip), None a TypeError.
    assert parse_config(Fifo, {"placeholder": False, "carry": 3}) == FifoConfig(placeholder=False, carry=3)  # type: ignore[dict-item]
    for bad in ({"carry": None}, {"carry": True}, {"placeholder": None}):
        with pytest.raises(UsageError, match="cannot read"):
            parse_config(Fifo, bad)  # type: ignore[arg-type]


def test_without_an_archive_id_the_placeholder_says_so() -> None:
    msgs = story()
    res = Fifo().compact(msgs, make_ctx(msgs, 0, pinned={0, 1, 8}, archive_id=""))
    (ph,) = placeholders(res.messages)
    assert "no archive copy" in ph.text
    assert CITATION_RE.search(ph.text) is None


def test_a_system_note_between_a_call_and_its_results_keeps_them_together() -> None:
    # Codex writes developer notes (role system) between a turn's calls and its results.
    msgs = numbered(
        [
            user("go"),
            assistant("", ("c1", "shell")),
            assistant("", ("c2", "shell")),
            system("note"),
            results(("c1", words(30)), role="tool"),
            results(("c2", words(30)), role="tool"),
            assistant(words(30)),
            user("next"),
        ]
    )
    assert pairing_problems(msgs, strict=True) == []
    assert [(u.start, u.stop) for u in units(msgs)] == [(0, 1), (1, 6), (6, 7), (7, 8)]
    # The system note is pinned, so the whole turn stays; without the merge its calls would be dropped.
    ctx = make_ctx(msgs, 0, pinned={0, 3, 7})
    res = check_invariants(Fifo(), msgs, ctx, undroppable={0, 1, 2, 3, 4, 5, 7})
    assert [m.index for m in originals(res.messages, msgs)] == [0, 1, 2, 3, 4, 5, 7]
    # Unpinned, the note goes with the turn.
    res = Fifo().compact(msgs, make_ctx(msgs, 0, pinned={0, 7}))
    assert [m.index for m in res.messages] == [0, 1, 7]


def test_protected_units_cover_pins_and_the_tail() -> None:
    msgs = story()
    ctx = make_ctx(msgs, 0, pinned={3}, keep_last=2)
    assert protected_units(msgs, units(msgs), ctx) == {3, 7, 8}


# ---------------------------------------------------------------------------------------------------
# Properties


@given(cases())
@settings(max_examples=300, deadline=None)
def test_invariants_on_generated_conversations(case: tuple[tuple[Message, ...], CompactContext]) -> None:
    messages, ctx = case
    res = check_invariants(Fifo(), messages, ctx, undroppable=tail_and_pinned(messages, ctx))
    # Under target whenever what may not be dropped fits (placeholders give way if they must).
    floor = ctx.ledger.total(messages[i] for i in tail_and_pinned(messages, ctx))
    if floor <= ctx.target:
        assert ctx.ledger.total(res.messages) <= ctx.target


@given(cases())
@settings(max_examples=200, deadline=None)
def test_fifo_drops_a_minimal_prefix_of_the_units(
    case: tuple[tuple[Message, ...], CompactContext],
) -> None:
    messages, ctx = case
    ctx = replace(ctx, configs={"fifo": FifoConfig(placeholder=False)})
    keep = tail_and_pinned(messages, ctx)
    droppable = [u for u in units(messages) if u.start not in keep]
    res = Fifo().compact(messages, ctx)
    kept = {id(m) for m in res.messages}
    gone = [u for u in droppable if id(messages[u.start]) not in kept]
    assert gone == droppable[: len(gone)]  # the oldest ones, in order
    if gone and ctx.ledger.total(res.messages) <= ctx.target:
        # Keeping the last unit dropped would have missed the target: nothing was dropped needlessly.
        last = gone[-1]
        assert (
            ctx.ledger.total(res.messages) + ctx.ledger.total(messages[last.start : last.stop]) > ctx.target
        )


# ---------------------------------------------------------------------------------------------------
# The log's own compaction summary, over the target by itself

#: Claude Code's compact summary, in its shape: boilerplate, the model's analysis, the numbered summary.
OWN_SUMMARY = "\n".join(
    [
        "This session is being continued from a previous conversation that ran out of context. "
        "The conversation is summarized below:",
        "Analysis:",
        "Let me chronologically analyze the conversation:",
        *(f"{n}. **Step {n}**: " + words(40, "looked") for n in range(1, 6)),
        "",
        "Summary:",
        "1. Primary Request and Intent:",
        "   The user asked to make the importer idempotent.",
        "2. Key Technical Concepts:",
        *(f"   - concept {n}: " + words(12, "detail") for n in range(6)),
        "3. Files and Code Sections:",
        "   - `importer.py`",
        "     ```python",
        *(f"     line_{n} = {n}" for n in range(12)),
        "     ```",
        "4. Errors and fixes:",
        "   - The second import failed with a duplicate key; " + words(10, "trace"),
        "5. Problem Solving:",
        "   - We decided to use upserts rather than delete-and-insert.",
        "6. All user messages:",
        '   - "make the importer idempotent"',
        '   - "and add a test"',
        "7. Pending Tasks:",
        "   - Add a test for re-running the import",
        "8. Current Work:",
        "   Writing the test in test_importer.py",
        "9. Optional Next Step:",
        "   Run the test suite.",
        "Please continue the conversation from where we left it off without asking the user any further "
        "questions.",
    ]
)


def own_summary_session(summary: Message | None = None) -> tuple[Message, ...]:
    return numbered(
        [
            summary or user(OWN_SUMMARY, meta={"is_compact_summary": True}),  # 0: opens the live context
            assistant("running it", ("b1", "Bash")),
            results(("b1", words(120, "out"))),
            assistant(words(10, "done")),  # 3: the last
        ]
    )


def own_summary_ctx(msgs: Sequence[Message], target: int, strategy: Strategy) -> CompactContext:
    # The run pins the log's own summary for fifo and selective (and the last message).
    return make_ctx(msgs, target, pinned={0, 3}, configs={strategy.name: strategy.Config()})


def written_summary(out: Sequence[Message]) -> Message:
    (summary,) = [m for m in out if m.meta.get("ctxc") == "summary"]
    return summary


TRIMMERS = pytest.mark.parametrize("strategy", [Fifo(), Selective()], ids=["fifo", "selective"])


@TRIMMERS
def test_an_own_summary_over_the_target_loses_its_analysis_first(strategy: Strategy) -> None:
    msgs = own_summary_session()
    ctx = own_summary_ctx(msgs, 0, strategy)
    analysis = ctx.ledger.total([user("\n".join(OWN_SUMMARY.split("\n")[1:8]))])
    target = ctx.ledger.total([msgs[0], msgs[3]]) - analysis + 80  # room for the header and placeholder
    res = strategy.compact(msgs, replace(ctx, target=target))
    assert ctx.ledger.total(res.messages) <= target
    summary = written_summary(res.messages)
    assert res.messages[0] is summary
    assert summary.meta["replaces"] == (0, 0)
    assert f"ctxc archive {ARCHIVE_ID[:12]} messages 0" in summary.text
    # The summary part, verbatim; the analysis gone.
    body = OWN_SUMMARY.split("Summary:\n", 1)[1].rsplit("\nPlease continue", 1)[0]
    assert body in summary.text
    assert "looked" not in summary.text
    assert res.actions[0].kind == "summarize"
    assert res.actions[0].first == res.actions[0].last == 0
    assert res.messages[-1] is msgs[3]


@TRIMMERS
def test_an_own_summary_far_over_the_target_keeps_intent_requests_decisions_and_next_step(
    strategy: Strategy,
) -> None:
    msgs = own_summary_session()
    ctx = own_summary_ctx(msgs, 0, strategy)
    target = ctx.ledger.total([msgs[3]]) + 200
    res = strategy.compact(msgs, replace(ctx, target=target))
    assert ctx.ledger.total(res.messages) <= target
    text = written_summary(res.messages).text
    for line in (
        "The user asked to make the importer idempotent.",
        "We decided to use upserts rather than delete-and-insert.",
        '"make the importer idempotent"',
        '"and add a test"',
        "Add a test for re-running the import",
        "Run the test suite.",
    ):
        assert line in text
    assert "## Session intent" in text
    assert "line_11" not in text  # code is cut first
    assert "the log's own compaction summary (msg 0), shortened" in text


#: pi's compaction summary: markdown headings inside <summary> tags.
PI_SUMMARY = "\n".join(
    [
        "The conversation history before this point was compacted into the following summary:",
        "<summary>",
        "## Goal",
        "Make the importer idempotent.",
        "## Constraints & Preferences",
        "- Keep the public API unchanged",
        "## Progress",
        "### Done",
        *(f"- [x] step {n}: " + words(20, "done") for n in range(4)),
        "## Key Decisions",
        "- **Upserts** for every row, keyed by the source id",
        "## Next Steps",
        "1. Run the test suite",
        "## Critical Context",
        *(f"- fact {n}: " + words(30, "context") for n in range(4)),
        "</summary>",
    ]
)


@TRIMMERS
def test_a_markdown_own_summary_keeps_its_goal_decisions_and_next_steps(strategy: Strategy) -> None:
    msgs = own_summary_session(user(PI_SUMMARY, meta={"is_compact_summary": True}))
    ctx = own_summary_ctx(msgs, 0, strategy)
    target = ctx.ledger.total([msgs[3]]) + 190
    res = strategy.compact(msgs, replace(ctx, target=target))
    assert ctx.ledger.total(res.messages) <= target
    text = written_summary(res.messages).text
    for line in (
        "Make the importer idempotent.",
        "Keep the public API unchanged",
        "**Upserts** for every row, keyed by the source id",  # under its Decisions heading: tier 1
        "Run the test suite",
    ):
        assert line in text
    assert "context context" not in text  # the rest goes first


@TRIMMERS
def test_an_own_summary_is_kept_whole_when_even_its_shortest_form_is_over(strategy: Strategy) -> None:
    msgs = own_summary_session()
    ctx = own_summary_ctx(msgs, 0, strategy)
    target = ctx.ledger.total([msgs[3]]) + 5
    res = strategy.compact(msgs, replace(ctx, target=target))
    assert ctx.ledger.total(res.messages) > target  # the run reports it over the target
    assert res.messages[0] is msgs[0]


@TRIMMERS
def test_an_opaque_own_summary_is_not_shortened(strategy: Strategy) -> None:
    # Codex's remote compaction keeps its summary encrypted: nothing ctxc can read, so nothing to shorten.
    opaque = Message(
        role="user", blocks=(ThinkingBlock(words(400, "enc")),), meta={"is_compact_summary": True}
    )
    msgs = own_summary_session(opaque)
    ctx = own_summary_ctx(msgs, 50, strategy)
    res = strategy.compact(msgs, ctx)
    assert res.messages[0] is msgs[0]
    assert not [m for m in res.messages if m.meta.get("ctxc") == "summary"]


@pytest.mark.parametrize(
    "path", corpus_params("claude-code/entire-cli_auto-compact_summary-records_v2.1.5.jsonl")
)
def test_an_own_summary_is_shortened_to_any_budget_above_its_shortest_form(path: Path) -> None:
    """The summary shrinks in steps, so a smaller budget may give the same text: every budget is met
    all the same (around 287 tokens on this log a few retries were not enough)."""
    from ctxc.compaction.own_summary import shorten_own_summary

    (own,) = [m for m in load(path).messages if m.meta.get("is_compact_summary")]
    ctx = make_ctx([own], 0, ledger=Ledger(make_counter("o200k_base", use_cache=False)))
    for budget in range(270, 310):
        short = shorten_own_summary(own, budget, ctx)
        assert short is not None, budget
        assert ctx.ledger.tokens(short) <= budget


def test_a_refusal_names_the_pinned_words_over_the_target() -> None:
    """When what must stay is over the target, the error says what it is and by how much."""
    import io

    import orjson

    from ctxc.compaction.run import CompactOptions, compact_transcript
    from ctxc.errors import OverTargetError

    lines = [
        {"role": "user", "content": "Port the importer to Rust. " + words(300, "spec")},
        {"role": "assistant", "content": words(200, "work")},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "Done. " + words(120, "report")},
    ]
    transcript = load(io.BytesIO(b"".join(orjson.dumps(line) + b"\n" for line in lines)))
    counter = make_counter("o200k_base", use_cache=False)
    with pytest.raises(OverTargetError) as caught:
        compact_transcript(transcript, CompactOptions(strategy="fifo", target_tokens=100), counter=counter)
    ledger = Ledger(counter)
    intent, last = ledger.tokens(transcript.messages[0]), ledger.tokens(transcript.messages[3])
    message = str(caught.value)
    assert f"the session's first request (msg 0, {intent:,} tokens)" in message
    assert f"the last message (msg 3, {last:,} tokens)" in message
    assert "over the target)" in message


# ---------------------------------------------------------------------------------------------------
# The corpus


def corpus_cases(path: Path, strategy: Strategy, undroppable: Any) -> None:
    """Run ``strategy`` on every conversation of ``path`` at 50% and 20% of its tokens."""
    transcript = load(path)
    ledger = Ledger(make_counter("approx", use_cache=False))
    ledger.count_uncounted(transcript.messages)
    for conv in range(transcript.conversations):
        messages = transcript.conversation(conv)
        if not messages:
            continue
        total = ledger.total(messages)
        for ratio in (0.5, 0.2):
            ctx = make_ctx(
                messages, int(total * ratio), pinned=pinned_indexes(messages, ()), keep_last=4, ledger=ledger
            )
            check_invariants(strategy, messages, ctx, undroppable=undroppable(messages, ctx))


def fifo_undroppable(messages: Sequence[Message], ctx: CompactContext) -> set[int]:
    parts = units(messages)
    return {i for u in protected_units(messages, parts, ctx) for i in range(parts[u].start, parts[u].stop)}


@pytest.mark.parametrize("path", corpus_params())
def test_every_corpus_conversation(path: Path) -> None:
    corpus_cases(path, Fifo(), fifo_undroppable)
