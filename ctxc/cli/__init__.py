"""The ``ctxc`` command line: a thin layer over the library with one error boundary.

:mod:`ctxc.cli.app` holds the Typer app, the registry of command modules and :func:`main`, the one
place errors become messages and exit codes; :mod:`ctxc.cli.options` the options commands share; every
other module here is one family of commands, exposing ``register(app)``.
"""

from __future__ import annotations

from ctxc.cli.app import _interrupted, app, main

__all__ = ["_interrupted", "app", "main"]
