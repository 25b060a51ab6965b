"""An error about an option names it as its caller spelled it: the keyword (``max_tokens=``) to a library
caller, the flag (``--max-tokens``) on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES, run

import ctxc
from ctxc.check import resolve_budget
from ctxc.compaction.files import CompactJob, compact_file
from ctxc.compaction.run import CompactOptions
from ctxc.errors import CtxcError, ExitCode, OverTargetError, UsageError, option_name, options_as_flags
from ctxc.reader import ReadOptions
from ctxc.replay import plot_format
from ctxc.search import search
from ctxc.usage_scan import scan_usage

CHAT = SAMPLES / "chat-openai.jsonl"
LINE = b'{"role":"user","content":"' + b"x" * 2000 + b'"}\n'


def messages(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Fix the parser bug."}]
    for i in range(turns):
        out.append({"role": "assistant", "content": f"Step {i}: " + "reading the parser " * 40})
        out.append({"role": "user", "content": f"Go on {i}."})
    return out


def says_keyword(exc: pytest.ExceptionInfo[CtxcError], keyword: str, flag: str) -> None:
    assert f"{keyword}=" in str(exc.value), str(exc.value)
    assert flag not in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    ("kwargs", "keyword", "flag"),
    [
        ({"pins": ["5-2"]}, "pins", "--pin"),
        ({"pins": [""]}, "pins", "--pin"),
        ({"pins": ["(unclosed"]}, "pins", "--pin"),
        ({"pins": [3]}, "pins", "--pin"),
        ({"pins": "10"}, "pins", "--pin"),
        ({"settings": {"nodot": "1"}}, "settings", "--set"),
        ({"settings": {"nosuch.option": "1"}}, "settings", "--set"),
    ],
)
def test_compact_messages_names_its_keywords(kwargs: dict[str, Any], keyword: str, flag: str) -> None:
    with pytest.raises(UsageError) as exc:
        ctxc.compact_messages(messages(20), max_tokens=200, strategy="fifo", token_counter="approx", **kwargs)
    says_keyword(exc, keyword, flag)
    assert exc.value.options == (keyword,)


def test_an_impossible_budget_names_allow_over() -> None:
    with pytest.raises(OverTargetError) as exc:
        ctxc.compact_messages(messages(20), max_tokens=5, strategy="fifo", token_counter="approx")
    says_keyword(exc, "allow_over", "--allow-over")
    assert "--keep-last" not in str(exc.value)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (CompactOptions(target_tokens=0), "target_tokens= must be positive"),
        (CompactOptions(target_ratio=2.0), "target_ratio= is a share of the window"),
        (
            CompactOptions(target_tokens=10, target_ratio=0.5),
            "give target_tokens= or target_ratio=, not both",
        ),
    ],
)
def test_compact_names_the_options_fields(options: CompactOptions, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        ctxc.compact(ctxc.load(CHAT), options)


def test_compact_file_names_the_jobs_fields() -> None:
    for field in ("in_place", "fork"):
        job = CompactJob(path="-", output="-", options=CompactOptions(), **{field: True})
        with pytest.raises(UsageError) as exc:
            compact_file(job)
        says_keyword(exc, field, "--" + field.replace("_", "-"))


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({}, "give exactly one budget: max_usage= R (a share of the window) or max_tokens= N"),
        ({"max_tokens": 0}, "max_tokens= must be a positive number of tokens up to 2**53, not 0"),
        ({"max_usage": 11.0}, "max_usage= is a share of the window such as 0.8, not 11.0"),
        (
            {"max_usage": 0.8, "warn_usage": -1.0},
            "warn_usage= is a share of the window such as 0.6, not -1.0",
        ),
    ],
)
def test_check_budget_names_its_keywords(kwargs: dict[str, Any], said: str) -> None:
    with pytest.raises(UsageError) as exc:
        resolve_budget(window=1000, **kwargs)
    assert str(exc.value) == said


def test_the_line_limit_names_read_options_field(tmp_path: Path) -> None:
    f = tmp_path / "long.jsonl"
    f.write_bytes(LINE)
    small = ReadOptions(max_line_bytes=100)
    for read in (lambda: ctxc.load(f, options=small), lambda: scan_usage(f, options=small)):
        with pytest.raises(ctxc.CtxcError) as exc:
            read()
        says_keyword(exc, "max_line_bytes", "--max-line-mb")
        assert str(exc.value).endswith("(raise it with max_line_bytes=)")


def test_search_names_limit(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        search("parser", limit=0)
    assert str(exc.value) == "limit= must be at least 1"


def test_plot_names_its_out_argument() -> None:
    with pytest.raises(UsageError) as exc:
        plot_format("replay.txt")
    assert str(exc.value) == "out= writes .svg or .png files, not '.txt'"


def test_the_command_line_names_the_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "check", str(CHAT), "--max-tokens", "0")
    assert (code, err) == (
        ExitCode.USAGE,
        "ctxc: error: --max-tokens must be a positive number of tokens up to 2**53, not 0\n",
    )
    code, _, err = run(capsys, "compact", str(CHAT), "--target-tokens", "10", "--target-ratio", "0.5")
    assert (code, err) == (ExitCode.USAGE, "ctxc: error: give --target-tokens or --target-ratio, not both\n")
    # The same error, raised in the library after the command line ran here, names the keyword again.
    with pytest.raises(UsageError, match=r"^give exactly one budget: max_usage= R"):
        resolve_budget(window=1000)


@pytest.mark.parametrize("start", ["fork", "forkserver"])
def test_a_batch_worker_names_the_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    # Per-file errors are written in the worker processes; a forkserver's workers inherit nothing.
    if start == "forkserver":
        monkeypatch.setattr("ctxc.batch.threading.active_count", lambda: 2)
    files = []
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_bytes(LINE)
        files.append(str(tmp_path / name))
    code, _, err = run(capsys, "analyze", *files, "--max-line-mb", "0.001", "--jobs", "2", "-f", "json")
    assert code == ExitCode.PARTIAL, err
    assert err.count("(raise it with --max-line-mb)") == 2, err
    assert "max_line_bytes" not in err


def test_spelling_rule_and_table() -> None:
    assert [option_name(n) for n in ("max_tokens", "summarizer_options.model")] == [
        "max_tokens=",
        "summarizer_options.model=",
    ]
    with options_as_flags():
        names = (
            "max_tokens",
            "max_line_bytes",
            "pins",
            "summarizer_options.model",
            "summarizer_options.timeout",
        )
        assert [option_name(n) for n in names] == [
            "--max-tokens",
            "--max-line-mb",
            "--pin",
            "--summary-model",
            "--timeout",
        ]
    assert option_name("max_tokens") == "max_tokens="
