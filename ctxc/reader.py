"""JSONL (and whole-document JSON) read into :class:`Record` objects that keep their bytes, so an unchanged
file is written back as a byte copy. A bad line raises an :class:`InputError` naming file and line, unless
``skip_invalid`` keeps it as an opaque ``invalid`` record (still written back verbatim)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import tomllib
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ctxc.errors import ArchiveError, InputError, UsageError
from ctxc.model import Record, RecordKind
from ctxc.system import sync_dir

DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024
_SNIFF_BYTES = 8192
_READ_BUFFER = 1 << 20
BOM = b"\xef\xbb\xbf"
#: Shorter lines are held rather than kept in a spool: their bytes cost less than a read back.
_SPOOLED_MIN = 256
#: What is said of a last line that ends mid-record (see :func:`iter_records`).
CUT_OFF = "cut off mid-record (no newline, not JSON): not read; a session still being written?"


class Spool:
    """A copy on disk of every byte read, from which records read their bytes back (:meth:`Record.kept_in`):
    the original's archived copy in the making, so what is archived is what was parsed. Its errors are
    archive errors; :meth:`close` removes it unless committed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise self._error(exc) from exc
        self._writer = open(self._fd, "wb", buffering=_READ_BUFFER, closefd=False)  # noqa: SIM115
        self._digest = hashlib.sha256()
        self._size = 0
        self._flushed = 0
        self._committed = False

    def _error(self, exc: OSError) -> ArchiveError:
        return ArchiveError(f"cannot write to the archive: {exc.strerror or exc}", path=str(self.path.parent))

    def append(self, chunk: bytes) -> int:
        """Add ``chunk``; returns where it starts."""
        offset = self._size
        try:
            self._writer.write(chunk)
        except OSError as exc:
            raise self._error(exc) from exc
        self._digest.update(chunk)
        self._size += len(chunk)
        return offset

    def flush(self) -> None:
        try:
            self._writer.flush()
        except OSError as exc:
            raise self._error(exc) from exc
        self._flushed = self._size

    def read_at(self, offset: int, size: int) -> bytes:
        if offset + size > self._flushed:
            self.flush()
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise ArchiveError(
                "the archive's copy of the input is shorter than what was read", path=str(self.path)
            )
        return data

    def __len__(self) -> int:
        return self._size

    def hexdigest(self) -> str:
        """The sha256 of every byte appended."""
        return self._digest.hexdigest()

    def commit(self, target: Path, *, sync: bool = True) -> None:
        """Move the copy to ``target`` (synced first, unless ``sync`` is false). Raises ``OSError``."""
        self.flush()
        if sync:
            os.fsync(self._fd)
        os.replace(self.path, target)
        self._committed = True
        if sync:
            sync_dir(target.parent)

    def close(self) -> None:
        """Remove the copy unless committed; records kept in it can no longer be read."""
        if not self._committed:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        with contextlib.suppress(OSError):  # what a full disk kept from being written goes with it
            self._writer.close()
        os.close(self._fd)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    skip_invalid: bool = False
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    #: Keep the lines read in this spool instead of holding their bytes (a large original being archived).
    spool: Spool | None = field(default=None, compare=False)


def open_binary(src: str | os.PathLike[str] | BinaryIO) -> tuple[str, BinaryIO]:
    """Open a path (``-`` is stdin) or take an already open binary stream."""
    if not isinstance(src, str | os.PathLike):
        if isinstance(src, io.TextIOBase) or not callable(getattr(src, "read", None)):
            raise UsageError(
                f"give a path, - or a binary stream (open(path, 'rb')), not a {type(src).__name__}"
            )
        return getattr(src, "name", None) or "-", src
    name = str(src)
    if name == "-":
        if sys.stdin is None:  # started with stdin closed (<&-)
            raise InputError("stdin is closed; give a file, or pipe one in")
        return "-", sys.stdin.buffer
    path = Path(name)
    if not path.exists():
        raise InputError("no such file", path=name)
    if path.is_dir():
        raise InputError("is a directory (give a file, or a directory to commands that walk them)", path=name)
    try:
        # A 1 MiB buffer: readline over 8 KiB reads costs 3x as much on logs whose lines run to
        # kilobytes and megabytes.
        return name, path.open("rb", buffering=_READ_BUFFER)
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=name) from exc


