"""``--summarizer command``: real commands (small Python scripts) reading the prompt on stdin."""

from __future__ import annotations

import io
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SAMPLES

from ctxc.archive_store import CITATION_RE
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.errors import ExitCode, SummarizerError, UsageError
from ctxc.formats import load
from ctxc.model import Message
from ctxc.summarize import SECTIONS, SummarizerOptions, SummaryRequest, get_summarizer
from ctxc.summarize.anthropic import SummaryCache
from ctxc.summarize.command import CommandSummarizer
from ctxc.summarize.prompt import build_prompt
from ctxc.tokens import get_tokenizer
from ctxc.validate import pairing_problems

TOK = get_tokenizer("o200k_base")
CITE = "ctxc archive 0123456789ab messages 1-19"
FAST = SummarizerOptions(max_retries=0, timeout=20.0)
MARKER = "Summary written by the test command."


def count(text: str) -> int:
    return TOK.count(text) if text else 0


@pytest.fixture(scope="module")
def messages() -> tuple[Message, ...]:
    return load(SAMPLES / "claude-code.jsonl").messages


def request_of(messages: tuple[Message, ...], **kw: object) -> SummaryRequest:
    base = SummaryRequest(messages=messages[1:20], citation=CITE, budget=800)
    return replace(base, **kw)  # type: ignore[arg-type]


def valid_summary(sections: tuple[str, ...] = SECTIONS, cite: str = CITE) -> str:
    body = "\n".join(f"## {s}\n- point about {s.lower()}" for s in sections)
    return f"{MARKER} The full original is archived at {cite}.\n\n{body}\n"


