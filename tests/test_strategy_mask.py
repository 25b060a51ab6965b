"""mask: old tool results shrunk in place (post-processors, then placeholders), nothing else touched."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS, corpus_params
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxc.archive_store import CITATION_RE
from ctxc.compaction.base import CompactContext, StrategyResult, parse_config, strategies
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.mask import Mask, MaskConfig, eligible_slots
from ctxc.errors import UsageError
from ctxc.formats import load
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.tokens import make_counter
from ctxc.tokens.cache import CachedCounter
from ctxc.tokens.cost import message_texts
from ctxc.validate import pairing_problems

ARCHIVE_ID = "3f2a9c1b4d5e" + "0" * 52
MASK = Mask()


class QuarterCounter:
    """A fast stand-in for a tokenizer: a token per four characters."""

    name = "quarter"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t) // 4 for t in texts]


class NoSummarizer:
    name = "none"

    def summarize(self, request: Any, count: Any) -> str:
        raise AssertionError("mask asked for a summary")


def make_ctx(
    messages: Sequence[Message],
    target: int,
    *,
    pinned: Iterable[int] = (),
    keep_last: int = 0,
    config: MaskConfig | None = None,
    ledger: Ledger | None = None,
) -> CompactContext:
    ledger = ledger or Ledger(QuarterCounter())
    configs: Mapping[str, Any] = {"mask": config} if config else {}
    return CompactContext(
        target=target,
        window=1_000_000,
        ledger=ledger,
        summarizer=NoSummarizer(),  # type: ignore[arg-type]
        archive_id=ARCHIVE_ID,
        pinned=frozenset(pinned),
        keep_last=keep_last,
        configs=configs,
    )


def conversation(
    calls: Sequence[tuple[str, Any, str]], request: str = "Fix parse_header please"
) -> tuple[Message, ...]:
    """A user request, then for each (tool, input, output) an assistant call and its result."""
    msgs: list[Message] = [Message("user", (TextBlock(request),))]
    for n, (name, tool_input, output) in enumerate(calls):
        cid = f"call_{n}"
        msgs.append(Message("assistant", (TextBlock(f"step {n}"), ToolUseBlock(cid, name, tool_input))))
        msgs.append(Message("user", (ToolResultBlock(cid, output, name=name),)))
    msgs.append(Message("assistant", (TextBlock("done"),)))
    return tuple(dataclasses.replace(m, index=i, line=i + 1, records=(i,)) for i, m in enumerate(msgs))


def bash_output(n: int, tag: str = "ok") -> str:
    return "\n".join(f"[{tag}] building module {i} of {n}" for i in range(n))


def result_text(m: Message) -> str:
    return next(b.text for b in m.blocks if isinstance(b, ToolResultBlock))


def check_invariants(messages: Sequence[Message], result: StrategyResult, ctx: CompactContext) -> None:
    out = result.messages
    led = ctx.ledger
    assert len(out) == len(messages)
    for before, after in zip(messages, out, strict=True):
        # Same message, same place: only tool-result text may differ.
        assert (after.index, after.role, after.records, after.line, after.meta) == (
            before.index,
            before.role,
            before.records,
            before.line,
            before.meta,
        )
        assert len(after.blocks) == len(before.blocks)
        for b0, b1 in zip(before.blocks, after.blocks, strict=True):
            if isinstance(b0, ToolResultBlock):
                assert isinstance(b1, ToolResultBlock)
                assert (b1.tool_use_id, b1.name, b1.is_error) == (b0.tool_use_id, b0.name, b0.is_error)
            else:
                assert b1 is b0
        assert led.tokens(after) <= led.tokens(before)
        if after is not before:
            assert led.tokens(after) < led.tokens(before)
            assert CITATION_RE.search(after.text) is not None
        if before.index in ctx.pinned:
            assert after is before
    assert pairing_problems(out, strict=True) == pairing_problems(messages, strict=True)
    assert sum(a.saved for a in result.actions) == led.total(messages) - led.total(out)
    for a in result.actions:
        assert a.strategy == "mask"
        assert a.kind in ("shrink", "mask")
        assert a.first == a.last
        assert a.tokens_after < a.tokens_before


# ------------------------------------------------------------------------------------------- basics


def test_registered_with_a_config() -> None:
    assert strategies()["mask"] is Mask
    assert parse_config(Mask, {"keep_last_results": "5", "placeholder_only": "yes"}) == MaskConfig(5, True)
    with pytest.raises(UsageError):
        parse_config(Mask, {"keep_last_results": "-1"})


def test_under_target_returns_the_input_unchanged() -> None:
    msgs = conversation([("Bash", {"command": "make"}, bash_output(400))] * 6)
    ctx = make_ctx(msgs, target=10**9)
    result = MASK.compact(msgs, ctx)
    assert result.messages == msgs
    assert all(a is b for a, b in zip(result.messages, msgs, strict=True))
    assert result.actions == ()


def all_placeholders_total(msgs: Sequence[Message], config: MaskConfig | None = None) -> int:
    """What the conversation costs with every maskable result a placeholder: the least mask can reach."""
    config = dataclasses.replace(config or MaskConfig(), placeholder_only=True)
    led = Ledger(QuarterCounter())
    return led.total(MASK.compact(msgs, make_ctx(msgs, target=1, config=config, ledger=led)).messages)


def test_last_results_are_kept_and_older_ones_shrunk_oldest_first() -> None:
    msgs = conversation([("Bash", {"command": f"make step{i}"}, bash_output(300, f"s{i}")) for i in range(6)])
    ctx = make_ctx(msgs, target=all_placeholders_total(msgs) + 1)
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    changed = [m.index for a, m in zip(msgs, result.messages, strict=True) if a is not m]
    # Six results at messages 2, 4, ..., 12; the last three are kept verbatim.
    assert changed == [2, 4, 6]
    assert [a.first for a in result.actions if a.kind == "shrink"] == [2, 4, 6]


def test_stops_as_soon_as_the_target_is_met() -> None:
    msgs = conversation([("Bash", {"command": f"make step{i}"}, bash_output(300, f"s{i}")) for i in range(6)])
    led = Ledger(QuarterCounter())
    total = led.total(msgs)
    one_shrink = led.tokens(msgs[2]) - 400  # a shrink saves far more than 400 tokens here
    ctx = make_ctx(msgs, target=total - one_shrink, ledger=led)
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    assert [a.first for a in result.actions] == [2]
    assert led.total(result.messages) <= ctx.target
    assert result.messages[4] is msgs[4]


def test_command_shrink_keeps_tail_and_errors() -> None:
    output = bash_output(200) + "\nerror: linker failed\n" + bash_output(30, "tail")
    msgs = conversation(
        [("Bash", {"command": "make all"}, output)] + [("Bash", {"command": "ls"}, "a\nb")] * 3
    )
    # Over by less than a shrink saves: the first pass is enough.
    ctx = make_ctx(msgs, target=Ledger(QuarterCounter()).total(msgs) - 1000)
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    text = result_text(result.messages[2])
    assert text.startswith("[ctxc: Bash result of `make all` shrunk")
    assert "error: linker failed" in text
    assert "[tail] building module 29 of 30" in text
    assert "[ok] building module 5 of 200" not in text
    assert "ctxc archive 3f2a9c1b4d5e messages 2" in text


def test_file_read_keeps_lines_about_the_current_request() -> None:
    source = [f"{i:6d}→    x_{i} = {i}" for i in range(1, 401)]
    source[119] = f"{120:6d}→def render_page(ctx):"
    msgs = conversation(
        [("Read", {"file_path": "/app/views.py"}, "\n".join(source))]
        + [("Bash", {"command": "ls"}, "a")] * 3,
        request="Why is render_page slow?",
    )
    ctx = make_ctx(msgs, target=Ledger(QuarterCounter()).total(msgs) - 1000)
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    text = result_text(result.messages[2])
    assert f"{120:6d}→def render_page(ctx):" in text
    assert f"{115:6d}→    x_115 = 115" in text
    assert f"{125:6d}→    x_125 = 125" in text
    assert f"{126:6d}→" not in text
    assert "… 114 lines elided …" in text


def test_placeholder_only_and_placeholder_content() -> None:
    output = bash_output(120)
    msgs = conversation(
        [("Bash", {"command": "npm run build"}, output)] + [("Bash", {"command": "ls"}, "a")] * 3
    )
    ctx = make_ctx(msgs, target=1, config=MaskConfig(placeholder_only=True))
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    tokens = ctx.ledger.count_text(output)
    assert result_text(result.messages[2]) == (
        f"[ctxc: Bash result of `npm run build` removed ({tokens:,} tokens, 120 lines); "
        "original in ctxc archive 3f2a9c1b4d5e messages 2]"
    )
    assert [a.kind for a in result.actions] == ["mask"]


def test_second_pass_turns_shrunk_results_into_placeholders() -> None:
    msgs = conversation([("Bash", {"command": f"make {i}"}, bash_output(300, f"s{i}")) for i in range(5)])
    led = Ledger(QuarterCounter())
    config = MaskConfig(keep_last_results=0)
    # Reachable only with every result a placeholder.
    ctx = make_ctx(msgs, target=all_placeholders_total(msgs, config), ledger=led, config=config)
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    texts = [result_text(result.messages[i]) for i in (2, 4, 6, 8, 10)]
    assert all(" removed (" in t for t in texts), texts
    # Each result went through a shrink first, then a placeholder; the placeholder describes the original.
    assert [a.kind for a in result.actions] == ["shrink"] * 5 + ["mask"] * 5
    assert "300 lines" in texts[0]
    assert led.total(result.messages) <= ctx.target


def test_a_target_out_of_reach_skips_shrinking_for_placeholders() -> None:
    msgs = conversation([("Bash", {"command": f"make {i}"}, bash_output(300, f"s{i}")) for i in range(5)])
    config = MaskConfig(keep_last_results=0)
    out_of_reach = all_placeholders_total(msgs, config) - 1
    result = MASK.compact(msgs, make_ctx(msgs, target=out_of_reach, config=config))
    # The second pass would have replaced every shrunk result: the first one does not shrink at all.
    assert [a.kind for a in result.actions] == ["mask"] * 5
    only = dataclasses.replace(config, placeholder_only=True)
    assert result.messages == MASK.compact(msgs, make_ctx(msgs, target=out_of_reach, config=only)).messages


def test_unprocessable_result_gets_a_placeholder_in_the_first_pass() -> None:
    todo = "\n".join(f"- [ ] item {i}" for i in range(200))
    msgs = conversation([("TodoWrite", {"todos": []}, todo)] + [("Bash", {"command": "ls"}, "a")] * 3)
    ctx = make_ctx(msgs, target=1)
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    assert result_text(result.messages[2]).startswith("[ctxc: TodoWrite result removed (")


def test_tiny_results_are_never_grown() -> None:
    msgs = conversation([("Bash", {"command": "true"}, "ok")] * 6)
    ctx = make_ctx(msgs, target=1)
    result = MASK.compact(msgs, ctx)
    assert result.messages == msgs
    assert result.actions == ()


def test_a_second_run_does_not_stack_notes() -> None:
    msgs = conversation([("Bash", {"command": f"make {i}"}, bash_output(300, f"s{i}")) for i in range(6)])
    led = Ledger(QuarterCounter())
    first = MASK.compact(msgs, make_ctx(msgs, target=led.total(msgs) - 3000, ledger=led))
    assert {a.kind for a in first.actions} == {"shrink"}
    again = first.messages
    second = MASK.compact(again, make_ctx(again, target=led.total(again) - 100, ledger=led))
    check_invariants(again, second, make_ctx(again, target=1, ledger=led))
    for m in second.messages:
        for b in m.blocks:
            if isinstance(b, ToolResultBlock):
                assert b.text.count("[ctxc:") <= 1
    # What the first run shrank is left to the placeholder pass; an untouched result is shrunk now.
    assert second.actions[0].kind == "shrink"
    assert result_text(first.messages[second.actions[0].first]) == result_text(msgs[second.actions[0].first])


class CountingTokenizer:
    """A token per four characters, recording the size of each batch it is asked to count."""

    name = "counting"

    def __init__(self) -> None:
        self.batches: list[int] = []

    def count(self, text: str) -> int:
        return self.count_batch([text])[0]

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        self.batches.append(len(texts))
        return [len(t) // 4 for t in texts]


def test_the_second_pass_counts_in_batches_not_one_result_at_a_time() -> None:
    """Each count may be a round trip to a counting worker: results shrunk by an earlier run, masked now,
    have their sizes counted together."""
    shrunk = "[ctxc: Bash result shrunk: tail kept; full output in ctxc archive 3f2a9c1b4d5e messages 1]\n"
    msgs = conversation(
        [("Bash", {"command": f"make {i}"}, shrunk + bash_output(300, f"s{i}")) for i in range(20)]
    )
    tokenizer = CountingTokenizer()
    led = Ledger(CachedCounter(tokenizer))
    # Counts taken as the file was read, as compact does: the counter has not seen these texts.
    led.take_counts(msgs, [sum(len(t) // 4 for t in message_texts(m)) + 4 for m in msgs])
    result = MASK.compact(msgs, make_ctx(msgs, target=1, ledger=led, config=MaskConfig(keep_last_results=0)))
    assert sum(a.kind == "mask" for a in result.actions) == 20
    assert len(tokenizer.batches) <= 4, tokenizer.batches


def test_pinned_and_keep_last_are_untouched() -> None:
    msgs = conversation([("Bash", {"command": f"make {i}"}, bash_output(300)) for i in range(6)])
    ctx = make_ctx(msgs, target=1, pinned={2}, keep_last=9, config=MaskConfig(keep_last_results=0))
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    # Message 2 is pinned; the last 9 messages (5..13) are kept verbatim; so only message 4 changes.
    assert [m.index for a, m in zip(msgs, result.messages, strict=True) if a is not m] == [4]
    assert eligible_slots(msgs, ctx, 0) == [(4, 0)]


def test_parallel_results_in_one_message() -> None:
    calls = (ToolUseBlock("a", "Grep", {"pattern": "x"}), ToolUseBlock("b", "Read", {"file_path": "/f"}))
    grep = "\n".join(f"src/m{i}.py:{i}:x" for i in range(50))
    msgs = tuple(
        dataclasses.replace(m, index=i)
        for i, m in enumerate(
            [
                Message("user", (TextBlock("find x"),)),
                Message("assistant", calls),
                Message("user", (ToolResultBlock("a", grep), ToolResultBlock("b", "\n".join(["y"] * 300)))),
                Message("assistant", (TextBlock("done"),)),
            ]
        )
    )
    ctx = make_ctx(msgs, target=1, config=MaskConfig(keep_last_results=0))
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    a, b = result.messages[2].blocks
    assert isinstance(a, ToolResultBlock)
    assert isinstance(b, ToolResultBlock)
    assert "top 3 of 50" in a.text or " removed (" in a.text
    assert b.text != "\n".join(["y"] * 300)


def test_realistic_tokenizer_on_a_claude_code_session() -> None:
    path = CORPUS / "claude-code" / "entire-cli_auto-compact_summary-records_v2.1.5.jsonl"
    if not path.is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    msgs = load(path).conversation(0)
    led = Ledger(make_counter("o200k_base", use_cache=False))
    total = led.total(msgs)
    ctx = make_ctx(msgs, target=total // 2, ledger=led)
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    assert led.total(result.messages) <= total // 2
    kinds = {a.kind for a in result.actions}
    assert "shrink" in kinds


# --------------------------------------------------------------------------------------- properties

_OUTPUT = st.one_of(
    st.integers(0, 400).map(bash_output),
    st.integers(0, 200).map(lambda n: "\n".join(f"f{i}.py:{i}:hit" for i in range(n))),
    st.integers(0, 200).map(
        lambda n: "\n".join(f"{i:6d}→line {i} parse_header" if i % 37 == 0 else f"{i:6d}→x" for i in range(n))
    ),
    st.text(max_size=300),
)
_CALL = st.tuples(
    st.sampled_from(["Bash", "Read", "Grep", "WebSearch", "TodoWrite", "shell", "read", "mystery"]),
    st.sampled_from([{"command": "make"}, {"file_path": "/a.py"}, {"pattern": "x"}, {}, "raw input"]),
    _OUTPUT,
)


@settings(max_examples=80, deadline=None)
@given(
    calls=st.lists(_CALL, min_size=1, max_size=10),
    share=st.floats(0.0, 1.2),
    keep_results=st.integers(0, 4),
    keep_last=st.integers(0, 5),
    placeholder_only=st.booleans(),
    pin_seed=st.lists(st.integers(0, 30), max_size=4),
)
def test_mask_invariants(
    calls: list[tuple[str, Any, str]],
    share: float,
    keep_results: int,
    keep_last: int,
    placeholder_only: bool,
    pin_seed: list[int],
) -> None:
    msgs = conversation(calls)
    led = Ledger(QuarterCounter())
    target = int(led.total(msgs) * share)
    pinned = {p for p in pin_seed if p < len(msgs)}
    config = MaskConfig(keep_last_results=keep_results, placeholder_only=placeholder_only)
    snapshot = list(msgs)
    ctx = make_ctx(msgs, target, pinned=pinned, keep_last=keep_last, config=config, ledger=led)
    result = MASK.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    assert list(msgs) == snapshot
    assert all(a is b for a, b in zip(msgs, snapshot, strict=True))
    # Deterministic, also with a fresh ledger.
    again = MASK.compact(msgs, make_ctx(msgs, target, pinned=pinned, keep_last=keep_last, config=config))
    assert again == result
    # Stopped early: undoing the last action would leave the output over the target.
    if result.actions:
        assert led.total(result.messages) + result.actions[-1].saved > target
    # Reached the target whenever every eligible result was at least tried as a placeholder.
    if led.total(result.messages) > target:
        slots = eligible_slots(msgs, ctx, keep_results)
        for pos, bi in slots:
            block = result.messages[pos].blocks[bi]
            assert isinstance(block, ToolResultBlock)
            original = msgs[pos].blocks[bi]
            assert isinstance(original, ToolResultBlock)
            assert " removed (" in block.text or block is original


# ------------------------------------------------------------------------------------------- corpus


@pytest.mark.parametrize("path", corpus_params())
@pytest.mark.parametrize("ratio", [0.5, 0.2])
def test_mask_on_the_corpus(path: Path, ratio: float) -> None:
    transcript = load(path)
    led = Ledger(QuarterCounter())
    for conv in range(transcript.conversations):
        msgs = transcript.conversation(conv)
        if not msgs:
            continue
        total = led.total(msgs)
        pinned = {msgs[0].index, msgs[-1].index}
        ctx = make_ctx(msgs, int(total * ratio), pinned=pinned, keep_last=4, ledger=led)
        result = MASK.compact(msgs, ctx)
        check_invariants(msgs, result, ctx)
        assert led.total(result.messages) <= total
        assert MASK.compact(msgs, ctx) == result
