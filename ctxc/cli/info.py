"""``ctxc strategies``, ``formats`` and ``models``: what ctxc knows."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from ctxc.cli import options as opt
from ctxc.formats import adapters
from ctxc.output import dumps, envelope, write_stdout

STRATEGIES_EPILOG = (
    "[bold]Examples[/bold]\n\n"
    "  ctxc strategies\n\n"
    "  ctxc strategies --options        # every option with its default and range"
)


def strategies(
    show_options: Annotated[bool, opt.flag("--options", "Also list each strategy's options.")] = False,
) -> None:
    """List the compaction strategies with a one-line description."""
    from rich.table import Table

    from ctxc.compaction import strategies as registry
    from ctxc.render import print_table

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("strategy", style="bold")
    table.add_column("description")
    for name, cls in registry().items():
        table.add_row(*opt.cells(name, cls.description))
        if show_options:
            for f in dataclasses.fields(cls.Config):
                lo, hi = f.metadata.get("min"), f.metadata.get("max")
                rng = f" [{lo}..{hi}]" if lo is not None or hi is not None else ""
                help_text = f.metadata.get("help", "")
                table.add_row(*opt.cells("", f"  --set {name}.{f.name}={f.default!r}{rng}  {help_text}"))
    print_table(opt.stdout_console(), table, fold=("description",))


FORMATS_EPILOG = (
    "[bold]Examples[/bold]\n\n"
    "  ctxc formats\n\n"
    "  ctxc analyze rollout.jsonl --input-format codex     # a name from the list, when sniffing "
    "cannot tell\n\n"
    "Every command sniffs the format from the first records; --input-format forces one, and a file "
    "that the forced format reads as no messages at all is an error naming the format sniffing picks."
)


def formats() -> None:
    """List the transcript formats ctxc reads and writes."""
    from rich.table import Table

    from ctxc.render import print_table

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("format", style="bold")
    table.add_column("description")
    for name, adapter in sorted(adapters().items()):
        table.add_row(*opt.cells(name, adapter.description))
    print_table(opt.stdout_console(), table, fold=("description",))


MODELS_EPILOG = "[bold]Examples[/bold]\n\n  ctxc models\n\n  ctxc models --format json"


def models(fmt: opt.TableOrJsonOpt = None) -> None:
    """List the model profiles (context window, default tokenizer) that --model accepts."""
    from ctxc.profiles import PROFILES

    if opt.table_on_terminal(fmt) is opt.TableOrJson.json:
        rows = [
            {"name": p.name, "provider": p.provider, "window": p.window, "tokenizer": p.tokenizer}
            for p in PROFILES
        ]
        write_stdout(dumps(envelope("models", models=rows)))
        return
    from rich.table import Table

    from ctxc.render import print_table

    table = Table("model", "provider", "window", "tokenizer")
    for p in PROFILES:
        table.add_row(*opt.cells(p.name, p.provider, f"{p.window:,}", p.tokenizer))
    print_table(opt.stdout_console(), table, keys=1)


def register(app: typer.Typer) -> None:
    app.command(epilog=STRATEGIES_EPILOG)(strategies)
    app.command(epilog=FORMATS_EPILOG)(formats)
    app.command(epilog=MODELS_EPILOG)(models)
