"""Sessions by id: finding Claude Code and Codex sessions where their clients keep them."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SAMPLES, run

from ctxc.errors import InputError
from ctxc.sessions import claude_project_dir, find_sessions, resolve_session

CLAUDE_ID = "68138cc8-ffd2-4577-9120-9a555bb4d510"  # samples/claude-code.jsonl
CODEX_ID = "c6bfa837-fa0e-4785-88a9-2e0c04484712"  # samples/codex.jsonl


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    monkeypatch.setenv("CODEX_HOME", str(codex))
    project = claude / "projects" / claude_project_dir("/home/jiwoo/src/minishop")
    project.mkdir(parents=True)
    shutil.copy(SAMPLES / "claude-code.jsonl", project / f"{CLAUDE_ID}.jsonl")
    # A subagent's log is not a session anyone resumes.
    shutil.copy(SAMPLES / "claude-code.jsonl", project / "agent-a1b2c3d4.jsonl")
    day = codex / "sessions" / "2026" / "03" / "23"
    day.mkdir(parents=True)
    shutil.copy(SAMPLES / "codex.jsonl", day / f"rollout-2026-03-23T08-41-07-{CODEX_ID}.jsonl")
    os.utime(day / f"rollout-2026-03-23T08-41-07-{CODEX_ID}.jsonl", (1_800_000_000, 1_800_000_000))
    os.utime(project / f"{CLAUDE_ID}.jsonl", (1_700_000_000, 1_700_000_000))
    return claude, codex


def test_both_clients_sessions_are_found_newest_first_without_subagent_logs(homes: tuple[Path, Path]) -> None:
    found = find_sessions()
    assert [(s.id, s.agent) for s in found] == [(CODEX_ID, "codex"), (CLAUDE_ID, "claude-code")]
    assert found[0].project == "/home/dev/inkpost"
    assert found[1].project == "/home/jiwoo/src/minishop"
    assert [s.id for s in find_sessions("codex")] == [CODEX_ID]
    assert [s.id for s in find_sessions(project="/home/jiwoo/src/minishop")] == [CLAUDE_ID]


def test_a_session_is_named_by_id_unique_prefix_or_latest(homes: tuple[Path, Path]) -> None:
    assert resolve_session(CLAUDE_ID).agent == "claude-code"
    assert resolve_session("c6bf").id == CODEX_ID
    assert resolve_session("latest", cwd="/home/dev/inkpost").id == CODEX_ID
    assert resolve_session("latest", cwd="/home/jiwoo/src/minishop").id == CLAUDE_ID
    with pytest.raises(InputError, match="no such file or session"):
        resolve_session("deadbeef")
    with pytest.raises(InputError, match="no Claude Code or Codex session of this directory"):
        resolve_session("latest", cwd="/nowhere")


def test_an_ambiguous_prefix_names_the_candidates(homes: tuple[Path, Path]) -> None:
    claude, _ = homes
    other = "68138cc8-0000-4000-8000-000000000000"
    shutil.copy(SAMPLES / "claude-code.jsonl", next((claude / "projects").iterdir()) / f"{other}.jsonl")
    with pytest.raises(InputError, match=f"names 2 sessions: .*{other}"):
        resolve_session("68138cc8")


def test_commands_take_a_session_id_prefix_or_latest(
    homes: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    code, out, _ = run(capsys, "analyze", CLAUDE_ID[:8], "-f", "json")
    assert code == 0
    assert json.loads(out)["files"][0]["path"].endswith(f"{CLAUDE_ID}.jsonl")
    # latest: the newest session recorded in the current directory (here the Codex one).
    work = tmp_path / "inkpost"
    work.mkdir()
    rollout = next((homes[1] / "sessions").rglob("*.jsonl"))
    rollout.write_text(rollout.read_text().replace("/home/dev/inkpost", str(work)))
    monkeypatch.chdir(work)
    code, out, _ = run(capsys, "analyze", "latest", "-f", "json")
    assert code == 0
    assert json.loads(out)["files"][0]["format"] == "codex"
    code, _, err = run(capsys, "analyze", "0badc0de")
    assert code == 3
    assert "0badc0de: no such file or session" in err


def test_single_path_commands_take_a_session_id_too(
    homes: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The README: every command that takes a PATH takes a session id, a prefix or latest. replay, remind,
    # repair and restore said "no such file".
    rules = tmp_path / "rules.toml"
    rules.write_text('[[reminder]]\nid = "x"\nevery_n_turns = 2\nmessage = "m"\n', encoding="utf-8")
    archive = str(tmp_path / "archive")
    code, out, _ = run(capsys, "replay", CLAUDE_ID[:8], "-f", "json")
    assert code == 0
    assert json.loads(out)["path"].endswith(f"{CLAUDE_ID}.jsonl")
    code, out, _ = run(capsys, "remind", CODEX_ID[:8], "--rules", str(rules), "-f", "json")
    assert code == 0
    assert json.loads(out)["format"] == "codex"
    code, _, _ = run(capsys, "repair", CLAUDE_ID, "-o", str(tmp_path / "r.jsonl"), "--archive", archive, "-q")
    assert code == 0
    session = resolve_session(CLAUDE_ID).path
    original = session.read_bytes()
    code, _, _ = run(capsys, "compact", CLAUDE_ID[:8], "--in-place", "-s", "fifo", "--target-tokens", "4000",
                     "--archive", archive, "-q")  # fmt: skip
    assert code == 0
    assert session.read_bytes() != original
    code, _, _ = run(
        capsys, "restore", CLAUDE_ID[:8], "-o", str(tmp_path / "back.jsonl"), "--archive", archive
    )
    assert code == 0
    assert (tmp_path / "back.jsonl").read_bytes() == original


def test_a_file_of_that_name_wins_over_a_session(
    homes: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(SAMPLES / "chat-openai.jsonl", tmp_path / "latest")
    code, out, _ = run(capsys, "analyze", "latest", "-f", "json")
    assert code == 0
    assert json.loads(out)["files"][0]["format"] != "codex"


def test_sessions_lists_live_context_per_session(
    homes: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "sessions", "-f", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "ctxc.sessions/1"
    rows = doc["sessions"]
    assert [r["id"] for r in rows] == [CODEX_ID, CLAUDE_ID]
    codex = rows[0]
    code, out, _ = run(capsys, "analyze", codex["path"], "-f", "json")
    analysis = json.loads(out)["files"][0]
    assert codex["tokens"] == analysis["total_tokens"] > 0
    assert codex["cost_usd"] == analysis["recorded_usage"]["cost"]["usd"] > 0
    assert codex["resume"] == f"codex resume {CODEX_ID}"
    assert rows[1]["resume"] == f"claude --resume {CLAUDE_ID}"
    code, out, _ = run(capsys, "sessions", "--agent", "claude-code", "--since", "2025-01-01", "-f", "csv")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("id,agent,project,last_activity")
    assert len(lines) == 1  # the Claude session's mtime is 2023
    code, _, err = run(capsys, "sessions", "--since", "yesterday")
    assert code == 2
    assert "--since 'yesterday'" in err
    code, _, err = run(capsys, "sessions", "--agent", "cursor")
    assert code == 2
    assert "unknown agent 'cursor'" in err


def test_sessions_table_fits_80_columns_with_whole_values(
    homes: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "sessions", "-f", "table")
    assert code == 0
    assert all(len(line) <= 80 for line in out.splitlines())
    for value in ("/home/dev/inkpost", "/home/jiwoo/src/minishop", "codex", "claude-code", CODEX_ID[:8]):
        assert value in out


def test_sessions_table_sizes_are_in_decimal_units_as_labelled(
    homes: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # KB is 1,000 bytes, as MB is 1,000,000 for --max-line-mb: not 1,024 under a KB label.
    monkeypatch.setenv("COLUMNS", "120")
    code, out, _ = run(capsys, "sessions", "-f", "table")
    assert code == 0
    for sample in ("codex.jsonl", "claude-code.jsonl"):
        size = (SAMPLES / sample).stat().st_size
        assert f"{size / 1000:.1f} KB" in out, (sample, size, out)


@pytest.fixture
def seoul(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Asia/Seoul")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_sessions_table_shows_the_last_activity_in_local_time(
    homes: tuple[Path, Path], capsys: pytest.CaptureFixture[str], seoul: None
) -> None:
    # The codex rollout's mtime is 1,800,000,000: 08:00 UTC, 17:00 in Seoul, where the user reads the table.
    code, out, _ = run(capsys, "sessions", "-f", "table")
    assert code == 0
    assert "2027-01-15 17:00" in out
    code, out, _ = run(capsys, "sessions", "-f", "json")
    assert json.loads(out)["sessions"][0]["last_activity"] == "2027-01-15T08:00:00Z"  # data stays UTC


def test_fork_writes_a_new_session_beside_the_original(
    homes: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    claude, _ = homes
    original = next((claude / "projects").rglob(f"{CLAUDE_ID}.jsonl"))
    before = original.read_bytes()
    code, out, _ = run(capsys, "compact", CLAUDE_ID[:8], "--fork", "-s", "fifo", "--target-tokens", "4000")
    assert code == 0
    new_id = out.split()[-1]
    assert out == f"claude --resume {new_id}\n"
    fork = original.with_name(f"{new_id}.jsonl")
    records = [json.loads(line) for line in fork.read_text().splitlines()]
    assert {r["sessionId"] for r in records if "sessionId" in r} == {new_id}
    assert original.read_bytes() == before
    assert resolve_session(new_id).path == fork
    # Codex: a new rollout, named by its new id, whose session_meta carries it.
    code, out, _ = run(capsys, "compact", CODEX_ID, "--fork", "-s", "fifo", "--target-tokens", "4000")
    assert code == 0
    codex_id = out.split()[-1]
    assert out == f"codex resume {codex_id}\n"
    rollout = resolve_session(codex_id).path
    assert rollout.name.endswith(f"-{codex_id}.jsonl")
    meta = json.loads(rollout.read_text().splitlines()[0])
    assert meta["payload"]["id"] == codex_id
    assert CODEX_ID not in rollout.read_text()


@pytest.mark.parametrize(
    "extra", [["-o", "x.jsonl"], ["--in-place"], ["--out-dir", "out"]], ids=["output", "in-place", "out-dir"]
)
def test_fork_refuses_an_output_of_its_own(
    homes: tuple[Path, Path], capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    code, _, err = run(capsys, "compact", CLAUDE_ID, "--fork", *extra)
    assert code == 2
    assert "--fork" in err


def test_fork_needs_a_session_format(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compact", str(SAMPLES / "chat-openai.jsonl"), "--fork")
    assert code == 2
    assert "--fork needs a Claude Code session or a Codex rollout" in err


def _prompt(after: dict[str, object], text: str) -> bytes:
    """The line Claude Code writes for a prompt that follows ``after``, the log's last record."""
    record = {key: after[key] for key in ("isSidechain", "userType", "cwd", "sessionId", "version")}
    record |= {"parentUuid": after["uuid"], "type": "user", "message": {"role": "user", "content": text}}
    record |= {"uuid": "5d1f0c2e-7b3a-4c9e-9f21-0a8d6b4e3c17", "timestamp": "2026-03-14T01:15:02.000Z"}
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


