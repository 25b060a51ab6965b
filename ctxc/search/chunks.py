"""Archived transcripts cut into searchable chunks, each saying where it sits (session, turn, message,
tool, the turn's request) so a hit makes sense on its own. A chunk is at most :data:`MAX_CHARS` of one
block, cut at line ends, repeating the previous chunk's last short line (a sentence across a cut is whole)."""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ctxc.compaction.postprocess import ToolCall, call_summary
from ctxc.model import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    UnknownBlock,
)

#: Characters per chunk (about 500 tokens): read at a glance, and enough for a function or a traceback.
MAX_CHARS = 2_000
#: The last line of a chunk is repeated at the start of the next one when it is at most this long.
OVERLAP_CHARS = 300
#: Characters of the turn's request quoted in a description.
REQUEST_CHARS = 120


@dataclass(frozen=True, slots=True)
class Chunk:
    """One searchable piece of one block of one archived message."""

    conversation: int
    message: int  # the message's index in the original (what citations and ``ctxc show`` use)
    line: int
    role: str
    kind: str  # text | thinking | tool_use | tool_result | unknown
    tool: str  # the tool called or answered ("" for plain text)
    part: int  # the chunk's number within its message (0-based)
    parts: int
    #: Where the chunk sits, in words; shown with a hit and embedded, but not indexed for BM25.
    context: str
    body: str
    #: What BM25 indexes of ``context``: the session and what the block is. Positions and the request
    #: are left out: a word every chunk of a turn carries would lose its weight.
    about: str = ""


def render_input(value: Any) -> str:
    """A tool call's input as searchable text: ``key: value`` lines, strings unescaped, the rest JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "\n".join(f"{k}: {v if isinstance(v, str) else _json(v)}" for k, v in value.items())
    return _json(value)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def split_text(text: str, limit: int = MAX_CHARS) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` characters at line ends (see the module docstring);
    a longer line is cut first, at a space if it has one."""
    text = text.strip("\n")
    if len(text) <= limit:
        return [text] if text.strip() else []
    if max(map(len, text.split("\n"))) > limit:
        text = "\n".join(_cut_long_lines(text, limit))
    return _split_at_line_ends(text, limit)


def _cut_long_lines(text: str, limit: int) -> Iterator[str]:
    """The lines of ``text``, each over ``limit`` characters (a minified file, a JSON blob) cut in pieces."""
    for whole in text.split("\n"):
        line = whole
        while len(line) > limit:
            cut = line.rfind(" ", limit // 2, limit)
            cut = cut if cut > 0 else limit
            yield line[:cut]
            line = line[cut:].lstrip(" ")
        yield line


def _split_at_line_ends(text: str, limit: int) -> list[str]:
    """:func:`split_text` for a text with no line over ``limit``, found by searching for line ends: a
    piece from ``a`` holds its first line (or the repeated line and the next) and ends at the last line
    end before ``a + limit``."""
    n = len(text)
    pieces: list[str] = []
    a = 0
    held = _line_end(text, 0)
    while n - a >= limit and held < n:
        e = max(held, text.rfind("\n", a, a + limit))
        pieces.append(text[a:e])
        after = _line_end(text, e + 1)  # the line that did not fit: [e + 1, after)
        before = text.rfind("\n", a, e)
        last = a if before < 0 else before + 1  # the piece's last line: [last, e)
        if 0 < e - last <= OVERLAP_CHARS and (e - last) + (after - e - 1) + 1 <= limit:
            a, held = last, after  # the next piece repeats that short line
        else:
            a, held = e + 1, after
    pieces.append(text[a:])
    return [p for p in pieces if p.strip()]


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


def _about(use: ToolUseBlock | None, tool: str) -> str:
    """ "Bash `pytest -q`": the tool and what it worked on (its file, command or query)."""
    summary = call_summary(ToolCall(use.name, use.input)) if use is not None else ""
    return f"{tool or 'tool'} {summary}".strip()


def _blocks(m: Message, calls: Mapping[str, ToolUseBlock]) -> Iterator[tuple[str, str, str, str]]:
    """(kind, tool, what the block is, its text) of each searchable block of ``m``."""
    request = m.is_request
    for b in m.blocks:
        if isinstance(b, TextBlock):
            yield "text", "", "user request" if request else f"{m.role} message", b.text
        elif isinstance(b, ThinkingBlock):
            yield "thinking", "", f"{m.role} thinking", b.text
        elif isinstance(b, ToolUseBlock):
            yield "tool_use", b.name, f"{m.role} calls {_about(b, b.name)}", render_input(b.input)
        elif isinstance(b, ToolResultBlock):
            use = calls.get(b.tool_use_id)
            tool = (use.name if use else b.name) or ""
            error = " (error)" if b.is_error else ""
            yield "tool_result", tool, f"{_about(use, tool)} result{error}", b.text
        elif isinstance(b, UnknownBlock) and b.text:
            yield "unknown", b.type, f"{m.role} {b.type} block", b.text


def chunk_messages(
    messages: Sequence[Message], *, source: str, fmt: str, conversations: int = 1
) -> Iterator[Chunk]:
    """Every chunk of ``messages`` (one transcript, all its conversations), in message order."""
    name = "stdin" if source in ("", "-") else source.replace("\\", "/").rsplit("/", 1)[-1]
    session = f"{name} ({fmt})"
    calls = {b.id: b for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    totals = collections.Counter(m.conversation for m in messages)
    turn: collections.Counter[int] = collections.Counter()
    request: dict[int, str] = {}
    for m in messages:
        conv = m.conversation
        asks = m.is_request
        if asks:
            turn[conv] += 1
            text = " ".join(" ".join(b.text for b in m.blocks if isinstance(b, TextBlock)).split())
            request[conv] = text if len(text) <= REQUEST_CHARS else text[: REQUEST_CHARS - 1] + "…"
        pieces = [
            (kind, tool, what, piece)
            for kind, tool, what, text in _blocks(m, calls)
            for piece in split_text(text)
        ]
        conv_label = f"conversation {conv}, " if conversations > 1 else ""
        where = (
            f"{session}, {conv_label}turn {turn[conv]} (message {m.index} of {totals[conv]}, line {m.line})"
        )
        for n, (kind, tool, what, body) in enumerate(pieces):
            context = f"{where}: {what}"
            if len(pieces) > 1:
                context += f", part {n + 1} of {len(pieces)}"
            req = request.get(conv)
            if req and not (asks and kind == "text"):  # a request needs no quote of itself
                context += f". Request: “{req}”"
            yield Chunk(
                conv, m.index, m.line, m.role, kind, tool, n, len(pieces), context, body, f"{session}: {what}"
            )


def chunk_transcript(transcript: Transcript, *, source: str | None = None) -> Iterator[Chunk]:
    name = source if source is not None else transcript.source
    return chunk_messages(
        transcript.messages, source=name, fmt=transcript.format, conversations=transcript.conversations
    )
