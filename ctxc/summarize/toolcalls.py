"""What a tool call did and whether its result failed, read from names and inputs in any format."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ctxc.model import ToolResultBlock, ToolUseBlock

PATH_KEYS = ("file_path", "path", "filename", "notebook_path", "file", "target_file")


def shorten(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (whitespace collapsed), cut at a word when possible."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WRITE_TOOLS = _words("write writefile write_file create create_file notebookwrite write_to_file")
_EDIT_TOOLS = _words(
    "edit multiedit strreplacefile str_replace edit_file notebookedit replace insert "
    "apply_patch patch replace_in_file search_replace"
)
_SEARCH_TOOLS = _words(
    "grep glob search websearch web_search search_file search_dir find_file codebase_search "
    "ripgrep find file_search grep_search"
)
_LIST_TOOLS = _words("ls list list_dir list_files listdirectory list_directory")
_SHELL_TOOLS = _words(
    "bash shell exec_command execute_bash run run_command local_shell terminal run_terminal_cmd "
    "container.exec shell_command"
)
_EDIT_KEYS = ("old_string", "new_string", "oldText", "newText", "old_str", "new_str", "edits", "edit", "diff")
_CREATE_KEYS = ("file_text", "content", "contents")

_PATCH_HEADER = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M)
_PATCH_ACTIONS = {"Add": "created", "Update": "edited", "Delete": "deleted"}
_PATHLIKE = re.compile(r"^(?:~|\.{1,2})?/?[\w.@+-]+(?:/[\w.@+-]*)*$")
_EXT = re.compile(r"[\w-]\.[A-Za-z][A-Za-z0-9]{0,7}$")
_VERSION = re.compile(r"^v?\d+(?:\.\d+)+$")
_ASSIGNMENT = re.compile(r"^\w+=")
_CD_PREFIX = re.compile(r"^\s*cd\s+\S+\s*&&\s*")
_HEREDOC = re.compile(r"<<-?\s*['\"]?\w+['\"]?")
_SEGMENT_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\|)\s*")
_WORD = re.compile(r"""(?:'[^']*'?|"(?:\\.|[^"\\])*"?|[^\s'"]+)+""")
_QUOTED = re.compile(r"""'([^']*)'?|"((?:\\.|[^"\\])*)"?""")

#: Shell verbs whose only effect worth reporting is the kind of work.
_VERB_KINDS = {
    **dict.fromkeys(_words("grep rg ag ack find fd locate egrep fgrep"), "search"),
    **dict.fromkeys(_words("ls tree du exa eza dir pwd"), "list"),
    **dict.fromkeys(
        _words("cat head tail less more nl wc bat file stat diff md5sum sha256sum sed awk"), "read"
    ),
}
_CREATE_CMDS = _words("touch mkdir tee")
_DELETE_CMDS = _words("rm rmdir unlink")
#: Commands whose first positional argument is a pattern or script, not a path.
_PATTERN_FIRST = _words("sed awk grep rg ag ack egrep fgrep perl")
_SCRIPT_OPTIONS = ("-e", "-f", "--expression", "--regexp", "--file")
#: Runners whose sub-command names the work ("npm test", "python -m pytest", "git commit").
_RUNNERS = _words(
    "python python3 node bash sh uv poetry npx npm yarn pnpm cargo go make git docker pip pip3 "
    "bun deno ruby java dotnet mvn gradle tox nox just kubectl gh bundle rake php composer"
)


@dataclass(frozen=True, slots=True)
class Call:
    pos: int  # position of the calling message in the span
    index: int  # Message.index of the calling message
    name: str
    kind: str  # change | read | search | list | command | plan | other
    label: str  # short human description: "Bash `pytest -q`", "Edit src/a.py"
    key: str  # what a later success must share to count as the fix: a path or a command key
    changes: tuple[tuple[str, str], ...] = ()  # (action, path): created | edited | deleted | wrote
    reads: tuple[str, ...] = ()
    plan: tuple[str, ...] | None = None  # open items of a todo/plan call
    plan_done: int = 0
    shell: bool = False  # a shell command: its result is command output, checked for error lines


