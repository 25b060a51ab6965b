"""``ctxc eval``: measure each compaction strategy on planted facts, intent, survival, validity, budget."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Annotated, Any, Literal

import typer

from ctxc.cli import options as opt
from ctxc.errors import ExitCode, UsageError
from ctxc.terminal import stderr_console

EPILOG = opt.examples(
    "ctxc eval                   # 3 generated sessions, every strategy, 10%, 25%",
    "ctxc eval logs/ --strategies fifo,adaptive --targets 0.1",
    "ctxc eval --seed 7 --generated 5 --format json > eval.json",
    "ctxc eval session.jsonl --search-scope archive --search-k 3",
    "ctxc eval session.jsonl --judge anthropic --judge-model claude-haiku-4-5",
    note="Facts (codes, names, numbers, decisions) are planted early in each transcript; after compaction "
    "each must still be in the output or be found by `ctxc search` in the top --search-k hits. Targets "
    "are shares of the window, which is each transcript's own size unless --window is given, so "
    "compaction is always forced. Deterministic and offline unless --judge is given.",
)


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{what} takes comma-separated numbers, got {text!r}") from None


def _of(kept: int, total: int) -> str:
    return f"{kept}/{total}" if total else "-"


def _share(kept: int, total: int) -> str:
    return f"{kept / total:.0%}" if total else "-"


def _render(report: Any) -> None:
    from ctxc.evaluate import SURVIVAL_KINDS

    console = opt.stdout_console()
    rows = report.rows()
    judged = any(r.judge is not None for r in rows)
    columns = ["strategy", "target", "needles", "kept+found", "intent", "paths", "errors", "decisions"]
    columns += ["valid", "budget", "ratio", "time", *(["judge"] if judged else [])]
    cells = []
    for r in rows:
        row = [
            r.strategy,
            f"{r.target_ratio:.0%}",
            _of(r.needles_recovered, r.needles),
            f"{r.retained}+{r.by_search}",
            _of(r.intent_kept, r.intent),
            *(_share(*r.survival[k]) for k in SURVIVAL_KINDS),
            _of(r.valid, r.files),
            _of(r.budget_ok, r.files),
            f"{r.mean_ratio:.2f}",
            f"{r.seconds:.1f}s",
        ]
        if judged:
            row.append("-" if r.judge is None else f"{r.judge:.2f}")
        cells.append(row)
    title = "ctxc eval: each strategy at each target, over every transcript"
    # At 80 columns the measures come in two groups, each beside the strategy and target it belongs to.
    opt.print_rows(columns, cells, console=console, right=columns[1:], title=title, keys=2)
    console.print(
        "needles: recovered/planted (kept in the output + found only by search); intent: first requests "
        "and pinned instructions kept; paths/errors/decisions: share surviving verbatim or in a summary; "
        "valid: no pairing or new role problem; budget: every conversation at or under target; ratio: "
        "output/input tokens (mean).",
        style="dim",
        markup=False,
    )
    for case, n in report.lost_needles():
        console.print(
            f"lost: {case.source} {case.strategy} {case.target_ratio:.0%}: {n.kind} “{n.subject}” "
            f"= {n.value} (message {n.message}) neither kept nor in the top hits",
            markup=False,
            soft_wrap=True,
        )
    for case in report.cases:
        if case.error:
            console.print(f"error: {case.source} {case.strategy}: {case.error}", markup=False, soft_wrap=True)


@opt.app.command("eval", epilog=EPILOG)
def eval_command(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help="Transcripts or directories; none: sessions generated from --seed.", metavar="[PATH]..."
        ),
    ] = None,
    strategies: Annotated[str | None, typer.Option(help="Comma-separated strategies (default: all).")] = None,
    targets: Annotated[str, typer.Option(help="Comma-separated targets, shares of the window.")] = "0.1,0.25",
    seed: Annotated[int, typer.Option(help="Seed for generated sessions and planted facts.")] = 0,
    generated: Annotated[
        int, typer.Option(min=1, max=100, help="Sessions to generate when no paths are given.")
    ] = 3,
    needles: Annotated[int, typer.Option(min=1, max=32, help="Facts planted per transcript.")] = 4,
    window: Annotated[
        int | None, typer.Option(help="Window in tokens (default: each transcript's own size).")
    ] = None,
    keep_last: Annotated[int, typer.Option(min=1, help="Messages always kept at the end.")] = 4,
    search_k: Annotated[
        int, typer.Option(min=1, max=100, help="A needle counts as found within this many hits.")
    ] = 5,
    search_scope: Annotated[
        Literal["session", "archive"],
        typer.Option(
            help="session: search the transcript's own original (--id); archive: all transcripts at once."
        ),
    ] = "session",
    hybrid: Annotated[
        bool, opt.flag("--hybrid", "Search with hybrid ranking (needs ctxc\\[embed]).")
    ] = False,
    archive: Annotated[
        str | None,
        typer.Option(help="Keep the evaluation's archive and index here (default: a temporary one)."),
    ] = None,
    judge: Annotated[
        str | None, typer.Option(help="anthropic: also ask probe questions of a Claude model.")
    ] = None,
    judge_model: Annotated[
        str | None, typer.Option(help="The judge's model (default: a current fast Claude).")
    ] = None,
    max_retries: Annotated[int, typer.Option(min=0, max=20, help="Judge call retries.")] = 2,
    timeout: Annotated[float, opt.seconds("Seconds one judge call may take.")] = 120.0,
    tokenizer: opt.TokenizerOpt = "o200k_base",
    fmt: opt.TableOrJsonOpt = None,
    no_cache: Annotated[bool, opt.flag("--no-cache", "Do not use the token and answer caches.")] = False,
    skip_invalid: opt.SkipInvalidOpt = False,
    fail_fast: opt.FailFastOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or notes on stderr.")] = False,
) -> None:
    """Evaluate compaction strategies: needle recovery, intent, survival, validity, budget, cost."""
    from ctxc.evaluate import EvalOptions, sources_from

    same = "seed generated needles window keep_last tokenizer search_k search_scope hybrid skip_invalid"
    options = EvalOptions(
        **opt.pick(locals(), same),  # the flags named as the options they set
        strategies=tuple(s.strip() for s in (strategies or "").split(",") if s.strip()),
        targets=_floats(targets, "--targets"),
        use_cache=not no_cache,
    )
    judged = None
    if judge is not None:
        from ctxc.evaluate.judge import make_judge

        judged = make_judge(
            judge, model=judge_model, max_retries=max_retries, timeout=timeout, use_cache=not no_cache
        )
    sources = sources_from(paths or [], options)
    # As the batch commands: a bad file among several is reported and the rest evaluated (exit 12);
    # --fail-fast, or a single file, stops at it with its own code, the report saying so all the same.
    stop = fail_fast or len(sources) == 1
    report = _run(sources, options, archive, judged, quiet, fail_fast=stop)
    exit_code = 0
    if report.failed:
        exit_code = report.failed[0].exit_code if stop else int(ExitCode.PARTIAL)
    if opt.table_on_terminal(fmt) == "json":
        _print_json(report, options, exit_code)
    elif report.cases:
        _render(report)
    raise typer.Exit(exit_code)


def _run(sources: Any, options: Any, archive: str | None, judge: Any, quiet: bool, *, fail_fast: bool) -> Any:
    """The evaluation, with a spinner on stderr when it is a terminal (once it takes over a second), and
    each file that cannot be read reported there as it is met."""
    from functools import partial

    from ctxc.evaluate import run_eval

    run = partial(
        run_eval,
        sources,
        options,
        archive=archive,
        judge=judge,
        fail_fast=fail_fast,
        on_failed=lambda f: opt.note(f"ctxc: error: {f.error}"),
    )
    if sys.stderr.isatty() and not quiet:
        from rich.live import Live
        from rich.spinner import Spinner

        from ctxc.render import Late

        spinner = Spinner("dots", text="evaluating")

        def progress(text: str) -> None:
            spinner.update(text=text)

        with Live(Late(spinner), console=stderr_console(), transient=True, refresh_per_second=12.5):
            report = run(progress=progress)
    else:
        report = run()
    for name, (got, wanted) in report.planted.items():
        if got < wanted and not quiet:
            opt.note(f"ctxc: {name}: room for {got} of {wanted} needles (too few removable messages)")
    return report


def _print_json(report: Any, options: Any, exit_code: int) -> None:
    lost = [
        {"source": c.source, "strategy": c.strategy, "target_ratio": c.target_ratio, "needle": n.value}
        for c, n in report.lost_needles()
    ]
    opt.print_json(
        "eval",
        options=asdict(options),
        planted={k: {"planted": v[0], "asked": v[1]} for k, v in report.planted.items()},
        summary=[r.to_json() for r in report.rows()],
        lost=lost,
        cases=[c.to_json() for c in report.cases],
        errors=[f.to_json() for f in report.failed],
        exit_code=exit_code,
    )
