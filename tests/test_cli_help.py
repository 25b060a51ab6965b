"""Every command has help with examples, the README documents it, and the batch options refuse bad input."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import typer
from conftest import ROOT, SAMPLES, run

from ctxc.cli import app, main
from ctxc.errors import ExitCode

COMMANDS = sorted(c.name or c.callback.__name__ for c in app.registered_commands if c.callback is not None)
# Command groups (``ctxc hooks install``): each subcommand is a command of its own.
SUBCOMMANDS = sorted(
    f"{g.name} {c.name or c.callback.__name__}"
    for g in app.registered_groups
    if g.typer_instance is not None
    for c in g.typer_instance.registered_commands
    if c.callback is not None
)


def test_the_commands_we_expect() -> None:
    assert {
        "analyze",
        "check",
        "compact",
        "convert",
        "formats",
        "models",
        "repair",
        "restore",
        "strategies",
        "validate",
        "remind",
        "compose",
        "replay",
        "search",
        "show",
        "eval",
    } <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS + SUBCOMMANDS)
def test_help_has_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command.split(), "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Example" in out
    assert f"ctxc {command}" in out
    assert [line for line in out.splitlines() if line.endswith(" ")] == []  # piped: rich's padding goes


@pytest.mark.parametrize(
    "command",
    ["search", "show", "restore", "repair", "sessions", "replay", "remind", "compose", "eval", "hooks"],
)
def test_each_example_stays_on_one_line_at_80_columns(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A command wrapped mid-way (`--format` / `json > replay.json`) breaks when copied.
    monkeypatch.setenv("COLUMNS", "80")
    typer_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    examples = [p.strip() for p in (typer_command.epilog or "").split("\n\n") if p.startswith("  ctxc")]
    assert examples
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    lines = [" ".join(line.split()) for line in out.splitlines()]
    for example in examples:
        assert " ".join(example.replace("\\[", "[").split()) in lines, example


@pytest.mark.parametrize("command", COMMANDS + sorted({s.split()[0] for s in SUBCOMMANDS}))
def test_readme_documents_every_command(command: str) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"ctxc {command}" in readme
    assert f"### `ctxc {command}" in readme


def test_version_fast_path(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxc import __main__ as entry

    monkeypatch.setattr("sys.argv", ["ctxc", "--version"])
    entry.main()  # answered by the entry point, before ctxc.cli and typer are imported
    assert capsys.readouterr().out.startswith("ctxc ")


def test_root_help_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "Exit codes" in out


def test_readme_sections_appear_once() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = [line for line in readme.splitlines() if line.startswith(("## ", "### "))]
    assert len(headings) == len(set(headings)), [h for h in headings if headings.count(h) > 1]
    assert "<!--" not in readme  # merge notes must not leak into the published README


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["convert", "{logs}"], ExitCode.USAGE, "several inputs need --out-dir"),
        (["convert", "{logs}", "--out-dir", "{tmp}/o", "-o", "x.jsonl"], ExitCode.USAGE, "--output is for"),
        (["analyze", "{logs}", "--jobs", "0"], ExitCode.USAGE, "--jobs"),
        (["validate"], ExitCode.USAGE, "give a transcript file"),
        (["analyze", "{logs}", "--glob", "*.nothing"], ExitCode.INPUT, "no transcripts (*.nothing)"),
    ],
)
def test_batch_options_refuse_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], code: int, needle: str
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("codex.jsonl", "chat-anthropic.jsonl"):
        shutil.copy(SAMPLES / name, logs / name)
    got, _, err = run(capsys, *(a.replace("{logs}", str(logs)).replace("{tmp}", str(tmp_path)) for a in args))
    assert got == code, err
    assert needle in err
    assert not (tmp_path / "o").exists()


def test_a_reader_that_goes_away_is_not_an_error(tmp_path: Path) -> None:
    # `ctxc analyze ... | head -c 100`: the rest of the output has nowhere to go, and that is fine.
    big = tmp_path / "many.jsonl"  # 2 MB of JSON out, far more than a pipe holds
    lines = (orjson.dumps({"role": "user", "content": f"m{i}"}) + b"\n" for i in range(10_000))
    big.write_bytes(b"".join(lines))
    cmd = [sys.executable, "-m", "ctxc", "analyze", str(big), "--format", "json", "--no-cache"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == ExitCode.OK
    assert err == ""
