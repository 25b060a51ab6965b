"""Issue 20 items 2, 3 and 8 through the real command line: every table fits the terminal with each value
whole, a pipe is never wrapped, and the command line is quiet unless asked.

Each table command runs in a subprocess on a real pseudo-terminal 80 (and 120) columns wide, and with its
stdout a pipe; the values it must show come from its own JSON output (or the library's registries).
A new command fails :func:`test_every_command_is_classified` until it has a case here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SAMPLES, run
from rich.cells import cell_len

#: Commands that print no table: they write transcripts (or originals) byte for byte, or change settings.
NOT_TABLES = {"convert", "restore", "repair", "hooks"}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


@dataclass(frozen=True)
class Workspace:
    root: Path
    env: dict[str, str]
    ref: str  # messages of an archived original, for show


def _env(archive: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")
    }
    return {**env, "CTXC_ARCHIVE": str(archive), "NO_COLOR": "1", "TERM": "xterm-256color"}


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("tables")
    for name in ("claude-code", "codex"):
        shutil.copy(SAMPLES / f"{name}.jsonl", root / f"{name}.jsonl")
    (root / "batch").mkdir()
    shutil.copy(SAMPLES / "chat-openai.jsonl", root / "batch" / "chat-openai.jsonl")
    shutil.copy(SAMPLES / "dataset.jsonl", root / "batch" / "dataset.jsonl")
    shutil.copy(SAMPLES.parent / "examples" / "reminders.toml", root / "rules.toml")
    shutil.copy(SAMPLES.parent / "examples" / "prompt.toml", root / "prompt.toml")
    env = _env(tmp_path_factory.mktemp("archive"))
    # sessions lists what the clients keep: one Claude Code and one Codex session.
    homes = tmp_path_factory.mktemp("homes")
    from ctxc.sessions import claude_project_dir

    project = homes / "claude" / "projects" / claude_project_dir("/home/jiwoo/src/minishop")
    project.mkdir(parents=True)
    shutil.copy(SAMPLES / "claude-code.jsonl", project / "68138cc8-ffd2-4577-9120-9a555bb4d510.jsonl")
    day = homes / "codex" / "sessions" / "2026" / "03" / "23"
    day.mkdir(parents=True)
    shutil.copy(
        SAMPLES / "codex.jsonl",
        day / "rollout-2026-03-23T08-41-07-c6bfa837-fa0e-4785-88a9-2e0c04484712.jsonl",
    )
    env = {**env, "CLAUDE_CONFIG_DIR": str(homes / "claude"), "CODEX_HOME": str(homes / "codex")}
    small = root.parent / "small.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxc",
            "compact",
            "claude-code.jsonl",
            "-o",
            str(small),
            "--target-ratio",
            "0.02",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )
    archive_id = re.search(rb"original in archive ([0-9a-f]{12})", done.stderr)
    assert archive_id is not None, done.stderr
    return Workspace(root, env, f"{archive_id[1].decode()}:3-5")


def piped(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxc", *args],
        check=False,
        cwd=ws.root,
        env=ws.env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def on_terminal(ws: Workspace, columns: int, *args: str, data: bool = True) -> tuple[str, int]:
    """``ctxc ARGS`` with stdout and stderr on a pseudo-terminal ``columns`` wide: what the terminal shows
    (styles removed) and the exit code. ``data=False`` sends stdout to /dev/null (compose's prompt)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxc", *args],
        cwd=ws.root,
        env=ws.env,
        stdin=subprocess.DEVNULL,
        stdout=slave if data else subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:  # the child closed the terminal (EIO)
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            pytest.fail(f"ctxc {' '.join(args)} did not finish on the terminal")
        rc = proc.wait(timeout=30)
    finally:
        os.close(master)
        with contextlib.suppress(OSError):
            proc.kill()
    text = _ANSI.sub("", out.decode()).replace("\r\n", "\n")
    # A carriage return goes back to the start of the line (a spinner redrawn): the last drawing shows.
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n")), rc


def _json(ws: Workspace, *args: str) -> dict:  # type: ignore[type-arg]
    done = piped(ws, *args, "-f", "json")
    assert done.stdout, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------- what each shows


def _analyze(ws: Workspace) -> list[str]:
    (doc,) = _json(ws, "analyze", "claude-code.jsonl")["files"]
    values = [*doc["by_role"], *doc["by_kind"], *(f"{v:,}" for v in doc["by_role"].values())]
    values.append(
        f"{doc['context_tokens']:,} tokens of a {doc['window']:,} window ({doc['model']}, the log's model)  "
        f"{doc['share'] * 100:.1f}%  stage {doc['stage']}: {doc['stage_name']}"
    )
    usage = doc["recorded_usage"]
    values.append(f"last context {usage['last_context']:,} tokens (max {usage['max_context']:,}), input")
    for s in doc["largest"]:
        values += [s["role"], s["kind"], s["tool"] or "", f"{s['tokens']:,}", f"{s['cumulative']:,}"]
    return values


def _check(ws: Workspace) -> list[str]:
    done = piped(ws, "check", "claude-code.jsonl", "codex.jsonl", "--max-usage", "0.05", "-f", "json")
    doc = json.loads(done.stdout)
    values = []
    for f in doc["files"]:
        values += [f["path"], f"{f['tokens']:,}", f"{f['over_by']:,}", f"{f['limit']:,}", f"{f['window']:,}"]
    return values


EVAL = ("eval", "--generated", "1", "--strategies", "fifo,mask", "--targets", "0.1")


def _eval(ws: Workspace) -> list[str]:
    values = ["needles", "kept+found", "intent", "paths", "errors", "decisions", "valid", "budget", "ratio"]
    for r in _json(ws, *EVAL)["summary"]:
        n = r["needles"]
        values += [r["strategy"], f"{r['target_ratio']:.0%}", f"{n['recovered']}/{n['total']}"]
        values += [f"{n['retained']}+{n['by_search']}", f"{r['mean_ratio']:.2f}"]
    return values


def _search(ws: Workspace) -> list[str]:
    values = []
    for h in _json(ws, "search", "pytest", "-k", "3")["hits"]:
        values += [h["ref"], f"line {h['line']}", h["role"], h["tool"] or ""]
        values += [h["snippet"].replace("**", ""), h["context"].split(". Request:", 1)[0]]
    return values


def _show(ws: Workspace) -> list[str]:
    values = []
    for m in _json(ws, "show", ws.ref)["messages"]:
        values += [str(m["index"]), str(m["line"]), m["role"]]
        values += [line for b in m["blocks"] for line in b["text"].splitlines() if line.strip()]
    return values


def _strategies(ws: Workspace) -> list[str]:
    from ctxc.compaction import strategies

    return [x for name, cls in strategies().items() for x in (name, cls.description)]


def _formats(ws: Workspace) -> list[str]:
    from ctxc.formats import adapters

    return [x for name, a in adapters().items() for x in (name, a.description)]


def _models(ws: Workspace) -> list[str]:
    return [x for m in _json(ws, "models")["models"] for x in (m["name"], f"{m['window']:,}", m["tokenizer"])]


def _validate(ws: Workspace) -> list[str]:
    doc = _json(ws, "validate", "claude-code.jsonl", "codex.jsonl")
    return [f"{r['path']}: ok ({r['format']}, {r['messages']} messages)" for r in doc["files"]]


def _remind(ws: Workspace) -> list[str]:
    doc = _json(ws, "remind", "claude-code.jsonl", "--rules", "rules.toml", "--window", "20000")
    values = [r["id"] for r in doc["rules"]]
    for x in doc["reminders"]:
        values += [x["rule"], x["detail"], f"{x['tokens']:,}"]
    return values


def _compose(ws: Workspace) -> list[str]:
    doc = _json(ws, "compose", "prompt.toml", "--budget", "120")
    return [x for s in doc["sections"] for x in (s["id"], f"{s['tokens']:,}")]


REPLAY = ("replay", "claude-code.jsonl", "--window", "20000", "--turns")


def _replay(ws: Workspace) -> list[str]:
    doc = _json(ws, *REPLAY)
    return [x for t in doc["turns"] for x in (f"{t['without']:,}", f"{t['with']:,}", str(t["line"]))]


DRY_RUN = ("compact", "claude-code.jsonl", "--dry-run", "--target-ratio", "0.02")


def _dry_run(ws: Workspace) -> list[str]:
    done = piped(ws, *DRY_RUN)  # a pipe gets the plan as JSON
    doc = json.loads(done.stdout)
    values = [f"{doc['run']['tokens_before']:,}", f"{doc['run']['tokens_after']:,}"]
    for conv in doc["conversations"]:
        for a in conv["actions"]:
            values += [a["strategy"], a["note"], f"{a['first']}-{a['last']}", f"{a['tokens_before']:,}"]
    return values


def _batch(ws: Workspace) -> list[str]:
    done = piped(ws, *BATCH[:-2], "-f", "json")
    values = []
    for r in json.loads(done.stdout)["files"]:
        values += [r["path"], r["status"], f"{r['tokens_before']:,}", f"{r['tokens_after']:,}"]
    return values


def _sessions(ws: Workspace) -> list[str]:
    rows = _json(ws, "sessions")["sessions"]
    assert len(rows) == 2
    return [x for r in rows for x in (r["agent"], f"{r['messages'] or 0:,}", f"{r['tokens'] or 0:,}")]


BATCH = ("compact", "batch", "--out-dir", "../batch-out", "--dry-run", "-q", "-f", "table")


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]  # a table on a terminal
    pipe: tuple[str, ...] | None  # a table through a pipe (None: a pipe gets JSON, covered elsewhere)
    values: Callable[[Workspace], list[str]]


