"""The crew of counting children forked as the command line starts (ctxc.tokens.prefork).

Children are forked in fresh interpreters: a test session runs threads (the fake API server), and a
fork copies whatever lock one of them holds.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import ROOT, SAMPLES
from hypothesis import given
from hypothesis import strategies as st

from ctxc.system import cpu_count
from ctxc.tokens.prefork import PARTIAL_INPUT_BYTES, Plan, plan, split


def run_script(script: str, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CTXC_NO_PREBUILD": "", **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return orjson.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_plan_forks_for_inputs_of_counting_commands(tmp_path: Path) -> None:
    small = SAMPLES / "chat-anthropic.jsonl"
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        f.truncate(5 << 20)
    medium = tmp_path / "medium.jsonl"
    with medium.open("wb") as f:
        f.truncate(PARTIAL_INPUT_BYTES + 1)
    # A small file: one child, which parses the rank table and counts with partial encodings.
    one = Plan("o200k_base", 1, partial=True)
    assert plan(["analyze", str(small)]) == one
    assert plan(["compact", str(small), "--target", "0.5"]) == one
    assert plan(["check", "--tokenizer", "cl100k_base", str(small)]) == ("cl100k_base", 1, True)
    assert plan(["compact", str(small), "--archive", str(tmp_path), "--out-dir", str(tmp_path)]) == one
    assert plan(["analyze", "-j", "2", str(small)]) == one
    # Standard input is of unknown size, usually a pipe of one log; a medium file is too large to
    # wait for its texts: the child builds the whole encoding at once.
    assert plan(["analyze", "--tokenizer=cl100k_base", "-"]) == ("cl100k_base", 1, False)
    assert plan(["analyze", "-"]) == ("o200k_base", 1, False)
    assert plan(["analyze", str(small), "-"]) == ("o200k_base", 1, False)
    assert plan(["analyze", str(medium)]) == ("o200k_base", 1, False)
    # A large input: a child per core, the first forking the others once it has built the encoding.
    assert plan(["analyze", str(big)]) == ("o200k_base", cpu_count(), False)
    assert plan(["compact", "--jobs", "2", str(big)]) == ("o200k_base", cpu_count(), False)
    for args in (
        [],
        ["convert", str(small)],  # counts nothing
        ["analyze", str(small), "--tokenizer", "approx"],
        ["analyze", str(small), "--tokenizer", "usage"],
        ["analyze", str(small), "--help"],
        ["analyze", str(small), str(big)],  # a batch of a large file: its workers count
        ["analyze", "--jobs", "2", str(small), str(small)],  # batch workers count
        ["analyze", "--jobs=2", str(small), str(small)],
        ["analyze", str(tmp_path)],  # a folder is a batch
        ["analyze", str(tmp_path / "missing.jsonl")],  # nothing to read: the CLI says so
    ):
        assert plan(args) is None, args


COUNTS = r"""
import sys, orjson, os, time
from ctxc.tokens.prefork import Crew
from ctxc.tokens.tiktoken_backend import SPECS, build_encoding

