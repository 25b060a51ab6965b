"""selective: importance from the log or TOML rules; ephemeral, then normal units go, oldest first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params
from hypothesis import given, settings
from hypothesis import strategies as st
from test_strategy_fifo import (
    ARCHIVE_ID,
    assistant,
    check_invariants,
    conversations,
    corpus_cases,
    make_ctx,
    numbered,
    originals,
    placeholders,
    results,
    system,
    tail_and_pinned,
    user,
    words,
)

from ctxc.compaction.base import CompactContext, Strategy, parse_config, protected_units, strategies
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.selective import LEVELS, Selective, SelectiveConfig, classify, load_rules, parse_rules
from ctxc.compaction.units import units
from ctxc.errors import ExitCode, InputError, UsageError
from ctxc.model import ImageBlock, Message, TextBlock, UnknownBlock

RANK = {level: n for n, level in enumerate(LEVELS)}


def levels_of(
    messages: Sequence[Message], rules_text: str | None = None, ledger: Ledger | None = None
) -> list[str]:
    rules = load_rules() if rules_text is None else parse_rules(rules_text, "test.toml")
    ledger = ledger or Ledger(make_ctx(messages, 0).ledger.counter)
    return classify(messages, rules, ledger.tokens)


def sel_ctx(messages: Sequence[Message], target: int, **kw: Any) -> CompactContext:
    cfg = kw.pop("config", SelectiveConfig())
    return make_ctx(messages, target, configs={"selective": cfg}, **kw)


# ---------------------------------------------------------------------------------------------------
# Importance


def test_registered_and_the_shipped_rules_load() -> None:
    assert strategies()["selective"] is Selective
    assert isinstance(Selective(), Strategy)
    rules = load_rules()
    assert rules.default == "normal"
    assert len(rules.rules) >= 6


def test_shipped_rules_classify_a_session() -> None:
    late = [assistant(words(3)), user(words(3))] * 6  # pushes the early command run out of the recent window
    msgs = numbered(
        [
            system("you are an agent"),
            user("please fix the parser bug"),
            assistant("let me look", ("r1", "Read")),
            results(("r1", "def parse(): ...")),
            assistant("", thinking="which file first?"),
            assistant("running the tests", ("b1", "Bash")),
            results(("b1", "3 failed")),
            user("<local-command-stdout>ok</local-command-stdout>", meta={"is_meta": True}),
            user("Summary of the earlier session", meta={"is_compact_summary": True}),
            user(words(4100)),
            user("never mind that", importance="ephemeral"),
            assistant("", ("r2", "GREP")),
            results(("r2", "match"), importance="critical"),
            assistant("", ("w1", "web_search"), ("b2", "bash")),
            results(("w1", "hits"), ("b2", "out")),
            assistant("", ("m1", "mcp__github__get_issue")),
            results(("m1", "issue body"), role="tool"),
            assistant("```\nls\n```"),
            user("[File: x.py]\n(Open file: x.py)\n(Current directory: /repo)\nbash-$"),
            *late,
            assistant("", ("b4", "bash")),
            results(("b4", "recent output")),
            assistant("done"),
        ]
    )
    expected = [
        "critical",  # system prompt
        "critical",  # the user's instruction
        "ephemeral",  # a read-only call ...
        "ephemeral",  # ... and its result, named through the call's id
        "ephemeral",  # thinking only
        "ephemeral",  # a command call older than 10 messages
        "ephemeral",  # its output
        "normal",  # text the client injected (is_meta)
        "critical",  # an earlier compaction's summary
        "normal",  # a 4,100-word paste is not an instruction
        "ephemeral",  # the log's own importance wins over the user-instruction rule
        "ephemeral",  # tool names match case-insensitively
        "critical",  # the log's own importance wins over the read-only rule
        "normal",  # web_search + an old bash: no one rule covers both, so the default
        "normal",
        "ephemeral",  # an MCP getter
        "ephemeral",
        "normal",  # a SWE-agent classic command, in plain assistant text
        "normal",  # SWE-agent classic: command output sent back as user text
        *["normal", "critical"] * 6,
        "normal",  # a recent command is kept as normal ...
        "normal",  # ... with its output
        "normal",  # the answer
    ]
    assert levels_of(msgs) == expected


def test_a_result_answering_a_read_and_a_write_is_not_ephemeral() -> None:
    msgs = numbered(
        [
            user("go"),
            assistant("", ("r1", "Read"), ("e1", "Edit")),
            results(("r1", "text"), ("e1", "edited")),
            assistant("ok"),
        ]
    )
    assert levels_of(msgs) == ["critical", "normal", "normal", "normal"]


def test_every_rule_condition() -> None:
    rules = """
