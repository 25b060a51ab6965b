"""Untrusted text on a terminal: control characters made visible, never obeyed (an escape sequence could
retitle the window or write the clipboard). Machine outputs are written byte for byte."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

#: C0 controls but tab and newline, DEL, and C1 controls (a terminal may read U+009B as CSI).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: The same but a CRLF's carriage return: what :func:`visible` escapes.
_ESCAPED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")

#: The width of a console off a terminal: lines to a pipe or file are never wrapped (each row stays one line).
UNWRAPPED = 1 << 16


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def visible(text: str) -> str:
    """``text`` with each control character as a Python-style escape (ESC as ``\\x1b``) but tab, newline
    and a CRLF's carriage return (a lone one could hide the line)."""
    # A character class alone is matched at C speed: text without controls (most) is not run through _ESCAPED.
    return text if _CONTROL.search(text) is None else _ESCAPED.sub(_escape, text)


def visible_console(**options: Any) -> Any:
    """A rich Console that shows control characters as :func:`visible` does (rich strips only a few), for
    text that reached a renderable unescaped."""
    from rich.console import Console, RenderHook
    from rich.segment import Segment
    from rich.text import Text

    class _VisibleConsole(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            if self.is_terminal:
                # rich wraps a long line between words (a path between its segments: _WrapHook); left to
                # the terminal, it would break mid-number.
                # Off a terminal the console is UNWRAPPED wide: no line is wrapped at all.
                kwargs.pop("soft_wrap", None)
            # Strings before rich sees them: it would drop a BEL that should show as \x07.
            super().print(*(visible(o) if isinstance(o, str) else o for o in objects), **kwargs)

        def _render_buffer(self, buffer: Any) -> str:
            return super()._render_buffer(
                Segment(visible(text), style, control) if not control else Segment(text, style, control)
                for text, style, control in buffer
            )

    class _WrapHook(RenderHook):
        """Every text printed wraps as :class:`Wrapped` does, like the cells of a table."""

        def process_renderables(self, renderables: list[Any]) -> list[Any]:
            return [Wrapped(r) if isinstance(r, Text) else r for r in renderables]

    console = _VisibleConsole(**options)
    console.push_render_hook(_WrapHook())
    return console


def stderr_console() -> Any:
    """The console of progress, warnings and errors (control characters shown, never obeyed)."""
    return visible_console(stderr=True, highlight=False, **width_for(sys.stderr))


def width_for(stream: Any) -> dict[str, Any]:
    """A console's width option for ``stream``: the terminal's own, else :data:`UNWRAPPED`."""
    try:
        terminal = stream is not None and stream.isatty()
    except ValueError:  # a closed stream
        terminal = False
    return {} if terminal else {"width": UNWRAPPED}


#: What a line may break between: words, and a path's segments each with its slashes ("/home/", "src/").
_PIECE = re.compile(r"/*[^\s/]+/*|/+")
#: Where a piece wider than the whole line may still be folded before a character fold: after these.
_SOFT = re.compile(r"[_\-.]+(?=[^_\-.])")


def break_offsets(plain: str, width: int) -> list[int]:
    """Where lines of ``plain`` (no newline) start so each fits ``width`` cells: at spaces and after '/';
    a piece wider than ``width`` is folded after its last '_', '-' or '.' that fits, else at ``width``."""
    from rich.cells import cell_len

    offsets: list[int] = []
    start = used = end = 0  # the line so far: where it starts, its cells, where its last piece ends
    for piece in _PIECE.finditer(plain):
        used += cell_len(plain[end : piece.end()])
        end = piece.end()
        if used <= width:
            continue
        if plain[start : piece.start()].strip():  # the piece goes to a line of its own
            offsets.append(start := piece.start())
        while (cut := _fits(plain, start, end, width)) < end:
            soft = [m.end() for m in _SOFT.finditer(plain, start + 1, cut + 1)]
            offsets.append(start := max(soft, default=max(cut, start + 1)))
        used = cell_len(plain[start:end])
    return offsets


def _fits(plain: str, start: int, end: int, width: int) -> int:
    """How far ``plain[start:end]`` fits in ``width`` cells (``end`` if it all does); looks at no more than
    a line's worth, so a long word costs no more than a short one."""
    from rich.cells import cell_len, chop_cells

    chunk = plain[start : min(end, start + width + 1)]
    if cell_len(chunk) <= width:
        return start + len(chunk)
    return start + len(chop_cells(chunk, width)[0])


@dataclass(frozen=True)
class Wrapped:
    """Rich text that wraps at spaces and after each '/', so a path is folded only between its segments
    and a tool name only after a '_' (rich's own wrapping cuts a long word anywhere)."""

    text: Any  # rich.text.Text

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.cells import cell_len
        from rich.measure import Measurement

        plain = self.text.plain
        pieces = [cell_len(m.group()) for m in _PIECE.finditer(plain)]
        return Measurement(max(pieces, default=1), max(cell_len(line) for line in plain.split("\n")))

    def __rich_console__(self, console: Any, options: Any) -> Any:
        if options.no_wrap or self.text.no_wrap or options.overflow == "ignore":
            yield self.text
            return
        lines = []
        for line in self.text.split("\n", allow_blank=True):
            *broken, last = line.divide(break_offsets(line.plain, options.max_width))
            for part in broken:
                part.rstrip()  # the spaces a line was broken at
            lines += [*broken, last]
        yield self.text.blank_copy("\n").join(lines)
