"""The ``ctxc`` command modules, their help panels, and :func:`main`, the one error boundary (every
:class:`~ctxc.errors.CtxcError` is one line on stderr and its exit code)."""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import os
import sys
from typing import Any, NoReturn

import typer

from ctxc.cli.options import app, note
from ctxc.errors import CtxcError, ExitCode, OutputError, exit_interrupted, options_as_flags
from ctxc.output import ReaderGone, flush_stdout, guard_standard_streams, write_stdout
from ctxc.terminal import one_line

# The command modules, each adding its commands to the app when imported, in the order ``ctxc --help``
# lists them: a list rather than discovery, so the order is deliberate and a typo fails loudly.
COMMAND_MODULES = "analyze compact convert archive info sessions eval check agent replay hooks"


#: Help panels of compact's options, too many for one list; its signature lists them panel by panel,
#: in the order help shows them.
_COMPACT_PANELS = {
    "Input": "input_format skip_invalid max_line_mb",
    "Target": "target_tokens target_ratio model window keep_last pin tokenizer thresholds allow_over "
    "no_cache",
    "Strategy": "strategy summarizer settings instructions reminders summary_model summary_command "
    "concurrency max_retries segment_tokens timeout",
    "Output": "output fork fmt dry_run list_actions report quiet",
    "Batch": "out_dir in_place glob jobs fail_fast force",
    "Archive": "no_index archive",
}


class _HelpToStdout:
    """Help written as any other output: a full disk is an output error (exit 7), and piped, its lines
    lose the spaces rich pads them with to the width of its panels."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if sys.stdout.isatty():
            try:
                super().format_help(ctx, formatter)  # type: ignore[misc]
            except OSError as exc:
                raise OutputError(f"cannot write: {exc.strerror or exc}", path="stdout") from exc
            return
        with contextlib.redirect_stdout(io.StringIO()) as text:  # rich prints to the sys.stdout of now
            super().format_help(ctx, formatter)  # type: ignore[misc]
        write_stdout("".join(line.rstrip() + "\n" for line in text.getvalue().splitlines()))


class _Group(_HelpToStdout, typer.core.TyperGroup):
    """A command group whose help is written as any other output."""


class _Command(_HelpToStdout, typer.core.TyperCommand):
    """A command whose usage line names a required argument plainly (``REF``, not typer's ``{REF}``),
    and whose options (compact's) go in help panels."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.name == "compact":
            for panel, names in _COMPACT_PANELS.items():
                for param in self.params:
                    if param.name in names.split():
                        param.rich_help_panel = panel  # type: ignore[attr-defined]

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces: list[str] = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]


for module in COMMAND_MODULES.split():
    importlib.import_module(f"ctxc.cli.{module}")
for typer_app in (app, *(group.typer_instance for group in app.registered_groups)):
    assert typer_app is not None
    typer_app.info.cls = _Group
    for command in typer_app.registered_commands:
        if command.cls in (None, typer.core.TyperCommand):
            command.cls = _Command


def _click_command(args: list[str]) -> Any:
    """The click group to run ``args``, with only the command they name (typer converts every command it
    holds, a cost each run would pay for all of them); help, bad names and bare options get them all."""
    name = args[0] if args and not args[0].startswith("-") else None
    chosen = [
        c
        for c in app.registered_commands
        if c.callback is not None and (c.name or typer.main.get_command_name(c.callback.__name__)) == name
    ]
    if not chosen:
        return typer.main.get_command(app)
    only = copy.copy(app)
    only.registered_commands = chosen
    return typer.main.get_command(only)


def _caused_by(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc`` or an exception it was raised from or while handling is one of ``kinds``."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, kinds):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` stands for a Ctrl-C, which CPython wraps in a RuntimeError when it comes while a
    class is made (a lazily imported module defining its dataclasses)."""
    return _caused_by(exc, (KeyboardInterrupt,))


def _reader_gone() -> NoReturn:
    """The reader of stdout went away (``| head``): stop quietly, exit 0, and keep Python from
    complaining at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)  # main() also runs in-process (tests, the library): no descriptor left open
    sys.exit(int(ExitCode.OK))


@options_as_flags()  # errors name the flags the user typed (``--max-tokens``), not keywords
def main(argv: list[str] | None = None) -> None:
    """Console entry point: the one place errors become messages and exit codes."""
    args = sys.argv[1:] if argv is None else argv
    debug = os.environ.get("CTXC_DEBUG", "") not in ("", "0")

    guard_standard_streams()
    try:
        rc = _click_command(args).main(args=args, prog_name="ctxc", standalone_mode=False)
        flush_stdout()  # inside the boundary: output that cannot be written is an error, not exit 0
    except CtxcError as exc:
        if debug:
            raise
        note(f"ctxc: error: {exc}")
        sys.exit(int(exc.exit_code))
    except typer.TyperException as exc:  # bad options and arguments (typer's click exceptions)
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare ``ctxc``: its message is the help
            exc.show()  # type: ignore[attr-defined]
        else:  # ctxc's one line, naming the help to read (not click's four lines)
            ctx = getattr(exc, "ctx", None)
            message = exc.format_message().rstrip(".")
            message = message.replace(":\n\t", ": ").replace(",\n\t", ", ")  # click lists choices a line each
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            sys.stderr.write(one_line(f"ctxc: error: {message}{hint}") + "\n")
        sys.exit(int(ExitCode.USAGE))
    except (KeyboardInterrupt, typer.Abort):  # typer turns a Ctrl-C while parsing into Abort
        exit_interrupted()
    except (BrokenPipeError, ReaderGone):
        _reader_gone()
    except SystemExit as exc:
        # rich meets a closed pipe (help, tables printed by typer) with SystemExit(1): still a reader gone.
        if _caused_by(exc, (BrokenPipeError, ReaderGone)):
            _reader_gone()
        raise
    except Exception as exc:
        if _interrupted(exc):
            exit_interrupted()
        if debug:
            raise
        note(f"ctxc: internal error: {type(exc).__name__}: {exc} (rerun with CTXC_DEBUG=1 for the traceback)")
        sys.exit(int(ExitCode.INTERNAL))
    if rc == ExitCode.INTERRUPTED:  # typer turns Ctrl-C inside a command into this return code
        exit_interrupted("ctxc: interrupted; no partial output was left")
    sys.exit(rc if isinstance(rc, int) else 0)
