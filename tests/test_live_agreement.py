"""Every command measures the same live context of the same file, at the window of the model the log
records: analyze, check, sessions, compact (plan and batch), replay and remind agree (docs/live-context.md).
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import SAMPLES, corpus_params, run
from fake_anthropic import FakeAnthropic

import ctxc
from ctxc.agent import ContextManager
from ctxc.analysis import AnalyzeJob, analyze_file
from ctxc.compaction.files import _saving_worth
from ctxc.compaction.forecast import forecast
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.evaluate import EvalOptions, Source, run_eval
from ctxc.formats import load
from ctxc.replay import replay
from ctxc.tokens import make_counter

MAIN, SIDE = "claude-opus-4-6", "claude-haiku-4-5-20251001"  # windows of 1,000,000 and 200,000
BIG = "\n".join(f"log line {i}: module {i % 17} value {i * 7}" for i in range(400))


def _rec(
    rtype: str, uid: str, parent: str | None, n: int, side: bool = False, **extra: Any
) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": side,
        "userType": "external",
        "cwd": "/proj",
        "sessionId": "s-1",
        "version": "1.0.98",
        "type": rtype,
        "uuid": uid,
        "timestamp": f"2026-01-01T00:00:{n:02d}.000Z",
        **extra,
    }


def _user(
    uid: str, parent: str | None, n: int, content: Any, side: bool = False, **extra: Any
) -> dict[str, Any]:
    return _rec("user", uid, parent, n, side, message={"role": "user", "content": content}, **extra)


def _asst(
    uid: str, parent: str, n: int, content: list[Any], model: str, context: int, side: bool = False
) -> Any:
    usage = {"input_tokens": 5, "cache_read_input_tokens": context, "output_tokens": 20}
    message = {"id": f"m-{uid}", "role": "assistant", "model": model, "content": content, "usage": usage}
    return _rec("assistant", uid, parent, n, side, message=message)


def _log() -> bytes:
    """A main thread compacted once, then an inline subagent run on another model, written last, whose
    calls were larger than any of the main thread's."""
    call = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest"}}
    status = {"type": "tool_use", "id": "t9", "name": "Bash", "input": {"command": "git status"}}
    commit = {"type": "tool_use", "id": "t0", "name": "Bash", "input": {"command": "git commit -am fix"}}
    side_call = {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "grep -rn parse"}}
    records = [
        _user("u1", None, 1, "Fix the flaky parser test"),
        _asst("a1", "u1", 2, [call], MAIN, 1_000),
        _user("u2", "a1", 3, [{"type": "tool_result", "tool_use_id": "t1", "content": BIG}]),
        _asst("a2", "u2", 4, [{"type": "text", "text": "Fixed."}], MAIN, 150_000),
        _rec(
            "system",
            "b1",
            None,
            5,
            subtype="compact_boundary",
            content="Conversation compacted",
            logicalParentUuid="a2",
            compactMetadata={"trigger": "auto", "preTokens": 150_000},
        ),
        _user("s1", "b1", 6, "Summary: the parser test was fixed.", isCompactSummary=True),
        _user("u3", "s1", 7, "Now commit it."),
        _asst("a2b", "u3", 7, [status], MAIN, 8_000),
        _user("u3b", "a2b", 7, [{"type": "tool_result", "tool_use_id": "t9", "content": BIG}]),
        _asst("a3", "u3b", 8, [commit], MAIN, 12_000),
        _user("u4", "a3", 9, [{"type": "tool_result", "tool_use_id": "t0", "content": BIG}]),
        _asst("a4", "u4", 10, [{"type": "text", "text": "Committed as abc123."}], MAIN, 14_000),
        _user("x1", None, 9, "Find every caller of parse()", side=True),
        _asst("x2", "x1", 10, [side_call], SIDE, 190_000, side=True),
        _user("x3", "x2", 11, [{"type": "tool_result", "tool_use_id": "t2", "content": BIG}], side=True),
        _asst("x4", "x3", 12, [{"type": "text", "text": "40 callers."}], SIDE, 195_000, side=True),
    ]
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _rewind() -> bytes:
    """The same main thread, then a branch the user rewound (a large result on it), then the resumed one."""
    main = [r for r in map(orjson.loads, _log().splitlines()) if not r["isSidechain"]]
    call = {"type": "tool_use", "id": "t3", "name": "Bash", "input": {"command": "cat tok.py"}}
    records = [
        *main,
        _user("r1", "a4", 20, "Also rewrite the tokenizer"),
        _asst("r2", "r1", 21, [call], MAIN, 180_000),
        _user("r3", "r2", 22, [{"type": "tool_result", "tool_use_id": "t3", "content": BIG}]),
        _asst("r4", "r3", 23, [{"type": "text", "text": "Rewrote it."}], MAIN, 185_000),
        _user("v1", "a4", 24, "Instead, add a docstring to parse()"),
        _asst("v2", "v1", 25, [{"type": "text", "text": "Added."}], MAIN, 12_500),
    ]
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _edited() -> bytes:
    """The same main thread, then a branch answered by another model with larger calls (the file's last),
    then the user rewound and edited the prompt, not answered yet: the client resumes the main thread."""
    main = [r for r in map(orjson.loads, _log().splitlines()) if not r["isSidechain"]]
    records = [
        *main,
        _user("r1", "a4", 20, "Also rewrite the tokenizer"),
        _asst("r2", "r1", 21, [{"type": "text", "text": "Rewrote it."}], SIDE, 190_000),
        _user("v1", "a4", 24, "Instead, add a docstring to parse()"),
    ]
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


