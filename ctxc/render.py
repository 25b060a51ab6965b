"""Turning results into what people and scripts read: rich tables, CSV rows, JSON documents."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ctxc.live import compactions
from ctxc.pricing import Cost
from ctxc.report import Analysis, MessageStat
from ctxc.stages import STAGE_NAMES
from ctxc.terminal import UNWRAPPED, Fitted, Wrapped, one_line, visible


def _fields(obj: Any, names: str) -> dict[str, Any]:
    """``{name: obj.name}`` for the space-separated ``names``, in that order."""
    return {name: getattr(obj, name) for name in names.split()}


def analysis_to_json(a: Analysis, *, include_messages: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {
        **_fields(a, "path format tokenizer model window window_source"),
        "thresholds": list(a.thresholds),
        "total_tokens": a.total_tokens,
        "context_tokens": a.max_context,
        "share": round(a.share, 6),
        "stage": a.stage,
        "stage_name": STAGE_NAMES[a.stage],
        "conversations": a.conversations,
        "message_count": a.live_messages,
        "live_context": {
            "from_line": a.live_from_line,
            "messages": a.live_messages,
            "tokens": a.total_tokens,
            "carried_tokens": a.carried_tokens,
        },
        "history": {"messages": a.history_messages, "tokens": a.history_tokens},
        "sidechains": {"messages": a.side_messages, "tokens": a.side_tokens},
        "abandoned_branches": {"messages": a.branch_messages, "tokens": a.branch_tokens},
        **_fields(a, "by_role by_kind by_tool"),
        "largest": [_stat(s) for s in a.largest],
        "recorded_usage": asdict(a.usage) if a.usage else None,
        "boundaries": [
            _fields(b, "kind line trigger pre_tokens resets carried_tokens")
            for b in compactions(a.boundaries)
        ],
        "problems": [_fields(p, "code line index tool_id message") for p in a.problems],
        "skipped_lines": a.skipped_lines,
    }
    if a.versus_o200k is not None:
        claude, o200k, ratio = a.versus_o200k
        doc["versus_o200k"] = {
            "tokenizer": a.tokenizer,
            "tokens": claude,
            "o200k_tokens": o200k,
            "ratio": ratio,
        }
    if a.forecast:
        doc["forecast"] = [
            {"stage": f.stage, "strategies": list(f.strategies), "potential": f.potential, "plan": f.plan}
            for f in a.forecast
        ]
    if include_messages:
        doc["messages"] = [_stat(s) for s in a.messages]
    return doc


def _stat(s: MessageStat) -> dict[str, Any]:
    # Spelled out, not through _fields: a cached analyze of a large log makes one per message.
    index, line, role, kind, tool, tokens, cumulative, share, stage, conversation, live = s
    return {
        "index": index,
        "line": line,
        "conversation": conversation,
        "role": role,
        "kind": kind,
        "tool": tool,
        "tokens": tokens,
        "cumulative": cumulative,
        "share": round(share, 6),
        "stage": stage,
        "live": live,
    }


def csv_text(columns: str, rows: Iterable[Mapping[str, Any]]) -> str:
    """``rows`` as CSV under a header of the space-separated ``columns`` (other keys are left out)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, columns.split(), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def analyses_to_csv(items: Sequence[Analysis]) -> str:
    return csv_text(
        "path conversation index line role kind tool tokens cumulative share stage live",
        (
            {
                **s._asdict(),
                "path": a.path,
                "tool": s.tool or "",
                "share": f"{s.share:.6f}",
                "live": "true" if s.live else "false",  # false: history, a subagent run, a rewound branch
            }
            for a in items
            for s in a.messages
        ),
    )


def make_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Collection[str] = (), **options: Any
) -> Any:
    """A rich table of ``rows``, the columns named in ``right`` right-justified. A str cell is shown as given:
    not parsed for rich markup and emoji codes (a file "[draft]:ok:.jsonl" would print as "🆗.jsonl"), its
    control characters shown as escapes, and wrapped as :class:`~ctxc.terminal.Wrapped` does (a path only
    after a '/')."""
    from rich.table import Table
    from rich.text import Text

    if isinstance(options.get("title"), str):
        style = options.get("title_style") or "table.title"  # what rich gives a str title
        options["title"] = Wrapped(Text(visible(options["title"]), style=style))
    out = Table(**options)
    for name in columns:
        out.add_column(name, justify="right" if name in right else "left")
    for row in rows:
        cells = (Text(visible(v)) if isinstance(v, str) else v for v in row)
        out.add_row(*(Wrapped(v) if isinstance(v, Text) else v for v in cells))
    return out


