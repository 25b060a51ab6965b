"""The round-trip law and the read path over every real transcript in the corpus and every sample.

Reading a file and writing it back unchanged reproduces it byte for byte; every file analyzes; every
file converts to both chat dialects with its tool calls still paired.
"""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from conftest import CORPUS, corpus_params, sample_files

from ctxc.analysis import analyze
from ctxc.convert import convert_transcript
from ctxc.formats import dump, load
from ctxc.validate import pairing_problems

ALL_FILES = [
    *corpus_params(),
    *[pytest.param(p, id=f"samples/{p.name}") for p in sample_files()],
]


def test_samples_exist() -> None:
    names = {p.name for p in sample_files()}
    assert {
        "claude-code.jsonl",
        "codex.jsonl",
        "chat-anthropic.jsonl",
        "chat-openai.jsonl",
        "dataset.jsonl",
    } <= names


def test_corpus_is_complete_when_present() -> None:
    if not CORPUS.is_dir():
        pytest.skip("no corpus beside the checkout")
    # 23 data files are listed in SOURCES.md; a vanished file must not silently shrink coverage.
    assert len(corpus_params()) >= 23


@pytest.mark.parametrize("path", ALL_FILES)
def test_round_trip_is_byte_identical(path: Path) -> None:
    data = path.read_bytes()
    transcript = load(path)
    out = io.BytesIO()
    dump(transcript, out)
    assert out.getvalue() == data
    assert transcript.messages, "every real transcript has messages"


@pytest.mark.parametrize("path", ALL_FILES)
def test_analyze_every_file(path: Path) -> None:
    a = analyze(path, window=200_000, use_cache=False)
    transcript = load(path)
    assert a.total_tokens > 0
    assert len(a.messages) == len(transcript.messages)
    # analyze checks pairing on skeletal messages, keeping only those with calls or results
    assert list(a.problems) == pairing_problems(transcript.messages)
    live = sum(s.tokens for s in a.messages if s.live)
    # The live context is what the client sends next: its messages plus what the log's own
    # compaction record carries; everything else is counted apart, nothing twice.
    assert live + a.carried_tokens == a.total_tokens
    assert live + a.history_tokens + a.side_tokens == sum(s.tokens for s in a.messages)


@pytest.mark.parametrize("path", ALL_FILES)
def test_live_context_starts_at_the_logs_own_last_compaction(path: Path) -> None:
    """A log with its own compaction is measured from there; the history is reported apart."""
    transcript = load(path)
    a = analyze(path, use_cache=False)
    resets = [b for b in transcript.boundaries if b.resets]
    if not resets:
        assert a.live_from_line is None
        assert a.history_messages == 0
        return
    assert a.live_from_line == max(b.line for b in resets)
    assert a.history_messages > 0
    first_live = min(s.index for s in a.messages if s.live and s.conversation == resets[-1].conversation)
    assert first_live in (resets[-1].index, resets[-1].kept_from)


@pytest.mark.parametrize("path", ALL_FILES)
def test_window_comes_from_the_log(path: Path) -> None:
    transcript = load(path)
    a = analyze(path, use_cache=False)
    recorded = [u.window for u in transcript.usage if u.window]
    if recorded:
        assert (a.window, a.window_source) == (recorded[-1], "log")
    elif any(u.model for u in transcript.usage):
        assert a.window_source in ("log model", "default")
        assert a.model is not None
    else:
        assert a.window_source == "default"


@pytest.mark.parametrize("path", ALL_FILES)
@pytest.mark.parametrize("target", ["chat-anthropic", "chat-openai"])
def test_convert_keeps_pairing(path: Path, target: str) -> None:
    transcript = load(path)
    before = {(p.conversation, p.code, p.tool_id) for p in pairing_problems(transcript.messages)}
    lines = convert_transcript(transcript, target).splitlines()
    assert all(isinstance(orjson.loads(line), dict) for line in lines)
    back = load(io.BytesIO(b"\n".join(lines) + b"\n"), input_format="chat")
    after = {(p.conversation, p.code, p.tool_id) for p in pairing_problems(back.messages)}
    # Conversion may rename ids for the target API, so compare counts: it must create no new problem.
    assert len(after) <= len(before)
