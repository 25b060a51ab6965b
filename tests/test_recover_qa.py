"""A demanding user's checks of "every original is archived first, and anything can be found again":
damaged manifests, read-only archives and text in every script, through the command line."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES, run

from ctxc.archive_store import sha256_hex
from ctxc.errors import ExitCode


def compact(capsys: pytest.CaptureFixture[str], src: Path, out: Path, arc: Path, *extra: str) -> None:
    code, _, err = run(
        capsys, "compact", str(src), "-s", "fifo", "--target-tokens", "1500", "--allow-over",
        "--archive", str(arc), "-o", str(out), *extra,
    )  # fmt: skip
    assert code == 0, err


def restored(capsys: pytest.CaptureFixture[str], ref: Path, arc: Path) -> tuple[int, bytes, str]:
    target = ref.with_suffix(".restored")
    code, _, err = run(capsys, "restore", str(ref), "--archive", str(arc), "-o", str(target))
    return code, target.read_bytes() if target.exists() else b"", err


def test_a_run_after_a_torn_manifest_line_is_still_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run killed mid-append leaves a line without its end; the next run's line must not be glued to it.
    arc = tmp_path / "arc"
    compact(capsys, SAMPLES / "claude-code.jsonl", tmp_path / "a.out", arc)
    with (arc / "manifest.jsonl").open("ab") as manifest:
        manifest.write(b'{"time":"2026-12-02T10:00:00Z","input_pa')
    compact(capsys, SAMPLES / "codex.jsonl", tmp_path / "b.out", arc)
    compact(capsys, tmp_path / "b.out", tmp_path / "c.out", arc)
    code, data, err = restored(capsys, tmp_path / "c.out", arc)
    assert code == 0, err
    assert data == (SAMPLES / "codex.jsonl").read_bytes()


def test_a_damaged_manifest_line_is_named_and_restore_does_not_guess(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    arc = tmp_path / "arc"
    compact(capsys, SAMPLES / "claude-code.jsonl", tmp_path / "a.out", arc)
    compact(capsys, SAMPLES / "codex.jsonl", tmp_path / "b.out", arc)
    compact(capsys, tmp_path / "a.out", tmp_path / "c.out", arc)  # a.out is archived as an original too
    path = arc / "manifest.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[0] = lines[0].replace(b",", b" edited by hand ", 1)  # no longer JSON
    path.write_bytes(b"\n".join(lines))
    caplog.set_level(logging.WARNING, logger="ctxc")
    # a.out's own record is gone: restoring a.out must not hand back a.out itself as "the original".
    code, data, err = restored(capsys, tmp_path / "a.out", arc)
    said = err + caplog.text
    assert code == ExitCode.ARCHIVE, said
    assert data == b""
    assert f"{path} line 1" in said, said
    # Nothing else is lost: the other runs restore, and search still finds both originals.
    code, data, err = restored(capsys, tmp_path / "b.out", arc)
    assert code == 0, err
    assert data == (SAMPLES / "codex.jsonl").read_bytes()
    code, out, err = run(capsys, "search", "coupon rounding", "--archive", str(arc), "--format", "json")
    assert code == 0, err
    ids = {h["archive_id"] for h in json.loads(out)["hits"]}
    assert sha256_hex((SAMPLES / "claude-code.jsonl").read_bytes()) in ids


def _without_file_permission_override() -> list[str] | None:
    """A prefix running a command as root without the capabilities that ignore file modes."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def test_a_read_only_archive_is_a_clear_archive_error_for_every_command(tmp_path: Path) -> None:
    arc = tmp_path / "arc"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CTXC_ARCHIVE": str(arc)}
    ctxc = [sys.executable, "-m", "ctxc"]
    first = [*ctxc, "compact", str(SAMPLES / "claude-code.jsonl"), "-s", "fifo", "--target-tokens", "1500"]
    done = subprocess.run(
        [*first, "-o", str(tmp_path / "a.out")], env=env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    prefix = _without_file_permission_override()
    if prefix is None:
        pytest.skip("needs root and setpriv to make a folder read-only for ctxc")
    (arc / "index.lock").touch()  # left by a background indexer once
    for p in [arc, *arc.rglob("*")]:
        p.chmod(0o500 if p.is_dir() else 0o400)
    try:
        for args in (["search", "--reindex"], ["search", "coupon"]):
            done = subprocess.run(
                [*prefix, *ctxc, *args], env=env, capture_output=True, timeout=120, check=False
            )
            err = done.stderr.decode()
            assert done.returncode == ExitCode.ARCHIVE, (args, err)
            assert "internal error" not in err, err
            assert str(arc) in err, err
        restore = [*prefix, *ctxc, "restore", str(tmp_path / "a.out"), "-o", "-"]
        done = subprocess.run(restore, env=env, capture_output=True, timeout=120, check=False)
        assert done.stdout == (SAMPLES / "claude-code.jsonl").read_bytes(), done.stderr
    finally:
        for p in [arc, *arc.rglob("*")]:
            p.chmod(0o700 if p.is_dir() else 0o600)


CJK = [
    {
        "role": "user",
        "content": "数据库迁移失败了。请帮我检查一下配置文件。テストが失敗しました。原因を調べてください。",
    },
    {"role": "assistant", "content": "好的。我来检查配置文件。問題はデータベースの接続設定です。"},
    {"role": "user", "content": "테스트가 계속 실패해요. 쿠폰을 적용하면 금액이 틀려요."},
    {"role": "assistant", "content": "확인했습니다."},
]


@pytest.mark.parametrize(
    ("query", "message"),
    [("检查一下", 0), ("数据库迁移", 0), ("テスト", 0), ("失敗", 0), ("データベース", 1), ("쿠폰", 2),
     ("테스트", 2), ("금액이 틀려요", 2)],
)  # fmt: skip
def test_search_finds_a_word_inside_chinese_japanese_and_korean_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], query: str, message: int
) -> None:
    src = tmp_path / "cjk.jsonl"
    src.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in CJK), encoding="utf-8")
    arc = tmp_path / "arc"
    compact(capsys, src, tmp_path / "out.jsonl", arc, "--target-tokens", "30", "--keep-last", "1")
    code, out, err = run(capsys, "search", query, "--archive", str(arc), "--format", "json")
    assert code == 0, err
    hits = json.loads(out)["hits"]
    assert hits, out
    assert hits[0]["message"] == message, hits
    assert query.split(maxsplit=1)[0] in hits[0]["snippet"].replace("**", "")  # shown as written


