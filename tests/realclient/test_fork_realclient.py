"""`ctxc compact SESSION --fork` and `--in-place`, proven with the real clients: the fork resumes by its
new id and its first request carries ctxc's output; the original still resumes as it was; in place
keeps the id."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import wire
from clients import (
    CLAUDE,
    CODEX,
    PROMPT,
    Client,
    Unavailable,
    claude_env,
    claude_project_dir,
    claude_session_id,
    codex_config,
    codex_env,
    codex_session,
    install,
    run_ctxc,
    run_isolated,
)
from conftest import SAMPLES

pytestmark = pytest.mark.realclient

MARKER = "earlier messages"  # fifo's placeholder: "[ctxc] N earlier messages (indexes …) were removed"


def _exe(client: Client) -> Path:
    try:
        return install(client)
    except Unavailable as exc:
        pytest.skip(f"{client.spec} unavailable: {exc}")


def _half_of_live(lab: Claude | Codex) -> str:
    done = run_ctxc(["analyze", lab.session, "-f", "json"], lab.env, lab.cwd)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["files"][0]["total_tokens"] // 2)


def _text(body: dict[str, object] | None) -> str:
    return json.dumps(body, ensure_ascii=False)


class Claude:
    def __init__(self, tmp: Path) -> None:
        self.exe = _exe(CLAUDE)
        self.tmp, self.home, self.cwd = tmp, tmp / "home", tmp / "project"
        self.cwd.mkdir()
        self.dir = claude_project_dir(self.home, self.cwd)
        self.dir.mkdir(parents=True)
        log = SAMPLES / "claude-code.jsonl"
        sid = claude_session_id(log)
        assert sid is not None
        self.session = sid
        shutil.copyfile(log, self.dir / f"{sid}.jsonl")
        self.env = {"HOME": str(self.home)}

    def resume(self, session: str, name: str) -> dict[str, object] | None:
        work = self.tmp / name
        work.mkdir()
        env = claude_env(self.home)
        argv = [str(self.exe), "-p", PROMPT, "--output-format", "json", "--resume", session]
        run = run_isolated(argv, cwd=self.cwd, env=env, work=work)
        assert run.ok, run.describe()
        return wire.first_request(run.requests, "/v1/messages", PROMPT)

    def original(self) -> Path:
        return self.dir / f"{self.session}.jsonl"


class Codex:
    def __init__(self, tmp: Path) -> None:
        self.exe = _exe(CODEX)
        self.tmp, self.home, self.codex_home, self.cwd = (
            tmp,
            tmp / "home",
            tmp / "codex-home",
            tmp / "project",
        )
        for d in (self.home, self.cwd):
            d.mkdir()
        log = SAMPLES / "codex.jsonl"
        found = codex_session(log)
        assert found is not None
        self.session, stamp = found
        day = self.codex_home / "sessions" / stamp[:4] / stamp[5:7] / stamp[8:10]
        day.mkdir(parents=True)
        self.path = day / f"rollout-{stamp[:19].replace(':', '-')}-{self.session}.jsonl"
        shutil.copyfile(log, self.path)
        (self.codex_home / "config.toml").write_text(codex_config())
        self.env = {"HOME": str(self.home), "CODEX_HOME": str(self.codex_home)}

    def resume(self, session: str, name: str) -> dict[str, object] | None:
        work = self.tmp / name
        work.mkdir()
        env = codex_env(self.home, self.codex_home)
        argv = [str(self.exe), "exec", "--skip-git-repo-check", "--json", "resume", session, PROMPT]
        run = run_isolated(argv, cwd=self.cwd, env=env, work=work)
        assert run.ok, run.describe()
        return wire.first_request(run.requests, "/v1/responses", PROMPT)

    def original(self) -> Path:
        return self.path


@pytest.mark.parametrize("client", [Claude, Codex], ids=["claude-code", "codex"])
def test_a_fork_resumes_by_its_new_id_and_the_original_as_it_was(
    client: type[Claude | Codex], tmp_path: Path
) -> None:
    lab = client(tmp_path)
    baseline = lab.resume(lab.session, "baseline")  # the client has now seen (and indexed) the original
    assert baseline is not None
    before = lab.original().read_bytes()  # as the client left it (a resume appends its turn)
    done = run_ctxc(
        ["compact", lab.session[:8], "--fork", "-s", "fifo", "--target-tokens", _half_of_live(lab)],
        lab.env,
        lab.cwd,
    )
    assert done.returncode == 0, done.stderr
    resume_command = done.stdout.strip()
    new_id = resume_command.split()[-1]
    assert new_id != lab.session
    assert resume_command in (f"claude --resume {new_id}", f"codex resume {new_id}")
    forked = lab.resume(new_id, "fork")
    assert forked is not None, "the fork did not resume by its new id"
    assert MARKER in _text(forked)
    assert len(_text(forked)) < len(_text(baseline))
    assert lab.original().read_bytes() == before  # ctxc left the original alone
    again = lab.resume(lab.session, "original")
    assert again is not None
    assert MARKER not in _text(again)
    assert len(_text(again)) == pytest.approx(len(_text(baseline)), rel=0.05)


@pytest.mark.parametrize("client", [Claude, Codex], ids=["claude-code", "codex"])
def test_in_place_keeps_the_id_after_archiving(client: type[Claude | Codex], tmp_path: Path) -> None:
    lab = client(tmp_path)
    archive = tmp_path / "archive"
    done = run_ctxc(
        [
            "compact",
            lab.session,
            "--in-place",
            "-s",
            "fifo",
            "--target-tokens",
            "3000",
            "--archive",
            str(archive),
        ],
        lab.env,
        lab.cwd,
    )
    assert done.returncode == 0, done.stderr
    resumed = lab.resume(lab.session, "in-place")
    assert resumed is not None
    assert MARKER in _text(resumed)
    assert any((archive / "objects").rglob("*"))
