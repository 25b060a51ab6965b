"""`ctxc hooks install claude-code` proven with the real Claude Code: a `/compact` fires the PreCompact
hook, and what the compaction removed is then found by `ctxc search`, with no flag, from any directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clients import (
    CLAUDE,
    Unavailable,
    claude_env,
    claude_project_dir,
    claude_session_id,
    install,
    run_ctxc,
    run_isolated,
)
from conftest import ROOT, SAMPLES

pytestmark = pytest.mark.realclient

# A tool result of the sample session, before any compaction.
NEEDLE = "test_krw_coupon_rounds_half_up"


def test_a_compact_in_claude_code_fires_the_hook_and_search_finds_what_it_removed(tmp_path: Path) -> None:
    try:
        exe = install(CLAUDE)
    except Unavailable as exc:
        pytest.skip(f"{CLAUDE.spec} unavailable: {exc}")
    home, project, elsewhere = tmp_path / "home", tmp_path / "project", tmp_path / "elsewhere"
    for d in (project, elsewhere):
        d.mkdir()
    log = SAMPLES / "claude-code.jsonl"
    session = claude_session_id(log)
    assert session is not None
    stored = claude_project_dir(home, project) / f"{session}.jsonl"
    stored.parent.mkdir(parents=True)
    shutil.copyfile(log, stored)
    # The user's own environment: their HOME (so the per-user archive), ctxc importable from this checkout.
    user_env = {"HOME": str(home)}
    settings = home / ".claude" / "settings.json"
    others = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}
    settings.write_text(json.dumps(others))
    assert run_ctxc(["hooks", "install", "claude-code"], user_env, elsewhere).returncode == 0

    run = run_isolated(
        [str(exe), "-p", "/compact", "--output-format", "json", "--resume", session],
        cwd=project,
        env=claude_env(home) | {"PYTHONPATH": str(ROOT)},
        work=tmp_path,
    )
    assert run.ok, run.describe()
    assert '"compact_boundary"' in stored.read_text()  # Claude Code did compact the session

    found = run_ctxc(["search", NEEDLE, "-f", "json"], user_env, elsewhere)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits, "the pre-compaction transcript is not in the archive"
    ref = hits[0]["ref"]
    shown = run_ctxc(["show", ref, "-f", "text"], user_env, elsewhere)
    assert shown.returncode == 0
    assert NEEDLE in shown.stdout
    manifest = (home / ".local" / "share" / "ctxc" / "archive" / "manifest.jsonl").read_text()
    assert '"hook":"PreCompact"' in manifest

    assert run_ctxc(["hooks", "uninstall", "claude-code"], user_env, elsewhere).returncode == 0
    assert json.loads(settings.read_text()) == others
