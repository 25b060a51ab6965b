"""dedupe, thinking and images: what each removes, what always stays, and the invariants over
generated transcripts (the last copy of anything stays, pairing holds, kept thinking is untouched)."""

from __future__ import annotations

import base64
import io
import re
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from conftest import CORPUS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxc.analysis import analyze
from ctxc.compaction.adaptive import STAGES
from ctxc.compaction.dedupe import FileOp, file_op, shell_read
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.run import CompactionResult, CompactOptions, compact_transcript
from ctxc.compaction.thinking import protected_turns
from ctxc.formats import load
from ctxc.live import live_context
from ctxc.model import (
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
)
from ctxc.tokens.cache import CachedCounter
from ctxc.validate import pairing_problems


class WordCounter:
    """One token per whitespace-separated word: fast and deterministic."""

    name = "words"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def chat(lines: Sequence[dict[str, Any]]) -> Transcript:
    return load(io.BytesIO(b"".join(orjson.dumps(line) + b"\n" for line in lines)))


def compact(t: Transcript, strategy: str, keep_last: int = 1, **settings: str) -> CompactionResult:
    options = CompactOptions(
        strategy=strategy, window=1_000_000, keep_last=keep_last, allow_over=True, settings=settings
    )
    return compact_transcript(t, options, counter=WordCounter())


