"""The default summarizer: fills the fixed sections from the transcript itself. No model, no network.

What it reads, by section:

* Session intent: the user's own requests (the first verbatim, later ones shortened when long).
* Decisions: sentences that state a choice ("we'll use X", "switch to", "결정", "하기로"), quoted verbatim.
  :func:`key_sentences` gives these and the user's instructions per message, for the placeholders the
  trimming strategies leave.
* Artifacts and files touched: paths from tool inputs and shell commands, as created/edited/deleted
  lines, and routine work (reads, searches, listings, other commands) collapsed into counts.
* Errors and fixes: the telling line of each failed tool result, paired with the next success of the
  same file or command.
* Current state: the last assistant text and the last tool outcomes.
* Next steps: the open items of the last todo/plan tool call and the last stated plan.

The material is sorted into tiers (:func:`tier_messages`): tier 1 (user instructions, decisions) is
quoted verbatim, tier 2 (errors, fixes, file changes, state) one line each, tier 3 (routine work) as
counts. Shrinking to the budget spends the lower tiers first, so the hierarchical strategy gets its
tiers from here while staying behind the Summarizer Protocol.

Everything is a pure function of the request: same messages, same budget, same text.
"""

from __future__ import annotations

import bisect
import posixpath
import re
import shlex
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from ctxc.archive_store import CITATION_RE
from ctxc.live import INJECTED_MARKUP
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.summarize import SECTIONS, SummaryRequest, register

INTENT, DECISIONS, ARTIFACTS, ERRORS, STATE, NEXT = SECTIONS

#: The first request is the session's intent: never dropped, never cut below this many characters.
FIRST_REQUEST_FLOOR = 500
#: The label of the session's intent when the request names it (:attr:`SummaryRequest.intent`); it is
#: then quoted whole, whatever the budget.
INTENT_LABEL = "the session's intent (its first request, verbatim): "
#: Later requests longer than this are shortened from the start (users paste logs into requests).
REQUEST_CHARS = 400
DECISION_CHARS = 400
EMPTY = "none recorded"
#: Shortening levels tried, longest first, before any bullet is dropped.
SHORTEN_LEVELS = (300, 160, 80)
#: Tool results are scanned for error lines only in their head and tail (tracebacks end a result).
_SCAN_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class Fact:
    """One bullet: ``label`` is fixed attribution, ``body`` the content that may be shortened."""

    section: str
    body: str
    seq: int  # chronological position; bullets from an earlier summary come first
    tier: int  # 1 verbatim (instructions, decisions), 2 events, 3 routine counts
    label: str = ""
    floor: int = 0  # the body is never cut below this many characters
    keep: bool = False  # never dropped


@dataclass(frozen=True, slots=True)
class Tiers:
    """The material of a span sorted by how much detail it deserves."""

    verbatim: tuple[Fact, ...]  # tier 1
    events: tuple[Fact, ...]  # tier 2
    routine: tuple[Fact, ...]  # tier 3
    #: Bullets of earlier summaries found in the span (a summary message being folded again).
    earlier: tuple[Fact, ...] = ()
    omitted: Mapping[str, int] = field(default_factory=dict)

    def facts(self) -> list[Fact]:
        return [*self.earlier, *self.verbatim, *self.events, *self.routine]


# ----------------------------------------------------------------------------------------- text helpers

_WS = re.compile(r"\s+")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
# Sentence ends: Latin and CJK punctuation followed by space, or a line break.
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?。\uff01\uff1f])\s+|\n+")


