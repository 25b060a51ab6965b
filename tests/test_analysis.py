"""analyze: stages, totals against an independent count, output formats, the forecast."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import orjson
import pytest
from conftest import CORPUS, SAMPLES, corpus_files, sample_files
from hypothesis import given
from hypothesis import strategies as st

from ctxc.analysis import analyze, finish
from ctxc.cli import main
from ctxc.errors import UsageError
from ctxc.formats import load
from ctxc.report import Scan
from ctxc.stages import stage_for
from ctxc.tokens.cost import MESSAGE_OVERHEAD, image_tokens, message_images
from ctxc.tokens.tiktoken_backend import TiktokenTokenizer


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    code = exc.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().out


@pytest.mark.parametrize(
    ("share", "stage"), [(0.0, 1), (0.599, 1), (0.6, 2), (0.69, 2), (0.7, 3), (0.8, 4), (0.9, 5), (1.7, 5)]
)
def test_stage_boundaries(share: float, stage: int) -> None:
    assert stage_for(share) == stage


@given(
    st.lists(st.floats(min_value=0.01, max_value=1.4), min_size=4, max_size=4).map(sorted),
    st.floats(min_value=0, max_value=2),
)
def test_stage_is_one_plus_the_thresholds_reached(thresholds: list[float], share: float) -> None:
    # Equal thresholds (the adaptive strategy allows them) are each reached.
    assert stage_for(share, thresholds) == 1 + sum(share >= t for t in thresholds)


def test_custom_thresholds_move_the_stage(tmp_path: Path) -> None:
    path = SAMPLES / "chat-openai.jsonl"
    total = analyze(path, use_cache=False).total_tokens
    a = analyze(path, window=total, thresholds=(0.5, 0.6, 0.7, 1.2), use_cache=False)
    assert a.stage == 4  # a full window is past 0.5, 0.6 and 0.7 but not 1.2
    with pytest.raises(UsageError):
        analyze(path, thresholds=(0.9, 0.8, 0.7, 0.6))


def _independent_texts(obj: object) -> list[str]:
    """Every text a chat line carries, found by walking the JSON without ctxc's model."""
    out: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("text", "thinking", "content", "refusal", "reasoning_content") and isinstance(
                value, str
            ):
                out.append(value)
            elif key == "input" and isinstance(value, dict):
                out.append(orjson.dumps(value).decode())
            elif (key == "arguments" and isinstance(value, str)) or (
                key in ("name",) and isinstance(value, str) and obj.get("type") in ("tool_use", "function")
            ):
                out.append(value)
            elif key not in (
                "source",
                "image_url",
                "signature",
                "id",
                "tool_use_id",
                "tool_call_id",
                "role",
                "type",
            ):
                out.extend(_independent_texts(value))
    elif isinstance(obj, list):
        for item in obj:
            out.extend(_independent_texts(item))
    return out


