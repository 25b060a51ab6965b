"""`ctxc hooks`: ctxc's Claude Code hooks are added once, removed exactly, and archive the session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES, run

OTHERS = {
    "model": "opus",
    "hooks": {
        "PreCompact": [
            {"matcher": "auto", "hooks": [{"type": "command", "command": "notify-send compacting"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "true"}]}],
    },
}


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    path = tmp_path / "claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(OTHERS, indent=2))
    return path


def _commands(doc: dict[str, object], event: str) -> list[str]:
    groups = doc["hooks"][event]  # type: ignore[index]
    return [h["command"] for g in groups for h in g["hooks"]]  # type: ignore[index, union-attr]


def test_install_adds_both_hooks_once_and_keeps_the_others(
    settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "hooks", "install", "claude-code")[0] == 0
    doc = json.loads(settings.read_text())
    assert doc["model"] == "opus"
    assert _commands(doc, "PreCompact") == ["notify-send compacting", f"{sys.executable} -m ctxc hooks run"]
    assert _commands(doc, "SessionEnd") == [f"{sys.executable} -m ctxc hooks run"]
    assert doc["hooks"]["Stop"] == OTHERS["hooks"]["Stop"]  # type: ignore[index]
    before = settings.read_bytes()
    code, _, err = run(capsys, "hooks", "install", "claude-code")
    assert code == 0
    assert f"ctxc: the hooks are already installed in {settings}; nothing to change" in err
    assert settings.read_bytes() == before


def test_uninstall_removes_exactly_what_install_added(
    settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "hooks", "install", "claude-code")
    assert run(capsys, "hooks", "uninstall", "claude-code")[0] == 0
    assert json.loads(settings.read_text()) == OTHERS


def test_nothing_to_remove_is_said_in_words_dry_run_too(
    settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in ([], ["--dry-run"]):
        code, out, err = run(capsys, "hooks", "uninstall", "claude-code", *extra)
        assert code == 0
        assert out == ""
        assert f"ctxc: no ctxc hooks in {settings}; nothing to change" in err


def test_dry_run_prints_the_change_and_writes_nothing(
    settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = settings.read_bytes()
    code, out, _ = run(capsys, "hooks", "install", "claude-code", "--dry-run")
    assert code == 0
    assert out.startswith(f"--- {settings}")
    assert "+" in out
    assert "-m ctxc hooks run" in out
    assert settings.read_bytes() == before


def test_project_scope_and_a_missing_settings_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "hooks", "install", "claude-code", "--project")[0] == 0
    doc = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    assert set(doc["hooks"]) == {"PreCompact", "SessionEnd"}
    run(capsys, "hooks", "uninstall", "claude-code", "--project")
    assert json.loads((tmp_path / ".claude" / "settings.json").read_text()) == {}


def test_settings_kept_in_a_dotfiles_repo_stay_linked_and_keep_their_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # ~/.claude/settings.json is often a link into a dotfiles repository: the file it names changes.
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text(json.dumps(OTHERS, indent=2))
    real.chmod(0o644)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    link = tmp_path / "claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    assert run(capsys, "hooks", "install", "claude-code")[0] == 0
    assert link.is_symlink()
    assert _commands(json.loads(real.read_text()), "SessionEnd") == [f"{sys.executable} -m ctxc hooks run"]
    assert real.stat().st_mode & 0o777 == 0o644
    assert run(capsys, "hooks", "uninstall", "claude-code")[0] == 0
    assert link.is_symlink()
    assert json.loads(real.read_text()) == OTHERS
    assert sorted(p.name for p in real.parent.iterdir()) == ["settings.json"]  # no temporary file left


def test_settings_that_are_not_json_are_left_alone(
    settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings.write_text("{ not json")
    code, _, err = run(capsys, "hooks", "install", "claude-code")
    assert code == 3
    assert str(settings) in err
    assert settings.read_text() == "{ not json"


def _hook(payload: bytes, env_archive: Path) -> subprocess.CompletedProcess[bytes]:
    import os

    env = {**os.environ, "CTXC_ARCHIVE": str(env_archive), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "ctxc", "hooks", "run"],
        input=payload,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_the_hook_archives_the_session_and_search_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "archive"
    payload = {
        "session_id": "68138cc8-ffd2-4577-9120-9a555bb4d510",
        "transcript_path": str(SAMPLES / "claude-code.jsonl"),
        "hook_event_name": "PreCompact",
        "trigger": "manual",
    }
    done = _hook(json.dumps(payload).encode(), archive)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("CTXC_ARCHIVE", str(archive))
    code, out, _ = run(capsys, "search", "test_krw_coupon_rounds_half_up", "-f", "json")
    assert code == 0
    assert json.loads(out)["hits"]


@pytest.mark.parametrize("content", [b"", b"\n\n"])
def test_an_empty_session_is_said_and_nothing_is_archived(content: bytes, tmp_path: Path) -> None:
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(content)  # a session opened and closed before its first message
    payload = {"transcript_path": str(transcript), "hook_event_name": "SessionEnd"}
    done = _hook(json.dumps(payload).encode(), tmp_path / "archive")
    assert done.returncode == 0
    assert done.stderr.decode() == f"ctxc: SessionEnd: {transcript} is empty; nothing archived\n"
    assert not (tmp_path / "archive").exists()


@pytest.mark.parametrize("payload", [b"not json", b"{}", b'{"transcript_path": "/nonexistent/x.jsonl"}'])
def test_a_failing_hook_never_exits_2_which_would_block_the_compaction(
    payload: bytes, tmp_path: Path
) -> None:
    done = _hook(payload, tmp_path / "archive")
    assert done.returncode == 1
    assert done.stderr.decode().startswith("ctxc: hooks run:")
