"""Issue 18, batches and the archive: what a kill, a clash of outputs or an unreadable folder leaves.

The process tests run ctxc as a real subprocess in its own session and stop it with real signals, then
look at what is left: files, the journal, the manifest and processes. Every wait is bounded, and each
test kills whatever of its process group is still alive when it ends.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import ROOT, SAMPLES

from ctxc.archive import Archive
from ctxc.archive_store import sha256_hex
from ctxc.cli import main
from ctxc.errors import ExitCode
from ctxc.output import TEMP_SUFFIX

COMPACT = ["--target-ratio", "0.5", "--window", "20000", "--quiet", "--no-cache"]


@pytest.fixture(autouse=True)
def _sigint_handled() -> Iterator[None]:
    # An interrupted in-process run (here or in an earlier test file) ends by ignoring SIGINT
    # (ctxc.errors.exit_interrupted), and an ignored signal stays ignored in every process started
    # later: a subprocess's Ctrl-C would be lost.
    saved = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if saved is not None:
        signal.signal(signal.SIGINT, saved)


def run(*args: str) -> int:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    code = exc.value.code
    return code if isinstance(code, int) else 0


def distinct_files(root: Path, n: int) -> Path:
    """``n`` transcripts, each with bytes of its own (so each has its own archive id)."""
    root.mkdir(parents=True)
    samples = sorted(SAMPLES.glob("*.jsonl"))
    for k in range(n):
        sample = samples[k % len(samples)]
        data = sample.read_bytes().replace(b"the ", f"the{k} ".encode())
        (root / f"f{k:03}-{sample.name}").write_bytes(data)
    return root


def journal(archive: Path) -> list[dict[str, object]]:
    path = archive / "journal.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def report_totals(path: Path) -> dict[str, int]:
    doc = orjson.loads(path.read_bytes())
    totals = doc["totals"]
    assert isinstance(totals, dict)
    return totals


# -- 18.2: restore follows the chain back to the first original --------------------------------------


def test_restore_of_an_output_that_was_compacted_again_gives_the_first_original(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    shutil.copy(SAMPLES / "claude-code.jsonl", a)
    b, c, x = tmp_path / "b.jsonl", tmp_path / "c.jsonl", tmp_path / "x.jsonl"
    arc = ["--archive", str(tmp_path / "arc")]
    assert run("compact", str(a), "-o", str(b), "-s", "fifo", "--target-tokens", "6000", *arc, "-q") == 0
    assert run("compact", str(b), "-o", str(c), "-s", "fifo", "--target-tokens", "3000", *arc, "-q") == 0
    assert b.read_bytes() != a.read_bytes()
    # b is now both an output (of a) and an archived original (of c): its original is a.
    assert run("restore", str(b), "-o", str(x), *arc) == 0
    assert x.read_bytes() == a.read_bytes()
    # c goes back through b to a.
    assert run("restore", str(c), "-o", str(x), *arc) == 0
    assert x.read_bytes() == a.read_bytes()


# -- 18.3: the journal gets each file as it finishes, by resolved path --------------------------------


class Interrupt:
    """Reads in compact_file that raise KeyboardInterrupt (a Ctrl-C) on the ``at``-th file."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from ctxc.compaction import files

        real = files.load_counted

        def load_counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == self.at:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(files, "load_counted", load_counted)


def test_an_interrupted_batch_journals_each_finished_file_and_the_rerun_does_only_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = distinct_files(tmp_path / "in", 6)
    archive = tmp_path / "arc"
    base = ["compact", str(src), "--out-dir", str(tmp_path / "out"), "--archive", str(archive)]
    Interrupt(at=4).install(monkeypatch)
    rep = tmp_path / "r.json"
    assert run(*base, "--jobs", "1", "--report", str(rep), *COMPACT) == ExitCode.INTERRUPTED
    assert len(journal(archive)) == 3
    assert orjson.loads(rep.read_bytes())["interrupted"] is True
    assert report_totals(rep)["ok"] == 3
    assert report_totals(rep)["not_run"] == 3
    monkeypatch.undo()
    assert run(*base, "--jobs", "1", "--report", str(rep), *COMPACT) == 0
    assert orjson.loads(rep.read_bytes())["interrupted"] is False
    assert report_totals(rep)["skipped"] == 3
    assert report_totals(rep)["ok"] == 3
    # One run per file in the manifest: none was done twice.
    runs = [e["input_sha256"] for e in Archive(archive).manifest()]
    assert sorted(runs) == sorted({sha256_hex(p.read_bytes()) for p in src.iterdir()})


