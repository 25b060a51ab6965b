"""Writes and streams under faults: a full disk, special files as outputs, pipes as inputs, closed
standard streams, and runs that fail after their output could have been written.

Tests that need a real file descriptor (stdout on a full tmpfs, a FIFO, a closed stdin) run ``ctxc`` as
a subprocess, always with a timeout; every thread a test starts is joined with a timeout and unblocked
if it is still waiting.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from conftest import ROOT, SAMPLES, run

from ctxc.errors import ExitCode

SAMPLE = SAMPLES / "claude-code.jsonl"  # 135 KB: more than the room left on the small disk
CHAT = SAMPLES / "chat-anthropic.jsonl"
TIMEOUT = 120


def ctxc(
    *args: str,
    tmp: Path,
    stdout: int | object = subprocess.PIPE,
    unbuffered: bool | None = None,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.CompletedProcess[bytes]:
    """``python -m ctxc ARGS`` in a child with this checkout, a private archive and cache."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CTXC_ARCHIVE": str(tmp / "archive"),
        "CTXC_CACHE_DIR": str(tmp / "cache"),
    }
    if unbuffered is not None:
        env.pop("PYTHONUNBUFFERED", None)
        if unbuffered:
            env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "ctxc", *args],
        stdout=stdout,  # type: ignore[arg-type]
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=TIMEOUT,
        pass_fds=pass_fds,
        check=False,
    )


def one_line(err: bytes, *needles: str) -> str:
    lines = [ln for ln in err.decode().splitlines() if ln.strip()]
    assert len(lines) == 1, err.decode()
    assert lines[0].startswith("ctxc: error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------------------- full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 5 MB tmpfs at ``tmp_path/small`` (needs root; skipped where mounting is not allowed)."""
    where = tmp_path / "small"
    where.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(where)],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except FileNotFoundError:
        pytest.skip("no mount command: the full-disk tests need a small tmpfs")
    if done.returncode:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.decode().strip()}): the full-disk tests need root"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30, check=False)


def fill(disk: Path, leave: int = 0) -> None:
    """Fill ``disk`` up, then give back about ``leave`` bytes."""
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        block = b"\0" * (1 << 16)
        with contextlib.suppress(OSError):
            while True:
                handle.write(block)
                handle.flush()
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))


def left_behind(disk: Path) -> list[str]:
    return sorted(p.name for p in disk.iterdir() if p.name != "filler")


def archived(tmp: Path) -> str:
    """The archive id of SAMPLE, archived by a compact into ``tmp``'s private archive."""
    done = ctxc("compact", str(SAMPLE), "-o", str(tmp / "compacted.jsonl"), "-q", tmp=tmp)
    assert done.returncode == 0, done.stderr
    return orjson.loads((tmp / "archive" / "manifest.jsonl").read_bytes().splitlines()[-1])["archive_id"]


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
def test_compact_to_stdout_on_a_full_disk_fails_with_no_success_line(
    small_disk: Path, tmp_path: Path, unbuffered: bool
) -> None:
    fill(small_disk, leave=64 * 1024)
    with open(small_disk / "o.jsonl", "wb") as out:
        done = ctxc(
            "compact", str(SAMPLE), "-s", "mask", "--window", "100000000",
            tmp=tmp_path, stdout=out, unbuffered=unbuffered,
        )  # fmt: skip
    assert done.returncode == ExitCode.OUTPUT
    one_line(done.stderr, "stdout", "No space left on device")


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
def test_restore_to_stdout_on_a_full_disk_fails(small_disk: Path, tmp_path: Path, unbuffered: bool) -> None:
    ident = archived(tmp_path)
    fill(small_disk, leave=64 * 1024)
    with open(small_disk / "r.jsonl", "wb") as out:
        done = ctxc("restore", ident, tmp=tmp_path, stdout=out, unbuffered=unbuffered)
    assert done.returncode == ExitCode.OUTPUT
    one_line(done.stderr, "No space left on device")


@pytest.mark.parametrize("command", ["compact", "convert", "restore"])
@pytest.mark.parametrize("leave", [64 * 1024, 0], ids=["some-room", "no-room"])
def test_an_output_file_on_a_full_disk_fails_and_leaves_nothing(
    small_disk: Path, tmp_path: Path, command: str, leave: int
) -> None:
    ref = archived(tmp_path) if command == "restore" else str(SAMPLE)
    fill(small_disk, leave=leave)
    done = ctxc(command, ref, "-o", str(small_disk / "o.jsonl"), tmp=tmp_path)
    assert done.returncode == ExitCode.OUTPUT
    one_line(done.stderr, "No space left on device")
    assert left_behind(small_disk) == []


