"""``ctxc.jobs.repair_file``: the library side of ``ctxc repair`` archives, writes and records the run."""

from __future__ import annotations

from pathlib import Path

import orjson
from conftest import ROOT

from ctxc.archive import Archive
from ctxc.jobs import RepairJob, repair_file


def test_repair_file_archives_the_original_writes_the_fix_and_records_the_run(tmp_path: Path) -> None:
    lines = (ROOT / "samples" / "chat-anthropic.jsonl").read_bytes().splitlines(keepends=True)
    # Drop every tool result: each call is left unanswered, which repair answers.
    kept = [ln for ln in lines if b'"tool_result"' not in ln]
    assert len(kept) < len(lines)
    src = tmp_path / "broken.jsonl"
    src.write_bytes(b"".join(kept))
    out = tmp_path / "fixed.jsonl"
    entry = repair_file(RepairJob(str(src), str(out), archive=str(tmp_path / "a")))
    assert entry["fixed"] > 0
    store = Archive.open(str(tmp_path / "a"))
    assert store.read(entry["archive_id"]) == src.read_bytes()
    runs = [r for r in store.manifest() if r.get("command") == "repair"]
    assert [r["output_sha256"] for r in runs] == [entry["output_sha256"]]
    assert b"no result" in out.read_bytes()
    assert all(orjson.loads(ln) for ln in out.read_bytes().splitlines())
