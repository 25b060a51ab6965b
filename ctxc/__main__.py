"""The ``ctxc`` console script and ``python -m ctxc``.

This module stays light on purpose: ``--version`` is answered before anything else is imported, and a
command that will count tokens gets a child building the tokenizer (:mod:`ctxc.tokens.prefork`)
before ``ctxc.cli`` and typer, a tenth of a second of imports, are loaded.
"""

from __future__ import annotations

import sys


def main() -> None:
    from ctxc.errors import exit_interrupted, ignore_interrupts

    try:
        _main(sys.argv[1:])
    except KeyboardInterrupt:
        # Ctrl-C before ctxc.cli's error boundary exists (while importing it) or while that boundary
        # reports another error: still one line and the documented exit code, never a traceback.
        exit_interrupted()
    except SystemExit:
        ignore_interrupts()
        raise
    ignore_interrupts()


def _main(args: list[str]) -> None:
    if args in (["--version"], ["-V"]):  # scripts call this often
        from ctxc import __version__

        sys.stdout.write(f"ctxc {__version__}\n")
        return
    from ctxc.tokens.prefork import start_for

    start_for(args)
    from ctxc.cli import main as cli_main

    cli_main(args)


if __name__ == "__main__":
    main()
