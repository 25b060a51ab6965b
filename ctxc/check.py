"""A token budget gate for CI: ``analyze`` reduced to a verdict per file. A file's size is its largest
conversation (or, with ``tokenizer="usage"``, the largest recorded call); it is ``over`` above the budget,
``near`` from the warning level up to it, else ``ok``, and ``error`` when unreadable (never fatal)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

from ctxc.analysis import analyze, process_counter
from ctxc.batch import Outcome, run_batch
from ctxc.errors import ExitCode, UsageError
from ctxc.output import envelope
from ctxc.profiles import MAX_TOKENS, resolve_window
from ctxc.reader import ReadOptions
from ctxc.report import Analysis
from ctxc.stages import DEFAULT_THRESHOLDS, check_thresholds
from ctxc.terminal import one_line
from ctxc.tokens import USAGE_TOKENIZER
from ctxc.usage_scan import crossing_line, scan_usage, usage_analysis

Status = Literal["ok", "near", "over", "error"]
STATUSES: tuple[Status, ...] = ("over", "near", "ok", "error")
#: The default warning level: where adaptive compaction's stage 2 (tool-output post-processing) begins.
DEFAULT_WARN_USAGE = DEFAULT_THRESHOLDS[0]


@dataclass(frozen=True, slots=True)
class Budget:
    """A token budget per transcript, and the level from which a transcript is near it."""

    limit: int
    warn_at: int
    window: int
    model: str | None
    #: What the user asked for: a share of the window (``--max-usage``) or tokens (``--max-tokens``).
    max_usage: float | None = None
    max_tokens: int | None = None
    warn_usage: float = DEFAULT_WARN_USAGE
    #: Neither --model nor --window given: each file is measured against the window its log records.
    from_log: bool = False

    def describe(self) -> str:
        """``160,000 tokens (80% of the 200,000 window of claude-sonnet-4-5)``."""
        if self.from_log and self.max_usage is not None:
            return (
                f"{self.max_usage:.0%} of each log's window (the default {self.window:,} when none is known)"
            )
        if self.from_log:  # tokens, each log measured against its own window: no one share to name
            return f"{self.limit:,} tokens"
        of = f"the {self.window:,} window" + (f" of {self.model}" if self.model else "")
        return f"{self.limit:,} tokens ({self.limit / self.window:.0%} of {of})"

    def at(self, window: int, model: str | None) -> Budget:
        """This budget for a log measured against ``window``."""
        limit = self.max_tokens if self.max_tokens is not None else round((self.max_usage or 0) * window)
        return replace(
            self, limit=max(limit, 1), warn_at=round(self.warn_usage * window), window=window, model=model
        )


def resolve_budget(
    *,
    max_usage: float | None = None,
    max_tokens: int | None = None,
    warn_usage: float = DEFAULT_WARN_USAGE,
    model: str | None = None,
    window: int | None = None,
) -> Budget:
    """The budget for ``--max-usage R`` or ``--max-tokens N`` (exactly one) at a model's window."""
    if (max_usage is None) == (max_tokens is None):
        raise UsageError(
            "give exactly one budget: {max_usage} R (a share of the window) or {max_tokens} N",
            options=("max_usage", "max_tokens"),
        )
    if max_usage is not None and not 0 < max_usage <= 10:
        raise UsageError(
            f"{{max_usage}} is a share of the window such as 0.8, not {max_usage}", options=("max_usage",)
        )
    if max_tokens is not None and not 0 < max_tokens <= MAX_TOKENS:
        raise UsageError(
            f"{{max_tokens}} must be a positive number of tokens up to 2**53, not {max_tokens}",
            options=("max_tokens",),
        )
    if not 0 <= warn_usage <= 10:
        raise UsageError(
            f"{{warn_usage}} is a share of the window such as 0.6, not {warn_usage}", options=("warn_usage",)
        )
    win, model_name = resolve_window(model=model, window=window)
    asked = Budget(0, 0, win, model_name, max_usage, max_tokens, warn_usage, model is None and window is None)
    return asked.at(win, model_name)


@dataclass(frozen=True, slots=True)
class FileCheck:
    """The verdict on one transcript."""

    path: str
    status: Status
    format: str | None = None
    tokens: int | None = None  # the largest conversation (counted) or the largest recorded call
    share: float | None = None  # of the window
    stage: int | None = None
    over_by: int = 0
    line: int | None = None  # where the budget (``over``) or the warning level (``near``) was first crossed
    error: str | None = None
    exit_code: int = 0
    budget: Budget | None = None  # as applied to this file (its log's window, unless --model or --window)
    skipped_lines: int = 0  # not JSON objects, passed over under --skip-invalid