def shorten(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (whitespace collapsed), cut at a word when possible."""
    flat = _WS.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    if limit <= 1:
        return "…"[:limit]
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _sentences(text: str) -> Iterator[str]:
    text = _FENCE.sub(" ", text)
    for part in _SENTENCE_SPLIT.split(text):
        s = part.strip().lstrip("-*•>#0123456789.) ").strip()
        if s:
            yield s


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip().lower()


def _text_of(m: Message) -> str:
    return "\n".join(b.text for b in m.blocks if isinstance(b, TextBlock) and b.text).replace("\r\n", "\n")


# --------------------------------------------------------------------------------------- user requests


def _is_request(m: Message, prev: Message | None) -> bool:
    """A user's own words: not client-injected text, not an environment observation."""
    meta = m.meta
    if m.role != "user" or any(
        meta.get(k) for k in ("ctxc", "is_meta", "is_compact_summary", "context_injection")
    ):
        return False
    if meta.get("source") == "environment":
        return False  # OpenHands: the runtime speaking
    if _is_placeholder_text(m):
        return False  # ctxc's own note, read back from a file
    if prev is not None and prev.role == "assistant" and prev.meta.get("action") and "history_index" in meta:
        return False  # SWE-agent classic: the user turn after an action is that action's observation
    return any(isinstance(b, TextBlock) and b.text.strip() for b in m.blocks)


def _request_text(m: Message) -> str:
    return INJECTED_MARKUP.sub("", _text_of(m)).strip()


# ------------------------------------------------------------------------------------------- decisions

#: Words that state a choice outright.
_DECISION = re.compile(
    r"\b(?:decided|decide to|decision|instead|chose|choose to|opt(?:ed)? (?:for|to)|switch(?:ed|ing)? to"
    r"|go with|went with|settled on|stick with|prefer|rather than|the (?:fix|approach|plan) is)\b"
    r"|결정|하기로|사용하기로|쓰기로|바꾸기로|변경하기로|로 가자|로 하자|채택|선택했|대신",
    re.I,
)
#: Words that announce what comes next; a decision unless what follows is routine work.
_INTENT = re.compile(
    r"\b(?:we(?:'ll| will| should| are going to|'re going to)|i(?:'ll| will|'m going to| am going to)"
    r"|let's|let us)\b|합시다|하겠습니다|할게요",
    re.I,
)
_DECISION_HINTS = (
    "decid", "decision", "instead", "chose", "choose", "opt", "switch", "go with", "went with", "settled on",
    "stick with", "prefer", "rather than", "the fix is", "the approach is", "the plan is", "we'll", "we will",
    "we should", "going to", "we're", "i'll", "i will", "i'm", "i am", "let's", "let us", "결정", "기로",
    "로 가자", "로 하자", "채택", "선택했", "대신", "합시다", "하겠습니다", "할게요",
)  # fmt: skip
# "I'll read the file", "let's add the import" announce a step of the work, not a choice.
_ROUTINE_INTENT = re.compile(
    r"^(?:(?:ok(?:ay)?|now|first|great|good|perfect|next|then|so|alright|finally|also),?\s+)*"
    r"(?:i'll|i will|let me|let's|let us|i'm going to|we'll|we will)\s+"
    r"(?:first\s+|now\s+|also\s+|quickly\s+|then\s+|carefully\s+|go ahead and\s+)?"
    r"(?:read|look|check|examine|explore|search|see|view|open|inspect|take|start|run|find|verify|understand"
    r"|investigate|review|try|list|grep|test|add|remove|update|edit|create|write|implement|modify|change|paste"
    r"|make|proceed|fix|continue|do|call|print|debug|rerun|re-run|install|commit|push|begin|analyze|compile"
    r"|build|execute|delete|clean|submit|summarize|put|move|rename|refactor|apply|replace|correct|complete"
    r"|finish|get|set|wait|confirm|double-check|reproduce|scroll|navigate|locate|open|go|now)\b"
    r"|\buse (?:the )?`?[\w.-]+`? (?:command|tool)\b"
    r"|(?:확인|살펴|읽어|찾아|검토|조사|실행|열어|수정|추가|작성)\S*\s*(?:보겠습니다|하겠습니다|볼게요|할게요|합시다)",
    re.I,
)


def _decisions(text: str) -> Iterator[str]:
    # Most messages state no choice at all: a substring check over the whole text (a superset of what
    # the patterns match, and several times faster than them) spares the sentence split.
    low = text.lower()
    if not any(k in low for k in _DECISION_HINTS):
        return
    for s in _sentences(text):
        if 12 <= len(s) <= 1200 and (
            _DECISION.search(s) or (_INTENT.search(s) and not _ROUTINE_INTENT.search(s))
        ):
            yield s


# ------------------------------------------------------------------------------------- key sentences


@dataclass(frozen=True, slots=True)
class KeySentence:
    """A user instruction or a stated decision, quoted from message ``index`` (long ones shortened)."""

    index: int
    role: str
    text: str
    kind: str  # "instruction" | "decision"

    @property
    def line(self) -> str:
        return f"msg {self.index} ({self.role}): {self.text}"


#: How a placeholder's text starts and how it lists what it quotes (see ctxc.compaction.fifo).
PLACEHOLDER_PREFIX = "[ctxc] "
QUOTES_HEADING = "Instructions and decisions in them, verbatim:"
_QUOTED_LINE = re.compile(r"^- msg (\d+) \((\w+)\): (.*)$")


def _is_placeholder_text(m: Message) -> bool:
    """A placeholder read back from a file (its metadata is gone): ctxc's note, not a user's words."""
    if m.role != "user" or len(m.blocks) != 1 or not isinstance(m.blocks[0], TextBlock):
        return False
    return m.blocks[0].text.startswith(PLACEHOLDER_PREFIX)


def _quoted_lines(m: Message) -> tuple[KeySentence, ...]:
    _, _, quoted = _text_of(m).partition(QUOTES_HEADING)
    out: list[KeySentence] = []
    for line in quoted.splitlines():
        found = _QUOTED_LINE.match(line)
        if found:
            index, role, text = int(found.group(1)), found.group(2), found.group(3)
            out.append(KeySentence(index, role, text, "instruction" if role == "user" else "decision"))
    return tuple(out)


def key_sentences(m: Message, prev: Message | None = None) -> tuple[KeySentence, ...]:
    """The user instructions and decisions in one message, as the summary's tier 1 quotes them.

    A placeholder that ctxc left for removed messages carries the ones it replaced (``meta["carried"]``),
    so trimming twice loses none.
    """
    if m.meta.get("ctxc") == "placeholder":
        carried = m.meta.get("carried")
        return tuple(k for k in carried if isinstance(k, KeySentence)) if isinstance(carried, tuple) else ()
    if _is_placeholder_text(m):
        return _quoted_lines(m)
    if m.meta.get("ctxc") or m.meta.get("is_demo") or m.meta.get("is_compact_summary"):
        return ()
    out: list[KeySentence] = []
    request = _is_request(m, prev)
    if request:
        text = _request_text(m)
        if text:
            out.append(KeySentence(m.index, m.role, shorten(text, REQUEST_CHARS), "instruction"))
    if m.role == "assistant" or request:
        said = _text_of(m)
        if said:
            out.extend(
                KeySentence(m.index, m.role, shorten(s, DECISION_CHARS), "decision") for s in _decisions(said)
            )
    return tuple(out)


# ---------------------------------------------------------------------------------------- tool calls


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WRITE_TOOLS = _words("write writefile write_file create create_file notebookwrite write_to_file")
_EDIT_TOOLS = _words(
    "edit multiedit strreplacefile str_replace edit_file notebookedit replace insert "
    "apply_patch patch replace_in_file search_replace"
)
_READ_TOOLS = _words("read readfile read_file open view cat notebookread view_file goto")
_SEARCH_TOOLS = _words(
    "grep glob search websearch web_search search_file search_dir find_file codebase_search "
    "ripgrep find file_search grep_search"
)
_LIST_TOOLS = _words("ls list list_dir list_files listdirectory list_directory")
_SHELL_TOOLS = _words(
    "bash shell exec_command execute_bash run run_command local_shell terminal run_terminal_cmd "
    "container.exec shell_command"
)
_PATH_KEYS = ("file_path", "path", "filename", "notebook_path", "file", "target_file")
_EDIT_KEYS = ("old_string", "new_string", "oldText", "newText", "old_str", "new_str", "edits", "edit", "diff")
_CREATE_KEYS = ("file_text", "content", "contents")

_PATCH_HEADER = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M)
_PATHLIKE = re.compile(r"^(?:~|\.{1,2})?/?[\w.@+-]+(?:/[\w.@+-]*)*$")
_EXT = re.compile(r"[\w-]\.[A-Za-z][A-Za-z0-9]{0,7}$")
_VERSION = re.compile(r"^v?\d+(?:\.\d+)+$")
_CD_PREFIX = re.compile(r"^\s*cd\s+\S+\s*&&\s*")
_HEREDOC = re.compile(r"<<-?\s*['\"]?\w+['\"]?")
_SEGMENT_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\|)\s*")