default = "ephemeral"

[[rule]]
importance = "critical"
regex = "(?i)we decided"

[[rule]]
name = "big results"
importance = "normal"
kind = "tool_result"
min_tokens = 20

[[rule]]
importance = "critical"
role = ["assistant"]
follows = "tool"
max_tokens = 12

[[rule]]
importance = "normal"
tool = "mcp__*__list*"

[[rule]]
importance = "critical"
meta = { source = "user" }

[[rule]]
importance = "normal"
role = "user"
older_than = 2
"""
    msgs = numbered(
        [
            user("We decided on Postgres"),  # regex
            user("old enough"),  # older_than 2 (4 messages follow)
            assistant("", ("c1", "MCP__db__list_tables")),  # tool glob, case-insensitive
            results(("c1", words(30)), role="tool"),  # min_tokens
            assistant("short reply"),  # follows a tool message, small
            user("from the user", meta={"source": "user"}),  # meta
            user("recent"),  # older_than not met: default
        ]
    )
    assert levels_of(msgs, rules) == [
        "critical",
        "normal",
        "normal",
        "normal",
        "critical",
        "critical",
        "ephemeral",
    ]
    # older_than counts the messages after it, strictly more than the bound.
    aged = numbered([user("a"), user("b"), user("c")])
    assert levels_of(aged, '[[rule]]\nimportance = "ephemeral"\nolder_than = 1') == [
        "ephemeral",
        "normal",
        "normal",
    ]
    # meta must be equal with its type: TOML true is not 1.
    flagged = numbered([user("x", meta={"flag": 1}), user("y", meta={"flag": True})])
    assert levels_of(
        flagged, 'default = "normal"\n[[rule]]\nimportance = "critical"\nmeta = { flag = true }'
    ) == [
        "normal",
        "critical",
    ]


BAD_RULES = [
    ('[[rule]]\nimportance = "critical"\nrol = "user"\n', "rule 1: unknown key 'rol'"),
    ('[[rule]]\nimportance = "critical"\nregex = "(unclosed"\n', "bad regex '(unclosed'"),
    ('[[rule]]\nname = "x"\nimportance = "high"\n', "rule 1 ('x'): importance must be one of"),
    ('[[rule]]\nimportance = "normal"\nrole = "robot"\n', "unknown role 'robot'"),
    ('[[rule]]\nimportance = "normal"\nfollows = ["user", "bot"]\n', "follows: unknown role 'bot'"),
    ('[[rule]]\nimportance = "normal"\nkind = "video"\n', "unknown kind 'video'"),
    ('[[rule]]\nimportance = "normal"\nolder_than = -1\n', "older_than must be a whole number"),
    ('[[rule]]\nimportance = "normal"\nmax_tokens = "ten"\n', "max_tokens must be a whole number"),
    ('[[rule]]\nimportance = "normal"\nmin_tokens = 9\nmax_tokens = 2\n', "min_tokens is above max_tokens"),
    ('[[rule]]\nimportance = "normal"\ntool = []\n', "tool must be a non-empty string"),
    ('[[rule]]\nimportance = "normal"\nmeta = { a = [1] }\n', "meta must be a table of plain values"),
    ('[[rule]]\nrole = "user"\n', "rule 1: missing 'importance'"),
    (
        '[[rule]]\nimportance = "normal"\n[[rule]]\nimportance = "normal"\nregex = 3\n',
        "rule 2: regex must be",
    ),
    ('default = "meh"\n', "default must be one of"),
    ("rules = []\n", "unknown top-level keys ['rules']"),
    ("rule = 3\n", "array of tables"),
    ("[[rule]\n", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "problem"), BAD_RULES)
def test_a_bad_rules_file_is_a_loud_usage_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "my-rules.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError) as err:
        parse_config(Selective, {"rules": str(path)})  # rejected when the option is read, before any run
    assert str(path) in str(err.value)
    assert problem in str(err.value)
    assert err.value.exit_code == ExitCode.USAGE


def test_a_missing_rules_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(InputError, match="no such importance rules file") as err:
        SelectiveConfig(rules=str(path))
    assert str(path) in str(err.value)


def test_a_rules_file_given_as_option_is_used(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('default = "ephemeral"\n[[rule]]\nimportance = "critical"\nregex = "keep me"\n')
    msgs = numbered(
        [user("go"), assistant("keep me " + words(20)), user(words(20)), assistant(words(20)), user("end")]
    )
    cfg = parse_config(Selective, {"rules": str(path)})
    res = Selective().compact(msgs, sel_ctx(msgs, 0, pinned={0, 4}, config=cfg))
    assert [m.index for m in originals(res.messages, msgs)] == [0, 1, 4]
    # The shipped rules keep the user's words instead and let both answers go.
    res = Selective().compact(msgs, sel_ctx(msgs, 0, pinned={0, 4}))
    assert [m.index for m in originals(res.messages, msgs)] == [0, 2, 4]


# ---------------------------------------------------------------------------------------------------
# Dropping


def session() -> tuple[Message, ...]:
    return numbered(
        [
            user("fix the bug"),  # 0 critical, pinned
            assistant(words(40, "plan")),  # 1 normal, the oldest droppable
            user(words(10, "more")),  # 2 critical (the user's words)
            assistant("reading", ("r1", "Read")),  # 3 an ephemeral turn
            results(("r1", words(40, "src"))),  # 4
            assistant(words(40, "idea")),  # 5 normal
            user(words(5, "ok")),  # 6 critical
            assistant("", ("g1", "Grep")),  # 7 an ephemeral turn
            results(("g1", words(80, "hit"))),  # 8
            assistant(words(5, "done")),  # 9 the last
        ]
    )


def test_ephemeral_units_go_first_even_when_normal_ones_are_older() -> None:
    msgs = session()
    assert levels_of(msgs) == ["critical", "normal", "critical", *["ephemeral"] * 2, "normal", "critical"] + [
        "ephemeral"
    ] * 2 + ["normal"]
    ledger = Ledger(make_ctx(msgs, 0).ledger.counter)
    total = ledger.total(msgs)
    read_turn = ledger.total(msgs[3:5])
    ctx = sel_ctx(msgs, total - read_turn + 40, pinned={0, 9}, ledger=ledger)
    res = Selective().compact(msgs, ctx)
    assert [m.index for m in originals(res.messages, msgs)] == [0, 1, 2, 5, 6, 7, 8, 9]
    (ph,) = placeholders(res.messages)
    assert "(indexes 3-4; importance ephemeral)" in ph.text
    assert f"ctxc archive {ARCHIVE_ID[:12]} messages 3-4" in ph.text
    assert res.actions[0].note.startswith("2 message(s), importance ephemeral")
    # A little less room: the other ephemeral turn goes before any (older) normal message.
    ctx = sel_ctx(msgs, total - read_turn - 1, pinned={0, 9}, ledger=ledger)
    res = Selective().compact(msgs, ctx)
    assert [m.index for m in originals(res.messages, msgs)] == [0, 1, 2, 5, 6, 9]


def test_then_normal_oldest_first_never_critical_nor_the_last() -> None:
    msgs = session()
    res = Selective().compact(msgs, sel_ctx(msgs, 0, pinned={0, 9}))
    # Best effort: everything but the critical user messages and the last one.
    assert [m.index for m in originals(res.messages, msgs)] == [0, 2, 6, 9]
    assert [ph.meta["replaces"] for ph in placeholders(res.messages)] == [(1, 1), (3, 5), (7, 8)]
    texts = [ph.text for ph in placeholders(res.messages)]
    assert "(index 1; importance normal)" in texts[0]
    assert "(indexes 3-5; importance ephemeral and normal)" in texts[1]
    assert "(indexes 7-8; importance ephemeral)" in texts[2]


def test_a_turn_is_as_important_as_its_most_important_message() -> None:
    msgs = numbered(
        [
            user("go"),
            assistant("this call matters", ("r1", "Read"), importance="critical"),
            results(("r1", words(50))),  # ephemeral by the rules, but its call is critical
            assistant("", ("r2", "Read")),
            results(("r2", words(50))),
            assistant("end"),
        ]
    )
    res = Selective().compact(msgs, sel_ctx(msgs, 0, pinned={0, 5}))
    assert [m.index for m in originals(res.messages, msgs)] == [0, 1, 2, 5]


def test_keep_last_is_a_floor_for_selective_too() -> None:
    msgs = session()
    res = Selective().compact(msgs, sel_ctx(msgs, 0, pinned={0, 9}, keep_last=2))
    assert [m.index for m in originals(res.messages, msgs)] == [0, 2, 6, 7, 8, 9]


def test_placeholder_option_off() -> None:
    msgs = session()
    cfg = parse_config(Selective, {"placeholder": "false"})
    res = Selective().compact(msgs, sel_ctx(msgs, 0, pinned={0, 9}, config=cfg))
    assert [m.index for m in res.messages] == [0, 2, 6, 9]


def screenshot() -> ImageBlock:
    return ImageBlock(media_type="image/png", width=1000, height=1000)


def image_session() -> tuple[Message, ...]:
    return numbered(
        [
            user("fix the layout"),  # 0 pinned: the intent
            Message(role="user", blocks=(TextBlock("this is how it looks now"), screenshot())),  # 1 critical
            assistant(words(30, "idea")),  # 2 normal
            Message(role="user", blocks=(TextBlock("and this is the target"), screenshot())),  # 3 critical
            assistant(words(5, "done")),  # 4 the last
        ]
    )


def test_images_in_the_users_words_are_shed_oldest_first_before_the_run_fails() -> None:
    msgs = image_session()
    ctx = sel_ctx(msgs, 0, pinned={0, 4})
    image = ctx.ledger.tokens(msgs[1]) - ctx.ledger.total([user("this is how it looks now")])
    words_only = ctx.ledger.total(msgs) - ctx.ledger.total([msgs[2]]) - 2 * image
    # Room for one image: the older one goes, the newer stays.
    target = words_only + image + 80
    res = Selective().compact(msgs, replace(ctx, target=target))
    assert ctx.ledger.total(res.messages) <= target
    lighter = next(m for m in res.messages if m.index == 1)
    assert lighter is not msgs[1]
    assert lighter.blocks[0] == msgs[1].blocks[0]  # the words, verbatim, in place
    assert isinstance(lighter.blocks[1], TextBlock)
    assert lighter.blocks[1].text.startswith("[ctxc: image removed")
    assert f"ctxc archive {ARCHIVE_ID[:12]} messages 1" in lighter.blocks[1].text
    assert next(m for m in res.messages if m.index == 3) is msgs[3]
    shrink = [a for a in res.actions if a.kind == "shrink"]
    assert [(a.first, a.last) for a in shrink] == [(1, 1)]
    assert shrink[0].tokens_before - shrink[0].tokens_after > image // 2


def test_images_stay_when_shedding_them_cannot_meet_the_target() -> None:
    msgs = image_session()
    res = Selective().compact(msgs, sel_ctx(msgs, 5, pinned={0, 4}))
    assert msgs[1] in res.messages
    assert msgs[3] in res.messages
    assert all(a.kind == "drop" for a in res.actions)


def test_within_adaptive_trimming_keeps_the_logs_own_summary() -> None:
    """Adaptive's trimming stage keeps the log's own summary, as selective alone does (the run pins it
    for selective, not for adaptive, which may fold it into a summary): a Codex remote compaction,
    an opaque assistant item, is the oldest normal message, and trimming dropped it first."""
    from ctxc.compaction.adaptive import Adaptive

    own = Message(
        role="assistant",
        blocks=(UnknownBlock(raw={"type": "compaction"}, text=words(30, "enc"), type="compaction"),),
        meta={"is_compact_summary": True},
    )
    msgs = numbered(
        [user("port"), own, user("go on"), assistant(words(60, "idea")), user("ok"), assistant("done")]
    )
    ctx = make_ctx(msgs, 0, pinned={0, 4, 5})
    target = ctx.ledger.total(msgs) - ctx.ledger.tokens(msgs[1]) - 1
    res = Adaptive().compact(msgs, replace(ctx, target=target, explicit_target=True))
    assert ctx.ledger.total(res.messages) <= target
    assert msgs[1] in res.messages
    assert msgs[3] not in res.messages


# ---------------------------------------------------------------------------------------------------
# Properties


def unit_levels(messages: Sequence[Message]) -> list[str]:
    levels = levels_of(messages)
    return [max(levels[u.start : u.stop], key=RANK.__getitem__) for u in units(messages)]


def selective_undroppable(messages: Sequence[Message], ctx: CompactContext) -> set[int]:
    """Pinned, the tail, and critical units (generated conversations: ``units`` is exact)."""
    keep = tail_and_pinned(messages, ctx)
    for u, level in zip(units(messages), unit_levels(messages), strict=True):
        if level == "critical":
            keep.update(range(u.start, u.stop))
    return keep


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[Message, ...], CompactContext]:
    messages = draw(conversations())
    ledger = Ledger(make_ctx(messages, 0).ledger.counter)
    total = ledger.total(messages)
    pinned = {m.index for m in messages if m.role == "system"} | {messages[-1].index}
    pinned |= set(draw(st.lists(st.sampled_from([m.index for m in messages]), max_size=2)))
    ctx = sel_ctx(
        messages,
        draw(st.integers(0, total + 5)),
        pinned=pinned,
        keep_last=draw(st.integers(0, 4)),
        config=SelectiveConfig(placeholder=draw(st.booleans())),
        ledger=ledger,
    )
    return messages, ctx


@given(cases())
@settings(max_examples=300, deadline=None)
def test_invariants_on_generated_conversations(case: tuple[tuple[Message, ...], CompactContext]) -> None:
    messages, ctx = case
    keep = selective_undroppable(messages, ctx)
    res = check_invariants(Selective(), messages, ctx, undroppable=keep)
    if ctx.ledger.total(messages[i] for i in keep) <= ctx.target:
        assert ctx.ledger.total(res.messages) <= ctx.target


@given(cases())
@settings(max_examples=200, deadline=None)
def test_drop_order_ephemeral_then_normal_oldest_first_and_no_more_than_needed(
    case: tuple[tuple[Message, ...], CompactContext],
) -> None:
    messages, ctx = case
    ctx = replace(ctx, configs={"selective": SelectiveConfig(placeholder=False)})
    keep = selective_undroppable(messages, ctx)
    parts = units(messages)
    levels = unit_levels(messages)
    offered = [
        (u, levels[n]) for level in ("ephemeral", "normal") for n, u in enumerate(parts) if levels[n] == level
    ]
    offered = [(u, lv) for u, lv in offered if u.start not in keep]
    res = Selective().compact(messages, ctx)
    kept = {id(m) for m in res.messages}
    gone = [u for u, _ in offered if id(messages[u.start]) not in kept]
    assert gone == [u for u, _ in offered[: len(gone)]]  # a prefix of the order: no normal before ephemeral
    if gone and ctx.ledger.total(res.messages) <= ctx.target:
        last = gone[-1]
        restored = ctx.ledger.total(res.messages) + ctx.ledger.total(messages[last.start : last.stop])
        assert restored > ctx.target


# ---------------------------------------------------------------------------------------------------
# The corpus


def corpus_undroppable(messages: Sequence[Message], ctx: CompactContext) -> set[int]:
    parts = units(messages)
    levels = levels_of(messages, ledger=ctx.ledger)
    keep = set(protected_units(messages, parts, ctx))
    keep |= {u for u, p in enumerate(parts) if "critical" in levels[p.start : p.stop]}
    return {i for u in keep for i in range(parts[u].start, parts[u].stop)}


@pytest.mark.parametrize("path", corpus_params())
def test_every_corpus_conversation(path: Path) -> None:
    corpus_cases(path, Selective(), corpus_undroppable)
