"""``ctxc hooks``: archive Claude Code sessions before Claude compacts them (library: :mod:`ctxc.hooks`)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from ctxc.cli import options as opt
from ctxc.errors import CtxcError
from ctxc.output import write_stdout

EPILOG = opt.examples(
    "ctxc hooks install claude-code              # in ~/.claude/settings.json",
    "ctxc hooks install claude-code --project --dry-run",
    "ctxc hooks uninstall claude-code",
    note="The hooks run [bold]ctxc hooks run[/bold] on PreCompact and SessionEnd: the session is stored in "
    "the archive before /compact or auto-compact drops part of it, and ctxc search finds it afterwards.",
)


AgentArg = Annotated[
    Literal["claude-code"],
    typer.Argument(help="The client whose settings to change: claude-code.", metavar="AGENT"),
]
ProjectOpt = Annotated[
    bool,
    typer.Option("--project/--user", help="The project's .claude/settings.json, or the user's (default)."),
]
DryRunOpt = Annotated[bool, opt.flag("--dry-run", "Print the change as a diff; write nothing.")]

hooks_app = typer.Typer(
    help="Claude Code hooks that archive a session before it is compacted.", epilog=EPILOG
)

opt.app.add_typer(hooks_app, name="hooks")


def _change(install: bool, project: bool, dry_run: bool, quiet: bool) -> None:
    from ctxc.hooks import change_settings, settings_path

    change = change_settings(settings_path(project), install=install, dry_run=dry_run)
    if dry_run and change.changed:
        write_stdout(change.diff().encode())
    elif quiet:
        return
    elif change.changed:
        opt.note(f"ctxc: hooks {'installed in' if install else 'removed from'} {change.path}")
    else:  # dry run or not: say why nothing is printed or written
        where = (
            f"the hooks are already installed in {change.path}"
            if install
            else f"no ctxc hooks in {change.path}"
        )
        opt.note(f"ctxc: {where}; nothing to change")


@hooks_app.command(epilog=EPILOG)
def install(
    agent: AgentArg, project: ProjectOpt = False, dry_run: DryRunOpt = False, quiet: opt.QuietOpt = False
) -> None:
    """Add ctxc's PreCompact and SessionEnd hooks to Claude Code's settings (idempotent)."""
    _change(True, project, dry_run, quiet)


@hooks_app.command(epilog=EPILOG)
def uninstall(
    agent: AgentArg, project: ProjectOpt = False, dry_run: DryRunOpt = False, quiet: opt.QuietOpt = False
) -> None:
    """Remove exactly the hooks ctxc added; other hooks stay as they are."""
    _change(False, project, dry_run, quiet)


@hooks_app.command(epilog=EPILOG)
def run(archive: opt.ArchiveOpt = None, quiet: opt.QuietOpt = False) -> None:
    """What the hooks call: store the transcript the hook's JSON on stdin names in the archive.

    Any failure exits 1, never 2: exit 2 from a PreCompact hook would stop Claude Code's compaction.
    """
    from ctxc.hooks import archive_from_hook
    from ctxc.reader import read_all

    try:
        done = archive_from_hook(read_all("-")[1], archive)  # stdin closed: a CtxcError, as for a file
    except (CtxcError, OSError) as exc:
        opt.note(f"ctxc: hooks run: {exc}")
        raise typer.Exit(1) from None
    if quiet:
        return
    if done.archive_id is None:
        opt.note(f"ctxc: {done.event}: {done.transcript} is empty; nothing archived")
    else:
        opt.note(f"ctxc: {done.event}: {done.transcript} archived as {done.archive_id[:12]}")
