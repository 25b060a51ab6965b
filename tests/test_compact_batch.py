"""``ctxc.compact_batch``: a batch of compactions that resumes from its journal, with the caller's runner."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from conftest import ROOT

from ctxc.batch import Outcome
from ctxc.compact_batch import FileRunner, compact_batch
from ctxc.compaction.files import CompactJob
from ctxc.compaction.run import CompactOptions


def _here(seen: list[str]) -> FileRunner:
    """A runner that runs each job in this process, in order, and notes which files it ran."""

    def run(
        items: Sequence[tuple[str, CompactJob]],
        work: Callable[[CompactJob], dict[str, Any]],
        *,
        tokens_of: Callable[[dict[str, Any]], int],
    ) -> list[Outcome[dict[str, Any]]]:
        seen.extend(path for path, _ in items)
        return [Outcome(k, path, value=work(job)) for k, (path, job) in enumerate(items)]

    return run


def test_a_batch_run_again_runs_nothing_and_reports_every_file_skipped(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    for name in ("codex.jsonl", "claude-code.jsonl"):
        shutil.copy(ROOT / "samples" / name, src / name)
    options = CompactOptions(target_ratio=0.5, window=200_000)
    jobs = [
        CompactJob(str(p), str(tmp_path / "out" / p.name), options, str(tmp_path / "a"), make_dirs=True)
        for p in sorted(src.iterdir())
    ]
    report = tmp_path / "report.json"
    first: list[str] = []
    doc = compact_batch(
        jobs,
        archive=str(tmp_path / "a"),
        force=False,
        fail_fast=False,
        report=str(report),
        run_files=_here(first),
    )
    assert first == [j.path for j in jobs]
    assert doc["exit_code"] == 0
    assert doc["totals"]["ok"] == 2
    assert report.is_file()
    again: list[str] = []
    doc = compact_batch(
        jobs, archive=str(tmp_path / "a"), force=False, fail_fast=False, report=None, run_files=_here(again)
    )
    assert again == []
    assert [f["status"] for f in doc["files"]] == ["skipped", "skipped"]
    forced: list[str] = []
    compact_batch(
        jobs, archive=str(tmp_path / "a"), force=True, fail_fast=False, report=None, run_files=_here(forced)
    )
    assert forced == [j.path for j in jobs]
