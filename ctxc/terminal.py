"""Untrusted text on a terminal: control characters made visible, never obeyed (an escape sequence could
retitle the window or write the clipboard). Machine outputs are written byte for byte."""

from __future__ import annotations

import re
import sys
from typing import Any

#: C0 controls but tab and newline, DEL, and C1 controls (a terminal may read U+009B as CSI).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: The same but a CRLF's carriage return: what :func:`visible` escapes.
_ESCAPED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")
#: Every control character: what :func:`one_line` escapes.
_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f]")

#: The width of a console off a terminal: lines to a pipe or file are never wrapped (each row stays one line).
UNWRAPPED = 1 << 16


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def visible(text: str) -> str:
    """``text`` with each control character as a Python-style escape (ESC as ``\\x1b``) but tab, newline
    and a CRLF's carriage return (a lone one could hide the line)."""
    # A character class alone is matched at C speed: text without controls (most) is not run through _ESCAPED.
    return text if _CONTROL.search(text) is None else _ESCAPED.sub(_escape, text)


def one_line(text: str) -> str:
    """``text`` with every control character escaped, tab and newline too: a file name or a diagnostic
    that must stay on its one line (a newline in a name would start a line that looks like another)."""
    return _ONE_LINE.sub(_escape, text)


def visible_console(**options: Any) -> Any:
    """A rich Console that shows control characters as :func:`visible` does (rich strips only a few), for
    text that reached a renderable unescaped."""
    from rich.console import Console
    from rich.segment import Segment

    class _VisibleConsole(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            if self.is_terminal:
                # rich wraps a long line between words; left to the terminal, it would break mid-number.
                # Off a terminal the console is UNWRAPPED wide: no line is wrapped at all.
                kwargs.pop("soft_wrap", None)
            # Strings before rich sees them: it would drop a BEL that should show as \x07.
            super().print(*(visible(o) if isinstance(o, str) else o for o in objects), **kwargs)

        def _render_buffer(self, buffer: Any) -> str:
            return super()._render_buffer(
                Segment(visible(text), style, control) if not control else Segment(text, style, control)
                for text, style, control in buffer
            )

    return _VisibleConsole(**options)


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
