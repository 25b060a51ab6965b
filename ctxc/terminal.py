"""Untrusted text on a terminal: control characters made visible, never obeyed (an escape sequence could
retitle the window or write the clipboard). Machine outputs are written byte for byte. And the layout of
text and tables to the terminal's width with no value cut."""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

#: The bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): they reorder
#: what a terminal shows after them, so text could read other than it is ("Trojan Source").
_BIDI = "\u202a-\u202e\u2066-\u2069"
#: C0 controls but tab and newline, DEL, C1 controls (a terminal may read U+009B as CSI) and the bidi ones.
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
#: The same but a CRLF's carriage return: what :func:`visible` escapes.
_ESCAPED = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI}]|\r(?!\n)")
#: Every control character, and the bidi ones: what :func:`one_line` escapes.
_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
#: Spaces that end a line: a table's padding, which a pipe or file does without.
_TRAILING = re.compile("[ \t]+(?=\n)")

#: The width of a console off a terminal: lines to a pipe or file are never wrapped (each row stays one line).
UNWRAPPED = 1 << 16


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with each control character as a Python-style escape (ESC as ``\\x1b``, RIGHT-TO-LEFT
    OVERRIDE as ``\\u202e``) but tab, newline and a CRLF's carriage return (a lone one could hide the
    line)."""
    # A character class alone is matched at C speed: text without controls (most) is not run through _ESCAPED.
    return text if _CONTROL.search(text) is None else _ESCAPED.sub(_escape, text)


def one_line(text: str) -> str:
    """``text`` with every control character escaped, tab and newline too: a file name or a diagnostic
    that must stay on its one line (a newline in a name would start a line that looks like another)."""
    return _ONE_LINE.sub(_escape, text)


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
            rendered = super()._render_buffer(
                Segment(visible(text), style, control) if not control else Segment(text, style, control)
                for text, style, control in buffer
            )
            # A terminal keeps rich's layout (a live display overwrites a line with its padding).
            return rendered if self.is_terminal else _TRAILING.sub("", rendered)

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


# Fitting tables. rich shrinks a table that is too wide by cutting its widest columns ("assista…");
# Fitted sets the widths so no value is cut: natural widths, else the stacked columns one under another,
# else each column at least its longest word (a path's longest segment) and a long text at least
# _TEXT_MIN, else fewer columns, else column groups that repeat the keys, at last a block per row.

#: How narrow a free-text (``fold``) column may get; a longer word is folded onto the next line.
_FOLD_MIN = 16
#: How narrow a column of text longer than this may get before folding: narrower, it reads a word a line.
_TEXT_MIN = 24


@dataclass
class Fitted:
    """A rich table laid out so that no value is cut: ``optional`` columns are left out, in that order, when
    it cannot fit otherwise; the ``keys`` leading columns identify a row (repeated when columns go in
    groups); ``fold`` names free-text columns whose long words may be folded; ``stack`` names columns
    shown one under another in one column (a file above its verdict) when they do not fit side by side."""

    table: Any
    _: KW_ONLY
    optional: Sequence[str] = ()
    keys: int = 0
    fold: Sequence[str] = ()
    stack: Sequence[str] = ()

    def __rich_console__(self, console: Any, options: Any) -> Any:
        table, fold = self.table, self.fold
        for column in table.columns:
            column.overflow = "fold"  # a word wider than its column goes on the next line, never "…"
        names = [str(c.header) for c in table.columns]
        shown = list(range(len(names)))
        choices = [list(shown)]
        for name in self.optional:
            if name in names and names.index(name) in shown:
                shown.remove(names.index(name))
                choices.append(list(shown))
        layouts = [table if len(choice) == len(names) else _subtable(table, choice) for choice in choices]
        stacked = [_stacked(table, self.stack)] if len(set(self.stack) & set(names)) > 1 else []
        if stacked and set(self.stack) & set(fold):  # the stacked column folds as its parts do
            fold = [*fold, *(str(c.header) for c in stacked[0].columns if str(c.header) not in names)]
        if stacked and _fit(console, options, table, (), wrap=False):
            yield table  # side by side only when no stacked value wraps
            return
        # Stacking a column is better than leaving it out, which is better than folding a word; folding is
        # better than a block per row.
        for folding in ((), fold) if fold else ((),):
            for narrower in [*stacked, *layouts]:
                if _fit(console, options, narrower, folding):
                    yield narrower
                    return
        if self.keys and len(shown) > self.keys:
            groups = _groups(console, options, table, shown, self.keys, fold)
            if groups is not None:
                for n, group in enumerate(groups):
                    if n:
                        yield ""
                    yield group
                return
        yield from _row_blocks(table, names)


def _measures(
    console: Any, options: Any, table: Any, fold: Sequence[str]
) -> tuple[list[int], list[int], int]:
    """Each column's narrowest and natural width (with its padding), and the width of the borders."""
    for column in table.columns:
        column.width = None
    # rich measures columns only privately; these are the measures its own layout uses.
    measures = [table._measure_column(console, options, c) for c in table.columns]
    hi, extra = [m.maximum for m in measures], table._extra_width
    # A column that may not wrap is as wide as its widest value (rich would crop it); a long text is not
    # squeezed below _TEXT_MIN (a short one wraps in a few lines whatever its width).
    lo = [
        h if column.no_wrap else m.minimum if h <= _TEXT_MIN else max(m.minimum, _TEXT_MIN)
        for column, m, h in zip(table.columns, measures, hi, strict=True)
    ]
    # Free-text columns give up width, widest first, only as far as the table needs.
    foldable = [i for i, c in enumerate(table.columns) if str(c.header) in fold]
    while sum(lo) + extra > options.max_width:
        widest = max(foldable, key=lambda i: lo[i], default=None)
        if widest is None or lo[widest] <= _FOLD_MIN:
            break
        lo[widest] -= 1
    return lo, hi, extra


