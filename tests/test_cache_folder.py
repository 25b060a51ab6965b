"""The cache folder: private even where an older ctxc left it open, and the analysis cache bounded.

Each test here holds a promise of docs/counting.md ("The cache folder") or docs/reliability.md.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from conftest import SAMPLES, run

from ctxc import scancache
from ctxc.analysis import analyze
from ctxc.report import Scan
from ctxc.system import analysis_entry

HASH = "0123456789abcdef0123456789abcdef01234567"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def open_folders(root: Path, *names: str) -> None:
    """Folders as an older ctxc under umask 022 left them: 0755, their files 0644."""
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "f").write_text("x")
    for path in (root, *root.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)


def analyze_sample(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "analyze", str(SAMPLES / "chat-openai.jsonl"), "-f", "json")
    assert code == 0, err


@pytest.fixture
def default_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache in its default place, ``$XDG_CACHE_HOME/ctxc``: a folder that is ctxc's own."""
    monkeypatch.delenv("CTXC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "ctxc"


def test_a_cache_left_open_by_an_older_ctxc_is_made_private(
    lax_umask: None, default_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_folders(default_cache, "analyses/by-stat", "bpe")
    analyze_sample(capsys)
    folders = [default_cache, *(p for p in default_cache.rglob("*") if p.is_dir())]
    assert {str(p.relative_to(default_cache.parent)): oct(mode(p)) for p in folders if mode(p) != 0o700} == {}


def test_a_named_cache_folder_keeps_its_mode_and_ctxcs_folders_in_it_are_made_private(
    lax_umask: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"  # $CTXC_CACHE_DIR may be a folder others use too
    open_folders(shared, "bpe", "analyses", "theirs")
    monkeypatch.setenv("CTXC_CACHE_DIR", str(shared))
    analyze_sample(capsys)
    assert mode(shared) == mode(shared / "theirs") == 0o755
    assert mode(shared / "bpe") == mode(shared / "analyses") == mode(shared / "scans") == 0o700


def test_making_the_cache_private_follows_no_symlink(
    lax_umask: None, tmp_path: Path, default_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    open_folders(elsewhere, "bpe")
    default_cache.parent.mkdir()
    default_cache.symlink_to(elsewhere)  # the root a symlink: it and its target keep their modes
    analyze_sample(capsys)
    assert mode(elsewhere) == 0o755
    assert mode(elsewhere / "bpe") == 0o700  # ctxc's own folder in it
    other = tmp_path / "other"
    open_folders(other)
    (elsewhere / "analyses").symlink_to(other)  # a folder of ctxc's a symlink: its target keeps its mode
    default_cache.unlink()
    default_cache.mkdir(mode=0o755)
    (default_cache / "bpe").symlink_to(other)
    analyze_sample(capsys)
    assert mode(other) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder someone else's needs root")
def test_a_folder_another_user_owns_is_left_alone(
    lax_umask: None, default_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_folders(default_cache, "bpe")
    os.chown(default_cache / "bpe", 4242, 4242)
    analyze_sample(capsys)
    assert mode(default_cache) == 0o700
    assert mode(default_cache / "bpe") == 0o755


def test_a_private_cache_folder_is_not_looked_into(
    lax_umask: None, default_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every run checks the root only: nobody else can reach what is in it anyway.
    open_folders(default_cache, "bpe")
    default_cache.chmod(0o700)
    analyze_sample(capsys)
    assert mode(default_cache / "bpe") == 0o755


def stored(key: str) -> None:
    scan = Scan(
        path="t.jsonl",
        format="chat",
        tokenizer="o200k_base",
        rows=((0, 1, "user", "text", None, 5, 0, 0, None),),
        usage=(),
        boundaries=(),
        problems=(),
        skipped_lines=0,
    )
    scancache.store_scan(key, scan)


def test_each_analysis_cache_folder_keeps_its_most_recently_used_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(scancache, "_FOLDER_LIMIT", 2)
    first, second, third = (f"ab{n:038d}" for n in range(3))  # three keys in one folder
    for age, key in enumerate((first, second), 1):
        stored(key)
        os.utime(analysis_entry(f"{key}.json"), ns=(0, 10**18 - age * 10**9))  # first is older
    assert scancache.load_scan(first, "t") is not None  # now used more recently than second
    stored(third)
    assert scancache.load_scan(second, "t") is None
    assert scancache.load_scan(first, "t") is not None
    kept = sorted(p.name for p in analysis_entry(first).parent.iterdir())
    assert kept == [f"{first}.json", f"{third}.json"]


def test_analyzing_many_logs_leaves_each_folder_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(scancache, "_FOLDER_LIMIT", 1)
    monkeypatch.setattr(scancache, "_STILL_NS", 0)  # identity records at once as well
    for n in range(60):
        log = tmp_path / f"log{n}.jsonl"
        log.write_text(f'{{"role":"user","content":"log {n}"}}\n')
        analyze(log)
    folders = list((tmp_path / "cache" / "scans").iterdir())
    assert len(folders) > 40
    assert max(len(list(folder.iterdir())) for folder in folders) == 1


def test_the_folder_older_versions_kept_scans_in_is_removed_a_step_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cache"
    old = root / "analyses"
    (old / "by-stat").mkdir(parents=True)
    for n in range(3):
        (old / f"{n}{HASH[1:]}.json").write_text("{}")
        (old / "by-stat" / f"{n}{HASH[1:]}").write_text(HASH)
    monkeypatch.setenv("CTXC_CACHE_DIR", str(root))
    monkeypatch.setattr(scancache, "_OLD_FOLDER_STEP", 4)
    stored(HASH)
    assert not (old / "by-stat").exists()
    assert len(list(old.iterdir())) == 2  # 3 + 3 entries, 4 a process
    stored(HASH)  # the same process: one step is all
    assert len(list(old.iterdir())) == 2
    monkeypatch.setattr(scancache, "_old_folder_gone", set())  # a later process
    stored(HASH)
    assert not old.exists()


def test_only_what_an_older_ctxc_named_goes_from_the_old_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cache"
    (root / "analyses").mkdir(parents=True)
    (root / "analyses" / f"{HASH}.json").write_text("{}")
    (root / "analyses" / "notes.txt").write_text("mine")
    monkeypatch.setenv("CTXC_CACHE_DIR", str(root))
    stored(HASH)
    assert [p.name for p in (root / "analyses").iterdir()] == ["notes.txt"]