_STAGE_STYLES = {1: "green", 2: "cyan", 3: "yellow", 4: "dark_orange", 5: "red"}
_SOURCES = {
    "log": ", recorded in the log",
    "log model": ", the log's model",
    "default": "; no model in the log: the default",
}


def _head(a: Analysis, what: str) -> Any:
    from rich.text import Text

    return Text.assemble((one_line(a.path), "bold"), f"  {a.format}  ·  {what}")


def _stage_line(a: Analysis, window: str, note: str = "") -> Any:
    """``N tokens`` + ``window`` + share and stage (in its colour) + ``note``."""
    from rich.text import Text

    stage = f"stage {a.stage}: {STAGE_NAMES[a.stage]}"
    share = f"  {a.share * 100:.1f}%  "
    return Text.assemble(
        (f"{a.max_context:,} tokens", "bold"), window, share, (stage, _STAGE_STYLES[a.stage]), note
    )


def render_analysis(a: Analysis, *, show_messages: bool = False) -> list[Any]:
    """Rich renderables for one file (imported lazily: rich is only needed for tables)."""
    from rich.text import Text

    several = a.conversations > 1
    what = f"{a.live_messages:,} message{'' if a.live_messages == 1 else 's'} in context" + (
        f" in {a.conversations} conversations" if several else ""
    )
    out: list[Any] = [_head(a, f"{what}  ·  {a.tokenizer}")]
    source = f"{a.model or ''}{_SOURCES.get(a.window_source, '')}".removeprefix(", ").removeprefix("; ")
    note = f"  (largest conversation; {a.total_tokens:,} tokens in all)" if several else ""
    out.append(_stage_line(a, f" of a {a.window:,} window" + (f" ({source})" if source else ""), note))
    out.extend(_apart_lines(a))
    out.append(SideBySide(_group_tables(a)))
    if show_messages or a.largest:  # --top 0 asks for no table, not an empty one
        out.append(_message_table(a, show_messages))
    if a.usage:
        u = a.usage
        figures = (
            f"{u.calls:,} API call{'' if u.calls == 1 else 's'}, last context {u.last_context:,} tokens "
            f"(max {u.max_context:,}), "
            f"input {u.input:,}, cache read {u.cache_read:,}, cache write {u.cache_write:,}, "
            f"output {u.output:,}" + (f", window {u.window:,}" if u.window else "")
        )
        out.append(Text.assemble(("recorded usage: ", "bold"), figures))
    out.extend(recorded_lines(a))
    if a.versus_o200k is not None and a.versus_o200k[2] is not None:
        claude, o200k, ratio = a.versus_o200k
        out.append(Text(f"{a.tokenizer}: {claude:,} tokens vs o200k_base {o200k:,}: ratio {ratio:.3f}"))
    if a.forecast:
        rows = [
            (str(f.stage), ", ".join(f.strategies), f"{f.potential:,}", f"{f.plan:,}") for f in a.forecast
        ]
        columns = ("stage", "strategies", "could remove", "adaptive plan removes")
        right = (columns[0], *columns[2:])
        forecast = make_table(
            columns, rows, right=right, title="forecast at this window", title_justify="left"
        )
        out.append(Fitted(forecast, keys=1))
    if a.problems:
        listed = "; ".join(str(p) for p in a.problems[:3]) + (" …" if len(a.problems) > 3 else "")
        out.append(Text.assemble(f"{len(a.problems)} pairing problem(s): ", visible(listed), style="yellow"))
    if a.skipped_lines:
        out.append(Text(f"{a.skipped_lines} invalid line(s) skipped", style="yellow"))
    return out


def _group_tables(a: Analysis) -> list[Any]:
    """Tokens by role, by kind and by tool (the eight largest tools), a small table each."""
    groups = []
    for name, items in (("role", a.by_role), ("kind", a.by_kind), ("tool", a.by_tool)):
        if items:
            rows = [
                (key, f"{tokens:,}") for key, tokens in list(items.items())[: 8 if name == "tool" else None]
            ]
            group = make_table(
                (f"by {name}", "tokens"), rows, right=("tokens",), box=None, pad_edge=False, show_edge=False
            )
            group.columns[0].style = "bold"
            groups.append(group)
    return groups