# Per log: its calls (every one billed), the resumed chain's last call and its largest since the log's
# own compaction (a4's), and its largest ever (a2's, before the compaction).
REWOUND = {"rewind": (_rewind, 8, 12_505), "edited": (_edited, 6, 14_005)}


@pytest.mark.parametrize("name", REWOUND)
def test_recorded_usage_measures_the_resumed_chain_not_a_rewound_branch(name: str, tmp_path: Path) -> None:
    build, calls, last = REWOUND[name]
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(build())
    recorded = ctxc.analyze(path, tokenizer="usage")
    assert (recorded.model, recorded.window) == (MAIN, 1_000_000)
    assert recorded.max_context == 14_005
    assert recorded.usage is not None
    assert (recorded.usage.last_context, recorded.usage.max_context) == (last, 150_005)
    # Billing happened on the branch too: its calls are in the calls, the tokens and the cost.
    assert recorded.usage.calls == calls
    assert recorded.total_tokens == sum(
        u.input + u.output + u.cache_read + u.cache_write for u in load(path).usage
    )
    counted = ctxc.analyze(path, use_cache=False)
    assert (counted.model, counted.window, counted.usage) == (MAIN, 1_000_000, recorded.usage)


def _session_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Claude Code home of one project (and an empty Codex one) for ``sessions``; the project folder."""
    home = tmp_path / "claude"
    project = home / "projects" / "-proj"
    project.mkdir(parents=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    return project


@pytest.mark.parametrize("name", REWOUND)
def test_analyze_check_and_sessions_agree_on_a_rewound_log(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _session_home(tmp_path, monkeypatch) / "0b5e1d4e-0000-4000-8000-000000000002.jsonl"
    path.write_bytes(REWOUND[name][0]())

    def doc(*args: str) -> Any:
        code, out, err = run(capsys, *args, "-f", "json", "-q")
        assert code == 0, err
        return orjson.loads(out)

    a = doc("analyze", str(path))["files"][0]
    u = doc("analyze", str(path), "--tokenizer", "usage")["files"][0]
    c = doc("check", str(path), "--max-usage", "0.9")["files"][0]
    cu = doc("check", str(path), "--tokenizer", "usage", "--max-usage", "0.9")["files"][0]
    (s,) = doc("sessions")["sessions"]
    assert {a["window"], u["window"], c["window"], cu["window"], s["window"]} == {1_000_000}
    assert (u["context_tokens"], cu["tokens"], cu["stage"]) == (14_005, 14_005, u["stage"])
    assert (a["context_tokens"], a["stage"]) == (c["tokens"], c["stage"])
    assert (s["tokens"], s["stage"]) == (a["total_tokens"], a["stage"])
    assert u["recorded_usage"] == a["recorded_usage"]
    assert s["cost_usd"] == a["recorded_usage"]["cost"]["usd"]


def test_replay_leaves_a_rewound_branch_out_of_the_context(tmp_path: Path) -> None:
    path = tmp_path / "rewind.jsonl"
    path.write_bytes(_rewind())
    a = ctxc.analyze(path, use_cache=False)
    assert a.branch_messages == 4
    r = replay(load(path), ContextManager())
    assert r.final_raw == r.final_tokens == a.total_tokens
    # The turns on the branch were sent with it; the one after the rewind was not.
    assert r.turns[-2].raw_tokens > r.turns[-1].raw_tokens


@pytest.fixture
def sidechain_log(tmp_path: Path) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_bytes(_log())
    return path


def test_an_inline_subagent_run_names_neither_the_model_nor_the_window(sidechain_log: Path) -> None:
    a = ctxc.analyze(sidechain_log, use_cache=False)
    assert (a.model, a.window, a.window_source) == (MAIN, 1_000_000, "log model")
    recorded = ctxc.analyze(sidechain_log, tokenizer="usage")
    assert (recorded.model, recorded.window) == (MAIN, 1_000_000)
    # The main thread's last call after its compaction, not the subagent's larger ones.
    assert recorded.max_context == 14_005
    assert recorded.usage is not None
    assert (recorded.usage.last_context, recorded.usage.calls) == (14_005, 7)


def test_an_inline_subagent_run_is_not_a_conversation_of_the_context(
    sidechain_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = ctxc.analyze(sidechain_log, use_cache=False)
    assert a.side_messages > 0
    assert a.conversations == 1  # the subagent's messages are reported apart, as not in context
    code, out, _ = run(capsys, "analyze", str(sidechain_log), "-f", "table")
    assert code == 0
    assert "conversations" not in out.split("\n")[0]


def test_check_with_recorded_usage_gates_on_the_main_thread(
    sidechain_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "check", str(sidechain_log), "--tokenizer", "usage", "--max-usage", "0.5", "-f", "json"
    )
    assert code == 0, out
    (row,) = orjson.loads(out)["files"]
    assert (row["tokens"], row["window"], row["stage"]) == (14_005, 1_000_000, 1)


@pytest.mark.parametrize("name", ["codex.jsonl", "claude-code.jsonl"])
def test_compact_replay_and_remind_take_the_window_the_log_records(name: str) -> None:
    path = SAMPLES / name
    window = ctxc.analyze(path).window
    t = load(path)
    assert compact_transcript(t, CompactOptions(target_ratio=0.5, allow_over=True)).window == window
    assert replay(t, ContextManager()).window == window
    assert replay(t, ContextManager(window=50_000)).window == 50_000  # a flag still wins


def _figures(capsys: pytest.CaptureFixture[str], path: Path, tmp_path: Path) -> dict[str, Any]:
    """The live context's size and window as each command prints it (JSON)."""

    def doc(*args: str) -> Any:
        code, out, err = run(capsys, *args)
        assert code in ((0, 6) if args[0] == "check" else (0,)), err  # 6: check found it over budget
        return orjson.loads(out)

    a = doc("analyze", str(path), "-f", "json", "-q")["files"][0]
    c = doc("check", str(path), "--max-usage", "0.99", "-f", "json", "-q")["files"][0]
    plan = doc("compact", str(path), "--dry-run", "--target-ratio", "0.5", "--allow-over", "-f", "json", "-q")
    out = tmp_path / "out"
    batch = doc(
        "compact", str(path), "--out-dir", str(out), "--target-ratio", "0.5", "--allow-over", "-f", "json"
    )
    r = doc("replay", str(path), "-f", "json", "-q")
    return {
        "total": {a["total_tokens"], a["live_context"]["tokens"], plan["run"]["tokens_before"]}
        | {batch["files"][0]["tokens_before"]},
        "context": {a["context_tokens"], c["tokens"]}
        | ({r["summary"]["final_without"]} if a["conversations"] == 1 else set()),
        "window": {a["window"], c["window"], plan["run"]["options"]["window"], r["window"]},
        "stage": {a["stage"], c["stage"]},
    }