def test_an_archive_on_a_full_disk_fails_the_run_and_leaves_no_spool(
    small_disk: Path, tmp_path: Path
) -> None:
    # The original is copied into the archive as it is read: a disk too full for it fails the run
    # before any output, with the archive's exit code, and the partial copy is removed.
    fill(small_disk, leave=64 * 1024)
    out = tmp_path / "o.jsonl"
    done = ctxc(
        "compact", str(SAMPLE), "-o", str(out), "--archive", str(small_disk / "archive"), tmp=tmp_path
    )
    assert done.returncode == ExitCode.ARCHIVE
    one_line(done.stderr, "No space left on device")
    assert not out.exists()
    assert list((small_disk / "archive").rglob(".tmp-*")) == []


def test_a_report_that_cannot_be_written_leaves_no_output(small_disk: Path, tmp_path: Path) -> None:
    fill(small_disk)
    out = tmp_path / "out.jsonl"
    done = ctxc("compact", str(CHAT), "-o", str(out), "--report", str(small_disk / "r.json"), tmp=tmp_path)
    assert done.returncode == ExitCode.OUTPUT
    one_line(done.stderr, "r.json", "No space left on device")
    assert not out.exists()
    assert left_behind(small_disk) == []


NO_ROOM_COMMANDS = [
    ("analyze", str(SAMPLE), "-f", "json"),
    ("analyze", str(SAMPLE), "-f", "csv"),
    ("analyze", str(SAMPLE), "-f", "table"),
    ("convert", str(SAMPLE)),
    ("validate", str(SAMPLE)),
    ("check", str(SAMPLE), "--max-usage", "0.9", "-f", "json"),
    ("restore", "{id}"),
    ("show", "{id}", "-f", "text"),
    ("show", "{id}", "-f", "raw"),
    ("show", "{id}", "-f", "table"),
    ("compact", str(SAMPLE), "-s", "mask", "--window", "100000000"),
    ("--help",),  # help is printed by rich, straight to stdout
    ("compact", "--help"),
    ("hooks", "install", "--help"),
]


@pytest.mark.parametrize("args", NO_ROOM_COMMANDS, ids=lambda a: " ".join(a[:1] + a[2:]))
def test_every_command_reports_a_full_disk_on_stdout(
    small_disk: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    ident = archived(tmp_path) if "{id}" in args else ""
    fill(small_disk)
    with open(small_disk / "out", "wb") as out:
        done = ctxc(*(a.replace("{id}", ident) for a in args), tmp=tmp_path, stdout=out)
    assert done.returncode == ExitCode.OUTPUT, done.stderr
    one_line(done.stderr, "No space left on device")


@pytest.mark.parametrize("fmt", ["json", "table", "csv"])
def test_a_reader_that_goes_away_ends_the_run_quietly(tmp_path: Path, fmt: str) -> None:
    # `ctxc analyze ... | head -c 100`, for every way analyze writes (rich used to exit 1 on a table).
    big = tmp_path / "many.jsonl"
    big.write_bytes(
        b"".join(orjson.dumps({"role": "user", "content": f"m{i}"}) + b"\n" for i in range(10_000))
    )
    cmd = [sys.executable, "-m", "ctxc", "analyze", str(big), "-f", fmt, "--messages", "--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CTXC_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=TIMEOUT) == ExitCode.OK, err
    assert err == ""


def test_a_reader_gone_leaves_no_descriptor_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # main() also runs in-process (tests, the library), where a leaked /dev/null adds up.
    from ctxc.cli.app import _reader_gone

    with open(tmp_path / "stdout", "w") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(SystemExit):
            _reader_gone()
        assert len(os.listdir("/proc/self/fd")) == before


# ------------------------------------------------------------------------------------- special files


def expected_copy(tmp: Path) -> bytes:
    """What ``convert SAMPLE`` writes (its own format: the input's bytes)."""
    return SAMPLE.read_bytes()


def test_o_onto_a_character_device_writes_through_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dev = tmp_path / "null2"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    for args in (("compact", str(CHAT), "-q"), ("convert", str(CHAT)), ("repair", str(CHAT))):
        code, _, err = run(capsys, *args, "-o", str(dev))
        assert code == 0, err
        assert stat.S_ISCHR(dev.stat().st_mode), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null2"]


def test_o_dev_null_stays_a_device(capsys: pytest.CaptureFixture[str]) -> None:
    before = os.stat("/dev/null")
    code, _, err = run(capsys, "convert", str(CHAT), "-o", "/dev/null")
    assert code == 0, err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode)
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


class FifoReader:
    """A thread reading a FIFO to its end; ``join`` unblocks it if no writer ever came."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as handle:
            self.data = handle.read()

    def join(self) -> bytes:
        self.thread.join(timeout=TIMEOUT)
        if self.thread.is_alive():  # nobody opened it for writing: open it so the reader sees the end
            with contextlib.suppress(OSError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            self.thread.join(timeout=10)
        return self.data


def test_o_onto_a_fifo_writes_to_its_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    done = ctxc("convert", str(SAMPLE), "-o", str(fifo), tmp=tmp_path)
    got = reader.join()
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert got == expected_copy(tmp_path)


def test_o_dev_stdout_writes_to_stdout(tmp_path: Path) -> None:
    done = ctxc("convert", str(SAMPLE), "-o", "/dev/stdout", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected_copy(tmp_path)


def test_o_dev_stdout_appends_where_stdout_appends(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"earlier":"line"}\n')
    with open(log, "ab") as out:
        done = ctxc("convert", str(SAMPLE), "-o", "/dev/stdout", tmp=tmp_path, stdout=out)
    assert done.returncode == 0, done.stderr
    assert log.read_bytes() == b'{"earlier":"line"}\n' + expected_copy(tmp_path)


# --------------------------------------------------------------------------------------------- pipes


def regular_total(tmp: Path, command: str = "analyze") -> int:
    done = ctxc("analyze", str(CHAT), "-f", "json", "--no-cache", tmp=tmp)
    assert done.returncode == 0, done.stderr
    return int(orjson.loads(done.stdout)["files"][0]["total_tokens"])


class FifoWriter:
    """A thread writing CHAT into a FIFO; ``join`` unblocks it if no reader ever came."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self) -> None:
        with contextlib.suppress(BrokenPipeError), open(self.path, "wb") as handle:
            handle.write(CHAT.read_bytes())

    def join(self) -> None:
        self.thread.join(timeout=TIMEOUT)
        if self.thread.is_alive():
            with contextlib.suppress(OSError):
                os.close(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK))
            self.thread.join(timeout=10)