@pytest.mark.parametrize(
    "path",
    [
        SAMPLES / "chat-anthropic.jsonl",
        SAMPLES / "chat-openai.jsonl",
        CORPUS / "chat-messages" / "kimi-cli_context_swebench-sklearn-26323_d8447fa8.jsonl",
    ],
    ids=lambda p: p.name,
)
def test_totals_agree_with_an_independent_tiktoken_count(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not here")
    enc = TiktokenTokenizer("o200k_base")
    texts = [
        t
        for line in path.read_bytes().splitlines()
        if line.strip()
        for t in _independent_texts(orjson.loads(line))
    ]
    independent = sum(enc.count(t) for t in texts)
    a = analyze(path, use_cache=False)
    # ctxc adds 4 tokens of framing per message, and prices images by Anthropic's rule, not as text.
    framing = 4 * len(a.messages)
    images = sum(image_tokens(i) for m in load(path).messages for i in message_images(m))
    assert abs(a.total_tokens - framing - images - independent) <= 0.03 * independent


def test_json_csv_and_table_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(SAMPLES / "claude-code.jsonl")
    code, out = run(capsys, "analyze", path, "--format", "json", "--window", "20000")
    assert code == 0
    doc = orjson.loads(out)
    assert doc["schema"] == "ctxc.analyze/2"
    f = doc["files"][0]
    for key in ("path", "format", "tokenizer", "window", "total_tokens", "stage", "messages"):
        assert key in f
    assert f["window"] == 20000
    for m in f["messages"]:
        assert {"index", "role", "kind", "tokens", "cumulative", "stage"} <= set(m)
    assert f["messages"][-1]["cumulative"] == f["context_tokens"]
    code, out = run(capsys, "analyze", path, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == len(f["messages"])
    assert int(rows[-1]["cumulative"]) == f["total_tokens"]
    code, out = run(capsys, "analyze", path, "--format", "table", "--messages")
    assert "claude-code" in out
    assert "stage" in out


def test_table_prints_names_verbatim(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Tool names are data: "[/x]" is not rich markup (which would fail to render) and ":ok:" no emoji.
    path = tmp_path / "t.jsonl"
    call = {"type": "tool_use", "id": "c1", "name": "[/x]:ok:", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "done " * 50}
    lines = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    code, out = run(capsys, "analyze", str(path), "--format", "table", "--messages")
    assert code == 0
    assert out.count("[/x]:ok:") >= 2  # in the by-tool totals and in the messages' rows


def test_many_paths_and_directories(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    sub = tmp_path / "logs" / "deep"
    sub.mkdir(parents=True)
    for p in SAMPLES.glob("chat-*.jsonl"):
        (sub / p.name).write_bytes(p.read_bytes())
    (tmp_path / "logs" / "notes.txt").write_text("not a transcript")
    code, out = run(
        capsys, "analyze", str(tmp_path / "logs"), str(SAMPLES / "codex.jsonl"), "--format", "json"
    )
    assert code == 0
    paths = [f["path"] for f in orjson.loads(out)["files"]]
    assert len(paths) == 3
    assert paths[-1].endswith("codex.jsonl")


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    data = (SAMPLES / "chat-openai.jsonl").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    code, out = run(capsys, "analyze", "-", "--format", "json")
    assert code == 0
    assert orjson.loads(out)["files"][0]["format"] == "chat"


def test_forecast(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(SAMPLES / "claude-code.jsonl")
    total = analyze(path).total_tokens
    code, out = run(
        capsys, "analyze", path, "--forecast", "--format", "json", "--window", str(int(total / 0.85))
    )
    assert code == 0
    forecast = orjson.loads(out)["files"][0]["forecast"]
    assert [f["stage"] for f in forecast] == [2, 3, 4, 5]
    assert all(f["potential"] > 0 for f in forecast)
    # At 85% of the window the plan has to bring usage below 60%: about 29% of the tokens.
    assert sum(f["plan"] for f in forecast) >= total - int(0.6 * total / 0.85) - 1


def test_recorded_usage_and_boundaries_reported() -> None:
    path = CORPUS / "claude-code" / "entire-cli_manual-compact_v2.1.14.jsonl"
    if not path.exists():
        pytest.skip("no corpus")
    a = analyze(path)
    assert a.usage is not None
    assert a.usage.calls > 0
    assert a.usage.max_context > 100_000
    assert [(b.kind, b.trigger, b.pre_tokens) for b in a.boundaries] == [
        ("compact_boundary", "manual", 153739)
    ]


def test_scan_cache_serves_a_second_run_and_follows_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "t.jsonl"
    path.write_bytes((SAMPLES / "chat-openai.jsonl").read_bytes())
    first = analyze(path, window=50_000)
    assert len(list((tmp_path / "cache" / "scans").glob("*/*.json"))) == 1

    class Refuses:
        """A counter that fails if asked: the second run must come from the cache."""

        name = "o200k_base"
        cache = object()

        def count(self, texts: object) -> list[int]:
            raise AssertionError("counted again")

    second = analyze(path, window=80_000, counter=Refuses())  # type: ignore[arg-type]
    assert [s.tokens for s in second.messages] == [s.tokens for s in first.messages]
    assert second.window == 80_000
    assert second.problems == first.problems
    # A changed file is a different key: it is scanned again.
    path.write_bytes(path.read_bytes() + b'{"role":"user","content":"one more"}\n')
    with pytest.raises(AssertionError, match="counted again"):
        analyze(path, counter=Refuses())  # type: ignore[arg-type]
    assert len(analyze(path).messages) == len(first.messages) + 1


def test_an_analysis_tallied_while_counting_is_the_one_made_from_its_cached_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    for path in sorted(SAMPLES.glob("*.jsonl")):
        fresh = analyze(path, window=20_000, top=3)
        cached = analyze(path, window=20_000, top=3)  # finish() applied to the stored scan
        assert fresh == cached, path.name


ROW = st.tuples(st.integers(0, 30), st.integers(0, 3), st.integers(0, 2))  # index, tokens, conversation


@given(st.lists(ROW, max_size=40), st.integers(-1, 12))
def test_largest_are_the_top_messages_ties_to_the_earlier(rows: list[tuple[int, int, int]], top: int) -> None:
    scan = Scan(
        path="t.jsonl",
        format="chat",
        tokenizer="o200k_base",
        rows=tuple(
            (index, i, "user", "text", None, tokens, conv, 0, None)
            for i, (index, tokens, conv) in enumerate(rows)
        ),
        usage=(),
        boundaries=(),
        problems=(),
        skipped_lines=0,
    )
    a = finish(scan, window=10, model=None, thresholds=(0.6, 0.7, 0.8, 0.9), top=top)
    by_size = sorted(a.messages, key=lambda s: (-s.tokens, s.index))  # stable: ties keep file order
    assert a.largest == tuple(by_size[: max(top, 0)])
    assert a.total_tokens == sum(t for _, t, _ in rows)


def test_scan_cache_by_file_identity_still_sees_a_same_size_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file rewritten with the same size and its old mtime put back still gets scanned again: the
    identity the cache remembers includes the ctime, which any write changes."""
    import os

    from ctxc import scancache

    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(scancache, "_STILL_NS", 0)  # remember identities at once (normally after 2 s)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"role":"user","content":"aaaa"}\n')
    first = analyze(path)
    assert list((tmp_path / "cache" / "scans").glob("*/*.identity"))
    st = path.stat()
    path.write_bytes(b'{"role":"user","content":"a a "}\n')  # same size, more tokens
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = analyze(path)
    assert second.total_tokens != first.total_tokens


def test_scan_key_found_by_identity_without_reading_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxc import scancache
    from ctxc.reader import ReadOptions

    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(scancache, "_STILL_NS", 0)
    path = tmp_path / "t.jsonl"
    path.write_bytes((SAMPLES / "chat-openai.jsonl").read_bytes())
    key = scancache.scan_key(path, "o200k_base", None, ReadOptions())
    real_open = open

    def no_open(file: object, *args: object, **kwargs: object) -> object:
        if str(file) == str(path):
            raise AssertionError("the file was read again")
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", no_open)
    assert scancache.scan_key(path, "o200k_base", None, ReadOptions()) == key
    # Other settings are another key, made from the same recorded content hash.
    other = scancache.scan_key(path, "cl100k_base", None, ReadOptions())
    assert other not in (None, key)


def test_a_scan_made_by_other_code_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same version number can name other code (an editable install after a pull): the key holds a
    fingerprint of ctxc's modules, which any change to one of them changes."""
    from ctxc import scancache
    from ctxc.reader import ReadOptions

    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "t.jsonl"
    path.write_bytes((SAMPLES / "chat-openai.jsonl").read_bytes())
    module = Path(scancache.__file__)
    was = module.stat()
    scancache._code_fingerprint.cache_clear()
    key = scancache.scan_key(path, "o200k_base", None, ReadOptions())
    try:
        os.utime(module, ns=(was.st_atime_ns, was.st_mtime_ns + 1))  # an edit, as far as the key can tell
        scancache._code_fingerprint.cache_clear()
        assert scancache.scan_key(path, "o200k_base", None, ReadOptions()) not in (None, key)
    finally:
        os.utime(module, ns=(was.st_atime_ns, was.st_mtime_ns))
        scancache._code_fingerprint.cache_clear()
    assert scancache.scan_key(path, "o200k_base", None, ReadOptions()) == key


def _claude_record(uuid: str, parent: str | None, role: str, content: list[dict[str, object]]) -> bytes:
    message: dict[str, object] = {"role": role, "content": content}
    if role == "assistant":
        message |= {"id": "msg_1", "type": "message", "model": "claude-sonnet-4-5"}
    record = {"type": role, "uuid": uuid, "parentUuid": parent, "sessionId": "s", "message": message}
    return orjson.dumps(record)


def _call(ident: str, name: str, arguments: dict[str, str]) -> list[dict[str, object]]:
    return [{"type": "tool_use", "id": ident, "name": name, "input": arguments}]


def _result(ident: str, text: str) -> list[dict[str, object]]:
    return [{"type": "tool_result", "tool_use_id": ident, "content": text}]


def test_by_tool_gives_each_parallel_call_and_result_its_own_tokens(tmp_path: Path) -> None:
    """Claude Code writes each of a response's parallel calls, and each result, as a record of its own;
    merged into one message, each tool still counts its own call and result. The rest of a message
    (its framing) counts toward its first tool, so the total is the messages' tokens."""
    grep_in, read_in = {"pattern": "quantize"}, {"file_path": "/src/pricing.py"}
    grep_out = "pricing.py:142: return amount.quantize(unit)"
    read_out = "".join(f"{n:>6}\tdef price_{n}(amount): return amount * {n}\n" for n in range(400))
    records = [
        _claude_record("u0", None, "user", [{"type": "text", "text": "Why is the coupon rounded?"}]),
        _claude_record("a1", "u0", "assistant", _call("t1", "Grep", grep_in)),
        _claude_record("a2", "a1", "assistant", _call("t2", "Read", read_in)),
        _claude_record("u1", "a2", "user", _result("t1", grep_out)),
        _claude_record("u2", "u1", "user", _result("t2", read_out)),
    ]
    path = tmp_path / "parallel.jsonl"
    path.write_bytes(b"\n".join(records) + b"\n")
    a = analyze(path, use_cache=False)
    assert [(s.kind, s.tool) for s in a.messages] == [
        ("text", None),
        ("tool_use", "Grep"),  # the per-message tool stays the first
        ("tool_result", "Grep"),
    ]
    count = TiktokenTokenizer("o200k_base").count
    own = {
        "Grep": count("Grep") + count(orjson.dumps(grep_in).decode()) + count(grep_out),
        "Read": count("Read") + count(orjson.dumps(read_in).decode()) + count(read_out),
    }
    assert own["Read"] > 20 * own["Grep"]
    assert a.by_tool == {"Read": own["Read"], "Grep": own["Grep"] + 2 * MESSAGE_OVERHEAD}
    assert sum(a.by_tool.values()) == sum(s.tokens for s in a.messages if s.tool)


@pytest.mark.parametrize(
    "path", [*sample_files(), *corpus_files("claude-code/*"), *corpus_files("codex/*")], ids=lambda p: p.name
)
def test_by_tool_of_a_message_with_one_tool_is_the_whole_message(path: Path) -> None:
    """A message holding one tool's calls or results counts whole toward it, as before; by_tool adds up
    to the live messages that hold a tool, whatever they hold."""
    a = analyze(path, use_cache=False)
    mixed = {n for m in load(path).messages if len(set(m.tool_names)) > 1 for n in m.tool_names}
    live = [s for s in a.messages if s.live and s.tool]
    assert sum(a.by_tool.values()) == sum(s.tokens for s in live)
    for tool in {s.tool for s in live} - mixed:
        assert a.by_tool[tool] == sum(s.tokens for s in live if s.tool == tool), tool
