"""The archive keeps every original intact, under concurrency and interruption; outputs are atomic."""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLES

from ctxc.archive import Archive
from ctxc.archive_store import citation, sha256_hex
from ctxc.errors import ArchiveError, ExitCode, OutputError
from ctxc.output import atomic_output


def test_store_is_content_addressed_and_idempotent(tmp_path: Path) -> None:
    a = Archive(tmp_path)
    data = b'{"role":"user","content":"hi"}\n'
    ident = a.store(data)
    assert ident == sha256_hex(data)
    assert a.store(data) == ident
    assert a.read(ident) == data
    assert a.read(ident[:12]) == data
    assert list((tmp_path / "objects").rglob(".tmp-*")) == []


def test_an_archive_built_on_a_str_folder_works(tmp_path: Path) -> None:
    # Archive("folder") was a TypeError at the first store (str / str), unlike Archive.open("folder").
    a = Archive(str(tmp_path))  # type: ignore[arg-type]
    assert a.read(a.store(b"hi")) == b"hi"
    assert a.root == tmp_path


def test_resolve_errors(tmp_path: Path) -> None:
    a = Archive(tmp_path)
    with pytest.raises(ArchiveError, match="not an archive id"):
        a.resolve("xyz")
    with pytest.raises(ArchiveError, match="holds no object"):
        a.resolve("0" * 12)
    # Two objects sharing a 12-character prefix make that prefix ambiguous.
    bucket = tmp_path / "objects" / "ab"
    bucket.mkdir(parents=True)
    (bucket / ("abcdefabcdef" + "1" * 52)).write_bytes(b"x")
    (bucket / ("abcdefabcdef" + "2" * 52)).write_bytes(b"y")
    with pytest.raises(ArchiveError, match="ambiguous"):
        a.resolve("abcdefabcdef")


def test_corrupt_object_is_detected(tmp_path: Path) -> None:
    a = Archive(tmp_path)
    ident = a.store(b"original")
    a.object_path(ident).write_bytes(b"tampered")
    with pytest.raises(ArchiveError, match="corrupt"):
        a.read(ident)


def test_find_original_by_manifest_and_by_citation(tmp_path: Path) -> None:
    a = Archive(tmp_path)
    original = (SAMPLES / "chat-openai.jsonl").read_bytes()
    ident = a.store(original)
    compacted = b'{"role":"user","content":"summary"}\n'
    a.record_run({"input_sha256": ident, "output_sha256": sha256_hex(compacted)})
    assert a.find_original(compacted) == ident
    cited = f'{{"role":"user","content":"see {citation(ident, 3, 9)}"}}\n'.encode()
    assert a.find_original(cited) == ident
    assert a.find_original(b'{"role":"user","content":"unrelated"}\n') is None


def _worker(root: str, n: int) -> None:
    a = Archive(Path(root))
    for k in range(n):
        a.store(f"shared object {k % 5}".encode())
        a.record_run({"worker": os.getpid(), "k": k, "padding": "x" * 5000})


def test_two_processes_share_an_archive(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), 40)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    a = Archive(tmp_path)
    entries = a.manifest()
    assert len(entries) == 80  # no torn or interleaved line: each parses on its own
    assert {e["k"] for e in entries} == set(range(40))
    for k in range(5):
        assert a.read(sha256_hex(f"shared object {k}".encode())) == f"shared object {k}".encode()


def test_atomic_output_leaves_nothing_on_interrupt(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")

    def interrupted_write() -> None:
        with atomic_output(target) as handle:
            handle.write(b"half of a new fi")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted_write()
    assert target.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_atomic_output_refuses_to_overwrite_an_input(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"x\n")
    link = tmp_path / "alias.jsonl"
    link.symlink_to(src)
    with pytest.raises(OutputError, match="overwrite an input"), atomic_output(link, inputs=(str(src),)):
        pass
    assert src.read_bytes() == b"x\n"


def test_atomic_output_into_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="does not exist"), atomic_output(tmp_path / "nope" / "out.jsonl"):
        pass