@dataclass(frozen=True, slots=True)
class CheckReport:
    budget: Budget
    tokenizer: str
    files: tuple[FileCheck, ...]
    fail_fast: bool = False  # the run stopped at its first unreadable file

    def count(self, status: Status) -> int:
        return sum(f.status == status for f in self.files)

    @property
    def exit_code(self) -> int:
        """The only file's own code if it is unreadable (or the first, under ``fail_fast``, as the other
        batch commands), PARTIAL if some of several are, else OVER_TARGET if any is over budget (near
        is no failure)."""
        failed = [f for f in self.files if f.status == "error"]
        if failed:
            return failed[0].exit_code if len(self.files) == 1 or self.fail_fast else int(ExitCode.PARTIAL)
        if self.count("over"):
            return int(ExitCode.OVER_TARGET)
        return int(ExitCode.OK)

    def headline(self) -> str:
        """``4 files: 1 over, 1 near, 1 ok, 1 unreadable; budget ..., o200k_base``: the last line of every
        rendering."""
        parts = [f"{self.count('over')} over", f"{self.count('near')} near", f"{self.count('ok')} ok"]
        if self.count("error"):
            parts.append(f"{self.count('error')} unreadable")
        files = f"{len(self.files)} file{'s' if len(self.files) != 1 else ''}"
        return f"{files}: {', '.join(parts)}; budget {self.budget.describe()}, {self.tokenizer}"


def verdict(a: Analysis, budget: Budget, crossing: Callable[[int], int | None]) -> FileCheck:
    """The verdict on an analysis; ``crossing(limit)`` is the line where ``limit`` was first passed."""
    tokens = a.max_context
    status: Status
    if tokens > budget.limit:
        status, line = "over", crossing(budget.limit)
    elif tokens >= budget.warn_at and budget.warn_at < budget.limit:
        status, line = "near", crossing(budget.warn_at - 1)
    else:
        status, line = "ok", None
    over_by = max(tokens - budget.limit, 0)
    return FileCheck(
        a.path,
        status,
        a.format,
        tokens,
        tokens / budget.window,
        a.stage,
        over_by,
        line,
        budget=budget,
        skipped_lines=a.skipped_lines,
    )


def _first_line_over(a: Analysis, limit: int) -> int | None:
    """The source line of the first message whose conversation's running total passed ``limit``."""
    return next((s.line for s in a.messages if s.live and s.cumulative > limit and s.line), None)


def check_file(
    path: str | os.PathLike[str],
    budget: Budget,
    *,
    tokenizer: str = "o200k_base",
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
    use_cache: bool = True,
) -> FileCheck:
    """Check one transcript against ``budget``; raises :class:`~ctxc.errors.CtxcError` if unreadable."""
    window, model = (None, None) if budget.from_log else (budget.window, budget.model)
    crossing: Callable[[int], int | None]
    if tokenizer == USAGE_TOKENIZER:
        scan = scan_usage(path, input_format=input_format, options=options)
        a = usage_analysis(scan, window=window, model=model, thresholds=check_thresholds(thresholds))
        crossing = partial(crossing_line, scan)
    else:
        a = analyze(
            path,
            # One counter per process and setting.
            counter=process_counter(tokenizer, use_cache, budget.model, 1),
            tokenizer=tokenizer,
            window=window,
            model=model,
            thresholds=thresholds,
            input_format=input_format,
            options=options,
            top=0,
            use_cache=use_cache,
        )
        crossing = partial(_first_line_over, a)
    return verdict(a, budget.at(a.window, a.model) if budget.from_log else budget, crossing)


