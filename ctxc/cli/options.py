"""What ``ctxc`` commands share: the Typer app they add themselves to, output formats, consoles, common
options (apart from :mod:`ctxc.cli.app`, so a command module need not import the whole command line)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Annotated, Any, Literal, cast

import typer

from ctxc._version import __version__
from ctxc.errors import OutputError, UsageError
from ctxc.output import CheckedStdout, dumps, envelope, write_stdout
from ctxc.reader import ReadOptions
from ctxc.terminal import Fitted, one_line, stderr_console, visible_console, width_for


def examples(*commands: str, note: str = "") -> str:
    """A command's help epilog: its example command lines, then ``note``."""
    return "\n\n".join(["[bold]Examples[/bold]", *(f"  {c}" for c in commands), *([note] if note else [])])


app = typer.Typer(
    name="ctxc",
    help="Read, measure and compact LLM agent transcripts (Claude Code, Codex, chat logs, datasets).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=examples(
        "ctxc analyze session.jsonl",
        "cat t.jsonl | ctxc compact - > small.jsonl",
        "ctxc restore small.jsonl -o original.jsonl",
        note="[bold]Exit codes[/bold]: 0 ok, 1 internal error, 2 usage, 3 bad input, 4 unknown format, "
        "5 invalid transcript, 6 over target, 7 output error, 8 archive error, 9 model API or summary "
        "command failed, 10 API key missing or rejected, 11 unknown model, "
        "12 some files of a batch failed, 130 interrupted. "
        "Data goes to stdout, diagnostics to stderr; NO_COLOR is honoured; CTXC_DEBUG=1 shows tracebacks.",
    ),
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ctxc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version_callback, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """Global options; the commands do the work."""