def _command_text(inp: Any) -> str:
    cmd: Any = inp
    if isinstance(inp, dict):
        cmd = inp.get("command", inp.get("cmd", inp.get("code", "")))
    if isinstance(cmd, list):
        parts = [str(p) for p in cmd]
        if (
            len(parts) >= 3
            and posixpath.basename(parts[0]) in ("bash", "sh", "zsh")
            and parts[1].startswith("-")
        ):
            return parts[2]
        return " ".join(shlex.quote(p) if p and " " not in p and "\n" not in p else p for p in parts)
    return cmd if isinstance(cmd, str) else ""


def _tokens(segment: str) -> list[str]:
    """Shell words unquoted, without assignments (a forgiving shlex.split: logs cut commands mid-quote)."""
    words = [_QUOTED.sub(lambda m: m.group(1) or m.group(2) or "", w) for w in _WORD.findall(segment)]
    return [t for t in words if not _ASSIGNMENT.match(t)]


def _looks_like_path(token: str) -> bool:
    if len(token) > 200 or token.startswith("-") or "://" in token or _VERSION.match(token):
        return False
    if not _PATHLIKE.match(token) or token in (".", "..", "/", "~"):
        return False
    return "/" in token or bool(_EXT.search(token))


def _command_key(command: str) -> str:
    """The part of a command that identifies the work: "pytest", "npm test", "python -m pytest"."""
    first_line = command.strip().splitlines()[0] if command.strip() else ""
    segments = [s for s in _SEGMENT_SPLIT.split(first_line) if s.strip()]
    work = [s for s in segments if not s.strip().startswith(("cd ", "source ", "export ", ". "))] or segments
    toks = _tokens(work[0]) if work else []
    while toks and (toks[0] in ("sudo", "time", "env", "timeout", "nice") or toks[0].isdigit()):
        toks = toks[1:]
    if not toks:
        return ""
    verb, rest = posixpath.basename(toks[0]), toks[1:]
    if verb in _RUNNERS:
        if rest[:1] == ["-m"] and len(rest) > 1:
            return f"{verb} -m {rest[1]}"
        sub = next((t for t in rest if not t.startswith("-")), "")
        return f"{verb} {posixpath.basename(sub) if '/' in sub else sub}".strip()
    # Other commands are about their target: "ls lib/ai" failing is not fixed by "ls app".
    return f"{verb} {next(iter(_operands(verb, rest)), '')}".strip()


def _operands(verb: str, args: Sequence[str]) -> list[str]:
    """A command's positional arguments, without its sed script or grep pattern."""
    positional: list[str] = []
    scripted = skip = False
    for a in args:
        if skip:
            skip = False
        elif a in _SCRIPT_OPTIONS and verb in _PATTERN_FIRST:
            skip = scripted = True
        elif a and not a.startswith(("-", ">")):
            positional.append(a)
    if verb in _PATTERN_FIRST and positional and not scripted:
        return positional[1:]
    return positional


def _redirect_targets(args: Sequence[str]) -> Iterator[str]:
    """The files a command's ``>`` and ``>>`` redirections write."""
    for t, after in zip(args, [*args[1:], ""], strict=False):
        target = (after if t in (">", ">>") else t[1:] if t.startswith(">") else "").lstrip(">")
        if target and target != "/dev/null" and _looks_like_path(target):
            yield target