@pytest.mark.parametrize("command", ["analyze", "check"])
def test_a_fifo_input_is_read_once(tmp_path: Path, command: str) -> None:
    want = regular_total(tmp_path)
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    writer = FifoWriter(fifo)
    try:
        extra = ("--max-usage", "0.9") if command == "check" else ()
        done = ctxc(command, str(fifo), "-f", "json", *extra, tmp=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ctxc {command} of a FIFO hung")
    finally:
        writer.join()
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    assert doc["files"][0]["total_tokens" if command == "analyze" else "tokens"] == want


@pytest.mark.parametrize("command", ["analyze", "check"])
def test_a_dev_fd_input_is_read_once(tmp_path: Path, command: str) -> None:
    want = regular_total(tmp_path)
    read_end, write_end = os.pipe()

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError), open(write_end, "wb") as handle:
            handle.write(CHAT.read_bytes())

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        extra = ("--max-usage", "0.9") if command == "check" else ()
        done = ctxc(command, f"/dev/fd/{read_end}", "-f", "json", *extra, tmp=tmp_path, pass_fds=(read_end,))
    finally:
        os.close(read_end)
        feeder.join(timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    assert doc["files"][0]["total_tokens" if command == "analyze" else "tokens"] == want


# ------------------------------------------------------------------------------------- skip-invalid


@pytest.fixture
def with_bad_lines(tmp_path: Path) -> Path:
    lines = CHAT.read_bytes().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join(lines[:3]) + b"{not json\n" + b"".join(lines[3:]) + b'{"role":"user","cont')
    return bad


def test_compact_skip_invalid_keeps_going_and_writes_bad_lines_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, with_bad_lines: Path
) -> None:
    out = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "compact", str(with_bad_lines), "--skip-invalid", "-o", str(out), "-q")
    assert code == 0, err
    written = out.read_bytes()
    assert b"\n{not json\n" in written
    assert written.endswith(b'\n{"role":"user","cont')


@pytest.mark.parametrize("strategy", ["adaptive", "fifo"])
def test_compact_skip_invalid_dry_run(
    capsys: pytest.CaptureFixture[str], with_bad_lines: Path, strategy: str
) -> None:
    args = ["--skip-invalid", "--dry-run", "-s", strategy, "--target-ratio", "0.01", "--allow-over"]
    code, out, err = run(capsys, "compact", str(with_bad_lines), *args)
    assert code == 0, err
    assert orjson.loads(out)["run"]["tokens_after"] > 0


# ---------------------------------------------------------------------------------- closed streams