def _message_table(a: Analysis, show_messages: bool) -> Any:
    rows = [
        (
            str(s.index),
            str(s.line),
            s.role,
            s.kind,
            s.tool or "",
            f"{s.tokens:,}",
            f"{s.cumulative:,}",
            f"{s.share * 100:.1f}%",
            str(s.stage),
        )
        for s in (a.messages if show_messages else a.largest)
    ]
    title = "messages" if show_messages else f"largest {len(rows)} message{'' if len(rows) == 1 else 's'}"
    columns = ("#", "line", "role", "kind", "tool", "tokens", "cumulative", "window", "stage")
    right = (*columns[:2], *columns[5:])
    messages = make_table(columns, rows, right=right, title=title, title_justify="left")
    return Fitted(messages, optional=("stage", "line", "window", "cumulative"), keys=1, fold=("tool",))


def _apart_lines(a: Analysis) -> list[Any]:
    """What the client no longer sends: the history before the log's own compaction, and sidechains."""
    from rich.text import Text

    lines = []
    if a.live_from_line is not None:
        carried = f" (its record carries {a.carried_tokens:,} tokens into it)" if a.carried_tokens else ""
        lines.append(
            f"{a.history_messages:,} messages, {a.history_tokens:,} tokens before the log's own compaction "
            f"at line {a.live_from_line}; not in context{carried}"
        )
    for n, tokens, where in (
        (a.side_messages, a.side_tokens, "in subagent runs"),
        (a.branch_messages, a.branch_tokens, "on abandoned branches (a rewind, an edited prompt)"),
    ):
        if n:
            lines.append(f"{n:,} messages, {tokens:,} tokens {where}; not in context")
    return [Text(line, style="dim") for line in lines]


def recorded_lines(a: Analysis) -> list[Any]:
    """What the recorded calls cost, then one line per compaction the log itself recorded (kind, trigger, the
    context it recorded then: not the counted history, which the line above the table gives)."""
    from rich.text import Text

    cost = a.usage.cost if a.usage else None
    out: list[Any] = [] if cost is None else [Text(cost_line(cost))]
    for b in compactions(a.boundaries):
        trigger = f" ({b.trigger})" if b.trigger else ""
        before = f", at a recorded context of {b.pre_tokens:,} tokens" if b.pre_tokens else ""
        out.append(Text(f"compaction in log: line {b.line} {b.kind}{trigger}{before}", style="bold"))
    return out


@dataclass
class Late:
    """A renderable shown only once ``delay`` seconds have passed since it was made: a quick run ends
    as quietly as it began, a long one still says what it is doing."""

    inner: Any
    delay: float = 1.0
    start: float = field(default_factory=time.monotonic)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        if time.monotonic() - self.start >= self.delay:
            yield self.inner


@dataclass
class SideBySide:
    """Small tables side by side when they fit the width, else one after another."""

    tables: list[Any]

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement
        from rich.table import Table

        grid = Table.grid(padding=(0, 3))
        grid.add_row(*self.tables)
        if Measurement.get(console, options.update_width(UNWRAPPED), grid).maximum <= options.max_width:
            yield grid
        else:
            yield from self.tables


def cost_line(cost: Cost) -> str:
    """'cost: $8.94 (claude-opus-4-5 $8.94; prices of 2026-12-01)', naming what could not be priced."""
    priced = [f"{m.model} {dollars(m.usd)}" for m in cost.models if m.usd is not None]
    parts = ["; ".join(priced)] if priced else []
    if cost.unpriced:
        parts.append("not priced: " + ", ".join(cost.unpriced))
    return f"cost: {dollars(cost.usd)} ({'; '.join([*parts, f'prices of {cost.as_of}'])})"


def dollars(usd: float) -> str:
    """Dollars to the cent; below a cent, to a tenth of one, so a small saving does not read $0.00."""
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.4f}"


def render_usage(a: Analysis) -> list[Any]:
    """Rich renderables for a usage-only analysis (there are no messages to tabulate)."""
    from rich.text import Text

    u = a.usage
    out: list[Any] = [_head(a, "recorded usage")]
    if u is None:
        return out
    model = f" ({a.model})" if a.model else ""
    out.append(_stage_line(a, f" largest context of a {a.window:,} window{model}"))
    figures = (
        f", last context {u.last_context:,}; input {u.input:,}, cache read {u.cache_read:,}, "
        f"cache write {u.cache_write:,}, output {u.output:,}; {a.total_tokens:,} tokens billed"
        + (f"; recorded window {u.window:,}" if u.window else "")
    )
    out.append(Text.assemble((f"{u.calls:,} API call{'' if u.calls == 1 else 's'}", "bold"), figures))
    out.extend(recorded_lines(a))
    if a.skipped_lines:
        out.append(Text(f"{a.skipped_lines} invalid usage line(s) skipped", style="yellow"))
    return out
