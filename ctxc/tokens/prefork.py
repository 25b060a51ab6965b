"""Build the tokenizer in a forked child while the command line is still starting.

A ``ctxc analyze`` of a 100 KB file spends about 0.25 s starting (interpreter, typer, ctxc's modules)
and parsing, and 0.35 s building tiktoken's o200k encoding, 0.25 s of that in the Rust constructor with
the GIL held, so a thread cannot overlap it. A child forked before ``ctxc.cli`` is even imported builds
the encoding on the other core while this process starts, and then counts the batches this process
sends it: the build leaves the critical path (issue 2 asks for a 100 KB analyze under 600 ms).

The child is forked only where it pays for itself: a command that counts (``analyze``, ``compact``,
``check``) with a bundled BPE encoding, on input files totalling under
:data:`~ctxc.tokens.PROCESS_MIN_BYTES` (larger inputs get worker processes of their own, which
:func:`~ctxc.tokens.tiktoken_backend.worker_processes` starts once it knows the size) or on stdin.
Its argument scan is a guess made before the command line is parsed: a wrong one costs a core for
0.35 s and nothing else, since only a tokenizer of the same name ever uses the child, and counts are
identical whichever process makes them.

The child holds none of the parent's standard streams (a pipe reading ctxc's stdout sees its end when
ctxc exits), ignores Ctrl-C (the parent's to handle), and exits when the parent closes its end of the
request pipe, which a killed parent does too. Stopped before it has answered, it may still be building
(in Rust, deaf to signals): it is sent SIGTERM, which it acts on once back in Python, removing any
half-written copy of the rank table, and is not waited for. One request is in flight at a time: this
process reads the answer to the last batch before sending the next, so neither side can block writing
to the other. Only the thread that forked the child talks to it. Linux only, with two or more cores:
a fork this early, before any thread exists, is safe there, and on one core the build would compete
with ctxc's start instead of overlapping it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

#: Commands that count tokens and default to o200k_base.
COUNTING_COMMANDS = frozenset({"analyze", "compact", "check"})
_BUNDLED = ("o200k_base", "cl100k_base")
_HEADER = 8


def plan(args: Sequence[str]) -> str | None:
    """The encoding to build early for ``ctxc ARGS``, or None where a child would not pay for itself.

    A scan, not a parse: any argument naming a regular file counts toward the input size (an existing
    ``-o`` target too, which only errs toward no child). A folder to read means a batch, which sizes
    its own workers, as do ``--jobs`` over several files.
    """
    from ctxc.tokens import PROCESS_MIN_BYTES

    if not args or args[0] not in COUNTING_COMMANDS:
        return None
    name, size, inputs, jobs = "o200k_base", 0, 0, False
    rest = iter(args[1:])
    for arg in rest:
        if arg in ("--help", "-h"):
            return None
        if arg == "--tokenizer":
            name = next(rest, "")
        elif arg.startswith("--tokenizer="):
            name = arg.partition("=")[2]
        elif arg in ("--archive", "--out-dir"):  # folders written, not read
            next(rest, "")
        elif arg in ("--jobs", "-j") or arg.startswith("--jobs="):
            jobs = True
        elif arg == "-":
            inputs += 1
        elif not arg.startswith("-"):
            try:
                st = os.stat(arg)
            except (OSError, ValueError):
                continue
            if stat.S_ISDIR(st.st_mode):
                return None
            if stat.S_ISREG(st.st_mode):
                size += st.st_size
                inputs += 1
    if name not in _BUNDLED or not inputs or size >= PROCESS_MIN_BYTES or (jobs and inputs > 1):
        return None
    return name


def _read_frame(stream: BinaryIO) -> bytes | None:
    header = stream.read(_HEADER)
    if len(header) < _HEADER:
        return None
    size = int.from_bytes(header, "little")
    payload = stream.read(size)
    return payload if len(payload) == size else None


def _write_frame(stream: BinaryIO, obj: object) -> None:
    payload = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    stream.write(len(payload).to_bytes(_HEADER, "little") + payload)
    stream.flush()


#: Builds the child's counting function (in the child, after the fork).
Builder = Callable[[], Callable[[Sequence[str]], list[int]]]


def _count_with(name: str) -> Callable[[Sequence[str]], list[int]]:
    from ctxc.tokens.tiktoken_backend import SPECS, _counter

    count = _counter(SPECS[name], None)
    return lambda texts: list(map(count, texts))


def serve(requests: BinaryIO, answers: BinaryIO, build: Builder) -> None:
    """The child's loop: build, then answer each batch of texts with its counts until end of input.

    If the build fails every answer is None: the parent then counts itself and raises the real error.
    """
    try:
        count: Callable[[Sequence[str]], list[int]] | None = build()
    except Exception:
        count = None
    while (frame := _read_frame(requests)) is not None:
        texts = pickle.loads(frame)
        _write_frame(answers, None if count is None else count(texts))


class Prebuilt:
    """This process's end of a child counting with encoding ``name`` (see the module docstring)."""

    def __init__(self, name: str, build: Builder | None = None) -> None:
        """Fork the child. Raises OSError if there is no pipe or process to be had."""
        self.name = name
        self.owner = (os.getpid(), threading.get_ident())
        requests_r, requests_w = os.pipe()
        try:
            answers_r, answers_w = os.pipe()
        except OSError:
            os.close(requests_r)
            os.close(requests_w)
            raise
        from ctxc.system import interrupts_held

        try:
            with interrupts_held():
                pid = os.fork()
        except OSError:
            for fd in (requests_r, requests_w, answers_r, answers_w):
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, _exit_on_signal)
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.close(requests_w)
                os.close(answers_r)
                with open(requests_r, "rb") as requests, open(answers_w, "wb") as answers:
                    serve(requests, answers, build or (lambda: _count_with(name)))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(requests_r)
        os.close(answers_w)
        self.pid = pid
        self._requests: BinaryIO | None = open(requests_w, "wb")  # noqa: SIM115 - closed by close()
        self._answers: BinaryIO | None = open(answers_r, "rb")  # noqa: SIM115
        self._sent = 0  # batches sent
        self._read = 0  # answers read
        self._answered: dict[int, list[int] | None] = {}
        #: Seconds this process spent waiting on the child once it had answered a first batch: what
        #: sending work costs. Waiting for the build is not counted; building here would cost more.
        self.waited = 0.0

    @property
    def usable(self) -> bool:
        """Whether the caller may send work: the child lives and this is the process and thread that
        forked it (a batch worker forked later inherits the object, not the right to use it)."""
        return self._requests is not None and (os.getpid(), threading.get_ident()) == self.owner

    def start(self, texts: Sequence[str]) -> Callable[[], list[int] | None]:
        """Send ``texts``; the returned function waits for their counts, or None if the child failed."""
        self._read_through(self._sent)  # the previous answer first: one request in flight at a time
        ticket = self._sent
        try:
            if self._requests is None:
                raise OSError("closed")
            # Blocks while the child is still building and the batch is larger than the pipe holds.
            with self._waiting():
                _write_frame(self._requests, list(texts))
        except OSError:
            self.close()
            return lambda: None
        self._sent += 1

        def collect() -> list[int] | None:
            self._read_through(ticket + 1)
            return self._answered.pop(ticket, None)

        return collect

    def _read_through(self, tickets: int) -> None:
        """Read answers until ``tickets`` of them are in (a dead child answers None for the rest)."""
        with self._waiting():
            while self._read < tickets:
                frame = _read_frame(self._answers) if self._answers is not None else None
                if frame is None:
                    self.close()
                    self._answered.update(dict.fromkeys(range(self._read, tickets)))
                    self._read = tickets
                    break
                self._answered[self._read] = pickle.loads(frame)
                self._read += 1

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        """Add the time inside to :attr:`waited`, unless the child had not answered yet (its build)."""
        started, built = time.perf_counter(), self._read > 0
        try:
            yield
        finally:
            if built:
                self.waited += time.perf_counter() - started

    def close(self) -> None:
        """Stop the child and close the pipes.

        A child that has answered everything sent waits for requests: the closed pipe ends it, and it
        is reaped. Any other may be deep in the build or a batch: it gets SIGTERM and is not waited for.
        """
        if os.getpid() != self.owner[0] or self._requests is None:
            return
        for stream in (self._requests, self._answers):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._requests = self._answers = None
        with contextlib.suppress(OSError):
            if self._read and self._read == self._sent:
                os.waitpid(self.pid, 0)
            else:
                os.kill(self.pid, signal.SIGTERM)
                os.waitpid(self.pid, os.WNOHANG)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through write_atomic, which removes its temp file


_current: list[Prebuilt] = []


def start_for(args: Sequence[str]) -> None:
    """Fork the child for ``ctxc ARGS`` when :func:`plan` says it pays; ``CTXC_NO_PREBUILD=1`` never.

    Only an optimisation: where no process can be forked, ctxc goes on without one.
    """
    from ctxc.system import cpu_count, env_flag

    if sys.platform != "linux" or _current or env_flag("CTXC_NO_PREBUILD") or cpu_count() < 2:
        return
    if threading.active_count() > 1:  # a fork copies any lock another thread holds
        return
    name = plan(args)
    if name is None:
        return
    try:
        child = Prebuilt(name)
    except OSError:
        return
    _current.append(child)
    atexit.register(stop)


def child_for(name: str) -> Prebuilt | None:
    """The child counting with ``name``, if there is one the caller may use."""
    if _current and _current[0].name == name and _current[0].usable:
        return _current[0]
    return None


def stop() -> None:
    """Stop the child, if any: this process counts on its own from now on."""
    while _current:
        _current.pop().close()
