"""The ``ctxc`` command line, a thin layer over the library: :mod:`ctxc.cli.app` has the one error
boundary, :mod:`ctxc.cli.options` the app and what commands share, each other module a family of commands."""

from __future__ import annotations

from ctxc.cli.app import _interrupted, main
from ctxc.cli.options import app

__all__ = ["_interrupted", "app", "main"]