CASES: dict[str, Case] = {
    "analyze": Case(
        ("analyze", "claude-code.jsonl"), ("analyze", "claude-code.jsonl", "-f", "table"), _analyze
    ),
    "check": Case(("check", "claude-code.jsonl", "codex.jsonl", "--max-usage", "0.05", "-q"), None, _check),
    "eval": Case(EVAL, (*EVAL, "-f", "table"), _eval),
    "search": Case(("search", "pytest", "-k", "3"), ("search", "pytest", "-k", "3", "-f", "table"), _search),
    "show": Case(("show", "REF"), ("show", "REF", "-f", "table"), _show),
    "strategies": Case(("strategies",), ("strategies",), _strategies),
    "formats": Case(("formats",), ("formats",), _formats),
    "models": Case(("models",), ("models", "-f", "table"), _models),
    "validate": Case(
        ("validate", "claude-code.jsonl", "codex.jsonl"),
        ("validate", "claude-code.jsonl", "codex.jsonl"),
        _validate,
    ),
    "remind": Case(
        ("remind", "claude-code.jsonl", "--rules", "rules.toml", "--window", "20000"),
        ("remind", "claude-code.jsonl", "--rules", "rules.toml", "--window", "20000", "-f", "table"),
        _remind,
    ),
    "compose": Case(
        ("compose", "prompt.toml", "--budget", "120"), ("compose", "prompt.toml", "--budget", "120"), _compose
    ),
    "replay": Case(REPLAY, (*REPLAY, "-f", "table"), _replay),
    "compact": Case((*DRY_RUN, "--messages"), None, _dry_run),
    "compact batch": Case(BATCH, BATCH, _batch),
    "sessions": Case(("sessions",), ("sessions", "-f", "table"), _sessions),
}


