"""Showing untrusted text on a terminal: control characters made visible, never obeyed.

Transcripts hold whatever tools printed and users pasted, and file names can hold anything but ``/``.
An escape sequence in them, printed raw, would retitle the window, clear the screen or write the
clipboard (OSC 52). Every human-readable output (tables, ``show`` text, progress and error lines,
warnings) goes through :func:`visible`; machine outputs (``--format json``, ``csv``, ``raw``, compacted
and restored transcripts) are written byte for byte.
"""

from __future__ import annotations

import re
import sys
from typing import Any

#: C0 controls but tab and newline, DEL, and the C1 controls (U+0080-U+009F: a terminal may read
#: U+009B as CSI, the same as ESC [).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

#: The width of a console that is not a terminal: a pipe or a file has no width, and its lines are never
#: wrapped (grep and awk read one record a line).
UNWRAPPED = 1 << 16


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def visible(text: str) -> str:
    """``text`` with each control character written as a Python-style escape: ESC as ``\\x1b``, BEL
    as ``\\x07``, CSI as ``\\x9b``. Tab and newline stay (multi-line text keeps its shape), and so does
    the carriage return of a CRLF line end; a lone carriage return, which could hide what came
    before it on the line, shows as ``\\x0d``."""
    if _CONTROL.search(text) is None:
        return text
    if "\r\n" in text:
        return "\r\n".join(_CONTROL.sub(_escape, part) for part in text.split("\r\n"))
    return _CONTROL.sub(_escape, text)


def visible_console(**options: Any) -> Any:
    """A rich Console whose output shows control characters in the text it prints as :func:`visible`
    does: the last line of defence for text that reached a renderable without going through it (rich
    itself strips only BEL, backspace, VT, FF and CR). The styles rich adds are not touched."""
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
    """A console's width option for ``stream``: the terminal's own, and :data:`UNWRAPPED` for a pipe or
    a file (a line is never wrapped there, so grep and awk see one record a line)."""
    try:
        terminal = stream is not None and stream.isatty()
    except ValueError:  # a closed stream
        terminal = False
    return {} if terminal else {"width": UNWRAPPED}