def test_a_damaged_archived_copy_is_replaced_before_an_in_place_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An object of the right size but other bytes (a flipped bit) is not the original: storing the
    # original again must write it, or --in-place would leave no good copy anywhere.
    arc = tmp_path / "arc"
    original = (SAMPLES / "claude-code.jsonl").read_bytes()
    compact(capsys, SAMPLES / "claude-code.jsonl", tmp_path / "a.out", arc)
    stored = arc / "objects" / sha256_hex(original)[:2] / sha256_hex(original)
    stored.chmod(0o600)
    stored.write_bytes(original[:100] + b"X" + original[101:])
    work = tmp_path / "session.jsonl"
    work.write_bytes(original)
    code, _, err = run(capsys, "compact", str(work), "--in-place", "-s", "fifo", "--target-tokens", "1500",
                       "--archive", str(arc))  # fmt: skip
    assert code == 0, err
    assert work.read_bytes() != original
    code, data, err = restored(capsys, work, arc)
    assert code == 0, err
    assert data == original


def test_two_sessions_of_one_name_in_two_folders_are_told_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    arc = tmp_path / "arc"
    for folder, sample in (("a", "claude-code.jsonl"), ("b", "codex.jsonl")):
        (tmp_path / folder).mkdir()
        shutil.copy(SAMPLES / sample, tmp_path / folder / "s.jsonl")
        monkeypatch.chdir(tmp_path / folder)  # each compacted where it lies, by its bare name
        compact(capsys, Path("s.jsonl"), Path("s.out"), arc)
    monkeypatch.chdir(tmp_path)
    for folder, sample in (("a", "claude-code.jsonl"), ("b", "codex.jsonl")):
        code, data, err = restored(capsys, tmp_path / folder / "s.out", arc)
        assert code == 0, err
        assert data == (SAMPLES / sample).read_bytes()
    code, out, err = run(capsys, "search", "the", "--archive", str(arc), "--limit", "100", "--format", "json")
    assert code == 0, err
    sources = {h["archive_id"]: h["source"] for h in json.loads(out)["hits"]}
    assert sorted(sources.values()) == [str(tmp_path / "a" / "s.jsonl"), str(tmp_path / "b" / "s.jsonl")]


