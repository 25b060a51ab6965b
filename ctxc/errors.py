"""Exit codes and the exceptions that map onto them.

Library code raises :class:`CtxcError` subclasses; the CLI is the one boundary that turns them into a
one-line message on stderr and an exit code. Keep every code here so the README table stays complete.
"""

from __future__ import annotations

import signal
import sys
from enum import IntEnum
from typing import NoReturn


class ExitCode(IntEnum):
    OK = 0
    #: An unexpected internal error (a bug): rerun with CTXC_DEBUG=1 for the traceback.
    INTERNAL = 1
    #: The command line was wrong (unknown option, bad value).
    USAGE = 2
    #: An input could not be read: missing, empty, binary, not UTF-8, not JSON, a line too large.
    INPUT = 3
    #: The input's format could not be recognised or is not one ctxc supports.
    FORMAT = 4
    #: The transcript breaks pairing or role rules (``validate``) or an output would.
    INVALID = 5
    #: Compaction cannot reach the target without dropping pinned content (see ``--allow-over``).
    OVER_TARGET = 6
    #: An output could not be written (permissions, full disk) or would overwrite an input.
    OUTPUT = 7
    #: The archive is missing, corrupt, or does not hold the requested id.
    ARCHIVE = 8
    #: A model API call or a summary command failed: API errors after retries, a timeout, an empty,
    #: truncated or sectionless summary, a failing command, token counting through the API.
    SUMMARIZER = 9
    #: The API key is missing or was rejected.
    AUTH = 10
    #: The model is unknown to the API.
    MODEL = 11
    #: A batch finished but some of its files failed; the report (``--format json``) says which and why.
    PARTIAL = 12
    #: Interrupted by Ctrl-C or SIGTERM; nothing partial was left behind.
    INTERRUPTED = 130


class CtxcError(Exception):
    """An error with a user-facing message, optionally tied to a file and line."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line

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
    """From here on a Ctrl-C is ignored: the command is over, and one arriving while the process
    exits would only replace its exit code by death from a signal."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_interrupted(message: str = "ctxc: interrupted") -> NoReturn:
    """Exit with :attr:`ExitCode.INTERRUPTED` after a Ctrl-C was handled."""
    ignore_interrupts()
    sys.stderr.write(message + "\n")
    # CPython remembers a KeyboardInterrupt that escaped code run by exec() on a string (dataclasses
    # and namedtuple build their methods so while modules import) and at exit kills the process with
    # SIGINT instead of returning this code; each such exec() clears the note first.
    exec("None")
    sys.exit(int(ExitCode.INTERRUPTED))
