"""offload: huge tool results and (late in a session) large tool inputs moved into archive files."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxc.archive import Archive
from ctxc.archive_store import CITATION_RE, ArchiveStore, UnwrittenArchive, sha256_hex
from ctxc.compaction.base import CompactContext, StrategyResult, parse_config, strategies
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.offload import Offload, OffloadConfig
from ctxc.errors import UsageError
from ctxc.formats import load
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.tokens import make_counter
from ctxc.validate import pairing_problems

ARCHIVE_ID = "3f2a9c1b4d5e" + "0" * 52
OFFLOAD = Offload()
POINTER = re.compile(r"to (\S+); ctxc archive ([0-9a-f]{12}) messages (\d+)\]")


class QuarterCounter:
    """A fast stand-in for a tokenizer: a token per four characters."""

    name = "quarter"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t) // 4 for t in texts]


class NoSummarizer:
    name = "none"

    def summarize(self, request: Any, count: Any) -> str:
        raise AssertionError("offload asked for a summary")


def make_ctx(
    messages: Sequence[Message],
    *,
    archive: ArchiveStore | None,
    target: int = 1,
    window: int = 10**9,
    pinned: Iterable[int] = (),
    keep_last: int = 0,
    config: OffloadConfig | None = None,
    ledger: Ledger | None = None,
) -> CompactContext:
    return CompactContext(
        target=target,
        window=window,
        ledger=ledger or Ledger(QuarterCounter()),
        summarizer=NoSummarizer(),  # type: ignore[arg-type]
        archive=archive,
        archive_id=ARCHIVE_ID,
        pinned=frozenset(pinned),
        keep_last=keep_last,
        configs={"offload": config} if config else {},
    )


def conversation(calls: Sequence[tuple[str, Any, str]]) -> tuple[Message, ...]:
    msgs: list[Message] = [Message("user", (TextBlock("Build the release"),))]
    for n, (name, tool_input, output) in enumerate(calls):
        cid = f"call_{n}"
        msgs.append(Message("assistant", (ToolUseBlock(cid, name, tool_input),)))
        msgs.append(Message("user", (ToolResultBlock(cid, output, name=name),)))
    msgs.append(Message("assistant", (TextBlock("done"),)))
    return tuple(dataclasses.replace(m, index=i, line=i + 1, records=(i,)) for i, m in enumerate(msgs))


def log(n: int, tag: str = "row") -> str:
    return "\n".join(f"{tag} {i:05d}: value={i * 7} status=ok" for i in range(n))


def block_text(m: Message) -> str:
    return next(b.text for b in m.blocks if isinstance(b, ToolResultBlock))


def pointed_blobs(text: str) -> list[Path]:
    return [Path(m.group(1)) for m in POINTER.finditer(text)]


def strings(value: Any) -> list[str]:
    """Every string inside a tool input."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def check_invariants(messages: Sequence[Message], result: StrategyResult, ctx: CompactContext) -> None:
    out = result.messages
    led = ctx.ledger
    assert len(out) == len(messages)
    for before, after in zip(messages, out, strict=True):
        assert (after.index, after.role, after.records, after.meta) == (
            before.index,
            before.role,
            before.records,
            before.meta,
        )
        assert led.tokens(after) <= led.tokens(before)
        if before.index in ctx.pinned:
            assert after is before
        for b0, b1 in zip(before.blocks, after.blocks, strict=True):
            if isinstance(b0, ToolUseBlock):
                assert isinstance(b1, ToolUseBlock)
                assert (b1.id, b1.name) == (b0.id, b0.name)
                if isinstance(b0.input, dict):
                    assert isinstance(b1.input, dict)
                    assert list(b1.input) == list(b0.input)
            elif isinstance(b0, ToolResultBlock):
                assert isinstance(b1, ToolResultBlock)
                assert (b1.tool_use_id, b1.is_error, b1.images) == (b0.tool_use_id, b0.is_error, b0.images)
            else:
                assert b1 is b0
    tail = len(messages) - ctx.keep_last if ctx.keep_last else len(messages)
    assert all(a is b for a, b in zip(messages[tail:], out[tail:], strict=True))
    assert pairing_problems(out, strict=True) == pairing_problems(messages, strict=True)
    assert sum(a.saved for a in result.actions) == led.total(messages) - led.total(out)
    assert all(a.kind == "offload" and a.strategy == "offload" for a in result.actions)


# ------------------------------------------------------------------------------------------ results


