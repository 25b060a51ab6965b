"""The ``ctxc`` console script and ``python -m ctxc``.

This module stays light on purpose: ``--version`` is answered before anything else is imported, and a
command that will count tokens gets a child building the tokenizer (:mod:`ctxc.tokens.prefork`)
before ``ctxc.cli`` and typer, a tenth of a second of imports, are loaded. And the process ends without
the interpreter's teardown (:func:`run`).
"""

from __future__ import annotations

import atexit
import os
import sys

#: The exit status :func:`run` saw, for :func:`_end_now`.
_status: list[int] = []


def run() -> None:
    """The ``ctxc`` console script and ``python -m ctxc``: :func:`main`, in a process that ends at once
    when its exit handlers are done (:func:`_end_now`)."""
    atexit.register(_end_now)  # registered first, so it runs after every other exit handler
    try:
        main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            _status.append(exc.code or 0)
        raise
    _status.append(0)


def _end_now() -> None:
    """End the process now, with the status :func:`run` saw, rather than let the interpreter free every
    object and module first: 40-60 ms after a 100 MB ``analyze``, where nothing else runs.

    Every handler ctxc registers has run (the counting children are stopped) and the standard streams
    are flushed here; ctxc's files are written and closed before it exits. A handler registered before
    :func:`run` started, by a ``.pth`` hook say, does not run. Without a status (an uncaught exception,
    which ``CTXC_DEBUG=1`` lets through) or a stream that cannot be flushed (a reader that went away),
    the usual teardown reports it.
    """
    if not _status:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(_status[0])


def main() -> None:
    args = sys.argv[1:]
    if args in (["--version"], ["-V"]):  # scripts call this often: before any import
        from ctxc import __version__

        sys.stdout.write(f"ctxc {__version__}\n")
        return
    try:
        from ctxc.errors import ignore_interrupts
        from ctxc.system import interrupts_held
        from ctxc.tokens.prefork import start_for

        start_for(args)
        # Ctrl-C is held while ctxc.cli and its dependencies import (0.1 s), then delivered where the
        # CLI's boundary handles it. An interrupt inside an import can be lost (CPython ignores one
        # raised in an import lock's callback), turn into a RuntimeError (in a class's __set_name__),
        # or crash the process: orjson 3.13 segfaults when its module initialisation is interrupted.
        with interrupts_held():
            import orjson  # noqa: F401

            from ctxc.cli import main as cli_main
        cli_main(args)
    except KeyboardInterrupt:
        # Ctrl-C before ctxc.cli's error boundary exists or while that boundary reports another
        # error: still one line and the documented exit code, never a traceback.
        from ctxc.errors import exit_interrupted

        exit_interrupted()
    except SystemExit:
        ignore_interrupts()
        raise
    ignore_interrupts()


if __name__ == "__main__":
    run()