def test_a_file_the_manifest_records_but_the_journal_missed_is_not_redone(tmp_path: Path) -> None:
    src = distinct_files(tmp_path / "in", 4)
    archive = tmp_path / "arc"
    rep = tmp_path / "r.json"
    base = ["compact", str(src), "--out-dir", str(tmp_path / "out"), "--archive", str(archive)]
    base += ["--jobs", "1", "--report", str(rep), *COMPACT]
    assert run(*base) == 0
    # As if killed between each file's manifest line and its journal line.
    lines = (archive / "journal.jsonl").read_bytes().splitlines(keepends=True)
    (archive / "journal.jsonl").write_bytes(b"".join(lines[:1]))
    assert run(*base) == 0
    assert report_totals(rep)["skipped"] == 4
    assert len(Archive(archive).manifest()) == 4
    assert len(journal(archive)) == 4  # the journal caught up with the manifest


def test_a_journal_that_cannot_be_written_fails_the_file_not_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A full disk when a file's journal line is appended: that file fails with the archive's exit code
    # (its output and manifest line are written), the batch goes on, and the re-run skips it.
    from ctxc import compact_batch

    def full(path: Path, doc: dict[str, Any]) -> None:
        raise OSError(28, "No space left on device")

    src = distinct_files(tmp_path / "in", 3)
    archive = tmp_path / "arc"
    rep = tmp_path / "r.json"
    base = ["compact", str(src), "--out-dir", str(tmp_path / "out"), "--archive", str(archive)]
    base += ["--jobs", "1", "--report", str(rep), *COMPACT]
    monkeypatch.setattr(compact_batch, "append_jsonl", full)
    assert run(*base) == ExitCode.PARTIAL
    files = orjson.loads(rep.read_bytes())["files"]
    assert [(f["status"], f["exit_code"]) for f in files] == [("failed", ExitCode.ARCHIVE)] * 3
    assert "journal" in files[0]["error"]
    assert "No space left on device" in files[0]["error"]
    assert capsys.readouterr().err.count("ctxc: error: ") == 3
    monkeypatch.undo()
    assert run(*base) == 0
    assert report_totals(rep)["skipped"] == 3
    assert len(Archive(archive).manifest()) == 3


def test_the_journal_matches_outputs_by_resolved_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    distinct_files(tmp_path / "in", 3)
    monkeypatch.chdir(tmp_path)
    rep = tmp_path / "r.json"
    base = ["compact", "in", "--archive", "arc", "--jobs", "1", "--report", str(rep), *COMPACT]
    assert run(*base, "--out-dir", "out") == 0
    assert run(*base, "--out-dir", str(tmp_path / "out")) == 0
    assert report_totals(rep)["skipped"] == 3
    assert run(*base, "--out-dir", "./in/../out") == 0
    assert report_totals(rep)["skipped"] == 3


def test_an_interrupted_in_place_batch_never_compacts_a_file_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = distinct_files(tmp_path / "in", 5)
    originals = {p.name: p.read_bytes() for p in src.iterdir()}
    archive = tmp_path / "arc"
    base = ["compact", str(src), "--in-place", "--archive", str(archive), "--jobs", "1", *COMPACT]
    Interrupt(at=3).install(monkeypatch)
    assert run(*base) == ExitCode.INTERRUPTED
    monkeypatch.undo()
    assert run(*base) == 0
    store = Archive(archive)
    inputs = [e["input_sha256"] for e in store.manifest()]
    # Every run read an original; none read an earlier run's output.
    assert sorted(inputs) == sorted(sha256_hex(d) for d in originals.values())
    for p in src.iterdir():
        x = tmp_path / "x.jsonl"
        assert run("restore", str(p), "-o", str(x), "--archive", str(archive)) == 0
        assert x.read_bytes() == originals[p.name]


# -- 18.5: outputs that would collide are refused before anything starts ------------------------------


