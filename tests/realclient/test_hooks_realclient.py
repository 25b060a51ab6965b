"""`ctxc hooks install claude-code` proven with the real Claude Code: a `/compact` fires the PreCompact
hook, and what the compaction removed is then found by `ctxc search`, with no flag, from any directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clients import (
    API_KEY,
    CLAUDE,
    PORT,
    Unavailable,
    _base_env,
    claude_project_dir,
    claude_session_id,
    install,
    run_isolated,
)
from conftest import ROOT, SAMPLES

pytestmark = pytest.mark.realclient

# A tool result of the sample session, before any compaction.
NEEDLE = "test_krw_coupon_rounds_half_up"


def _ctxc(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxc", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


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
    # The user's own environment: their HOME, the per-user archive, ctxc importable from this checkout.
    env = {**_base_env(home), "PYTHONPATH": str(ROOT)}
    user_env = {k: v for k, v in os.environ.items() if k not in ("CTXC_ARCHIVE", "CLAUDE_CONFIG_DIR")}
    user_env |= env
    settings = home / ".claude" / "settings.json"
    others = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}
    settings.write_text(json.dumps(others))
    assert _ctxc(["hooks", "install", "claude-code"], user_env, elsewhere).returncode == 0

    run = run_isolated(
        [str(exe), "-p", "/compact", "--output-format", "json", "--resume", session],
        cwd=project,
        env=env
        | {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{PORT}",
            "ANTHROPIC_API_KEY": API_KEY,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        },
        work=tmp_path,
    )
    assert run.ok, run.describe()
    assert '"compact_boundary"' in stored.read_text()  # Claude Code did compact the session

    found = _ctxc(["search", NEEDLE, "-f", "json"], user_env, elsewhere)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits, "the pre-compaction transcript is not in the archive"
    ref = hits[0]["ref"]
    shown = _ctxc(["show", ref, "-f", "text"], user_env, elsewhere)
    assert shown.returncode == 0
    assert NEEDLE in shown.stdout
    manifest = (home / ".local" / "share" / "ctxc" / "archive" / "manifest.jsonl").read_text()
    assert '"hook":"PreCompact"' in manifest

    assert _ctxc(["hooks", "uninstall", "claude-code"], user_env, elsewhere).returncode == 0
    assert json.loads(settings.read_text()) == others