def call(cid: str, name: str, inp: dict[str, Any], thinking: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if thinking is not None:
        content.append({"type": "thinking", "thinking": thinking, "signature": f"sig-{cid}"})
    content.append({"type": "tool_use", "id": cid, "name": name, "input": inp})
    return {"role": "assistant", "content": content}


def result(cid: str, text: str, *extra: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": text}, *extra]}


FILE = "\n".join(f"{n:>6}→line {n} of the module, with words enough to count" for n in range(1, 60))
REMINDER = (
    "<system-reminder>The todo list is empty. Remember to use the todo tool when a task has several steps; "
    "ignore this if it does not apply to the current work; never mention it to the user.</system-reminder>"
)


def results_of(t: Transcript) -> dict[str, str]:
    return {b.tool_use_id: b.text for m in t.messages for b in m.blocks if isinstance(b, ToolResultBlock)}


# --------------------------------------------------------------------------------------------- dedupe


def test_identical_result_points_at_the_later_copy_which_stays() -> None:
    t = chat(
        [
            {"role": "user", "content": "Task: run the tests"},
            call("a", "Bash", {"command": "pytest -q"}),
            result("a", "12 passed in 0.31s " * 20),
            call("b", "Bash", {"command": "pytest -q"}),
            result("b", "12 passed in 0.31s " * 20),
            {"role": "assistant", "content": "All green."},
            {"role": "user", "content": "thanks"},
        ]
    )
    out = compact(t, "dedupe").transcript
    texts = results_of(out)
    later = next(m.index for m in t.messages if any(getattr(b, "tool_use_id", "") == "b" for b in m.blocks))
    assert texts["a"].startswith(f"[ctxc: same as the result of message {later}; original in ctxc archive ")
    assert re.search(r"ctxc archive [0-9a-f]{12} messages 2\]", texts["a"])
    assert texts["b"] == "12 passed in 0.31s " * 20


class WordsTokenizer:
    """A tokenizer behind the cached counter, counting how many batches of new texts it is given."""

    name = "words"

    def __init__(self) -> None:
        self.batches = 0

    def count(self, text: str) -> int:
        return len(text.split())

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        self.batches += 1
        return [len(t.split()) for t in texts]


def test_dedupe_and_mask_count_what_they_write_in_batches() -> None:
    # Each new text was one count, a round trip to a counting worker: 30 pointers, 40 placeholders.
    repeated = [
        line
        for k in range(60)
        for line in (call(f"a{k}", "Bash", {"command": "pytest"}), result(f"a{k}", f"{k % 30} " * 99))
    ]
    moved = [
        line
        for k in range(40)
        for line in (
            call(f"m{k}", "Bash", {"command": f"pytest t{k}"}),
            result(f"m{k}", f"[ctxc: {k} " + "w " * 300),
        )
    ]
    for strategy, lines in (("dedupe", repeated), ("mask", moved)):
        t = chat(
            [
                {"role": "user", "content": "Task: run the tests"},
                *lines,
                {"role": "user", "content": "thanks"},
            ]
        )
        tokenizer = WordsTokenizer()
        counter = CachedCounter(tokenizer)
        counter.count(
            [b.text for m in t.messages for b in m.blocks if isinstance(b, TextBlock | ToolResultBlock)]
        )
        tokenizer.batches = 0
        options = CompactOptions(strategy, 2_000, window=1_000_000, keep_last=1, allow_over=True)
        result_ = compact_transcript(t, options, counter=counter)
        assert len(result_.actions) >= 30
        assert tokenizer.batches <= 3, strategy


def test_a_read_is_superseded_by_a_later_read_holding_it_or_made_out_of_date_by_an_edit() -> None:
    part = "\n".join(FILE.splitlines()[9:20])
    lines = [
        {"role": "user", "content": "Task: fix the module"},
        call("r1", "Read", {"file_path": "/p/m.py"}),
        result("r1", FILE),
        call("e1", "Edit", {"file_path": "/p/m.py", "old_string": "line 3", "new_string": "line three"}),
        result("e1", "The file /p/m.py has been updated successfully."),
        call("r2", "Read", {"file_path": "/p/m.py", "offset": 10, "limit": 11}),
        result("r2", part),
        call("r3", "Read", {"file_path": "/p/m.py", "offset": 10, "limit": 30}),
        result("r3", "\n".join(FILE.splitlines()[9:40])),
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "ok"},
    ]
    out = results_of(compact(chat(lines), "dedupe").transcript)
    assert out["r1"].startswith("[ctxc: read of /p/m.py out of date after the edit in message 3;")
    assert out["r2"].startswith("[ctxc: read of /p/m.py superseded by the read in message 8;")
    assert out["r3"] == "\n".join(FILE.splitlines()[9:40])
    # Asked to keep them, an edit supersedes no read: it still holds the lines the edit did not touch.
    kept = results_of(compact(chat(lines), "dedupe", **{"dedupe.edited_reads": "false"}).transcript)
    assert kept["r1"] == FILE
    assert kept["r2"] == out["r2"]


def test_a_read_is_superseded_by_a_later_write_of_the_whole_file() -> None:
    lines = [
        {"role": "user", "content": "Task: rewrite it"},
        call("r1", "Read", {"file_path": "m.py"}),
        result("r1", FILE),
        call("w1", "Write", {"file_path": "m.py", "content": "print('new')\n"}),
        result("w1", "File created successfully at: m.py"),
        {"role": "assistant", "content": "Rewritten."},
        {"role": "user", "content": "ok"},
    ]
    out = results_of(compact(chat(lines), "dedupe").transcript)
    assert out["r1"].startswith("[ctxc: read of m.py superseded by the write in message 3;")
    failed = [*lines[:4], result("w1", "Error: permission denied"), *lines[5:]]
    assert results_of(compact(chat(failed), "dedupe").transcript)["r1"] == FILE


def test_repeated_injected_text_keeps_only_its_last_copy() -> None:
    t = chat(
        [
            {"role": "user", "content": [{"type": "text", "text": "Task: go"}]},
            call("a", "Bash", {"command": "ls"}),
            result("a", f"a.py\nb.py\n{REMINDER}"),
            call("b", "Bash", {"command": "ls src"}),
            result("b", "c.py", {"type": "text", "text": REMINDER}),
            {"role": "assistant", "content": "Listed."},
            {"role": "user", "content": "ok"},
        ]
    )
    out = compact(t, "dedupe").transcript
    flat = "\n".join(m.text for m in out.messages)
    assert flat.count(REMINDER) == 1
    assert "[ctxc: <system-reminder> repeated in message 4; original in ctxc archive" in flat
    assert results_of(out)["a"].startswith("a.py\nb.py\n[ctxc: <system-reminder>")


def test_a_shell_read_is_recognised_however_its_program_is_quoted() -> None:
    # The program is looked up unquoted before shlex parses the command: quoting must not hide a read.
    for command in ("'cat' a.py", 'c"a"t a.py', "c\\at a.py", "  cat a.py", "\tnl a.py"):
        assert shell_read(command) == FileOp("read", "a.py", True), command
    for command in ("catalog a.py", "'cat a.py'", "xcat a.py", "ca't' a.py x"):
        assert shell_read(command) is None, command


def test_shell_reads_and_file_ops_are_recognised_conservatively() -> None:
    assert shell_read("cat -n src/a.py") == FileOp("read", "src/a.py", True)
    assert shell_read("sed -n '10,40p' src/a.py") == FileOp("read", "src/a.py", False)
    assert shell_read(["bash", "-lc", "nl -ba a.py"], "/w") == FileOp("read", "/w/a.py", True)
    assert shell_read("head -n 20 a.py") == FileOp("read", "a.py", False)
    for command in ("cat a.py | grep x", "cat a.py b.py", "cat $F", "python a.py", "sed -i s/a/b/ a.py"):
        assert shell_read(command) is None, command
    assert file_op("str_replace_editor", {"command": "view", "path": "/r/a.py"}) == FileOp("read", "/r/a.py")
    assert file_op("str_replace_editor", {"command": "create", "path": "a", "file_text": "x"}) == FileOp(
        "write", "a"
    )
    assert file_op("apply_patch", "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch") == (
        FileOp("edit", "a.py")
    )
    assert file_op("Read", {"file_path": "a.py", "offset": 5}) == FileOp("read", "a.py", False)
    assert file_op("exec_command", '{"cmd": "cat a.py", "workdir": "/w"}') == FileOp("read", "/w/a.py", True)
    # A range in any spelling makes a read partial (kimi-cli's ReadFile: line_offset, n_lines).
    assert file_op("ReadFile", {"path": "a.py", "line_offset": 5, "n_lines": 3}) == FileOp(
        "read", "a.py", False
    )


def test_a_whole_read_is_not_superseded_by_a_later_partial_one() -> None:
    head = "\n".join(FILE.splitlines()[:20])
    lines = [
        {"role": "user", "content": "Task: read it"},
        call("r1", "ReadFile", {"path": "/p/m.py"}),
        result("r1", FILE),
        call("r2", "ReadFile", {"path": "/p/m.py", "n_lines": 20}),
        result("r2", head.replace("line 3 ", "line three ")),
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "ok"},
    ]
    assert results_of(compact(chat(lines), "dedupe").transcript)["r1"] == FILE


