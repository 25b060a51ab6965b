"""The priority prompt composer: order, budget, required sections, override, TOML, and ``ctxc compose``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import run

from ctxc.composer import (
    BACKGROUND,
    EXAMPLES,
    OUTPUT_FORMAT,
    PRIORITIES,
    ROLE,
    SAFETY,
    TASK,
    TOOLS,
    PromptComposer,
    Section,
    compose,
)
from ctxc.errors import ExitCode, OverTargetError, UsageError


class WordCounter:
    """One token per whitespace-separated word: budgets in tests read as word counts."""

    name = "words"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


WORDS = WordCounter()


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


SECTIONS = (
    Section("background", words(10, "bg"), BACKGROUND),
    Section("safety", words(5, "safe"), SAFETY, required=True),
    Section("examples", words(20, "ex"), EXAMPLES),
    Section("role", words(5, "role"), ROLE),
    Section("format", words(5, "fmt"), OUTPUT_FORMAT, required=True),
)


def test_standard_priorities() -> None:
    assert (SAFETY, ROLE, TASK, TOOLS, OUTPUT_FORMAT, EXAMPLES, BACKGROUND) == (100, 90, 80, 70, 60, 40, 20)
    assert PRIORITIES["output_format"] == 60


def test_highest_priority_first_without_a_budget() -> None:
    result = compose(SECTIONS, counter=WORDS)
    assert [o.section.id for o in result.sections] == ["safety", "role", "format", "examples", "background"]
    assert result.prompt.startswith("safe0")
    assert result.prompt.index("role0") < result.prompt.index("fmt0") < result.prompt.index("ex0")
    assert not result.dropped
    assert result.tokens == 45


def test_lowest_priority_optional_sections_drop_first() -> None:
    # 15 required + role 5 = 20; examples (20) does not fit in 30, and neither does anything after it.
    result = compose(SECTIONS, 30, counter=WORDS)
    assert [o.section.id for o in result.kept] == ["safety", "role", "format"]
    assert [o.section.id for o in result.dropped] == ["examples", "background"]
    assert result.tokens <= 30
    # With fill, the smaller background section takes the room examples could not use.
    filled = compose(SECTIONS, 30, counter=WORDS, fill=True)
    assert [o.section.id for o in filled.kept] == ["safety", "role", "format", "background"]
    assert filled.tokens <= 30


def test_required_sections_are_never_dropped() -> None:
    result = compose(SECTIONS, 14, counter=WORDS)  # role (5) no longer fits beside the required 10
    assert [o.section.id for o in result.kept] == ["safety", "format"]
    with pytest.raises(OverTargetError, match=r"required sections \(safety, format\) alone are 10 tokens"):
        compose(SECTIONS, 9, counter=WORDS)


def test_override_base_replaces_sections() -> None:
    composer = PromptComposer(SECTIONS).with_base("You only review code.")
    result = composer.compose(100, counter=WORDS)
    assert result.prompt == "You only review code."
    assert result.base
    assert not result.kept
    assert all(o.reason == "replaced by the override prompt" for o in result.sections)
    with pytest.raises(OverTargetError):
        composer.compose(2, counter=WORDS)


def test_add_and_remove_return_new_composers() -> None:
    base = PromptComposer(SECTIONS[:2])
    bigger = base.add(SECTIONS[3])
    assert len(base.sections) == 2
    assert [s.id for s in bigger.remove("background").sections] == ["safety", "role"]
    with pytest.raises(UsageError, match="used twice"):
        bigger.add(SECTIONS[3])


def test_the_real_tokenizer_keeps_the_budget_exactly() -> None:
    sections = [
        Section(f"s{i}", f"Rule {i}: " + "do the thing carefully. " * (i + 1), 90 - i) for i in range(8)
    ]
    for budget in (30, 60, 120, 250):
        result = compose(sections, budget)
        assert result.tokens <= budget
        kept = [o.section.id for o in result.kept]
        assert kept == [f"s{i}" for i in range(len(kept))]  # a prefix by priority


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('[[section]]\nid = "a"\ncontent = "x"\npriority = 101\n', "between 0 and 100"),
        ('[[section]]\nid = "a"\ncontent = "x"\npriority = "urgent"\n', "unknown priority name"),
        ('[[section]]\nid = "a"\n', "exactly one of content and file"),
        ('[[section]]\nid = "a"\ncontent = "x"\nweight = 3\n', "unknown keys"),
        ('[[section]]\nid = "a"\ncontent = "x"\nrequired = "yes"\n', "true or false"),
        ("title = 'x'\n", "unknown top-level keys"),
        ("", "no [[section]]"),
    ],
)
def test_bad_prompt_files(body: str, needle: str) -> None:
    with pytest.raises(UsageError) as exc:
        PromptComposer.parse(body, source="p.toml")
    assert needle in str(exc.value)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Section(id=5, content="x"),  # type: ignore[arg-type]
        lambda: Section(id="a", content=None),  # type: ignore[arg-type]
        lambda: Section(id="a", content="x", required="no"),  # type: ignore[arg-type]
        lambda: PromptComposer(({"id": "a", "content": "x"},)),  # type: ignore[arg-type]
        lambda: PromptComposer((Section(id="a", content="x"),), base=5),  # type: ignore[arg-type]
        lambda: PromptComposer((Section(id="a", content="x"),), separator=None),  # type: ignore[arg-type]
    ],
)
def test_sections_and_composers_built_in_code_are_checked_as_toml_is(build: Any) -> None:
    # Each was a TypeError, KeyError or AttributeError at compose, or (required="no") silently required.
    with pytest.raises(UsageError):
        build().compose(100)


def test_toml_with_names_files_and_separator(tmp_path: Path) -> None:
    (tmp_path / "examples.md").write_text("Example one.\nExample two.\n", encoding="utf-8")
    f = tmp_path / "prompt.toml"
    f.write_text(
        'separator = "\\n---\\n"\n'
        '[[section]]\nid = "examples"\npriority = "examples"\nfile = "examples.md"\n'
        '[[section]]\nid = "safety"\npriority = "safety"\nrequired = true\ncontent = "Be safe."\n',
        encoding="utf-8",
    )
    composer = PromptComposer.load(f)
    assert [s.priority for s in composer.ordered()] == [100, 40]
    assert composer.compose().prompt == "Be safe.\n---\nExample one.\nExample two."


def test_a_section_file_that_cannot_be_read_is_one_line_naming_both_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f = tmp_path / "prompt.toml"
    f.write_text('[[section]]\nid = "ex"\nfile = "missing.md"\n', encoding="utf-8")
    code, _, err = run(capsys, "compose", str(f))
    assert code == ExitCode.INPUT
    assert err == f"ctxc: error: {f}: section 'ex': no such file {tmp_path / 'missing.md'}\n"
    (tmp_path / "missing.md").write_bytes(b"caf\xe9")
    code, _, err = run(capsys, "compose", str(f))
    assert code == ExitCode.INPUT
    assert err == f"ctxc: error: {f}: section 'ex': {tmp_path / 'missing.md'} is not UTF-8 text (byte 3)\n"


@pytest.fixture
def prompt_file(tmp_path: Path) -> Path:
    f = tmp_path / "prompt.toml"
    f.write_text(
        '[[section]]\nid = "safety"\npriority = "safety"\nrequired = true\n'
        'content = "Never modify files outside the repository."\n'
        '[[section]]\nid = "role"\npriority = "role"\ncontent = "You are a careful Python engineer."\n'
        '[[section]]\nid = "examples"\npriority = "examples"\n'
        f'content = "{"Run the test, read the traceback, fix the smallest thing. " * 10}"\n',
        encoding="utf-8",
    )
    return f


def test_compose_cli_prompt_on_stdout_table_on_stderr(
    capsys: pytest.CaptureFixture[str], prompt_file: Path
) -> None:
    code, out, err = run(capsys, "compose", str(prompt_file), "--budget", "30")
    assert code == 0
    assert out == "Never modify files outside the repository.\n\nYou are a careful Python engineer.\n"
    assert "examples" in err
    assert "dropped" in err
    assert "2 section(s) kept, 1 dropped" in err


def test_compose_cli_json(capsys: pytest.CaptureFixture[str], prompt_file: Path) -> None:
    code, out, _ = run(capsys, "compose", str(prompt_file), "--budget", "30", "--format", "json", "-q")
    assert code == 0
    doc = orjson.loads(out)
    assert doc["schema"] == "ctxc.compose/1"
    assert doc["tokens"] <= 30
    assert [(s["id"], s["kept"]) for s in doc["sections"]] == [
        ("safety", True),
        ("role", True),
        ("examples", False),
    ]


def test_compose_cli_required_over_budget_exit_6(
    capsys: pytest.CaptureFixture[str], prompt_file: Path
) -> None:
    code, out, err = run(capsys, "compose", str(prompt_file), "--budget", "3")
    assert code == ExitCode.OVER_TARGET
    assert out == ""
    assert "required sections (safety) alone are" in err
    assert "Traceback" not in err


def test_compose_cli_base_override(capsys: pytest.CaptureFixture[str], prompt_file: Path) -> None:
    code, out, _ = run(capsys, "compose", str(prompt_file), "--base", "Only review.", "-q")
    assert code == 0
    assert out == "Only review.\n"