_READ_CMDS = _words("cat head tail less more nl wc bat file stat diff md5sum sha256sum")
_SEARCH_CMDS = _words("grep rg ag ack find fd locate egrep fgrep")
_LIST_CMDS = _words("ls tree du exa eza dir pwd")
_CREATE_CMDS = _words("touch mkdir tee")
_DELETE_CMDS = _words("rm rmdir unlink")
#: Commands whose first positional argument is a pattern or script, not a path.
_PATTERN_FIRST = _words("sed awk grep rg ag ack egrep fgrep perl")
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
    shell: bool = False  # a shell command: its result is command output, scanned for error lines


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


_WORD = re.compile(r"""(?:'[^']*'?|"(?:\\.|[^"\\])*"?|[^\s'"]+)+""")
_QUOTED = re.compile(r"""'([^']*)'?|"((?:\\.|[^"\\])*)"?""")


def _tokens(segment: str) -> list[str]:
    """Shell words with their quotes removed (a fast, forgiving shlex.split: commands in logs are
    often cut off mid-quote)."""
    return [_QUOTED.sub(lambda m: m.group(1) or m.group(2) or "", w) for w in _WORD.findall(segment)]


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
    segments = [
        s for s in segments if not s.strip().startswith(("cd ", "source ", "export ", ". "))
    ] or segments
    if not segments:
        return ""
    toks = [t for t in _tokens(segments[0]) if not re.match(r"^\w+=", t)]
    while toks and (toks[0] in ("sudo", "time", "env", "timeout", "nice") or toks[0].isdigit()):
        toks = toks[1:]
    if not toks:
        return ""
    verb = posixpath.basename(toks[0])
    if verb in _RUNNERS:
        rest = toks[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return f"{verb} -m {rest[1]}"
        sub = next((t for t in rest if not t.startswith("-")), "")
        return f"{verb} {posixpath.basename(sub) if '/' in sub else sub}".strip()
    # Other commands are about their target: "ls lib/ai" failing is not fixed by "ls app".
    target = next(iter(_operands(verb, toks[1:])), "")
    return f"{verb} {target}".strip()


_SCRIPT_OPTIONS = ("-e", "-f", "--expression", "--regexp", "--file")


def _operands(verb: str, args: Sequence[str]) -> list[str]:
    """A command's positional arguments, without its sed script or grep pattern."""
    positional: list[str] = []
    scripted = False
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in _SCRIPT_OPTIONS and verb in _PATTERN_FIRST:
            skip = scripted = True
        elif a and not a.startswith(("-", ">")):
            positional.append(a)
    if verb in _PATTERN_FIRST and positional and not scripted:
        positional = positional[1:]
    return positional


def _path_args(verb: str, args: Sequence[str]) -> list[str]:
    """The path-looking operands of a command."""
    return [p for p in _operands(verb, args) if _looks_like_path(p)]


def _shell_call(command: str) -> tuple[str, list[tuple[str, str]], list[str]]:
    """(kind, changes, reads) of a shell command: what it did to which paths, by its verbs."""
    changes: list[tuple[str, str]] = []
    reads: list[str] = []
    kinds: list[str] = []
    for action, path in _patch_changes(command):
        changes.append((action, path))
    # A heredoc's body is file content, not commands: keep only the line that opens it.
    body = _HEREDOC.sub(" ", command.split("\n", 1)[0]) if "<<" in command else command
    for line in body.splitlines()[:20]:
        for segment in _SEGMENT_SPLIT.split(line):
            toks = [t for t in _tokens(segment) if not re.match(r"^\w+=", t)]
            while toks and toks[0] in ("sudo", "time", "env", "nice"):
                toks = toks[1:]
            if not toks:
                continue
            verb = posixpath.basename(toks[0])
            args = toks[1:]
            if verb == "cd":
                continue
            # Redirections write files whatever the verb.
            for i, t in enumerate(args):
                target = (
                    args[i + 1]
                    if t in (">", ">>") and i + 1 < len(args)
                    else t[1:]
                    if t.startswith(">")
                    else ""
                )
                target = target.lstrip(">")
                if target and target != "/dev/null" and _looks_like_path(target):
                    changes.append(("created", target))
            in_place = any(a == "-i" or a.startswith(("-i.", "--in-place")) for a in args)
            paths = _path_args(verb, args)
            if verb == "git" and args[:1] == ["apply"]:
                kinds.append("change")
            elif verb in ("sed", "perl") and in_place:
                changes.extend(("edited", p) for p in paths)
                kinds.append("change")
            elif verb in _CREATE_CMDS:
                changes.extend(("created", p) for p in paths)
                kinds.append("change")
            elif verb in _DELETE_CMDS or (verb == "git" and args[:1] == ["rm"]):
                changes.extend(("deleted", p) for p in paths if p != "rm")
                kinds.append("change")
            elif verb in ("cp", "mv") and len(paths) >= 2:
                changes.append(("created", paths[-1]))
                if verb == "mv":
                    changes.extend(("deleted", p) for p in paths[:-1])
                kinds.append("change")
            elif verb == "git" and args[:1] in (["diff"], ["show"], ["log"], ["blame"]):
                kinds.append("read")  # output is content: not scanned for error lines
            elif verb in _SEARCH_CMDS or (verb == "git" and args[:1] == ["grep"]):
                kinds.append("search")
            elif verb in _LIST_CMDS:
                kinds.append("list")
            elif verb in _READ_CMDS or verb in ("sed", "awk"):
                reads.extend(paths)
                kinds.append("read")
            else:
                kinds.append("command")
    if changes:
        kind = "change"
    elif "command" in kinds or not kinds:
        kind = "command"
    else:
        kind = kinds[0]
    return kind, changes, reads


def _patch_changes(text: str) -> Iterator[tuple[str, str]]:
    for m in _PATCH_HEADER.finditer(text):
        if m.group(3):
            yield "created", m.group(3)
        else:
            yield {"Add": "created", "Update": "edited", "Delete": "deleted"}[m.group(1)], m.group(2)


def _path_of(inp: Any) -> str:
    if isinstance(inp, dict):
        for key in _PATH_KEYS:
            value = inp.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return ""


def _plan_items(inp: Any) -> tuple[tuple[str, ...], int] | None:
    """Open items and the count of done items of a todo/plan tool input, or None if it is not one."""
    if not isinstance(inp, dict):
        return None
    items = inp.get("todos", inp.get("plan", inp.get("todo_list", inp.get("items"))))
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        return None
    open_items: list[str] = []
    done = 0
    for item in items:
        text = next(
            (item[k] for k in ("content", "step", "title", "text", "task") if isinstance(item.get(k), str)),
            "",
        )
        status = str(item.get("status", "pending")).lower()
        if status in ("completed", "done", "complete", "cancelled", "canceled"):
            done += 1
        elif text:
            open_items.append(f"[{status}] {text}")
    return tuple(open_items), done


def classify_call(block: ToolUseBlock, pos: int, index: int) -> Call:
    """What one tool call did, from its name and input (format-independent)."""
    name = block.name or "tool"
    # MCP tools are named server__tool; the tool part says what it does.
    low = name.lower().rsplit("__", 1)[-1]
    inp = block.input
    path = _path_of(inp)
    plan = _plan_items(inp)
    if plan is not None:
        return Call(pos, index, name, "plan", f"{name}", name, plan=plan[0], plan_done=plan[1])
    command = ""
    if low in _SHELL_TOOLS or (isinstance(inp, dict) and isinstance(inp.get("command"), list)):
        command = _command_text(inp)
    elif isinstance(inp, dict) and isinstance(inp.get("command"), str) and low != "str_replace_editor":
        command = inp["command"]
    patch_text = inp if isinstance(inp, str) else command
    if isinstance(inp, dict):
        patch_text = next((v for k in ("input", "patch") if isinstance(v := inp.get(k), str)), patch_text)
    # An apply_patch call (a tool of its own, or a shell command carrying the patch) is about its files.
    patch = list(_patch_changes(patch_text)) if "*** " in patch_text else []
    if patch:
        paths = ", ".join(p for _, p in patch[:3])
        return Call(pos, index, name, "change", f"{name} {paths}", patch[0][1], changes=tuple(patch))
    if low == "str_replace_editor" and isinstance(inp, dict) and path:
        sub = str(inp.get("command", ""))
        if sub == "create":
            return Call(
                pos, index, name, "change", f"{name} create {path}", path, changes=(("created", path),)
            )
        if sub in ("str_replace", "insert", "undo_edit"):
            return Call(pos, index, name, "change", f"{name} {sub} {path}", path, changes=(("edited", path),))
        return Call(pos, index, name, "read", f"{name} view {path}", path, reads=(path,))
    if command:
        kind, changes, reads = _shell_call(command)
        key = _command_key(command)
        label = f"{name} `{shorten(_CD_PREFIX.sub('', command), 80)}`"
        return Call(
            pos, index, name, kind, label, key or name, changes=tuple(changes), reads=tuple(reads), shell=True
        )
    if isinstance(inp, dict) and path:
        if any(k in inp for k in _EDIT_KEYS) or low in _EDIT_TOOLS:
            return Call(pos, index, name, "change", f"{name} {path}", path, changes=(("edited", path),))
        if low in _WRITE_TOOLS or any(isinstance(inp.get(k), str) for k in _CREATE_KEYS):
            return Call(pos, index, name, "change", f"{name} {path}", path, changes=(("created", path),))
        if low in _SEARCH_TOOLS or "pattern" in inp or "query" in inp:
            return Call(pos, index, name, "search", f"{name} {path}", path)
        if low in _LIST_TOOLS:
            return Call(pos, index, name, "list", f"{name} {path}", path)
        return Call(pos, index, name, "read", f"{name} {path}", path, reads=(path,))
    if low in _SEARCH_TOOLS or (isinstance(inp, dict) and ("pattern" in inp or "query" in inp)):
        return Call(pos, index, name, "search", name, name)
    if low in _LIST_TOOLS:
        return Call(pos, index, name, "list", name, name)
    return Call(pos, index, name, "other", name, name)


# -------------------------------------------------------------------------------------------- errors

_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|^\s*[\w.]*(?:Error|Exception)\b(?::|\s*$)|\bFAILED\b"
    r"|\berror(?:\[\w+\])?:|^\s*fatal:|\bpanic:|command not found|No such file or directory|Permission denied"
    r"|^npm ERR!|^\s*E\s{3}|오류|에러|실패",
    re.M,
)
_EXCEPTION_LINE = re.compile(r"^\s*[\w.]*(?:Error|Exception|Exit|Interrupt)\b.*\S", re.M)


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