# ------------------------------------------------------------------------------------------- thinking


def test_old_thinking_goes_the_last_turns_stays_with_its_signature() -> None:
    t = chat(
        [
            {"role": "user", "content": "Task: look around"},
            call("a", "Bash", {"command": "ls"}, thinking="first I should list the files " * 5),
            result("a", "a.py"),
            {"role": "user", "content": "now the tests"},
            call("b", "Bash", {"command": "pytest"}, thinking="run them and read the failures " * 5),
            result("b", "1 failed"),
        ]
    )
    out = compact(t, "thinking", keep_last=1).transcript
    thinking = [(m.index, b) for m in out.messages for b in m.blocks if isinstance(b, ThinkingBlock)]
    assert [i for i, _ in thinking] == [4]  # the turn whose call the trailing result answers
    assert thinking[0][1].raw["signature"] == "sig-b"
    assert pairing_problems(out.messages, strict=True) == []


def test_a_turn_with_an_unanswered_call_keeps_its_thinking() -> None:
    msgs = chat(
        [
            {"role": "user", "content": "go"},
            call("a", "Bash", {"command": "ls"}, thinking="hmm"),
            {"role": "user", "content": "stop"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "ok", "signature": "s"}]},
        ]
    ).messages
    assert protected_turns(msgs) == {1, 3}


# --------------------------------------------------------------------------------------------- images


def png(width: int, height: int) -> str:
    """A PNG's signature and header (all ctxc reads of an image): what it costs depends on its size."""
    ihdr = b"IHDR" + struct.pack(">II", width, height) + b"\x08\x06\x00\x00\x00"
    chunk = struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk + b"\x00" * 64).decode()


PNG = png(1000, 800)


