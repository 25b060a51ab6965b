"""A chain of compactions archives each original, the later ones repeating what the earlier runs kept:
a search shows each distinct message once, cited from the first original that held it."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import SAMPLES, run
from test_recover_qa import compact

from ctxc.archive_store import sha256_hex


def _chain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """``s.jsonl`` compacted, then its output compacted again, into one archive."""
    src, arc = tmp_path / "s.jsonl", tmp_path / "arc"
    shutil.copy(SAMPLES / "claude-code.jsonl", src)
    compact(capsys, src, tmp_path / "o1.jsonl", arc)
    compact(capsys, tmp_path / "o1.jsonl", tmp_path / "o2.jsonl", arc, "--target-tokens", "800")
    return src, arc


def _hits(capsys: pytest.CaptureFixture[str], arc: Path, query: str, limit: int) -> list[dict[str, object]]:
    code, out, err = run(
        capsys, "search", query, "--archive", str(arc), "--limit", str(limit), "--format", "json", "--full"
    )
    assert code == 0, err
    hits: list[dict[str, object]] = json.loads(out)["hits"]
    return hits


def _message(hit: dict[str, object]) -> tuple[object, ...]:
    return hit["role"], hit["kind"], hit["tool"], hit["part"], hit["text"]


def test_a_search_after_a_chain_of_compactions_shows_each_message_once_from_the_first_original(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, arc = _chain(tmp_path, capsys)
    first = sha256_hex(src.read_bytes())
    hits = _hits(capsys, arc, "the", 100)
    repeated = [m for m, n in Counter(map(_message, hits)).items() if n > 1]
    assert not repeated, repeated
    # A message both originals hold (the second run's kept it) is cited from the first run's original.
    copied = [h for h in hits if isinstance(h["copies"], int) and h["copies"] >= 1]
    assert copied
    assert {h["archive_id"] for h in copied} == {first}
    assert all(h["copies"] == 0 for h in hits if h not in copied)


def test_limit_counts_distinct_messages_after_a_chain_of_compactions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, arc = _chain(tmp_path, capsys)
    everything = {_message(h) for h in _hits(capsys, arc, "the", 1000)}
    for limit in (3, 10):
        hits = _hits(capsys, arc, "the", limit)
        assert len(hits) == min(limit, len(everything))
        assert len({_message(h) for h in hits}) == len(hits), [h["ref"] for h in hits]


def test_show_names_the_original_by_the_absolute_path_a_search_hit_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(SAMPLES / "claude-code.jsonl", tmp_path / "s.jsonl")
    monkeypatch.chdir(tmp_path)
    compact(capsys, Path("s.jsonl"), Path("s.out"), Path("arc"))
    ident = sha256_hex((tmp_path / "s.jsonl").read_bytes())[:12]
    monkeypatch.chdir(tmp_path.parent)
    arc = str(tmp_path / "arc")
    hit = _hits(capsys, tmp_path / "arc", "the", 1)[0]
    assert hit["source"] == str(tmp_path / "s.jsonl")
    code, out, err = run(capsys, "show", f"{ident}:0", "--archive", arc, "--format", "table")
    assert code == 0, err
    assert f"({tmp_path / 's.jsonl'})" in " ".join(out.split())
    code, out, err = run(capsys, "show", f"{ident}:0", "--archive", arc, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["source"] == hit["source"]