def _scan_window(text: str) -> str:
    if len(text) <= 2 * _SCAN_CHARS:
        return text
    return text[:_SCAN_CHARS] + "\n" + text[-_SCAN_CHARS:]


def error_line(result: ToolResultBlock, call: Call | None, exit_code: Any = None) -> str | None:
    """The telling error line of a failed result, or None when the result looks successful."""
    text = _output_text(_scan_window(result.text or ""))
    code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
    # grep and friends exit 1 for "no match", which is an answer, not a failure.
    no_match = code == 1 and call is not None and call.kind == "search"
    failed = result.is_error or (code is not None and code != 0 and not no_match)
    # Only command output is scanned: reads, edits and fetches echo file contents and documents,
    # where "Error" is code or prose, not an outcome (those tools flag failures with is_error).
    scan = call is not None and call.shell and call.kind in ("command", "change")
    hits = list(_ERROR_LINE.finditer(text)) if (failed or scan) else []
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
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return first or "failed (no output)"


# -------------------------------------------------------------------------------------------- tiering


@dataclass(frozen=True, slots=True)
class _Outcome:
    call: Call
    error: str | None


def _previous_facts(text: str, seq0: int) -> tuple[list[Fact], dict[str, int]]:
    """Bullets of an earlier ctxc summary, by section, in order, and its omitted counts."""
    facts: list[Fact] = []
    omitted: dict[str, int] = {}
    section: str | None = None
    bullets: list[list[str]] = []

    def flush() -> None:
        if section is None:
            return
        for lines in bullets:
            body = "\n".join(lines)
            m = _OMITTED_RE.match(body)
            if m:
                omitted[section] = omitted.get(section, 0) + int(m.group(1))
            elif body.strip() and body.strip() != EMPTY:
                tier = 1 if section in (INTENT, DECISIONS) else 3 if _ROUTINE_BULLET.match(body) else 2
                facts.append(Fact(section, body, seq0 + len(facts), tier))
        bullets.clear()

    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("## "):
            flush()
            name = line[3:].strip()
            section = name if name in SECTIONS else None
        elif section is None:
            continue
        elif line.startswith("- "):
            bullets.append([line[2:]])
        elif line.startswith("  ") and bullets:
            bullets[-1].append(line[2:])
    flush()
    return facts, omitted


