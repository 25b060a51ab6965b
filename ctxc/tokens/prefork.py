"""Counting children: forked as the command starts, they build the tokenizer once and count.

Building tiktoken's o200k encoding costs 0.35 s, 0.25 s of it in a Rust constructor that holds the
GIL, so no thread of ctxc's can overlap it. So ``ctxc/__main__.py`` forks a child before ``ctxc.cli``
and typer are even imported (a tenth of a second of imports): the child builds the encoding on the
other core while this process starts, and then counts the batches this process sends it.

For a small input (:data:`PARTIAL_INPUT_BYTES`) even that build is more than needed: the child parses
the rank table while this process starts, then counts each batch with a partial encoding of the tokens
its texts can use (:mod:`ctxc.tokens.partial`), built in milliseconds once they arrive. A 100 KB
``analyze`` on a machine's first run took 0.57 s with the whole build, 0.37 s so (issue 2 asks for
under 600 ms).

A large input gets a crew: one child per core. The first builds the encoding and then forks the
others, which inherit what it built, so the encoding is built once, not once per counting process,
and early (0.35 s of one core of a 100 MB analyze, whose budget is the counting itself). Large
batches are split among the crew; small ones go to the first child. This process goes on parsing
while they count.

The crew is forked where it pays for itself: a command that counts (``analyze``, ``compact``,
``check``) with a bundled BPE encoding, one child for inputs under
:data:`~ctxc.tokens.PROCESS_MIN_BYTES` or on stdin, one per core above. Its argument scan is a guess
made before the command line is parsed: a wrong one costs a core for 0.35 s and nothing else, since
only a tokenizer of the same name ever uses the crew, and counts are identical whichever process makes
them. A library caller that counts a large input gets a crew from
:func:`~ctxc.tokens.tiktoken_backend.worker_processes`, forked then.

The children hold none of the parent's standard streams (a pipe reading ctxc's stdout sees its end
when ctxc exits), ignore Ctrl-C (the parent's to handle), and exit when the parent closes its end of
their request pipes, which a killed parent does too. The first child, stopped before it has answered,
may still be building (in Rust, deaf to signals): it is sent SIGTERM, which it acts on once back in
Python, removing any half-written copy of the rank table, and is not waited for; on its way out it
ends the others, which have nothing to clean up. Each child has one request in flight at a time: this
process reads a child's answer to its last batch before sending the next, so neither side can block
writing to the other. Only the thread that forked the crew talks to it. Linux only, with two or more
cores: a fork before any thread exists is safe there, and on one core the build would compete with
ctxc's start instead of overlapping it.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import pickle
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple, NoReturn

#: Commands that count tokens and default to o200k_base.
COUNTING_COMMANDS = frozenset({"analyze", "compact", "check"})
_BUNDLED = ("o200k_base", "cl100k_base")
_HEADER = 8
#: What a request pipe is asked to hold (the most Linux grants a user by default).
PIPE_BYTES = 1 << 20

#: The counting function a child uses: texts in, counts out.
Count = Callable[[Sequence[str]], list[int]]
#: Builds that function (in the first child, after the fork).
Builder = Callable[[], Count]


class Plan(NamedTuple):
    """The crew to fork for a command."""

    name: str  # the encoding
    size: int  # how many children
    #: Whether the child should wait for the texts and count them with partial encodings
    #: (:mod:`ctxc.tokens.partial`) rather than build the whole encoding at once: for inputs known to
    #: be small (:data:`PARTIAL_INPUT_BYTES`).
    partial: bool = False


#: Files up to this size in all are counted with partial encodings: finding the tokens of their texts
#: costs less than building the whole encoding, even though it can only start once the texts arrive.
#: Measured on corpus files (a machine's first run, medians of 5): at 300 KB a Claude Code log took
#: 433 ms so against 574 ms with the whole build, a Codex rollout 443 against 591; at 250 KB of a log
#: that is nearly all text the two are even (564 against 538 ms, 543 against 601); at 1 MB of such
#: text the whole build is faster (664 against 841 ms).
PARTIAL_INPUT_BYTES = 256 << 10


def plan(args: Sequence[str]) -> Plan | None:
    """The crew to fork for ``ctxc ARGS``: the encoding, how many children count with it and whether
    they use partial encodings; or None where a crew would not pay for itself.

    A scan, not a parse: any argument naming a regular file counts toward the input size (an existing
    ``-o`` target too, which only errs toward a larger crew). A folder to read means a batch, which
    sizes its own workers, as do ``--jobs`` over several files. Standard input is of unknown size.
    """
    from ctxc.system import cpu_count
    from ctxc.tokens import PROCESS_MIN_BYTES

    if not args or args[0] not in COUNTING_COMMANDS:
        return None
    name, size, inputs, jobs, stdin = "o200k_base", 0, 0, False, False
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
            stdin = True
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
    if name not in _BUNDLED or not inputs or (jobs and inputs > 1):
        return None
    if size < PROCESS_MIN_BYTES:
        return Plan(name, 1, partial=not stdin and size <= PARTIAL_INPUT_BYTES)
    return Plan(name, cpu_count()) if inputs == 1 else None  # several large files: a batch


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


def _count_with(name: str, path: Path | None, partial: bool = False) -> Count:
    """Build the counting function: the whole encoding now, or, with ``partial``, only the rank table
    now and a partial encoding for each batch (:mod:`ctxc.tokens.partial`) while those pay."""
    from ctxc.tokens import tiktoken_backend

    tiktoken_backend.defer_rank_saves = True  # written after the first answer (_after_first_answer)
    spec = tiktoken_backend.SPECS[name]
    if not partial:
        count = tiktoken_backend.counter_for(spec, path)
        return lambda texts: list(map(count, texts))
    tiktoken_backend.prepare_partial(spec, path)
    return lambda texts: list(map(tiktoken_backend.counter_for(spec, path, texts), texts))


def _after_first_answer() -> None:
    backend = sys.modules.get("ctxc.tokens.tiktoken_backend")
    if backend is not None:
        backend.save_pending_ranks()


def serve(
    requests: BinaryIO, answers: BinaryIO, count: Count | None, after_first: Callable[[], None] | None = None
) -> None:
    """A child's loop: answer each batch of texts with its counts until end of input.

    Without a counting function (the build failed) every answer is None: the parent then counts
    itself and raises the real error. ``after_first`` runs once the first answer is sent (or at the
    end, if none was asked for): work that should not delay it.
    """
    pending = after_first
    while (frame := _read_frame(requests)) is not None:
        texts = pickle.loads(frame)
        _write_frame(answers, None if count is None else count(texts))
        if pending is not None:
            pending()
            pending = None
    if pending is not None:
        pending()


#: One child's pipe ends: (requests read, requests write, answers read, answers write).
_Pipes = tuple[int, int, int, int]


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _serve_fds(
    requests_fd: int, answers_fd: int, count: Count | None, after_first: Callable[[], None] | None = None
) -> None:
    with open(requests_fd, "rb") as requests, open(answers_fd, "wb") as answers:
        serve(requests, answers, count, after_first)


def _first_child(pipes: Sequence[_Pipes], build: Builder) -> NoReturn:
    """The first child: build, fork the rest of the crew from the built state, serve its own pipes."""
    code = 0
    others: list[int] = []
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _exit_on_signal)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        if devnull > 2:  # it is one of them when the parent ran with a standard stream closed
            os.close(devnull)
        _close([fd for p in pipes for fd in (p[1], p[2])])  # the parent's ends
        try:
            count: Count | None = build()
        except Exception:
            count = None
        if count is not None:
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the others
            for k in range(1, len(pipes)):
                with contextlib.suppress(OSError):  # no process: the parent counts that share itself
                    pid = os.fork()
                    if pid == 0:
                        _other_child(pipes, k, count)
                    others.append(pid)
        _close([fd for p in pipes[1:] for fd in (p[0], p[3])])  # theirs now (or nobody's: EOF)
        _serve_fds(pipes[0][0], pipes[0][3], count, _after_first_answer)
    except BaseException:
        code = 1
    finally:
        for pid in others:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        os._exit(code)


def _other_child(pipes: Sequence[_Pipes], k: int, count: Count) -> NoReturn:
    code = 0
    try:
        # Nothing to clean up here (the rank table was written by the first child): die at once, even
        # in the middle of a long text.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _close([fd for j, p in enumerate(pipes) if j != k for fd in (p[0], p[3])])
        _serve_fds(pipes[k][0], pipes[k][3], count)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


class _Member:
    """This process's end of one child's pipes."""

    def __init__(self, requests_fd: int, answers_fd: int) -> None:
        self.requests: BinaryIO | None = open(requests_fd, "wb")  # noqa: SIM115 - closed by close()
        self.answers: BinaryIO | None = open(answers_fd, "rb")  # noqa: SIM115
        self.sent = 0  # batches sent
        self.read = 0  # answers read
        self._answered: dict[int, list[int] | None] = {}

    @property
    def idle(self) -> bool:
        return self.read == self.sent

    def start(self, texts: Sequence[str]) -> Callable[[], list[int] | None]:
        """Send ``texts``; the returned function waits for their counts, or None if the child failed."""
        self._read_through(self.sent)  # the previous answer first: one request in flight at a time
        ticket = self.sent
        try:
            if self.requests is None:
                raise OSError("closed")
            # Blocks while the child builds and the batch fills the pipe.
            _write_frame(self.requests, list(texts))
        except OSError:
            self.close()
            return lambda: None
        self.sent += 1

        def collect() -> list[int] | None:
            self._read_through(ticket + 1)
            return self._answered.pop(ticket, None)

        return collect

    def _read_through(self, tickets: int) -> None:
        """Read answers until ``tickets`` of them are in (a dead child answers None for the rest)."""
        while self.read < tickets:
            frame = _read_frame(self.answers) if self.answers is not None else None
            if frame is None:
                self.close()
                self._answered.update(dict.fromkeys(range(self.read, tickets)))
                self.read = tickets
                break
            self._answered[self.read] = pickle.loads(frame)
            self.read += 1

    def close(self) -> None:
        for stream in (self.requests, self.answers):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.requests = self.answers = None


class Crew:
    """This process's end of ``size`` children counting with encoding ``name`` (see the module
    docstring)."""

    def __init__(
        self,
        name: str,
        size: int = 1,
        build: Builder | None = None,
        path: Path | None = None,
        *,
        partial: bool = False,
    ) -> None:
        """Fork the first child. Raises OSError if there is no pipe or process to be had.

        ``build`` makes the counting function in the child (by default, :func:`_count_with` with
        ``partial``).
        """
        self.name = name
        self.path = path
        self.size = max(1, size)
        self.owner = (os.getpid(), threading.get_ident())
        pipes: list[_Pipes] = []
        try:
            for _ in range(self.size):
                requests_r, requests_w = os.pipe()
                try:
                    answers_r, answers_w = os.pipe()
                except OSError:
                    _close((requests_r, requests_w))
                    raise
                pipes.append((requests_r, requests_w, answers_r, answers_w))
                _widen(requests_w)
        except OSError:
            _close([fd for p in pipes for fd in p])
            raise
        from ctxc.system import interrupts_held

        try:
            with interrupts_held():
                pid = os.fork()
        except OSError:
            _close([fd for p in pipes for fd in p])
            raise
        if pid == 0:
            _first_child(pipes, build or (lambda: _count_with(name, path, partial)))
        _close([fd for p in pipes for fd in (p[0], p[3])])  # the children's ends
        self.pid = pid
        self._members = [_Member(p[1], p[2]) for p in pipes]
        #: Seconds spent waiting for batches sent to the first child (:meth:`start` without ``spread``)
        #: once it had answered, so not for its build: the rent that tells a caller when building its
        #: own encoding is cheaper.
        self.waited = 0.0

    @property
    def usable(self) -> bool:
        """Whether the caller may send work: the crew lives and this is the process and thread that
        forked it (a batch worker forked later inherits the object, not the right to use it)."""
        return self._members[0].requests is not None and (os.getpid(), threading.get_ident()) == self.owner

    @property
    def sent(self) -> int:
        return sum(m.sent for m in self._members)

    @property
    def answered(self) -> int:
        return sum(m.read for m in self._members)

    def start(self, texts: Sequence[str], *, spread: bool = False) -> Callable[[], list[int] | None]:
        """Send ``texts``; the returned function waits for their counts, or None if a child failed.

        ``spread`` splits them among the crew, for a large batch; otherwise they go to the first child.
        """
        members = [m for m in self._members if m.requests is not None]
        if not spread or len(members) < 2 or len(texts) < 2:
            return self._timed(self._members[0], texts)
        parts = split(texts, len(members))
        pending = [m.start(texts[a:b]) for m, (a, b) in zip(members, parts, strict=True) if b > a]

        def collect() -> list[int] | None:
            out: list[int] = []
            failed = False
            for wait in pending:  # every part, even after a failure: each reply must be read
                counts = wait()
                failed = failed or counts is None
                out.extend(counts or ())
            return None if failed else out

        return collect

    def _timed(self, member: _Member, texts: Sequence[str]) -> Callable[[], list[int] | None]:
        """``member.start(texts)``, the time spent waiting in it and for its answer added to
        :attr:`waited` unless the member has not answered yet (it may still be building)."""
        if not member.read:
            return member.start(texts)
        started = time.perf_counter()
        pending = member.start(texts)
        self.waited += time.perf_counter() - started

        def collect() -> list[int] | None:
            started = time.perf_counter()
            try:
                return pending()
            finally:
                self.waited += time.perf_counter() - started

        return collect

    def close(self) -> None:
        """Stop the crew and close the pipes.

        A first child that has answered everything sent waits for requests: the closed pipe ends it
        (and it ends the others), and it is reaped. Any other may be deep in the build or a batch: it
        gets SIGTERM and is not waited for.
        """
        if os.getpid() != self.owner[0] or all(m.requests is None for m in self._members):
            return
        first = self._members[0]
        quiet = first.read > 0 and first.idle
        for member in self._members:
            member.close()
        with contextlib.suppress(OSError):
            if quiet:
                os.waitpid(self.pid, 0)
            else:
                os.kill(self.pid, signal.SIGTERM)
                os.waitpid(self.pid, os.WNOHANG)


def split(texts: Sequence[str], parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges of ``texts`` (some maybe empty) of about equal total length."""
    total = sum(map(len, texts))
    bounds = [0]
    before = 0  # characters before text i
    for i, text in enumerate(texts):
        # A range ends before the text whose middle lies past the range's share of the total.
        while len(bounds) < parts and (2 * before + len(text)) * parts >= 2 * total * len(bounds):
            bounds.append(i)
        before += len(text)
    bounds += [len(texts)] * (parts + 1 - len(bounds))
    return list(itertools.pairwise(bounds))