def test_two_inputs_with_one_output_path_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        shutil.copy(SAMPLES / "claude-code.jsonl", tmp_path / d / "x.jsonl")
    out = tmp_path / "out"
    a, b = str(tmp_path / "a" / "x.jsonl"), str(tmp_path / "b" / "x.jsonl")
    assert run("compact", a, b, "--out-dir", str(out), *COMPACT) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert a in err
    assert b in err
    assert not out.exists()  # nothing started
    assert run("convert", a, b, "--out-dir", str(out)) == ExitCode.USAGE
    assert not out.exists()


def test_two_folders_holding_the_same_relative_path_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for d in ("one", "two"):
        (tmp_path / d / "s").mkdir(parents=True)
        shutil.copy(SAMPLES / "codex.jsonl", tmp_path / d / "s" / "t.jsonl")
    out = tmp_path / "out"
    code = run("compact", str(tmp_path / "one"), str(tmp_path / "two"), "--out-dir", str(out), *COMPACT)
    assert code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert str(tmp_path / "one" / "s" / "t.jsonl") in err
    assert str(tmp_path / "two" / "s" / "t.jsonl") in err
    assert not out.exists()


def test_an_output_that_is_another_input_is_refused(tmp_path: Path) -> None:
    src = distinct_files(tmp_path / "in", 2)
    first, second = sorted(src.iterdir())
    # --out-dir holding the second input under the first's name would overwrite it.
    shutil.copy(second, tmp_path / first.name)
    data = (tmp_path / first.name).read_bytes()
    assert run("compact", str(first), str(tmp_path / first.name), "--out-dir", str(tmp_path), *COMPACT) == 2
    assert (tmp_path / first.name).read_bytes() == data


def test_an_out_dir_inside_the_input_tree_is_not_compacted_again(tmp_path: Path) -> None:
    src = distinct_files(tmp_path / "logs", 3)
    rep = tmp_path / "r.json"
    base = ["compact", str(src), "--out-dir", str(src / "compacted"), "--report", str(rep), "--jobs", "1"]
    base += ["--archive", str(tmp_path / "arc")]
    assert run(*base, *COMPACT) == 0
    assert run(*base, *COMPACT) == 0
    totals = report_totals(rep)
    assert totals["files"] == 3
    assert totals["skipped"] == 3
    assert not (src / "compacted" / "compacted").exists()


def test_the_archive_inside_the_input_tree_is_not_taken_as_input(tmp_path: Path) -> None:
    src = distinct_files(tmp_path / "logs", 2)
    rep = tmp_path / "r.json"
    base = ["compact", str(src), "--out-dir", str(tmp_path / "out"), "--report", str(rep), "--jobs", "1"]
    assert run(*base, "--archive", str(src / ".ctxc" / "archive"), *COMPACT) == 0
    assert run(*base, "--archive", str(src / ".ctxc" / "archive"), *COMPACT) == 0
    assert report_totals(rep)["files"] == 2  # not the manifest or the journal


# -- 18.12: an unreadable folder in a walk is reported, not skipped ----------------------------------


def test_an_unreadable_subdirectory_is_a_failure_of_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = distinct_files(tmp_path / "logs", 2)
    secret = src / "secret"
    distinct_files(secret, 1)
    # Root reads a mode-000 folder anyway: make listing it fail as it would for anyone else.
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if os.fspath(path) == str(secret):  # type: ignore[call-overload]
            raise PermissionError(13, "Permission denied", str(secret))
        return real(path)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "scandir", scandir)
    out = tmp_path / "out"
    code = run(
        "compact", str(src), "--out-dir", str(out), "--jobs", "1", "--archive", str(tmp_path / "a"), *COMPACT
    )
    err = capsys.readouterr().err
    assert code == ExitCode.PARTIAL, err
    assert str(secret) in err
    assert "Permission denied" in err
    assert len(list(out.iterdir())) == 2  # the readable files were done
    assert run("analyze", str(src), "--jobs", "1", "-f", "json") == ExitCode.PARTIAL


