"""dedupe: replace copies the context holds again later (a repeated tool result or long text, a file read
a later read, write or edit made out of date, repeated injected text) by a pointer to the copy that stays.
Only texts change; the model's own words, pinned messages and the last ``keep_last`` stay."""

from __future__ import annotations

import bisect
import functools
import os
import re
import shlex
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import orjson

from ctxc.compaction.base import CTXC_MARK, Change, CompactContext, Slot, StrategyResult, option, register
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock

#: Tags of text a client injects, again and again, into user turns and tool results.
INJECTED_TAGS: tuple[str, ...] = ("system-reminder", "environment_context", "user_instructions")

#: A file read's result, line by line: ``cat -n`` style numbering (Claude Code ``→``, OpenHands tab).
_NUMBERED = re.compile(r"^\s*\d+(?:→|\t)")
#: What a call does to the file at its path, by tool name (an editor tool: by its ``command``).
_TOOL_OPS = {
    **dict.fromkeys(("read", "view", "read_file", "readfile", "view_file", "open_file", "cat"), "read"),
    **dict.fromkeys(("write", "write_file", "writefile", "create_file", "create"), "write"),
    **dict.fromkeys(("edit", "multiedit", "edit_file", "editfile", "str_replace", "notebookedit"), "edit"),
}
_EDITOR_TOOLS = frozenset({"str_replace_editor", "file_editor", "str_replace_based_edit_tool"})
_EDITOR_OPS = {"view": "read", "create": "write", "str_replace": "edit", "insert": "edit"}
_PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Delete) File: (.+)$", re.MULTILINE)
_SHELL_TOOLS = frozenset(
    {"bash", "shell", "exec_command", "execute_bash", "run_terminal_cmd", "terminal", "local_shell"}
)
_PATH_KEYS = ("file_path", "path", "filename", "filepath", "target_file")
#: Input keys a read of the whole file may have; any other (an offset, a range) makes it partial.
_WHOLE_READ_KEYS = frozenset({*_PATH_KEYS, "command", "description", "explanation", "encoding"})
_WRITE_CONTENT_KEYS = ("content", "file_text", "contents", "text")
#: Shell characters that make a command more than a single read of one file.
_SHELL_META = re.compile(r"[|;&<>`$()*?\[\]{}\n]")
#: The programs :func:`shell_read` recognises, checked on the first word before ``shlex`` parses a command.
_READ_PROGRAMS = frozenset({"cat", "nl", "head", "tail", "sed"})
_UNQUOTE = str.maketrans("", "", "'\"\\")


@dataclass(frozen=True)
class DedupeConfig:
    min_block_chars: int = option(
        1024, "an untagged text block repeated verbatim is replaced from this many characters", min=1
    )
    tags: tuple[str, ...] = option(INJECTED_TAGS, "tags of injected text deduplicated at any size")
    edited_reads: bool = option(
        True,
        "replace a file read followed by an edit of that file: the read no longer shows the file as it "
        "is (false keeps it for the lines the edit did not touch; they stay in the archive either way)",
    )


@dataclass(frozen=True, slots=True)
class FileOp:
    """What a tool call did to a file: ``read`` (``whole`` when not a line range) or ``write``."""

    op: str
    path: str
    whole: bool = True


@dataclass(frozen=True, slots=True)
class _Pointer:
    """Where the copy that stays is, and what to call it in the pointer."""

    target: Slot
    what: str


