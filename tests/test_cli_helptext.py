"""Issue 20 item 4 (and 10's help parts): the help shows what the source says. Every bracketed word of a
help string, a docstring or an epilog (``ctxc[embed]``, ``[[reminder]] tables``, ``/compact
[instructions]``) survives rich markup; usage lines name their arguments; ``compact``'s options come in
panels."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from conftest import run
from rich.errors import StyleSyntaxError
from rich.style import Style

from ctxc.cli import app

GROUP: Any = typer.main.get_command(app)
COMMANDS = sorted(GROUP.commands)
BRACKETED = re.compile(r"(?<!\\)\[([^\[\]]*)\]|\\\[([^\[\]]*)\]")


def help_at(
    columns: int, command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> str:
    """``ctxc COMMAND --help`` on a terminal ``columns`` wide (it must succeed)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    return out


def is_style(tag: str) -> bool:
    """Whether rich reads ``[tag]`` as markup on purpose (``[bold]``, ``[/bold]``, ``[/]``)."""
    if tag.startswith("/"):
        return True
    try:
        Style.parse(tag)
    except StyleSyntaxError:
        return False
    return bool(tag)


def literal_words(text: str) -> list[str]:
    """The whitespace-separated words of ``text`` holding a bracketed word that is not a style tag,
    as a reader should see them (markup escapes removed)."""
    words = []
    for word in text.split():
        tags = [a if a is not None and a != "" else b for a, b in BRACKETED.findall(word)]
        if any(not is_style(t) for t in tags) or "[]" in word:
            words.append(word.replace("\\[", "["))
    return words


def sources(command: Any) -> list[str]:
    texts = [command.help or "", command.epilog or ""]
    texts += [getattr(p, "help", None) or "" for p in command.params]
    return [t for t in texts if t]


def test_the_source_has_bracketed_words_to_check() -> None:
    # The test below is only as good as what it finds: these are the ones issue 20 names.
    found = {w for name in COMMANDS for t in sources(GROUP.commands[name]) for w in literal_words(t)}
    for needle in ("ctxc[embed]", "ctxc[plot]", "[[reminder]]", "[[section]]", "[instructions]"):
        assert any(needle in w for w in found), needle


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_every_bracketed_word_of_the_source(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = help_at(400, command, capsys, monkeypatch)  # wide enough that no word is cut
    shown = set(out.split())
    missing = [
        w
        for t in sources(GROUP.commands[command])
        for w in literal_words(t)
        if w not in shown and w not in out
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("restore", "ctxc restore [OPTIONS] REF"),
        ("analyze", "ctxc analyze [OPTIONS] [PATH]..."),
        ("repair", "ctxc repair [OPTIONS] PATH"),
        ("show", "ctxc show [OPTIONS] REF..."),
        ("search", "ctxc search [OPTIONS] [QUERY]"),
    ],
)
def test_usage_lines_name_their_arguments(
    command: str, usage: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = help_at(200, command, capsys, monkeypatch)
    assert f"Usage: {usage}" in " ".join(out.split())


def test_compact_options_come_in_panels(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = help_at(120, "compact", capsys, monkeypatch)
    panels = re.findall(r"╭─ (.+?) ─", out)
    assert panels == ["Arguments", "Options", "Input", "Target", "Strategy", "Output", "Batch", "Archive"]
    options_panel = out.split("╭─ Options ─", 1)[1].split("╰", 1)[0]
    assert re.findall(r"--[a-z-]+", options_panel) == ["--help"]  # every other option has its panel


def test_formats_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "formats", "--help")
    assert code == 0
    assert "ctxc formats" in out.split("Example", 1)[1]
    assert "--input-format" in out.split("Example", 1)[1]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_at_80_columns_cuts_no_word(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An option's help column is narrow beside a long type: a path in it was shown "docs/claude-code-….".
    out = help_at(80, command, capsys, monkeypatch)
    assert "…" not in out


def test_compacts_format_help_says_what_a_batch_prints_by_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # It said "table (default on a terminal)", which only a dry run of one file does: a batch on a
    # terminal prints no table unless --format asks (tests/test_batch.py runs batches without one).
    out = help_at(400, "compact", capsys, monkeypatch)
    line = next(line for line in out.splitlines() if "--format" in line)
    assert "a batch prints only its totals" in line