@pytest.mark.parametrize(
    "name", ["codex.jsonl", "claude-code.jsonl", "chat-openai.jsonl", "dataset.jsonl", "sidechain", *REWOUND]
)
def test_every_command_reports_the_same_live_context(
    name: str, sidechain_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sidechain_log if name == "sidechain" else SAMPLES / name
    if name in REWOUND:
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(REWOUND[name][0]())
    figures = _figures(capsys, path, tmp_path)
    assert {k: len(v) for k, v in figures.items()} == dict.fromkeys(figures, 1), figures


@pytest.mark.parametrize("path", corpus_params())
def test_every_command_reports_the_same_live_context_of_every_corpus_file(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = _figures(capsys, path, tmp_path)
    assert {k: len(v) for k, v in figures.items()} == dict.fromkeys(figures, 1), figures


def test_sessions_lists_the_live_context_analyze_reports(
    sidechain_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _session_home(tmp_path, monkeypatch)
    shutil.copyfile(sidechain_log, project / "0b5e1d4e-0000-4000-8000-000000000001.jsonl")
    code, out, _ = run(capsys, "sessions", "-f", "json", "-q")
    assert code == 0
    (row,) = orjson.loads(out)["sessions"]
    a = ctxc.analyze(sidechain_log)
    assert (row["tokens"], row["window"], row["stage"], row["messages"]) == (
        a.total_tokens,
        1_000_000,
        a.stage,
        a.live_messages,
    )


def test_csv_says_which_rows_are_in_the_live_context(
    sidechain_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "analyze", str(sidechain_log), "-f", "csv", "-q")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    a = ctxc.analyze(sidechain_log)
    live = [r for r in rows if r["live"] == "true"]
    assert len(live) == a.live_messages < len(rows)
    assert sum(int(r["tokens"]) for r in live) == a.total_tokens


def test_the_saving_is_priced_at_the_main_threads_model(sidechain_log: Path) -> None:
    result = compact_transcript(load(sidechain_log), CompactOptions(target_tokens=2_000, allow_over=True))
    assert result.tokens_after < result.tokens_before
    assert _saving_worth(result, CompactOptions())["model"] == MAIN


def test_eval_measures_against_the_live_context_with_what_the_log_carries(tmp_path: Path) -> None:
    """A transcript's own size, eval's default window, is its live context: with the history a Codex
    ``compacted`` record carries, as compact's tokens_before counts it."""
    lines = (SAMPLES / "codex.jsonl").read_bytes().splitlines()
    records = [orjson.loads(x) for x in lines]
    cut = len(records) // 2
    carried = [r["payload"] for r in records[:cut] if r["type"] == "response_item"]
    compacted = {"timestamp": records[cut]["timestamp"], "type": "compacted"}
    compacted["payload"] = {"message": "", "replacement_history": carried}
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*records[:cut], compacted, *records[cut:]]))
    a = ctxc.analyze(path, use_cache=False)
    assert a.carried_tokens > 0
    report = run_eval(
        [Source(str(path), path.read_bytes())],
        EvalOptions(strategies=("fifo",), targets=(0.5,), needles=1),
        archive=tmp_path / "archive",
    )
    (case,) = report.cases
    assert case.tokens_before == case.window  # the needle is planted in the live context
    assert case.window > a.total_tokens


