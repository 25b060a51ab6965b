"""What ``ctxc eval`` measures of a compacted output against its original, besides the needles."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from ctxc.live import request_text, session_intent
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock, Transcript
from ctxc.search.chunks import render_input
from ctxc.summarize.toolcalls import PATH_KEYS
from ctxc.validate import pairing_problems, role_problems

_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.M)
#: A line that says what went wrong (a traceback's header says only that something did).
_ERROR_LINE = re.compile(r"(\b\w*(?:Error|Exception)\b:|\bFAILED\b|\bfatal:|\berror:|\bERROR\b)")
_DECISION = re.compile(
    r"\b(decided|decide to|we'll use|I'll use|let's use|let's go with|going with|go with|chose|opted for|"
    r"instead of|rather than|switch(?:ed)? to)\b",
    re.I,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def text_of(messages: Sequence[Message]) -> str:
    """Everything a model would read of ``messages``: texts, tool inputs (unescaped), tool results."""
    parts: list[str] = []
    for b in (b for m in messages for b in m.blocks):
        if isinstance(b, ToolUseBlock):
            parts.append(f"{b.name} {render_input(b.input)}")
        elif isinstance(b, TextBlock | ToolResultBlock):
            parts.append(b.text)
        elif isinstance(text := getattr(b, "text", ""), str) and text:
            parts.append(text)
    return "\n".join(parts)


def norm(text: str) -> str:
    return " ".join(text.split())


def tool_paths(
    messages: Sequence[Message], accept: Callable[[str, str, str], bool], patch_file: re.Pattern[str]
) -> list[str]:
    """Paths tool calls name, in order: one-line input values under PATH_KEYS that ``accept(tool, key,
    value)`` takes, and the files of the patches they carry that ``patch_file`` matches."""
    found: dict[str, None] = {}
    for b in (b for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)):
        inp = b.input
        patch = inp if isinstance(inp, str) else ""
        if isinstance(inp, Mapping):
            for key in PATH_KEYS:
                v = inp.get(key)
                if isinstance(v, str) and "\n" not in v and accept(b.name, key, v):
                    found.setdefault(v.strip(), None)
            patch = next((v for v in inp.values() if isinstance(v, str) and "*** " in v), "")
        for match in patch_file.finditer(patch):
            found.setdefault(match.group(1).strip(), None)
    return list(found)


def _pathlike(tool: str, key: str, value: str) -> bool:
    return 2 < len(value) < 300 and ("/" in value or "." in value)


def _errors(messages: Sequence[Message]) -> list[str]:
    """The telling line of each tool result that reports an error (deduplicated)."""
    found: dict[str, None] = {}
    for b in (b for m in messages for b in m.blocks if isinstance(b, ToolResultBlock)):
        lines = [ln.strip() for ln in b.text.splitlines() if ln.strip()]
        hit = next((ln for ln in lines if _ERROR_LINE.search(ln)), None)
        if hit is None and b.is_error and lines:
            hit = lines[0]
        if hit is not None and len(hit) >= 8:
            found.setdefault(norm(hit)[:200], None)
    return list(found)


def _decisions(messages: Sequence[Message], exclude: Sequence[str]) -> list[str]:
    found: dict[str, None] = {}
    for m in messages:
        if m.role not in ("user", "assistant"):
            continue
        for b in (b for b in m.blocks if isinstance(b, TextBlock)):
            for s in map(norm, _SENTENCE.split(b.text)):
                if 20 <= len(s) <= 300 and _DECISION.search(s) and not any(x in s for x in exclude):
                    found.setdefault(s, None)
    return list(found)


def survival(
    original: Sequence[Message], output_text: str, *, exclude: Sequence[str] = ()
) -> dict[str, tuple[int, int]]:
    """kind → (kept, total) of file paths, error lines and decision sentences of ``original``."""
    out = norm(output_text)
    items = {
        "paths": tool_paths(original, _pathlike, _PATCH_FILE),
        "errors": [e for e in _errors(original) if not any(x in e for x in exclude)],
        "decisions": _decisions(original, exclude),
    }
    return {k: (sum(norm(v) in out for v in vs), len(vs)) for k, vs in items.items()}


def first_requests(transcript: Transcript) -> list[str]:
    """The user's own words of each conversation's first request (:func:`ctxc.live.session_intent`),
    but a subagent run's (its "request" is the parent agent's Task prompt, and goes with that call)."""
    intents = (session_intent(transcript.conversation(c)) for c in range(transcript.conversations))
    return [request_text(m) for m in intents if m is not None and not m.meta.get("is_sidechain")]


def problems(output: Sequence[Message], original: Sequence[Message]) -> int:
    """Strict pairing problems of the output, plus role problems beyond those the input had."""
    before = Counter(p.code for p in role_problems(original))
    extra = Counter(p.code for p in role_problems(output)) - before  # keeps the positive counts
    return len(pairing_problems(output, strict=True)) + sum(extra.values())