def image(data: str = PNG) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def test_old_images_become_cited_placeholders_recent_ones_stay() -> None:
    lines: list[dict[str, Any]] = [{"role": "user", "content": "Task: compare screenshots"}]
    for k in range(5):
        lines.append(call(f"s{k}", "Screenshot", {}))
        shot = [{"type": "text", "text": f"shot {k}"}, image()]
        lines.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"s{k}", "content": shot}]}
        )
    lines.append({"role": "user", "content": [{"type": "text", "text": "and this one"}, image()]})
    lines.append({"role": "assistant", "content": "They match."})
    out = compact(chat(lines), "images", keep_last=1, **{"images.keep_last_turns": "2"}).transcript
    kept = [m.index for m in out.messages for b in m.blocks if isinstance(b, ToolResultBlock) and b.images]
    kept += [m.index for m in out.messages for b in m.blocks if isinstance(b, ImageBlock)]
    assert kept == [10, 11]  # the results of the last 2 turns (9 and 12), and what follows them
    texts = results_of(out)
    assert re.fullmatch(
        r"shot 0\n\[ctxc: image removed \(image/png, 1000x800, \d+ bytes\); "
        r"original in ctxc archive [0-9a-f]{12} messages 2\]",
        texts["s0"],
    )
    assert pairing_problems(out.messages, strict=True) == []


# ----------------------------------------------------------------------------------- adaptive, formats


def test_adaptive_runs_them_first_in_stage_two() -> None:
    assert STAGES[0] == (2, ("dedupe", "thinking", "images", "offload", "mask"))


@pytest.mark.parametrize(
    ("strategy", "name"),
    [
        ("dedupe", "entire-cli_manual-compact_v2.1.14.jsonl"),
        ("thinking", "entire-cli_manual-compact_v2.1.14.jsonl"),
        ("thinking", "kimi-cli-dev_images_microcompact_v2.1.56.jsonl"),
        ("images", "kimi-cli-dev_images_microcompact_v2.1.56.jsonl"),
    ],
)
def test_claude_code_logs_change_only_in_the_live_context(strategy: str, name: str) -> None:
    path = CORPUS / "claude-code" / name
    if not path.is_file():
        pytest.skip("corpus not available")
    t = load(path)
    res = compact(t, strategy, keep_last=4)
    assert res.actions, "nothing removed from a log that has some"
    start = live_context(t.boundaries, t.messages).boundary
    before = [r.raw for r in t.records if start is not None and r.line < start.line]
    assert [r.raw for r in res.transcript.records[: len(before)]] == before
    reread = load(io.BytesIO(res.transcript.to_bytes()), input_format="claude-code")
    live = live_context(reread.boundaries, reread.messages)
    _, messages = live.split(reread.conversation(0))
    assert pairing_problems(messages, strict=True) == []
    originals = {b.raw.get("signature") for m in t.messages for b in m.blocks if isinstance(b, ThinkingBlock)}
    for m in reread.messages:
        for b in m.blocks:
            if isinstance(b, ThinkingBlock):
                assert b.raw.get("signature") in originals


# ------------------------------------------------------------------------------------------ properties

CONTENTS = [
    FILE,
    "\n".join(FILE.splitlines()[:20]),
    "alpha beta gamma " * 30,
    "12 passed " * 40,
    "error: boom",
]


