"""Every command has help with examples, and the README documents it."""

from __future__ import annotations

import pytest
from conftest import ROOT

from ctxc.cli import app, main

COMMANDS = sorted(c.name or c.callback.__name__ for c in app.registered_commands if c.callback is not None)


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


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Example" in out
    assert f"ctxc {command}" in out


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_documents_every_command(command: str) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"ctxc {command}" in readme
    assert f"### `ctxc {command}" in readme


def test_version_fast_path(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--version"])
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