def _args(ws: Workspace, args: tuple[str, ...]) -> list[str]:
    return [ws.ref if a == "REF" else a for a in args]


def test_every_command_is_classified() -> None:
    from typer.main import get_command

    from ctxc.cli import app

    commands = set(get_command(app).commands)  # type: ignore[attr-defined]
    assert commands == {c.split()[0] for c in CASES} | NOT_TABLES


#: Words longer than this may be folded in a free-text column at 80 columns.
FOLD_FROM = 20


def _too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if cell_len(line) > width]


@pytest.mark.parametrize("name", sorted(CASES))
def test_at_80_columns_every_value_is_whole(ws: Workspace, name: str) -> None:
    case = CASES[name]
    values = [v for v in case.values(ws) if v.strip()]
    assert values
    text, rc = on_terminal(ws, 80, *_args(ws, case.args), data=name != "compose")
    assert rc in (0, 6), text  # check exits 6: over budget
    assert _too_wide(text, 80) == []
    lines = text.splitlines()
    squashed = re.sub(r"[\s│┃|]", "", text)
    # A value is on one line, whole; a sentence wraps between its words, and a word longer than its
    # column of free text (a path in a note) is folded: read in order, it is whole.
    for value in values:
        if " " not in value.strip() and cell_len(value) <= FOLD_FROM:
            assert any(value in line for line in lines), (value, text)
            continue
        for word in value.split():
            if cell_len(word) <= FOLD_FROM:
                assert any(word in line for line in lines), (word, value, text)
            else:
                assert word in squashed, (word, value, text)
    assert "…" not in text.replace("…`", "").replace("…”", "")  # nothing cut (a note may quote "…")


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.pipe is not None))
def test_piped_tables_are_never_wrapped_nor_padded(ws: Workspace, name: str) -> None:
    case = CASES[name]
    assert case.pipe is not None
    done = piped(ws, *_args(ws, case.pipe))
    assert done.returncode in (0, 6), done.stderr
    text = done.stderr if name == "compose" else done.stdout  # compose's table is about its stdout
    lines = text.splitlines()
    for value in (v for v in case.values(ws) if v.strip()):
        assert any(value in line for line in lines), (value, text)
    # A cell's padding ends no line (`grep ' $'` finds nothing); the rest of the layout is rich's.
    padded = [line for line in (done.stdout + done.stderr).splitlines() if line != line.rstrip()]
    assert padded == [], text