def _widen(fd: int) -> None:
    """Let a request pipe hold a whole batch (1 MiB rather than 64 KiB), so that sending one to a
    child still building does not stop this process from parsing the next. Linux only; best effort."""
    import fcntl

    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setpipe is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, setpipe, PIPE_BYTES)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through write_atomic, which removes its temp file


_current: list[Crew] = []


def start(name: str, size: int, path: Path | None = None, *, partial: bool = False) -> Crew:
    """Fork a crew and make it the one :func:`crew_for` finds (stopping any other). Raises OSError."""
    stop()
    crew = Crew(name, size, path=path, partial=partial)
    _current.append(crew)
    return crew


def start_for(args: Sequence[str]) -> None:
    """Fork the crew for ``ctxc ARGS`` when :func:`plan` says it pays; ``CTXC_NO_PREBUILD=1`` never.

    Only an optimisation: where no process can be forked, ctxc goes on without one.
    """
    from ctxc.system import cpu_count, env_flag

    if sys.platform != "linux" or _current or env_flag("CTXC_NO_PREBUILD") or cpu_count() < 2:
        return
    if threading.active_count() > 1:  # a fork copies any lock another thread holds
        return
    planned = plan(args)
    if planned is None:
        return
    try:
        start(planned.name, planned.size, partial=planned.partial)
    except OSError:
        return
    atexit.register(stop)


def crew_for(name: str, path: Path | None = None) -> Crew | None:
    """The crew counting with ``name`` (and rank file ``path``), if there is one the caller may use."""
    if _current and _current[0].name == name and _current[0].path == path and _current[0].usable:
        return _current[0]
    return None


def stop() -> None:
    """Stop the crew, if any: this process counts on its own from now on."""
    while _current:
        _current.pop().close()