def test_registered_with_a_config() -> None:
    assert strategies()["offload"] is Offload
    cfg = parse_config(Offload, {"threshold_tokens": "5000", "input_keys": "content, patch"})
    assert cfg.threshold_tokens == 5000
    assert cfg.input_keys == ("content", "patch")
    with pytest.raises(UsageError):
        parse_config(Offload, {"threshold_tokens": "0"})


def test_large_result_goes_to_the_archive_as_a_file(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive")
    big = log(4000)  # about 33k tokens by the quarter counter
    msgs = conversation([("Bash", {"command": "./export.sh"}, big), ("Bash", {"command": "ls"}, "a\nb")])
    ctx = make_ctx(msgs, archive=archive, config=OffloadConfig(threshold_tokens=5000))
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    text = block_text(result.messages[2])
    [path] = pointed_blobs(text)
    assert path.exists()
    assert path.read_bytes().decode() == big
    assert path.name == sha256_hex(big.encode())
    assert path == archive.path_of(path.name)
    lines = text.split("\n")
    tokens = ctx.ledger.count_text(big)
    assert lines[0] == (
        f"[ctxc offloaded the Bash result of `./export.sh` ({tokens:,} tokens, 4,000 lines) to {path}; "
        "ctxc archive 3f2a9c1b4d5e messages 2]"
    )
    assert lines[1] == "First 10 lines:"
    assert lines[2:12] == big.split("\n")[:10]
    assert lines[12] == "… 3,990 more lines in the offloaded file …"
    match = CITATION_RE.search(text)
    assert match is not None
    assert (match.group(1), match.group(2)) == (ARCHIVE_ID[:12], "2")
    # The small result stays.
    assert result.messages[4] is msgs[4]
    [action] = result.actions
    assert (action.first, action.last) == (2, 2)
    assert action.note.startswith("Bash result → ")


def test_offloading_does_not_wait_for_the_target(tmp_path: Path) -> None:
    msgs = conversation([("Read", {"file_path": "/big.csv"}, log(30_000))])
    ctx = make_ctx(msgs, archive=Archive(tmp_path), target=10**9)
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    assert len(result.actions) == 1
    assert result.messages[2] is not msgs[2]


def test_default_threshold_is_20k_tokens(tmp_path: Path) -> None:
    under = log(2_300)  # ~19k tokens
    over = log(2_700)  # ~22k tokens
    led = Ledger(QuarterCounter())
    assert led.count_text(under) < 20_000 < led.count_text(over)
    msgs = conversation([("Bash", {"command": "a"}, under), ("Bash", {"command": "b"}, over)])
    ctx = make_ctx(msgs, archive=Archive(tmp_path), ledger=led)
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    assert result.messages[2] is msgs[2]
    assert result.messages[4] is not msgs[4]


def test_keep_last_and_pinned_are_never_offloaded(tmp_path: Path) -> None:
    big = log(3000)
    msgs = conversation([("Bash", {"command": str(i)}, big) for i in range(4)])  # results at 2, 4, 6, 8
    ctx = make_ctx(
        msgs, archive=Archive(tmp_path), pinned={4}, keep_last=3, config=OffloadConfig(threshold_tokens=1000)
    )
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    assert [a.first for a in result.actions] == [2, 6]


def test_dry_run_computes_the_path_without_writing(tmp_path: Path) -> None:
    root = tmp_path / "never-written"
    big = log(3000)
    msgs = conversation([("Bash", {"command": "x"}, big)])
    ctx = make_ctx(msgs, archive=UnwrittenArchive(root), config=OffloadConfig(threshold_tokens=1000))
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    [path] = pointed_blobs(block_text(result.messages[2]))
    digest = sha256_hex(big.encode())
    assert path == root / "objects" / digest[:2] / digest
    assert not root.exists()


def test_without_an_archive_nothing_is_offloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library run without an archive stores nothing: a pointer would name a file that is not there."""
    monkeypatch.setenv("CTXC_ARCHIVE", str(tmp_path / "never-written"))
    msgs = conversation([("Bash", {"command": "x"}, log(3000))])
    result = OFFLOAD.compact(msgs, make_ctx(msgs, archive=None, config=OffloadConfig(threshold_tokens=1000)))
    assert result.messages == tuple(msgs)
    assert not result.actions
    assert not (tmp_path / "never-written").exists()


def test_a_one_line_giant_is_clipped_in_the_preview(tmp_path: Path) -> None:
    minified = '{"data": [' + ",".join(f'{{"id": {i}}}' for i in range(20_000)) + "]}"
    msgs = conversation([("WebFetch", {"url": "https://x/api"}, minified)])
    ctx = make_ctx(msgs, archive=Archive(tmp_path), config=OffloadConfig(threshold_tokens=1000))
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    text = block_text(result.messages[2])
    assert len(text) < 1400
    assert text.split("\n")[2].endswith(f"… (+{len(minified) - 1000} chars)")
    assert " tokens, 1 line) to " in text.split("\n")[0]  # not "1 lines"


def test_realistic_tokenizer(tmp_path: Path) -> None:
    led = Ledger(make_counter("o200k_base", use_cache=False))
    big = log(5000)
    msgs = conversation([("Bash", {"command": "dump"}, big)])
    ctx = make_ctx(msgs, archive=Archive(tmp_path), ledger=led)
    assert led.count_text(big) > 20_000
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    assert led.tokens(result.messages[2]) < 500
    [path] = pointed_blobs(block_text(result.messages[2]))
    assert path.read_bytes().decode() == big


# ------------------------------------------------------------------------------------------- inputs


def _write_session(content: str) -> tuple[Message, ...]:
    edits = [{"old_string": content, "new_string": "x"}, {"old_string": "y", "new_string": "z"}]
    return conversation(
        [
            ("Write", {"file_path": "/app/big.py", "content": content}, "File created successfully"),
            ("MultiEdit", {"file_path": "/app/big.py", "edits": edits}, "Applied 2 edits"),
            ("apply_patch", "*** Begin Patch\n*** Update File: a.py\n" + content, "Done!"),
            ("Bash", {"command": content}, "ran"),  # a command is not file content: never offloaded
            ("Write", {"file_path": "/app/last.py", "content": content}, "File created successfully"),
        ]
    )


def test_old_large_inputs_are_offloaded_above_85_percent(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    content = "\n".join(f"def handler_{i}(event):\n    return process(event, {i})" for i in range(400))
    msgs = _write_session(content)
    led = Ledger(QuarterCounter())
    total = led.total(msgs)
    ctx = make_ctx(msgs, archive=archive, window=int(total / 0.9), keep_last=2, ledger=led)
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    tokens = led.count_text(content)
    pointer = f"[ctxc offloaded {tokens} tokens to {archive.path_of(sha256_hex(content.encode()))}; "

    write = result.messages[1].blocks[0]
    assert isinstance(write, ToolUseBlock)
    assert write.input["file_path"] == "/app/big.py"
    assert write.input["content"] == pointer + "ctxc archive 3f2a9c1b4d5e messages 1]"

    multi = result.messages[3].blocks[0]
    assert isinstance(multi, ToolUseBlock)
    assert multi.input["edits"][0]["old_string"].startswith(pointer)
    assert multi.input["edits"][0]["new_string"] == "x"
    assert multi.input["edits"][1] == {"old_string": "y", "new_string": "z"}

    patch = result.messages[5].blocks[0]
    assert isinstance(patch, ToolUseBlock)
    assert isinstance(patch.input, str)
    assert patch.input.startswith("[ctxc offloaded ")
    [patch_path] = pointed_blobs(patch.input)
    assert patch_path.read_bytes().decode() == "*** Begin Patch\n*** Update File: a.py\n" + content

    assert result.messages[7] is msgs[7]  # a Bash command, however long, is not file content
    last = result.messages[9].blocks[0]  # the last Write is old enough: keep_last=2 covers messages 10-11
    assert isinstance(last, ToolUseBlock)
    [path] = pointed_blobs(last.input["content"])
    assert path.read_bytes().decode() == content
    notes = [a.note for a in result.actions]
    assert notes == [
        "Write input content",
        "MultiEdit input edits[0].old_string",
        "apply_patch input patch",
        "Write input content",
    ]


def test_inputs_stay_below_85_percent(tmp_path: Path) -> None:
    content = "\n".join(f"line {i} of the generated module" for i in range(2000))
    msgs = _write_session(content)
    led = Ledger(QuarterCounter())
    ctx = make_ctx(msgs, archive=Archive(tmp_path), window=int(led.total(msgs) / 0.8), ledger=led)
    result = OFFLOAD.compact(msgs, ctx)
    assert result.messages == msgs
    assert result.actions == ()


def test_share_is_measured_after_results_are_offloaded(tmp_path: Path) -> None:
    content = "\n".join(f"line {i} of the generated module" for i in range(2000))
    msgs = conversation(
        [
            ("Write", {"file_path": "/a.py", "content": content}, "ok"),
            ("Bash", {"command": "dump"}, log(40_000)),
        ]
    )
    led = Ledger(QuarterCounter())
    ctx = make_ctx(msgs, archive=Archive(tmp_path), window=int(led.total(msgs) / 0.9), ledger=led)
    result = OFFLOAD.compact(msgs, ctx)
    check_invariants(msgs, result, ctx)
    # The giant result went, which brought the context far below 85%: the Write input stays.
    assert [a.first for a in result.actions] == [4]
    assert result.messages[1] is msgs[1]


# --------------------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6000), min_size=1, max_size=6),
    threshold=st.integers(1, 5000),
    keep_last=st.integers(0, 4),
    share=st.floats(0.5, 1.5),
    pin_seed=st.lists(st.integers(0, 14), max_size=3),
)
def test_offload_invariants(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    threshold: int,
    keep_last: int,
    share: float,
    pin_seed: list[int],
) -> None:
    archive = Archive(tmp_path_factory.mktemp("archive"))
    calls = [
        ("Write", {"file_path": f"/f{i}.py", "content": log(n, "src")}, log(n))
        if i % 2
        else ("Bash", {"command": "x"}, log(n))
        for i, n in enumerate(sizes)
    ]
    msgs = conversation(calls)
    led = Ledger(QuarterCounter())
    config = OffloadConfig(threshold_tokens=threshold, input_threshold_tokens=max(1, threshold // 4))
    pinned = {p for p in pin_seed if p < len(msgs)}
    window = max(1, int(led.total(msgs) / share))
    kw: dict[str, Any] = {"window": window, "pinned": pinned, "keep_last": keep_last, "config": config}
    result = OFFLOAD.compact(msgs, make_ctx(msgs, archive=archive, ledger=led, **kw))
    check_invariants(msgs, result, make_ctx(msgs, archive=archive, ledger=led, **kw))
    for m in result.messages:
        for path in pointed_blobs(m.text):
            assert path.is_file()
            assert sha256_hex(path.read_bytes()) == path.name
    # Deterministic, with a fresh ledger too.
    again = OFFLOAD.compact(msgs, make_ctx(msgs, archive=archive, **kw))
    assert again == result


# ------------------------------------------------------------------------------------------- corpus


#: Thresholds low enough for the corpus's results to be offloaded, and (results left alone) its inputs.
CORPUS_CONFIGS = {
    "results": OffloadConfig(threshold_tokens=1500, input_threshold_tokens=300),
    "inputs": OffloadConfig(threshold_tokens=10**9, input_threshold_tokens=300),
}


@pytest.mark.parametrize("path", corpus_params())
@pytest.mark.parametrize("ratio", [0.5, 0.2])
@pytest.mark.parametrize("which", sorted(CORPUS_CONFIGS))
def test_offload_on_the_corpus(path: Path, ratio: float, which: str, tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive")
    transcript = load(path)
    led = Ledger(QuarterCounter())
    config = CORPUS_CONFIGS[which]
    for conv in range(transcript.conversations):
        msgs = transcript.conversation(conv)
        if not msgs:
            continue
        total = led.total(msgs)
        pinned = {msgs[0].index, msgs[-1].index}
        ctx = make_ctx(
            msgs,
            archive=archive,
            target=int(total * ratio),
            window=max(1, int(total / 0.95)),
            pinned=pinned,
            keep_last=4,
            config=config,
            ledger=led,
        )
        result = OFFLOAD.compact(msgs, ctx)
        check_invariants(msgs, result, ctx)
        originals = {b.text for m in msgs for b in m.blocks if isinstance(b, ToolResultBlock)}
        for m in result.messages:
            for blob in pointed_blobs(m.text):
                assert blob.is_file()
                assert sha256_hex(blob.read_bytes()) == blob.name
        for before, after in zip(msgs, result.messages, strict=True):
            for b0, b1 in zip(before.blocks, after.blocks, strict=True):
                if isinstance(b0, ToolResultBlock) and b1 is not b0:
                    assert isinstance(b1, ToolResultBlock)
                    [blob] = pointed_blobs(b1.text.split("\n", 1)[0])
                    assert blob.read_bytes().decode() == b0.text
                    assert b0.text in originals
                if isinstance(b0, ToolUseBlock) and b1 is not b0:
                    assert isinstance(b1, ToolUseBlock)
                    blobs = [blob for v in strings(b1.input) for blob in pointed_blobs(v)]
                    assert blobs
                    assert all(blob.read_bytes().decode() in strings(b0.input) for blob in blobs)
        assert OFFLOAD.compact(msgs, ctx) == result
