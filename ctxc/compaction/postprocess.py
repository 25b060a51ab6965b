"""Per-tool post-processors, found by tool name, else by the shape of the call's input: searches keep
the top hits, file reads the lines the current request mentions, commands their tail and error lines."""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Any

import orjson

#: How many results a shrunk search keeps.
SEARCH_KEEP = 3
#: Lines of context kept around each relevant line of a file read.
READ_CONTEXT = 5
#: Final lines kept of a command's output.
COMMAND_TAIL = 20
#: A kept line longer than this is clipped (minified JSON or a bundle on one line would defeat the point).
MAX_LINE_CHARS = 1000
#: At most this many request terms are matched (a pasted log as a request must not build a huge regex).
MAX_TERMS = 64

# Case-insensitive patterns are matched against lowercased lines: re.IGNORECASE is much slower.
ERROR_RE = re.compile(r"error|exception|traceback|fail|fatal|panic")
_TRACEBACK_START = re.compile(r"^\s*Traceback \(most recent call last\):")
#: pytest's failure detail lines: ``E   assert 1 == 2`` and the failing source line ``>   assert x``.
_PYTEST_DETAIL = re.compile(r"^[E>] {2,}")
_STATUS_RE = re.compile(r"exit(?:ed with)? code|exit_code|exit status")
#: A numbered line as viewers print it: ``  12→x`` (Claude Code), ``  12\tx`` (cat -n), ``12:x``, ``12|x``.
_NUMBERED = re.compile(r"^\s*\d+(?:→|\t|:|\|)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
_SEARCH_HEADER = re.compile(
    r"^(?:found \d+|\d+ (?:files?|matches|results?)\b|web search results|no (?:files|matches))", re.IGNORECASE
)

_STOPWORD_TEXT = """
    about above after again against also among another anything around because been before being
    below between both cannot could does doing done down during each either else even every first
    from further given have having here hers however into itself just know last like looks make
    makes many maybe more most much must need needs next only other ours over please same seems
    should show since some still such sure take than that their theirs them then there these they
    thing things this those though through under until upon very want wants well were what whatever
    when where whether which while will with within without would your yours yourself okay thanks
    thank let's lets now file files code line lines function functions method methods class classes
    value values change changes update updates check find look read write using used test tests work
    works working run running
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_QUERY_KEYS = ("pattern", "query", "q", "regex", "glob")
_PATH_KEYS = ("file_path", "path", "filename", "filepath", "notebook_path")
_COMMAND_KEYS = ("command", "cmd", "code", "script")
_HEXISH = re.compile(r"[0-9a-f]{7,}")


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    input: Any = None


@dataclass(frozen=True, slots=True)
class Shrunk:
    text: str
    note: str  # a short phrase saying what was cut


@dataclass(frozen=True, slots=True)
class Request:
    """The current user request and the terms a file read is filtered by."""

    text: str = ""
    terms: tuple[str, ...] = ()

    @classmethod
    def of(cls, text: str) -> Request:
        return cls(text, request_terms(text))

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """Any of the terms (which are lowercase), to search lowercased lines with."""
        return re.compile("|".join(map(re.escape, self.terms))) if self.terms else None


Processor = Callable[[str, ToolCall, Request], Shrunk | None]


@dataclass(frozen=True, slots=True)
class _Entry:
    kind: str
    names: frozenset[str]  # lower-case tool names
    shape_keys: tuple[str, ...]  # input keys that select it when no name does
    fn: Processor


def kind_of(call: ToolCall) -> str | None:
    return entry.kind if (entry := _find(call)) else None


def _find(call: ToolCall) -> _Entry | None:
    low = call.name.lower()
    # ``mcp__server__search`` and ``functions.shell`` are also known by their last segment.
    for variant in [low, *(low.rsplit(sep, 1)[1] for sep in ("__", ".", "/") if sep in low)]:
        for entry in _PROCESSORS:
            if variant in entry.names:
                return entry
    if isinstance(call.input, Mapping):
        for entry in _PROCESSORS:
            if any(key in call.input for key in entry.shape_keys):
                return entry
    return None


def postprocess(text: str, call: ToolCall, request: Request, citation: str) -> str | None:
    """The shrunk result text with its note line; ``None`` if no processor applies, or the text would
    not be shorter (the caller compares tokens as well)."""
    entry = _find(call)
    shrunk = entry.fn(text, call, request) if entry is not None else None
    if shrunk is None:
        return None
    summary = call_summary(call)
    about = f" of {summary}" if summary else ""
    note = f"[ctxc: {call.name or 'tool'} result{about} shrunk: {shrunk.note}; full output in {citation}]"
    out = f"{note}\n{shrunk.text}"
    return out if len(out) < len(text) else None


def call_summary(call: ToolCall, limit: int = 80) -> str:
    """A short description of what the call did: its query (and where), file path, command or URL."""
    inp = call.input
    text = ""
    if isinstance(inp, Mapping):
        query, path, command = _first(inp, _QUERY_KEYS), _first(inp, _PATH_KEYS), _first(inp, _COMMAND_KEYS)
        if query:
            text = f"{query} in {path}" if path else query
        elif path:
            # str_replace_editor says what it did to the file in ``command`` ("view", "create").
            text = f"{command} {path}" if command and " " not in command and len(command) < 20 else path
        else:
            text = command or _first(inp, ("url",))
            text = text or next((v for v in inp.values() if isinstance(v, str) and v.strip()), "")
    elif isinstance(inp, str):
        text = inp
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"`{text}`" if text else ""


def _first(inp: Mapping[str, Any], keys: Sequence[str]) -> str:
    for key in keys:
        value = inp.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            # Codex writes commands as argv: ["bash", "-lc", "ls"]; the script is what matters.
            return value[-1] if len(value) == 3 and value[1] in ("-c", "-lc") else shlex.join(value)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def request_terms(text: str) -> tuple[str, ...]:
    """Identifiers (first: what a file read is about) and words of 4+ characters, lowercased, without
    stopwords, in order of first appearance."""
    identifiers: dict[str, None] = {}
    words: dict[str, None] = {}
    for w in _WORD.findall(text):
        low = w.lower()
        if low in STOPWORDS or (_HEXISH.fullmatch(low) and any(c.isdigit() for c in low)):
            continue
        is_identifier = "_" in w or any(c.isdigit() for c in w) or any(c.isupper() for c in w[1:])
        (identifiers if is_identifier else words).setdefault(low, None)
    ranked = list(identifiers) + [w for w in words if w not in identifiers]
    return tuple(ranked[:MAX_TERMS])


def unwrap(text: str) -> tuple[str, str]:
    """The readable output inside a JSON envelope (Codex's ``{"output": ...}``, MCP text parts), and its
    exit code if any: shrinking the JSON itself would cut it mid-string."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return text, ""
    data = _json(stripped)
    if isinstance(data, dict) and isinstance(data.get("output"), str):
        meta = data.get("metadata")
        code = meta.get("exit_code") if isinstance(meta, dict) else None
        return data["output"], (f"exit code {code}" if code is not None else "")
    if (
        data
        and isinstance(data, list)
        and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in data)
    ):
        return "\n".join(p["text"] for p in data), ""
    return text, ""


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def clip(line: str) -> str:
    extra = len(line) - MAX_LINE_CHARS
    return f"{line[:MAX_LINE_CHARS]}… (+{extra} chars)" if extra > 0 else line


def _elided(n: int) -> str:
    return f"… {n} line{'s' if n != 1 else ''} elided …"


def join_spans(spans: Iterable[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """Line spans ``[start, end)`` sorted, clipped to ``n`` lines and joined where they overlap, touch,
    or leave a single line between them (its elision marker would cost as much as the line)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        a, b = max(0, start), min(n, end)
        if a >= b:
            continue
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def keep_spans(lines: Sequence[str], spans: Sequence[tuple[int, int]]) -> str:
    """The lines of ``spans`` (from :func:`join_spans`), each run of dropped lines one elision marker."""
    out: list[str] = []
    last = 0
    for a, b in spans:
        if a > last:
            out.append(_elided(a - last))
        out.extend(map(clip, lines[a:b]))
        last = b
    if last < len(lines):
        out.append(_elided(len(lines) - last))
    return "\n".join(out)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def split_lines(text: str) -> list[str]:
    """The lines of ``text``: a trailing newline is not a line of output."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def shrink_search(text: str, call: ToolCall, request: Request) -> Shrunk | None:
    """Keep the top results: a JSON list's first items, blank-line separated blocks, or grep lines."""
    body, fact = unwrap(text)
    extra = f"; {fact}" if fact else ""
    links = _shrink_links(body)
    if links is not None:
        return links
    stripped = body.strip()
    if stripped.startswith("["):
        data = _json(stripped)
        if isinstance(data, list) and len(data) > SEARCH_KEEP:
            kept = "\n".join(clip(orjson.dumps(item).decode()) for item in data[:SEARCH_KEEP])
            return Shrunk(kept, _top(SEARCH_KEEP, len(data)) + extra)
    lines = split_lines(body)
    header = lines[:1] if lines and _SEARCH_HEADER.match(lines[0].strip()) else []
    if header:
        lines = list(itertools.dropwhile(lambda line: not line.strip(), lines[1:]))
    results = _results(lines)
    if len(results) <= SEARCH_KEEP:
        return None
    sep = "\n\n" if any(len(r) > 1 for r in results) else "\n"
    kept = sep.join("\n".join(clip(x) for x in r) for r in results[:SEARCH_KEEP])
    tail = f"… {_plural(len(results) - SEARCH_KEEP, 'more result')} dropped …"
    return Shrunk("\n".join([*header, kept, tail]), _top(SEARCH_KEEP, len(results)) + extra)


def _top(kept: int, n: int) -> str:
    return f"kept the top {kept} of {n} results, {n - kept} dropped"


def _results(lines: list[str]) -> list[list[str]]:
    """Results: groups split by ``--`` (grep -C) or blank lines, else one per line."""
    if any(line.strip() == "--" for line in lines):
        return _groups(lines, "--")
    groups = _groups(lines, "")
    return groups if len(groups) > 1 else [[line] for line in lines if line.strip()]


def _groups(lines: list[str], sep: str) -> list[list[str]]:
    return [list(g) for is_sep, g in itertools.groupby(lines, key=lambda s: s.strip() == sep) if not is_sep]


def _shrink_links(body: str) -> Shrunk | None:
    """Claude Code's WebSearch result: a header, a ``Links: [...]`` JSON line, then a prose digest."""
    lines = body.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("Links: ["):
            continue
        links = _json(line[len("Links: ") :])
        if not isinstance(links, list):
            return None
        header = [x for x in lines[:i] if x.strip()]
        rest = [x for x in lines[i + 1 :] if x.strip()]
        kept = [f"- {_link(item)}" for item in links[:SEARCH_KEEP]]
        note = _top(min(SEARCH_KEEP, len(links)), len(links))
        if rest:
            note += f", and the {_plural(len(rest), 'line')} of search digest"
        return Shrunk("\n".join([*header, *kept]), note)
    return None


def _link(item: Any) -> str:
    if isinstance(item, dict):
        title, url = item.get("title"), item.get("url")
        if isinstance(title, str) and isinstance(url, str):
            return clip(f"{title} <{url}>")
    return clip(orjson.dumps(item).decode())


def shrink_read(text: str, call: ToolCall, request: Request) -> Shrunk | None:
    """Keep the lines that mention the current request's terms, with context, and any header."""
    # Every per-line test is a map over the lines (the loop runs in C): a 100 MB log holds millions.
    body, _ = unwrap(text)
    lines = split_lines(body)
    n = len(lines)
    marks = list(map(_NUMBERED.match, lines))
    numbered = n - marks.count(None)
    content = sum(map(bool, map(str.strip, lines)))
    spans: list[tuple[int, int]] = []
    if content and numbered * 2 >= content:
        # Viewer headers and footers ("Here's the result of running `cat -n` on f:", "(40 more lines below)").
        first = next(i for i, m in enumerate(marks) if m is not None)
        last = n - 1 - next(i for i, m in enumerate(reversed(marks)) if m is not None)
        if first <= 3:
            spans.append((0, first))
        if n - 1 - last <= 3:
            spans.append((last + 1, n))
    pattern = request.pattern
    hits = [] if pattern is None else list(compress(range(n), map(pattern.search, map(str.lower, lines))))
    spans.extend((i - READ_CONTEXT, i + READ_CONTEXT + 1) for i in hits)
    spans = join_spans(spans, n)
    kept = sum(b - a for a, b in spans)
    if kept >= n:
        return None
    if hits:
        hit_text = "\n".join(lines[i] for i in hits).lower()
        matched = [t for t in request.terms if t in hit_text]
        terms = ", ".join(matched[:5]) + (", …" if len(matched) > 5 else "")
        around = _plural(len(hits), "line")
        note = f"kept {_plural(kept, 'line')} of {n:,} around {around} mentioning {terms}"
    else:
        note = f"no line of {_plural(n, 'line')} mentions the current request"
    return Shrunk(keep_spans(lines, spans), note)


def shrink_command(text: str, call: ToolCall, request: Request) -> Shrunk | None:
    """Keep the final output and every error line; a Python traceback is kept whole."""
    body, fact = unwrap(text)
    lines = split_lines(body)
    n = len(lines)
    tail_start = max(0, n - COMMAND_TAIL)
    head = lines[:tail_start]
    lows = list(map(str.lower, head))
    tracebacks = set(compress(range(tail_start), map(_TRACEBACK_START.match, head)))
    flagged = tracebacks.union(
        compress(range(tail_start), map(ERROR_RE.search, lows)),
        compress(range(tail_start), map(_PYTEST_DETAIL.match, head)),
        compress(range(tail_start), map(_STATUS_RE.search, lows)),
    )
    spans = [(tail_start, n)]
    errors = 0
    skip_to = 0  # lines of a traceback already kept are not looked at again
    for i in sorted(flagged):
        if i >= skip_to:
            skip_to = _traceback_end(lines, i) if i in tracebacks else i + 1
            spans.append((i, skip_to))
            errors += 1
    spans = join_spans(spans, n)
    if sum(b - a for a, b in spans) >= n:
        return None
    also = f" and {_plural(errors, 'error line')}" if errors else ""
    note = f"kept the last {_plural(n - tail_start, 'line')}{also} of {n:,}" + (f"; {fact}" if fact else "")
    return Shrunk(keep_spans(lines, spans), note)


def _traceback_end(lines: Sequence[str], start: int) -> int:
    """Past a traceback: its indented frames, then the exception line(s) up to a blank or new block."""
    j = start + 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    while j < len(lines) and (lines[j].startswith(" " * (indent + 1)) or lines[j].startswith("\t")):
        j += 1
    # The exception line ("ValueError: bad"), and its continuation lines if any.
    if j < len(lines) and lines[j].strip():
        j += 1
        while j < len(lines) and lines[j].strip() and lines[j].startswith(" " * (indent + 1)):
            j += 1
    return j


#: Tried in this order: the most specific shape first.
_PROCESSORS = (
    _Entry("search", frozenset((
        "grep", "glob", "websearch", "web_search", "searchweb", "search", "search_files", "search_file",
        "search_dir", "find_file", "find_files", "file_search", "codebase_search", "grep_search", "rg",
        "list_files", "ls",
    )), _QUERY_KEYS, shrink_search),
    _Entry("read", frozenset((
        "read", "readfile", "read_file", "view", "view_file", "open", "open_file", "cat", "read_many_files",
        "str_replace_editor", "str_replace_based_edit_tool", "webfetch", "web_fetch", "fetch", "fetchurl",
        "fetch_url",
    )), (*_PATH_KEYS, "url"), shrink_read),
    _Entry("command", frozenset((
        "bash", "shell", "exec_command", "local_shell", "execute_bash", "run", "run_ipython",
        "execute_ipython_cell", "ipython", "python", "terminal", "run_command", "run_terminal_cmd",
        "run_shell_command", "bashoutput", "write_stdin", "exec", "powershell", "cmd",
    )), _COMMAND_KEYS, shrink_command),
)  # fmt: skip
