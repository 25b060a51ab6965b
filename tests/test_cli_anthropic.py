"""Issue 4's bar from the command line, against the fake API on 127.0.0.1: the server's summary lands
in a valid compacted transcript, and every failure ends with one line, the right exit code, the input
untouched, no output file, and an archive that holds only the content-addressed original."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import SAMPLES
from fake_anthropic import MESSAGES, FakeAnthropic, Scripted, default_summary, error_body

from ctxc.archive import Archive
from ctxc.cli import main
from ctxc.errors import ExitCode
from ctxc.formats import load
from ctxc.validate import pairing_problems

SAMPLE = SAMPLES / "claude-code.jsonl"


@pytest.fixture(autouse=True)
def _own_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Summaries are cached across runs by design: each test starts without any.
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> tuple[int, str]:
    args = [
        "compact",
        str(SAMPLE),
        "-s",
        "hierarchical",
        "--summarizer",
        "anthropic",
        "--target-tokens",
        "3000",
        "--max-retries",
        "1",
        "--timeout",
        "10",
        "--archive",
        str(tmp_path / "archive"),
        "-o",
        str(tmp_path / "out.jsonl"),
        "--report",
        str(tmp_path / "report.json"),
        *extra,
    ]
    with pytest.raises(SystemExit) as exc:
        main(args)
    code = exc.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().err


def test_summary_from_the_api_in_a_valid_transcript(
    anthropic_server: FakeAnthropic, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = run(capsys, tmp_path)
    assert code == 0, err
    out = load(tmp_path / "out.jsonl")
    assert pairing_problems(out.messages, strict=True) == []
    assert any("Summary by the fake API." in m.text for m in out.messages)
    report = orjson.loads((tmp_path / "report.json").read_bytes())
    assert report["run"]["summarizer"]["name"] == "anthropic"
    assert report["run"]["summarizer"]["calls"] >= 1
    assert "anthropic:" in err
    # Run again: the summary comes from the cache, the API sees no new message request.
    before = len(anthropic_server.message_requests)
    (tmp_path / "out.jsonl").unlink()
    assert run(capsys, tmp_path)[0] == 0
    assert len(anthropic_server.message_requests) == before


def test_dry_run_calls_nothing(
    anthropic_server: FakeAnthropic, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "compact",
                str(SAMPLE),
                "-s",
                "hierarchical",
                "--summarizer",
                "anthropic",
                "--target-tokens",
                "3000",
                "--dry-run",
            ]
        )
    assert exc.value.code == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["run"]["summarizer"]["calls"] >= 1
    assert doc["run"]["summarizer"]["estimated"] is True
    assert anthropic_server.message_requests == []


def _nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "out.jsonl").exists()
    assert not (tmp_path / "report.json").exists()
    assert Archive(tmp_path / "archive").manifest() == []
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith(".ctxc-tmp")]
    assert leftovers == []


@pytest.mark.parametrize(
    ("setup", "expected", "needle"),
    [
        ("missing key", ExitCode.AUTH, "ANTHROPIC_API_KEY"),
        ("rejected key", ExitCode.AUTH, "rejected"),
        ("unknown model", ExitCode.MODEL, "claude-no-such-model"),
        ("overloaded", ExitCode.SUMMARIZER, "529"),
        ("malformed", ExitCode.SUMMARIZER, ""),
        ("truncated twice", ExitCode.SUMMARIZER, "max_tokens"),
    ],
)
def test_failures(
    setup: str,
    expected: int,
    needle: str,
    anthropic_server: FakeAnthropic,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = SAMPLE.read_bytes()
    extra: list[str] = []
    if setup == "missing key":
        monkeypatch.delenv("ANTHROPIC_API_KEY")
    elif setup == "rejected key":
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
    elif setup == "unknown model":
        extra = ["--summary-model", "claude-no-such-model"]
    elif setup == "overloaded":
        anthropic_server.script(
            MESSAGES, *[Scripted(529, error_body("overloaded_error", "busy"), {"retry-after": "0"})] * 4
        )
    elif setup == "malformed":
        anthropic_server.script(MESSAGES, *[Scripted(200, "{not json")] * 4)
    else:
        body = {
            "id": "msg_x",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": "## Session intent\n- cut off"}],
            "stop_reason": "max_tokens",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10},
        }
        anthropic_server.script(MESSAGES, *[Scripted(200, body)] * 4)
    code, err = run(capsys, tmp_path, *extra)
    assert code == expected, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxc: error: ")
    assert needle in lines[0]
    assert "Traceback" not in err
    _nothing_written(tmp_path)
    assert SAMPLE.read_bytes() == original


def test_analyze_reports_claude_counts_against_o200k(
    anthropic_server: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(SAMPLES / "chat-openai.jsonl"), "--tokenizer", "anthropic", "--format", "json"])
    assert exc.value.code == 0
    doc = orjson.loads(capsys.readouterr().out)["files"][0]
    assert doc["tokenizer"] == "anthropic:claude-haiku-4-5"
    versus = doc["versus_o200k"]
    assert versus["tokens"] == doc["total_tokens"]
    assert versus["o200k_tokens"] > 0
    assert versus["ratio"] == pytest.approx(versus["tokens"] / versus["o200k_tokens"])
    assert anthropic_server.requests  # the counts came from the API, not from tiktoken


def test_hierarchical_summarizes_segments_concurrently_then_merges(
    anthropic_server: FakeAnthropic, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def slow(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.2)  # long enough for the segments' calls to overlap
        return default_summary(body)

    anthropic_server.responder = slow
    code, err = run(capsys, tmp_path, "--segment-tokens", "1500", "--concurrency", "2")
    assert code == 0, err
    requests = anthropic_server.message_requests
    assert len(requests) >= 3  # at least two segments and the merge
    assert 1 < anthropic_server.max_in_flight <= 2
    report = orjson.loads((tmp_path / "report.json").read_bytes())
    assert report["run"]["summarizer"]["calls"] == len(requests)
    assert any("Summary by the fake API." in m.text for m in load(tmp_path / "out.jsonl").messages)