def _unprivileged() -> list[str] | None:
    """A command prefix running as ``nobody``, where this test runs as root and ``setpriv`` works."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # ctxc and its dependencies, not just the package: a virtual environment in a private folder (CI's
    # mktemp -d) leaves nobody without them.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import orjson, tiktoken, typer, ctxc.cli"],
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
        cwd="/",
    )
    return prefix if probe.returncode == 0 else None


def test_an_unreadable_subdirectory_fails_the_batch_for_a_real_user() -> None:
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("needs root, setpriv and a ctxc that user nobody can import")
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="ctxc-unreadable-"))  # /tmp, which nobody can enter
    try:
        src = distinct_files(root / "logs", 2)
        distinct_files(src / "secret", 1)
        for p in [root, *root.rglob("*")]:
            os.chown(p, 65534, 65534)
        root.chmod(0o755)
        (src / "secret").chmod(0)
        env = {
            **os.environ,
            "CTXC_CACHE_DIR": str(root / "cache"),
            "PYTHONPATH": str(Path(__file__).parents[1]),
        }
        cmd = [*prefix, sys.executable, "-m", "ctxc", "compact", str(src), "--out-dir", str(root / "out")]
        cmd += ["--archive", str(root / "arc"), "--jobs", "1", *COMPACT]
        done = subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False)
        err = done.stderr.decode(errors="replace")
        assert done.returncode == ExitCode.PARTIAL, err
        assert str(src / "secret") in err
        assert "Permission denied" in err
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- processes: a killed batch leaves none behind ------------------------------------------------------


def _group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            alive.append(int(entry.name))
    return alive


def _wait_group_gone(pgid: int, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    left = _group_alive(pgid)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _group_alive(pgid)
    return left


@pytest.fixture
def sessions() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:  # whatever a failed test left running
        for pid in _group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def _batch_cmd(src: Path, archive: Path, *where: str) -> list[str]:
    """``ctxc compact SRC`` on two workers; ``where`` is ``--out-dir DIR`` or ``--in-place``."""
    return [
        sys.executable, "-m", "ctxc", "compact", str(src), *where,
        "--archive", str(archive), "--jobs", "2", *COMPACT,
    ]  # fmt: skip


def _start(
    cmd: list[str], tmp_path: Path, sessions: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CTXC_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    sessions.append(proc)
    return proc


def _wait_runs(archive: Path, proc: subprocess.Popen[bytes], runs: int, seconds: float = 60) -> None:
    """Until the manifest records ``runs`` files (each worker records its own as it finishes it)."""
    manifest = archive / "manifest.jsonl"
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        if manifest.exists() and manifest.read_bytes().count(b"\n") >= runs:
            return
        time.sleep(0.01)


def _wait_workers(pgid: int, count: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while len(_group_alive(pgid)) < count and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill9", "term"])
def test_killing_the_main_process_leaves_no_worker(
    tmp_path: Path, sessions: list[subprocess.Popen[bytes]], sig: signal.Signals
) -> None:
    src = distinct_files(tmp_path / "in", 200)
    archive = tmp_path / "arc"
    proc = _start(_batch_cmd(src, archive, "--out-dir", str(tmp_path / "out")), tmp_path, sessions)
    # The main process and its two workers, forked from it.
    _wait_workers(proc.pid, 3)
    _wait_runs(archive, proc, 2)
    assert proc.poll() is None, "the batch ended before it could be killed"
    os.kill(proc.pid, sig)  # the main process only, as the OOM killer or `kill PID` does
    # A caller capturing the output gets its end of file: no survivor holds the pipes.
    _, err = proc.communicate(timeout=30)
    left = _wait_group_gone(proc.pid, 30)
    assert not left, f"processes left behind: {left}"
    if sig == signal.SIGTERM:
        text = err.decode(errors="replace")
        assert proc.returncode == ExitCode.INTERRUPTED, text
        assert "leaked" not in text
        assert "Traceback" not in text


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_batch_stopped_by_sigterm_still_writes_its_report(
    tmp_path: Path, sessions: list[subprocess.Popen[bytes]], jobs: str
) -> None:
    src = distinct_files(tmp_path / "in", 200)
    archive, rep = tmp_path / "arc", tmp_path / "r.json"
    cmd = _batch_cmd(src, archive, "--out-dir", str(tmp_path / "out"), "--report", str(rep))
    proc = _start([*cmd, "--jobs", jobs], tmp_path, sessions)  # the last --jobs wins
    _wait_runs(archive, proc, 3)
    assert proc.poll() is None, "the batch ended before it could be stopped"
    os.kill(proc.pid, signal.SIGTERM)  # a CI timeout
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, err.decode(errors="replace")
    doc = orjson.loads(rep.read_bytes())
    assert doc["schema"] == "ctxc.compact-batch/1"
    assert doc["interrupted"] is True
    assert doc["exit_code"] == ExitCode.INTERRUPTED
    totals, rows = doc["totals"], doc["files"]
    assert totals["ok"] == len(rows) >= 1
    assert totals["not_run"] == 200 - len(rows) > 0
    # Each file listed as done is done: journaled, its output whole on disk.
    journaled = {str(e["path"]) for e in journal(archive)}
    for row in rows:
        assert row["status"] == "ok"
        assert row["path"] in journaled
        assert sha256_hex(Path(row["output"]).read_bytes()) == row["output_sha256"]


# -- fault injection: kills at random moments, then a re-run ------------------------------------------

#: How each trial stops the batch: which signal, to the main process only or to its whole group (as
#: a terminal's Ctrl-C or a CI runner does), and whether the batch writes in place.
MODES = [
    ("kill", "parent", False),
    ("kill", "group", False),
    ("term", "parent", False),
    ("int", "group", False),
    ("term", "group", False),
    ("kill", "group", True),
    ("kill", "parent", True),
]
SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """Inputs and the outputs of one uninterrupted run over them."""
    root = tmp_path_factory.mktemp("reference")
    # Enough files that a kill after the first quarter lands mid-batch on a fast machine too.
    src = distinct_files(root / "in", 120)
    out = root / "out"
    env = {**os.environ, "CTXC_CACHE_DIR": str(root / "cache")}
    done = subprocess.run(
        _batch_cmd(src, root / "arc", "--out-dir", str(out)),
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return src, _snapshot(out)


@pytest.mark.parametrize("mode", MODES, ids=[f"{m[0]}-{m[1]}{'-in-place' if m[2] else ''}" for m in MODES])
def test_a_batch_killed_at_a_random_moment_resumes_to_the_same_outputs(
    tmp_path: Path,
    sessions: list[subprocess.Popen[bytes]],
    reference: tuple[Path, dict[str, bytes]],
    mode: tuple[str, str, bool],
) -> None:
    what, whom, in_place = mode
    rng = random.Random(f"issue-18 {mode}")
    src, expected = reference
    n = len(expected)
    out, archive = tmp_path / "out", tmp_path / "arc"
    if in_place:
        shutil.copytree(src, out)  # the batch rewrites these copies
        cmd = _batch_cmd(out, archive, "--in-place")
    else:
        cmd = _batch_cmd(src, archive, "--out-dir", str(out))
    proc = _start(cmd, tmp_path, sessions)
    _wait_runs(archive, proc, rng.randrange(1, n // 4))
    time.sleep(rng.uniform(0, 0.1))
    assert proc.poll() is None, "the batch ended before it could be killed"
    sig = SIGNALS[what]
    if whom == "group":
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    if sig != signal.SIGKILL:
        text = err.decode(errors="replace")
        runs_then = len(Archive(archive).manifest())
        assert proc.returncode == ExitCode.INTERRUPTED, f"{runs_then} of {n} files done; stderr: {text}"
        assert "leaked" not in text
        assert "Traceback" not in text
    assert not _wait_group_gone(proc.pid, 30), "processes left behind"

    # No partial output: every output there is whole: the input or what an uninterrupted run writes.
    originals = _snapshot(src)
    written = {k: v for k, v in _snapshot(out).items() if not k.endswith(TEMP_SUFFIX)} if out.exists() else {}
    for name, data in written.items():
        assert data in (expected[name], originals[name]) if in_place else data == expected[name], name
    # The journal and the manifest agree: each journaled file has its run, and its output on disk.
    runs = Archive(archive).manifest()
    by_output = {(e["output_sha256"], e["input_sha256"]) for e in runs}
    entries = journal(archive)
    for entry in entries:
        assert (entry["output_sha256"], entry["input_sha256"]) in by_output
        assert sha256_hex(Path(str(entry["output_path"])).read_bytes()) == entry["output_sha256"]
    for e in runs:
        Archive(archive).read(str(e["input_sha256"]))  # every recorded original is there, intact

    # The re-run does only the rest, and ends with the same outputs as the uninterrupted run.
    rep = tmp_path / "r.json"
    env = {**os.environ, "CTXC_CACHE_DIR": str(tmp_path / "cache")}
    again = subprocess.run(
        [*cmd, "--report", str(rep)], env=env, capture_output=True, timeout=300, check=False
    )
    assert again.returncode == 0, again.stderr
    totals = report_totals(rep)
    assert totals["skipped"] >= len(entries)
    assert totals["ok"] > 0, "the kill came after the last file: this trial tested nothing"
    assert totals["skipped"] + totals["ok"] == n
    assert _snapshot(out) == expected  # and no temp file is left
    runs = Archive(archive).manifest()
    outputs = {e["output_sha256"] for e in runs if e["output_sha256"] != e["input_sha256"]}
    assert not [e for e in runs if e["input_sha256"] in outputs], "an output was compacted again"
    # A file is recorded once, or twice when the kill fell between its record and its output's rename
    # (the record comes first, so no output is ever without one): then it was not done, and the
    # re-run wrote the same output again.
    per_file: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for e in runs:
        per_file.setdefault(str(e["input_sha256"]), set()).add(str(e["output_sha256"]))
        counts[str(e["input_sha256"])] = counts.get(str(e["input_sha256"]), 0) + 1
    assert len(per_file) == n
    assert all(len(outs) == 1 for outs in per_file.values()), "a file was compacted to two outputs"
    assert max(counts.values()) <= 2
    assert sum(counts.values()) - n <= 2, "files done before the kill were compacted again"


# An interrupt that lands while concurrent.futures holds a future's lock (inside wait()) must not hang
# the batch: the lock would stay held, and the pool's shutdown would wait for ever.
_INTERRUPT_INSIDE_WAIT = """
import os, signal, sys, time
import concurrent.futures._base as base
from ctxc.batch import run_batch

