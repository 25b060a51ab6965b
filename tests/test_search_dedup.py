"""A chain of compactions archives each original, the later ones repeating what the earlier runs kept,
and two sessions can say the same thing: a search shows each distinct message once, cited from the first
original that held it, naming the others (``also_in``) and every path each was archived from."""

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


def _two_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, Path]:
    """Two sessions that open with the same request (one the sample, one a shorter take on it), each
    compacted into one archive from a folder of its own, under the same file name."""
    arc = tmp_path / "arc"
    lines = (SAMPLES / "chat-anthropic.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    first, second = tmp_path / "a" / "session.jsonl", tmp_path / "b" / "session.jsonl"
    for path, text in ((first, "".join(lines)), (second, "".join(lines[:2]) + _FOLLOW_UP)):
        path.parent.mkdir()
        path.write_text(text, encoding="utf-8")
        compact(capsys, path, path.with_name("out.jsonl"), arc)
    return first, second, arc


_FOLLOW_UP = '{"role":"assistant","content":"Which export, orders or settlements?"}\n'
_REQUEST = "엑셀에서 한글이 전부 깨져요"


def test_a_message_in_several_sessions_is_one_hit_that_names_every_session_holding_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, arc = _two_sessions(tmp_path, capsys)
    hit = _hits(capsys, arc, _REQUEST, 1)[0]
    assert (hit["archive_id"], hit["source"], hit["message"]) == (
        sha256_hex(first.read_bytes()),
        str(first),
        1,
    )
    assert hit["copies"] == 1
    assert hit["also_in"] == [
        {
            "archive_id": sha256_hex(second.read_bytes()),
            "ref": f"{sha256_hex(second.read_bytes())[:12]}:1",
            "source": str(second),
            "sources": [str(second)],
            "message": 1,
            "line": 2,
        }
    ]
    code, out, err = run(capsys, "search", _REQUEST, "--archive", str(arc), "--limit", "1", "-f", "table")
    assert code == 0, err
    assert f"also in {sha256_hex(second.read_bytes())[:12]}:1" in " ".join(out.split())


def test_an_original_archived_from_two_paths_names_both_before_and_after_a_reindex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _, arc = _two_sessions(tmp_path, capsys)
    again = tmp_path / "c" / "copy.jsonl"
    again.parent.mkdir()
    shutil.copy(first, again)
    monkeypatch.chdir(tmp_path)  # typed relative, as a user does: cited by absolute path all the same
    compact(capsys, Path("c/copy.jsonl"), Path("c/out.jsonl"), arc)
    monkeypatch.chdir(tmp_path.parent)
    before = _hits(capsys, arc, _REQUEST, 1)[0]
    assert (before["source"], before["sources"]) == (str(first), [str(first), str(again)])
    code, _, err = run(capsys, "search", "--reindex", "--archive", str(arc))
    assert code == 0, err
    after = _hits(capsys, arc, _REQUEST, 1)[0]
    assert after == before


def test_a_run_that_did_not_index_adds_its_path_at_the_next_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, _, arc = _two_sessions(tmp_path, capsys)
    again = tmp_path / "copy.jsonl"
    shutil.copy(first, again)
    compact(capsys, again, tmp_path / "copy.out", arc, "--no-index")
    assert _hits(capsys, arc, _REQUEST, 1)[0]["sources"] == [str(first), str(again)]