def read_all(src: str | os.PathLike[str]) -> tuple[str, bytes]:
    """A whole input (``-`` is stdin) as bytes with its display name: for commands that must archive
    exactly what they read, or read it twice."""
    name, handle = open_binary(src)
    try:
        return name, handle.read()
    finally:
        if name != "-":
            handle.close()


def read_toml(path: str | os.PathLike[str], what: str) -> str:
    """The text of ``what``, a TOML file an option names (a BOM, as Windows editors write, dropped). Not
    stdin: a transcript may come from there. A file that cannot be read is an InputError."""
    a_what = ("an " if what[0] in "aeiou" else "a ") + what
    if str(path) == "-":
        raise UsageError(f"give {a_what}, not - (stdin)")
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"no such {what}", path=str(path)) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, not {a_what}", path=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read the {what}: {exc.strerror or exc}", path=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"the {what} is not UTF-8 text (byte {exc.start})", path=str(path)) from None


def parse_toml(text: str, source: str, keys: Collection[str], hint: str = "") -> dict[str, Any]:
    """A TOML document with only the top-level ``keys``; anything else is a loud usage error."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{source}: not valid TOML: {exc}") from None
    if unknown := set(doc) - set(keys):
        raise UsageError(f"{source}: unknown top-level keys {sorted(unknown)}{hint}")
    return doc


def named_bytes(name: str, data: bytes) -> io.BytesIO:
    """A binary stream over ``data`` that reports ``name`` in errors, as the file would."""
    stream = io.BytesIO(data)
    stream.name = name
    return stream


def _excerpt(raw: bytes, limit: int = 60) -> str:
    text = raw[:limit].decode("utf-8", errors="replace")
    return repr(text + ("…" if len(raw) > limit else ""))


def megabytes(n: int) -> str:
    """``n`` bytes as MB for a message: one decimal, or two significant digits below 0.1 MB."""
    mb = n / 1_000_000
    return f"{mb:.1f} MB" if mb >= 0.1 else f"{mb:.2g} MB"


def parse_line(raw: bytes, name: str, line: int) -> object:
    """Parse one JSON line or raise an InputError that says what is wrong with it."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as uexc:
            raise InputError(
                f"invalid UTF-8 at byte {uexc.start} of the line", path=name, line=line
            ) from None
        raise InputError(f"not valid JSON ({exc.msg}): {_excerpt(raw)}", path=name, line=line) from None


def iter_records(
    stream: BinaryIO, name: str, options: ReadOptions = ReadOptions(), *, cut_off: list[int] | None = None
) -> Iterator[Record]:
    """The records of a stream, lazily, one per line; a file that is one JSON document over several lines
    (a pretty-printed ``.traj``) is one record. A last line that ends mid-record is not read: its number
    goes to ``cut_off`` (for ``validate``, which says so: the log may be still being written, or damaged)."""
    buffered: BinaryIO = stream
    if isinstance(stream, io.BufferedReader):
        head = stream.peek(_SNIFF_BYTES)[:_SNIFF_BYTES]
    else:  # BytesIO and other streams: read everything once, sniffing needs a look ahead
        whole = stream.read()
        head = whole[:_SNIFF_BYTES]
        buffered = io.BytesIO(whole)
    if b"\x00" in head:
        raise InputError("binary file (contains NUL bytes), not a JSONL transcript", path=name)

    line_no = 0
    any_record = False
    limit = options.max_line_bytes
    spool = options.spool
    while True:
        chunk = buffered.readline(limit + 1)
        if not chunk:
            break
        line_no += 1
        if len(chunk) > limit and not chunk.endswith(b"\n"):
            size = len(chunk)
            while True:  # measure the rest of the line without holding it
                more = buffered.readline(1 << 20)
                size += len(more)
                if not more or more.endswith(b"\n"):
                    break
            raise InputError(
                f"line is {megabytes(size)}, over the {megabytes(limit)} limit "
                "(raise it with {max_line_bytes})",
                path=name,
                line=line_no,
                options=("max_line_bytes",),
            )
        offset = spool.append(chunk) if spool is not None else None
        if chunk.endswith(b"\r\n"):
            raw, eol = chunk[:-2], b"\r\n"
        elif chunk.endswith(b"\n"):
            raw, eol = chunk[:-1], b"\n"
        else:
            raw, eol = chunk, b""
        body = raw[3:] if line_no == 1 and raw.startswith(BOM) else raw
        if line_no == 1 and body.lstrip()[:1] in (b"{", b"[") and not is_json(body):
            # Not JSON on its own: perhaps the first line of a pretty-printed whole document.
            document, rest = _try_document(chunk, buffered, name)
            if document is not None:
                if spool is not None:
                    spool.append(rest)
                    spool.flush()
                yield document
                return
            buffered = io.BytesIO(rest)  # not a document after all: go on with the lines after line 1
        if not eol and body.startswith(b"{") and not is_json(body) and not options.skip_invalid:
            # The file ends mid-record: a line its writer (a running agent) has not finished. After complete
            # records, not an error, and not yet a line: it is not read (an archived original keeps its bytes,
            # in the spool). A last line that is no record at all is still an error.
            _cut_off(line_no, name, cut_off, first=not any_record)
            break
        record = read_line(raw, eol, line_no, name, options, body=body, offset=offset)
        any_record = any_record or record.kind == "passthrough"
        yield record
        if not eol:
            break  # the end of the file when the reader got there: what a writer adds since is not read
    if spool is not None:
        spool.flush()
    if not any_record:
        raise InputError("empty file (no JSON records)", path=name)