@register
class Dedupe:
    name: ClassVar[str] = "dedupe"
    description: ClassVar[str] = (
        "Replace repeated tool results, superseded file reads and repeated injected text "
        "by a pointer to the copy that stays (citing the archive)"
    )
    Config: ClassVar[type[Any]] = DedupeConfig
    uses_summarizer: ClassVar[bool] = False
    best_effort: ClassVar[bool] = False

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: DedupeConfig = ctx.config(self)
        msgs = list(messages)
        # The model's own words are never rewritten, only what a client or a tool put in the context.
        editable = {pos for pos in ctx.editable(msgs) if msgs[pos].role != "assistant"}
        whole = _whole_blocks(msgs, cfg)
        whole = {s: _resolve(s, whole) for s in whole if s[0] in editable}
        last = _last_segments(msgs, cfg.tags)
        changes: list[Change] = []
        for pos in sorted(editable):
            old = msgs[pos]
            blocks = list(old.blocks)
            notes: set[str] = set()
            cite = ctx.cite(old.index)
            for bi, block in enumerate(blocks):
                if not isinstance(block, TextBlock | ToolResultBlock) or block.text.startswith(CTXC_MARK):
                    continue
                pointer = whole.get((pos, bi))
                if pointer is not None:
                    # The injected text whose last copy this is stays with the pointer.
                    segments = _segments(block.text, cfg.tags)
                    kept = [s.group(0) for s, k in segments if last.get(s.group(0)) == (pos, bi, k)]
                    new_text = "\n".join([_pointer_text(pointer, msgs, cite), *kept])
                    notes.add(pointer.what if pointer.what.startswith("same") else "superseded read")
                else:
                    new_text = _drop_segments(block.text, pos, bi, last, cfg.tags, msgs, cite)
                    if new_text == block.text:
                        continue
                    notes.add("injected text")
                blocks[bi] = replace(block, text=new_text)
            if notes:
                changes.append((pos, blocks, ", ".join(sorted(notes))))
        actions = ctx.shrink_all(msgs, changes, self.name, "dedupe")
        return StrategyResult(tuple(msgs), tuple(actions))


def _resolve(slot: Slot, whole: Mapping[Slot, _Pointer]) -> _Pointer:
    """Follow a chain of pointers (a read superseded by one superseded in turn) to the copy that stays;
    it is "the same" only if every link is."""
    pointer, seen = whole[slot], {slot}
    what = pointer.what
    while pointer.target in whole and pointer.target not in seen:
        seen.add(pointer.target)
        pointer = whole[pointer.target]
        if not pointer.what.startswith("same"):
            what = pointer.what
    return _Pointer(pointer.target, what)


def _whole_blocks(msgs: Sequence[Message], cfg: DedupeConfig) -> dict[Slot, _Pointer]:
    """Blocks whose whole content has a later copy (or a later read or write superseding it)."""
    calls = {b.id: b for m in msgs for b in m.blocks if isinstance(b, ToolUseBlock)}
    results = {b.tool_use_id: b for m in msgs for b in m.blocks if isinstance(b, ToolResultBlock)}
    out: dict[Slot, _Pointer] = {}
    later_result: dict[tuple[str, str, str, bool], Slot] = {}
    later_text: dict[str, Slot] = {}
    # The newest read and write of each path seen so far, walking backwards.
    later_reads: dict[str, list[tuple[Slot, FileOp, str]]] = {}
    # Worked out once per text, for every later read it is compared with: numbered from 1? sorted line hashes.
    from_line_one = functools.cache(lambda text: _listing(text).from_line_one)
    line_hashes = functools.cache(lambda text: array("q", sorted(map(hash, text.splitlines()))))
    later_write: dict[str, Slot] = {}
    later_edit: dict[str, Slot] = {}
    # What each call does to a file, by identity, worked out once: a call is met again at its result.
    ops = {id(b): file_op(b.name, b.input) for m in msgs for b in m.blocks if isinstance(b, ToolUseBlock)}

    for pos in range(len(msgs) - 1, -1, -1):
        m = msgs[pos]
        for bi in range(len(m.blocks) - 1, -1, -1):
            block = m.blocks[bi]
            if isinstance(block, ToolUseBlock):
                op, result = ops[id(block)], results.get(block.id)
                failed = result is None or result.is_error or "error" in result.text[:200].lower()
                # A failed write or edit changed nothing.
                if op is not None and op.op in ("write", "edit") and not failed:
                    (later_write if op.op == "write" else later_edit)[op.path] = (pos, bi)
                continue
            if isinstance(block, TextBlock):
                if m.role in ("user", "system") and len(block.text) >= cfg.min_block_chars:
                    if block.text in later_text:
                        out[(pos, bi)] = _Pointer(later_text[block.text], "same text")
                    else:
                        later_text[block.text] = (pos, bi)
                continue
            if not isinstance(block, ToolResultBlock) or block.images or block.text.startswith(CTXC_MARK):
                continue
            use = calls.get(block.tool_use_id)
            if use is None:
                continue
            try:
                canonical = orjson.dumps(use.input, option=orjson.OPT_SORT_KEYS).decode()
            except TypeError:
                canonical = repr(use.input)
            key = (use.name, canonical, block.text, block.is_error)
            if key in later_result:
                out[(pos, bi)] = _Pointer(later_result[key], "same result")
                continue
            later_result[key] = (pos, bi)
            op = ops[id(use)]
            if op is None or op.op != "read" or block.is_error or not block.text.strip():
                continue
            later = later_reads.get(op.path, ())
            superseded = _superseding_read(block.text, op, later, from_line_one, line_hashes)
            if superseded is not None:
                out[(pos, bi)] = _Pointer(superseded, f"read of {op.path} superseded by the read")
            elif op.path in later_write:
                out[(pos, bi)] = _Pointer(later_write[op.path], f"read of {op.path} superseded by the write")
            elif cfg.edited_reads and op.path in later_edit:
                out[(pos, bi)] = _Pointer(
                    later_edit[op.path], f"read of {op.path} out of date after the edit"
                )
            later_reads.setdefault(op.path, []).append(((pos, bi), op, block.text))
    return out


