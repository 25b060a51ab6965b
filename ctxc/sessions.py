"""Where Claude Code (``$CLAUDE_CONFIG_DIR/projects/<cwd>/<id>.jsonl``) and Codex
(``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``) keep their sessions, and finding one by
id, id prefix or ``latest``. Subagent logs are not sessions a user resumes, so they are not listed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ctxc.archive_store import jsonl_objects
from ctxc.errors import InputError, UsageError

AGENTS = ("claude-code", "codex")
#: The newest session of this directory's project.
LATEST = "latest"
#: Shorter prefixes match too much to be a deliberate reference.
MIN_PREFIX = 4
#: How much of a file's head is read for its working directory (a Codex ``session_meta`` is long).
_HEAD_BYTES = 1 << 20
_HEAD_LINES = 30
_CODEX_FILE = re.compile(r"rollout-.*([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


@dataclass(frozen=True)
class Session:
    """One session file of a coding agent; ``project`` is the working directory it recorded, ``modified``
    its last activity."""

    id: str
    agent: str
    path: Path
    project: str | None
    modified: float
    size: int

    @property
    def resume_command(self) -> str:
        return f"claude --resume {self.id}" if self.agent == "claude-code" else f"codex resume {self.id}"


def claude_home() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def claude_project_dir(cwd: str | os.PathLike[str]) -> str:
    """The directory name Claude Code files a working directory's sessions under (non-alphanumerics as -)."""
    return _NOT_ALNUM.sub("-", os.fspath(cwd))


def _cwd(agent: str, path: Path) -> str | None:
    """The working directory a session file recorded: on any Claude Code record, in Codex's session_meta."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError:
        return None
    for n, record in jsonl_objects(head):
        if n > _HEAD_LINES:
            return None
        if agent == "claude-code" and isinstance(record.get("cwd"), str):
            return str(record["cwd"])
        payload = record.get("payload")
        if agent == "codex" and record.get("type") == "session_meta" and isinstance(payload, dict):
            cwd = payload.get("cwd")
            return cwd if isinstance(cwd, str) else None
    return None


def _session(agent: str, session_id: str, path: Path) -> Session | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return Session(session_id, agent, path, _cwd(agent, path), st.st_mtime, st.st_size)


def _listing(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def claude_sessions(project: str | None = None) -> list[Session]:
    """Claude Code's sessions, of one working directory's project or of all."""
    root = claude_home() / "projects"
    if project is not None:
        dirs = [root / claude_project_dir(project)]
    else:
        dirs = [root / n for n in _listing(root) if (root / n).is_dir()]
    files = (d / n for d in dirs for n in _listing(d) if n.endswith(".jsonl") and not n.startswith("agent-"))
    found = (_session("claude-code", f.stem, f) for f in files)
    # Two directories can share a project name ("/a/b" and "/a-b"): the recorded cwd tells them apart.
    return [s for s in found if s is not None and (project is None or s.project in (None, project))]


def codex_sessions(project: str | None = None) -> list[Session]:
    """Codex's rollouts, of one working directory or of all."""
    found: list[Session | None] = []
    home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    for directory, _, names in sorted(os.walk(home / "sessions")):
        for name in sorted(names):
            if match := _CODEX_FILE.fullmatch(name):
                found.append(_session("codex", match.group(1), Path(directory) / name))
    return [s for s in found if s is not None and (project is None or s.project == project)]


def find_sessions(agent: str | None = None, project: str | None = None) -> list[Session]:
    """Every session of ``agent`` (both when None), newest first; ``project`` keeps one directory's."""
    if agent is not None and agent not in AGENTS:
        raise UsageError(f"unknown agent {agent!r} (choose {', '.join(AGENTS)})")
    if project is not None:
        project = os.path.abspath(project)
    found: list[Session] = []
    if agent in (None, "claude-code"):
        found += claude_sessions(project)
    if agent in (None, "codex"):
        found += codex_sessions(project)
    return sorted(found, key=lambda s: (-s.modified, s.id))


def looks_like_reference(text: str) -> bool:
    """Whether a command-line argument that names no file could name a session."""
    return text == LATEST or (len(text) >= MIN_PREFIX and re.fullmatch(r"[0-9a-fA-F-]+", text) is not None)


def session_path(path: str) -> str:
    """``path``, or the file of the session it names (an id, a unique prefix or ``latest``) when no file
    has that name: what every command that takes a PATH takes."""
    if path == "-" or os.path.exists(path) or not looks_like_reference(path):
        return path
    return str(resolve_session(path).path)


def resolve_session(reference: str, *, cwd: str | None = None) -> Session:
    """The session ``reference`` names: ``latest`` (the newest of the project of ``cwd``), an id, or a
    prefix of exactly one id."""
    if reference == LATEST:
        project = os.path.abspath(cwd or os.getcwd())
        mine = find_sessions(project=project)
        if not mine:
            raise InputError(f"no Claude Code or Codex session of this directory ({project})", path=reference)
        return mine[0]
    wanted = reference.lower()
    matches = [s for s in find_sessions() if s.id.lower().startswith(wanted)]
    exact = [s for s in matches if s.id.lower() == wanted]
    if len(exact) == 1 or len(matches) == 1:
        return (exact or matches)[0]
    if not matches:
        raise InputError("no such file or session", path=reference)
    names = ", ".join(f"{s.id} ({s.agent})" for s in matches[:5])
    more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
    raise InputError(f"names {len(matches)} sessions: {names}{more}; give more of the id", path=reference)
