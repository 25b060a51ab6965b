"""Exit codes and the exceptions that map onto them: library code raises :class:`CtxcError` subclasses,
and the CLI's one error boundary turns them into a one-line message and an exit code."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import NoReturn


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1  #: An unexpected internal error (a bug): rerun with CTXC_DEBUG=1 for the traceback.
    USAGE = 2  #: The command line was wrong (unknown option, bad value).
    INPUT = 3  #: An input could not be read: missing, empty, binary, not UTF-8, not JSON, a line too large.
    FORMAT = 4  #: The input's format could not be recognised or is not one ctxc supports.
    INVALID = 5  #: The transcript breaks pairing or role rules (``validate``) or an output would.
    #: Compaction cannot reach the target (adaptive without one: the window) without dropping pinned content
    #: (``--allow-over``).
    OVER_TARGET = 6
    OUTPUT = 7  #: An output could not be written (permissions, full disk) or would overwrite an input.
    ARCHIVE = 8  #: The archive is missing, corrupt, or does not hold the requested id.
    SUMMARIZER = 9  #: A model API call, summary command or API token count failed, or a summary was unusable.
    AUTH = 10  #: The API key is missing or was rejected.
    MODEL = 11  #: The model is unknown to the API.
    PARTIAL = 12  #: A batch finished but some files failed; its report (``--format json``) says which, why.
    INTERRUPTED = 130  #: Interrupted by Ctrl-C or SIGTERM; nothing partial was left behind.


#: The command-line flags not spelled as their library name with dashes (``--max-tokens``).
FLAGS = {
    "max_line_bytes": "--max-line-mb",
    "out": "--plot",  # ctxc.replay.plot's
    "pins": "--pin",
    "settings": "--set",
    "summarizer_options.model": "--summary-model",
    "summarizer_options.command": "--summary-command",
}

_as_flags = False  # whether errors name options as flags: set by the command line for its run


def option_name(name: str) -> str:
    """How a message names the option ``name`` (a keyword argument, or ``a.b`` for a field of the options
    ``a``): ``max_tokens=`` to a library caller, ``--max-tokens`` on the command line."""
    if not _as_flags:
        return f"{name}="
    return FLAGS.get(name) or "--" + name.rpartition(".")[2].replace("_", "-")


def options_named_as_flags() -> bool:
    """Whether errors name options by their flags here (a batch passes this on to its workers)."""
    return _as_flags


def name_options_as_flags(on: bool) -> bool:
    """From now on errors name options by their flags (``on``) or their library names; the previous way."""
    global _as_flags
    before, _as_flags = _as_flags, on
    return before


@contextmanager
def options_as_flags(on: bool = True) -> Iterator[None]:
    """Within this block (the CLI's run), errors name options by their flags."""
    before = name_options_as_flags(on)
    try:
        yield
    finally:
        name_options_as_flags(before)


class CtxcError(Exception):
    """An error with a user-facing message, optionally tied to a file and line. ``options`` are the
    library names of the options the message is about, which it refers to as ``{name}`` (see
    :func:`option_name`)."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None, options: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.template = message
        self.options = options
        self.path = path
        self.line = line

    @property
    def message(self) -> str:
        text = self.template
        for name in self.options:
            text = text.replace("{" + name + "}", option_name(name))
        return text

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        return where + self.message


class InputError(CtxcError):
    exit_code = ExitCode.INPUT


class FormatError(CtxcError):
    exit_code = ExitCode.FORMAT


class ValidationError(CtxcError):
    exit_code = ExitCode.INVALID


class OverTargetError(CtxcError):
    exit_code = ExitCode.OVER_TARGET


class OutputError(CtxcError):
    exit_code = ExitCode.OUTPUT


class ArchiveError(CtxcError):
    exit_code = ExitCode.ARCHIVE


class UsageError(CtxcError):
    exit_code = ExitCode.USAGE


class SummarizerError(CtxcError):
    exit_code = ExitCode.SUMMARIZER


class AuthError(CtxcError):
    exit_code = ExitCode.AUTH


class ModelError(CtxcError):
    exit_code = ExitCode.MODEL


def ignore_interrupts() -> None:
    """Ignore Ctrl-C from here on: the command is over, and a signal would only replace its exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_interrupted(message: str = "ctxc: interrupted") -> NoReturn:
    """Exit with :attr:`ExitCode.INTERRUPTED` after a Ctrl-C was handled."""
    ignore_interrupts()
    sys.stderr.write(message + "\n")
    # CPython remembers a KeyboardInterrupt that escaped exec()'d code (dataclass methods) and would die
    # of SIGINT at exit instead of returning this code; a new exec() clears that note.
    exec("None")
    sys.exit(int(ExitCode.INTERRUPTED))