def _fit(console: Any, options: Any, table: Any, fold: Sequence[str], *, wrap: bool = True) -> bool:
    """Set the column widths so the table fits ``options.max_width`` with no word cut (and, unless
    ``wrap``, no value wrapped); False if it cannot."""
    lo, hi, extra = _measures(console, options, table, fold)
    room = options.max_width - extra
    if sum(hi) <= room:
        return True  # rich lays it out at its natural widths
    if not wrap or sum(lo) > room:
        return False
    # The spare room goes to the columns that want least more first, each whole while it can be (a path
    # on one line reads better than every column wrapping a little); then in equal shares.
    widths, spare = list(lo), room - sum(lo)
    wanting = sorted(range(len(lo)), key=lambda i: hi[i] - lo[i])
    for n, i in enumerate(wanting):
        want = hi[i] - lo[i]
        given = want if want <= spare else spare // (len(wanting) - n)
        widths[i] += given
        spare -= given
    widths[wanting[-1]] += spare
    for column, width in zip(table.columns, widths, strict=True):
        column.width = max(1, width - table._get_padding_width(column._index))
    return True


def _subtable(table: Any, shown: Sequence[int], *, title: bool = True) -> Any:
    """``table`` with only the columns numbered ``shown`` (same rows, same style)."""
    sub = copy.copy(table)
    sub.columns = [copy.copy(table.columns[number]) for number in shown]
    for index, column in enumerate(sub.columns):
        column._index = index
    sub.title = table.title if title else None
    return sub


def _stacked(table: Any, names: Sequence[str]) -> Any:
    """``table`` with the columns ``names`` one under another in the first one's place."""
    from rich.console import Group

    headers = [str(c.header) for c in table.columns]
    stacked = [headers.index(name) for name in names if name in headers]
    kept = [i for i in range(len(headers)) if i not in stacked[1:]]
    sub = _subtable(table, kept)
    column = sub.columns[kept.index(stacked[0])]
    column.header = "\n".join(headers[i] for i in stacked if headers[i])
    column._cells = [Group(*cells) for cells in zip(*(table.columns[i]._cells for i in stacked), strict=True)]
    return sub


def _groups(
    console: Any, options: Any, table: Any, shown: list[int], keys: int, fold: Sequence[str]
) -> list[Any] | None:
    """The table as several, each the key columns and as many of the others as fit; None if even one
    more column beside the keys does not fit."""
    head, rest = shown[:keys], shown[keys:]
    groups: list[Any] = []
    while rest:
        take = 1
        while take < len(rest) and _fit(console, options, _subtable(table, head + rest[: take + 1]), fold):
            take += 1
        group = _subtable(table, head + rest[:take], title=not groups)
        if not _fit(console, options, group, fold):
            return None
        groups.append(group)
        rest = rest[take:]
    return groups


def _row_blocks(table: Any, names: Sequence[str]) -> Any:
    """One block per row, a line per column (``name  value``): the layout of last resort."""
    from rich.table import Table
    from rich.text import Text

    if table.title:
        yield Text(table.title, style="table.title") if isinstance(table.title, str) else table.title
    columns = [list(c.cells) for c in table.columns]
    width = max((len(n) for n in names), default=0)
    for row in range(len(table.rows)):
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True, min_width=width)
        grid.add_column(overflow="fold")
        for name, cells_of in zip(names, columns, strict=True):
            grid.add_row(Text(name), cells_of[row])
        if row:
            yield ""
        yield grid
