"""A demanding user's odd command lines: file names with newlines, stdin named twice, ``-`` where it
cannot go, an output folder that is a file, rules and prompts saved with a BOM."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import SAMPLES, run

from ctxc.errors import ExitCode

CHAT = SAMPLES / "chat-openai.jsonl"
#: A file name a terminal must not be handed raw: a newline, a tab and an ESC.
ODD = "a\nb\tc\x1b[31md.jsonl"
SHOWN = "a\\x0ab\\x09c\\x1b[31md.jsonl"


@pytest.fixture
def odd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXC_ARCHIVE", str(tmp_path / "archive"))
    shutil.copy(CHAT, tmp_path / ODD)
    (tmp_path / "e\nmpty.jsonl").write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", ODD, "-f", "table"),
        ("validate", ODD),
        ("check", ODD, "--max-tokens", "10"),
        ("compact", ODD, "-o", "out.jsonl"),
        ("compact", ODD, "--dry-run", "-f", "table"),
        ("compact", ".", "--out-dir", "out", "-f", "table"),
        ("repair", ODD, "-o", "out.jsonl"),
        ("replay", ODD, "-f", "table"),
        ("analyze", "e\nmpty.jsonl"),  # an error naming the file
    ],
    ids=lambda a: "-".join(x for x in a if x.isalpha()),
)
def test_a_file_name_stays_on_its_line(
    capsys: pytest.CaptureFixture[str], odd: Path, args: tuple[str, ...]
) -> None:
    _, out, err = run(capsys, *args)
    text = out + err
    assert SHOWN in text or "e\\x0ampty.jsonl" in text, text
    assert "\t" not in text, text
    for line in text.splitlines():  # each part of a name is on the line that begins it
        assert "[31md.jsonl" not in line or SHOWN in line, f"a name split its line: {text!r}"
        assert "mpty.jsonl" not in line or "e\\x0ampty.jsonl" in line, f"a name split its line: {text!r}"


@pytest.mark.parametrize(
    "command", [("analyze", "-f", "json"), ("validate",), ("check", "--max-tokens", "10")]
)
def test_stdin_named_twice_is_read_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(CHAT.read_bytes())))
    code, _, err = run(capsys, command[0], "-", "-", *command[1:])
    assert code in (ExitCode.OK, ExitCode.OVER_TARGET), err  # not 12 with "-: empty file"
    assert "empty file" not in err


@pytest.mark.parametrize("command", [("compact", "-s", "fifo"), ("convert", "--to", "chat-anthropic")])
def test_out_dir_must_be_a_directory(
    capsys: pytest.CaptureFixture[str], odd: Path, command: tuple[str, ...]
) -> None:
    code, _, err = run(capsys, command[0], str(CHAT), "--out-dir", "-", *command[1:])
    assert code == ExitCode.USAGE, err
    assert not (odd / "-").exists()  # no folder named "-" made
    (odd / "taken").write_text("a file\n")
    code, _, err = run(capsys, command[0], str(CHAT), "--out-dir", "taken", *command[1:])
    assert code == ExitCode.OUTPUT, err
    assert err == "ctxc: error: taken: --out-dir is not a directory\n"
    # A file in the way of the mirrored tree: that file fails with exit 7's reason, not an internal error.
    (odd / "tree" / "sub").mkdir(parents=True)
    shutil.copy(CHAT, odd / "tree" / "sub" / "x.jsonl")
    (odd / "out").mkdir()
    (odd / "out" / "sub").write_text("a file\n")
    code, _, err = run(capsys, command[0], "tree", "--out-dir", "out", *command[1:])
    assert code == ExitCode.OUTPUT, err  # one file: its own code
    assert "cannot create the folder out/sub" in err
    assert "internal error" not in err


def test_restore_reads_a_compacted_file_from_stdin_or_a_pipe(
    capsys: pytest.CaptureFixture[str], odd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(
        capsys, "compact", str(CHAT), "-s", "fifo", "--target-ratio", "0.3", "-o", "small.jsonl"
    )
    assert code == 0, err
    small = (odd / "small.jsonl").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(small)))
    code, _, err = run(capsys, "restore", "-", "-o", "from-stdin.jsonl")
    assert code == 0, err
    assert (odd / "from-stdin.jsonl").read_bytes() == CHAT.read_bytes()
    os.mkfifo(odd / "pipe")
    writer = threading.Thread(target=(odd / "pipe").write_bytes, args=(small,), daemon=True)
    writer.start()
    code, _, err = run(capsys, "restore", "pipe", "-o", "from-pipe.jsonl")
    writer.join(timeout=60)
    assert code == 0, err
    assert (odd / "from-pipe.jsonl").read_bytes() == CHAT.read_bytes()
    (odd / "folder").mkdir()
    code, _, err = run(capsys, "restore", "folder")
    assert code == ExitCode.INPUT
    assert "folder: is a directory" in err  # not "no such file"


def test_a_report_on_stdout_never_shares_it(capsys: pytest.CaptureFixture[str], odd: Path) -> None:
    code, out, err = run(capsys, "compact", str(CHAT), "--report", "-", "-o", "-")
    assert code == ExitCode.USAGE, err
    assert out == ""
    code, _, err = run(capsys, "compact", str(CHAT), "--report", "-", "--dry-run", "-f", "json")
    assert code == ExitCode.USAGE, err
    code, out, err = run(capsys, "compact", str(CHAT), "--report", "-", "-o", "small.jsonl")
    assert code == 0, err
    assert json.loads(out)["schema"] == "ctxc.compact/1"  # alone on stdout, it parses


RULES = '[[reminder]]\nid = "r1"\nmessage = "Run the tests."\ntoken_threshold = 100\n'
PROMPT = '[[section]]\nid = "a"\ncontent = "You review code."\npriority = 1\n'


@pytest.mark.parametrize(
    ("name", "text", "command"),
    [
        ("rules.toml", RULES, ("remind", str(CHAT), "--rules", "{}", "-f", "json")),
        ("prompt.toml", PROMPT, ("compose", "{}", "--budget", "100", "-f", "json")),
        (
            "rules.toml",
            "[[rule]]\nname = 'x'\nregex = 'x'\nimportance = 'critical'\n",
            (
                "compact",
                str(CHAT),
                "--dry-run",
                "-s",
                "selective",
                "--set",
                "selective.rules={}",
                "-f",
                "json",
            ),
        ),
    ],
    ids=["remind", "compose", "selective"],
)
def test_toml_files_saved_with_a_bom_are_read(
    capsys: pytest.CaptureFixture[str], odd: Path, name: str, text: str, command: tuple[str, ...]
) -> None:
    (odd / name).write_bytes(b"\xef\xbb\xbf" + text.encode())  # as Notepad saves UTF-8
    code, out, err = run(capsys, *(a.replace("{}", name) for a in command))
    assert code == 0, err
    assert json.loads(out)["schema"].startswith("ctxc.")


def test_toml_inputs_say_what_is_wrong(capsys: pytest.CaptureFixture[str], odd: Path) -> None:
    code, _, err = run(capsys, "compose", "-", "--budget", "100")
    assert (code, err) == (ExitCode.USAGE, "ctxc: error: give a prompt file, not - (stdin)\n")
    code, _, err = run(capsys, "remind", "-", "--rules", "-")
    assert (code, err) == (ExitCode.USAGE, "ctxc: error: give a reminder rules file, not - (stdin)\n")
    (odd / "folder").mkdir()
    code, _, err = run(capsys, "compose", "folder", "--budget", "100")
    assert (code, err) == (ExitCode.INPUT, "ctxc: error: folder: is a directory, not a prompt file\n")


def test_hooks_usage_names_its_argument_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hooks", "install", "--help")
    assert code == 0
    assert "Usage: ctxc hooks install [OPTIONS] AGENT" in out  # was {agent}:<claude-code>
    code, _, err = run(capsys, "hooks", "install")
    assert code == ExitCode.USAGE
    assert err == (
        "ctxc: error: Missing argument 'AGENT'. Choose from: claude-code (see 'ctxc hooks install --help')\n"
    )


@pytest.mark.parametrize("command", ["analyze", "validate", "replay", "eval", "repair", "convert"])
def test_a_missing_file_is_said_alike_by_every_command(
    capsys: pytest.CaptureFixture[str], odd: Path, command: str
) -> None:
    code, _, err = run(capsys, command, "nope.jsonl")
    assert (code, err) == (ExitCode.INPUT, "ctxc: error: nope.jsonl: no such file\n")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["--help"], ["analyze", "-h"], ["hooks", "--help"], ["models"]])
def test_help_on_a_full_disk_is_exit_7(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "ctxc", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    assert proc.returncode == ExitCode.OUTPUT, proc.stderr
    assert proc.stderr == b"ctxc: error: stdout: cannot write: No space left on device\n"


def test_hooks_run_with_stdin_closed_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", None)
    code, _, err = run(capsys, "hooks", "run")
    assert code == 1  # never 2, which would stop Claude Code's compaction
    assert err == "ctxc: hooks run: stdin is closed; give a file, or pipe one in\n"


def test_a_session_project_with_a_newline_stays_on_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    project = tmp_path / "projects" / "p"
    project.mkdir(parents=True)
    text = (SAMPLES / "claude-code.jsonl").read_text()
    (project / "68138cc8-ffd2-4577-9120-9a555bb4d510.jsonl").write_text(
        text.replace('"cwd":"/home/jiwoo/src/minishop"', '"cwd":"/src/mini\\nshop\\u001b[2J"')
    )
    code, out, err = run(capsys, "sessions", "-f", "table")
    assert code == 0, err
    assert out.splitlines()[0].strip() == "/src/mini\\x0ashop\\x1b[2J"


def test_a_composed_prompt_on_a_terminal_shows_its_escapes(
    capsys: pytest.CaptureFixture[str], odd: Path
) -> None:
    from test_cli_small import on_a_terminal

    (odd / "p.toml").write_text(
        '[[section]]\nid = "a"\ncontent = "hi \\u001b]0;TITLE\\u0007 there"\npriority = 1\n'
    )
    env = {**os.environ, "PYTHONPATH": str(SAMPLES.parent), "NO_COLOR": "1"}
    code, shown, err = on_a_terminal(["compose", str(odd / "p.toml"), "--budget", "100", "-q"], env)
    assert code == 0, err
    assert b"\x1b]" not in shown
    assert b"hi \\x1b]0;TITLE\\x07 there" in shown
    code, out, err = run(capsys, "compose", "p.toml", "--budget", "100", "-q")  # a pipe: byte for byte
    assert (code, out) == (0, "hi \x1b]0;TITLE\x07 there\n"), err


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", str(CHAT), "--max-line-mb", "nan"),
        ("validate", str(CHAT), "--max-line-mb", "inf"),
        ("compact", str(CHAT), "-o", "out.jsonl", "--timeout", "nan"),
        ("eval", str(CHAT), "--timeout", "inf"),
    ],
    ids=lambda a: f"{a[0]}-{a[-1]}",
)
def test_nan_and_inf_are_usage_errors(
    capsys: pytest.CaptureFixture[str], odd: Path, args: tuple[str, ...]
) -> None:
    code, _, err = run(capsys, *args)
    assert code == ExitCode.USAGE, err  # was an internal error (int(nan)) once a line or a call was measured
    assert "is not a finite number" in err


BIG = str(10**24)


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", str(CHAT), "--window", BIG, "-f", "json"),
        ("compact", str(CHAT), "--target-tokens", BIG, "-o", "out.jsonl"),
        ("check", str(CHAT), "--max-tokens", BIG, "-f", "json"),
        ("compose", "p.toml", "--budget", BIG, "-f", "json"),
        ("eval", str(CHAT), "--window", BIG, "-f", "json"),
        ("eval", str(CHAT), "--window", "-5", "-f", "json"),
    ],
    ids=lambda a: f"{a[0]}-{a[2]}",
)
def test_token_counts_past_what_json_carries_are_usage_errors(
    capsys: pytest.CaptureFixture[str], odd: Path, args: tuple[str, ...]
) -> None:
    (odd / "p.toml").write_text('[[section]]\nid = "a"\ncontent = "hi"\npriority = 1\n')
    code, _, err = run(capsys, *args)
    assert code == ExitCode.USAGE, err  # was an internal error: the JSON report could not hold the number
    assert "up to 2**53" in err


def test_a_since_before_year_one_is_no_internal_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sessions", "--since", "0001-01-01", "-f", "json")
    assert code in (ExitCode.OK, ExitCode.USAGE), err  # whether local midnight of year 1 exists depends on TZ
    assert "internal error" not in err


@pytest.mark.parametrize(
    ("pin", "said"), [("5-2", "a range runs from low to high (2-5)"), ("", "--pin is empty")]
)
def test_a_pin_that_would_pin_nothing_or_everything_is_refused(
    capsys: pytest.CaptureFixture[str], odd: Path, pin: str, said: str
) -> None:
    code, _, err = run(capsys, "compact", str(CHAT), "--pin", pin, "-o", "out.jsonl")
    assert code == ExitCode.USAGE, err
    assert said in err
    assert not (odd / "out.jsonl").exists()


def test_plot_to_stdout_is_a_clear_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "replay", str(CHAT), "--plot", "-")
    assert (code, err) == (ExitCode.USAGE, "ctxc: error: --plot writes a .svg or .png file, not - (stdout)\n")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("compact", str(CHAT), "-o", "out.jsonl", "--archive", "-"), "the archive is a folder, not -"),
        (("search", "redis", "--archive", "-"), "the archive is a folder, not -"),
        (
            ("compact", str(CHAT), "-o", "out.jsonl", "-s", "selective", "--set", "selective.rules=-"),
            "give an importance rules file, not - (stdin)",
        ),
    ],
    ids=["compact-archive", "search-archive", "selective-rules"],
)
def test_dash_for_a_folder_or_a_settings_file_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], odd: Path, args: tuple[str, ...], said: str
) -> None:
    code, _, err = run(capsys, *args)
    assert code == ExitCode.USAGE, err
    assert said in err
    assert not (odd / "-").exists()  # compact --archive - made an archive folder named "-"


def test_an_unusable_cache_is_reported_once_per_kind(
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    odd: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("ctxc.system._warned", set())
    (odd / "cache").write_text("a file where the cache folder should be\n")
    monkeypatch.setenv("CTXC_CACHE_DIR", str(odd / "cache"))
    (odd / "logs").mkdir()
    for n in range(4):
        shutil.copy(SAMPLES / "codex.jsonl", odd / "logs" / f"{n}.jsonl")
        with (odd / "logs" / f"{n}.jsonl").open("a") as f:
            f.write(f'{{"n": {n}}}\n')  # four different files: four cache misses
    code, _, err = run(capsys, "analyze", "logs", "-f", "json", "--jobs", "1")
    assert code == 0, err
    said = [r.getMessage() for r in caplog.records if "cache" in r.getMessage()]
    assert said, "the unusable cache was not reported"
    assert all(m.startswith("ctxc: warning: ") for m in said), said  # "token cache at" had no prefix
    kinds = [m.split(":")[2] for m in said]
    assert len(kinds) == len(set(kinds)), said  # each kind once, not once per file


@pytest.mark.parametrize("command", [("compact", "-s", "fifo"), ("convert", "--to", "chat-anthropic")])
def test_a_batch_of_one_file_exits_with_that_files_code(
    capsys: pytest.CaptureFixture[str], odd: Path, command: tuple[str, ...]
) -> None:
    (odd / "one").mkdir()
    (odd / "one" / "bad.jsonl").write_bytes(b'{"role": "user", "content": "caf\xe9"}\n')
    code, _, err = run(capsys, command[0], "one", "--out-dir", "out", *command[1:])
    assert code == ExitCode.INPUT, err  # the README's table: a single file keeps its own code, not 12
    shutil.copy(CHAT, odd / "one" / "good.jsonl")
    code, _, err = run(capsys, command[0], "one", "--out-dir", "out2", *command[1:])
    assert code == ExitCode.PARTIAL, err


def test_a_batch_of_one_says_one_file(capsys: pytest.CaptureFixture[str], odd: Path) -> None:
    code, _, err = run(capsys, "compact", str(CHAT), "--out-dir", "out", "-s", "fifo")
    assert code == 0, err
    assert err.startswith("ctxc: 1 file: ")  # not "1 files"


@pytest.mark.parametrize(
    ("settings", "code"),
    [
        ('{"hooks": []}', ExitCode.INPUT),
        ('{"hooks": {"PreCompact": "x"}}', ExitCode.INPUT),
        ('{"hooks": {"PreCompact": [5, {"hooks": 3}]}}', ExitCode.OK),  # odd groups kept as they are
    ],
)
def test_hooks_install_over_odd_settings_is_no_internal_error(
    capsys: pytest.CaptureFixture[str], odd: Path, settings: str, code: int
) -> None:
    (odd / ".claude").mkdir()
    path = odd / ".claude" / "settings.json"
    path.write_text(settings)
    got, _, err = run(capsys, "hooks", "install", "claude-code", "--project", "-q")
    assert got == code, err
    assert "internal error" not in err
    got, _, err = run(capsys, "hooks", "uninstall", "claude-code", "--project", "-q")
    assert got == 0, err
    assert json.loads(path.read_text()) == json.loads(settings)  # uninstall gives the user's settings back


def test_json_reports_escape_c1_and_bidi_controls(capsys: pytest.CaptureFixture[str], odd: Path) -> None:
    records = [
        {"role": "user", "content": "hi \x9b2J there \x7f, \u202egnp.exe \u2067isolated\u2069"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "sh\x9b\u202e", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    (odd / "c1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for args in (("analyze", "c1.jsonl", "-f", "json"), ("validate", "c1.jsonl", "-f", "json")):
        code, out, err = run(capsys, *args)
        assert code == 0, err
        assert "\x9b" not in out  # written as \u009b: the same JSON, inert on a terminal
        assert "\x7f" not in out
        assert not {"\u202e", "\u2067", "\u2069"} & set(out)  # bidi controls would reorder what is shown
        assert "\\u009b" in out or args[0] == "validate"
    code, out, _ = run(capsys, "analyze", "c1.jsonl", "-f", "json")
    assert "sh\x9b\u202e" in json.loads(out)["files"][0]["by_tool"]


def test_json_escapes_a_delete_in_otherwise_ascii_output() -> None:
    from ctxc.output import dumps

    assert dumps({"tool": "sh\x7f"}) == b'{\n  "tool": "sh\\u007f"\n}\n'
    assert dumps({"tool": "sh"}) == b'{\n  "tool": "sh"\n}\n'


def test_one_message_is_said_in_the_singular(capsys: pytest.CaptureFixture[str], odd: Path) -> None:
    (odd / "one.jsonl").write_text('{"role": "user", "content": "hello"}\n')
    code, out, _ = run(capsys, "analyze", "one.jsonl", "-f", "table")
    assert code == 0
    flat = " ".join(out.split())
    assert "1 message in context" in flat
    assert "largest 1 message " in flat
    code, out, _ = run(capsys, "validate", "one.jsonl")
    assert (code, out) == (0, "one.jsonl: ok (chat, 1 message)\n")


@pytest.mark.parametrize(
    "args",
    [
        ("compact", ".", "--out-dir", "."),
        ("convert", ".", "--out-dir", ".", "--to", "chat-anthropic"),
        ("compact", ODD, "--report", ODD, "-o", "out.jsonl"),
    ],
    ids=["compact-out-dir", "convert-out-dir", "report"],
)
def test_an_output_that_is_an_input_is_refused_without_naming_an_option_not_given(
    capsys: pytest.CaptureFixture[str], odd: Path, args: tuple[str, ...]
) -> None:
    before = (odd / ODD).read_bytes()
    code, _, err = run(capsys, *args, "--quiet")
    assert code in (ExitCode.OUTPUT, ExitCode.PARTIAL)
    assert "refusing to overwrite an input file" in err
    assert "-o" not in err.replace("-out", "")  # it said "choose another -o" to a user who gave none
    assert (odd / ODD).read_bytes() == before


def test_a_dry_runs_stage_totals_count_a_message_acted_on_twice_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # mask shrinks a long result, then masks the shrunk one: the stage said 6 messages, 17,165 → 6,108
    # tokens, of a 14,432-token log; it touches 4 messages, 12,166 → 1,109.
    args = ("compact", str(SAMPLES / "codex.jsonl"), "--dry-run", "--target-ratio", "0.02")
    code, out, _ = run(capsys, *args, "-f", "json")
    assert code == 0
    plan = json.loads(out)
    actions = [a for c in plan["conversations"] for a in c["actions"] if a["strategy"] == "mask"]
    assert len({a["first"] for a in actions}) < len(actions)  # the case: a message acted on twice
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for a in actions:
        first.setdefault(a["first"], a["tokens_before"])
        last[a["first"]] = a["tokens_after"]
    code, out, _ = run(capsys, *args, "-f", "table")
    assert code == 0
    row = next(line.split() for line in out.splitlines() if line.split()[1:2] == ["mask"])
    shown = [cell for cell in row if cell not in "│┃"]
    assert shown[1:5] == [
        str(len(actions)),
        str(len(first)),
        f"{sum(first.values()):,}",
        f"{sum(last.values()):,}",
    ]


def test_a_batch_where_every_file_failed_claims_no_tokens(
    capsys: pytest.CaptureFixture[str], odd: Path
) -> None:
    (odd / "sub").mkdir()
    (odd / "sub" / "bad.jsonl").write_text("{not json\n")
    (odd / "sub" / "empty.jsonl").write_bytes(b"")
    code, _, err = run(capsys, "compact", "sub", "--out-dir", "out")
    assert code == ExitCode.PARTIAL
    assert err.splitlines()[-1] == "ctxc: 2 files: 0 compacted, 2 failed"  # not "; 0 → 0 tokens"


def test_top_0_prints_no_empty_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "analyze", str(SAMPLES / "codex.jsonl"), "--top", "0", "-f", "table")
    assert code == 0
    assert "largest 0 messages" not in out
    assert "┏" not in out  # the header of a table with no row
    assert "14,432 tokens" in out  # the rest of the report stays
