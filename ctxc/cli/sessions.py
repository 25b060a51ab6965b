"""``ctxc sessions``: the Claude Code and Codex sessions on this machine, with their live context."""

from __future__ import annotations

import datetime as dt
import os
import sys
from dataclasses import replace
from typing import Annotated, Any

import typer

from ctxc.cli import options as opt
from ctxc.errors import UsageError
from ctxc.output import dumps, envelope, write_stdout
from ctxc.sessions import find_sessions

EPILOG = opt.examples(
    "ctxc sessions                                  # every session, newest first",
    "ctxc sessions --agent codex --since 2026-11-01 --format json",
    "ctxc sessions --project .                      # this directory's sessions",
    note="Sessions are read from $CLAUDE_CONFIG_DIR/projects (default ~/.claude) and $CODEX_HOME/sessions "
    "(default ~/.codex). Every command that takes a PATH also takes a session id, a unique prefix of "
    "one, or [bold]latest[/bold] (the newest session of the current directory): ctxc analyze latest, "
    "ctxc compact 03953bb8 --fork.",
)


def register(app: typer.Typer) -> None:
    app.command(name="sessions", epilog=EPILOG)(sessions)


_COLUMNS = ("id", "agent", "project", "last active")  # left-aligned in the table


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r}: give a date like 2026-11-30 or 2026-11-30T14:00") from None
    return when.timestamp()


def sessions(
    agent: Annotated[
        str | None, typer.Option(help="claude-code or codex (default: both).", show_default=False)
    ] = None,
    project: Annotated[
        str | None, typer.Option(help="Only the sessions whose working directory is DIR.", metavar="DIR")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only sessions active since DATE (ISO 8601).", metavar="DATE")
    ] = None,
    fmt: opt.OutFormatOpt = None,
    no_cache: opt.NoCacheOpt = False,
    jobs: opt.JobsOpt = None,
    prices: opt.PricesOpt = None,
    quiet: opt.QuietOpt = False,
) -> None:
    """List the Claude Code and Codex sessions, newest first, with what each sends its model next."""
    from ctxc.cli.batch import resolve_jobs, run_one_or_many
    from ctxc.jobs import AnalyzeJob, analyze_file

    after = _since(since)
    found = [s for s in find_sessions(agent, project) if after is None or s.modified >= after]
    out_fmt = fmt or (opt.OutFormat.table if sys.stdout.isatty() else opt.OutFormat.json)
    job = AnalyzeJob("", use_cache=not no_cache, top=0, prices=prices)
    paths = [str(s.path) for s in found]
    analyses: list[Any] = []
    errors: list[dict[str, Any]] = []
    failed = 0
    if paths:
        analyses, errors, failed = run_one_or_many(
            [(p, replace(job, path=p)) for p in paths],
            analyze_file,
            what="reading sessions",
            jobs=resolve_jobs(jobs, paths),
            quiet=quiet,
        )
    by_path = {a.path: a for a in analyses}
    rows = [_row(s, by_path.get(str(s.path))) for s in found]
    _emit(rows, out_fmt, errors=errors, exit_code=failed)
    if failed:
        raise typer.Exit(failed)


def _row(session: Any, analysis: Any) -> dict[str, Any]:
    modified = dt.datetime.fromtimestamp(session.modified, dt.UTC)
    row: dict[str, Any] = {
        "id": session.id,
        "agent": session.agent,
        "project": session.project,
        "last_activity": modified.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "bytes": session.size,
        "path": os.fspath(session.path),
        "resume": session.resume_command,
        "messages": None,
        "tokens": None,
        "window": None,
        "stage": None,
        "cost_usd": None,
    }
    if analysis is not None:
        row.update(
            messages=analysis.live_messages,
            tokens=analysis.total_tokens,
            window=analysis.window,
            stage=analysis.stage,
            cost_usd=analysis.usage.cost.usd if analysis.usage and analysis.usage.cost else None,
        )
    return row


def _emit(
    rows: list[dict[str, Any]], out_fmt: opt.OutFormat, *, errors: list[dict[str, Any]], exit_code: int
) -> None:
    if out_fmt is opt.OutFormat.json:
        write_stdout(dumps(envelope("sessions", sessions=rows, errors=errors, exit_code=exit_code)))
    elif out_fmt is opt.OutFormat.csv:
        import csv
        import io

        buffer = io.StringIO()
        fields = [
            "id",
            "agent",
            "project",
            "last_activity",
            "messages",
            "tokens",
            "window",
            "stage",
            "cost_usd",
            "bytes",
            "path",
        ]
        writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        write_stdout(buffer.getvalue().encode())
    else:
        _table(rows)


def _table(rows: list[dict[str, Any]]) -> None:
    """One table per project, so each row fits 80 columns with every value whole."""
    from rich.table import Table

    from ctxc.render import dollars, print_table

    console = opt.stdout_console()
    if not rows:
        console.print("no sessions found", markup=False)
        return
    width = _prefix_length([row["id"] for row in rows])
    projects: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        projects.setdefault(row["project"] or "(unknown directory)", []).append(row)
    for i, (project, members) in enumerate(projects.items()):
        if i:
            console.print()
        table = Table(title=project, title_justify="left", box=None, pad_edge=False)
        for name in ("id", "agent", "last active", "msgs", "tokens", "stage", "cost", "size"):
            table.add_column(name, justify="left" if name in _COLUMNS else "right", no_wrap=True)
        for row in members:
            table.add_row(
                *opt.cells(
                    row["id"][:width],
                    row["agent"],
                    row["last_activity"][:16].replace("T", " "),
                    _number(row["messages"]),
                    _number(row["tokens"]),
                    "?" if row["stage"] is None else str(row["stage"]),
                    "" if row["cost_usd"] is None else dollars(row["cost_usd"]),
                    _size(row["bytes"]),
                )
            )
        print_table(console, table, optional=("size", "cost"), keys=1)


def _prefix_length(ids: list[str], shortest: int = 8) -> int:
    """The length at which every id's prefix is unique (a prefix is a reference every command takes)."""
    for n in range(shortest, max(map(len, ids), default=shortest) + 1):
        if len({i[:n] for i in ids}) == len(set(ids)):
            return n
    return max(map(len, ids), default=shortest)


def _number(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"