def script(tmp_path: Path, body: str, name: str = "summarize.py") -> str:
    """A command running a Python script that sees ``STATE`` (a folder for its notes) and ``run`` (which
    run of the command this is, from 1), with the prompt already read from stdin as ``prompt``."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    path = tmp_path / name
    path.write_text(
        "import os, sys, time\n"
        "from pathlib import Path\n"
        f"STATE = Path({str(state)!r})\n"
        "runs = STATE / 'runs'\n"
        "run = len(runs.read_text().splitlines()) + 1 if runs.exists() else 1\n"
        "runs.write_text('x\\n' * run)\n"
        "prompt = sys.stdin.read()\n"
        "(STATE / f'prompt{run}.txt').write_text(prompt)\n"
        "(STATE / f'env{run}.txt').write_text(os.environ.get('CTXC_SUMMARY_BUDGET', '') + '|' "
        "+ os.environ.get('CTXC_SUMMARY_CITATION', ''))\n" + body,
        encoding="utf-8",
    )
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def runs(tmp_path: Path) -> int:
    f = tmp_path / "state" / "runs"
    return len(f.read_text().splitlines()) if f.exists() else 0


def prompt_seen(tmp_path: Path, run: int = 1) -> str:
    return (tmp_path / "state" / f"prompt{run}.txt").read_text(encoding="utf-8")


def make(tmp_path: Path, command: str, **kw: object) -> CommandSummarizer:
    options = replace(FAST, command=command, **kw)  # type: ignore[arg-type]
    return CommandSummarizer(options, cache=SummaryCache(tmp_path / "summaries.sqlite3"))


def printing(text: str) -> str:
    return f"sys.stdout.write({text!r})\n"


# --------------------------------------------------------------------------------------------- success


def test_the_prompt_goes_to_stdin_and_the_summary_comes_from_stdout(
    tmp_path: Path, messages: tuple[Message, ...]
) -> None:
    cmd = script(tmp_path, printing(valid_summary()))
    s = make(tmp_path, cmd)
    request = request_of(messages, instructions="focus on the failing tests", previous="EARLIER-SUMMARY-TEXT")
    text = s.summarize(request, count)
    assert text == valid_summary()
    prompt = prompt_seen(tmp_path)
    assert prompt == build_prompt(request).text  # exactly the shared prompt, system and user parts
    for section in SECTIONS:
        assert f"## {section}" in prompt
    assert CITE in prompt
    assert "focus on the failing tests" in prompt
    assert "EARLIER-SUMMARY-TEXT" in prompt
    assert (tmp_path / "state" / "env1.txt").read_text() == f"800|{CITE}"
    usage = s.usage()
    assert usage["calls"] == 1
    assert usage["runs"] == 1
    assert usage["input_tokens"] == count(prompt)
    assert usage["output_tokens"] == count(text)
    assert usage["estimated"] is True


def test_registered_by_name_and_the_command_is_required() -> None:
    s = get_summarizer("command", SummarizerOptions(command="cat"))
    assert isinstance(s, CommandSummarizer)
    with pytest.raises(UsageError, match=r"summarizer= command needs summarizer_options\.command=") as info:
        get_summarizer("command", SummarizerOptions())
    assert info.value.exit_code == ExitCode.USAGE
    with pytest.raises(UsageError):
        get_summarizer("command", SummarizerOptions(command="   "))


def test_a_fenced_answer_is_unwrapped_and_a_missing_citation_added(
    tmp_path: Path, messages: tuple[Message, ...]
) -> None:
    no_cite = "\n".join(f"## {s}\n- item" for s in SECTIONS)
    cmd = script(tmp_path, printing(f"```markdown\n{no_cite}\n```\n"))
    text = make(tmp_path, cmd).summarize(request_of(messages), count)
    assert "```" not in text
    first = text.splitlines()[0]
    assert CITE in first
    assert CITATION_RE.search(first)
    assert text.endswith(no_cite + "\n")


def test_essential_requests_need_only_their_sections(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    request = request_of(messages, essential=True)
    cmd = script(tmp_path, printing(valid_summary(request.sections)))
    assert make(tmp_path, cmd).summarize(request, count) == valid_summary(request.sections)


# -------------------------------------------------------------------------------------------- failures


def test_non_zero_exit_is_an_error_quoting_stderr(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    cmd = script(tmp_path, "sys.stderr.write('\\nboom: model not loaded\\nmore detail\\n')\nsys.exit(3)\n")
    with pytest.raises(SummarizerError, match="exit status 3: boom: model not loaded") as info:
        make(tmp_path, cmd).summarize(request_of(messages), count)
    assert info.value.exit_code == ExitCode.SUMMARIZER
    assert "more detail" not in str(info.value)
    assert runs(tmp_path) == 1


def test_a_failed_run_is_retried_max_retries_times(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    cmd = script(tmp_path, "if run == 1:\n    sys.exit(1)\n" + printing(valid_summary()))
    assert make(tmp_path, cmd, max_retries=1).summarize(request_of(messages), count) == valid_summary()
    assert runs(tmp_path) == 2
    failing = script(tmp_path, "sys.exit(2)\n", name="failing.py")
    with pytest.raises(SummarizerError, match=r"exit status 2 .*after 1 retry"):
        make(tmp_path, failing, max_retries=1).summarize(request_of(messages), count)


def test_a_command_past_its_timeout_is_killed(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    # A pipeline: killing only the shell would leave the sleeper holding stdout open.
    cmd = script(tmp_path, "time.sleep(30)\n") + " | cat"
    start = time.monotonic()
    with pytest.raises(SummarizerError, match=r"did not finish within 0.5s") as info:
        make(tmp_path, cmd, timeout=0.5).summarize(request_of(messages), count)
    assert time.monotonic() - start < 10
    assert info.value.exit_code == ExitCode.SUMMARIZER


def test_empty_output_is_asked_again_then_an_error(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    cmd = script(tmp_path, printing("  \n\n"))
    with pytest.raises(SummarizerError, match="came back empty, also when asked again"):
        make(tmp_path, cmd).summarize(request_of(messages), count)
    assert runs(tmp_path) == 2
    assert "Your previous answer was empty" in prompt_seen(tmp_path, 2)


def test_missing_sections_are_asked_again_once(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    partial = valid_summary(SECTIONS[:-1])
    cmd = script(tmp_path, f"sys.stdout.write({partial!r} if run == 1 else {valid_summary()!r})\n")
    assert make(tmp_path, cmd).summarize(request_of(messages), count) == valid_summary()
    assert runs(tmp_path) == 2
    assert "lacked the headings ## Next steps" in prompt_seen(tmp_path, 2)


def test_missing_sections_twice_is_an_error(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    cmd = script(tmp_path, printing(valid_summary(SECTIONS[:2])))
    with pytest.raises(SummarizerError, match=r"lacks the section\(s\) Artifacts and files touched, Errors"):
        make(tmp_path, cmd).summarize(request_of(messages), count)
    assert runs(tmp_path) == 2


def test_an_answer_over_budget_is_asked_again_shorter(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    long = valid_summary() + "- filler words " * 300 + "\n"
    cmd = script(tmp_path, f"sys.stdout.write({long!r} if run == 1 else {valid_summary()!r})\n")
    assert make(tmp_path, cmd).summarize(request_of(messages, budget=200), count) == valid_summary()
    assert "the limit is 200" in prompt_seen(tmp_path, 2)


# ---------------------------------------------------------------------------------- cache and dry run


def test_the_cache_skips_a_second_run(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    cmd = script(tmp_path, printing(valid_summary()))
    request = request_of(messages)
    assert make(tmp_path, cmd).summarize(request, count) == valid_summary()
    again = make(tmp_path, cmd)
    assert again.summarize(request, count) == valid_summary()
    assert runs(tmp_path) == 1
    assert again.usage()["cache_hits"] == 1
    assert again.usage()["calls"] == 0
    # Another prompt, another command, or --no-cache: the command runs.
    make(tmp_path, cmd).summarize(replace(request, instructions="other focus"), count)
    assert runs(tmp_path) == 2
    make(tmp_path, cmd + " --same-script-other-command").summarize(request, count)
    assert runs(tmp_path) == 3
    make(tmp_path, cmd, use_cache=False).summarize(request, count)
    assert runs(tmp_path) == 4


def test_dry_run_never_starts_the_command(tmp_path: Path, messages: tuple[Message, ...]) -> None:
    cmd = script(tmp_path, printing(valid_summary()))
    s = make(tmp_path, cmd, dry_run=True)
    request = request_of(messages)
    text = s.summarize(request, count)
    assert runs(tmp_path) == 0
    assert text.startswith(CITE) or CITE in text.splitlines()[0]  # the extractive stand-in
    assert s.usage()["calls"] == 1
    assert s.usage()["input_tokens"] == count(build_prompt(request).text)


# ------------------------------------------------------------------------------------------ end to end


@pytest.mark.parametrize("strategy", ["hierarchical", "recursive"])
def test_compact_with_the_command_summarizer(tmp_path: Path, strategy: str) -> None:
    # The command answers with the sections the prompt asks for, citing what the prompt cites.
    body = (
        "import re\n"
        "cite = re.search(r'ctxc archive [0-9a-f]{12} messages \\d+(?:-\\d+)?', prompt).group(0)\n"
        "heads = re.findall(r'^## (.+)$', prompt, re.M)\n"
        "seen = []\n"
        "[seen.append(h) for h in heads if h not in seen]\n"
        f"print({MARKER!r} + ' Archived at ' + cite + '.')\n"
        "for h in seen:\n"
        "    print(); print('## ' + h); print('- noted')\n"
    )
    cmd = script(tmp_path, body)
    transcript = load(SAMPLES / "claude-code.jsonl")
    options = CompactOptions(
        strategy=strategy,
        target_tokens=3000,
        summarizer="command",
        summarizer_options=replace(FAST, command=cmd, use_cache=False),
    )
    result = compact_transcript(transcript, options)
    assert runs(tmp_path) >= 1
    assert any(a.kind == "summarize" for a in result.actions)
    # The result is the written file read back, so the summary is found by its text.
    summaries = [m for m in result.transcript.messages if MARKER in m.text]
    assert len(summaries) == 1
    assert summaries[0].role == "user"
    assert CITATION_RE.search(summaries[0].text)
    back = load(io.BytesIO(result.transcript.to_bytes()))
    assert back.format == "claude-code"
    assert pairing_problems(back.messages, strict=True) == []
    assert any(MARKER in m.text for m in back.messages)
    assert result.tokens_after <= 3000
