"""Claude Code hooks (``PreCompact``, ``SessionEnd``) that archive a session before Claude compacts it;
ctxc's entries are recognised by their command, so installing is idempotent."""

from __future__ import annotations

import difflib
import shlex
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ctxc.archive import Archive
from ctxc.errors import InputError, OutputError
from ctxc.output import write_atomic
from ctxc.sessions import claude_home

EVENTS = ("PreCompact", "SessionEnd")
RUN_COMMAND = "-m ctxc hooks run"
MAX_HOOK_INPUT = 1 << 20


@dataclass(frozen=True)
class SettingsChange:
    path: Path
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        before, after = self.before.splitlines(keepends=True), self.after.splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, after, fromfile=str(self.path), tofile=str(self.path)))


def settings_path(project: bool) -> Path:
    """Claude Code's settings: the project's (``./.claude/settings.json``) or the user's."""
    return (Path.cwd() / ".claude" if project else claude_home()) / "settings.json"


def _is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and str(hook.get("command", "")).endswith(RUN_COMMAND)


def with_hooks(settings: Mapping[str, Any], command: str) -> dict[str, Any]:
    """``settings`` with ctxc's hook on every event of :data:`EVENTS` (unchanged where one is there)."""
    out = orjson.loads(orjson.dumps(settings))  # a deep copy of plain JSON
    hooks = out.setdefault("hooks", {})
    for event in EVENTS:
        groups = hooks.setdefault(event, [])
        if not any(_is_ours(h) for g in groups for h in _hooks_of(g) or ()):
            groups.append({"matcher": "", "hooks": [{"type": "command", "command": command, "timeout": 120}]})
    return dict(out)


def _hooks_of(group: Any) -> list[Any] | None:
    inner = group.get("hooks") if isinstance(group, dict) else None
    return inner if isinstance(inner, list) else None


def without_hooks(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without ctxc's hooks (and without the groups and events they leave empty)."""
    out = orjson.loads(orjson.dumps(settings))
    hooks = out.get("hooks")
    for event, groups in list(hooks.items()) if isinstance(hooks, dict) else ():
        if not isinstance(groups, list):
            continue
        # A group that held only ctxc's hooks goes; in the others only ctxc's hooks go.
        kept = [
            g if (inner := _hooks_of(g)) is None else {**g, "hooks": [h for h in inner if not _is_ours(h)]}
            for g in groups
            if not ((inner := _hooks_of(g)) and all(_is_ours(h) for h in inner))
        ]
        if kept:
            hooks[event] = kept
        elif groups:
            del hooks[event]
    if hooks == {}:
        del out["hooks"]
    return dict(out)


def _read_settings(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    except OSError as exc:
        raise InputError(
            f"cannot read Claude Code's settings: {exc.strerror or exc}", path=str(path)
        ) from exc
    try:
        settings = orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON ({exc}); fix it first, ctxc leaves it as it is", path=str(path)
        ) from None
    if not isinstance(settings, dict):
        raise InputError("Claude Code's settings are not a JSON object", path=str(path))
    return text, settings


def change_settings(path: Path, *, install: bool, dry_run: bool = False) -> SettingsChange:
    """Add (``install``) or remove ctxc's hooks in the settings at ``path``; ``dry_run`` writes nothing."""
    before, settings = _read_settings(path)
    hooks = settings.get("hooks", {})
    if install and (
        not isinstance(hooks, dict) or any(not isinstance(hooks.get(e, []), list) for e in EVENTS)
    ):
        shape = "an object of event lists"
        raise InputError(f"'hooks' is not {shape}; fix it first, ctxc leaves it as it is", path=str(path))
    # This very Python runs the hooks, so a venv's ctxc is found whatever PATH holds.
    command = f"{shlex.quote(sys.executable)} {RUN_COMMAND}"
    new = with_hooks(settings, command) if install else without_hooks(settings)
    after = before if new == settings else orjson.dumps(new, option=orjson.OPT_INDENT_2).decode() + "\n"
    change = SettingsChange(path, before, after)
    if change.changed and not dry_run:
        # A link (into a dotfiles repository, say) is followed: the file it names changes, keeping its mode.
        target = path.resolve()
        try:
            mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o600
            write_atomic(target, after.encode(), mode=mode)
        except OSError as exc:
            raise OutputError(
                f"cannot write Claude Code's settings: {exc.strerror or exc}", path=str(path)
            ) from exc
    return change


@dataclass(frozen=True)
class Archived:
    archive_id: str | None  # None: the transcript was empty, so nothing was stored
    transcript: str
    event: str


def archive_from_hook(payload: bytes, archive: str | None = None) -> Archived:
    """Store the transcript a hook's JSON names in the archive (and so the search index)."""
    try:
        event = orjson.loads(payload[:MAX_HOOK_INPUT])
    except orjson.JSONDecodeError:
        raise InputError("the hook's input on stdin is not JSON", path="-") from None
    transcript = event.get("transcript_path") if isinstance(event, dict) else None
    if not isinstance(transcript, str) or not transcript:
        raise InputError("the hook's input names no transcript_path", path="-")
    try:
        data = Path(transcript).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the transcript: {exc.strerror or exc}", path=transcript) from exc
    name = str(event.get("hook_event_name") or "hook")
    if not data.strip():  # a session closed before its first message: nothing to keep or find
        return Archived(None, transcript, name)
    store = Archive.open(archive)
    ident = store.store(data)
    store.record_run(
        {
            "input_path": transcript,
            "archive_id": ident,
            "input_sha256": ident,
            "format": "claude-code",
            "hook": name,
            "session_id": event.get("session_id"),
        }
    )
    return Archived(ident, transcript, name)
