"""``ctxc check``: verdicts, exit codes, the JSON envelope, and GitHub workflow commands with GitHub's
own escaping (actions/toolkit ``escapeData``/``escapeProperty``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from conftest import SAMPLES, run

import ctxc
from ctxc.check import (
    Budget,
    CheckReport,
    FileCheck,
    check_paths,
    escape_data,
    escape_property,
    render_github,
    resolve_budget,
    workflow_command,
)
from ctxc.errors import ExitCode, UsageError

CLAUDE = str(SAMPLES / "claude-code.jsonl")  # 12,577 tokens (o200k_base)


def tokens_of(path: str) -> int:
    return ctxc.analyze(path).max_context


# ------------------------------------------------------------------------------------------- escaping


def test_escaping_follows_the_actions_toolkit() -> None:
    assert escape_data("50% done\r\nnext: a, b") == "50%25 done%0D%0Anext: a, b"
    assert escape_property("50% done\r\nnext: a, b") == "50%25 done%0D%0Anext%3A a%2C b"
    assert escape_data("%0A") == "%250A"  # percent first: an escape already in the text stays literal


def test_workflow_command_shape() -> None:
    line = workflow_command(
        "error", "over: 5%\nbadly", file="logs/a,b:c.jsonl", line=12, title="t: x", col=None
    )
    assert line == "::error file=logs/a%2Cb%3Ac.jsonl,line=12,title=t%3A x::over: 5%25%0Abadly"
    assert workflow_command("notice", "hi") == "::notice::hi"


# -------------------------------------------------------------------------------------------- library


def test_budget_resolution() -> None:
    b = resolve_budget(max_usage=0.8, window=20_000)
    assert (b.limit, b.warn_at, b.window) == (16_000, 12_000, 20_000)
    b = resolve_budget(max_tokens=5000, model="claude-opus-4-5", warn_usage=0.01)
    assert (b.limit, b.warn_at, b.window, b.model) == (5000, 2000, 200_000, "claude-opus-4-5")
    # Without --model or --window each log is measured against its own window (a Codex log's 272,000):
    # the summary names no default window for a token budget.
    assert resolve_budget(max_tokens=5000).describe() == "5,000 tokens"
    for kwargs in ({}, {"max_usage": 0.5, "max_tokens": 10}, {"max_usage": -1.0}, {"max_tokens": 0}):
        with pytest.raises(UsageError):
            resolve_budget(**kwargs)  # type: ignore[arg-type]


def test_verdicts_over_near_ok_and_the_line_where_the_budget_was_crossed(tmp_path: Path) -> None:
    total = tokens_of(CLAUDE)
    over = check_paths([CLAUDE], resolve_budget(max_tokens=total - 1000, window=200_000)).files[0]
    assert over.status == "over"
    assert over.over_by == 1000
    analysis = ctxc.analyze(CLAUDE)
    first = next(s for s in analysis.messages if s.cumulative > total - 1000)
    assert over.line == first.line
    near = check_paths([CLAUDE], resolve_budget(max_tokens=total + 10, warn_usage=0.5, window=total + 100))
    assert near.files[0].status == "near"
    assert near.exit_code == 0
    ok = check_paths([CLAUDE], resolve_budget(max_usage=0.9, window=200_000))
    assert ok.files[0].status == "ok"
    assert ok.files[0].line is None


def test_usage_tokenizer_checks_recorded_context() -> None:
    scan_max = ctxc.analyze(CLAUDE, tokenizer="usage").max_context
    report = check_paths([CLAUDE], resolve_budget(max_tokens=scan_max - 1, window=200_000), tokenizer="usage")
    f = report.files[0]
    assert (f.status, f.tokens, f.over_by) == ("over", scan_max, 1)
    assert f.line is not None


def test_exit_codes() -> None:
    b = Budget(limit=10, warn_at=5, window=100, model=None)
    ok = FileCheck("a", "ok", tokens=1)
    over = FileCheck("b", "over", tokens=20, over_by=10)
    bad = FileCheck("c", "error", error="x", exit_code=int(ExitCode.FORMAT))
    assert CheckReport(b, "o200k_base", (ok,)).exit_code == 0
    assert CheckReport(b, "o200k_base", (ok, over)).exit_code == ExitCode.OVER_TARGET
    assert CheckReport(b, "o200k_base", (bad,)).exit_code == ExitCode.FORMAT
    assert CheckReport(b, "o200k_base", (ok, over, bad)).exit_code == ExitCode.PARTIAL


# ------------------------------------------------------------------------------------------------ CLI


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """A folder with a small log, a larger one, and a broken one."""
    folder = tmp_path / "logs"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(CLAUDE, folder / "big.jsonl")
    (folder / "sub" / "small.jsonl").write_text(
        '{"role": "user", "content": "Please fix the failing test in billing."}\n'
        '{"role": "assistant", "content": "Done: the rounding now uses Decimal."}\n'
    )
    (folder / "broken.jsonl").write_text('{"role": "user", "content": "unterminated\n')
    return folder


def test_cli_table(capsys: pytest.CaptureFixture[str], logs: Path) -> None:
    big = tokens_of(str(logs / "big.jsonl"))
    code, out, _ = run(capsys, "check", str(logs), "--max-tokens", str(big - 1), "--window", str(big * 2))
    assert code == ExitCode.PARTIAL  # an unreadable file wins over a budget failure
    rows = out.splitlines()
    assert rows[0].startswith("OVER ")
    assert "big.jsonl" in rows[0]
    assert "1 (0.0%) over" in rows[0]
    assert rows[1].startswith("ERROR")
    assert "broken.jsonl" in rows[1]
    assert "not valid JSON" in rows[1]
    assert rows[2].startswith("ok ")
    assert "small.jsonl" in rows[2]
    assert rows[3].startswith("3 files: 1 over, 0 near, 1 ok, 1 unreadable; budget")


def test_cli_json_envelope(capsys: pytest.CaptureFixture[str], logs: Path) -> None:
    (logs / "broken.jsonl").unlink()
    code, out, _ = run(capsys, "check", str(logs), "--max-usage", "0.06", "-f", "json")  # 12,000 tokens
    doc = orjson.loads(out)
    assert code == ExitCode.OVER_TARGET == doc["exit_code"]
    assert doc["schema"] == "ctxc.check/2"
    assert doc["budget"]["limit"] == 12_000
    assert doc["totals"] == {"files": 2, "over": 1, "near": 0, "ok": 1, "error": 0}
    by_name = {Path(f["path"]).name: f for f in doc["files"]}
    assert by_name["big.jsonl"]["over_by"] == by_name["big.jsonl"]["tokens"] - 12_000
    code, out, _ = run(capsys, "check", str(logs), "--max-usage", "0.9", "-f", "json")
    assert code == 0
    assert orjson.loads(out)["totals"]["ok"] == 2


def test_cli_github_annotations(capsys: pytest.CaptureFixture[str], logs: Path) -> None:
    big = tokens_of(str(logs / "big.jsonl"))
    small = tokens_of(str(logs / "sub" / "small.jsonl"))
    window = big * 2
    args = ["check", str(logs), "--window", str(window), "-f", "github"]
    # big is over; small sits between the warning level and the budget: near
    code, out, _ = run(capsys, *args, "--max-tokens", str(big - 1), "--warn-usage", str((small - 1) / window))
    lines = out.splitlines()
    assert code == ExitCode.PARTIAL
    assert lines[0].startswith(f"::error file={logs / 'big.jsonl'},line=")
    assert ",title=ctxc check%3A over the token budget::" in lines[0]
    assert lines[1].startswith(f"::error file={logs / 'broken.jsonl'},line=1,title=ctxc check%3A unreadable")
    assert lines[2].startswith(f"::warning file={logs / 'sub' / 'small.jsonl'},line=")
    assert lines[3].startswith("::notice title=ctxc check::3 files: 1 over, 1 near, 0 ok, 1 unreadable")
    assert all("\n" not in ln and "%" not in ln.replace("%25", "").replace("%3A", "") for ln in lines)


def test_github_output_escapes_hostile_paths(tmp_path: Path) -> None:
    f = tmp_path / "a,b:c%d.jsonl"
    shutil.copy(CLAUDE, f)
    report = check_paths([str(f)], resolve_budget(max_tokens=10, window=1000))
    line = render_github(report).splitlines()[0]
    assert f"file={escape_property(str(f))}," in line
    assert "a%2Cb%3Ac%25d.jsonl" in line


def test_cli_one_unreadable_file_keeps_its_own_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f = tmp_path / "binary.jsonl"
    f.write_bytes(b"\x00\x01\x02")
    code, out, _ = run(capsys, "check", str(f), "--max-usage", "0.5")
    assert code == ExitCode.INPUT
    assert out.startswith("ERROR ")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_fail_fast_exits_with_the_unreadable_files_own_code(
    capsys: pytest.CaptureFixture[str], logs: Path, jobs: str
) -> None:
    # As analyze, validate and compact do: not 12 because a file checked before it (big.jsonl) was fine.
    code, out, _ = run(capsys, "check", str(logs), "--max-usage", "0.9", "--fail-fast", "--jobs", jobs)
    assert code == ExitCode.INPUT
    assert "ERROR" in out


def test_cli_rejects_bad_budgets(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "check", CLAUDE)
    assert code == ExitCode.USAGE
    assert "exactly one budget" in err
    code, _, err = run(capsys, "check", CLAUDE, "--max-usage", "0.5", "--tokenizer", "nope")
    assert code == ExitCode.USAGE
    assert "unknown tokenizer" in err


def test_cli_usage_tokenizer(capsys: pytest.CaptureFixture[str], logs: Path) -> None:
    code, out, _ = run(capsys, "check", str(logs), "--max-usage", "0.9", "--tokenizer", "usage", "-f", "json")
    doc = orjson.loads(out)
    statuses = {Path(f["path"]).name: f["status"] for f in doc["files"]}
    # the chat log records no usage: an error for this check, like the broken file
    assert statuses == {"big.jsonl": "ok", "broken.jsonl": "error", "small.jsonl": "error"}
    assert "no recorded usage" in next(f["error"] for f in doc["files"] if f["path"].endswith("small.jsonl"))
    assert code == ExitCode.PARTIAL


def test_jobs_and_glob_give_the_same_verdicts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(SAMPLES, logs, ignore=shutil.ignore_patterns("*.py", "*.md"))
    (logs / "notes.txt").write_text('{"role": "user", "content": "a chat line in a .txt file"}\n')
    base = ["check", str(logs), "--max-usage", "0.5", "--window", "20000", "--format", "json", "-q"]
    one = run(capsys, *base, "--jobs", "1")
    two = run(capsys, *base, "--jobs", "2")
    assert one[0] == two[0] == ExitCode.OVER_TARGET
    assert orjson.loads(one[1])["files"] == orjson.loads(two[1])["files"]
    code, out, _ = run(capsys, *base, "--glob", "*.txt")
    assert code == 0
    assert [f["path"] for f in orjson.loads(out)["files"]] == [str(logs / "notes.txt")]
