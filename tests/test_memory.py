"""What keeps a large compaction's memory down, held as behaviour (memory itself is measured by
``bench/bench_compact.py``, never asserted here).

* The output is read back (verified) with :func:`ctxc.formats.reload`: what it reads equals a reader's
  reading of the output's bytes, and the records taken unchanged from the input share its parsed JSON.
* The input file is parsed as it is read and archived from its records, byte for byte.
* A compacted file's lines are copied into the archive's spool as they are read, and read back from it
  rather than held: the output and the archive are what was parsed, whatever happens to the input.
* A line ctxc writes holds its JSON, not its bytes, and encoding it leaves no UTF-8 copy in its strings.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import pickle
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES, corpus_params, sample_files

from ctxc.archive import Archive
from ctxc.archive_store import sha256_hex
from ctxc.compaction import files
from ctxc.compaction.files import CompactJob, compact_file
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.compaction.write import encode_record
from ctxc.errors import CtxcError
from ctxc.formats import load, reload
from ctxc.model import Record, Transcript
from ctxc.reader import BOM, ReadOptions, Spool, named_bytes

ALL_FILES = [*corpus_params(), *[pytest.param(p, id=f"samples/{p.name}") for p in sample_files()]]


def read_bytes_back(written: Transcript, options: ReadOptions = ReadOptions()) -> Transcript:
    """What a reader makes of ``written``'s bytes: what :func:`reload` must equal."""
    return load(named_bytes(written.source, written.to_bytes()), input_format=written.format, options=options)


@pytest.mark.parametrize("path", ALL_FILES)
def test_reload_of_a_file_is_its_reading_and_shares_its_json(path: Path) -> None:
    t = load(path)
    again = reload(t, t)
    assert again == read_bytes_back(t)
    if any(b"\n" in r.raw or r.raw.startswith(BOM) for r in t.records):
        return  # a pretty-printed document, or a byte-order mark: read back from the bytes
    shared = [(a, b) for a, b in zip(again.records, t.records, strict=True) if b.kind != "blank"]
    assert all(a.data is b.data for a, b in shared), "the JSON of unchanged records is not parsed again"


@pytest.mark.parametrize("path", sample_files(), ids=lambda p: p.name)
def test_reload_keeps_the_records_read_that_stay_in_place(path: Path) -> None:
    t = load(path)
    if any(b"\n" in r.raw or r.raw.startswith(BOM) for r in t.records):
        return  # read back from the bytes
    again = reload(t, t)
    assert again == read_bytes_back(t)
    assert all(a is b for a, b in zip(again.records, t.records, strict=True) if b.kind == "passthrough")


@pytest.mark.parametrize("path", sample_files(), ids=lambda p: p.name)
def test_reload_of_a_compacted_sample_is_the_reading_of_its_bytes(path: Path) -> None:
    t = load(path)
    for strategy in ("fifo", "mask"):
        options = CompactOptions(strategy=strategy, target_ratio=0.3, window=20_000, allow_over=True)
        result = compact_transcript(t, options)
        # The run verified its output with reload: that is what it returns.
        assert result.transcript == read_bytes_back(result.transcript)


def _records(*lines: bytes, eol: bytes = b"\n") -> tuple[Record, ...]:
    return tuple(Record(line=k, raw=raw, eol=eol, kind="message") for k, raw in enumerate(lines, 1))


USER = b'{"role":"user","content":"hi"}'
ASSISTANT = b'{"role":"assistant","content":"hello"}'


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(_records(USER, ASSISTANT), id="new-records"),
        pytest.param(_records(USER, b"  ", ASSISTANT), id="blank-line"),
        pytest.param(_records(USER, ASSISTANT, eol=b"\r\n"), id="crlf"),
        pytest.param((*_records(USER), Record(2, ASSISTANT, b"")), id="no-final-newline"),
        pytest.param(_records(BOM + USER, ASSISTANT), id="bom"),
        pytest.param(_records(USER + b"\r", ASSISTANT), id="cr-before-newline"),
        pytest.param(_records(b'{"role":"user",', b'"content":"hi"}'), id="document-over-two-lines"),
        pytest.param(_records(b'{"role":"user",\n"content":"hi"}'), id="newline-inside"),
        pytest.param((Record(1, USER, b""), *_records(ASSISTANT)), id="line-end-missing-mid-file"),
        pytest.param(_records(USER, b"not json"), id="invalid-line"),
        pytest.param(_records(USER, b"[1, 2]"), id="not-an-object"),
        pytest.param(_records(b"[1, 2]", USER), id="first-line-not-an-object"),
    ],
)
@pytest.mark.parametrize("skip_invalid", [False, True])
def test_reload_reads_any_written_records_as_their_bytes_read(
    records: tuple[Record, ...], skip_invalid: bool
) -> None:
    source = load(named_bytes("in.jsonl", USER + b"\n"))
    written = replace(source, records=records)
    options = ReadOptions(skip_invalid=skip_invalid)
    try:
        expected: Transcript | str = read_bytes_back(written, options)
    except CtxcError as exc:
        expected = str(exc)
    try:
        got: Transcript | str = reload(written, source, options=options)
    except CtxcError as exc:
        got = str(exc)
    assert got == expected


