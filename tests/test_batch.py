"""Issue 5 from the command line: batches of files, worker processes, a resumable journal, one report.

The interrupt tests run ctxc as a real subprocess and stop it with real signals (SIGINT, SIGKILL), because
what is being tested is what a killed CI job leaves on disk.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from conftest import SAMPLES, corpus_files

from ctxc.archive import Archive
from ctxc.archive_store import sha256_hex
from ctxc.batch import Input, collect_inputs, run_batch
from ctxc.cli import main
from ctxc.errors import ExitCode, InputError
from ctxc.formats import load
from ctxc.live import live_messages
from ctxc.output import TEMP_SUFFIX
from ctxc.validate import pairing_problems

COMPACT = ["--target-ratio", "0.5", "--window", "20000", "--quiet"]


def run(*args: str) -> int:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    code = exc.value.code
    return code if isinstance(code, int) else 0


def make_tree(root: Path, *, broken: bool = True) -> Path:
    """samples/ as a nested folder, plus (optionally) a file that is not JSON."""
    src = root / "logs"
    (src / "nested" / "deeper").mkdir(parents=True)
    for p in sorted(SAMPLES.glob("*.jsonl")):
        shutil.copy(p, src / p.name)
    shutil.copy(SAMPLES / "codex.jsonl", src / "nested" / "codex-copy.jsonl")
    shutil.copy(SAMPLES / "chat-openai.jsonl", src / "nested" / "deeper" / "openai-copy.jsonl")
    (src / "nested" / "notes.txt").write_text("not a transcript\n")
    if broken:
        (src / "nested" / "broken.jsonl").write_bytes(b'{"role": "user", "content": "hi"}\n{not json\n')
    return src


def report(path: Path) -> dict[str, object]:
    doc = orjson.loads(path.read_bytes())
    assert isinstance(doc, dict)
    return doc


def test_collect_inputs_walks_sorted_with_relative_paths(tmp_path: Path) -> None:
    src = make_tree(tmp_path)
    found = collect_inputs([str(src)])
    rels = [i.rel for i in found]
    assert rels == sorted(rels)
    assert "nested/deeper/openai-copy.jsonl" in rels
    assert "nested/notes.txt" not in rels
    assert collect_inputs([str(src)], glob="*.txt") == [
        Input(str(src / "nested" / "notes.txt"), "nested/notes.txt")
    ]
    assert [i.rel for i in collect_inputs([str(src)], glob="nested/*/*.jsonl")] == [
        "nested/deeper/openai-copy.jsonl"
    ]
    # A file named directly is taken whatever its name, and only once.
    notes = str(src / "nested" / "notes.txt")
    assert collect_inputs([notes, notes]) == [Input(notes, "notes.txt")]
    with pytest.raises(InputError, match="no transcripts"):
        collect_inputs([str(src)], glob="*.nothing")


def test_a_walk_never_enters_an_archive(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """A project's own archive (.ctxc/archive, used when it exists) and one named anywhere in the tree
    hold JSONL (manifest, journal) that is no transcript: analyze, check and validate of the folder
    read the transcripts alone."""
    src = make_tree(tmp_path, broken=False)
    expected = [i.rel for i in collect_inputs([str(src)])]
    for archive in (src / ".ctxc" / "archive", src / "nested" / "kept"):
        assert (
            run(
                "compact",
                str(src / "codex.jsonl"),
                "-o",
                str(tmp_path / "out.jsonl"),
                "--archive",
                str(archive),
                *COMPACT,
            )
            == 0
        )
        assert (archive / "manifest.jsonl").is_file()
    assert [i.rel for i in collect_inputs([str(src)])] == expected
    capsysbinary.readouterr()
    for command in (["analyze"], ["check", "--max-usage", "0.9"], ["validate"]):
        assert run(*command, str(src), "--format", "json", "--quiet") == 0, command
        doc = orjson.loads(capsysbinary.readouterr().out)
        assert not doc.get("errors"), command
        assert not any(f.get("error") for f in doc["files"]), command  # check lists its errors as files
        assert len(doc["files"]) == len(expected)


def test_out_dir_mirrors_the_tree_and_one_bad_file_does_not_stop_the_batch(tmp_path: Path) -> None:
    src = make_tree(tmp_path)
    out = tmp_path / "out"
    rep = tmp_path / "report.json"
    rc = run("compact", str(src), "--out-dir", str(out), "--report", str(rep), "--jobs", "1", *COMPACT)
    assert rc == ExitCode.PARTIAL
    doc = report(rep)
    assert doc["schema"] == "ctxc.compact-batch/1"
    assert doc["exit_code"] == ExitCode.PARTIAL
    files = {Path(str(f["path"])).relative_to(src).as_posix(): f for f in doc["files"]}  # type: ignore[union-attr]
    assert files["nested/broken.jsonl"]["status"] == "failed"
    assert "broken.jsonl:2" in str(files["nested/broken.jsonl"]["error"])
    assert files["nested/broken.jsonl"]["exit_code"] == ExitCode.INPUT
    ok = [rel for rel, f in files.items() if f["status"] == "ok"]
    assert len(ok) == len(files) - 1
    totals = doc["totals"]
    assert isinstance(totals, dict)
    assert totals["ok"] == len(ok)
    assert totals["failed"] == 1
    archive = Archive.open(os.environ["CTXC_ARCHIVE"])
    for rel in ok:
        f = files[rel]
        written = out / rel
        assert written.is_file()
        assert sha256_hex(written.read_bytes()) == f["output_sha256"]
        assert archive.read(str(f["archive_id"])) == (src / rel).read_bytes()
        assert not pairing_problems(live_messages(load(written)), strict=True)
    assert not (out / "nested" / "broken.jsonl").exists()
    assert not list(out.rglob(f"*{TEMP_SUFFIX}"))


def test_several_inputs_need_an_out_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_tree(tmp_path, broken=False)
    assert run("compact", str(src), *COMPACT) == ExitCode.USAGE
    assert "--out-dir" in capsys.readouterr().err
    assert (
        run("compact", str(src), "--out-dir", str(tmp_path / "o"), "-o", "x.jsonl", *COMPACT)
        == ExitCode.USAGE
    )
    assert (
        run("compact", str(src), "--out-dir", str(tmp_path / "o"), "--in-place", *COMPACT) == ExitCode.USAGE
    )


def test_fail_fast_stops_at_the_first_failure_with_its_own_code(tmp_path: Path) -> None:
    src = tmp_path / "logs"
    src.mkdir()
    (src / "a-broken.jsonl").write_bytes(b"[1, 2]\n")
    for name in ("b.jsonl", "c.jsonl"):
        shutil.copy(SAMPLES / "chat-anthropic.jsonl", src / name)
    rep = tmp_path / "r.json"
    args = [
        "compact",
        str(src),
        "--out-dir",
        str(tmp_path / "o"),
        "--report",
        str(rep),
        "--jobs",
        "1",
        *COMPACT,
    ]
    assert run(*args, "--fail-fast") == ExitCode.INPUT
    doc = report(rep)
    assert doc["totals"] == {**doc["totals"], "failed": 1, "ok": 0, "not_run": 2}  # type: ignore[dict-item]
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_output_is_the_same_whatever_the_number_of_jobs(tmp_path: Path) -> None:
    src = make_tree(tmp_path)
    reports = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}"
        rep = tmp_path / f"r{jobs}.json"
        arch = tmp_path / f"archive{jobs}"
        rc = run(
            "compact",
            str(src),
            "--out-dir",
            str(out),
            "--jobs",
            jobs,
            "--report",
            str(rep),
            "--archive",
            str(arch),
            *COMPACT,
        )
        assert rc == ExitCode.PARTIAL
        reports.append(
            [
                {k: v for k, v in f.items() if k not in ("seconds", "output", "output_path")}
                for f in report(rep)["files"]
            ]
        )  # type: ignore[union-attr]
    assert reports[0] == reports[1]
    one = {
        p.relative_to(tmp_path / "out1"): p.read_bytes()
        for p in (tmp_path / "out1").rglob("*")
        if p.is_file()
    }
    two = {
        p.relative_to(tmp_path / "out2"): p.read_bytes()
        for p in (tmp_path / "out2").rglob("*")
        if p.is_file()
    }
    assert one == two
    assert len(one) == 7


def test_a_rerun_skips_finished_files_and_redoes_what_changed(tmp_path: Path) -> None:
    src = make_tree(tmp_path, broken=False)
    out = tmp_path / "out"
    rep = tmp_path / "r.json"
    base = ["compact", str(src), "--out-dir", str(out), "--report", str(rep), "--jobs", "1"]
    assert run(*base, *COMPACT) == 0
    first = report(rep)["totals"]
    assert isinstance(first, dict)
    assert first["ok"] == 7
    assert first["skipped"] == 0
    assert run(*base, *COMPACT) == 0
    again = report(rep)
    assert again["totals"]["skipped"] == 7
    assert again["totals"]["ok"] == 0
    # Same figures for skipped files as when they were done.
    assert again["totals"]["tokens_after"] == first["tokens_after"]  # type: ignore[index]
    # A changed input, a deleted output, and different options are redone; --force redoes everything.
    (src / "codex.jsonl").write_bytes((src / "codex.jsonl").read_bytes() + b"\n")
    (out / "dataset.jsonl").unlink()
    assert run(*base, *COMPACT) == 0
    assert report(rep)["totals"]["ok"] == 2  # type: ignore[index]
    assert run(*base, "--target-ratio", "0.4", "--window", "20000", "--quiet") == 0
    assert report(rep)["totals"]["ok"] == 7  # type: ignore[index]
    assert run(*base, *COMPACT, "--force") == 0
    assert report(rep)["totals"]["ok"] == 7  # type: ignore[index]


def test_in_place_archives_first_and_restore_gives_the_original_back(tmp_path: Path) -> None:
    src = make_tree(tmp_path, broken=False)
    originals = {p: p.read_bytes() for p in src.rglob("*.jsonl")}
    rep = tmp_path / "r.json"
    # An archive of its own: another test's run may have made the same output from a cut-off copy of a
    # sample (the cut line is not read), and restore gives the original of the newest run.
    arc = ["--archive", str(tmp_path / "archive")]
    assert run("compact", str(src), "--in-place", "--report", str(rep), "--jobs", "1", *arc, *COMPACT) == 0
    changed = [p for p, data in originals.items() if p.read_bytes() != data]
    assert changed, "some file was over the target and should have been rewritten"
    for p in changed:
        restored = tmp_path / "restored.jsonl"
        assert run("restore", str(p), "-o", str(restored), *arc) == 0
        assert restored.read_bytes() == originals[p]
    # Running again does not compact the compacted files a second time.
    assert run("compact", str(src), "--in-place", "--report", str(rep), "--jobs", "1", *arc, *COMPACT) == 0
    assert report(rep)["totals"]["skipped"] == len(originals)  # type: ignore[index]


def test_restore_in_place_undoes_compact_in_place_and_keeps_what_the_file_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s.jsonl"
    shutil.copyfile(SAMPLES / "claude-code.jsonl", session)
    session.chmod(0o640)
    original = session.read_bytes()
    arc = ["--archive", str(tmp_path / "archive")]  # of its own: see the test above
    assert run("compact", str(session), "--in-place", "--target-tokens", "6000", "--quiet", *arc) == 0
    compacted = session.read_bytes()
    assert compacted != original
    for wrong in (["-o", str(tmp_path / "x.jsonl")], []):  # -o beside it; an archive id, not a file
        ref = str(session) if wrong else sha256_hex(original)[:12]
        assert run("restore", ref, "--in-place", *wrong, *arc) == ExitCode.USAGE
    assert session.read_bytes() == compacted
    capsys.readouterr()
    assert run("restore", str(session), "--in-place", *arc) == 0
    assert session.read_bytes() == original
    assert session.stat().st_mode & 0o777 == 0o640  # the file's own mode, not the archive's
    kept = capsys.readouterr().err.split("archived as ")[1].strip()
    assert run("restore", kept, "-o", str(tmp_path / "back.jsonl"), *arc) == 0
    assert (tmp_path / "back.jsonl").read_bytes() == compacted  # nothing was lost
    assert run("restore", str(session), "--in-place", *arc) == 0  # already the original: nothing written
    assert "nothing to do" in capsys.readouterr().err
    assert session.read_bytes() == original


def test_dry_run_batch_writes_nothing(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    src = make_tree(tmp_path, broken=False)
    out = tmp_path / "out"
    arch = tmp_path / "arch"
    rc = run(
        "compact",
        str(src),
        "--out-dir",
        str(out),
        "--dry-run",
        "--format",
        "json",
        "--archive",
        str(arch),
        *COMPACT,
    )
    assert rc == 0
    doc = orjson.loads(capsysbinary.readouterr().out)
    assert doc["totals"]["planned"] == 7
    assert not out.exists()
    assert not arch.exists()


def test_analyze_validate_convert_take_batches(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    src = make_tree(tmp_path)
    assert run("analyze", str(src), "--format", "json", "--jobs", "2", "--quiet") == ExitCode.PARTIAL
    doc = orjson.loads(capsysbinary.readouterr().out)
    assert len(doc["files"]) == 7
    assert doc["exit_code"] == ExitCode.PARTIAL
    assert [e["path"].endswith("broken.jsonl") for e in doc["errors"]] == [True]
    # Results are listed in input order whatever finished first.
    assert [f["path"] for f in doc["files"]] == sorted(f["path"] for f in doc["files"])

    assert run("validate", str(src), "--format", "json", "--jobs", "2", "--quiet") == ExitCode.PARTIAL
    doc = orjson.loads(capsysbinary.readouterr().out)
    assert len(doc["files"]) == 7
    assert len(doc["errors"]) == 1

    out = tmp_path / "converted"
    assert run("convert", str(src), "--out-dir", str(out), "--jobs", "2", "--quiet") == ExitCode.PARTIAL
    for p in src.rglob("*.jsonl"):
        if p.name != "broken.jsonl":
            assert (out / p.relative_to(src)).read_bytes() == p.read_bytes()


def test_no_progress_without_a_terminal(tmp_path: Path) -> None:
    """Issue 20 item 8: a log or a pipe gets the result, never a progress line (quiet by default)."""
    src = make_tree(tmp_path, broken=False)
    base = [sys.executable, "-m", "ctxc", "analyze", str(src), "--format", "json", "--jobs", "1"]
    env = {**os.environ, "NO_COLOR": "1"}
    loud = subprocess.run(base, capture_output=True, env=env, check=True, timeout=120)
    assert loud.stderr == b""
    quiet = subprocess.run([*base, "--quiet"], capture_output=True, env=env, check=True, timeout=120)
    assert quiet.stderr == b""


def _square(x: int) -> int:
    if x == 3:
        raise InputError("three is bad", path="three", line=1)
    return x * x


def test_run_batch_in_processes_keeps_input_order() -> None:
    items = [(str(i), i) for i in range(8)]
    for jobs in (1, 2):
        outcomes = run_batch(items, _square, jobs=jobs)
        assert [o.index for o in outcomes] == list(range(8))
        assert [o.value for o in outcomes] == [0, 1, 4, None, 16, 25, 36, 49]
        assert outcomes[3].error == "three:1: three is bad"
        assert outcomes[3].exit_code == ExitCode.INPUT


def test_workers_are_forked_only_while_no_other_thread_runs() -> None:
    import threading

    from ctxc.batch import _pool

    def start_method() -> str:
        pool = _pool(1)
        try:
            return str(pool._mp_context.get_start_method())  # type: ignore[attr-defined]
        finally:
            pool.shutdown()

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert start_method() == "forkserver"  # a lock that thread holds would stay held in a fork
    finally:
        stop.set()
        other.join()
    assert start_method() == ("fork" if threading.active_count() == 1 else "forkserver")


# -- interrupted runs ------------------------------------------------------------------------------


def _many_files(root: Path, n: int) -> Path:
    src = root / "many"
    src.mkdir()
    for k in range(n):
        shutil.copy(SAMPLES / "claude-code.jsonl", src / f"s{k:03}.jsonl")
    return src


def _journal_lines(archive: Path) -> list[dict[str, object]]:
    path = archive / "journal.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]  # every line parses


def _assert_archive_sound(archive: Path) -> None:
    store = Archive(archive)
    for entry in store.manifest():
        store.read(str(entry["input_sha256"]))  # sha256 checked on read
    raw = (archive / "manifest.jsonl").read_bytes()
    for line in raw.splitlines():
        orjson.loads(line)
    _journal_lines(archive)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_a_killed_batch_resumes_where_it_stopped(tmp_path: Path, sig: signal.Signals) -> None:
    n = 60
    src = _many_files(tmp_path, n)
    out = tmp_path / "out"
    archive = tmp_path / "archive"
    cmd = [
        sys.executable,
        "-m",
        "ctxc",
        "compact",
        str(src),
        "--out-dir",
        str(out),
        "--archive",
        str(archive),
        "--jobs",
        "2",
        "--no-cache",
        *COMPACT,
    ]
    env = {**os.environ, "CTXC_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while len(_journal_lines(archive)) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    # The whole process group, as a CI runner's kill or a terminal's Ctrl-C would.
    os.killpg(proc.pid, sig)
    proc.wait(timeout=60)
    done_before = len(_journal_lines(archive))
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    assert 3 <= done_before < n, (
        f"{done_before} of {n} done when interrupted (exit {proc.returncode}); stderr: {stderr[-2000:]}"
    )
    if sig == signal.SIGINT:
        assert proc.returncode == ExitCode.INTERRUPTED, stderr
        assert not list(out.rglob(f"*{TEMP_SUFFIX}"))
    _assert_archive_sound(archive)
    for entry in _journal_lines(archive):  # every file the journal calls done is whole and valid
        written = Path(str(entry["output_path"]))
        assert sha256_hex(written.read_bytes()) == entry["output_sha256"]

    rep = tmp_path / "r.json"
    rerun = subprocess.run(
        [*cmd, "--report", str(rep)], check=False, env=env, capture_output=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    totals = report(rep)["totals"]
    assert isinstance(totals, dict)
    assert totals["skipped"] >= done_before
    assert totals["skipped"] + totals["ok"] == n
    assert not list(out.rglob(f"*{TEMP_SUFFIX}"))  # a killed run's temp files are swept
    _assert_archive_sound(archive)
    for p in src.iterdir():
        assert not pairing_problems(live_messages(load(out / p.name)), strict=True)


def test_two_processes_share_one_archive(tmp_path: Path) -> None:
    files = list(corpus_files("**/*.jsonl")[:6]) or sorted(SAMPLES.glob("*.jsonl"))
    src = tmp_path / "src"
    src.mkdir()
    for k, p in enumerate(files):
        shutil.copy(p, src / f"{k:02}-{p.name}")
    archive = tmp_path / "archive"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ctxc",
                "compact",
                str(src),
                "--out-dir",
                str(tmp_path / f"out{k}"),
                "--archive",
                str(archive),
                "--jobs",
                "1",
                "--target-ratio",
                "0.5",
                "--window",
                "1000000",
                "--allow-over",
                "--quiet",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for k in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    _assert_archive_sound(archive)
    assert len(Archive(archive).manifest()) == 2 * len(files)
    assert len(_journal_lines(archive)) == 2 * len(files)


def test_a_folder_mixing_every_corpus_format_and_broken_files(tmp_path: Path) -> None:
    """Issue 5's bar, short of the 100 MB transcript (bench/bench_batch.py covers that one)."""
    corpus = corpus_files()
    if not corpus:
        pytest.skip("no corpus beside the checkout")
    src = tmp_path / "logs"
    for p in corpus:
        dest = src / p.parent.name / p.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dest)
    bad = {
        "broken/torn.jsonl": b'{"role": "user", "content": "hi"}\n{"role": "assist\n{"role": "user"}\n',
        "broken/binary.jsonl": b"\x00\x01\x02 not text",
        "broken/empty.jsonl": b"",
    }
    # A log still being written (its last record cut off) is read to its last complete line, not failed.
    live = {"live/being-written.jsonl": b'{"role": "user", "content": "hi"}\n{"role": "assist'}
    for rel, data in {**bad, **live}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    out = tmp_path / "out"
    rep = tmp_path / "r.json"
    args = ["compact", str(src), "--glob", "*.json*", "--out-dir", str(out), "--report", str(rep)]
    args += ["--target-ratio", "0.5", "--window", "200000", "--allow-over", "--jobs", "2", "--quiet"]
    assert run(*args) == ExitCode.PARTIAL
    files = report(rep)["files"]
    assert isinstance(files, list)
    status = {Path(f["path"]).relative_to(src).as_posix(): f["status"] for f in files}
    assert {rel for rel, s in status.items() if s == "failed"} == set(bad)
    assert len(status) == len(corpus) + len(bad) + len(live)
    for f in files:
        if f["status"] == "ok":
            assert not pairing_problems(live_messages(load(f["output"])), strict=True)
    # A re-run redoes only what failed (still failing) and skips the rest.
    assert run(*args) == ExitCode.PARTIAL
    totals = report(rep)["totals"]
    want = {"skipped": len(corpus) + len(live), "failed": len(bad), "ok": 0}
    assert totals == {**totals, **want}  # type: ignore[dict-item]


def test_outputs_get_ordinary_permissions_and_in_place_keeps_the_files(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        out = tmp_path / "small.jsonl"
        assert run("compact", str(SAMPLES / "chat-openai.jsonl"), "-o", str(out), *COMPACT) == 0
        assert out.stat().st_mode & 0o777 == 0o644
        kept = tmp_path / "kept.jsonl"
        shutil.copy(SAMPLES / "chat-openai.jsonl", kept)
        kept.chmod(0o640)
        assert run("compact", str(kept), "--in-place", *COMPACT) == 0
        assert kept.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_batch_table_prints_file_names_verbatim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Names are data, not rich markup or emoji codes: this printed as "logs/🆗.jsonl".
    monkeypatch.setenv("COLUMNS", "400")
    src = tmp_path / "[bold]logs"
    src.mkdir()
    shutil.copy(SAMPLES / "chat-openai.jsonl", src / "[draft]:ok:.jsonl")
    out = tmp_path / "out"
    rc = run(
        "compact", str(src), "--out-dir", str(out), "--archive", str(tmp_path / "a"), "--format", "table"
    )
    assert rc == 0
    assert "[bold]logs/[draft]:ok:.jsonl" in capsys.readouterr().out