@st.composite
def sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [{"role": "user", "content": "Task: work on the files"}]
    for k in range(draw(st.integers(2, 12))):
        kind = draw(st.sampled_from(["read", "write", "edit", "bash", "user", "image"]))
        path = draw(st.sampled_from(["a.py", "b.py"]))
        thinking = draw(st.one_of(st.none(), st.just(f"thought {k} " * 8)))
        cid = f"c{k}"
        if kind == "user":
            lines.append(
                {
                    "role": "user",
                    "content": [{"type": "text", "text": f"next {k}"}, {"type": "text", "text": REMINDER}],
                }
            )
            continue
        if kind == "image":
            lines.append({"role": "user", "content": [{"type": "text", "text": f"look {k}"}, image()]})
            lines.append({"role": "assistant", "content": f"seen {k}"})
            continue
        if kind == "read":
            inp: dict[str, Any] = {"file_path": path}
            name = "Read"
        elif kind == "write":
            inp, name = {"file_path": path, "content": "new text"}, "Write"
        elif kind == "edit":
            inp, name = {"file_path": path, "old_string": "x", "new_string": "y"}, "Edit"
        else:
            inp, name = {"command": draw(st.sampled_from(["pytest", "ls"]))}, "Bash"
        text = draw(st.sampled_from(CONTENTS)) if kind in ("read", "bash") else "ok"
        if draw(st.booleans()):
            text += "\n" + REMINDER
        lines.append(call(cid, name, inp, thinking))
        lines.append(result(cid, text))
    if draw(st.booleans()):
        lines.append({"role": "assistant", "content": "Done."})
    return lines


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=sessions(), keep_last=st.integers(0, 3))
def test_the_last_copy_of_anything_stays_and_outputs_stay_valid(
    lines: list[dict[str, Any]], keep_last: int
) -> None:
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    t = load(io.BytesIO(data))
    current = t
    for strategy in ("dedupe", "thinking", "images"):
        res = compact(load(io.BytesIO(current.to_bytes())), strategy, keep_last=keep_last)
        out = load(io.BytesIO(res.transcript.to_bytes()), input_format="chat")
        assert pairing_problems(out.messages, strict=True) == []
        assert Ledger(WordCounter()).total(out.messages) <= Ledger(WordCounter()).total(current.messages)
        current = out
    assert t.to_bytes() == data
    flat = "\n".join(m.text for m in current.messages)
    # Every injected block and every tool output still has a copy in the context (a read superseded by
    # a write has the write's call instead; one made out of date by an edit, the edit's).
    if REMINDER in "\n".join(m.text for m in t.messages):
        assert REMINDER in flat
    results = [b.text for m in current.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    calls = {b.id: b for m in t.messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    written = {
        b.input["file_path"]
        for m in current.messages
        for b in m.blocks
        if isinstance(b, ToolUseBlock) and b.name == "Write"
    }
    edited = {
        b.input["file_path"]
        for m in current.messages
        for b in m.blocks
        if isinstance(b, ToolUseBlock) and b.name in ("Edit", "MultiEdit")
    }
    for pos, m in enumerate(t.messages):
        for b in m.blocks:
            if isinstance(b, ToolResultBlock):
                body = b.text.replace(REMINDER, "").strip()
                path = calls[b.tool_use_id].input.get("file_path")
                # A whole-file read is superseded by a later whole-file read: the file as it is now.
                reread = any(
                    calls[r.tool_use_id].name == "Read"
                    and calls[r.tool_use_id].input.get("file_path") == path
                    for later in t.messages[pos + 1 :]
                    for r in later.blocks
                    if isinstance(r, ToolResultBlock)
                )
                kept = any(body in r for r in results) or path in written or path in edited
                assert kept or reread, f"lost: {body[:60]!r}"
    # Thinking: only removed, never changed; the last assistant turn keeps all of its own.
    before = [b.raw for m in t.messages for b in m.blocks if isinstance(b, ThinkingBlock)]
    after = [b.raw for m in current.messages for b in m.blocks if isinstance(b, ThinkingBlock)]
    assert all(raw in before for raw in after)
    last = [m for m in t.messages if m.role == "assistant"][-1:]
    for m in last:
        for b in m.blocks:
            if isinstance(b, ThinkingBlock):
                assert b.raw in after


# -------------------------------------------------------------------------------------------- analyze


def test_analyze_counts_thinking_as_its_own_kind_in_every_format() -> None:
    """A Claude Code response (and an Anthropic chat message) holds thinking beside text and calls; its
    thinking tokens are reported under ``thinking``, the rest under the message's kind."""
    t = chat(
        [
            {"role": "user", "content": "go"},
            call("a", "Bash", {"command": "ls"}, thinking="one two three four five"),
            result("a", "a.py"),
        ]
    )
    data = t.to_bytes()
    report = analyze(io.BytesIO(data), counter=WordCounter(), window=1000)
    assert report.by_kind["thinking"] == 5
    assert sum(report.by_kind.values()) == report.total_tokens
    log = CORPUS / "claude-code" / "entire-cli_manual-compact_v2.1.14.jsonl"
    if log.is_file():
        real = analyze(log, counter=WordCounter(), window=200_000)
        assert real.by_kind.get("thinking", 0) > 0
        assert sum(real.by_kind.values()) == real.total_tokens
