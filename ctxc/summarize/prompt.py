"""The prompt of the summarizers that ask a model or a command, and the :class:`Validation` of answers."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxc.errors import SummarizerError
from ctxc.live import quotes
from ctxc.model import (
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    dumps_compact,
)
from ctxc.summarize import SECTION_GUIDE, SummaryRequest
from ctxc.summarize.facts import plural, span_label

#: Characters kept of each tool result; the rest is in the archive.
RESULT_CHARS = 2_000
#: Characters kept of a tool call's input (file contents in Write/Edit calls dominate otherwise).
INPUT_CHARS = 600
#: Characters kept of one text block (a pasted log in a user request).
TEXT_CHARS = 12_000
#: Words per token, to state the budget in words (models follow word counts better than token counts).
WORDS_PER_TOKEN = 0.6


@dataclass(frozen=True, slots=True)
class Prompt:
    system: str
    user: str

    @property
    def text(self) -> str:
        return f"{self.system}\n\n{self.user}"


def one_line(text: str, limit: int = 240) -> str:
    """``text`` with its whitespace collapsed, cut to ``limit`` characters (for error messages)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def clip(text: str, limit: int, what: str = "characters") -> str:
    """``text`` cut to about ``limit`` characters keeping head and tail, with a note of what was left out."""
    if len(text) <= limit:
        return text
    head = max(0, limit * 2 // 3)
    tail = max(0, limit - head)
    omitted = len(text) - head - tail
    return (
        f"{text[:head]}\n[… {omitted:,} {what} omitted here; the full text is in the archive …]\n"
        f"{text[len(text) - tail :] if tail else ''}"
    )


def _role_label(m: Message) -> str:
    if m.meta.get("ctxc") == "summary" or m.meta.get("is_compact_summary"):
        return "EARLIER SUMMARY"
    source = m.meta.get("source_role")
    label = m.role.upper()
    return f"{label} ({source})" if isinstance(source, str) and source != m.role else label


def _input_text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return dumps_compact(value)
    except TypeError:
        return repr(value)


def render_message(m: Message, *, result_chars: int = RESULT_CHARS) -> str:
    """One message as transcript text: ``[index] ROLE:`` then its blocks (thinking left out)."""
    lines = [f"[{m.index}] {_role_label(m)}:"]
    for b in m.blocks:
        if isinstance(b, TextBlock):
            if b.text.strip():
                lines.append(clip(b.text.strip(), TEXT_CHARS))
        elif isinstance(b, ToolUseBlock):
            inp = clip(_input_text(b.input), INPUT_CHARS)
            lines.append(f"→ tool call {b.name} (id {b.id}): {inp}")
        elif isinstance(b, ToolResultBlock):
            status = "ERROR result" if b.is_error else "result"
            of = f" of {b.name}" if b.name else ""
            body = clip(b.text.strip(), result_chars) if b.text.strip() else "(empty)"
            images = f" [+{len(b.images)} image(s)]" if b.images else ""
            lines.append(f"← tool {status}{of} (id {b.tool_use_id}){images}:\n{body}")
        elif isinstance(b, ImageBlock):
            size = f" {b.width}x{b.height}" if b.width and b.height else ""
            lines.append(f"[image {b.media_type or ''}{size}]".replace("  ", " "))
        elif isinstance(b, UnknownBlock):
            lines.append(f"[{b.type} block]" + (f": {clip(b.text, INPUT_CHARS)}" if b.text else ""))
    return "\n".join(lines)


def render_transcript(messages: Sequence[Message], *, result_chars: int = RESULT_CHARS) -> str:
    return "\n\n".join(render_message(m, result_chars=result_chars) for m in messages)


def _system(request: SummaryRequest, merging: bool) -> str:
    budget = max(1, request.budget)
    words = max(1, int(budget * WORDS_PER_TOKEN))
    material = (
        "partial summaries of consecutive parts of one agent session, oldest first"
        if merging
        else "a stretch of an AI coding agent's session transcript"
    )
    headings = "\n".join(f"## {s}" for s in request.sections)
    guide = "\n".join(f"- {s}: {SECTION_GUIDE.get(s, s)}" for s in request.sections)
    rules = [
        f"You compact long AI agent sessions. You are given {material}. Write ONE summary that replaces "
        "it in the agent's context, so the agent can continue the work from the summary alone.",
        "",
        "Format (Markdown):",
        "1. The first line is one sentence saying what the summary covers and that the full original is "
        f"archived at `{request.citation}`. Write that citation exactly as given; readers use it to "
        "recover details with `ctxc show` and `ctxc restore`.",
        "2. Then these sections as level-2 headings, exactly as written, in this order, every one present "
        '(write "- none recorded" under a section with nothing to say):',
        headings,
        "",
        "What each section holds:",
        guide,
        "",
        "Rules:",
        "- Bullets, dense and factual. Keep exact file paths, commands, identifiers, error messages, "
        "numbers and the user's own words where they matter.",
        "- Use only what the material says; never invent files, results or plans.",
        "- Later material wins: Current state and Next steps describe the end of the material.",
        f"- Length: at most about {plural(words, 'word')} ({plural(budget, 'token')}). Drop routine "
        "detail before decisions, user instructions and errors.",
        "- Output only the summary: no preamble, no closing remarks, no code fence around it.",
    ]
    if request.previous:
        rules.append(
            "- An earlier summary of the session's preceding messages is given in <previous_summary>: fold "
            "it in, keeping its facts unless the newer material supersedes them."
        )
    if request.instructions and request.instructions.strip():
        rules.append("- The user gave instructions for this summary in <instructions>: follow them.")
    if request.intent and request.intent.strip():
        rules.append(
            "- The session's intent, the user's first request, is given in <session_intent>: the first "
            "bullet of ## Session intent quotes it exactly, word for word, however long it is."
        )
    return "\n".join(rules)


def build_prompt(
    request: SummaryRequest,
    *,
    transcript: str | None = None,
    parts: Sequence[tuple[str, str]] = (),
    result_chars: int = RESULT_CHARS,
) -> Prompt:
    """The prompt for ``request``: ``transcript`` replaces the rendering of its messages (the caller
    rendered or clipped them), ``parts`` are the (citation, text) partial summaries to merge instead."""
    merging = bool(parts)
    tags = ("instructions", "session_intent", "previous_summary")
    texts = (request.instructions, request.intent, request.previous)
    blocks = [f"<{t}>\n{x.strip()}\n</{t}>" for t, x in zip(tags, texts, strict=True) if x and x.strip()]
    if merging:
        body = "\n\n".join(
            f'<part n="{i}" covers="{cite}">\n{text.strip()}\n</part>'
            for i, (cite, text) in enumerate(parts, 1)
        )
        blocks.append(f"<partial_summaries>\n{body}\n</partial_summaries>")
    else:
        if transcript is None:
            transcript = render_transcript(request.messages, result_chars=result_chars)
        blocks.append(f'<transcript messages="{span_label(request.messages)}">\n{transcript}\n</transcript>')
    what = "partial summaries" if merging else "transcript"
    blocks.append(
        f"Write the summary of the {what} above now, citing `{request.citation}` in the first line and "
        f"with the headings {', '.join(f'## {s}' for s in request.sections)}."
    )
    return Prompt(_system(request, merging), "\n\n".join(blocks))


_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]*(.+?)[ \t#]*$", re.M)


def _norm(heading: str) -> str:
    return re.sub(r"\s+", " ", heading.strip().strip("*_").rstrip(":").strip()).lower()


def check_summary(text: str, sections: Sequence[str]) -> list[str]:
    """The headings of ``sections`` missing from ``text``, in order; ``[]`` when all are present."""
    found = {_norm(h) for h in _HEADING.findall(text)}
    return [s for s in sections if _norm(s) not in found]


_FENCE = re.compile(r"^```[\w-]*\n(.*)\n```$", re.S)


def unfence(text: str) -> str:
    """A summary wrapped in a code fence, unwrapped (models and commands sometimes fence Markdown)."""
    m = _FENCE.match(text)
    return m.group(1).strip() if m else text


def with_citation(text: str, cite: str) -> str:
    """Every summary must carry its citation; an answer that left it out gets it as the first line."""
    body = text.strip() + "\n"
    if cite in body:
        return body
    return f"Summary of {cite} (the full original is archived there; `ctxc show` recovers details).\n\n{body}"


#: How a summary quotes the session's intent when its writer left the quote out.
INTENT_BULLET = "- The session's intent (its first request, verbatim): "


def with_intent(text: str, intent: str | None) -> str:
    """An answer without the session's intent word for word gets it as the first bullet of Session intent."""
    if not intent or not intent.strip() or quotes(text, intent):
        return text
    lines = intent.strip().split("\n")
    bullet = "\n".join([INTENT_BULLET + lines[0], *(f"  {line}" for line in lines[1:])])
    heading = next((m for m in _HEADING.finditer(text) if _norm(m.group(1)) == "session intent"), None)
    if heading is None:
        return f"{text.rstrip()}\n\n## Session intent\n{bullet}\n"
    at = heading.end()
    return f"{text[:at]}\n{bullet}{text[at:]}"


class Validation:
    """Two tries at a good summary: ask with :meth:`extend` applied to the prompt and :meth:`offer` the
    answer, which returns the summary or None to ask once more. A bad answer twice is a
    :class:`SummarizerError`; over budget twice, the shorter answer is kept."""

    def __init__(self, request: SummaryRequest, count: Callable[[str], int], *, who: str) -> None:
        self.request = request
        self.count = count
        self.who = who
        self.note: str | None = None
        self.best: str | None = None
        self.attempt = 0

    def extend(self, prompt: str) -> str:
        return prompt if self.note is None else f"{prompt}\n\n{self.note}"

    def offer(self, raw: str, stop: str | None = None, *, max_tokens: int | None = None) -> str | None:
        request, attempt = self.request, self.attempt
        self.attempt += 1
        text = unfence(raw.strip())
        missing = check_summary(text, request.sections) if text else list(request.sections)
        problem: str | None = None
        if not text:
            problem, self.note = "came back empty", "(Your previous answer was empty. Write the summary.)"
        elif stop == "max_tokens":
            problem = f"was cut off at max_tokens={max_tokens}"
            self.note = "(Your previous answer was too long and was cut off. Be more concise.)"
        elif stop == "refusal":
            problem, self.note = "was refused by the model", "(Summarize the material factually.)"
        elif missing:
            problem = f"lacks the section(s) {', '.join(missing)}"
            self.note = (
                "(Your previous answer lacked the headings "
                f"{', '.join('## ' + s for s in missing)}. Include every required heading exactly.)"
            )
        if problem is not None:
            if self.best is not None:
                return self.best  # the first answer was complete, only long: keep it
            if attempt >= 1:
                raise SummarizerError(
                    f"the summary of {request.citation} {problem}, also when asked again ({self.who})"
                )
            return None
        text = with_intent(with_citation(text, request.citation), request.intent)
        size = self.count(text)
        if size <= request.budget or attempt >= 1:
            if self.best is not None and self.count(self.best) <= size:
                return self.best
            return text
        self.best = text
        self.note = (
            f"(Your previous answer was {size} tokens; the limit is {request.budget}. Write a shorter "
            "summary with the same headings.)"
        )
        return None