def sh(script: str, tmp: Path) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CTXC_ARCHIVE": str(tmp / "a"),
        "CTXC_CACHE_DIR": str(tmp / "c"),
    }
    return subprocess.run(
        ["sh", "-c", script, sys.executable, str(CHAT)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize("command", ["analyze - -f json", "compact - -o {tmp}/o.jsonl", "validate -"])
def test_a_closed_stdin_is_an_input_error(tmp_path: Path, command: str) -> None:
    done = sh(f'exec "$0" -m ctxc {command.format(tmp=tmp_path)} <&-', tmp_path)
    assert done.returncode == ExitCode.INPUT
    one_line(done.stderr, "stdin is closed")


@pytest.mark.parametrize(
    "command", ["analyze $1 -f json", "analyze $1 -f table", "convert $1", "compact $1 -q", "models"]
)
def test_a_closed_stdout_is_an_output_error(tmp_path: Path, command: str) -> None:
    done = sh(f'exec "$0" -m ctxc {command} >&-', tmp_path)
    assert done.returncode == ExitCode.OUTPUT
    one_line(done.stderr, "stdout is closed")
    assert not (tmp_path / "o.jsonl").exists()


def test_o_dev_stdout_with_stdout_closed_is_an_output_error(tmp_path: Path) -> None:
    done = sh('exec "$0" -m ctxc convert $1 -o /dev/stdout >&-', tmp_path)
    assert done.returncode == ExitCode.OUTPUT
    one_line(done.stderr, "/dev/stdout", "closed")


def test_a_closed_stdout_does_not_matter_with_o(tmp_path: Path) -> None:
    done = sh(f'exec "$0" -m ctxc compact $1 -q -o {tmp_path}/o.jsonl >&-', tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o.jsonl").read_bytes()


# ------------------------------------------------------------------------- outputs that must not be


def test_report_onto_the_output_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    out = tmp_path / "x.jsonl"
    code, _, err = run(
        capsys, "compact", str(CHAT), "-o", str(out), "--report", str(tmp_path / "sub" / ".." / "x.jsonl")
    )
    assert code == ExitCode.USAGE
    assert "--report" in err
    assert not out.exists()


def test_report_onto_a_batch_output_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.jsonl").write_bytes(CHAT.read_bytes())
    out = tmp_path / "out"
    code, _, err = run(
        capsys, "compact", str(tmp_path / "in"), "--out-dir", str(out), "--report", str(out / "x.jsonl")
    )
    assert code == ExitCode.USAGE, err
    assert "--report" in err
    assert not out.exists()


def test_report_onto_an_input_is_refused_before_any_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(CHAT.read_bytes())
    out = tmp_path / "x.jsonl"
    code, _, err = run(capsys, "compact", str(src), "-o", str(out), "--report", str(src))
    assert code == ExitCode.OUTPUT, err
    assert not out.exists()
    assert src.read_bytes() == CHAT.read_bytes()


def test_an_output_that_cannot_be_written_fails_before_the_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    code, _, err = run(
        capsys, "compact", str(CHAT), "-o", str(tmp_path / "missing" / "x.jsonl"), "--archive", str(archive)
    )
    assert code == ExitCode.OUTPUT, err
    assert not archive.exists()  # nothing archived for a run that could never write its output


@pytest.mark.parametrize("existing", [False, True])
def test_an_unwritable_manifest_leaves_no_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, existing: bool
) -> None:
    archive = tmp_path / "archive"
    (archive / "manifest.jsonl").mkdir(parents=True)
    out = tmp_path / "x.jsonl"
    if existing:
        out.write_bytes(b"the old output\n")
    for command in ("compact", "repair"):
        code, _, err = run(capsys, command, str(CHAT), "-o", str(out), "--archive", str(archive))
        assert code == ExitCode.ARCHIVE, err
        assert out.read_bytes() == b"the old output\n" if existing else not out.exists()
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".ctxc-tmp")] == []


# ----------------------------------------------------------------------------------------- file mode


@pytest.mark.usefixtures("lax_umask")
@pytest.mark.parametrize("command", ["compact", "convert", "repair"])
def test_an_output_gets_the_inputs_mode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    src = tmp_path / "secret.jsonl"
    src.write_bytes(CHAT.read_bytes())
    src.chmod(0o600)
    out = tmp_path / "out.jsonl"
    code, _, err = run(capsys, command, str(src), "-o", str(out), *(["-q"] if command == "compact" else []))
    assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