_ROUTINE_BULLET = re.compile(r"^(?:read \d+ files?|routine:|ran \d+ commands?|\d+ other tool calls?) ")
_OMITTED_RE = re.compile(r"^\((\d+) older items? omitted")


def tier_messages(messages: Sequence[Message]) -> Tiers:
    """Sort a span into tiers: verbatim instructions and decisions, one-line events, routine counts."""
    verbatim: list[Fact] = []
    events: list[Fact] = []
    routine: list[Fact] = []
    earlier: list[Fact] = []
    omitted: dict[str, int] = {}
    calls: dict[str, Call] = {}
    outcomes: list[_Outcome] = []
    seen_decisions: set[str] = set()
    first_request = True
    # The last few assistant messages with text: a plan stated long ago is no longer the plan.
    recent: deque[tuple[int, Message]] = deque(maxlen=_PLAN_TURNS)
    last_plan_call: Call | None = None

    for pos, m in enumerate(messages):
        if m.meta.get("is_demo"):
            continue  # SWE-agent demonstrations: another task's worked example, not this session
        if m.meta.get("ctxc") == "summary":
            facts, om = _previous_facts(_text_of(m), -1_000_000 + len(earlier))
            earlier.extend(facts)
            for k, v in om.items():
                omitted[k] = omitted.get(k, 0) + v
            continue
        if m.meta.get("ctxc") == "placeholder" or _is_placeholder_text(m):
            # What a trimming strategy carried from the messages it removed: quoted again, verbatim.
            for quote in key_sentences(m):
                said_before = _norm(quote.text)
                if quote.kind == "instruction":
                    section, body = INTENT, quote.text
                elif said_before in seen_decisions:
                    continue
                else:
                    seen_decisions.add(said_before)
                    section, body = DECISIONS, f'"{quote.text}"'
                verbatim.append(Fact(section, body, pos, 1, f"msg {quote.index} ({quote.role}): "))
            continue
        if m.meta.get("is_compact_summary"):
            text = _text_of(m)
            if text.strip():
                verbatim.append(
                    Fact(INTENT, shorten(text, 600), pos, 1, f"earlier summary (msg {m.index}): ")
                )
            continue
        request = _is_request(m, messages[pos - 1] if pos else None)
        if request:
            text = _request_text(m)
            if text:
                if first_request:
                    verbatim.append(
                        Fact(
                            INTENT,
                            text,
                            pos,
                            1,
                            f"msg {m.index} (user): ",
                            floor=FIRST_REQUEST_FLOOR,
                            keep=True,
                        )
                    )
                    first_request = False
                else:
                    verbatim.append(
                        Fact(INTENT, shorten(text, REQUEST_CHARS), pos, 1, f"msg {m.index} (user): ")
                    )
        said = _text_of(m) if m.role == "assistant" or request else ""
        if said and not m.meta.get("ctxc"):
            for s in _decisions(said):
                key = _norm(s)
                if key in seen_decisions:
                    continue
                seen_decisions.add(key)
                body = f'"{shorten(s, DECISION_CHARS)}"'
                verbatim.append(Fact(DECISIONS, body, pos, 1, f"msg {m.index} ({m.role}): "))
        if m.role == "assistant":
            if said.strip():
                recent.append((pos, m))
            for b in m.blocks:
                if isinstance(b, ToolUseBlock):
                    call = classify_call(b, pos, m.index)
                    calls[b.id] = call
                    if call.kind == "plan":
                        last_plan_call = call
        for b in m.blocks:
            if isinstance(b, ToolResultBlock):
                found = calls.get(b.tool_use_id)
                if found is None:
                    continue
                err = error_line(b, found, m.meta.get("exit_code"))
                outcomes.append(_Outcome(found, err))

    events.extend(_file_events(list(calls.values())))
    events.extend(_error_events(outcomes))
    routine.extend(_routine_counts(list(calls.values())))
    last_text = recent[-1] if recent else None
    last_plan_text: tuple[int, Message, list[str]] | None = None
    for pos, m in reversed(recent):
        if last_plan_call is not None and last_plan_call.pos > pos:
            break  # a todo list written since supersedes what was said before it
        sentences = [s for s in _sentences(_text_of(m)) if _NEXT.search(s) and len(s) >= 8]
        if sentences:
            last_plan_text = (pos, m, sentences)
            break
    # The last words and the plan are quotes (tier 1); tool outcomes are events (tier 2).
    for f in [*_state(last_text, outcomes), *_next_steps(last_plan_text, last_plan_call)]:
        (verbatim if f.tier == 1 else events).append(f)
    return Tiers(tuple(verbatim), tuple(events), tuple(routine), tuple(earlier), omitted)


#: A stated plan counts as current only if it came within the last few assistant texts.
_PLAN_TURNS = 3
_NEXT = re.compile(
    r"\b(?:next|todo|remaining|remains|need to|needs to|will|should|going to|plan to|afterwards|i'll|we'll"
    r"|let's|still (?:need|have|to))\b|TODO|다음|남은|해야|예정|하겠|할게|필요",
    re.I,
)


def _file_events(calls: Sequence[Call]) -> list[Fact]:
    touched: dict[str, list[tuple[str, Call]]] = {}
    read_first: set[str] = set()
    for c in calls:
        for p in c.reads:
            if p not in touched:
                read_first.add(p)
        for action, p in c.changes:
            touched.setdefault(p, []).append((action, c))
    out: list[Fact] = []
    for path, acts in touched.items():
        first_action, first_call = acts[0]
        last_call = acts[-1][1]
        span = (
            f"msg {first_call.index}"
            if first_call.index == last_call.index
            else f"msgs {first_call.index}-{last_call.index}"
        )
        n_edits = sum(1 for a, _ in acts if a == "edited")
        edits = f"{n_edits} edits" if n_edits > 1 else "1 edit"
        if acts[-1][0] == "deleted":
            what = "deleted" if first_action == "deleted" else f"{first_action} then deleted"
            out.append(Fact(ARTIFACTS, f"{what} {path} ({span})", last_call.pos, 2))
            continue
        if first_action == "created":
            what = "wrote" if path in read_first else "created"
            detail = f"then {edits}, {span}" if n_edits else span
        else:
            what, detail = "edited", f"{edits}, {span}"
        out.append(Fact(ARTIFACTS, f"{what} {path} ({detail})", last_call.pos, 2))
    out.sort(key=lambda f: f.seq)
    return out


