"""Issue 20 items 5 and 9 through the real command line: each command accepts exactly the ``--format``s
it renders (a wrong one is a one-line usage error), and a reader that goes away (``| head -1``) is
exit 0 with nothing on stderr, for every command and format."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import ROOT, SAMPLES, run

from ctxc.errors import ExitCode

CODEX = str(SAMPLES / "codex.jsonl")
RULES = str(ROOT / "examples" / "reminders.toml")
PROMPT = str(ROOT / "examples" / "prompt.toml")


def ctxc(args: list[str], *, stdout: int, env: dict[str, str]) -> tuple[int, str]:
    """``python -m ctxc ARGS`` with its stdout on the descriptor given: exit code and stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "ctxc", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stderr.decode()


@pytest.fixture(scope="module")
def archived(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    """An environment whose archive holds the codex sample (so search, show and restore have work),
    and the compacted file."""
    tmp = tmp_path_factory.mktemp("gone")
    env = {**os.environ, "CTXC_ARCHIVE": str(tmp / "archive"), "PYTHONPATH": str(ROOT)}
    small = tmp / "small.jsonl"
    code, err = ctxc(
        ["compact", CODEX, "--target-ratio", "0.05", "--window", "20000", "-o", str(small)],
        stdout=subprocess.DEVNULL,
        env=env,
    )
    assert code == 0, err
    return env, str(small)


# Every command, and for each every --format it has (its default when it has none).
GONE_CASES = [
    ["--help"],
    ["analyze", "--help"],
    *(["analyze", CODEX, "-f", f, "--messages"] for f in ("table", "json", "csv")),
    ["convert", CODEX],
    ["compact", CODEX, "-q"],
    *(["compact", CODEX, "--dry-run", "-f", f] for f in ("table", "json")),
    *(["compact", CODEX, "--out-dir", "{tmp}/out", "-f", f, "-q"] for f in ("table", "json")),
    ["strategies", "--options"],
    ["restore", "{small}"],
    *(["validate", CODEX, "-f", f] for f in ("table", "json")),
    ["repair", CODEX, "--archive", "{tmp}/a2"],
    ["formats"],
    *(["models", "-f", f] for f in ("table", "json")),
    *(["search", "the", "-f", f] for f in ("table", "json")),
    *(["show", "{id}:0-5", "-f", f] for f in ("table", "text", "json", "raw")),
    *(
        ["eval", "--generated", "1", "--strategies", "fifo", "--targets", "0.5", "-f", f]
        for f in ("table", "json")
    ),
    *(["check", CODEX, "--max-usage", "0.9", "-f", f] for f in ("table", "json", "github")),
    *(["remind", CODEX, "--rules", RULES, "-f", f] for f in ("table", "json")),
    *(["compose", PROMPT, "-q", "-f", f] for f in ("text", "json")),
    *(["replay", CODEX, "--window", "20000", "--turns", "-f", f] for f in ("table", "json")),
]


@pytest.mark.parametrize("args", GONE_CASES, ids=" ".join)
def test_a_reader_gone_before_the_first_byte_is_exit_0_and_silent(
    archived: tuple[dict[str, str], str], tmp_path: Path, args: list[str]
) -> None:
    env, small = archived
    archive_id = ""
    if "{id}" in " ".join(args):
        manifest = Path(env["CTXC_ARCHIVE"]) / "manifest.jsonl"
        archive_id = orjson.loads(manifest.read_bytes().splitlines()[0])["archive_id"][:12]
    argv = [
        a.replace("{tmp}", str(tmp_path)).replace("{small}", small).replace("{id}", archive_id) for a in args
    ]
    # The pipe's reading end is closed before ctxc starts: its very first write finds no reader.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        code, err = ctxc(argv, stdout=write_end, env=env)
    finally:
        os.close(write_end)
    assert (code, err) == (ExitCode.OK, "")


@pytest.mark.parametrize(
    "args",
    [
        ["validate", CODEX, "-f", "csv"],
        ["models", "-f", "csv"],
        ["check", CODEX, "-f", "csv"],
        ["compact", CODEX, "-f", "csv"],
        ["search", "x", "-f", "csv"],
        ["show", "x", "-f", "csv"],
        ["eval", "-f", "csv"],
        ["remind", CODEX, "--rules", RULES, "-f", "csv"],
        ["compose", PROMPT, "-f", "table"],
        ["replay", CODEX, "-f", "csv"],
    ],
    ids=" ".join,
)
def test_a_format_a_command_does_not_render_is_a_one_line_usage_error(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, out, err = run(capsys, *args)
    assert code == ExitCode.USAGE
    assert out == ""
    assert err.startswith("ctxc: error: ")
    assert len(err.splitlines()) == 1, err
    assert f"'{args[-1]}' is not one of" in err
    assert f"ctxc {args[0]} --help" in err


def test_compact_of_one_file_has_no_report_to_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_file = tmp_path / "small.jsonl"
    code, _, err = run(capsys, "compact", CODEX, "-f", "json", "-o", str(out_file))
    assert code == ExitCode.USAGE
    assert err == "ctxc: error: --format is for a report: give it with --out-dir, --in-place or --dry-run\n"
    assert not out_file.exists()


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_dry_run_renders_the_format_asked_for_even_piped(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    code, out, _ = run(capsys, "compact", CODEX, "--dry-run", "--window", "20000", "-f", fmt)
    assert code == 0
    if fmt == "json":
        assert orjson.loads(out)["schema"].startswith("ctxc.compact-plan")
    else:
        assert out.startswith("dry run: ")


def test_every_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["analyze", "--bogus"], ["nope"], ["analyze", CODEX, "--top", "x"], ["restore"]):
        code, _, err = run(capsys, *args)
        assert code == ExitCode.USAGE
        assert len(err.splitlines()) == 1, err
        assert err.startswith("ctxc: error: "), err


def test_no_arguments_still_shows_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert code == ExitCode.USAGE
    assert "Usage: ctxc" in out + err


# Every command that says anything on stderr besides errors, with what makes it talk.
QUIET_CASES = [
    ["analyze", "{logs}", "-f", "json"],
    ["convert", "{logs}", "--out-dir", "{tmp}/conv"],
    ["compact", CODEX, "-o", "{tmp}/small.jsonl"],
    ["validate", "{logs}", "-f", "json"],
    ["repair", CODEX, "-o", "{tmp}/fixed.jsonl"],
    ["search", "the", "--reindex", "-f", "json"],
    ["eval", "--generated", "1", "--strategies", "fifo", "--targets", "0.5", "-f", "json"],
    ["check", "{logs}", "--max-usage", "0.9", "-f", "json"],
    ["compose", PROMPT],
    ["replay", CODEX, "--window", "20000", "-f", "json"],
]


@pytest.mark.parametrize("args", QUIET_CASES, ids=lambda a: a[0])
def test_every_command_that_talks_on_stderr_has_quiet(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("codex.jsonl", "chat-anthropic.jsonl"):
        shutil.copy(SAMPLES / name, logs / name)
    argv = [a.replace("{logs}", str(logs)).replace("{tmp}", str(tmp_path)) for a in args]
    code, _, err = run(capsys, *argv, "-q")
    assert code == 0, err
    assert err == ""


@pytest.mark.parametrize(("command", "status"), [("real(['strategies'])", 0), ("real(['nope'])", 2)])
def test_the_early_exit_runs_the_exit_handlers_of_the_run_first(command: str, status: int) -> None:
    """The process ends without the interpreter's teardown (``__main__._end_now``), but only after every
    exit handler registered while ctxc ran, and with the status the command gave."""
    script = (
        "import atexit, os, sys, ctxc.cli, ctxc.__main__ as entry\n"
        "real = ctxc.cli.main\n"
        "def command(args):\n"
        "    atexit.register(lambda: os.write(1, b'handler ran\\n'))\n"
        f"    {command}\n"
        "ctxc.cli.main = command\n"
        "sys.argv = ['ctxc', 'x']\n"
        "entry.run()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, cwd=ROOT, timeout=120, check=False
    )
    assert proc.returncode == status
    assert proc.stdout.endswith(b"handler ran\n")
