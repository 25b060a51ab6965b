"""The pool of counting processes started with the command (ctxc.tokens.workers).

Pools are started in fresh interpreters: a test session runs threads (the fake API server), and a fork
copies whatever lock one of them holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from conftest import ROOT, SAMPLES
from hypothesis import given
from hypothesis import strategies as st

from ctxc.system import cpu_count
from ctxc.tokens.workers import PARTIAL_INPUT_BYTES, Plan, plan, split


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


def gone(pids: list[int], seconds: float = 30.0) -> bool:
    """Whether every process in ``pids`` has ended (or become a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_plan_starts_a_pool_for_inputs_of_counting_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty analysis cache: a sample another test analyzed would be served from it, with no pool.
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    small = SAMPLES / "chat-anthropic.jsonl"
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        f.truncate(5 << 20)
    medium = tmp_path / "medium.jsonl"
    with medium.open("wb") as f:
        f.truncate(PARTIAL_INPUT_BYTES + 1)
    # A small file: one worker, which parses the rank table and counts with partial encodings.
    one = Plan("o200k_base", 1, partial=True)
    assert plan(["analyze", str(small)]) == one
    assert plan(["compact", str(small), "--target", "0.5"]) == one
    assert plan(["check", "--tokenizer", "cl100k_base", str(small)]) == ("cl100k_base", 1, True)
    assert plan(["compact", str(small), "--archive", str(tmp_path), "--out-dir", str(tmp_path)]) == one
    assert plan(["analyze", "-j", "2", str(small)]) == one
    # Standard input is of unknown size, usually a pipe of one log; a medium file is too large to
    # wait for its texts: the worker builds the whole encoding at once.
    assert plan(["analyze", "--tokenizer=cl100k_base", "-"]) == ("cl100k_base", 1, False)
    assert plan(["analyze", "-"]) == ("o200k_base", 1, False)
    assert plan(["analyze", str(small), "-"]) == ("o200k_base", 1, False)
    assert plan(["analyze", str(medium)]) == ("o200k_base", 1, False)
    # A large input: a worker per core.
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
import orjson
from ctxc.tokens import workers
from ctxc.tokens.tiktoken_backend import SPECS, build_encoding

texts = ["hello world", "안녕하세요, 세계", "<|endoftext|> is ordinary text here", "", "x" * 5000,
         "lone \ud800 surrogate"]
enc = build_encoding(SPECS["o200k_base"])
doc = {"expected": [len(enc.encode_ordinary(t)) for t in texts]}
for size, partial in ((1, True), (1, False), (2, False)):
    pool = workers.CountingPool("o200k_base", size, partial=partial)
    first = pool.start(texts[:2])
    second = pool.start(texts[2:])  # sent before the first answer is read
    spread = pool.start(texts * 40)  # large enough to be split among the workers
    doc[f"{size}-{partial}"] = [(first() or []) + (second() or []), spread() == doc["expected"] * 40]
    pids = pool.pids  # once answered: a twin is forked when the first worker has built
    pool.close()
    doc[f"{size}-{partial}-pids"] = pids
print(orjson.dumps(doc).decode())
"""


def test_workers_count_exactly_what_tiktoken_does_and_end_when_closed() -> None:
    doc = run_script(COUNTS)
    for key in ("1-True", "1-False", "2-False"):
        assert doc[key] == [doc["expected"], True], key
        assert gone(doc[f"{key}-pids"])  # type: ignore[arg-type]
    assert len(doc["2-False-pids"]) == 2  # type: ignore[arg-type]


UTF8_COPIES = r"""
import sys, orjson
from ctxc.tokens import workers

texts = ["plain ascii " * 100, "한국어 주석이 있는 코드 " * 100, "x = 1  # 계산 " * 100]
before = [sys.getsizeof(t) for t in texts]
pool = workers.CountingPool("o200k_base", 1)
counts = pool.start(texts)()
pool.close()
print(orjson.dumps({"before": before, "after": [sys.getsizeof(t) for t in texts], "counts": counts}).decode())
"""


def test_texts_sent_to_the_workers_keep_no_utf8_copy() -> None:
    """Pickling a non-ASCII str caches its UTF-8 form in the object, for as long as the parent keeps
    the text (every message's, in a compaction): what is sent must not be the string itself."""
    doc = run_script(UTF8_COPIES)
    assert doc["after"] == doc["before"]
    assert all(isinstance(n, int) and n > 0 for n in doc["counts"])  # type: ignore[union-attr]


FAILURES = r"""
import os, sys, orjson
from pathlib import Path
from ctxc.tokens import workers

corrupt = Path(sys.argv[1])
failed = workers.CountingPool("o200k_base", 1, corrupt).start(["a"])()  # the build fails

pool = workers.CountingPool("o200k_base", 1)
pool.start(["warm"])()
pid = pool.pids[0]
os.kill(pid, 9)  # dies between batches
died = pool.start(["a"])()
later = [pool.start(["b"])() for _ in range(3)]  # the pool is broken now: each is None at once

# Another process (a batch worker forked later) inherits the object but may not use it.
other = workers.CountingPool("o200k_base", 1)
real_getpid = os.getpid
os.getpid = lambda: real_getpid() + 1
usable_elsewhere = other.usable
other.close()  # not the owner: leaves the workers alone
os.getpid = real_getpid
answer = other.start(["a b", "c"])()
other.close()
print(orjson.dumps({"failed": failed, "died": died, "later": later,
                    "usable_elsewhere": usable_elsewhere, "answer": answer}).decode())
"""


def test_failed_build_dead_worker_and_foreign_process(tmp_path: Path) -> None:
    corrupt = tmp_path / "o200k_base.tiktoken"
    corrupt.write_bytes(b"not a rank file\n")
    doc = run_script(FAILURES, str(corrupt))
    assert doc["failed"] is None  # the caller then builds itself and raises the real error
    assert doc["died"] is None
    assert doc["later"] == [None, None, None]
    assert doc["usable_elsewhere"] is False
    assert doc["answer"] == [2, 1]


STOPPED = r"""
import os, sys, time, orjson
from ctxc.tokens import workers, tiktoken_backend as backend

marker = sys.argv[1]

def slow_build(spec, path, texts=None):
    # Stands for the build: the worker is stopped while it runs, and ends at once.
    open(marker, "w").close()
    time.sleep(600)

backend.counter_for = slow_build
pool = workers.CountingPool("o200k_base", 1)
deadline = time.monotonic() + 60
while not os.path.exists(marker) and time.monotonic() < deadline:
    time.sleep(0.01)
pid = pool.pids[0]
pool.close()
deadline = time.monotonic() + 30
while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
    time.sleep(0.02)
print(orjson.dumps({"ended": not os.path.exists(f"/proc/{pid}")}).decode())
"""


def test_a_worker_stopped_mid_build_ends_at_once(tmp_path: Path) -> None:
    # A run served from the scan cache leaves no build running after it, and does not wait for one.
    doc = run_script(STOPPED, str(tmp_path / "building"))
    assert doc == {"ended": True}


KILLED = r"""
import os, sys, signal
from ctxc.tokens import workers

pool = workers.CountingPool("o200k_base", 2)
pool.start(["warm"])()
print(" ".join(map(str, pool.pids)), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_workers_end_when_their_parent_is_killed() -> None:
    # Their output is closed too: a pipe reading it ends when the parent dies (this would time out).
    done = subprocess.run(
        [sys.executable, "-c", KILLED],
        capture_output=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == -signal.SIGKILL
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2
    assert gone(pids)


ONE_BUILD = r"""
import os, sys, orjson
from ctxc.tokens import workers, tiktoken_backend as backend

log = sys.argv[1]
real_build = backend.build_encoding

def build(*args, **kwargs):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    return real_build(*args, **kwargs)

backend.build_encoding = build
pool = workers.CountingPool("o200k_base", 2)
counts = pool.start(["hello world"] * 20_000)()  # split between the two workers
pids = pool.pids
twin_killed = pool.start(["warm"])()
os.kill(pids[1], 9)  # a twin dies: its parent ends too, and the pool reports it broken
broken = [pool.start(["a b"] * 20_000)() for _ in range(3)]
pool.close()
print(orjson.dumps({"builds": len(open(log).read().split()), "counts": counts == [2] * 20_000,
                    "pids": len(set(pids)), "broken": broken, "ended": pids}).decode())
"""


def test_the_second_worker_is_forked_built_and_ends_with_the_first(tmp_path: Path) -> None:
    # The pool's worker builds the encoding once; the worker counting beside it is a copy of it.
    doc = run_script(ONE_BUILD, str(tmp_path / "builds"))
    assert doc["builds"] == 1
    assert doc["counts"] is True
    assert doc["pids"] == 2
    assert doc["broken"] == [None, None, None]  # answered by this process then, not hung
    assert gone(doc["ended"])  # type: ignore[arg-type]


GC_IN_WORKER = r"""
import gc, orjson
from ctxc.system import gc_paused
from ctxc.tokens import workers

with gc_paused():  # as ctxc/__main__.py starts its pool
    pool = workers.CountingPool("o200k_base", 1)
worker = pool._pool.submit(gc.isenabled).result(timeout=60)
pool.close()
print(orjson.dumps({"worker": worker, "here": gc.isenabled()}).decode())
"""


def test_a_worker_forked_while_the_collector_is_paused_turns_it_back_on() -> None:
    assert run_script(GC_IN_WORKER) == {"worker": True, "here": True}


NO_FORK = r"""
import os, sys, orjson
from ctxc.tokens import workers, tiktoken_backend as backend

def refuse():
    raise BlockingIOError(11, "Resource temporarily unavailable")

os.fork = refuse
workers.start_for(["analyze", sys.argv[1]])
tok = backend.TiktokenTokenizer("o200k_base")
print(orjson.dumps({"pool": bool(backend.pools), "count": tok.count("hello world")}).decode())
"""


def test_no_pool_when_no_process_can_be_forked() -> None:
    doc = run_script(NO_FORK, str(SAMPLES / "chat-anthropic.jsonl"))
    assert doc == {"pool": False, "count": 2}


USED = r"""
import sys, orjson
from ctxc import __main__ as entry
from ctxc.tokens import workers, tiktoken_backend as backend

sent = []
started = []
real_start, real_init = workers.CountingPool.start, workers.CountingPool.__init__

def init(self, *args, **kwargs):
    started.append(args[1])
    real_init(self, *args, **kwargs)

def start(self, texts):
    sent.append(len(texts))
    return real_start(self, texts)

workers.CountingPool.__init__ = init
workers.CountingPool.start = start
sys.argv = ["ctxc", "analyze", sys.argv[1], "--format", "json", "--no-cache"]
try:
    entry.main()
except SystemExit:
    pass
print()
print(orjson.dumps({"sent": len(sent), "started": started, "built_here": bool(backend._encodings)}).decode())
"""


def test_cli_sends_a_small_files_counts_to_the_worker(tmp_path: Path) -> None:
    doc = run_script(USED, str(SAMPLES / "claude-code.jsonl"), env={"CTXC_CACHE_DIR": str(tmp_path)})
    assert doc == {"sent": doc["sent"], "started": [1], "built_here": False}
    assert doc["sent"] >= 1  # type: ignore[operator]
    # The parsed rank table's copy, written whole by the worker.
    assert [p.suffix for p in (tmp_path / "bpe").iterdir()] == [".marshal"]


def test_cli_counts_a_large_file_with_the_pool_it_started(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        n = 0
        while f.tell() < 5 << 20:  # distinct texts, so batches are large enough to be shared out
            role = ("user", "assistant")[n % 2]
            text = f"message {n}: " + " ".join(f"word{n * 7 + i}" for i in range(150))
            f.write(orjson.dumps({"role": role, "content": text}) + b"\n")
            n += 1
    doc = run_script(USED, str(big), env={"CTXC_CACHE_DIR": str(tmp_path / "cache")})
    # A worker per core, started with the command and used by analyze (no second pool started).
    assert doc["started"] == [cpu_count()]
    assert doc["sent"] >= 1  # type: ignore[operator]
    assert doc["built_here"] is False


TOKENIZER = r"""
import sys, orjson
from ctxc.tokens import workers, tiktoken_backend as backend

workers.start_for(["analyze", sys.argv[1]])
pool = backend.pool_for("o200k_base")
tok = backend.TiktokenTokenizer("o200k_base")
texts = [f"line {i} of a log, 한국어 {i * 7}" for i in range(300)]
counts = tok.count_batch(texts)
sent_to_pool = not backend._encodings and pool.answered
# Waiting for the pool past the price of a build: this process counts here.
pool.waited = backend.BUILD_SECONDS
again = tok.count_batch(texts)
print(orjson.dumps({
    "same": counts == again == [tok.count(t) for t in texts],
    "sent_to_pool": sent_to_pool,
    "counted_here": bool(backend._encodings),
}).decode())
workers.stop()
"""


def test_tokenizer_counts_through_the_pool_until_waiting_costs_a_build(tmp_path: Path) -> None:
    doc = run_script(TOKENIZER, str(SAMPLES / "chat-anthropic.jsonl"), env={"CTXC_CACHE_DIR": str(tmp_path)})
    assert doc == {"same": True, "sent_to_pool": True, "counted_here": True}


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
def test_cli_counts_match_without_the_pool(tmp_path: Path, command: list[str]) -> None:
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


def test_no_worker_for_an_analyze_the_analysis_cache_will_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Starting workers costs a cached run most of its time; the cache notes which files it holds.
    from ctxc import scancache
    from ctxc.analysis import analyze

    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CTXC_NO_CACHE", raising=False)
    monkeypatch.setattr(scancache, "_STILL_NS", 0)  # remember the file at once (normally after 2 s)
    log = tmp_path / "log.jsonl"
    log.write_bytes((SAMPLES / "chat-anthropic.jsonl").read_bytes())
    assert plan(["analyze", str(log)]) == Plan("o200k_base", 1, partial=True)
    analyze(log)
    assert plan(["analyze", str(log)]) is None
    # Not when the cache is not read, for other commands, or once the file changed.
    assert plan(["analyze", "--no-cache", str(log)]) is not None
    assert plan(["compact", str(log)]) is not None
    monkeypatch.setenv("CTXC_NO_CACHE", "1")
    assert plan(["analyze", str(log)]) is not None
    monkeypatch.delenv("CTXC_NO_CACHE")
    log.write_bytes(log.read_bytes() + b"\n")
    assert plan(["analyze", str(log)]) is not None