def test_the_forecast_is_of_the_live_context(sidechain_log: Path) -> None:
    """At a window whose first stage lies between the live context and the whole thread, compact has
    nothing to do, and the forecast plans nothing nor finds more than the live context holds."""
    a = ctxc.analyze(sidechain_log)
    whole = a.total_tokens + a.history_tokens  # the main thread's, in the file
    window = int((a.total_tokens + whole) / 2 / 0.6)
    assert a.total_tokens < 0.6 * window < whole
    stages = forecast(load(sidechain_log), window=window, counter=make_counter("o200k_base"))
    assert all(s.plan == 0 for s in stages)
    assert all(0 <= s.potential <= a.total_tokens for s in stages)
    result = compact_transcript(load(sidechain_log), CompactOptions(window=window))
    assert result.tokens_after == result.tokens_before == a.total_tokens


def test_the_forecast_plan_is_what_compact_removes(sidechain_log: Path) -> None:
    a = ctxc.analyze(sidechain_log)
    window = int(a.total_tokens / 0.7)  # past stage 2: compact removes something
    stages = forecast(load(sidechain_log), window=window, counter=make_counter("o200k_base"), keep_last=2)
    options = CompactOptions(window=window, keep_last=2, allow_over=True)
    result = compact_transcript(load(sidechain_log), options)
    assert result.tokens_before > result.tokens_after
    assert sum(s.plan for s in stages) == sum(x.saved for x in result.actions)


def test_the_context_manager_counts_from_the_providers_own_compaction() -> None:
    """An agent's message list holding the provider's compaction block: what precedes it is not sent,
    so it neither counts nor calls for compaction, as analyze of the same list says."""
    messages = [
        {"role": "user", "content": "build the parser " + "word " * 3000},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "now the writer"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "We built the parser."}]},
        {"role": "user", "content": "next"},
    ]
    live = ctxc.analyze(io.BytesIO(b"".join(orjson.dumps(m) + b"\n" for m in messages))).total_tokens
    manager = ContextManager(window=2_000)
    assert manager.count(messages) == manager.count(messages) == live < 100  # the second from the memo
    assert not manager.needs_compaction(messages)
    assert manager.compact(messages) == messages
    assert manager.last_compaction is not None
    assert manager.last_compaction.tokens_before == live


def test_the_claude_to_o200k_comparison_is_of_the_live_context(
    sidechain_log: Path, anthropic_server: FakeAnthropic
) -> None:
    a = analyze_file(AnalyzeJob(str(sidechain_log), tokenizer="anthropic", use_cache=False))
    assert a.versus_o200k is not None
    claude, o200k, _ = a.versus_o200k
    assert claude == a.total_tokens
    assert o200k == ctxc.analyze(sidechain_log).total_tokens
