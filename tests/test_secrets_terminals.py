"""Secrets stay private and terminals stay safe: archive modes under a lax umask, control characters
shown visibly in every human-readable output and kept byte-exact in machine output.

Each test here holds one promise of docs/reliability.md, "Secrets, terminals and odd inputs".
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run

from ctxc.search.index import SearchIndex

SECRET = "sk-ant-api03-PRIVATEKEY0123456789"


@pytest.fixture
def lax_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    found = {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}
    found["."] = stat.S_IMODE(root.stat().st_mode)
    return found


def too_open(root: Path) -> dict[str, str]:
    """Archive entries anyone but the owner may read: directories not 0700, files not 0600."""
    return {
        name: oct(mode)
        for name, mode in modes(root).items()
        if mode != (0o700 if (root / name).is_dir() else 0o600)
    }


def test_archive_private_under_umask_022(
    lax_umask: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(
        f'{{"role":"user","content":"my key is {SECRET}"}}\n{{"role":"assistant","content":"noted"}}\n'
    )
    src.chmod(0o600)
    root = tmp_path / "new" / "archive"
    monkeypatch.setenv("CTXC_ARCHIVE", str(root))
    code, _, err = run(capsys, "compact", str(src), "-s", "mask", "-o", str(tmp_path / "out.jsonl"))
    assert code == 0, err
    code, out, err = run(capsys, "search", "PRIVATEKEY0123456789", "-f", "json")
    assert code == 0, err
    assert "PRIVATEKEY0123456789" in out
    # With a connection open SQLite keeps its -wal and -shm files: those hold the key too.
    with SearchIndex.for_archive(root) as index:
        assert index.has(next(iter(a.name for a in (root / "objects").rglob("*") if a.is_file())))
        assert (root / "search.sqlite-wal").exists()
        assert too_open(root) == {}
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700  # created by ctxc for the archive


def test_archive_left_open_by_an_older_ctxc_is_tightened(
    lax_umask: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "archive"
    (root / "objects" / "ab").mkdir(parents=True, mode=0o755)
    (root / "objects").chmod(0o755)
    (root / "manifest.jsonl").write_bytes(b"")
    (root / "search.sqlite").write_bytes(b"")
    (root / "manifest.jsonl").chmod(0o644)
    (root / "search.sqlite").chmod(0o644)
    src = tmp_path / "t.jsonl"
    src.write_text(f'{{"role":"user","content":"{SECRET}"}}\n{{"role":"assistant","content":"ok"}}\n')
    monkeypatch.setenv("CTXC_ARCHIVE", str(root))
    code, _, err = run(capsys, "compact", str(src), "-s", "mask", "-o", str(tmp_path / "out.jsonl"))
    assert code == 0, err
    found = modes(root)
    assert found["objects"] == 0o700  # nobody else can reach any object below it
    assert found["manifest.jsonl"] == 0o600
    assert found["search.sqlite"] == 0o600