def test_a_file_is_parsed_as_it_is_read_and_archived_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def whole(*_: object) -> None:
        raise AssertionError("the input file was read whole before parsing")

    monkeypatch.setattr(files, "read_all", whole)
    src = SAMPLES / "claude-code.jsonl"
    out = tmp_path / "out.jsonl"
    job = CompactJob(
        path=str(src),
        output=str(out),
        options=CompactOptions(strategy="fifo", target_ratio=0.5, window=20_000, allow_over=True),
        archive=str(tmp_path / "archive"),
        index=False,
    )
    doc = compact_file(job)
    data = src.read_bytes()
    assert doc["run"]["archive_id"] == doc["run"]["input_sha256"] == sha256_hex(data)
    assert Archive(tmp_path / "archive").read(doc["run"]["archive_id"]) == data
    assert doc["run"]["output_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()


def test_the_archive_stores_parts_as_the_bytes_they_join_to(tmp_path: Path) -> None:
    parts = [USER, b"\n", ASSISTANT, b"\n"]
    whole = b"".join(parts)
    a = Archive(tmp_path / "a")
    assert a.object_id(parts) == a.object_id(whole) == hashlib.sha256(whole).hexdigest()
    ident = a.store(parts)
    assert ident == a.store(whole)
    assert a.read(ident) == whole


FIFO = CompactOptions(strategy="fifo", target_ratio=0.5, window=20_000, allow_over=True)


def _compact(src: Path, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "out.jsonl"
    return compact_file(CompactJob(str(src), str(out), FIFO, archive=str(tmp_path / "archive"), index=False))


def test_a_compacted_files_long_lines_are_read_back_from_the_archive_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Transcript] = []

    def spy(transcript: Transcript, *args: Any, **kwargs: Any) -> Any:
        seen.append(transcript)
        return compact_transcript(transcript, *args, **kwargs)

    monkeypatch.setattr(files, "compact_transcript", spy)
    src = SAMPLES / "claude-code.jsonl"
    doc = _compact(src, tmp_path)
    long = [r for r in seen[0].records if r.size >= 256]
    assert long
    assert all(r.kept for r in long)
    held = compact_transcript(load(src), FIFO).transcript
    assert (tmp_path / "out.jsonl").read_bytes() == held.to_bytes()
    assert Archive(tmp_path / "archive").read(doc["run"]["archive_id"]) == src.read_bytes()
    assert list((tmp_path / "archive").rglob(".tmp-*")) == []


def test_an_input_changed_during_the_run_changes_neither_its_output_nor_its_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (SAMPLES / "claude-code.jsonl").read_bytes()
    src = tmp_path / "in.jsonl"
    src.write_bytes(data)
    read = files.load_counted

    def then_changed(*args: Any, **kwargs: Any) -> Any:
        loaded = read(*args, **kwargs)
        src.write_bytes(data.replace(b"e", b"E"))  # the same size, other bytes
        return loaded

    monkeypatch.setattr(files, "load_counted", then_changed)
    doc = _compact(src, tmp_path)
    assert (tmp_path / "out.jsonl").read_bytes() == compact_transcript(
        load(SAMPLES / "claude-code.jsonl"), FIFO
    ).transcript.to_bytes()
    assert Archive(tmp_path / "archive").read(doc["run"]["archive_id"]) == data


def test_the_spool_of_a_killed_run_is_swept_by_the_next(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    left = tmp_path / "archive" / "objects" / "tmp" / f".tmp-{child.pid}-0123456789ab"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"half an original")
    _compact(SAMPLES / "claude-code.jsonl", tmp_path)
    assert list((tmp_path / "archive").rglob(".tmp-*")) == []


def test_a_record_kept_in_a_spool_reads_and_compares_as_its_bytes(tmp_path: Path) -> None:
    with contextlib.closing(Spool(tmp_path / "spool")) as spool:
        spool.append(USER + b"\n")
        kept = Record.kept_in(
            spool, spool.append(ASSISTANT + b"\n"), len(ASSISTANT), 2, b"\n", None, "message"
        )
        assert (kept.raw, kept.size, kept.kept) == (ASSISTANT, len(ASSISTANT), True)
        assert kept == Record(2, ASSISTANT, b"\n", kind="message")
        assert pickle.loads(pickle.dumps(kept)) == kept  # with its bytes: a spool stays in its process
        moved = kept.but(line=5, eol=b"\r\n")
        assert (moved.line, moved.raw, moved.eol, moved.kept) == (5, ASSISTANT, b"\r\n", True)
        with pytest.raises(FrozenInstanceError):
            kept.line = 3  # type: ignore[misc]
        assert spool.hexdigest() == hashlib.sha256(USER + b"\n" + ASSISTANT + b"\n").hexdigest()
    assert not (tmp_path / "spool").exists()  # never committed: removed


def test_a_written_line_holds_its_json_not_its_bytes_nor_a_utf8_copy_of_its_strings() -> None:
    text = "# 주석: 캐시를 비운다\n" + "x = 1\n" * 200
    others = {"role": "tool", "tool_call_id": "call_1"}
    size = sys.getsizeof(text)
    record = encode_record({**others, "content": text}, b"\n", line=3)
    assert record.kept
    assert record.size == len(record.raw)
    assert record.data == {**others, "content": text}
    assert record.data["content"] is text
    assert sys.getsizeof(text) == size  # encoding a non-ASCII str caches its UTF-8 form inside it
    expected = json.dumps({**others, "content": text}, ensure_ascii=False, separators=(",", ":")).encode()
    assert record.raw == expected
    assert record.to_bytes() == expected + b"\n"
    assert pickle.loads(pickle.dumps(record)) == record
