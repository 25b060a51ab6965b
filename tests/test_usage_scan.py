"""``analyze --tokenizer usage``: recorded usage read from the usage lines alone equals what the full
reader records, on every corpus log and on the tricky shapes (split responses, late parts, synthetic
turns, BOM, CRLF, bad lines); the CLI's fast path prints exactly what the typer command prints."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import SAMPLES, corpus_files, corpus_params, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxc
from ctxc.errors import ExitCode, InputError, UsageError
from ctxc.model import Boundary
from ctxc.reader import ReadOptions
from ctxc.tokens import RecordedUsageOnly
from ctxc.usage_scan import crossing_line, scan_usage, total_tokens, usage_analysis


@pytest.mark.parametrize("path", [*corpus_params("claude-code/*"), SAMPLES / "claude-code.jsonl"])
def test_hand_written_claude_code_loop_equals_its_adapter_on_the_usage_lines(path: Path) -> None:
    # The loop is only faster: any adapter with usage_needles gets the same figures from its reader.
    from ctxc.formats import get_adapter
    from ctxc.usage_scan import _claude_code, _Lines, _needle_lines

    adapter, data = get_adapter("claude-code"), path.read_bytes()
    usage, boundaries, _ = _claude_code(_Lines(data, str(path), ReadOptions()), adapter.usage_needles)
    generic, generic_boundaries, _ = _needle_lines(_Lines(data, str(path), ReadOptions()), adapter)
    assert usage == generic
    assert _facts(boundaries) == _facts(generic_boundaries)


@pytest.mark.parametrize("path", corpus_params("claude-code/*") + corpus_params("codex/*"))
def test_fast_scan_equals_the_full_reader(path: Path) -> None:
    transcript = ctxc.load(path)
    if not transcript.usage:
        with pytest.raises(InputError, match="no recorded usage"):
            scan_usage(path)
        return
    scan = scan_usage(path)
    assert scan.fast
    assert scan.format == transcript.format
    assert scan.usage == transcript.usage  # figures, line numbers and models
    assert _facts(scan.boundaries) == _facts(transcript.boundaries)


def _facts(boundaries: tuple[Boundary, ...]) -> list[tuple[object, ...]]:
    """What a usage scan knows of a boundary (its message index needs the messages)."""
    return [(b.kind, b.line, b.trigger, b.pre_tokens, b.resets) for b in boundaries]


@pytest.mark.parametrize("path", corpus_params("chat-messages/*"))
def test_other_formats_use_the_full_reader_without_counting(path: Path) -> None:
    transcript = ctxc.load(path)
    if not transcript.usage:
        with pytest.raises(InputError, match=f"no recorded usage in this {transcript.format} file"):
            scan_usage(path)
        return
    scan = scan_usage(path)
    assert not scan.fast
    assert scan.usage == transcript.usage


def test_a_dataset_records_no_usage() -> None:
    with pytest.raises(InputError, match="no recorded usage in this dataset file") as exc:
        scan_usage(SAMPLES / "dataset.jsonl")
    assert exc.value.exit_code == ExitCode.INPUT


def _cc(**fields: Any) -> dict[str, Any]:
    return {"uuid": f"u{id(fields)}", "sessionId": "s", "parentUuid": None, **fields}


def _assistant(
    mid: str | None, usage: dict[str, int] | None, model: str = "claude-opus-4-5"
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "x"}],
    }
    if mid is not None:
        message["id"] = mid
    if usage is not None:
        message["usage"] = usage
    return _cc(type="assistant", message=message, requestId="r")


def _user(text: str) -> dict[str, Any]:
    return _cc(type="user", message={"role": "user", "content": text})


def _u(inp: int, out: int, read: int = 0, write: int = 0) -> dict[str, int]:
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
    }


def _write(path: Path, records: list[dict[str, Any]], *, eol: bytes = b"\n", bom: bool = False) -> Path:
    body = eol.join(orjson.dumps(r) for r in records) + eol
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + body)
    return path


TRICKY = [
    _user("start"),
    _assistant("m1", _u(3, 1, 100, 10)),  # a response split over records: output grows as it streams
    _user("a tool result between the parts"),
    _assistant("m1", _u(3, 50, 100, 10)),
    _assistant("m2", _u(5, 7, 200, 0)),
    _assistant("m1", _u(3, 60, 100, 10)),  # a late part of a closed response: not counted again
    _assistant(None, _u(1, 2)),  # no id: its own call
    _assistant("m3", _u(0, 0), model="<synthetic>"),  # written by the client, not an API call
    _cc(type="system", subtype="compact_boundary", compactMetadata={"trigger": "auto", "preTokens": 321}),
    _user('a user line that mentions "usage" inside a string is never mistaken for a call'),
    _cc(type="user", message={"role": "user", "content": "t"}, toolUseResult={"usage": _u(9, 9, 9, 9)}),
]


@pytest.mark.parametrize(("eol", "bom"), [(b"\n", False), (b"\r\n", False), (b"\n", True)])
def test_tricky_claude_code_shapes_match_the_full_reader(tmp_path: Path, eol: bytes, bom: bool) -> None:
    path = _write(tmp_path / "t.jsonl", TRICKY, eol=eol, bom=bom)
    scan = scan_usage(path)
    transcript = ctxc.load(path)
    assert scan.fast
    assert scan.usage == transcript.usage
    assert _facts(scan.boundaries) == _facts(transcript.boundaries)
    assert [(u.output, u.line) for u in scan.usage] == [(50, 2), (7, 5), (2, 7)]
    assert scan.boundaries[0].pre_tokens == 321


def test_a_bad_usage_line_is_reported_with_its_line_or_skipped(tmp_path: Path) -> None:
    good = orjson.dumps(_assistant("m1", _u(1, 2))).decode()
    path = tmp_path / "bad.jsonl"
    path.write_text(
        f'{good}\n{{"type":"assistant","usage": oops}}\n{orjson.dumps(_assistant("m2", _u(3, 4))).decode()}\n'
    )
    with pytest.raises(InputError, match="not valid JSON") as exc:
        scan_usage(path)
    assert (exc.value.path, exc.value.line) == (str(path), 2)
    scan = scan_usage(path, options=ReadOptions(skip_invalid=True))
    assert scan.skipped_lines == 1
    assert [u.line for u in scan.usage] == [1, 3]


def test_a_line_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "big.jsonl", [_user("x" * 2000), _assistant("m1", {**_u(1, 2), "pad": 1})])
    with pytest.raises(InputError, match="over the"):
        scan_usage(path, options=ReadOptions(max_line_bytes=200))


def test_stdin_and_streams(tmp_path: Path) -> None:
    import io

    data = _write(tmp_path / "t.jsonl", TRICKY).read_bytes()
    stream = io.BytesIO(data)
    stream.name = "piped.jsonl"
    scan = scan_usage(stream)
    assert scan.path == "piped.jsonl"
    assert len(scan.usage) == 3


def test_analysis_from_usage(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", TRICKY)
    a = ctxc.analyze(str(path), tokenizer="usage", window=1000)
    assert a.tokenizer == "usage"
    assert a.messages == ()
    assert a.usage is not None
    assert a.usage.calls == 3
    assert a.usage.max_context == 205
    # Every call was made before the log's own compaction at line 9: none measures the live context.
    assert (a.max_context, a.live_from_line) == (0, 9)
    assert a.total_tokens == total_tokens(a.usage) == (3 + 50 + 110) + (5 + 7 + 200) + (1 + 2)
    before = _write(tmp_path / "before.jsonl", TRICKY[:8])
    b = ctxc.analyze(str(before), tokenizer="usage", window=1000)
    assert b.max_context == 205
    assert b.stage == 1  # 20.5% of 1000
    assert ctxc.analyze(str(before), tokenizer="usage", window=220).stage == 5  # 93%
    assert crossing_line(scan_usage(path), 150) is None  # only calls in the live context count
    scan = scan_usage(before)
    assert crossing_line(scan, 150) == 5
    assert crossing_line(scan, 10_000) is None


# ------------------------------------------------------------------------------------ record tree


def _rec(rtype: str, uid: str, parent: str | None, **extra: Any) -> dict[str, Any]:
    head = {"parentUuid": parent, "isSidechain": extra.pop("side", False), "userType": "external"}
    return {**head, "cwd": "/w", "sessionId": "s", "type": rtype, **extra, "uuid": uid}


def _said(uid: str, parent: str | None, text: Any, **extra: Any) -> dict[str, Any]:
    return _rec("user", uid, parent, message={"role": "user", "content": text}, **extra)


def _call(uid: str, parent: str | None, mid: str, context: int, **extra: Any) -> dict[str, Any]:
    message = {
        "id": mid,
        "role": "assistant",
        "model": "claude-opus-4-5",
        "content": [],
        "usage": _u(1, 2, context),
    }
    return _rec("assistant", uid, parent, message=message, **extra)


def _stream(records: list[dict[str, Any]]) -> io.BytesIO:
    return io.BytesIO(b"".join(orjson.dumps(r) + b"\n" for r in records))


REWOUND = [
    _said("u1", None, "Build the parser"),
    _call("a1", "u1", "m1", 1_000),
    _said("u2", "a1", "Now the tokenizer"),
    _call("a2", "u2", "m2", 90_000),  # the branch the user rewound: its call was the largest
    _said("u3", "a2", "And the lexer"),
    _call("a3", "u3", "m3", 95_000),
    _said("v2", "a1", "Instead, document the parser"),  # re-parented at a1: u2..a3 are abandoned
    _call("b2", "v2", "m4", 3_000),
]


@pytest.mark.parametrize(("eol", "bom"), [(b"\n", False), (b"\r\n", False), (b"\n", True)])
def test_the_calls_of_a_rewound_branch_are_marked_as_the_reader_marks_them(
    tmp_path: Path, eol: bytes, bom: bool
) -> None:
    path = _write(tmp_path / "rewound.jsonl", REWOUND, eol=eol, bom=bom)
    scan = scan_usage(path)
    assert scan.usage == ctxc.load(path).usage
    assert [(u.line, u.abandoned) for u in scan.usage] == [(2, False), (4, True), (6, True), (8, False)]
    a = usage_analysis(scan, window=200_000)
    assert (a.max_context, a.usage.max_context if a.usage else None) == (3_001, 3_001)
    assert a.usage is not None
    assert a.usage.calls == 4  # every call was billed
    assert crossing_line(scan, 50_000) is None


def test_a_log_rewound_before_its_first_answer_has_no_recorded_context() -> None:
    records = [_said("u1", None, "Delete the cache"), _call("a1", "u1", "m1", 5_000), _said("u2", None, "Hi")]
    a = usage_analysis(scan_usage(_stream(records)), window=200_000)
    assert a.usage is not None
    assert (a.usage.calls, a.usage.last_context, a.usage.max_context, a.max_context) == (1, 0, 0, 0)


def _written(record: dict[str, Any], layout: str) -> bytes:
    """A record as some writer lays it out: Claude Code's compact JSON; the ``type`` after the message,
    or the ``subtype`` away from it; spaced JSON; a nested ``uuid`` before the record's own; an escaped
    value among the leading keys."""
    if layout == "type-last":
        record = {k: v for k, v in record.items() if k != "type"} | {"type": record["type"]}
    elif layout == "nested-uuid":
        nested = {"rows": [{"uuid": "not-a-record", "type": "user"}]}
        record = {k: v for k, v in record.items() if k != "uuid"} | {
            "toolUseResult": nested,
            "uuid": record["uuid"],
        }
    elif layout == "subtype-last" and "subtype" in record:
        record = {k: v for k, v in record.items() if k != "subtype"} | {"subtype": record["subtype"]}
    elif layout == "escaped":
        record = {**record, "cwd": 'C:\\work\\"quoted"'}
    if layout == "spaced":
        return json.dumps(record).encode()
    return orjson.dumps(record)


@st.composite
def _trees(draw: st.DrawFn) -> bytes:
    """A Claude Code log grown step by step: prompts, split responses with their tool results, progress
    records, hook notes, file snapshots, compactions, inline subagent runs, and rewinds to any earlier
    record."""
    records: list[dict[str, Any]] = []
    leaf: str | None = None
    rows: list[str] = []  # uuids a rewind may go back to
    for n in range(draw(st.integers(2, 14))):
        step = draw(
            st.sampled_from(
                ["prompt", "call", "call", "progress", "hook", "snapshot", "compact", "side", "rewind"]
            )
        )
        uid = f"r{n}"
        if step == "rewind" and rows:
            leaf = draw(st.sampled_from(rows))
            continue
        if step == "prompt" or leaf is None:
            records.append(_said(uid, leaf, f"prompt {n}"))
        elif step == "call":
            parts = draw(st.integers(1, 3))
            context = draw(st.integers(0, 300_000))
            for k in range(parts):
                records.append(_call(f"{uid}p{k}", leaf, f"m{n}", context))
                leaf = f"{uid}p{k}"
            result = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok"}]
            records.append(_said(uid, f"{uid}p0", result))
        elif step == "progress":
            records.append(_rec("progress", uid, leaf, data={"type": "hook_progress"}))
        elif step == "hook":
            records.append(_rec("system", uid, leaf, subtype="stop_hook_summary", content="ran"))
        elif step == "snapshot":  # hung off any row, and no row of the chain: the leaf stays
            at = draw(st.sampled_from(rows)) if rows else leaf
            records.append(_rec("system", uid, at, subtype="file_snapshot", content="saved"))
            continue
        elif step == "compact":
            meta = {"trigger": "auto", "preTokens": 100}
            records.append(_rec("system", uid, None, subtype="compact_boundary", compactMetadata=meta))
        else:  # an inline subagent run: a chain of its own
            records.append(_said(f"{uid}s", None, "search", side=True))
            records.append(_call(uid, f"{uid}s", f"m{n}", draw(st.integers(0, 300_000)), side=True))
            continue
        leaf = records[-1]["uuid"]
        rows.append(leaf)
    layouts = st.sampled_from(
        ["compact", "compact", "type-last", "subtype-last", "spaced", "nested-uuid", "escaped"]
    )
    return b"".join(_written(r, draw(layouts)) + b"\n" for r in records)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_trees())
def test_the_scan_places_every_call_on_the_tree_as_the_reader_does(data: bytes) -> None:
    reader = ctxc.load(io.BytesIO(data), input_format="claude-code").usage
    if not reader:
        return
    assert scan_usage(io.BytesIO(data)).usage == reader  # figures, lines, and which calls are abandoned


@pytest.mark.parametrize("subtype_last", [False, True])
def test_a_file_snapshot_is_no_row_of_the_chain_whatever_its_layout(subtype_last: bool) -> None:
    snapshot = _rec("system", "f1", "a3", subtype="file_snapshot", content="saved")  # off the branch
    if subtype_last:  # not among the leading keys: the line is parsed whole
        snapshot = {k: v for k, v in snapshot.items() if k != "subtype"} | {"subtype": "file_snapshot"}
    records = [*REWOUND, snapshot]
    scan = scan_usage(_stream(records))
    assert scan.usage == ctxc.load(_stream(records)).usage
    assert [u.abandoned for u in scan.usage] == [False, True, True, False]


def test_a_line_being_written_is_not_yet_on_the_tree() -> None:
    # The client is still writing a prompt hung off the abandoned branch: the reader skips the cut line
    # (--skip-invalid), and so does the scan's tree, whatever the line's head says.
    cut = orjson.dumps(_said("v3", "a3", "more " * 20))[:-30]
    data = b"".join(orjson.dumps(r) + b"\n" for r in REWOUND) + cut
    options = ReadOptions(skip_invalid=True)
    scan = scan_usage(io.BytesIO(data), options=options)
    assert scan.usage == ctxc.load(io.BytesIO(data), options=options, say_skipped=False).usage
    assert [u.abandoned for u in scan.usage] == [False, True, True, False]


def test_the_usage_counter_refuses_to_count() -> None:
    with pytest.raises(UsageError, match="cannot count text"):
        RecordedUsageOnly().count(["hello"])


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_usage_matches_recorded_usage_of_a_counted_analysis(capsys: pytest.CaptureFixture[str]) -> None:
    sample = str(SAMPLES / "claude-code.jsonl")
    code, out, _ = run(capsys, "analyze", sample, "--tokenizer", "usage", "-f", "json")
    assert code == 0
    usage_doc = orjson.loads(out)["files"][0]
    code, out, _ = run(capsys, "analyze", sample, "-f", "json", "--no-cache")
    counted = orjson.loads(out)["files"][0]
    assert usage_doc["recorded_usage"] == counted["recorded_usage"]
    assert usage_doc["tokenizer"] == "usage"
    assert usage_doc["messages"] == []
    assert usage_doc["context_tokens"] == counted["recorded_usage"]["max_context"]


def test_a_folder_scanned_in_forked_workers_gives_the_same_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = corpus_files("claude-code/**/*.jsonl") + corpus_files("codex/**/*.jsonl")
    # Without the corpus beside the checkout, the samples with recorded usage stand in for it.
    logs = logs or [SAMPLES / "codex.jsonl"]
    for k, path in enumerate([SAMPLES / "claude-code.jsonl", *logs]):
        (tmp_path / f"{k:02}.jsonl").write_bytes(path.read_bytes())
    docs, codes = [], []
    for jobs in ("1", "2"):
        code, out, _ = run(
            capsys, "analyze", str(tmp_path), "--tokenizer", "usage", "-f", "json", "--jobs", jobs
        )
        codes.append(code)
        docs.append(orjson.loads(out))
    assert docs[0] == docs[1]
    assert codes[0] == codes[1]  # 12 when a corpus log records no usage: it is reported, the rest go on
    assert sum(1 for f in docs[0]["files"] if f["recorded_usage"]) >= 2


@pytest.mark.parametrize("extra", [["-f", "csv"], ["--forecast"]])
def test_usage_has_no_rows_for_csv_or_forecast(capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    code, _, err = run(capsys, "analyze", str(SAMPLES / "claude-code.jsonl"), "--tokenizer", "usage", *extra)
    assert code == ExitCode.USAGE
    assert "--tokenizer usage" in err


def test_cli_reports_a_file_without_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "analyze", str(SAMPLES / "dataset.jsonl"), "--tokenizer", "usage")
    assert code == ExitCode.INPUT
    assert out == ""
    assert "no recorded usage in this dataset file" in err
