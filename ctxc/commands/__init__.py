"""Command-line commands kept in their own modules, each exposing ``register(app: typer.Typer) -> None``.

:data:`ctxc.cli.COMMAND_MODULES` lists them. They use :mod:`ctxc.cliutil` for the shared options and
consoles, raise :class:`ctxc.errors.CtxcError` subclasses for every user-facing failure, and leave turning
those into messages and exit codes to :func:`ctxc.cli.main`.
"""
