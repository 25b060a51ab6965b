"""What keeps a large compaction's memory down, held as behaviour (memory itself is measured by
``bench/bench_compact.py``, never asserted here).

* The output is read back (verified) with :func:`ctxc.formats.reload`: what it reads equals a reader's
  reading of the output's bytes, and the records taken unchanged from the input share its parsed JSON.
* The input file is parsed as it is read and archived from its records, byte for byte.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SAMPLES, corpus_params, sample_files

from ctxc.archive import Archive
from ctxc.archive_store import sha256_hex
from ctxc.compaction import files
from ctxc.compaction.files import CompactJob, compact_file
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.errors import CtxcError
from ctxc.formats import load, reload
from ctxc.model import Record, Transcript
from ctxc.reader import BOM, ReadOptions, named_bytes

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