def _started_ctxc(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`python -m ctxc ARGS`, returned once its entry point is loaded and about to run: a signal's
    delay counts from there, since the interpreter's start and the package import before it are out
    of ctxc's reach and, on a loaded machine, can outlast the delay by themselves."""
    start = "import os, sys, ctxc.__main__ as entry; os.write(2, b'started\\n'); entry.run()"
    proc = subprocess.Popen(
        [sys.executable, "-c", start, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], 60)
    assert ready
    # One write, read past the pipe's reader object (communicate reads the descriptor itself).
    assert os.read(proc.stderr.fileno(), 8) == b"started\n"
    return proc


def test_sigint_mid_compact_leaves_no_output(tmp_path: Path) -> None:
    """A real Ctrl-C on a real process: the output file never appears half-written."""
    big = tmp_path / "big.jsonl"
    line = (SAMPLES / "chat-openai.jsonl").read_bytes()
    # 47 MB: about 2 s of work, so the signal at 1 s lands mid-run. At 14 MB the run (0.9 s since its
    # index is built in the background) could end just before it, between the output and the exit.
    big.write_bytes(line * 1000)
    out = tmp_path / "small.jsonl"
    env = {**os.environ, "CTXC_NO_CACHE": "1"}
    args = ["compact", str(big), "-s", "fifo", "--target-tokens", "5000", "--archive", str(tmp_path / "arch")]
    # Uninterrupted, it writes its output and exits 0.
    proc = _started_ctxc([*args, "-o", str(out), "--window", "10000000", "--allow-over"], env)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".ctxc-tmp")]
    assert leftovers == []
    if proc.returncode == 130:
        assert not out.exists()
        assert b"interrupted" in err
    else:  # it finished before the signal arrived: then the output is whole
        assert proc.returncode == 0
        assert out.read_bytes().endswith(b"\n")
    assert big.read_bytes() == line * 1000


@pytest.mark.parametrize("delay", [0.15, 0.2, 0.25, 0.3, 0.4, 0.6])
def test_ctrl_c_while_starting_is_one_line_and_130(tmp_path: Path, delay: float) -> None:
    """Ctrl-C while ctxc imports (before its error boundary exists) or while it works: no traceback,
    and the documented code rather than death by SIGINT, which CPython picks at exit when the
    interrupt escaped code that dataclasses ran through exec()."""
    big = tmp_path / "big.jsonl"
    big.write_bytes((SAMPLES / "chat-openai.jsonl").read_bytes() * 100)
    env = {**os.environ, "CTXC_NO_CACHE": "1"}
    proc = _started_ctxc(["analyze", str(big), "--format", "json"], env)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    # CPython itself may swallow an interrupt raised in an import lock's callback, printing
    # "Exception ignored"; the run then goes on and succeeds. Any other traceback is ctxc's.
    assert b"Traceback" not in err or b"Exception ignored" in err, err.decode()
    assert proc.returncode in (ExitCode.INTERRUPTED, 0), err.decode()
    if proc.returncode:
        assert b"ctxc: interrupted" in err


def test_the_default_archive_is_per_user_and_citations_resolve_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from conftest import run

    from ctxc.archive_store import CITATION_RE, archive_root

    monkeypatch.delenv("CTXC_ARCHIVE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    repo.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(repo)
    assert archive_root() == tmp_path / "data" / "ctxc" / "archive"
    out = repo / "small.jsonl"
    code, _, _ = run(
        capsys,
        "compact",
        str(SAMPLES / "claude-code.jsonl"),
        "-s",
        "fifo",
        "--target-tokens",
        "4000",
        "-o",
        str(out),
    )
    assert code == 0
    assert not (repo / ".ctxc").exists()  # nothing for `git add -A` to pick up
    store = tmp_path / "data" / "ctxc"
    assert store.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in (store / "archive").rglob("*"))
    match = CITATION_RE.search(out.read_text())
    assert match is not None
    monkeypatch.chdir(elsewhere)
    code, shown, _ = run(capsys, "show", match.group(0), "-f", "json")
    assert code == 0
    assert shown.strip()


def test_a_project_local_archive_is_used_where_it_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxc.archive_store import archive_root

    monkeypatch.delenv("CTXC_ARCHIVE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "proj" / ".ctxc" / "archive").mkdir(parents=True)
    (tmp_path / "proj" / "src").mkdir()
    monkeypatch.chdir(tmp_path / "proj" / "src")
    assert archive_root() == tmp_path / "proj" / ".ctxc" / "archive"
    monkeypatch.setenv("CTXC_ARCHIVE", str(tmp_path / "mine"))
    assert archive_root() == tmp_path / "mine"
    assert archive_root(tmp_path / "flag") == tmp_path / "flag"