def _routine_counts(calls: Sequence[Call]) -> list[Fact]:
    changed = {p for c in calls for _, p in c.changes}
    reads: dict[str, int] = {}
    last_read = -1
    counts: dict[str, int] = {"search": 0, "list": 0}
    last: dict[str, int] = {"search": -1, "list": -1, "command": -1, "other": -1}
    commands: dict[str, int] = {}
    others: dict[str, int] = {}
    for c in calls:
        for p in c.reads:
            if p not in changed:
                reads[p] = reads.get(p, 0) + 1
                last_read = c.pos
        if c.kind in counts:
            counts[c.kind] += 1
            last[c.kind] = c.pos
        elif c.kind == "command" or (c.kind == "read" and not c.reads):
            commands[c.key] = commands.get(c.key, 0) + 1
            last["command"] = c.pos
        elif c.kind == "other":
            others[c.name] = others.get(c.name, 0) + 1
            last["other"] = c.pos
    out: list[Fact] = []
    if reads:
        names = list(reads)
        shown = ", ".join(names[:6]) + (f", +{len(names) - 6} more" if len(names) > 6 else "")
        out.append(Fact(ARTIFACTS, f"read {_n(len(names), 'file')} ({shown})", last_read, 3))
    parts = [_n(counts["search"], "search", "searches"), _n(counts["list"], "listing")]
    work = ", ".join(p for p, k in zip(parts, ("search", "list"), strict=True) if counts[k])
    if work:
        out.append(Fact(ARTIFACTS, f"routine: {work}", max(last["search"], last["list"]), 3))
    if commands:
        out.append(
            Fact(
                ARTIFACTS,
                f"ran {_n(sum(commands.values()), 'command')} ({_top(commands)})",
                last["command"],
                3,
            )
        )
    if others:
        out.append(
            Fact(
                ARTIFACTS, f"{_n(sum(others.values()), 'other tool call')} ({_top(others)})", last["other"], 3
            )
        )
    return out


def _n(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _top(counts: Mapping[str, int], k: int = 5) -> str:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in ranked[:k])
    return shown + (", …" if len(ranked) > k else "")