def test_at_120_columns_tables_use_the_room(ws: Workspace) -> None:
    text, _ = on_terminal(ws, 120, "analyze", "claude-code.jsonl")
    assert _too_wide(text, 120) == []
    assert re.search(r"cumulative\s*┃\s*window\s*┃\s*stage", text)  # every column, which 80 leaves out
    narrow, _ = on_terminal(ws, 80, "analyze", "claude-code.jsonl")
    assert "stage ┃" not in narrow
    text, _ = on_terminal(ws, 120, *EVAL)
    assert _too_wide(text, 120) == []
    assert any("needles" in line and "decisions" in line for line in text.splitlines())  # one table


def test_validate_through_cat_keeps_each_record_on_its_line(ws: Workspace, tmp_path: Path) -> None:
    long_name = tmp_path / ("a-long-directory-name-" * 4) / "claude-code.jsonl"
    long_name.parent.mkdir()
    shutil.copy(SAMPLES / "claude-code.jsonl", long_name)
    done = piped(ws, "validate", str(long_name), "codex.jsonl")
    doc = _json(ws, "validate", str(long_name), "codex.jsonl")
    assert done.stdout.splitlines() == [
        f"{r['path']}: ok ({r['format']}, {r['messages']} messages)" for r in doc["files"]
    ]
    assert str(long_name) in done.stdout.splitlines()[0]


# ------------------------------------------------------------------------------------- quiet (item 8)


def test_progress_shows_on_a_terminal_once_the_delay_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from ctxc.batch import BatchProgress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for delay, shown in ((0.0, True), (3600.0, False)):
        err = Terminal()
        monkeypatch.setattr(sys, "stderr", err)
        monkeypatch.setattr(BatchProgress, "SHOW_AFTER", delay)
        with BatchProgress(3, "validating") as progress:
            for _ in range(3):
                progress.advance(tokens=0)
            progress._bar.refresh()
        assert ("validating" in err.getvalue()) is shown
        assert "0/s" not in err.getvalue()


def test_a_pairing_warning_is_said_once(ws: Workspace, tmp_path: Path) -> None:
    lines = (SAMPLES / "chat-anthropic.jsonl").read_text().splitlines()
    first_result = next(i for i, line in enumerate(lines) if '"tool_result"' in line)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:first_result] + lines[first_result + 1 :]) + "\n")
    text, _ = on_terminal(ws, 120, "analyze", str(broken))
    assert text.count("is never answered") == 1
    done = piped(ws, "analyze", str(broken))  # JSON on stdout: the warning goes to stderr, once
    assert done.stderr.count("is never answered") == 1


def test_dry_run_shows_stage_totals_first_and_actions_with_messages(ws: Workspace) -> None:
    plan = json.loads(piped(ws, *DRY_RUN).stdout)
    actions = [a for c in plan["conversations"] for a in c["actions"]]
    short, _ = on_terminal(ws, 100, *DRY_RUN)
    for name in {a["strategy"] for a in actions}:
        saved = sum(a["tokens_before"] - a["tokens_after"] for a in actions if a["strategy"] == name)
        assert re.search(rf"{name}\s.*{re.escape(f'{-saved:+,}')}", short), short
    assert "--messages" in short
    assert actions[0]["note"] not in short
    full, _ = on_terminal(ws, 200, *DRY_RUN, "--messages")
    assert all(a["note"] in full for a in actions)
    assert full.index("stage") < full.index("note")


def test_the_summary_line_signs_each_change(ws: Workspace, tmp_path: Path) -> None:
    lines = (SAMPLES / "chat-anthropic.jsonl").read_text().splitlines()
    first_result = next(i for i, line in enumerate(lines) if '"tool_result"' in line)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:first_result] + lines[first_result + 1 :]) + "\n")
    done = piped(ws, "compact", str(broken), "-o", str(tmp_path / "out.jsonl"))
    assert re.search(r"repair \+\d+", done.stderr), done.stderr
    assert "--" not in done.stderr.replace("--target", "")


