"""Issue 20 item 6 through the real command line: a file that the named ``--input-format`` reads as
nothing is an error naming the format sniffing would pick, on every path that reads a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLES, run

from ctxc.errors import ExitCode

CODEX = str(SAMPLES / "codex.jsonl")
CLAUDE = str(SAMPLES / "claude-code.jsonl")


@pytest.mark.parametrize(
    ("args", "forced", "sniffed"),
    [
        (["analyze", CODEX, "--no-cache", "-f", "json"], "claude-code", "codex"),
        (["analyze", CODEX, "--tokenizer", "usage", "-f", "json"], "claude-code", "codex"),
        (["analyze", CLAUDE, "--tokenizer", "usage", "-f", "json"], "codex", "claude-code"),
        (["analyze", CODEX, "--no-cache", "-f", "json"], "pi", "codex"),
        (["validate", CLAUDE], "chat", "claude-code"),
        (["compact", CODEX, "-o", "{tmp}/out.jsonl", "--archive", "{tmp}/a"], "openhands", "codex"),
        (["convert", CODEX, "-o", "{tmp}/out.jsonl"], "dataset", "codex"),
        (["repair", CODEX, "-o", "{tmp}/out.jsonl", "--archive", "{tmp}/a"], "swe-agent", "codex"),
        (["check", CODEX, "--max-usage", "0.9", "--no-cache"], "claude-code", "codex"),
        (["replay", CODEX, "-f", "json"], "claude-code", "codex"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else v,
)
def test_a_forced_format_that_reads_nothing_names_the_sniffed_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], forced: str, sniffed: str
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, out, err = run(capsys, *argv, "--input-format", forced)
    assert code == ExitCode.FORMAT, err
    assert f"--input-format {forced} reads nothing in this file, which looks like {sniffed}" in err
    assert f"give --input-format {sniffed}" in err
    assert not (tmp_path / "out.jsonl").exists()
    if args[0] != "check":  # check's report names the file as failed on stdout
        assert out == ""


@pytest.mark.parametrize("name", ["codex.jsonl", "claude-code.jsonl", "dataset.jsonl", "chat-openai.jsonl"])
def test_the_right_forced_format_still_reads(capsys: pytest.CaptureFixture[str], name: str) -> None:
    from ctxc.formats import load

    fmt = load(SAMPLES / name).format
    code, _, err = run(
        capsys, "analyze", str(SAMPLES / name), "--no-cache", "-f", "json", "--input-format", fmt
    )
    assert code == 0, err


def test_a_file_no_format_knows_is_read_as_forced(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Forcing is how a user reads what sniffing cannot place: no error when no format claims the file.
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"hello": 1}\n{"world": 2}\n')
    code, _, err = run(capsys, "analyze", str(odd), "--no-cache", "-f", "json", "--input-format", "chat")
    assert code == 0, err
