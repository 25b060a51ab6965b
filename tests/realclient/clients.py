"""The real Claude Code, Codex and pi CLIs: installed from npm into a cache, run isolated beside the fake API.

Each run happens in a fresh network namespace (``unshare -n``) where only ``lo`` is up, so the client can
reach nothing but 127.0.0.1; the fake API (tests/fake_anthropic.py) is started inside that namespace by
``sandbox.py``, because the host's loopback is not visible from a new namespace. Every subprocess has a
timeout, and the whole process group is killed when it expires.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wire import records

SANDBOX = Path(__file__).with_name("sandbox.py")
PORT = 38080  # sandbox.py serves here; the namespace is new, so the port is always free
API_KEY = "sk-test"
PROMPT = "continue"  # what the resumed session is asked; it marks the client's first real request
INSTALL_TIMEOUT = 600
RUN_TIMEOUT = 180
VERSION_TIMEOUT = 60


@dataclass(frozen=True)
class Client:
    name: str
    package: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"


CLAUDE = Client("claude-code", "@anthropic-ai/claude-code", "2.1.332")
CODEX = Client("codex", "@openai/codex", "0.171.0")
PI = Client("pi", "@mariozechner/pi-coding-agent", "0.73.1")


class Unavailable(Exception):
    """The clients cannot be installed or isolated here; the tests skip with this reason."""


def clients_dir() -> Path:
    return Path(os.environ.get("CTXC_CLIENTS_DIR") or Path.home() / ".cache" / "ctxc-test-clients")


def run_bounded(argv: Sequence[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` in its own process group, the whole group killed on timeout."""
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
        **kwargs,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def isolation_problem() -> str | None:
    """Why clients cannot run in a private network namespace here, or None when they can."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (needed to run the clients without network)"
    try:
        probe = run_bounded(["unshare", "-n", "--", "ip", "link", "set", "lo", "up"], timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`unshare -n` failed: {exc}"
    if probe.returncode != 0:
        return f"`unshare -n` needs root (or user namespaces): {probe.stderr.strip()[:200]}"
    return None


def _candidates(client: Client, prefix: Path) -> list[Path]:
    modules = prefix / "node_modules"
    if client is CLAUDE:
        # The platform package's native binary; the wrapper's bin/claude.exe is only a copy of it once
        # the wrapper's postinstall has run, which npm may skip.
        return [*sorted(modules.glob("@anthropic-ai/claude-code-*/claude")), modules / ".bin" / "claude"]
    return [modules / ".bin" / ("pi" if client is PI else "codex")]


def _isolated(argv: Sequence[str]) -> list[str]:
    return ["unshare", "-n", "--", *argv]


def _working(client: Client, prefix: Path) -> Path | None:
    for exe in _candidates(client, prefix):
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            continue
        try:
            got = run_bounded(_isolated([str(exe), "--version"]), timeout=VERSION_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if got.returncode == 0 and client.version in got.stdout + got.stderr:  # pi prints it on stderr
            return exe
    return None


def installed_or_skip(client: Client) -> Path:
    """:func:`install`, or the calling test skipped with the reason the client cannot be had."""
    import pytest  # only here: this module also runs as a script, without pytest

    try:
        return install(client)
    except Unavailable as exc:
        pytest.skip(f"{client.spec} unavailable: {exc}")


def install(client: Client) -> Path:
    """The client's executable, installed with npm into the cache on first use. Raises Unavailable."""
    problem = isolation_problem()
    if problem:
        raise Unavailable(problem)
    prefix = clients_dir() / f"{client.name}-{client.version}"
    exe = _working(client, prefix)
    if exe is not None:
        return exe
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable(f"npm is not installed (needed to install {client.spec})")
    # Install beside the final place, then rename: a killed install never looks like a finished one.
    staging = prefix.with_name(f"{prefix.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    argv = [
        npm,
        "install",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        "--prefix",
        str(staging),
        client.spec,
    ]
    try:
        done = run_bounded(argv, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        raise Unavailable(f"`npm install {client.spec}` took over {INSTALL_TIMEOUT} s") from None
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise Unavailable(f"`npm install {client.spec}` failed: {done.stderr.strip()[-300:]}")
    shutil.rmtree(prefix, ignore_errors=True)
    try:
        staging.rename(prefix)
    except OSError:  # another run finished first; use its copy
        shutil.rmtree(staging, ignore_errors=True)
    exe = _working(client, prefix)
    if exe is None:
        raise Unavailable(f"{client.spec} installed but does not run here (no binary for this platform?)")
    return exe


# --------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class Run:
    """One client run: how it ended and every request the fake API received."""

    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    requests: tuple[dict[str, Any], ...]
    problem: str = ""  # set when the client could not even be started (no session to resume, ...)

    @property
    def ok(self) -> bool:
        return not self.problem and not self.timed_out and self.returncode == 0

    def describe(self) -> str:
        if self.problem:
            return self.problem
        tail = (self.stderr.strip() or self.stdout.strip())[-600:]
        return f"exit {self.returncode}{' (timed out)' if self.timed_out else ''}: {tail}"


def run_isolated(argv: Sequence[str], *, cwd: Path, env: dict[str, str], work: Path) -> Run:
    """Run ``argv`` in a new network namespace with the fake API beside it (see sandbox.py)."""
    spec = work / "sandbox-spec.json"
    result = work / "sandbox-result.json"
    spec.write_text(
        json.dumps(
            {
                "argv": list(argv),
                "cwd": str(cwd),
                "env": env,
                "timeout": RUN_TIMEOUT,
                "api_key": API_KEY,
                "port": PORT,
                "result": str(result),
            }
        )
    )
    try:
        done = run_bounded(_isolated([sys.executable, str(SANDBOX), str(spec)]), timeout=RUN_TIMEOUT + 60)
    except subprocess.TimeoutExpired:
        return Run(None, True, "", "", (), problem="the sandbox itself timed out")
    if done.returncode != 0 or not result.is_file():
        return Run(None, False, done.stdout, done.stderr, (), problem=f"sandbox failed: {done.stderr[-600:]}")
    data = json.loads(result.read_text())
    return Run(
        data["returncode"],
        data["timed_out"],
        data["stdout"],
        data["stderr"],
        tuple(data["requests"]),
    )


def _base_env(home: Path) -> dict[str, str]:
    # Nothing of the developer's environment leaks in (API keys, proxies, config dirs): PATH only.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }


def run_ctxc(args: Sequence[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``ctxc ARGS`` as the user of a throwaway ``env`` (its HOME) runs it: none of the test run's own
    session, archive or data locations, and ctxc imported from this checkout."""
    mine = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "CTXC_ARCHIVE", "XDG_DATA_HOME")
    full = {k: v for k, v in os.environ.items() if k not in mine} | env
    full["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return subprocess.run(
        [sys.executable, "-m", "ctxc", *args],
        env=full,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def claude_env(home: Path) -> dict[str, str]:
    """Claude Code's environment for a run: the fake API, a test key, and no traffic of its own."""
    return _base_env(home) | {
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{PORT}",
        "ANTHROPIC_API_KEY": API_KEY,
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def codex_env(home: Path, codex_home: Path) -> dict[str, str]:
    """Codex's environment for a run: its home, and the key given as `codex exec` reads it (and as
    OPENAI_API_KEY too, as a user would)."""
    return _base_env(home) | {
        "CODEX_HOME": str(codex_home),
        "OPENAI_API_KEY": API_KEY,
        "CODEX_API_KEY": API_KEY,
    }


def claude_session_id(log: Path) -> str | None:
    """The session id Claude Code files the log under: the last main-chain record's ``sessionId``."""
    found = None
    for record in records(log):
        sid = record.get("sessionId")
        if isinstance(sid, str) and sid and not record.get("isSidechain"):
            found = sid
    return found


def claude_project_dir(home: Path, cwd: Path) -> Path:
    """Where Claude Code looks for a session started in ``cwd``."""
    return home / ".claude" / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


def resume_claude(exe: Path, log: Path, work: Path) -> Run:
    """``claude -p continue --resume <sessionId>`` on a copy of ``log``, in a throwaway HOME."""
    sid = claude_session_id(log)
    if sid is None:
        return Run(None, False, "", "", (), problem="no sessionId in the log")
    home, cwd = work / "home", work / "project"
    cwd.mkdir(parents=True, exist_ok=True)
    project = claude_project_dir(home, cwd)
    project.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(log, project / f"{sid}.jsonl")
    argv = [str(exe), "-p", PROMPT, "--output-format", "json", "--resume", sid]
    return run_isolated(argv, cwd=cwd, env=claude_env(home), work=work)


def codex_session(log: Path) -> tuple[str, str] | None:
    """The rollout's id and start time (from its ``session_meta``), or None when it has none."""
    for record in records(log):
        payload = record.get("payload")
        if record.get("type") == "session_meta" and isinstance(payload, dict):
            sid = payload.get("id")
            stamp = payload.get("timestamp") or record.get("timestamp")
            if (
                isinstance(sid, str)
                and isinstance(stamp, str)
                and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", stamp)
            ):
                return sid, stamp
            return None
    return None


# Codex features that would reach for a network service or start background work; a run needs none.
CODEX_FEATURES_OFF = (
    "apps",
    "plugins",
    "remote_plugin",
    "plugin_sharing",
    "in_app_updates",
    "daemon_auto_start",
    "api_key_model_discovery",
    "enable_request_compression",  # keeps the recorded bodies plain JSON
    "unbounded_connection_retries",  # a broken fake must fail the run, not retry forever
    "shell_snapshot",
)


def codex_config() -> str:
    """config.toml for a run: the built-in openai provider (a custom provider is refused on resume)."""
    features = "".join(f"{name} = false\n" for name in CODEX_FEATURES_OFF)
    return (
        'model_provider = "openai"\n'
        f'openai_base_url = "http://127.0.0.1:{PORT}/v1"\n'
        "check_for_update_on_startup = false\n"
        "\n[analytics]\nenabled = false\n"
        "\n[feedback]\nenabled = false\n"
        f"\n[features]\n{features}"
    )


def resume_codex(exe: Path, log: Path, work: Path) -> Run:
    """``codex exec resume <id> continue`` on a copy of ``log``, in a fresh CODEX_HOME."""
    session = codex_session(log)
    if session is None:
        return Run(None, False, "", "", (), problem="no session_meta with an id and timestamp")
    sid, stamp = session
    home, codex_home, cwd = work / "home", work / "codex-home", work / "project"
    for d in (home, cwd):
        d.mkdir(parents=True, exist_ok=True)
    day = codex_home / "sessions" / stamp[:4] / stamp[5:7] / stamp[8:10]
    day.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(log, day / f"rollout-{stamp[:19].replace(':', '-')}-{sid}.jsonl")
    (codex_home / "config.toml").write_text(codex_config())
    env = codex_env(home, codex_home)
    argv = [str(exe), "exec", "--skip-git-repo-check", "--json", "resume", sid, PROMPT]
    return run_isolated(argv, cwd=cwd, env=env, work=work)


def pi_env(home: Path, agent_dir: Path) -> dict[str, str]:
    """pi's environment for a run: its agent dir, the key of its built-in anthropic provider, and its
    startup network work (version check, package updates, tool downloads, install telemetry) off."""
    return _base_env(home) | {
        "PI_CODING_AGENT_DIR": str(agent_dir),
        "ANTHROPIC_API_KEY": API_KEY,
        "PI_OFFLINE": "1",
        "PI_TELEMETRY": "0",
    }


def pi_session_copy(log: Path, session: Path, cwd: Path) -> None:
    """``log`` copied to ``session`` with its header's ``cwd`` set to ``cwd``: pi refuses to resume a
    session whose working directory does not exist here. Every other line is copied byte for byte."""
    lines = log.read_bytes().splitlines(keepends=True)
    try:
        header = json.loads(lines[0]) if lines else None
    except ValueError:
        header = None
    if isinstance(header, dict) and header.get("type") == "session":
        header["cwd"] = str(cwd)
        lines[0] = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    session.parent.mkdir(parents=True, exist_ok=True)
    session.write_bytes(b"".join(lines))


def resume_pi(exe: Path, log: Path, work: Path) -> Run:
    """``pi -p continue --session <file>`` on a copy of ``log``, in a throwaway HOME whose models.json
    points pi's built-in anthropic provider at the fake (pi keeps the session's own model)."""
    home, cwd = work / "home", work / "project"
    agent = home / ".pi" / "agent"
    for d in (agent, cwd):
        d.mkdir(parents=True, exist_ok=True)
    provider = {"anthropic": {"baseUrl": f"http://127.0.0.1:{PORT}"}}
    (agent / "models.json").write_text(json.dumps({"providers": provider}))
    session = agent / "sessions" / log.name
    pi_session_copy(log, session, cwd)
    argv = [str(exe), "-p", PROMPT, "--session", str(session)]
    return run_isolated(argv, cwd=cwd, env=pi_env(home, agent), work=work)


def main() -> int:
    """Install the clients into the cache, as .ci/run does before the tests; unavailable is no error."""
    for client in (CLAUDE, CODEX, PI):
        try:
            print(f"realclient: {client.spec} ready: {install(client)}")
        except Unavailable as exc:
            print(f"realclient: {client.spec} unavailable, its tests will be skipped: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
