"""Reading JSONL (and whole-document JSON) into :class:`Record` objects, exactly and explicitly.

Every record keeps the bytes it was read from, so writing a file back unchanged is a byte copy. Bad
input is never guessed around: a line that is not JSON, not an object, not UTF-8 or too large raises an
:class:`InputError` naming the file and line, unless ``skip_invalid`` asks to keep such lines as opaque
``invalid`` records (they are still written back verbatim, so nothing is lost).
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson

from ctxc.errors import InputError
from ctxc.model import Record

DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024
_SNIFF_BYTES = 8192
_READ_BUFFER = 1 << 20
BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    skip_invalid: bool = False
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES


def source_name(src: str | os.PathLike[str] | BinaryIO) -> str:
    if isinstance(src, str | os.PathLike):
        return "-" if str(src) == "-" else str(src)
    return getattr(src, "name", None) or "-"


def open_binary(src: str | os.PathLike[str] | BinaryIO) -> tuple[str, BinaryIO]:
    """Open a path (``-`` is stdin) or take an already open binary stream."""
    if not isinstance(src, str | os.PathLike):
        return source_name(src), src
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


def named_bytes(name: str, data: bytes) -> io.BytesIO:
    """A binary stream over ``data`` that reports ``name`` in errors, as the file would."""
    stream = io.BytesIO(data)
    stream.name = name
    return stream


def _excerpt(raw: bytes, limit: int = 60) -> str:
    text = raw[:limit].decode("utf-8", errors="replace")
    return repr(text + ("…" if len(raw) > limit else ""))


def _fmt_size(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB"


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


def iter_records(stream: BinaryIO, name: str, options: ReadOptions = ReadOptions()) -> Iterator[Record]:
    """Yield the records of a stream lazily, one per physical line.

    A file whose first line is not JSON on its own but which parses as one JSON document (a pretty
    printed ``.traj`` file, say) is yielded as a single record holding the whole document.
    """
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
                f"line is {_fmt_size(size)}, over the {_fmt_size(limit)} limit (raise it with --max-line-mb)",
                path=name,
                line=line_no,
            )
        if chunk.endswith(b"\r\n"):
            raw, eol = chunk[:-2], b"\r\n"
        elif chunk.endswith(b"\n"):
            raw, eol = chunk[:-1], b"\n"
        else:
            raw, eol = chunk, b""
        body = raw[3:] if line_no == 1 and raw.startswith(BOM) else raw
        if line_no == 1 and body.lstrip()[:1] in (b"{", b"[") and not _is_json(body):
            # Not JSON on its own: perhaps the first line of a pretty-printed whole document.
            document, rest = _try_document(chunk, buffered)
            if document is not None:
                yield document
                return
            buffered = io.BytesIO(rest)  # not a document after all: go on with the lines after line 1
        record = read_line(raw, eol, line_no, name, options, body=body)
        any_record = any_record or record.kind == "passthrough"
        yield record
    if not any_record:
        raise InputError("empty file (no JSON records)", path=name)


def read_line(
    raw: bytes, eol: bytes, line_no: int, name: str, options: ReadOptions, *, body: bytes | None = None
) -> Record:
    """The record of one physical line (``raw`` without its ``eol``): blank, an object, or, under
    ``skip_invalid``, an ``invalid`` record for a line that is not a JSON object (else InputError).
    ``body``: the line less a byte-order mark, if it had one."""
    body = raw if body is None else body
    if not body or (body[:1].isspace() and not body.strip()):  # strip() copies: only if it may be blank
        return Record(line=line_no, raw=raw, eol=eol, kind="blank")
    try:
        data = parse_line(body, name, line_no)
    except InputError as exc:
        if options.skip_invalid:
            return Record(line=line_no, raw=raw, eol=eol, kind="invalid", data=exc.message)
        raise
    if not isinstance(data, dict):
        kind_name = {list: "an array", str: "a string", int: "a number", float: "a number"}.get(
            type(data), "null" if data is None else type(data).__name__
        )
        if options.skip_invalid:
            return Record(line=line_no, raw=raw, eol=eol, kind="invalid", data="not an object")
        raise InputError(f"expected a JSON object, got {kind_name}: {_excerpt(raw)}", path=name, line=line_no)
    return Record(line=line_no, raw=raw, eol=eol, data=data)


def _is_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True


def _try_document(first: bytes, stream: BinaryIO) -> tuple[Record | None, bytes]:
    """Parse the whole file as one JSON object; on failure return the unread remainder of the stream."""
    rest = stream.read()
    whole = first + rest
    body = whole[3:] if whole.startswith(BOM) else whole
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, rest
    if not isinstance(data, dict):
        return None, rest
    return Record(line=1, raw=whole, eol=b"", data=data), b""