def _segment_kind(verb: str, args: list[str], changes: list[tuple[str, str]], reads: list[str]) -> str:
    """The kind of one shell command segment; what it changes or reads is added to the lists."""
    paths = [p for p in _operands(verb, args) if _looks_like_path(p)]
    sub = args[:1]
    if verb == "git" and sub == ["apply"]:
        return "change"
    if verb in ("sed", "perl") and any(a == "-i" or a.startswith(("-i.", "--in-place")) for a in args):
        changes.extend(("edited", p) for p in paths)
    elif verb in _CREATE_CMDS:
        changes.extend(("created", p) for p in paths)
    elif verb in _DELETE_CMDS or (verb == "git" and sub == ["rm"]):
        changes.extend(("deleted", p) for p in paths if p != "rm")
    elif verb in ("cp", "mv") and len(paths) >= 2:
        changes.append(("created", paths[-1]))
        if verb == "mv":
            changes.extend(("deleted", p) for p in paths[:-1])
    elif verb == "git" and sub in (["diff"], ["show"], ["log"], ["blame"]):
        return "read"  # output is content: not checked for error lines
    elif verb == "git" and sub == ["grep"]:
        return "search"
    else:
        kind = _VERB_KINDS.get(verb, "command")
        if kind == "read":
            reads.extend(paths)
        return kind
    return "change"


def _shell_call(command: str) -> tuple[str, list[tuple[str, str]], list[str]]:
    """(kind, changes, reads) of a shell command: what it did to which paths, by its verbs."""
    changes = list(_patch_changes(command))
    reads: list[str] = []
    kinds: list[str] = []
    # A heredoc's body is file content, not commands: keep only the line that opens it.
    body = _HEREDOC.sub(" ", command.split("\n", 1)[0]) if "<<" in command else command
    for line in body.splitlines()[:20]:
        for segment in _SEGMENT_SPLIT.split(line):
            toks = _tokens(segment)
            while toks and toks[0] in ("sudo", "time", "env", "nice"):
                toks = toks[1:]
            if not toks or posixpath.basename(toks[0]) == "cd":
                continue
            changes.extend(("created", target) for target in _redirect_targets(toks[1:]))
            kinds.append(_segment_kind(posixpath.basename(toks[0]), toks[1:], changes, reads))
    kind = "change" if changes else kinds[0] if kinds and "command" not in kinds else "command"
    return kind, changes, reads


def _patch_changes(text: str) -> Iterator[tuple[str, str]]:
    """(action, path) of each file an apply_patch text touches."""
    for m in _PATCH_HEADER.finditer(text):
        yield ("created", m.group(3)) if m.group(3) else (_PATCH_ACTIONS[m.group(1)], m.group(2))


def _plan_items(inp: dict[str, Any]) -> tuple[tuple[str, ...], int] | None:
    """Open items and the count of done items of a todo/plan tool input, or None if it is not one."""
    items = inp.get("todos", inp.get("plan", inp.get("todo_list", inp.get("items"))))
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        return None
    open_items: list[str] = []
    done = 0
    for item in items:
        keys = ("content", "step", "title", "text", "task")
        text = next((item[k] for k in keys if isinstance(item.get(k), str)), "")
        status = str(item.get("status", "pending")).lower()
        if status in ("completed", "done", "complete", "cancelled", "canceled"):
            done += 1
        elif text:
            open_items.append(f"[{status}] {text}")
    return tuple(open_items), done