texts = ["hello world", "안녕하세요, 세계", "<|endoftext|> is ordinary text here", "", "x" * 5000]
child = Crew("o200k_base")
first = child.start(texts[:2])
# The second batch is sent before the first answer is read: start() reads it first, in order.
second = child.start(texts[2:])
counts = (first() or []) + (second() or [])
enc = build_encoding(SPECS["o200k_base"])
pid = child.pid
child.close()
try:
    os.waitpid(pid, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True
after = child.start(["more"])()  # a closed child answers nothing: the caller counts itself
print(orjson.dumps({
    "counts": counts,
    "expected": [len(enc.encode_ordinary(t)) for t in texts],
    "reaped": reaped,
    "after": after,
}).decode())
"""


def test_child_counts_exactly_what_tiktoken_does_and_is_reaped() -> None:
    doc = run_script(COUNTS)
    assert doc["counts"] == doc["expected"]
    assert doc["reaped"] is True
    assert doc["after"] is None


FAILURES = r"""
import sys, orjson, os, signal
from ctxc.tokens.prefork import Crew

def broken():
    raise RuntimeError("corrupt ranks")

failed = Crew("o200k_base", build=broken).start(["a"])()

def slow():
    import time
    time.sleep(60)

victim = Crew("o200k_base", build=slow)
pending = victim.start(["a"])
os.kill(victim.pid, signal.SIGKILL)  # dies before answering
died = pending()

# Stopped with a batch still waited for: the wait ends (the caller counts that batch itself).
stopped = Crew("o200k_base", build=slow)
queued = [stopped.start(["a"]), stopped.start(["b"]), stopped.start(["c"])]  # the third is not sent
stopped.close()
after_close = [wait() for wait in queued]

# Another process (a batch worker forked later) inherits the object but may not use it.
other = Crew("o200k_base", build=lambda: (lambda texts: [1] * len(texts)))
real_getpid = os.getpid
os.getpid = lambda: real_getpid() + 1
usable_elsewhere = other.usable
other.close()  # not the owner: leaves the child alone
os.getpid = real_getpid
answer = other.start(["a", "b"])()
other.close()
print(orjson.dumps({"failed": failed, "died": died, "usable_elsewhere": usable_elsewhere,
                    "answer": answer, "after_close": after_close}).decode())
"""


def test_failed_build_dead_child_and_foreign_process() -> None:
    doc = run_script(FAILURES)
    assert doc["failed"] is None  # the caller then builds itself and raises the real error
    assert doc["died"] is None
    assert doc["usable_elsewhere"] is False
    assert doc["answer"] == [1, 1]
    assert doc["after_close"] == [None, None, None]


STOPPED = r"""
import os, sys, time, orjson
from ctxc.tokens.prefork import Crew

marker = sys.argv[1]

def slow_build():
    # Stands for the build: the child is stopped before it answers. A build writes nothing, so
    # nothing needs undoing and the child ends at once (this handler is never reached).
    open(marker, "w").close()
    try:
        time.sleep(60)
    except BaseException:
        os.unlink(marker)
        raise

child = Crew("o200k_base", build=slow_build)
while not os.path.exists(marker):
    time.sleep(0.01)
child.close()  # SIGTERM, not waited for
_, status = os.waitpid(child.pid, 0)
doc = {"signal": os.WIFSIGNALED(status) and os.WTERMSIG(status), "marker_left": os.path.exists(marker)}
print(orjson.dumps(doc).decode())
"""


def test_child_stopped_mid_build_ends_at_once(tmp_path: Path) -> None:
    # Killed by the signal itself, not unwound by a Python handler, which tiktoken's Rust constructor
    # would not run until the build was done: a run served from the scan cache leaves no build
    # running after it.
    doc = run_script(STOPPED, str(tmp_path / "building"))
    assert doc == {"signal": 15, "marker_left": True}


NO_FORK = r"""
import os, sys, orjson
from ctxc.tokens import prefork

def refuse():
    raise BlockingIOError(11, "Resource temporarily unavailable")

fds = len(os.listdir("/proc/self/fd"))
os.fork = refuse
prefork.start_for(["analyze", sys.argv[1]])
leaked = len(os.listdir("/proc/self/fd")) - fds
print(orjson.dumps({"child": bool(prefork._current), "leaked": leaked}).decode())
"""


def test_no_child_when_no_process_can_be_forked() -> None:
    doc = run_script(NO_FORK, str(SAMPLES / "chat-anthropic.jsonl"))
    assert doc == {"child": False, "leaked": 0}


USED = r"""
import sys, orjson
from ctxc import __main__ as entry
from ctxc.tokens import prefork

sys.argv = ["ctxc", "analyze", sys.argv[1], "--format", "json", "--no-cache"]
try:
    entry.main()
except SystemExit:
    pass
child = prefork._current[0]
print()
print(orjson.dumps({"sent": child.sent, "answered": child.answered, "size": child.size}).decode())
"""


def test_cli_sends_a_small_files_counts_to_the_child(tmp_path: Path) -> None:
    doc = run_script(USED, str(SAMPLES / "claude-code.jsonl"), env={"CTXC_CACHE_DIR": str(tmp_path)})
    assert doc["sent"] >= 1
    assert doc["answered"] == doc["sent"]
    # The parsed rank table's copy, which the child writes after its first answer, not before.
    assert [p.suffix for p in (tmp_path / "bpe").iterdir()] == [".marshal"]
    assert doc["size"] == 1


def test_cli_counts_a_large_file_with_the_crew_it_started(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        n = 0
        while f.tell() < 5 << 20:  # distinct texts, so batches are large enough to be shared out
            role = ("user", "assistant")[n % 2]
            text = f"message {n}: " + " ".join(f"word{n * 7 + i}" for i in range(150))
            f.write(orjson.dumps({"role": role, "content": text}) + b"\n")
            n += 1
    doc = run_script(USED, str(big), env={"CTXC_CACHE_DIR": str(tmp_path / "cache")})
    # One child per core, started with the command and used by analyze (no second crew forked),
    # each of them sent parts of the large batches.
    assert doc["size"] == cpu_count()
    assert doc["answered"] == doc["sent"] >= 2 * cpu_count()


STREAMS = r"""
import os, sys
from ctxc.tokens.prefork import Crew

def hang():
    import time
    time.sleep(60)

child = Crew("o200k_base", build=hang)
print(child.pid, flush=True)
os._exit(0)  # no cleanup: the child is still building
"""


def test_child_holds_none_of_the_parents_streams() -> None:
    # A pipe reading ctxc's output ends when ctxc exits, not when its child does: this would time out.
    done = subprocess.run(
        [sys.executable, "-c", STREAMS],
        capture_output=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    pid = int(done.stdout)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)


TOKENIZER = r"""
import sys, orjson
from ctxc.tokens import prefork, tiktoken_backend as tb

prefork.start_for(["analyze", sys.argv[1]])
tok = tb.TiktokenTokenizer("o200k_base")
texts = [f"line {i} of a log, 한국어 {i * 7}" for i in range(300)]
counts = tok.count_batch(texts)
sent_to_child = not (tb._encodings or tb._partials) and prefork.crew_for("o200k_base") is not None
# Waiting for the child past the price of a build: this process counts here (with a partial encoding,
# for so small a batch).
prefork.crew_for("o200k_base").waited = tb.BUILD_SECONDS
sent = prefork.crew_for("o200k_base").sent
again = tok.count_batch(texts)
print(orjson.dumps({
    "same": counts == again == [tok.count(t) for t in texts],
    "sent_to_child": sent_to_child,
    "counted_here": bool(tb._encodings or tb._partials),
    "sent_after": prefork.crew_for("o200k_base").sent - sent,
}).decode())
"""


def test_tokenizer_counts_through_the_child_until_waiting_costs_a_build() -> None:
    doc = run_script(TOKENIZER, str(SAMPLES / "chat-anthropic.jsonl"))
    assert doc == {"same": True, "sent_to_child": True, "counted_here": True, "sent_after": 0}


CREW = r"""
import os, sys, time, orjson
from ctxc.tokens.prefork import Crew
from ctxc.tokens.tiktoken_backend import SPECS, build_encoding

log = sys.argv[1]

def build():
    from ctxc.tokens.prefork import _count_with
    with open(log, "a") as f:
        f.write(f"build {os.getpid()}\n")
    count = _count_with("o200k_base", None)
    def counting(texts):
        with open(log, "a") as f:
            f.write(f"count {os.getpid()}\n")
        return count(texts)
    return counting

texts = [f"message {i}: " + "안녕하세요 world, tokens " * (i % 40) for i in range(400)]
crew = Crew("o200k_base", 2, build=build)
spread = crew.start(texts, spread=True)()
small = crew.start(texts[:3])()
enc = build_encoding(SPECS["o200k_base"])
crew.close()
lines = open(log).read().split()
print(orjson.dumps({
    "spread": spread == [len(enc.encode_ordinary(t)) for t in texts],
    "small": small == [len(enc.encode_ordinary(t)) for t in texts[:3]],
    "builds": lines.count("build"),
    "counting_pids": len({lines[i + 1] for i, w in enumerate(lines) if w == "count"}),
    "answered": crew.answered,
}).decode())
"""


def test_a_crew_builds_once_and_counts_a_large_batch_in_every_member(tmp_path: Path) -> None:
    doc = run_script(CREW, str(tmp_path / "log"))
    assert doc == {"spread": True, "small": True, "builds": 1, "counting_pids": 2, "answered": 3}


CREW_FAILURES = r"""
import os, sys, time, signal, orjson
from ctxc.tokens.prefork import Crew

def broken():
    raise RuntimeError("corrupt ranks")

# The others are never forked: the parent sees their pipes close and counts everything itself.
failed = Crew("o200k_base", 2, build=broken).start(["a", "b", "c"], spread=True)()

pids = sys.argv[1]

def slow():
    def count(texts):
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(60)
        return [0] * len(texts)
    return count

def counting():
    return open(pids).read().split() if os.path.exists(pids) else []

busy = Crew("o200k_base", 2, build=slow)
busy.start(["a" * 10, "b" * 10], spread=True)
deadline = time.time() + 30
while len(counting()) < 2 and time.time() < deadline:
    time.sleep(0.01)
busy.close()  # busy: SIGTERM to the first, which ends the other on its way out
members = [int(p) for p in counting()]
deadline = time.time() + 30
alive = members
while alive and time.time() < deadline:
    time.sleep(0.02)
    alive = []
    for pid in members:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
        except PermissionError:
            alive.append(pid)
    try:
        os.waitpid(busy.pid, os.WNOHANG)
    except ChildProcessError:
        pass
print(orjson.dumps({"failed": failed, "members": len(members), "alive": len(alive)}).decode())
"""


def test_a_failed_crew_answers_nothing_and_a_stopped_one_leaves_no_process(tmp_path: Path) -> None:
    doc = run_script(CREW_FAILURES, str(tmp_path / "pids"))
    assert doc == {"failed": None, "members": 2, "alive": 0}


def test_split_makes_contiguous_ranges_of_about_equal_length() -> None:
    assert split(["a" * 10, "b" * 10, "c"], 2) == [(0, 1), (1, 3)]
    assert split([], 3) == [(0, 0), (0, 0), (0, 0)]
    assert split(["x" * 100], 2) == [(0, 0), (0, 1)]


@given(st.lists(st.text(max_size=30)), st.integers(min_value=1, max_value=5))
def test_split_covers_every_text_once(texts: list[str], parts: int) -> None:
    ranges = split(texts, parts)
    assert len(ranges) == parts
    assert [i for a, b in ranges for i in range(a, b)] == list(range(len(texts)))
    total = sum(map(len, texts))
    longest = max(map(len, texts), default=0)
    # No range is more than one text away from its share.
    assert all(sum(map(len, texts[a:b])) <= total / parts + longest for a, b in ranges)


@pytest.mark.parametrize("command", [["analyze"], ["check", "--max-tokens", "2000"]])
def test_cli_counts_match_without_the_child(tmp_path: Path, command: list[str]) -> None:
    sample = SAMPLES / "claude-code.jsonl"
    outs = []
    for prebuild in ("1", "0"):
        done = subprocess.run(
            [sys.executable, "-m", "ctxc", *command, str(sample), "--format", "json", "--no-cache"],
            capture_output=True,
            timeout=120,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "CTXC_NO_PREBUILD": "0" if prebuild == "1" else "1",
                "CTXC_CACHE_DIR": str(tmp_path / "cache"),
            },
            check=False,
        )
        assert done.stdout, done.stderr.decode()
        outs.append((done.returncode, done.stdout))  # check exits non-zero over budget
    assert outs[0] == outs[1]