def _superseding_read(
    text: str,
    op: FileOp,
    later: Sequence[tuple[Slot, FileOp, str]],
    from_line_one: Callable[[str], bool],
    line_hashes: Callable[[str], array[int]],
) -> Slot | None:
    """The nearest later read of the same file that holds everything ``text`` holds."""
    if not later:
        return None
    earlier = _listing(text)
    for slot, later_op, later_text in reversed(later):  # nearest first
        if _holds(later_text, earlier, line_hashes(later_text)):
            return slot
        if op.whole and later_op.whole and earlier.from_line_one and from_line_one(later_text):
            # Both read the whole file with numbered lines: the later one shows it as it is now.
            return slot
    return None


@dataclass(frozen=True)
class _Listing:
    """A read's text split into lines, once for all the later reads it is compared with; whether it is
    a numbered listing is worked out only when a comparison asks."""

    stripped: str
    lines: tuple[str, ...]  # the lines that are not blank

    @functools.cached_property
    def probes(self) -> tuple[int, ...]:
        """The hashes of a few inner lines, which a later read holding this one has among its own."""
        inner = self.lines[1:-1]
        return tuple(map(hash, inner[:: max(1, len(inner) // 4)][:5]))

    @functools.cached_property
    def numbered(self) -> bool:
        """Most lines are numbered file lines."""
        lines = self.lines
        return bool(lines) and len(list(filter(_NUMBERED.match, lines))) >= 0.9 * len(lines)

    @functools.cached_property
    def from_line_one(self) -> bool:
        """A numbered listing starting at line 1."""
        first = self.lines[0].lstrip() if self.numbered else ""
        return first.startswith("1") and not first[1:2].isdigit()


def _listing(text: str) -> _Listing:
    return _Listing(text.strip(), tuple(filter(str.strip, text.splitlines())))


def _holds(later: str, earlier: _Listing, line_hashes: array[int]) -> bool:
    # A few inner lines, looked up by hash, rule out most later reads before any text is searched.
    for probe in earlier.probes:
        at = bisect.bisect_left(line_hashes, probe)
        if at == len(line_hashes) or line_hashes[at] != probe:
            return False
    if earlier.stripped in later:
        return True
    if not earlier.lines or not earlier.numbered:
        return False
    if earlier.lines[0] not in later or earlier.lines[-1] not in later:
        return False  # a quick test of what the line-by-line one needs
    later_lines = set(later.splitlines())
    return all(ln in later_lines for ln in earlier.lines)


def file_op(name: str, inp: Any) -> FileOp | None:
    """What a call does to a file: a plain read, a whole-file write, or an edit; else None."""
    tool = name.rsplit("__", 1)[-1].lower()
    if tool in ("apply_patch", "applypatch"):
        patch = inp if isinstance(inp, str) else inp.get("input") if isinstance(inp, Mapping) else None
        paths = _PATCH_FILE.findall(patch) if isinstance(patch, str) else []
        return FileOp("edit", os.path.normpath(paths[0].strip())) if len(paths) == 1 else None
    if isinstance(inp, str) and inp.lstrip().startswith("{"):
        try:  # arguments recorded as the model wrote them: a JSON string (Codex exec_command)
            inp = orjson.loads(inp)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(inp, Mapping):
        return None
    if tool in _SHELL_TOOLS:
        return shell_read(inp.get("command", inp.get("cmd")), inp.get("workdir") or inp.get("cwd"))
    path, command = _path(inp), inp.get("command")
    if tool in _EDITOR_TOOLS:
        op = _EDITOR_OPS.get(command) if isinstance(command, str) else None
        content_keys: tuple[str, ...] = ("file_text",)
    else:
        op, content_keys = _TOOL_OPS.get(tool), _WRITE_CONTENT_KEYS
    if not path or op is None:
        return None
    if op == "write" and not any(isinstance(inp.get(k), str) for k in content_keys):
        return None
    return FileOp(op, path, op != "read" or _whole(inp))


def _whole(inp: Mapping[str, Any]) -> bool:
    return all(k in _WHOLE_READ_KEYS or v in (None, "", [], {}) for k, v in inp.items())


def _path(inp: Mapping[str, Any]) -> str:
    for key in _PATH_KEYS:
        value = inp.get(key)
        if isinstance(value, str) and value.strip():
            return os.path.normpath(value.strip())
    return ""


def shell_read(command: Any, workdir: Any = None) -> FileOp | None:
    """``cat``/``nl``/``head``/``tail``/``sed -n`` of one file, alone on the command line; else None."""
    if isinstance(command, list) and all(isinstance(c, str) for c in command):
        command = command[-1] if len(command) == 3 and command[1] in ("-c", "-lc") else shlex.join(command)
    if not isinstance(command, str) or _SHELL_META.search(command):
        return None
    # The program, unquoted, is the first word: most commands are ruled out before shlex parses them.
    first = command.translate(_UNQUOTE).split(None, 1)
    if not first or first[0] not in _READ_PROGRAMS:
        return None
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if len(argv) < 2:
        return None
    prog, args = argv[0], argv[1:]
    files = [a for a in args if not a.startswith("-")]
    flags = [a for a in args if a.startswith("-")]
    cat = prog in ("cat", "nl") and len(files) == 1 and all(f in ("-n", "-ba", "-b", "-A") for f in flags)
    head = prog in ("head", "tail") and (
        (len(files) == 2 and flags == ["-n"] and files[0].isdigit())
        or (len(files) == 1 and all(re.fullmatch(r"-\d+|-n\d+", f) for f in flags))
    )
    sed = prog == "sed" and flags == ["-n"] and len(files) == 2 and re.fullmatch(r"\d+(,\d+)?p", files[0])
    if not (cat or head or sed):
        return None
    path = files[-1]  # after a head/tail count or a sed range
    if isinstance(workdir, str) and workdir and not os.path.isabs(path):
        path = os.path.join(workdir, path)
    return FileOp("read", os.path.normpath(path), cat)


def _segments(text: str, tags: Sequence[str]) -> Iterator[tuple[re.Match[str], int]]:
    """Each tagged segment of ``text`` with how many copies of it the text holds before it."""
    if not any(f"<{tag}>" in text for tag in tags):  # a substring search: far quicker than the pattern's
        return
    seen: dict[str, int] = {}
    alts = "|".join(re.escape(t) for t in tags)
    for match in re.finditer(rf"<({alts})>.*?</\1>", text, re.DOTALL):
        k = seen.get(match.group(0), 0)
        seen[match.group(0)] = k + 1
        yield match, k


def _last_segments(msgs: Sequence[Message], tags: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """Each injected segment's last place in the context: the copy that stays."""
    last: dict[str, tuple[int, int, int]] = {}
    for pos, m in enumerate(msgs):
        for bi, b in enumerate(m.blocks):
            if isinstance(b, TextBlock | ToolResultBlock):
                for match, k in _segments(b.text, tags):
                    last[match.group(0)] = (pos, bi, k)
    return last


def _drop_segments(
    text: str,
    pos: int,
    bi: int,
    last: Mapping[str, tuple[int, int, int]],
    tags: Sequence[str],
    msgs: Sequence[Message],
    cite: str,
) -> str:
    """``text`` with each injected segment whose last copy is elsewhere replaced by a pointer to it."""
    out: list[str] = []
    at = 0
    for match, k in _segments(text, tags):
        where = last.get(match.group(0))
        if where is not None and where != (pos, bi, k):
            pointer = (
                f"[ctxc: <{match.group(1)}> repeated in message {msgs[where[0]].index}; original in {cite}]"
            )
            out += [text[at : match.start()], pointer]
            at = match.end()
    return "".join([*out, text[at:]])


def _pointer_text(pointer: _Pointer, msgs: Sequence[Message], cite: str) -> str:
    target = msgs[pointer.target[0]].index
    what = {"same result": "same as the result of", "same text": "same as the text of"}
    return f"[ctxc: {what.get(pointer.what, pointer.what + ' in')} message {target}; original in {cite}]"
