"""The ``ctxc`` console script and ``python -m ctxc``: light on purpose, ``--version`` is answered
before any import, the tokenizer's workers (:mod:`ctxc.tokens.workers`) start before typer loads, and
the process ends without the interpreter's teardown (:func:`run`)."""

from __future__ import annotations

import atexit
import os
import sys

#: The exit status :func:`run` saw, for :func:`_end_now`.
_status: list[int] = []


def main() -> None:
    """The ``ctxc`` console script and ``python -m ctxc``."""
    args = sys.argv[1:]
    if args in (["--version"], ["-V"]):  # scripts call this often: before any import
        from ctxc._version import __version__

        try:
            sys.stdout.write(f"ctxc {__version__}\n")
            sys.stdout.flush()
        except (AttributeError, OSError) as exc:  # stdout closed (None) or full
            reason = getattr(exc, "strerror", None) or exc
            if sys.stderr is not None:
                sys.stderr.write(f"ctxc: error: stdout: cannot write: {reason}\n")
            sys.exit(7)  # ExitCode.OUTPUT, not imported: this path stays import-free
        return
    try:
        from ctxc.system import gc_paused, interrupts_held

        # Starting up makes long-lived objects and no garbage: the cyclic collector would only walk
        # them over and over (bench/README.md, "Session 15").
        with gc_paused():
            from ctxc.errors import ignore_interrupts
            from ctxc.tokens import workers

            workers.start_for(args)
            # Ctrl-C is held while ctxc.cli and its dependencies import, then delivered where the
            # CLI's boundary handles it. An interrupt inside an import can be lost (CPython ignores one
            # raised in an import lock's callback), turn into a RuntimeError (in a class's
            # __set_name__), or crash the process: orjson 3.13 segfaults when its module
            # initialisation is interrupted.
            with interrupts_held():
                import orjson  # noqa: F401

                from ctxc.cli import main as cli_main
        try:
            cli_main(args)
        finally:
            # Before the interpreter's exit, which would wait for a worker still building.
            workers.stop()
    except KeyboardInterrupt:
        # Ctrl-C before ctxc.cli's error boundary exists or while that boundary reports another
        # error: still one line and the documented exit code, never a traceback.
        from ctxc.errors import exit_interrupted

        exit_interrupted()
    except SystemExit:
        ignore_interrupts()
        raise
    ignore_interrupts()


def run() -> None:
    """The console script (pyproject.toml): :func:`main` in a process that ends as soon as its exit
    handlers have run (:func:`_end_now`)."""
    atexit.register(_end_now)  # registered first, so it runs after every other exit handler
    try:
        main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            _status.append(exc.code or 0)
        raise
    _status.append(0)


def _end_now() -> None:
    """End the process with the status :func:`run` saw, without freeing every object and module first
    (bench/README.md, "Session 14": a tenth of a cached analyze). Every file ctxc writes is closed and
    its output flushed inside the CLI's error boundary; the standard streams are flushed once more here,
    and when that fails, or no status was seen (an uncaught exception), the usual teardown reports it.
    A handler registered before :func:`run` started (by a ``.pth`` hook, say) does not run."""
    if not _status:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(_status[0])


if __name__ == "__main__":
    run()