def classify_call(block: ToolUseBlock, pos: int, index: int) -> Call:
    """What one tool call did, from its name and input (format-independent)."""
    name = block.name or "tool"
    low = name.lower().rsplit("__", 1)[-1]  # MCP tools are named server__tool
    inp = block.input
    fields = inp if isinstance(inp, dict) else {}
    path = next((v.strip() for k in PATH_KEYS if isinstance(v := fields.get(k), str) and v.strip()), "")

    def call(kind: str, label: str, key: str, **more: Any) -> Call:
        return Call(pos, index, name, kind, label, key, **more)

    plan = _plan_items(fields)
    if plan is not None:
        return call("plan", name, name, plan=plan[0], plan_done=plan[1])
    command = ""
    if low in _SHELL_TOOLS or isinstance(fields.get("command"), list):
        command = _command_text(inp)
    elif isinstance(fields.get("command"), str) and low != "str_replace_editor":
        command = fields["command"]
    patch_text = inp if isinstance(inp, str) else command
    patch_text = next((v for k in ("input", "patch") if isinstance(v := fields.get(k), str)), patch_text)
    # An apply_patch call (a tool of its own, or a shell command carrying the patch) is about its files.
    patch = list(_patch_changes(patch_text)) if "*** " in patch_text else []
    if patch:
        label = f"{name} {', '.join(p for _, p in patch[:3])}"
        return call("change", label, patch[0][1], changes=tuple(patch))
    if low == "str_replace_editor" and path:
        sub = str(fields.get("command", ""))
        if sub == "create":
            return call("change", f"{name} create {path}", path, changes=(("created", path),))
        if sub in ("str_replace", "insert", "undo_edit"):
            return call("change", f"{name} {sub} {path}", path, changes=(("edited", path),))
        return call("read", f"{name} view {path}", path, reads=(path,))
    if command:
        kind, changes, reads = _shell_call(command)
        label, key = f"{name} `{shorten(_CD_PREFIX.sub('', command), 80)}`", _command_key(command) or name
        return call(kind, label, key, changes=tuple(changes), reads=tuple(reads), shell=True)
    searching = low in _SEARCH_TOOLS or "pattern" in fields or "query" in fields
    if path:
        label = f"{name} {path}"
        if any(k in fields for k in _EDIT_KEYS) or low in _EDIT_TOOLS:
            return call("change", label, path, changes=(("edited", path),))
        if low in _WRITE_TOOLS or any(isinstance(fields.get(k), str) for k in _CREATE_KEYS):
            return call("change", label, path, changes=(("created", path),))
        if searching:
            return call("search", label, path)
        if low in _LIST_TOOLS:
            return call("list", label, path)
        return call("read", label, path, reads=(path,))
    if searching:
        return call("search", name, name)
    return call("list" if low in _LIST_TOOLS else "other", name, name)


_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|^\s*[\w.]*(?:Error|Exception)\b(?::|\s*$)|\bFAILED\b"
    r"|\berror(?:\[\w+\])?:|^\s*fatal:|\bpanic:|command not found|No such file or directory|Permission denied"
    r"|^npm ERR!|^\s*E\s{3}|오류|에러|실패",
    re.M,
)
_EXCEPTION_LINE = re.compile(r"^\s*[\w.]*(?:Error|Exception|Exit|Interrupt)\b.*\S", re.M)
#: Tool results are checked for error lines only in their head and tail (tracebacks end a result).
_HEAD_TAIL_CHARS = 20_000


def _output_text(text: str) -> str:
    """The output inside a JSON envelope ({"output": ..., "metadata": ...}, as Codex records it)."""
    if text.startswith('{"output"'):
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        if isinstance(data, dict) and isinstance(data.get("output"), str):
            return str(data["output"])
    return text


def error_line(result: ToolResultBlock, call: Call | None, exit_code: Any = None) -> str | None:
    """The telling error line of a failed result, or None when the result looks successful."""
    text = result.text or ""
    if len(text) > 2 * _HEAD_TAIL_CHARS:
        text = text[:_HEAD_TAIL_CHARS] + "\n" + text[-_HEAD_TAIL_CHARS:]
    text = _output_text(text)
    code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
    # grep and friends exit 1 for "no match", which is an answer, not a failure.
    no_match = code == 1 and call is not None and call.kind == "search"
    failed = result.is_error or (code is not None and code != 0 and not no_match)
    # Only command output is checked: in file contents and documents "Error" is code or prose.
    is_output = call is not None and call.shell and call.kind in ("command", "change")
    hits = list(_ERROR_LINE.finditer(text)) if (failed or is_output) else []
    if not failed and not hits:
        return None
    lines: list[str] = []
    for m in hits:
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        lines.append(text[start : end if end >= 0 else len(text)].strip())
    # Diff lines, comments and quotes mention errors without being one.
    lines = [ln for ln in lines if ln and not ln.startswith(("Traceback", "+", "-", "//", "#", "* ", ">"))]
    exceptions = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
    if exceptions:
        return exceptions[-1]
    if lines:
        return lines[0]
    if not failed:
        return None
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "") or "failed (no output)"
