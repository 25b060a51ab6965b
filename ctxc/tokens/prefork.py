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
:func:`worker_processes`, forked then.

The children hold none of the parent's standard streams (a pipe reading ctxc's stdout sees its end
when ctxc exits), ignore Ctrl-C (the parent's to handle), and exit when the parent closes its end of
their request pipes, which a killed parent does too. The first child, stopped before it has answered,
may still be building: it is sent SIGTERM and is not waited for. A build writes nothing, so a child
stopped while building ends at once; later it unwinds, removing any half-written copy of the rank
table, and on its way out ends the others, which have nothing to clean up.

Batches wait in an outbox in this process until a child has room: up to two requests each, the one
it counts and the next, already in its pipe. So this process never blocks while a child builds (it
goes on parsing), and a child done with a batch finds the next without waiting for this process to
come back from parsing. Requests are written without blocking; the rest of one the pipe does not
take yet, and the answers, are seen to whenever this process starts a batch or waits for one. A
child writes its answer whole and at once, so neither side can block writing to the other. Only the
thread that forked the crew talks to it. Linux only, with two or more
cores: a fork before any thread exists is safe there, and on one core the build would compete with
ctxc's start instead of overlapping it.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import pickle
import select
import signal
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple, NoReturn

from ctxc.tokens import tiktoken_backend
from ctxc.tokens.tiktoken_backend import split

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
    from ctxc.tokens.base import PROCESS_MIN_BYTES

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


def _frame(obj: object) -> bytes:
    """What goes down a pipe, either way: ``obj`` pickled, after its length."""
    payload = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    return len(payload).to_bytes(_HEADER, "little") + payload


def _read_frame(read: Callable[[int], bytes]) -> bytes | None:
    """The payload of the next frame, read with ``read``; None at the end of the pipe, after a torn
    frame or on a read error (the other side is gone)."""
    header = _read_exact(read, _HEADER)
    return None if header is None else _read_exact(read, int.from_bytes(header, "little"))


def _read_exact(read: Callable[[int], bytes], size: int) -> bytes | None:
    parts: list[bytes] = []
    while size > 0:
        try:
            part = read(size)
        except OSError:
            return None
        if not part:
            return None
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _count_with(name: str, path: Path | None, partial: bool = False) -> Count:
    """Build the counting function: the whole encoding now, or, with ``partial``, only the rank table
    now and a partial encoding for each batch (:mod:`ctxc.tokens.partial`) while those pay."""
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
    while (frame := _read_frame(requests.read)) is not None:
        texts = pickle.loads(frame)
        answers.write(_frame(None if count is None else count(texts)))
        answers.flush()
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
        # The build writes nothing (the rank table's copy is written after the first answer), so a
        # child stopped while building ends at once, even deep in tiktoken's Rust constructor, rather
        # than finish a build nobody will use on a core the next command needs (after a run served
        # from the scan cache, say).
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
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
        signal.signal(signal.SIGTERM, _exit_on_signal)  # from here on it may write that copy: unwind
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
    """This process's end of one child's pipes.

    Requests are written without blocking: what the pipe does not take yet waits in :attr:`unsent` and
    goes out as the child reads (:meth:`Crew._pump`). Answers come back in the order of the requests.
    """

    def __init__(self, requests_fd: int, answers_fd: int) -> None:
        os.set_blocking(requests_fd, False)
        self.requests: int | None = requests_fd
        self.answers: int | None = answers_fd
        self.tickets: deque[int] = deque()  # of the requests sent and not answered, oldest first
        self.unsent = memoryview(b"")  # what is left to write of the newest request
        self.sent = 0  # requests
        self.read = 0  # answers

    @property
    def alive(self) -> bool:
        return self.requests is not None

    @property
    def room(self) -> bool:
        """Whether it takes another request: fewer than :data:`DEPTH` outstanding, none half written."""
        return self.requests is not None and len(self.tickets) < DEPTH and not self.unsent

    def send(self, ticket: int, texts: Sequence[str]) -> None:
        """Begin writing a request (raises OSError if the child is gone)."""
        self.tickets.append(ticket)
        self.sent += 1
        self.unsent = memoryview(_frame(list(texts)))
        self.write()

    def write(self) -> None:
        """Write what the pipe takes of the request begun (raises OSError if the child is gone)."""
        while self.unsent and self.requests is not None:
            try:
                n = os.write(self.requests, self.unsent)
            except BlockingIOError:
                return
            self.unsent = self.unsent[n:]

    def receive(self) -> tuple[int, list[int] | None] | None:
        """The oldest request's ticket and answer, or None if the child is gone. Called when its pipe
        has data: an answer is written at once, so reading the rest of it does not wait long."""
        fd = self.answers
        payload = None if fd is None else _read_frame(lambda size: os.read(fd, size))
        if payload is None:
            return None
        self.read += 1
        return self.tickets.popleft(), pickle.loads(payload)

    def close(self) -> None:
        for fd in (self.requests, self.answers):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.requests = self.answers = None
        self.unsent = memoryview(b"")


#: Requests a child may have outstanding: the batch it counts and the next, already in its pipe, so
#: that a child done with one does not wait for this process, busy parsing, to send it another.
DEPTH = 2


class Crew:
    """This process's end of ``size`` children counting with encoding ``name`` (see the module
    docstring).

    Batches wait in an outbox here rather than block this process: a child takes up to :data:`DEPTH`
    of them at a time, and each time this process comes back to the crew (to start a batch or to wait
    for one) it reads the answers that are in and sends the children more.
    """

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
        #: Batches not sent yet, oldest first: (ticket, texts, the member that must count them or
        #: None for any).
        self._outbox: deque[tuple[int, Sequence[str], _Member | None]] = deque()
        self._answers: dict[int, list[int] | None] = {}  # by ticket, until collected
        self._tickets = itertools.count()
        #: Seconds spent waiting for batches sent to the first child (:meth:`start` without ``spread``)
        #: once it had answered, so not for its build: the rent that tells a caller when building its
        #: own encoding is cheaper.
        self.waited = 0.0

    @property
    def usable(self) -> bool:
        """Whether the caller may send work: the crew lives and this is the process and thread that
        forked it (a batch worker forked later inherits the object, not the right to use it)."""
        return self._members[0].alive and (os.getpid(), threading.get_ident()) == self.owner

    @property
    def sent(self) -> int:
        return sum(m.sent for m in self._members)

    @property
    def answered(self) -> int:
        return sum(m.read for m in self._members)

    def start(self, texts: Sequence[str], *, spread: bool = False) -> Callable[[], list[int] | None]:
        """Queue ``texts``; the returned function waits for their counts, or None if a child failed.

        ``spread`` splits them among the crew, for a large batch; otherwise they go to the first child.
        """
        alive = sum(m.alive for m in self._members)
        first = self._members[0]
        if not spread or alive < 2 or len(texts) < 2:
            timed = first.read > 0  # waiting for a child that has not answered is waiting for its build
            tickets = [self._post(texts, first)]
        else:
            timed = False
            tickets = [self._post(texts[a:b], None) for a, b in split(texts, alive) if b > a]
        self._pump(block=False)

        def collect() -> list[int] | None:
            started = time.perf_counter()
            while any(t not in self._answers for t in tickets):
                self._pump(block=True)
            if timed:
                self.waited += time.perf_counter() - started
            answers = [self._answers.pop(t) for t in tickets]
            if any(a is None for a in answers):
                return None
            return [n for a in answers for n in a or ()]

        return collect

    def _post(self, texts: Sequence[str], member: _Member | None) -> int:
        ticket = next(self._tickets)
        self._outbox.append((ticket, texts, member))
        return ticket

    def _dispatch(self) -> None:
        """Send queued batches, oldest first, while a child they may go to has room (the emptier first).
        A batch no living child may count is answered None."""
        while self._outbox:
            ticket, texts, target = self._outbox[0]
            members = [m for m in ([target] if target is not None else self._members) if m.alive]
            if not members:
                self._outbox.popleft()
                self._answers[ticket] = None
                continue
            ready = [m for m in members if m.room]
            if not ready:
                return
            member = min(ready, key=lambda m: len(m.tickets))
            self._outbox.popleft()
            try:
                member.send(ticket, texts)
            except OSError:
                self._lost(member)

    def _pump(self, *, block: bool) -> None:
        """Move the work along: send what the children have room for, write what their pipes take and
        read the answers that are in. With ``block``, return only once an answer has been read (or
        none is awaited)."""
        while True:
            self._dispatch()
            # A child's pipes by descriptor: its answers, when it owes some; its requests, when one is
            # half written.
            answers = {m.answers: m for m in self._members if m.tickets and m.answers is not None}
            if not answers:
                return
            requests = {m.requests: m for m in answers.values() if m.unsent and m.requests is not None}
            readable, writable, _ = select.select(list(answers), list(requests), [], None if block else 0)
            for fd in writable:
                try:
                    requests[fd].write()
                except OSError:
                    self._lost(requests[fd])
            for fd in readable:
                member = answers[fd]
                got = member.receive() if member.answers is not None else None
                if got is None:
                    self._lost(member)
                else:
                    self._answers[got[0]] = got[1]
            if readable or not block:
                self._dispatch()
                return

    def _lost(self, member: _Member) -> None:
        """A child that died or closed its pipes: what it was sent is answered None (the caller then
        counts that itself)."""
        for ticket in member.tickets:
            self._answers[ticket] = None
        member.tickets.clear()
        member.close()

    def close(self) -> None:
        """Stop the crew and close the pipes.

        A first child that has answered everything sent waits for requests: the closed pipe ends it
        (and it ends the others), and it is reaped. Any other may be deep in the build or a batch: it
        gets SIGTERM and is not waited for.
        """
        if os.getpid() != self.owner[0] or not any(m.alive for m in self._members):
            return
        first = self._members[0]
        quiet = first.read > 0 and not first.tickets
        for member in self._members:
            self._lost(member)  # a batch still waited for is answered None: its caller counts it
        while self._outbox:
            self._answers[self._outbox.popleft()[0]] = None
        with contextlib.suppress(OSError):
            if quiet:
                os.waitpid(self.pid, 0)
            else:
                os.kill(self.pid, signal.SIGTERM)
                os.waitpid(self.pid, os.WNOHANG)


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


@contextlib.contextmanager
def worker_processes(tokenizer: object, workers: int) -> Iterator[bool]:
    """Count large batches of ``tokenizer`` (a tiktoken tokenizer) in ``workers`` processes.

    Yields whether processes are in use: the crew the command started with when it has that many
    members, else one forked now and stopped on exit. None is forked when ``workers < 2``, when the
    tokenizer is not a tiktoken one, when this process is a batch worker, or when other threads are
    running (forking a process with threads may copy a lock some thread holds). Counts are identical
    either way; only the speed differs.
    """
    if workers < 2 or not isinstance(tokenizer, tiktoken_backend.TiktokenTokenizer):
        yield False
        return
    crew = crew_for(tokenizer.name, tokenizer.path)
    if crew is not None and crew.size >= workers:
        yield True
        return
    if not tiktoken_backend.processes_allowed or threading.active_count() > 1 or not hasattr(os, "fork"):
        yield False
        return
    try:
        start(tokenizer.name, workers, tokenizer.path)  # stops a smaller crew
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        stop()


tiktoken_backend.find_crew = crew_for