def check_paths(
    paths: Sequence[str],
    budget: Budget,
    *,
    tokenizer: str = "o200k_base",
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
    use_cache: bool = True,
    fail_fast: bool = False,
    jobs: int = 1,
    on_file: Callable[[FileCheck], None] | None = None,
) -> CheckReport:
    """Check every transcript, ``jobs`` files at a time in worker processes (the verdicts come back in
    input order); an unreadable one is an ``error`` verdict and the rest go on."""
    work = partial(
        check_file,
        budget=budget,
        tokenizer=tokenizer,
        thresholds=tuple(thresholds),
        input_format=input_format,
        options=options,
        use_cache=use_cache,
    )

    def verdict_of(o: Outcome[FileCheck]) -> FileCheck:
        if o.value is not None:
            return o.value
        if o.exit_code == ExitCode.USAGE:
            raise UsageError(o.error or "bad options")  # wrong for every file: stop at once
        return FileCheck(path=o.path, status="error", line=o.line, error=o.message, exit_code=o.exit_code)

    def notify(o: Outcome[FileCheck]) -> None:
        if on_file is not None:
            on_file(verdict_of(o))

    outcomes = run_batch([(p, p) for p in paths], work, jobs=jobs, fail_fast=fail_fast, on_outcome=notify)
    files = tuple(verdict_of(o) for o in outcomes)
    return CheckReport(budget=budget, tokenizer=tokenizer, files=files, fail_fast=fail_fast)


def report_to_json(report: CheckReport) -> dict[str, Any]:
    """The ``ctxc.check/2`` envelope."""
    b = report.budget
    return envelope(
        "check",
        budget={k: getattr(b, k) for k in ("limit", "warn_at", "window", "model", "max_usage", "max_tokens")},
        tokenizer=report.tokenizer,
        files=[
            {
                "path": f.path,
                "status": f.status,
                "format": f.format,
                "tokens": f.tokens,
                "share": None if f.share is None else round(f.share, 6),
                "stage": f.stage,
                "over_by": f.over_by,
                "line": f.line,
                "window": f.budget.window if f.budget else None,
                "limit": f.budget.limit if f.budget else None,
                "error": f.error,
                "exit_code": f.exit_code or None,
            }
            for f in report.files
        ],
        totals={"files": len(report.files), **{s: report.count(s) for s in STATUSES}},
        exit_code=report.exit_code,
    )


def message(f: FileCheck, budget: Budget) -> str:
    """One sentence on a verdict, for people (table) and for annotations (GitHub)."""
    if f.status == "error":
        return f.error or "could not be read"
    budget = f.budget or budget
    assert f.tokens is not None
    assert f.share is not None
    figures = f"{f.tokens:,} tokens ({f.share:.1%} of {budget.window:,})"
    if f.status == "over":
        pct = f.over_by / budget.limit
        return f"{figures}: {f.over_by:,} ({pct:.1%}) over the budget of {budget.limit:,}"
    if f.status == "near":
        return (
            f"{figures}: under the budget of {budget.limit:,}, past the warning level of {budget.warn_at:,}"
        )
    return f"{figures}: within the budget of {budget.limit:,}"


def render_table(report: CheckReport) -> str:
    """Plain text, one line per file then a summary: stable, and readable in any CI log."""
    names = [one_line(f.path) for f in report.files]  # a newline in a name would split its line
    width = max(map(len, names), default=0)
    labels = {"over": "OVER ", "near": "near ", "ok": "ok   ", "error": "ERROR"}
    lines = [
        f"{labels[f.status]} {name:<{width}}  {message(f, report.budget)}"
        + (f" (line {f.line})" if f.line else "")
        for f, name in zip(report.files, names, strict=True)
    ]
    return "\n".join([*lines, report.headline()]) + "\n"


def escape_data(text: str) -> str:
    """A workflow command's message: ``%``, CR and LF percent-encoded (``%`` first, so it is not doubled)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: as a message, plus ``:`` and ``,``, which delimit properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(level: str, text: str, **properties: str | int | None) -> str:
    """``::error file=a.jsonl,line=3,title=...::text`` with GitHub's escaping (``actions/toolkit``'s
    ``escapeProperty`` and ``escapeData``); properties that are None are left out."""
    props = ",".join(f"{k}={escape_property(str(v))}" for k, v in properties.items() if v is not None)
    return f"::{level}{' ' + props if props else ''}::{escape_data(text)}"


def render_github(report: CheckReport) -> str:
    """GitHub Actions annotations: ``error`` for over budget and unreadable files, ``warning`` for near
    budget (``ok`` files get none), and one ``notice`` with the summary."""
    titles = {
        "over": "over the token budget",
        "near": "near the token budget",
        "error": "unreadable transcript",
    }
    out = [
        workflow_command(
            "warning" if f.status == "near" else "error",
            message(f, report.budget),
            file=f.path,
            line=f.line,
            title=f"ctxc check: {titles[f.status]}",
        )
        for f in report.files
        if f.status != "ok"
    ]
    out.append(workflow_command("notice", report.headline(), title="ctxc check"))
    return "\n".join(out) + "\n"