def test_a_table_no_column_layout_fits_becomes_one_record_a_row() -> None:
    """The last resort of :class:`ctxc.render.Fitted`: a line per value, each whole."""
    import io

    from rich.console import Console
    from rich.table import Table

    from ctxc.render import Fitted

    table = Table("identifier", "tokens", "cumulative")
    table.add_row("toolu_01QSKqXYVrtF1fVEjfHc7XPR", "6,300", "1,234,567")
    table.add_row("toolu_01qQhMnf2tVyCbtXoam07aIy", "175", "1,234,742")
    out = io.StringIO()
    Console(file=out, width=44, color_system=None).print(Fitted(table, keys=1))
    text = out.getvalue()
    assert _too_wide(text, 44) == []
    for value in ("toolu_01QSKqXYVrtF1fVEjfHc7XPR", "6,300", "1,234,567", "toolu_01qQhMnf2tVyCbtXoam07aIy"):
        assert any(value in line for line in text.splitlines()), text
    assert "cumulative  1,234,742" in text


# ------------------------------------------------------------- long paths and names (no value cut)

#: 104 characters: a path no 80-column table can hold beside anything else on one line.
LONG_DIR = "a-very-long-directory-name-for-testing-wrapping/another-deep-subdirectory-with-more-words/level"


def _fragments(value: str, text: str) -> list[str]:
    """The pieces ``value`` is shown in, line after line (a cell or a line of its own each)."""
    pieces: list[str] = []
    rest = value
    for line in text.splitlines():
        for token in re.split(r"[\s│┃|(),:]+", line):
            if token and rest and rest.startswith(token) and (pieces or len(token) > 1):
                pieces.append(token)
                rest = rest[len(token) :]
    assert "".join(pieces) == value, (value, pieces, text)
    return pieces


def _folded_only_after(value: str, text: str, marks: str) -> None:
    pieces = _fragments(value, text)
    assert all(piece[-1] in marks for piece in pieces[:-1]), (pieces, text)


def _long_copy(root: Path, name: str, replace: dict[str, str] | None = None) -> Path:
    path = root / LONG_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (SAMPLES / "claude-code.jsonl").read_text()
    for old, new in (replace or {}).items():
        data = data.replace(old, new)
    path.write_text(data)
    return path


@pytest.mark.parametrize("columns", [80, 60])
def test_check_stacks_the_verdict_under_a_long_path_folded_only_at_slashes(
    ws: Workspace, tmp_path: Path, columns: int
) -> None:
    path = _long_copy(tmp_path, "claude-code.jsonl")
    assert len(str(path)) > 100
    text, rc = on_terminal(ws, columns, "check", str(path), "codex.jsonl", "--max-usage", "0.5", "-q")
    assert rc == 0, text
    assert _too_wide(text, columns) == []
    _folded_only_after(str(path), text, "/")
    verdict = f"{_json(ws, 'analyze', str(path))['files'][0]['context_tokens']:,} tokens (6.3% of 200,000)"
    assert any(line.strip().startswith(verdict) for line in text.splitlines()), text  # under, not beside
    if columns == 80:  # the whole sentence on one line, not a word a line
        assert any(
            line.strip().endswith(f"{verdict}: within the budget of 100,000") for line in text.splitlines()
        )
    done = piped(ws, "check", str(path), "--max-usage", "0.5")
    assert str(path) in done.stdout.splitlines()[0]  # a pipe still gets one line per file


@pytest.mark.parametrize("columns", [80, 60])
def test_analyze_folds_long_paths_and_tool_names_only_at_their_boundaries(
    ws: Workspace, tmp_path: Path, columns: int
) -> None:
    tool = "mcp__github_enterprise__create_pull_request_review_comment"
    path = _long_copy(tmp_path, "mcp-session.jsonl", {'"Bash"': f'"{tool}"'})
    text, _ = on_terminal(ws, columns, "analyze", str(path))
    assert _too_wide(text, columns) == []
    _folded_only_after(str(path), text, "/")  # the heading
    table = text[text.index("largest") :]
    assert "┃ tool" in table  # still a table, not one block per message
    _folded_only_after(tool, table, "_")


