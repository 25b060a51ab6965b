"""``ctxc remind`` and ``compose``: the agent-loop pieces (:mod:`ctxc.reminders`, :mod:`ctxc.composer`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import typer

from ctxc.cli import options as opt
from ctxc.output import write_stdout
from ctxc.terminal import one_line, stderr_console, visible

REMIND_EPILOG = opt.examples(
    "ctxc remind session.jsonl --rules rules.toml",
    "ctxc remind rollout.jsonl --rules rules.toml --window 128000 --format json",
    note="Rules are [\\[reminder]] tables with one trigger each: every_n_turns, token_threshold (tokens, or "
    "a share of the window), tool_call, keyword_in_response or after_compaction; a message; and an "
    "optional max_repeats. A turn is one model call; the context is what that call would be sent.",
)

COMPOSE_EPILOG = opt.examples(
    "ctxc compose prompt.toml --budget 2000 > system.txt",
    "ctxc compose prompt.toml --budget 800 --fill --format json",
    "ctxc compose prompt.toml --base 'You are a reviewer.'   # overrides them",
    note="Sections are [\\[section]] tables: id, priority (0-100 or safety, role, task, tools, "
    "output_format, examples, background), required, and content or file. Exit 6 if the required sections "
    "alone exceed the budget.",
)


@opt.app.command("remind", epilog=REMIND_EPILOG)
def remind_command(
    path: opt.PathArg,
    rules: Annotated[
        str, typer.Option("--rules", "-r", help="Reminder rules (TOML, [\\[reminder]] tables).")
    ],
    model: opt.ModelOpt = None,
    window: opt.WindowOpt = None,
    tokenizer: opt.TokenizerOpt = "o200k_base",
    conversation: opt.ConversationOpt = None,
    fmt: opt.TableOrJsonOpt = None,
    input_format: opt.InputFormatOpt = None,
    skip_invalid: opt.SkipInvalidOpt = False,
    max_line_mb: opt.MaxLineOpt = 32.0,
) -> None:
    """Show where in a transcript each reminder rule would have fired."""
    from ctxc.agent import ContextManager
    from ctxc.reminders import ReminderRules
    from ctxc.replay import replay

    rule_set = ReminderRules.load(rules)
    transcript = opt.load_transcript(path, input_format, skip_invalid, max_line_mb)
    manager = ContextManager(model=model, window=window, tokenizer=tokenizer, reminders=rule_set)
    r = replay(transcript, manager, conversation=conversation, compact=False)
    fired = manager.fired
    rows = [(t, x) for t in r.turns for x in t.reminders]
    if opt.table_on_terminal(fmt) == "json":
        opt.print_json(
            "remind",
            path=r.path,
            format=r.format,
            conversation=r.conversation,
            window=r.window,
            turns=len(r.turns),
            rules=[
                {"id": u.id, "trigger": u.trigger, "fired": fired.get(u.id, 0), "max_repeats": u.max_repeats}
                for u in rule_set.rules
            ],
            reminders=[
                {"turn": t.turn, "index": t.index, "line": t.line, "tokens": t.tokens_before}
                | {"rule": x.rule, "trigger": x.trigger, "detail": x.detail}
                for t, x in rows
            ],
        )
        return
    _print_reminders(r, rows, rule_set, fired)


def _print_reminders(r: Any, rows: list[Any], rule_set: Any, fired: Mapping[str, int]) -> None:
    opt.stdout_console().print(
        f"{one_line(r.path)}  {r.format}  ·  {len(r.turns)} turns  ·  "
        f"{len(rows)} reminder(s) from {len(rule_set)} rule(s)",
        markup=False,
    )
    cells = [(str(t.turn), str(t.line), f"{t.tokens_before:,}", x.rule, x.trigger, x.detail) for t, x in rows]
    if cells:  # none: the line above says 0, an empty table's header would say nothing more
        opt.print_rows(
            ("turn", "line", "context", "rule", "trigger", "why"),
            cells,
            optional=("line",),
            keys=1,
            fold=("why",),
        )
    summary = [
        (rule.id, rule.describe(), str(fired.get(rule.id, 0)), str(rule.max_repeats or "-"))
        for rule in rule_set.rules
    ]
    opt.print_rows(("rule", "trigger", "fired", "max repeats"), summary, keys=1, fold=("trigger",))


@opt.app.command("compose", epilog=COMPOSE_EPILOG)
def compose_command(
    file: Annotated[
        str, typer.Argument(help="Prompt sections (TOML, [\\[section]] tables).", metavar="FILE")
    ],
    budget: Annotated[
        int | None, typer.Option("--budget", "-b", min=1, help="Token budget (default: no limit).")
    ] = None,
    base: Annotated[str | None, typer.Option(help="An override prompt that replaces every section.")] = None,
    fill: Annotated[bool, opt.flag("--fill", "Also keep lower-priority sections that still fit.")] = False,
    tokenizer: opt.TokenizerOpt = "o200k_base",
    fmt: Annotated[
        Literal["text", "json"],
        typer.Option("--format", "-f", help="text: the prompt; json: prompt and sections."),
    ] = "text",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No section table on stderr.")] = False,
) -> None:
    """Compose a system prompt from prioritised sections within a token budget."""
    from ctxc.composer import PromptComposer
    from ctxc.tokens import make_counter

    composer = PromptComposer.load(file)
    if base is not None:
        composer = composer.with_base(base)
    result = composer.compose(budget, counter=make_counter(tokenizer), fill=fill)
    if fmt == "json":
        opt.print_json(
            "compose",
            path=file,
            budget=budget,
            tokens=result.tokens,
            base=result.base,
            prompt=result.prompt,
            sections=[
                {"id": o.section.id, "priority": o.section.priority, "required": o.section.required}
                | {"tokens": o.tokens, "kept": o.kept, "reason": o.reason}
                for o in result.sections
            ],
        )
    else:  # byte for byte to a file or a pipe; a terminal is shown its escapes, never obeys them
        write_stdout((visible(result.prompt) if sys.stdout.isatty() else result.prompt) + "\n")
    if not quiet:
        _print_sections(result, budget)


def _print_sections(result: Any, budget: int | None) -> None:
    """The sections kept and dropped, as a table on stderr (stdout holds the prompt)."""
    rows = [
        (
            o.section.id,
            str(o.section.priority),
            "yes" if o.section.required else "",
            f"{o.tokens:,}",
            "kept" if o.kept else (o.reason if result.base else f"dropped: {o.reason}"),
        )
        for o in result.sections
    ]
    err = stderr_console()
    columns = ("section", "priority", "required", "tokens", "kept")
    opt.print_rows(columns, rows, console=err, keys=1, fold=("kept",))
    limit = f" of a {budget:,} budget" if budget is not None else ""
    if result.base:
        what = f"the override prompt replaced {len(result.sections)} section(s)"
    else:
        what = f"{len(result.kept)} section(s) kept, {len(result.dropped)} dropped"
    err.print(f"ctxc: {what}; {result.tokens:,} tokens{limit}", markup=False, soft_wrap=True)
