"""``ctxc strategies``, ``formats`` and ``models``: what ctxc knows."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from ctxc.cli import options as opt
from ctxc.terminal import Fitted

STRATEGIES_EPILOG = opt.examples(
    "ctxc strategies",
    "ctxc strategies --options        # every option with its default and range",
)


@opt.app.command(epilog=STRATEGIES_EPILOG)
def strategies(
    show_options: Annotated[bool, opt.flag("--options", "Also list each strategy's options.")] = False,
) -> None:
    """List the compaction strategies with a one-line description."""
    from ctxc.compaction import strategies as registry

    rows = []
    for name, cls in registry().items():
        rows.append((name, cls.description))
        if show_options:
            for f in dataclasses.fields(cls.Config):
                lo, hi = f.metadata.get("min"), f.metadata.get("max")
                rng = f" [{lo}..{hi}]" if lo is not None or hi is not None else ""
                rows.append(("", f"  --set {name}.{f.name}={f.default!r}{rng}  {f.metadata.get('help', '')}"))
    _print_list(("strategy", "description"), rows)


def _print_list(columns: tuple[str, str], rows: list[tuple[str, str]]) -> None:
    """Names in bold, each with its description, and no header."""
    from ctxc.render import make_table

    table = make_table(columns, rows, box=None, show_header=False, pad_edge=False)
    table.columns[0].style = "bold"
    opt.stdout_console().print(Fitted(table, fold=("description",)))


FORMATS_EPILOG = opt.examples(
    "ctxc formats",
    "ctxc analyze rollout.jsonl --input-format codex     # a name from the list, when sniffing cannot tell",
    note="Every command sniffs the format from the first records; --input-format forces one, and a file that "
    "the forced format reads as no messages at all is an error naming the format sniffing picks.",
)


@opt.app.command(epilog=FORMATS_EPILOG)
def formats() -> None:
    """List the transcript formats ctxc reads and writes."""
    from ctxc.formats import adapters

    _print_list(("format", "description"), [(n, a.description) for n, a in sorted(adapters().items())])


MODELS_EPILOG = opt.examples("ctxc models", "ctxc models --format json")


@opt.app.command(epilog=MODELS_EPILOG)
def models(fmt: opt.TableOrJsonOpt = None) -> None:
    """List the model profiles (context window, default tokenizer) that --model accepts."""
    from ctxc.profiles import PROFILES

    if opt.table_on_terminal(fmt) == "json":
        doc = [{k: getattr(p, k) for k in ("name", "provider", "window", "tokenizer")} for p in PROFILES]
        opt.print_json("models", models=doc)
        return
    rows = [(p.name, p.provider, f"{p.window:,}", p.tokenizer) for p in PROFILES]
    opt.print_rows(("model", "provider", "window", "tokenizer"), rows, keys=1)