def finite(value: float) -> float:
    """A float option's callback: nan and inf are refused (click's ranges let both through)."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def seconds(help: str) -> Any:
    """A ``--timeout`` option: at least a second, and finite."""
    return typer.Option(min=1.0, help=help, callback=finite)


def flag(name: str, help: str) -> Any:
    """A boolean option named as given (typer would add ``--no-...`` to one it named itself)."""
    return typer.Option(name, help=help)


def transcript_output(output: str | None) -> str:
    """``--output`` of a command that writes a transcript: stdout by default, but not a terminal unless
    ``-o -`` asks for it (gzip's rule: JSONL poured onto a screen helps nobody)."""
    if output is not None:
        return output
    if sys.stdout.isatty():
        raise UsageError("stdout is a terminal: give -o FILE for the transcript (or -o - to print it here)")
    return "-"


def table_on_terminal(fmt: str | None, piped: str = "json") -> str:
    """``--format`` as given; by default a table on a terminal, else ``piped`` (for a pipe or a file)."""
    return fmt or ("table" if sys.stdout.isatty() else piped)


def print_json(command: str, **payload: Any) -> None:
    """``command``'s JSON document (see :func:`~ctxc.output.envelope`) on stdout."""
    write_stdout(dumps(envelope(command, **payload)))


def note(message: str) -> None:
    """One diagnostic line on stderr, printed as is (no markup) and never cut; a newline or tab (in a file
    name, say) is shown escaped, so the line stays one."""
    stderr_console().print(one_line(message), markup=False, soft_wrap=True)


def stdout_console() -> Any:
    """The console of tables and other human-readable output (control characters shown, never obeyed)."""
    # Through write_stdout, so a full disk or a closed stdout is an error rather than lost output.
    return visible_console(file=cast(IO[str], CheckedStdout()), highlight=False, **width_for(sys.stdout))


def print_rows(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    console: Any = None,
    optional: Sequence[str] = (),
    keys: int = 0,
    fold: Sequence[str] = (),
    stack: Sequence[str] = (),
    **table: Any,
) -> None:
    """``rows`` as a table (``table``: the options of :func:`ctxc.render.make_table`) fitted to ``console``,
    stdout's by default, every value whole (the other options are :class:`~ctxc.terminal.Fitted`'s)."""
    from ctxc.render import make_table

    fitted = Fitted(make_table(columns, rows, **table), optional=optional, keys=keys, fold=fold, stack=stack)
    (console or stdout_console()).print(fitted)


def pick(values: Mapping[str, Any], names: str) -> dict[str, Any]:
    """The ``names`` (space-separated) of ``values``: flags passed on as the options of the same name."""
    return {name: values[name] for name in names.split()}


def read_options(skip_invalid: bool, max_line_mb: float) -> Any:
    if max_line_mb <= 0:
        raise UsageError("--max-line-mb must be positive")
    return ReadOptions(skip_invalid=skip_invalid, max_line_bytes=int(max_line_mb * 1_000_000))


def load_transcript(path: str, input_format: str | None, skip_invalid: bool, max_line_mb: float) -> Any:
    """The transcript at ``path`` (``-`` for stdin, or a session), read with the input options every
    command shares."""
    from ctxc.formats import load  # as each command imports the library it calls: when it runs
    from ctxc.sessions import session_path

    return load(
        session_path(path), input_format=input_format, options=read_options(skip_invalid, max_line_mb)
    )


def parse_thresholds(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--thresholds takes four comma-separated shares, got {text!r}") from None


def parse_sets(values: list[str]) -> dict[str, str]:
    """``--set strategy.option=value`` pairs (each strategy's Config validates the values)."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set takes strategy.option=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def batch_mode(
    paths: list[str] | None, inputs: list[Any], output: str, out_dir: str | None, in_place: bool | None = None
) -> bool:
    """Whether the run is a batch (``--out-dir``, or ``--in-place`` for a command that has it, else None),
    after refusing what makes no sense: several inputs or a directory without one, ``--output`` with one."""
    if out_dir is not None and in_place:
        raise UsageError("give --out-dir or --in-place, not both")
    if out_dir == "-":
        raise UsageError("--out-dir needs a directory, not - (give -o - for one input's stdout)")
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise OutputError("--out-dir is not a directory", path=out_dir)
    batch = out_dir is not None or bool(in_place)
    if not batch and (len(inputs) > 1 or any(Path(p).is_dir() for p in paths or [])):
        alt = "" if in_place is None else " or --in-place"
        raise UsageError(f"several inputs need --out-dir DIR (mirrors the input tree){alt}")
    if batch and output != "-":
        where = "--out-dir" if in_place is None else "--out-dir or in place"
        raise UsageError(f"--output is for one input; a batch writes to {where}")
    if batch and "-" in (paths or []):
        raise UsageError(
            f"{'--in-place' if in_place else '--out-dir'} needs files, not stdin (give -o for it)"
        )
    return batch


# The options several commands share; typer names each after its parameter unless a name is given.
OutFormat = Literal["table", "json", "csv"]
TableOrJson = Literal["table", "json"]
PathArg = Annotated[
    str, typer.Argument(help="A transcript file, a session id (or latest), or - for stdin.", metavar="PATH")
]
PathsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Transcript files, directories (walked; see --glob), or - for stdin.",
        show_default=False,
        metavar="[PATH]...",
    ),
]
InputFormatOpt = Annotated[
    str | None, typer.Option(help="Force the input format instead of sniffing it (see `ctxc formats`).")
]
SkipInvalidOpt = Annotated[
    bool,
    flag(
        "--skip-invalid",
        "Keep going past lines that are not JSON objects (reported, and written back untouched).",
    ),
]
MaxLineOpt = Annotated[float, typer.Option(help="Refuse lines larger than this many MB.", callback=finite)]
GlobOpt = Annotated[
    str | None,
    typer.Option(
        help="Which files to take from directories (e.g. '*.json', 'sessions/**/*.jsonl'); "
        "with no paths, from the current directory. Default: *.jsonl, *.traj, *.traj.json.",
    ),
]
JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs", "-j", min=1, help="Files processed at once, in worker processes (default: the cores)."
    ),
]
FailFastOpt = Annotated[
    bool, flag("--fail-fast", "Stop at the first file that fails (default: report and go on).")
]
TranscriptOutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Output file, or - for stdout (the default, unless stdout is a terminal).",
        show_default=False,
    ),
]
OutDirOpt = Annotated[
    str | None, typer.Option(help="Write each output here, mirroring the input tree (a batch).")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")]
ModelOpt = Annotated[str | None, typer.Option(help="Model profile for the window (see `ctxc models`).")]
WindowOpt = Annotated[int | None, typer.Option(help="Context window in tokens (overrides --model).")]
PricesOpt = Annotated[
    str | None,
    typer.Option(
        envvar="CTXC_PRICES",
        metavar="FILE",
        help="A TOML price table over the shipped one (its form: the docs, section Cost).",
        show_default=False,
    ),
]
TableOrJsonOpt = Annotated[
    TableOrJson | None, typer.Option("--format", "-f", help="table (the default on a terminal) or json.")
]
OutFormatOpt = Annotated[
    OutFormat | None, typer.Option("--format", "-f", help="table (default on a terminal), json, or csv.")
]
ArchiveOpt = Annotated[
    str | None,
    typer.Option(
        help="Archive directory (default $CTXC_ARCHIVE, else a .ctxc/archive here or above, "
        "else ~/.local/share/ctxc/archive).",
    ),
]
NoCacheOpt = Annotated[bool, flag("--no-cache", "Do not read or write the token count cache.")]
ThresholdsOpt = Annotated[str, typer.Option(help="Window shares where stages 2-5 begin.")]
KeepLastOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Messages at the end always kept verbatim. Default: 4, or fewer (down to 1) when an explicit "
        "target cannot be met otherwise.",
        show_default=False,
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Strategy option, e.g. mask.keep_last_results=5. Repeatable."),
]
ConversationOpt = Annotated[
    int | None, typer.Option(help="Which conversation of the file (default: the largest).")
]
StrategyOpt = Annotated[str, typer.Option("--strategy", "-s", help="See `ctxc strategies`.")]
TokenizerOpt = Annotated[str, typer.Option(help="o200k_base, cl100k_base or approx.")]