enter = base._AcquireFutures.__enter__
def interrupted_enter(self):
    for future in self.futures:
        future._condition.acquire()
        os.kill(os.getpid(), signal.SIGTERM)  # handled right here, between two acquisitions
base._AcquireFutures.__enter__ = interrupted_enter

def work(n):
    time.sleep(0.05)
    return n

try:
    run_batch([(str(i), i) for i in range(6)], work, jobs=2)
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_an_interrupt_inside_the_pools_wait_does_not_hang_the_batch(tmp_path: Path) -> None:
    script = tmp_path / "interrupt.py"
    script.write_text(_INTERRUPT_INSIDE_WAIT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 130, done.stderr.decode(errors="replace")


# A worker writing its output when a SIGTERM reaches the whole process group (a CI cancel, timeout(1),
# a supervisor stopping the job) must not leave its temporary file behind.
_TERMINATED_MID_WRITE = """
import contextlib, os, signal, sys, time
from pathlib import Path
from ctxc.batch import run_batch
from ctxc.output import atomic_output

out = Path(sys.argv[1])
AGAIN = len(sys.argv) > 2

@contextlib.contextmanager
def terminated_again():
    try:
        yield
    finally:  # unwinding: another SIGTERM comes, as the pool sends one once a worker has died
        if AGAIN:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)

def work(n):
    with atomic_output(str(out / f"{n}.jsonl")) as handle, terminated_again():
        handle.write(b"half a file")
        (out / f"started-{n}").touch()
        time.sleep(30)  # the kill comes here, mid-write
    return n

try:
    run_batch([(str(i), i) for i in range(2)], work, jobs=2)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("again", [False, True], ids=["once", "again-while-unwinding"])
def test_a_sigterm_to_the_group_leaves_no_temporary_output(tmp_path: Path, again: bool) -> None:
    """Also when a second SIGTERM reaches a worker that is removing its temporary output: once one worker
    has died, the pool terminates the others (seen once in CI under load)."""
    script = tmp_path / "terminated.py"
    script.write_text(_TERMINATED_MID_WRITE)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out), *(["again"] if again else [])],
        env=env,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(out.glob("started-*"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert len(list(out.glob("started-*"))) == 2, "the workers never started writing"
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == ExitCode.INTERRUPTED
    assert not list(out.glob("*.jsonl")), "a file cut short was renamed into place"
    assert not list(out.glob(f".*{TEMP_SUFFIX}")), "a killed worker left its temporary output"