def test_an_offloaded_output_holding_json_lines_is_shown_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [json.dumps({"role": "user", "content": f"wombat {i} " + "words " * 40}) for i in range(30)]
    output = "$ head -30 logs/chat.jsonl\n" + "\n".join(lines) + "\n(30 lines shown)"
    src = tmp_path / "s.jsonl"
    records = [
        {"role": "user", "content": "show me the chat log"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b1", "name": "Bash",
                                           "input": {"command": "head -30 logs/chat.jsonl"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b1", "content": output}]},
        {"role": "assistant", "content": "that is the log"},
    ]  # fmt: skip
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    arc, out = tmp_path / "arc", tmp_path / "out.jsonl"
    code, _, err = run(
        capsys, "compact", str(src), "-s", "offload", "--set", "offload.threshold_tokens=300",
        "--target-tokens", "500", "--allow-over", "--archive", str(arc), "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    blob = sha256_hex(output.encode())
    assert f"objects/{blob[:2]}/{blob}" in out.read_text()  # the placeholder names the stored output
    code, shown, err = run(capsys, "show", blob[:12], "--archive", str(arc), "--format", "raw")
    assert code == 0, err
    assert shown == output
    code, shown, err = run(capsys, "show", blob[:12], "--archive", str(arc), "--format", "text")
    assert shown.startswith("$ head -30 logs/chat.jsonl\n"), shown[:200]


def test_reindex_names_a_damaged_original_once_and_search_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arc = tmp_path / "arc"
    compact(capsys, SAMPLES / "claude-code.jsonl", tmp_path / "a.out", arc)
    compact(capsys, SAMPLES / "codex.jsonl", tmp_path / "b.out", arc)
    ident = sha256_hex((SAMPLES / "claude-code.jsonl").read_bytes())
    stored = arc / "objects" / ident[:2] / ident
    stored.chmod(0o600)
    stored.write_bytes(stored.read_bytes().replace(b"coupon", b"COUPON", 1))
    code, _, err = run(capsys, "search", "--reindex", "--archive", str(arc))
    assert code == 0, err
    assert err.count(f"skipped {ident[:12]}") == 1, err
    assert "corrupt" in err
    code, out, err = run(capsys, "search", "inkpost", "--archive", str(arc), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["hits"], out  # the other original is still found
    code, _, err = restored(capsys, tmp_path / "a.out", arc)
    assert code == ExitCode.ARCHIVE, err
    assert "corrupt" in err


def test_limit_gives_that_many_messages_when_one_long_output_matches_in_many_chunks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = "\n".join(f"ERROR kangaroo failure in module {i} at step {i * 7}" for i in range(3000))
    records: list[dict[str, object]] = [{"role": "user", "content": "run the kangaroo tests"}]
    for k in range(12):
        text = long if k == 3 else f"kangaroo test {k} passed"
        records += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"r{k}", "name": "Bash",
                                               "input": {"command": f"pytest part{k}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"r{k}", "content": text}]},
        ]  # fmt: skip
    records.append({"role": "assistant", "content": "done"})
    src = tmp_path / "s.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    arc = tmp_path / "arc"
    compact(capsys, src, tmp_path / "out.jsonl", arc)
    for limit in (1, 5, 10):
        code, out, err = run(capsys, "search", "kangaroo", "--archive", str(arc), "--limit", str(limit))
        assert code == 0, err
        hits = json.loads(out)["hits"]
        assert len(hits) == limit, [h["ref"] for h in hits]
        assert len({h["ref"] for h in hits}) == limit  # one hit a message


def test_an_offload_placeholder_path_leads_to_the_output_from_any_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    code, _, err = run(
        capsys, "compact", str(SAMPLES / "claude-code.jsonl"), "-s", "offload", "--set",
        "offload.threshold_tokens=300", "--allow-over", "--archive", "arc", "-o", "out.jsonl",
    )  # fmt: skip
    assert code == 0, err
    text = Path("out.jsonl").read_text()
    monkeypatch.chdir(tmp_path)  # where an agent resuming the session may run its file tool
    paths = re.findall(r"offloaded [^\]]*? to (\S+); ctxc archive", text.replace("\\n", "\n"))
    assert paths, text[:500]
    for found in paths:
        assert Path(found).is_file(), found
        assert sha256_hex(Path(found).read_bytes()) == Path(found).name


def _hold_lock(path: Path) -> subprocess.Popen[str]:
    """A process holding ``path``'s flock, as a stopped indexer or run would, until it is killed."""
    code = (
        "import fcntl, sys, time\n"
        "f = open(sys.argv[1], 'ab')\n"
        "fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_search_does_not_wait_for_ever_for_a_stuck_indexer(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctxc.search
    from ctxc.archive_store import ArchiveStore

    arc = tmp_path / "arc"
    compact(capsys, SAMPLES / "claude-code.jsonl", tmp_path / "a.out", arc)
    monkeypatch.setattr(ctxc.search, "CATCH_UP_SECONDS", 0.5)
    holder = _hold_lock(arc / "index.lock")
    try:
        with caplog.at_level(logging.WARNING):
            hits = ctxc.search.search("test", archive=ArchiveStore.open(arc))
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert hits, "the index as it is still answers"
    assert "searching the index as it is" in caplog.text


def test_a_lock_held_past_the_wait_is_an_archive_error_naming_it(tmp_path: Path) -> None:
    from ctxc.archive_store import LockTimeout, exclusive_lock

    path = tmp_path / "manifest.lock"
    holder = _hold_lock(path)
    try:
        with (
            pytest.raises(LockTimeout, match=r"manifest\.lock for 0\.3 s") as caught,
            exclusive_lock(path, seconds=0.3),
        ):
            pass
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert caught.value.exit_code == ExitCode.ARCHIVE
    with exclusive_lock(path, seconds=0.3) as held:  # free again once the holder is gone
        assert held