@pytest.fixture
def live(homes: tuple[Path, Path]) -> tuple[Path, bytes]:
    """The Claude session as its agent is writing a prompt: half a record, with no line end yet."""
    claude, _ = homes
    log = next((claude / "projects").rglob(f"{CLAUDE_ID}.jsonl"))
    line = _prompt(json.loads(log.read_bytes().splitlines()[-1]), "now run the whole test suite")
    return log, line


def test_a_session_being_written_is_listed_from_its_complete_lines(
    homes: tuple[Path, Path], live: tuple[Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    # An agent appends its log a record at a time: the last line may end mid-record (exit 12 before).
    log, line = live
    code, out, _ = run(capsys, "sessions", "-f", "json")
    assert code == 0
    before = json.loads(out)["sessions"]
    rollout = Path(before[0]["path"])
    with log.open("ab") as f:
        f.write(line[: len(line) // 2])
    with rollout.open("ab") as f:
        f.write(b'{"timestamp":"2026-03-23T08:42:50.000Z","type":"response_item","payload":{"type":"mess')
    code, out, err = run(capsys, "sessions", "-f", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["errors"] == []
    fields = ("messages", "tokens", "stage", "cost_usd")  # the order is by last activity: by id here
    assert {r["id"]: [r[k] for k in fields] for r in doc["sessions"]} == {
        r["id"]: [r[k] for k in fields] for r in before
    }
    # analyze and check read it as sessions does: not an error, and not an invalid line either.
    for tokenizer in ("o200k_base", "usage"):
        code, out, err = run(capsys, "analyze", str(log), "--tokenizer", tokenizer, "-f", "json")
        assert (code, err) == (0, "")
        assert json.loads(out)["files"][0]["skipped_lines"] == 0
    code, _, err = run(capsys, "check", str(log), str(rollout), "--max-usage", "0.9")
    assert (code, err) == (0, "")


def test_a_session_that_grows_while_it_is_read_is_read_to_its_last_complete_line(
    homes: tuple[Path, Path],
    live: tuple[Path, bytes],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The agent finishes its prompt and starts the answer after ctxc hashed the log, before it reads it.
    import ctxc.analysis

    log, line = live
    with log.open("ab") as f:
        f.write(line[:40])
    hashed = ctxc.analysis.scan_key

    def hash_then_grow(path: str, *args: object) -> str | None:
        key = hashed(path, *args)  # type: ignore[arg-type]
        if path == str(log):
            with log.open("ab") as f:
                f.write(line[40:] + b'{"parentUuid":"5d1f0c2e-7b3a-4c9e-9f21-0a8d6b4e3c17","type":"assis')
        return key

    monkeypatch.setattr(ctxc.analysis, "scan_key", hash_then_grow)
    code, out, err = run(capsys, "sessions", "--agent", "claude-code", "-f", "json", "--jobs", "1")
    assert (code, err) == (0, "")
    [row] = json.loads(out)["sessions"]
    assert row["messages"] == 24  # the sample's 23 and the prompt finished while ctxc looked


def test_the_reader_stops_where_the_file_ended_when_it_got_there(live: tuple[Path, bytes]) -> None:
    # The agent writes while ctxc reads: it finishes one record and starts the next.
    from ctxc.reader import iter_records, open_binary

    log, line = live
    complete = len(log.read_bytes().splitlines())
    with log.open("ab") as f:
        f.write(line[:40])
    name, handle = open_binary(log)
    with handle:
        records = iter_records(handle, name)
        first = next(records)
        with log.open("ab") as f:
            f.write(line[40:] + line[:40])
        rest = list(records)
    assert [first.line, *(r.line for r in rest)] == list(range(1, complete + 2))
    assert json.loads(rest[-1].raw)["message"]["content"] == "now run the whole test suite"


def test_a_last_line_that_is_no_record_is_still_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only a record cut off ({ and not yet JSON) is a line being written; other text is bad input.
    log = tmp_path / "chat.jsonl"
    log.write_bytes(b'{"role": "user", "content": "hi"}\nnot json')
    code, _, err = run(capsys, "analyze", str(log))
    assert code == 3
    assert f"{log}:2: not valid JSON" in err


def test_a_fork_of_a_session_being_written_ends_on_its_last_complete_record(
    live: tuple[Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    # The resumed fork is appended to: half a record left at its end would swallow the next one.
    log, line = live
    with log.open("ab") as f:
        f.write(line[:40])
    code, out, _ = run(capsys, "compact", CLAUDE_ID, "--fork", "-s", "fifo", "--target-tokens", "4000")
    assert code == 0
    fork = resolve_session(out.split()[-1]).path.read_bytes()
    assert fork.endswith(b"\n")
    assert all(json.loads(raw) for raw in fork.splitlines())