def _error_events(outcomes: Sequence[_Outcome]) -> list[Fact]:
    """One line per distinct failure (same call key and error line), with the fix when one follows."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, o in enumerate(outcomes):
        if o.error is not None:
            groups.setdefault((o.call.key, shorten(o.error, 200)), []).append(i)
    successes: dict[str, list[int]] = {}
    for i, o in enumerate(outcomes):
        if o.error is None:
            successes.setdefault(o.call.key, []).append(i)
    out: list[Fact] = []
    for (key, err), idxs in groups.items():
        first = outcomes[idxs[0]].call
        last_i = idxs[-1]
        later = successes.get(key, [])
        at = bisect.bisect_right(later, last_i)
        fix = later[at] if at < len(later) else None
        times = f" (x{len(idxs)})" if len(idxs) > 1 else ""
        # The error text leads so that shortening keeps it; the call and the outcome follow.
        body = f"{err}{times} [{first.label}]"
        if fix is not None:
            fixed = outcomes[fix].call
            edits: list[str] = []
            for o in outcomes[last_i + 1 : fix]:
                for _, p in o.call.changes:
                    if p not in edits:
                        edits.append(p)
            how = f" after changing {', '.join(edits[:3])}" if edits else ""
            body += f" → fixed{how}: succeeded at msg {fixed.index}"
        else:
            body += " → no later success in this span"
        out.append(Fact(ERRORS, body, first.pos, 2, f"msg {first.index}: "))
    out.sort(key=lambda f: f.seq)
    return out


def _state(last_text: tuple[int, Message] | None, outcomes: Sequence[_Outcome]) -> list[Fact]:
    out: list[Fact] = []
    if last_text is not None:
        pos, m = last_text
        out.append(
            Fact(STATE, shorten(_text_of(m), 500), pos, 1, f"last assistant message (msg {m.index}): ")
        )
    for o in outcomes[-3:]:
        status = "ok" if o.error is None else f"error: {shorten(o.error, 160)}"
        out.append(Fact(STATE, f"{o.call.label} → {status}", o.call.pos, 2, f"msg {o.call.index} "))
    return out


def _next_steps(last_text: tuple[int, Message, list[str]] | None, plan_call: Call | None) -> list[Fact]:
    out: list[Fact] = []
    if plan_call is not None and plan_call.plan is not None:
        label = f"open plan items (msg {plan_call.index}): "
        if plan_call.plan:
            for i, item in enumerate(plan_call.plan):
                out.append(
                    Fact(NEXT, shorten(item, 300), plan_call.pos * 1000 + i, 1, label if i == 0 else "")
                )
        else:
            out.append(
                Fact(
                    NEXT,
                    f"all {_n(plan_call.plan_done, 'planned item')} done",
                    plan_call.pos * 1000,
                    1,
                    label,
                )
            )
    if last_text is not None:
        pos, m, sentences = last_text
        for i, s in enumerate(sentences[-5:]):
            out.append(Fact(NEXT, f'"{shorten(s, 300)}"', pos * 1000 + i, 1, f"msg {m.index} (assistant): "))
    return out


# ----------------------------------------------------------------------------------------- rendering


def _render_fact(f: Fact, limit: int | None) -> str:
    body = f.body
    if limit is not None and len(body) > max(limit, f.floor):
        # A floor keeps the body's first characters exactly as written (the session's intent).
        body = body[: f.floor] + "…" if limit <= f.floor else shorten(body, limit)
    lines = body.split("\n")
    return "\n".join([f"- {f.label}{lines[0]}", *(f"  {ln}" for ln in lines[1:])])


def _span(request: SummaryRequest) -> str:
    m = CITATION_RE.search(request.citation)
    if m and m.group(2):
        return m.group(2) + (f"-{m.group(3)}" if m.group(3) else "")
    idx = [msg.index for msg in request.messages]
    if not idx:
        return "(none)"
    return f"{min(idx)}-{max(idx)}" if min(idx) != max(idx) else str(idx[0])


def _header(request: SummaryRequest) -> list[str]:
    lines = [
        f"Summary of messages {_span(request)} (ctxc extractive). The full original is archived: "
        f"{request.citation}; run `ctxc restore` / `ctxc show` to recover details."
    ]
    if request.instructions and request.instructions.strip():
        lines.append(f"Focus: {shorten(request.instructions, 300)}")
    return lines


_STOP = _words(
    "the and for with that this from into about keep focus what which only all any are was were "
    "has have had not but its our your"
)
_PARTICLES = re.compile(r"(?:으로|에서|에게|까지|부터|이나|처럼|을|를|이|가|은|는|에|의|로|와|과|도|만)$")


def focus_words(instructions: str | None) -> tuple[str, ...]:
    """Words of the instructions worth matching; Korean particles are stripped (데이터를 → 데이터)."""
    if not instructions:
        return ()
    out: list[str] = []
    for word in re.findall(r"\w+", instructions.lower()):
        w = _PARTICLES.sub("", word) if re.search(r"[가-힣]", word) and len(word) > 2 else word
        min_len = 2 if re.search(r"[가-힣]", w) else 3
        if len(w) >= min_len and w not in _STOP and w not in out:
            out.append(w)
    return tuple(out)


@dataclass
class _Draft:
    """The bullets being fitted: which are live, how far each is shortened, what was omitted."""

    sections: tuple[str, ...]
    header: list[str]
    facts: list[Fact]
    omitted: dict[str, int]
    limits: dict[int, int] = field(default_factory=dict)  # fact position -> char limit
    dropped: set[int] = field(default_factory=set)

    def fact_line(self, i: int) -> str:
        return _render_fact(self.facts[i], self.limits.get(i))

    def render(self) -> str:
        out = list(self.header)
        by_section: dict[str, list[int]] = {s: [] for s in self.sections}
        for i, f in enumerate(self.facts):
            if i not in self.dropped:
                by_section[f.section].append(i)
        for s in self.sections:
            out.append("")
            out.append(f"## {s}")
            n = self.omitted.get(s, 0)
            if n:
                out.append(f"- ({n} older item{'s' if n != 1 else ''} omitted)")
            # Tier order inside a section puts routine counts after the events they summarize.
            idxs = sorted(by_section[s], key=lambda i: (self.facts[i].tier, self.facts[i].seq, i))
            out.extend(self.fact_line(i) for i in idxs)
            if not idxs and not n:
                out.append(f"- {EMPTY}")
        return "\n".join(out) + "\n"


#: Sections that describe "now": a newer span's bullets supersede an earlier summary's.
_SUPERSEDED = (STATE, NEXT)
_READ_COUNT = re.compile(r"^read (\d+) files? \((.*)\)$")
_ROUTINE_COUNT = re.compile(r"^routine: (.*)$")
_RAN_COUNT = re.compile(r"^ran (\d+) commands? \((.*)\)$")
_OTHER_COUNT = re.compile(r"^(\d+) other tool calls? \((.*)\)$")
_TOP_ITEM = re.compile(r"^(.*?)(?: x(\d+))?$")


def _fold(facts: list[Fact], omitted: dict[str, int]) -> list[Fact]:
    """Merge an earlier summary's bullets (negative seq) with a newer span's.

    Current state and next steps are replaced when the newer span has its own (a stale state is
    wrong, not just old); routine counts are added up into one bullet per kind instead of one per
    fold, so a summary folded many times does not fill up with count lines.
    """
    newer = {f.section for f in facts if f.seq >= 0}
    out: list[Fact] = []
    for f in facts:
        if f.section in _SUPERSEDED and f.section in newer and f.seq < 0:
            continue
        out.append(f)
    for section in _SUPERSEDED:
        if section in newer:
            omitted.pop(section, None)
    routine = [f for f in out if f.section == ARTIFACTS and f.tier == 3]
    if not any(f.seq < 0 for f in routine) or len(routine) <= 1:
        return out
    merged = _merge_counts(routine)
    rest = [f for f in out if not (f.section == ARTIFACTS and f.tier == 3)]
    return rest + merged


def _merge_counts(routine: list[Fact]) -> list[Fact]:
    reads: dict[str, None] = {}
    read_n = 0
    work = {"search": 0, "list": 0}
    totals = {"ran": 0, "other": 0}
    tables: dict[str, dict[str, int]] = {"ran": {}, "other": {}}
    seqs: dict[str, int] = {}
    kept: list[Fact] = []
    for f in routine:
        if m := _READ_COUNT.match(f.body):
            names = [n for n in m.group(2).split(", ") if n and not re.fullmatch(r"\+\d+ more", n)]
            read_n += int(m.group(1)) - sum(1 for n in names if n in reads)
            reads.update(dict.fromkeys(names))
            key = "read"
        elif m := _ROUTINE_COUNT.match(f.body):
            for part in m.group(1).split(", "):
                n, _, what = part.partition(" ")
                if n.isdigit():
                    work["search" if what.startswith("search") else "list"] += int(n)
            key = "work"
        elif m := _RAN_COUNT.match(f.body) or _OTHER_COUNT.match(f.body):
            key = "ran" if f.body.startswith("ran ") else "other"
            totals[key] += int(m.group(1))
            for item in m.group(2).split(", "):
                top = _TOP_ITEM.match(item)
                if top and top.group(1) not in ("", "…"):
                    name = top.group(1)
                    tables[key][name] = tables[key].get(name, 0) + int(top.group(2) or 1)
        else:
            kept.append(f)  # shortened by an earlier shrink: kept as it is
            continue
        seqs[key] = max(seqs.get(key, f.seq), f.seq)
    out: list[Fact] = []
    if reads:
        names = list(reads)
        more = read_n - min(len(names), 6)
        shown = ", ".join(names[:6]) + (f", +{more} more" if more > 0 else "")
        out.append(Fact(ARTIFACTS, f"read {_n(max(read_n, len(names)), 'file')} ({shown})", seqs["read"], 3))
    labels = [_n(work["search"], "search", "searches")] if work["search"] else []
    labels += [_n(work["list"], "listing")] if work["list"] else []
    if labels:
        out.append(Fact(ARTIFACTS, "routine: " + ", ".join(labels), seqs["work"], 3))
    for key in ("ran", "other"):
        table = tables[key]
        if table:
            listed = _top(table)
            if sum(table.values()) < totals[key] and not listed.endswith("…"):
                listed += ", …"  # an earlier summary listed only its top names
            text = f"ran {_n(totals[key], 'command')}" if key == "ran" else _n(totals[key], "other tool call")
            out.append(Fact(ARTIFACTS, f"{text} ({listed})", seqs[key], 3))
    return kept + out


def compose(
    request: SummaryRequest, count: Callable[[str], int], tiers: Tiers, previous: Iterable[Fact] = ()
) -> str:
    """Render the tiers into the fixed sections and shrink deterministically to the budget."""
    sections = request.sections
    merged: list[Fact] = []
    seen: set[tuple[str, str]] = set()
    omitted_in = dict(tiers.omitted)
    facts = [*previous, *tiers.facts()]
    intent = request.intent.strip() if request.intent else ""
    if intent:
        # The intent is quoted once, first and whole; other bullets that restate it go.
        facts = [_intent_fact(intent), *(f for f in facts if not _restates(f, intent))]
    for f in _fold(facts, omitted_in):
        key = (f.section, _norm(f.label + f.body))
        if f.section in sections and key not in seen:
            seen.add(key)
            merged.append(f)
    # The first bullet of Session intent is the session's intent, wherever it came from.
    firsts = sorted(
        (i for i, f in enumerate(merged) if f.section == INTENT), key=lambda i: (merged[i].seq, i)
    )
    for rank, i in enumerate(firsts):
        floor = (len(merged[i].body) if intent else FIRST_REQUEST_FLOOR) if rank == 0 else 0
        merged[i] = replace(merged[i], keep=rank == 0, floor=floor)
    omitted = {k: v for k, v in omitted_in.items() if k in sections}
    draft = _Draft(sections, _header(request), merged, omitted)
    text = draft.render()
    if count(text) <= request.budget:
        return text

    words = focus_words(request.instructions)
    focused = [any(w in (f.label + f.body).lower() for w in words) for f in merged]
    ranks = [_drop_rank(f) for f in merged]

    def pick(focus: bool, wanted: tuple[int, ...]) -> list[int]:
        return [i for i in range(len(merged)) if focused[i] == focus and ranks[i] in wanted]

    # Lowest tiers first; bullets matching the instructions last of all. Each step returns as soon
    # as the text fits.
    steps: list[tuple[str, list[int]]] = [
        ("shorten", pick(False, (0, 1))),
        ("drop", pick(False, (0,))),
        ("drop", pick(False, (1,))),
        ("shorten", pick(False, (2,))),
        ("drop", pick(False, (2,))),
        ("shorten", pick(True, (0, 1, 2))),
        ("drop", pick(True, (0,))),
        ("drop", pick(True, (1,))),
        ("drop", pick(True, (2,))),
    ]
    for action, ids in steps:
        if not ids:
            continue
        fitted = _shorten_step(draft, ids, request.budget, count) if action == "shorten" else None
        if action == "drop":
            fitted = _drop_step(draft, ids, request.budget, count)
        if fitted is not None:
            return fitted
    return draft.render()  # the minimum: headings, citation and the session's intent


_USER_LABEL = re.compile(r"^msg \d+ \(user\): ")


def _intent_fact(intent: str) -> Fact:
    return Fact(INTENT, intent, -3_000_000, 1, INTENT_LABEL, floor=len(intent), keep=True)


def _restates(f: Fact, intent: str) -> bool:
    """Whether a Session intent bullet is the intent again (the span's own copy of the first request, an
    earlier summary's quote of it), whole or shortened."""
    if f.section != INTENT:
        return False
    body = _norm(_USER_LABEL.sub("", f.label + f.body)).rstrip("…").strip()
    key = _norm(intent)
    return bool(body) and (body == key or body.endswith(key) or key.startswith(body))


def _drop_rank(f: Fact) -> int:
    """Which bullets go first: routine counts (tier 3), then events (tier 2), then tier 1."""
    return 0 if f.tier >= 3 else 1 if f.tier == 2 else 2


def _shorten_step(draft: _Draft, ids: list[int], budget: int, count: Callable[[str], int]) -> str | None:
    for level in SHORTEN_LEVELS:
        changed = False
        for i in ids:
            f = draft.facts[i]
            if len(f.body) > max(level, f.floor) and draft.limits.get(i, 1 << 30) > level:
                draft.limits[i] = level
                changed = True
        if changed:
            text = draft.render()
            if count(text) <= budget:
                return text
    return None


def _drop_step(draft: _Draft, ids: list[int], budget: int, count: Callable[[str], int]) -> str | None:
    """Drop the oldest of ``ids`` from the largest sections until the text fits (or none are left)."""
    facts = draft.facts
    queues: dict[str, deque[int]] = {}
    for i in sorted(ids, key=lambda i: (facts[i].seq, i)):
        if i not in draft.dropped and not facts[i].keep:
            queues.setdefault(facts[i].section, deque()).append(i)
    while True:
        text = draft.render()
        total = count(text)
        if total <= budget:
            return text
        if not any(queues.values()):
            return None
        excess = total - budget
        removed = 0
        # Section sizes in characters: cheap, and only used to decide where to cut.
        size: dict[str, int] = {}
        for i in range(len(facts)):
            if i not in draft.dropped:
                size[facts[i].section] = size.get(facts[i].section, 0) + len(draft.fact_line(i))
        while removed < excess and any(queues.values()):
            section = max(
                (s for s, q in queues.items() if q), key=lambda s: (size[s], -draft.sections.index(s))
            )
            victim = queues[section].popleft()
            line = draft.fact_line(victim)
            removed += count(line) + 1
            size[section] -= len(line)
            draft.dropped.add(victim)
            draft.omitted[section] = draft.omitted.get(section, 0) + 1


class ExtractiveSummarizer:
    """Summaries built from the transcript itself: deterministic, offline, instant."""

    name = "extractive"

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        tiers = tier_messages(request.messages)
        previous: list[Fact] = []
        if request.previous:
            facts, omitted = _previous_facts(request.previous, -2_000_000)
            previous = facts
            if omitted:
                merged_omitted = dict(omitted)
                for k, v in tiers.omitted.items():
                    merged_omitted[k] = merged_omitted.get(k, 0) + v
                tiers = replace(tiers, omitted=merged_omitted)
        return compose(request, count, tiers, previous)


register("extractive", lambda _options: ExtractiveSummarizer())