def test_a_column_that_may_not_wrap_is_never_cropped() -> None:
    """sessions' columns are no_wrap: at 60 columns rich cropped '2026-12-02 07:36' to '2026-12-02 07:3'."""
    import io

    from rich.console import Console

    from ctxc.render import Fitted, make_table

    table = make_table(
        ("id", "agent", "last active", "tokens", "cost"),
        [("68138cc8", "claude-code", "2026-12-02 07:36", "12,762", "$0.22")],
        box=None,
    )
    for column in table.columns:
        column.no_wrap = True
    out = io.StringIO()
    Console(file=out, width=46, color_system=None).print(Fitted(table, optional=("cost",), keys=1))
    assert "2026-12-02 07:36" in out.getvalue(), out.getvalue()
    assert _too_wide(out.getvalue(), 46) == []


def test_spare_width_shows_a_path_whole_before_widening_prose() -> None:
    import io

    from rich.console import Console

    from ctxc.render import Fitted, make_table

    path = "/work/checkouts/samples/claude-code.jsonl"
    note = "12,573 tokens (6.3% of 200,000): within the budget of 100,000 tokens"
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(Fitted(make_table(("file", "note"), [(path, note)])))
    assert any(path in line for line in out.getvalue().splitlines()), out.getvalue()


@pytest.mark.parametrize(("width", "marks"), [(30, "/-"), (50, "/"), (80, "/")])
def test_a_printed_line_breaks_a_path_only_after_a_slash(width: int, marks: str) -> None:
    """Headings and summaries (analyze, show, validate, compact) go through the console's wrapping; a
    segment wider than the line is folded after a '-'."""
    import io

    from ctxc.terminal import visible_console

    path = f"/tmp/{LONG_DIR}/claude-code.jsonl"
    out = io.StringIO()
    console = visible_console(file=out, width=width, color_system=None)
    console.print(f"{path}: ok (claude-code, 23 messages)", markup=False)
    assert _too_wide(out.getvalue(), width) == []
    _folded_only_after(path, out.getvalue(), marks)


def test_a_long_project_stays_on_one_line_in_a_pipe_and_folds_at_slashes_on_a_terminal(
    ws: Workspace, tmp_path: Path
) -> None:
    """sessions named each project as its table's title, which rich wraps to the table's width, piped too."""
    from ctxc.sessions import claude_project_dir

    project = f"/home/jiwoo/src/{LONG_DIR}/minishop"
    folder = tmp_path / "claude" / "projects" / claude_project_dir(project)
    folder.mkdir(parents=True)
    data = (SAMPLES / "claude-code.jsonl").read_text().replace("/home/jiwoo/src/minishop", project)
    (folder / "68138cc8-ffd2-4577-9120-9a555bb4d510.jsonl").write_text(data)
    env = {**ws.env, "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "CODEX_HOME": str(tmp_path / "none")}
    here = Workspace(ws.root, env, ws.ref)
    assert project in piped(here, "sessions", "-f", "table").stdout.splitlines()
    text, _ = on_terminal(here, 60, "sessions")
    _folded_only_after(project, text, "/")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d\s", text), text  # the time whole (no_wrap, not cropped)


def test_only_a_long_text_column_keeps_a_readable_width() -> None:
    """A short text wraps in a line or two, the table whole; a long one is not squeezed a word a line."""
    import io

    from rich.console import Console

    from ctxc.render import Fitted, make_table

    def shown(note: str, width: int) -> str:
        rows = [("examples", "40", "yes", "54", note)]
        table = make_table(("section", "priority", "required", "tokens", "kept"), rows)
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(Fitted(table, keys=1))
        return out.getvalue()

    short = shown("dropped: over budget", 60)
    assert short.count("┃ section") == 1, short  # one table, "kept" wrapped
    long = shown("dropped: over the budget of 120 tokens with the others kept", 60)
    assert long.count("┃ section") == 2, long  # the text in a group of its own, at a width to read
    assert any("dropped: over the budget" in line for line in long.splitlines()), long


@pytest.mark.parametrize(
    ("args", "window"),
    [
        (("--window", "20000"), "of a 20,000 window  "),  # no model named: nothing in parentheses
        (("--model", "claude-sonnet-4-5"), "of a 200,000 window (claude-sonnet-4-5)  "),
        ((), "; no model in the log: the default)  "),
    ],
)
def test_the_window_line_names_where_the_window_came_from(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], window: str
) -> None:
    code, out, err = run(capsys, "analyze", str(SAMPLES / "chat-openai.jsonl"), *args, "-f", "table")
    assert code == 0, err
    assert window in out
    assert "()" not in out