@pytest.mark.usefixtures("lax_umask")
def test_a_replaced_output_is_never_more_open_than_the_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = tmp_path / "secret.jsonl"
    src.write_bytes(CHAT.read_bytes())
    src.chmod(0o600)
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"old\n")
    out.chmod(0o644)
    code, _, err = run(capsys, "convert", str(src), "-o", str(out))
    assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


# ------------------------------------------------------------------------------------ summary prompt


@pytest.mark.parametrize("budget", [1, 2, 10, 33, 800])
def test_the_summary_prompt_states_a_length_its_token_budget_allows(budget: int) -> None:
    import re

    from ctxc.model import Message, TextBlock
    from ctxc.summarize import SummaryRequest
    from ctxc.summarize.prompt import build_prompt

    msgs = (Message(role="user", blocks=(TextBlock("hello"),), line=1),)
    prompt = build_prompt(SummaryRequest(messages=msgs, citation="ctxc archive 0123456789ab", budget=budget))
    found = re.search(r"at most about (\d+) (words?) \((\d+) (tokens?)\)", prompt.system)
    assert found, prompt.system
    words, word_unit, tokens, token_unit = int(found[1]), found[2], int(found[3]), found[4]
    assert tokens == budget
    assert 1 <= words <= tokens
    assert word_unit == ("word" if words == 1 else "words")
    assert token_unit == ("token" if tokens == 1 else "tokens")


def test_stdout_writes_survive_short_writes_and_a_non_blocking_pipe() -> None:
    # A raw stdout (PYTHONUNBUFFERED) takes part of a write; a non-blocking one may take none for now.
    from ctxc.output import _write_all

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    data = os.urandom(1 << 20)  # far more than a pipe holds
    got = bytearray()

    def drain() -> None:
        while chunk := os.read(read_end, 1 << 16):
            got.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    with open(write_end, "wb", buffering=0) as raw:
        _write_all(raw, data)
    reader.join(timeout=TIMEOUT)
    os.close(read_end)
    assert bytes(got) == data


# ------------------------------------------------------------------------------------------ durability


def test_each_rename_is_synced_and_the_original_before_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A rename reaches the disk when its folder is synced: without that, a power cut after the run could
    # keep the output (an --in-place input replaced) and lose the archive's entry for the original.
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        real_replace(src, dst)
        events.append(("replace", os.path.realpath(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "out.jsonl"
    archive = tmp_path / "archive"
    code, _, err = run(capsys, "compact", str(SAMPLE), "-o", str(out), "--archive", str(archive), "-q")
    assert code == 0, err
    original = next(archive.glob("objects/??/*"))
    stored = events.index(("replace", str(original)))
    written = events.index(("replace", str(out)))
    assert stored < events.index(("fsync", str(original.parent)), stored) < written
    assert ("fsync", str(out.parent)) in events[written:]


def test_the_temporary_output_of_a_killed_run_is_swept_by_the_next(tmp_path: Path) -> None:
    # A real SIGKILL while the output is on its way to disk (held in fsync here, to kill it there): no
    # cleanup runs, so the next run writing that output removes the dead run's temporary file.
    script = (
        "import os, sys, time\n"
        "real = os.fsync\n"
        "def stuck(fd):\n"
        "    if os.readlink(f'/proc/self/fd/{fd}').endswith('.ctxc-tmp'):\n"
        "        print('syncing', flush=True)\n"
        "        time.sleep(60)\n"
        "    real(fd)\n"
        "os.fsync = stuck\n"
        "from ctxc.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    out = tmp_path / "out" / "o.jsonl"
    out.parent.mkdir()
    args = ["compact", str(CHAT), "-o", str(out), "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CTXC_ARCHIVE": str(tmp_path / "archive")}
    child = subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"syncing\n"
    finally:
        child.kill()
        child.wait(timeout=TIMEOUT)
    assert [p.name.startswith(f".o.jsonl.{child.pid}.") for p in out.parent.iterdir()] == [True]
    done = ctxc(*args, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.parent.iterdir()] == ["o.jsonl"]


@pytest.mark.parametrize("command", ["compact", "repair", "restore"])
def test_an_output_into_the_archive_is_refused(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "archive"
    sample = str(SAMPLES / "claude-code.jsonl")
    assert run(capsys, "compact", sample, "-o", str(tmp_path / "c.jsonl"), "--archive", str(archive))[0] == 0
    manifest = archive / "manifest.jsonl"
    before = manifest.read_bytes()
    source = str(tmp_path / "c.jsonl") if command == "restore" else sample
    code, _, err = run(capsys, command, source, "-o", str(manifest), "--archive", str(archive))
    assert code == ExitCode.OUTPUT
    assert "into the archive" in err
    assert manifest.read_bytes() == before  # the record of every run is still whole