def _cut_off(line_no: int, name: str, cut_off: list[int] | None, *, first: bool) -> None:
    """Note a last line cut off mid-record; with no record before it, nothing is left to read: said as a
    session its client has only begun to write, not as invalid JSON."""
    if first:
        raise InputError(
            "cut off mid-record (no newline, not JSON), with no record before it: a session still being "
            "written?",
            path=name,
            line=line_no,
        )
    if cut_off is not None:
        cut_off.append(line_no)


def read_line(
    raw: bytes,
    eol: bytes,
    line_no: int,
    name: str,
    options: ReadOptions,
    *,
    body: bytes | None = None,
    offset: int | None = None,
) -> Record:
    """The record of one line (``raw`` without its ``eol``; ``body`` less a byte-order mark): blank, an
    object, or under ``skip_invalid`` an ``invalid`` one. ``offset``: where it is in ``options.spool``."""
    body = raw if body is None else body
    kind, data = _parse_body(body, raw, line_no, name, options)
    spool = options.spool
    # Kept in the spool: a line that reads alone (a line end, no byte-order mark), long enough to pay.
    if spool is None or offset is None or not eol or body is not raw or len(raw) < _SPOOLED_MIN:
        return Record(line_no, raw, eol, data, kind)
    return Record.kept_in(spool, offset, len(raw), line_no, eol, data, kind)


def _parse_body(
    body: bytes, raw: bytes, line_no: int, name: str, options: ReadOptions
) -> tuple[RecordKind, object]:
    if not body or (body[:1].isspace() and not body.strip()):  # strip() copies: only if it may be blank
        return "blank", None
    try:
        data = parse_line(body, name, line_no)
    except InputError as exc:
        if options.skip_invalid:
            return "invalid", exc.message
        raise
    if not isinstance(data, dict):
        kind_name = {list: "an array", str: "a string", int: "a number", float: "a number"}.get(
            type(data), "null" if data is None else type(data).__name__
        )
        if options.skip_invalid:
            return "invalid", "not an object"
        raise InputError(f"expected a JSON object, got {kind_name}: {_excerpt(raw)}", path=name, line=line_no)
    return "passthrough", data


def is_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True


def _try_document(first: bytes, stream: BinaryIO, name: str) -> tuple[Record | None, bytes]:
    """Parse the whole file as one JSON object (None if it is not one), and the rest of the stream read."""
    rest = stream.read()
    whole = first + rest
    body = whole[3:] if whole.startswith(BOM) else whole
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, rest
    if isinstance(data, list):  # an indented export: valid JSON, which "not valid JSON: '['" would deny
        raise InputError(
            "expected a JSON object, got an array (the whole file is one; JSONL is an object per line)",
            path=name,
            line=1,
        )
    if not isinstance(data, dict):
        return None, rest
    return Record(line=1, raw=whole, eol=b"", data=data), rest
