"""``ctxc.compact_record``: one dataset record compacted as ``ctxc compact`` compacts that line of a file,
byte for byte when given the record's source; pure (nothing written without an archive); picklable."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import SAMPLES

import ctxc
from ctxc.archive import Archive
from ctxc.archive_store import sha256_hex
from ctxc.cli import main
from ctxc.compaction.run import CompactOptions
from ctxc.errors import ExitCode
from ctxc.record import RecordResult, RecordSource, compact_record, compact_row, record_sources

DATASET = SAMPLES / "dataset.jsonl"
OPTIONS = CompactOptions(target_ratio=0.3, window=10_000, allow_over=True)
CLI_OPTIONS = ("--target-ratio", "0.3", "--window", "10000", "--allow-over", "-q")


def cli_compact(tmp_path: Path, src: Path) -> tuple[list[str], dict[str, object]]:
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "compact",
                str(src),
                "-o",
                str(out),
                "--report",
                str(report),
                "--archive",
                str(tmp_path / "a"),
                *CLI_OPTIONS,
            ]
        )
    assert exc.value.code == 0
    return out.read_text(encoding="utf-8").splitlines(), orjson.loads(report.read_bytes())


def test_with_its_source_a_record_compacts_to_exactly_the_cli_line(tmp_path: Path) -> None:
    expected, report = cli_compact(tmp_path, DATASET)
    lines = DATASET.read_text(encoding="utf-8").splitlines()
    sources = record_sources(DATASET)
    assert all(s is not None and s.archive_id == report["run"]["archive_id"] for s in sources)  # type: ignore[index]
    conversations = report["conversations"]
    assert isinstance(conversations, list)
    changed = 0
    for line, want, source, conv in zip(lines, expected, sources, conversations, strict=True):
        result = compact_record(line, OPTIONS, source=source)
        assert result.status == "ok"
        assert result.line == want
        assert (result.tokens_before, result.tokens_after) == (conv["tokens_before"], conv["tokens_after"])
        changed += result.tokens_after < result.tokens_before
    assert changed >= 2  # the test compacts something, not only copies lines


def test_on_its_own_a_record_cites_itself(tmp_path: Path) -> None:
    line = DATASET.read_text(encoding="utf-8").splitlines()[0]
    single = tmp_path / "one.jsonl"
    single.write_text(line + "\n", encoding="utf-8")
    expected, report = cli_compact(tmp_path, single)
    result = compact_record(line, OPTIONS)
    assert result.line == expected[0]
    assert result.archive_id == report["run"]["archive_id"] == sha256_hex((line + "\n").encode())  # type: ignore[index]
    assert re.search(rf"ctxc archive {result.archive_id[:12]} messages \d+-\d+", result.line or "")
    assert result.savings
    assert sum(result.savings.values()) > 0


def test_dict_bytes_and_str_inputs_agree() -> None:
    line = DATASET.read_text(encoding="utf-8").splitlines()[4]
    as_str = compact_record(line, OPTIONS)
    as_bytes = compact_record(line.encode() + b"\r\n", OPTIONS)
    assert as_str.line == as_bytes.line
    # a dict is serialized compactly: its own bytes, so its own archive id in the citations
    as_dict = compact_record(orjson.loads(line), OPTIONS)
    compact_line = compact_record(orjson.dumps(orjson.loads(line)).decode(), OPTIONS)
    assert as_dict == compact_line
    assert as_dict.archive_id != as_str.archive_id


def test_nothing_is_written_without_an_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXC_ARCHIVE", str(tmp_path / "default-archive"))
    monkeypatch.chdir(tmp_path)
    line = DATASET.read_text(encoding="utf-8").splitlines()[0]
    compact_record(line, OPTIONS)
    compact_record(line, OPTIONS, source=RecordSource("ab" * 32, 0, 1))
    assert list(tmp_path.iterdir()) == []
    store = Archive.open(str(tmp_path / "asked"))
    result = compact_record(line, OPTIONS, archive=store)
    assert store.read(result.archive_id or "") == (line + "\n").encode()


def test_bad_records_are_results_not_exceptions() -> None:
    bad = compact_record("{not json", OPTIONS)
    assert (bad.status, bad.exit_code, bad.line) == ("error", ExitCode.INPUT, None)
    assert "not valid JSON" in (bad.error or "")
    skipped = compact_record('{"note": "no messages here"}', OPTIONS)
    assert (skipped.status, skipped.line) == ("skipped", '{"note": "no messages here"}')
    over = compact_record(
        DATASET.read_text().splitlines()[0], CompactOptions(strategy="fifo", target_tokens=10)
    )
    assert (over.status, over.exit_code) == ("error", ExitCode.OVER_TARGET)
    assert "over the 10 target" in (over.error or "")


@pytest.mark.parametrize(
    "record",
    [{"messages": [{"role": "user", "content": "a\ud800"}]}, {"messages": [], "at": object()}, None, 5],
    ids=["lone-surrogate", "not-json-value", "none", "int"],
)
def test_a_record_that_is_no_json_is_an_error_result(record: object) -> None:
    # A dict orjson cannot write, or no record at all, raised a TypeError (int 5 read as 5 NUL bytes).
    bad = compact_record(record, OPTIONS)  # type: ignore[arg-type]
    assert (bad.status, bad.exit_code, bad.line) == ("error", ExitCode.INPUT, None)
    assert "<record>: " in (bad.error or "")


def test_results_are_plain_and_picklable() -> None:
    result = compact_record(DATASET.read_text().splitlines()[0], OPTIONS)
    again = pickle.loads(pickle.dumps(result))
    assert again == result
    assert isinstance(again, RecordResult)
    row = compact_row({"text": DATASET.read_text().splitlines()[0]}, OPTIONS)
    assert row == result.to_row()
    assert set(row) == {"status", "line", "tokens_before", "tokens_after", "archive_id", "error", "exit_code"}


def test_library_export() -> None:
    assert ctxc.compact_record is compact_record


def test_the_ray_example_without_ray_says_so_in_one_line(tmp_path: Path) -> None:
    # Ray hidden (None in sys.modules makes its import fail), whether or not it is installed here.
    script = SAMPLES.parent / "examples" / "ray_compact.py"
    out = tmp_path / "out.jsonl"
    hide_ray = (
        "import runpy, sys; sys.modules['ray'] = None; "
        f"sys.argv = ['ray_compact.py', {str(DATASET)!r}, {str(out)!r}]; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    env = {**os.environ, "PYTHONPATH": str(SAMPLES.parent)}
    done = subprocess.run(
        [sys.executable, "-c", hide_ray], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 2
    assert done.stderr == "ray_compact.py: error: this example needs Ray: pip install 'ctxc[ray]'\n"
    assert not out.exists()
