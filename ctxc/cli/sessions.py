"""``ctxc sessions``: the Claude Code and Codex sessions on this machine, with their live context."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import replace
from typing import Annotated, Any

import typer

from ctxc.cli import options as opt
from ctxc.errors import UsageError
from ctxc.output import write_stdout
from ctxc.sessions import find_sessions
from ctxc.terminal import Fitted, one_line

EPILOG = opt.examples(
    "ctxc sessions                                  # every session, newest first",
    "ctxc sessions --agent codex --since 2026-11-01 --format json",
    "ctxc sessions --project .                      # this directory's sessions",
    note="Sessions are read from $CLAUDE_CONFIG_DIR/projects (default ~/.claude) and $CODEX_HOME/sessions "
    "(default ~/.codex). Every command that takes a PATH also takes a session id, a unique prefix of "
    "one, or [bold]latest[/bold] (the newest session of the current directory): ctxc analyze latest, "
    "ctxc compact 03953bb8 --fork.",
)


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:  # timestamp() too: 0001-01-01 in local time falls before year 1
        return dt.datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"--since {text!r}: give a date like 2026-11-30 or 2026-11-30T14:00") from None


@opt.app.command(epilog=EPILOG)
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
    from ctxc.analysis import AnalyzeJob, analyze_file
    from ctxc.cli.batch import run_one_or_many

    after = _since(since)
    found = [s for s in find_sessions(agent, project) if after is None or s.modified >= after]
    job = AnalyzeJob("", use_cache=not no_cache, top=0, prices=prices)
    items = [(str(s.path), replace(job, path=str(s.path))) for s in found]
    analyses, errors, failed = run_one_or_many(
        items, analyze_file, what="reading sessions", jobs=jobs, quiet=quiet
    )
    by_path = {a.path: a for a in analyses}
    rows = [_row(s, by_path.get(str(s.path))) for s in found]
    _emit(rows, opt.table_on_terminal(fmt), errors=errors, exit_code=failed)
    raise typer.Exit(failed)


def _row(session: Any, a: Any) -> dict[str, Any]:
    modified = dt.datetime.fromtimestamp(session.modified, dt.UTC)
    return {
        "id": session.id,
        "agent": session.agent,
        "project": session.project,
        "last_activity": modified.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "bytes": session.size,
        "path": os.fspath(session.path),
        "resume": session.resume_command,
        "messages": None if a is None else a.live_messages,
        "tokens": None if a is None else a.total_tokens,
        "window": None if a is None else a.window,
        "stage": None if a is None else a.stage,
        "cost_usd": a.usage.cost.usd if a is not None and a.usage and a.usage.cost else None,
    }


def _emit(rows: list[dict[str, Any]], out_fmt: str, *, errors: list[dict[str, Any]], exit_code: int) -> None:
    from ctxc.render import csv_text

    if out_fmt == "json":
        opt.print_json("sessions", sessions=rows, errors=errors, exit_code=exit_code)
    elif out_fmt == "csv":
        columns = "id agent project last_activity messages tokens window stage cost_usd bytes path"
        write_stdout(csv_text(columns, rows).encode())
    else:
        _table(rows)


def _table(rows: list[dict[str, Any]]) -> None:
    """One table per project, so each row fits 80 columns with every value whole."""
    from rich.text import Text

    from ctxc.render import dollars, make_table

    console = opt.stdout_console()
    if not rows:
        console.print("no sessions found", markup=False)
        return
    width = _prefix_length([row["id"] for row in rows])
    projects: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        projects.setdefault(row["project"] or "(unknown directory)", []).append(row)
    columns = ("id", "agent", "last active", "msgs", "tokens", "stage", "cost", "size")
    for i, (project, members) in enumerate(projects.items()):
        if i:
            console.print()
        # A line, not the table's title: a title wraps to the table's width, even in a pipe.
        console.print(Text(one_line(project), style="table.title"))
        cells = [
            (
                row["id"][:width],
                row["agent"],
                _local_minute(row["last_activity"]),
                _number(row["messages"]),
                _number(row["tokens"]),
                "?" if row["stage"] is None else str(row["stage"]),
                "" if row["cost_usd"] is None else dollars(row["cost_usd"]),
                _size(row["bytes"]),
            )
            for row in members
        ]
        table = make_table(columns, cells, right=columns[3:], box=None, pad_edge=False)
        for column in table.columns:
            column.no_wrap = True
        console.print(Fitted(table, optional=("size", "cost"), keys=1))


def _local_minute(stamp: str) -> str:
    """The UTC time JSON carries, as the reader's clock shows it (as ``ls -l`` does)."""
    return dt.datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")


def _prefix_length(ids: list[str], shortest: int = 8) -> int:
    """The length at which every id's prefix is unique (a prefix is a reference every command takes)."""
    longest = max(map(len, ids), default=shortest)
    unique = (n for n in range(shortest, longest + 1) if len({i[:n] for i in ids}) == len(set(ids)))
    return next(unique, longest)


def _number(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _size(n: int) -> str:
    """Decimal units, as ``--max-line-mb`` counts them: a KB is 1,000 bytes."""
    if n < 1000:
        return f"{n} B"
    value = n / 1000
    for unit in ("KB", "MB"):
        if round(value, 1) < 1000:  # 999,960 bytes is 1.0 MB, not 1000.0 KB
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"
