"""Every kind of bad input gets one line on stderr naming the file (and line), a distinct exit code, and
no traceback. These run the real entry point in-process; one runs it as a subprocess to see the whole
process behaviour."""

from __future__ import annotations

import gc
import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import run

from ctxc.errors import ExitCode, InputError
from ctxc.formats import load
from ctxc.reader import iter_records


def one_line_error(err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxc: error: ")
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


GOOD = b'{"role":"user","content":"hi"}\n{"role":"assistant","content":"hello"}\n'


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "analyze", str(tmp_path / "nope.jsonl"))
    assert code == ExitCode.INPUT
    one_line_error(err, "nope.jsonl", "no such file")


@pytest.mark.parametrize("command", ["compact", "repair"])
def test_a_missing_input_leaves_no_archive_behind(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    archive = tmp_path / "archive"
    code, _, err = run(capsys, command, str(tmp_path / "nope.jsonl"), "--archive", str(archive), "-o", "-")
    assert code == ExitCode.INPUT
    one_line_error(err, "nope.jsonl", "no such file")
    assert not archive.exists()


def test_directory_without_transcripts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    code, _, err = run(capsys, "analyze", str(tmp_path))
    assert code == ExitCode.INPUT
    one_line_error(err, str(tmp_path), "no transcripts")
    # It names every ending the walk takes, as --glob's help does (*.traj.json was left out).
    assert "(*.jsonl, *.traj, *.traj.json)" in err


def test_empty_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "empty.jsonl"
    f.write_bytes(b"")
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT
    one_line_error(err, "empty.jsonl", "empty file")


def test_blank_lines_only_is_empty(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "blank.jsonl"
    f.write_bytes(b"\n  \n\n")
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT
    one_line_error(err, "blank.jsonl", "empty file")


def test_a_first_record_still_being_written_is_said_as_such(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Not "not valid JSON": a client that has only begun its session's first line wrote nothing wrong."""
    f = tmp_path / "new.jsonl"
    f.write_bytes(b'\n{"role": "user", "content": "Fix the fl')
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT  # as an empty file is: there is nothing to read yet
    one_line_error(err, "new.jsonl:2:", "cut off mid-record", "still being written")


def test_line_not_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_bytes(GOOD + b"{this is not json\n")
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT
    one_line_error(err, "bad.jsonl:3:", "not valid JSON", "{this is not json")


def test_json_not_object(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "arr.jsonl"
    f.write_bytes(GOOD + b"[1, 2, 3]\n")
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT
    one_line_error(err, "arr.jsonl:3:", "expected a JSON object, got an array")


def test_a_pretty_printed_json_array_is_named_as_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A messages export is often one indented array: it is valid JSON, so "not valid JSON: '['" misled.
    f = tmp_path / "export.json"
    f.write_bytes(orjson.dumps([{"role": "user", "content": "hi"}], option=orjson.OPT_INDENT_2))
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT
    one_line_error(err, "export.json:1:", "expected a JSON object, got an array")


def test_invalid_utf8(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "latin1.jsonl"
    f.write_bytes(GOOD + '{"role":"user","content":"café"}\n'.encode("latin-1"))
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT
    one_line_error(err, "latin1.jsonl:3:", "invalid UTF-8")


def test_binary_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "blob.jsonl"
    f.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT
    one_line_error(err, "blob.jsonl", "binary file")


def test_unknown_format(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "metrics.jsonl"
    f.write_bytes(b'{"cpu": 0.5, "mem": 1024}\n{"cpu": 0.7, "mem": 2048}\n')
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.FORMAT
    one_line_error(err, "metrics.jsonl", "unknown transcript format")


def test_unknown_forced_format(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(GOOD)
    code, _, err = run(capsys, "analyze", str(f), "--input-format", "yaml")
    assert code == ExitCode.FORMAT
    one_line_error(err, "unknown format 'yaml'")


def test_huge_single_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "huge.jsonl"
    with f.open("wb") as h:
        h.write(GOOD)
        h.write(b'{"role":"user","content":"' + b"x" * 50_000_000 + b'"}\n')
    code, _, err = run(capsys, "analyze", str(f))
    assert code == ExitCode.INPUT
    one_line_error(err, "huge.jsonl:3:", "50.0 MB", "--max-line-mb")


@pytest.mark.parametrize("tokenizer", ["o200k_base", "usage"])
def test_a_small_line_limit_is_said_in_figures_that_differ(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tokenizer: str
) -> None:
    f = tmp_path / "small.jsonl"
    f.write_bytes(b'{"role":"user","content":"' + b"x" * 1_600 + b'"}\n')
    code, _, err = run(capsys, "analyze", str(f), "--max-line-mb", "0.001", "--tokenizer", tokenizer)
    assert code == ExitCode.INPUT
    one_line_error(err, "line is 0.0016 MB, over the 0.001 MB limit")


def test_huge_single_line_allowed_when_raised(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "big.jsonl"
    f.write_bytes(GOOD + b'{"role":"user","content":"' + b"word " * 400_000 + b'"}\n')
    code, out, _ = run(
        capsys, "analyze", str(f), "--max-line-mb", "1", "--format", "json", "--tokenizer", "approx"
    )
    assert code == ExitCode.INPUT
    code, out, _ = run(
        capsys, "analyze", str(f), "--max-line-mb", "3", "--format", "json", "--tokenizer", "approx"
    )
    assert code == 0
    assert orjson.loads(out)["files"][0]["message_count"] == 3


def test_orphan_tool_result_is_reported_not_fatal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "orphan.jsonl"
    f.write_bytes(
        b'{"role":"user","content":"run it"}\n'
        b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_gone","content":"ok"}]}\n'
        b'{"role":"assistant","content":"done"}\n'
    )
    code, out, err = run(capsys, "analyze", str(f), "--format", "json")
    assert code == 0
    doc = orjson.loads(out)["files"][0]
    assert [p["code"] for p in doc["problems"]] == ["orphan_result"]
    assert doc["problems"][0]["line"] == 2
    assert "orphan.jsonl:2:" in err
    assert "toolu_gone" in err
    assert "Traceback" not in err


def test_skip_invalid_continues_and_reports(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "mixed.jsonl"
    f.write_bytes(GOOD + b"garbage\n[1]\n" + GOOD)
    code, out, err = run(capsys, "analyze", str(f), "--skip-invalid", "--format", "json")
    assert code == 0
    doc = orjson.loads(out)["files"][0]
    assert doc["skipped_lines"] == 2
    assert doc["message_count"] == 4
    assert "skipped 2 invalid line(s)" in err


@pytest.mark.parametrize(
    "command",
    [
        ["validate"],
        ["convert", "-o", "-"],
        ["repair", "-o", "-"],
        ["compact", "-o", "-"],
        ["check", "--max-tokens", "100000"],
    ],
    ids=lambda c: c[0],
)
def test_every_command_says_how_many_lines_it_skipped(
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    monkeypatch.setenv("CTXC_ARCHIVE", str(tmp_path / "a"))
    f = tmp_path / "mixed.jsonl"
    f.write_bytes(GOOD + b"garbage\n[1]\n" + GOOD)
    name, *rest = command
    code, _, err = run(capsys, name, str(f), "--skip-invalid", *rest)
    assert code == 0, err
    # Said once: by the command, or as a warning of ctxc's logger (stderr in a real run, as below; the
    # log records under pytest).
    said = f"ctxc: {f}: skipped 2 invalid line(s)"
    assert [*caplog.messages, *err.splitlines()].count(said) == 1


def test_the_skipped_lines_reach_stderr(tmp_path: Path) -> None:
    f = tmp_path / "mixed.jsonl"
    f.write_bytes(GOOD + b"garbage\n" + GOOD)
    cmd = [sys.executable, "-m", "ctxc", "validate", str(f), "--skip-invalid"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"ctxc: {f}: skipped 1 invalid line(s)\n"
    assert proc.stdout.startswith(f"{f}: ok")


def test_skip_invalid_convert_keeps_bad_lines_verbatim(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f = tmp_path / "mixed.jsonl"
    data = GOOD + b"garbage\n" + GOOD
    f.write_bytes(data)
    out_file = tmp_path / "copy.jsonl"
    code, _, _ = run(capsys, "convert", str(f), "--skip-invalid", "-o", str(out_file))
    assert code == 0
    assert out_file.read_bytes() == data


def test_convert_refuses_to_overwrite_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(GOOD)
    code, _, err = run(capsys, "convert", str(f), "-o", str(f))
    assert code == ExitCode.OUTPUT
    one_line_error(err, "refusing to overwrite an input")
    assert f.read_bytes() == GOOD


def test_failed_convert_leaves_no_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_bytes(GOOD + b"nope\n")
    out_file = tmp_path / "out.jsonl"
    code, _, _ = run(capsys, "convert", str(f), "-o", str(out_file))
    assert code == ExitCode.INPUT
    assert not out_file.exists()
    assert not list(tmp_path.glob("*.ctxc-tmp"))


def test_usage_error_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "analyze", "--no-such-flag", "x")
    assert code == ExitCode.USAGE
    assert "Traceback" not in err


def test_a_negative_top_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``--top -1`` listed no messages, silently, as if it were 0."""
    f = tmp_path / "ok.jsonl"
    f.write_bytes(GOOD)
    code, out, err = run(capsys, "analyze", str(f), "--top", "-1")
    assert code == ExitCode.USAGE
    assert out == ""
    one_line_error(err, "--top")


@pytest.mark.parametrize(
    ("command", "batch"), [("compact", "--in-place"), ("compact", "--out-dir"), ("convert", "--out-dir")]
)
def test_a_batch_of_stdin_is_a_usage_error(
    command: str, batch: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``-`` with --out-dir wrote a file named ``-`` there; with --in-place it failed as a batch (12)."""
    out = tmp_path / "out"
    where = [str(out)] if batch == "--out-dir" else []
    code, _, err = run(
        capsys, command, "-", batch, *where, *(["--archive", str(tmp_path / "a")] * (command == "compact"))
    )
    assert code == ExitCode.USAGE
    one_line_error(err, "stdin")
    assert not out.exists()


def test_subprocess_no_traceback_and_debug_shows_it(tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_bytes(b"not json\n")
    cmd = [sys.executable, "-m", "ctxc", "analyze", str(f)]
    plain = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert plain.returncode == ExitCode.INPUT
    assert plain.stdout == ""
    assert plain.stderr.strip().count("\n") == 0
    assert "Traceback" not in plain.stderr
    debug = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env={**__import__("os").environ, "CTXC_DEBUG": "1"}
    )
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr


@pytest.mark.parametrize("command", ["compact", "validate", "repair", "convert"])
def test_every_reading_command_names_a_bad_line(
    command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_bytes(GOOD + b"{oops\n")
    code, _, err = run(
        capsys,
        command,
        str(f),
        *(["--archive", str(tmp_path / "a")] if command in ("compact", "repair") else []),
    )
    assert code == ExitCode.INPUT
    one_line_error(err, "bad.jsonl:3:", "not valid JSON")
    assert not (tmp_path / "a" / "manifest.jsonl").exists()


def test_restore_unknown_id_and_not_an_id(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "restore", "0123456789abcdef", "--archive", str(tmp_path))
    assert code == ExitCode.ARCHIVE
    one_line_error(err, "holds no object")
    code, _, err = run(capsys, "restore", "nope", "--archive", str(tmp_path))
    assert code == ExitCode.INPUT  # not hex: a file name, mistyped (issue 20 item 10)
    one_line_error(err, "nope: no such file")


def test_show_and_restore_from_a_missing_archive_say_there_is_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A mistyped --archive said "holds no object 0123456789ab", as if the id were what was wrong.
    missing = tmp_path / "no-such-archive"
    for args in (["restore", "0123456789abcdef"], ["show", "0123456789ab:3"]):
        code, _, err = run(capsys, *args, "--archive", str(missing))
        assert code == ExitCode.ARCHIVE
        one_line_error(err, f"no archive at {missing}", "--archive")
    assert not missing.exists()


def test_compact_rejects_bad_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(GOOD)
    for args, needle in (
        (["--strategy", "magic"], "unknown strategy 'magic'"),
        (["--set", "fifo.nope=1"], "has no option 'nope'"),
        (["--set", "mask.keep_last_results=-1"], "must be at least"),
        (["--target-tokens", "10", "--target-ratio", "0.5"], "not both"),
        (["--pin", "("], "--pin"),
        (["--summarizer", "oracle"], "unknown summarizer"),
    ):
        code, _, err = run(capsys, "compact", str(f), "--archive", str(tmp_path / "a"), *args)
        assert code == ExitCode.USAGE, (args, err)
        one_line_error(err, needle)


def test_validate_reports_problems_with_exit_5(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "orphan.jsonl"
    f.write_bytes(
        b'{"role":"user","content":"go"}\n'
        b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}\n'
    )
    code, out, _ = run(capsys, "validate", str(f))
    assert code == ExitCode.INVALID
    assert "orphan.jsonl:2: orphan_result" in out


# -- the commands added for search, evaluation, CI checks and agent loops -----------------------------

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "codex.jsonl"
BAD_LINE = b'{"role": "user", "content": "hi"}\n{not json\n'


@pytest.mark.parametrize(
    ("args", "code", "needles"),
    [
        (["search", "foo", "--archive", "{tmp}/no-archive"], ExitCode.ARCHIVE, ["no archive"]),
        (["show", "0123456789ab:3", "--archive", "{tmp}"], ExitCode.ARCHIVE, ["no object 0123456789ab"]),
        (["show", "nonsense"], ExitCode.USAGE, ["not an archive reference"]),
        (
            ["eval", "{tmp}/bad.jsonl", "--strategies", "fifo"],
            ExitCode.INPUT,
            ["bad.jsonl:2", "not valid JSON"],
        ),
        (["eval", "--strategies", "nosuch"], ExitCode.USAGE, ["unknown strategy 'nosuch'"]),
        (["eval", "--targets", "2.0"], ExitCode.USAGE, ["--targets"]),
        (
            ["check", "{tmp}/bad.jsonl", "--max-usage", "0.8"],
            ExitCode.INPUT,
            ["bad.jsonl:2", "not valid JSON"],
        ),
        (["check", str(SAMPLE)], ExitCode.USAGE, ["exactly one budget"]),
        (["remind", "{tmp}/bad.jsonl", "--rules", "{tmp}/ok.toml"], ExitCode.INPUT, ["bad.jsonl:2"]),
        (
            ["remind", str(SAMPLE), "--rules", "{tmp}/bad.toml"],
            ExitCode.USAGE,
            ["bad.toml", "not valid TOML"],
        ),
        (
            ["remind", str(SAMPLE), "--rules", "{tmp}/no-trigger.toml"],
            ExitCode.USAGE,
            ["needs exactly one trigger"],
        ),
        (["compose", "{tmp}/bad.toml"], ExitCode.USAGE, ["bad.toml", "not valid TOML"]),
        (["compose", "{tmp}/nope.toml"], ExitCode.INPUT, ["nope.toml", "no such prompt file"]),
        (["compose", "{tmp}/required.toml", "--budget", "3"], ExitCode.OVER_TARGET, ["required sections"]),
        (["replay", "{tmp}/bad.jsonl"], ExitCode.INPUT, ["bad.jsonl:2", "not valid JSON"]),
        (["replay", str(SAMPLE), "--plot", "{tmp}/missing/x.svg"], ExitCode.OUTPUT, ["does not exist"]),
    ],
)
def test_new_commands_on_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], code: int, needles: list[str]
) -> None:
    (tmp_path / "bad.jsonl").write_bytes(BAD_LINE)
    (tmp_path / "bad.toml").write_text("x = [\n")
    (tmp_path / "ok.toml").write_text('[[reminder]]\nid = "a"\nmessage = "m"\nevery_n_turns = 2\n')
    (tmp_path / "no-trigger.toml").write_text('[[reminder]]\nid = "a"\nmessage = "m"\n')
    (tmp_path / "required.toml").write_text(
        '[[section]]\nid = "s"\npriority = 100\nrequired = true\ncontent = "one two three four five six"\n'
    )
    got, _, err = run(capsys, *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert got == code, err
    one_line_error(err, *needles)


def test_an_interrupt_wrapped_by_python_is_still_an_interrupt() -> None:
    from ctxc.cli import _interrupted

    wrapped = RuntimeError("Error calling __set_name__ on 'Field' instance")
    wrapped.__cause__ = KeyboardInterrupt()
    assert _interrupted(wrapped)
    looped = RuntimeError("a cause that leads back to itself")
    looped.__context__ = ValueError("inner")
    looped.__context__.__context__ = looped
    assert not _interrupted(looped)
    assert not _interrupted(RuntimeError("a real bug"))


def test_blank_and_indented_lines_and_the_collector_after_a_bad_line(tmp_path: Path) -> None:
    data = b'  {"role":"user","content":"hi"}\n \t \n\n{"role":"assistant","content":"yes"}\n'
    assert [r.kind for r in iter_records(io.BytesIO(data), "t")] == [
        "passthrough",
        "blank",
        "blank",
        "passthrough",
    ]
    # Reading pauses the cyclic collector; a read that fails leaves it as it found it.
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(GOOD + b"{not json\n")
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            with pytest.raises(InputError):
                load(bad)
            assert gc.isenabled() is enabled
        finally:
            gc.enable()


def test_what_a_read_made_goes_to_the_oldest_generation(tmp_path: Path) -> None:
    """The young collections after a 100 MB read would walk every object it made, twice."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD)
    transcript = load(path)
    message = transcript.messages[0]
    assert gc.is_tracked(message)
    assert any(o is message for o in gc.get_objects(generation=2))
    assert not any(o is message for o in gc.get_objects(generation=0))
