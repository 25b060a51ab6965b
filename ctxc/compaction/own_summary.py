"""The log's own compaction summary, shortened when fifo or selective cannot meet the target otherwise:
first without its analysis part, else sorted into a ctxc summary's sections and shrunk extractively.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxc.compaction.base import Action, CompactContext, StrategyResult
from ctxc.compaction.recursive import summary_message
from ctxc.model import Message, TextBlock
from ctxc.summarize import SECTIONS, SummaryRequest
from ctxc.summarize.extractive import key_sentences
from ctxc.summarize.facts import Fact, Tiers, compose

INTENT, DECISIONS, ARTIFACTS, ERRORS, STATE, NEXT = SECTIONS

#: Where a heading's lines go, by the first keyword its title holds (checked in this order), and
#: their tier (1 kept longest).
_SECTION_WORDS: tuple[tuple[tuple[str, ...], str, int], ...] = (
    (("pending", "next", "todo", "remaining", "open question"), NEXT, 1),
    (("user message", "intent", "request", "goal", "instruction", "constraint", "preference"), INTENT, 1),
    (("current", "progress", "state", "status", "done", "work"), STATE, 1),
    (("decision",), DECISIONS, 1),
    (("problem solving", "solution", "approach"), DECISIONS, 2),
    (("error", "fix", "issue", "bug", "problem"), ERRORS, 2),
    (("concept", "technolog"), ARTIFACTS, 3),
    (("file", "code", "artifact", "change"), ARTIFACTS, 2),
)
#: A heading: markdown (``## Goal``), numbered (``1. Primary Request and Intent:``), or one of the
#: words Claude Code's summary is framed with (``Analysis:``, ``Summary:``, their XML tags).
_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s+(?P<md>\S.{0,80}?)\s*|\d{1,2}\.\s+(?P<num>[^\n:]{2,80}):\s*"
    r"|(?P<word>Analysis|Summary):\s*|<(?P<tag>/?(?:analysis|summary))>\s*)$",
    re.I,
)
#: Client boilerplate: ctxc's header says where the original is, and the client adds its own again.
_BOILERPLATE = (
    "This session is being continued from a previous conversation",
    "If you need specific details from before compaction",
)
_NOTE = "the log's own compaction summary, shortened extractively to fit (the original is archived)"
_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s+")
_FENCE = "```"


@dataclass(frozen=True, slots=True)
class _Line:
    section: str
    tier: int
    text: str
    analysis: bool  # part of the summary's own chronological analysis


def shortenable(message: Message) -> bool:
    """A summary made of words ctxc can read (not an opaque, encrypted one)."""
    return all(isinstance(b, TextBlock) for b in message.blocks) and bool(message.text.strip())


def _lines(text: str) -> list[_Line]:
    """The summary's lines (a fenced code block as one), each with its section and tier."""
    out: list[_Line] = []
    section, tier, analysis = STATE, 2, False
    fence: list[str] | None = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        if fence is not None:
            fence.append(raw)
            if raw.strip().startswith(_FENCE):
                out.append(_Line(ARTIFACTS, 3, "\n".join(fence), analysis))
                fence = None
            continue
        if raw.strip().startswith(_FENCE):
            fence = [raw.strip()]
            continue
        heading = _HEADING.match(raw)
        if heading:
            word = (heading.group("word") or heading.group("tag") or "").lower()
            if word:  # Analysis/Summary, or their tags, open or close the analysis part
                analysis = word == "analysis"
            else:
                title = (heading.group("md") or heading.group("num") or "").lower()
                found = ((s, t) for words, s, t in _SECTION_WORDS if any(w in title for w in words))
                section, tier = next(found, (STATE, 2))
            continue
        body = _BULLET.sub("", raw).strip()
        if body and not body.startswith(_BOILERPLATE):
            out.append(_Line(section, tier, body, analysis))
    if fence is not None:
        out.append(_Line(ARTIFACTS, 3, "\n".join(fence), analysis))
    return out


def _is_decision(text: str) -> bool:
    probe = Message(role="assistant", blocks=(TextBlock(text),))
    return any(k.kind == "decision" for k in key_sentences(probe))


def _tiers(message: Message) -> Tiers:
    """The summary's lines as facts; the first intent bullet says what this is a shortening of."""
    lines = _lines(message.text)
    if any(not line.analysis for line in lines):
        # The analysis is the model's working notes; its summary part says the same, distilled.
        lines = [line for line in lines if not line.analysis]
    label = f"the log's own compaction summary (msg {max(message.index, 0)}), shortened: "
    facts: list[Fact] = []
    for seq, line in enumerate(lines):
        section, tier = line.section, line.tier
        if section not in (INTENT, NEXT) and "\n" not in line.text and _is_decision(line.text):
            section, tier = DECISIONS, 1
        first_intent = section == INTENT and all(f.section != INTENT for f in facts)
        facts.append(Fact(section, line.text, seq, tier, label if first_intent else ""))
    verbatim, events, routine = (tuple(f for f in facts if f.tier == t) for t in (1, 2, 3))
    return Tiers(verbatim, events, routine)


def _without_analysis(message: Message, cite: str) -> str | None:
    """The summary part of a summary that also holds the model's analysis, verbatim, with a header
    saying so; None when there is no such split."""
    lines = _lines(message.text)
    if not any(line.analysis for line in lines) or all(line.analysis for line in lines):
        return None
    text = message.text.replace("\r\n", "\n")
    kept: list[str] = []
    analysis = False
    for raw in text.split("\n"):
        heading = _HEADING.match(raw)
        word = (heading.group("word") or heading.group("tag") or "").lower() if heading else ""
        if word:
            analysis = word == "analysis"
            continue
        if not analysis and not raw.strip().startswith(_BOILERPLATE):
            kept.append(raw)
    body = "\n".join(kept).strip()
    index = max(message.index, 0)
    header = (
        f"The log's own compaction summary (msg {index}) without its analysis part, left out by ctxc to "
        f"fit the context. The full original is archived: {cite}; run `ctxc restore` / `ctxc show` to "
        "recover details."
    )
    return f"{header}\n\n## Summary\n{body}\n"


def shorten_own_summary(message: Message, budget: int, ctx: CompactContext) -> Message | None:
    """``message`` (the log's own summary) as a ctxc summary of at most ``budget`` tokens, or None
    when even its shortest form is over: its summary part verbatim if that is enough, else shrunk."""
    cite = ctx.cite(message.index)
    verbatim = _without_analysis(message, cite)
    if verbatim is not None:
        out = summary_message(verbatim, (message,))
        if ctx.ledger.tokens(out) <= budget:
            return out
    tiers = _tiers(message)
    # Framing costs a few tokens and shrinking goes in steps: ask for less, by more each time.
    text_budget, step = budget, 1
    for _ in range(12):
        if text_budget < 1:
            return None
        request = SummaryRequest(messages=(message,), citation=cite, budget=text_budget)
        out = summary_message(compose(request, ctx.ledger.count_text, tiers), (message,))
        over = ctx.ledger.tokens(out) - budget
        if over <= 0:
            return out
        text_budget -= max(over, step)
        step *= 2
    return None


def fit_own_summary(
    messages: Sequence[Message],
    ctx: CompactContext,
    result: StrategyResult,
    rerun: Callable[[Sequence[Message]], StrategyResult],
    strategy: str,
) -> StrategyResult:
    """``result`` is over the target: shorten the pinned own summaries (largest first) by what it is
    over and ``rerun`` the strategy; its result if that meets the target, else ``result``."""
    spots = sorted(
        (
            pos
            for pos, m in enumerate(messages)
            if m.meta.get("is_compact_summary") and m.index in ctx.pinned and shortenable(m)
        ),
        key=lambda pos: -ctx.ledger.tokens(messages[pos]),
    )
    if not spots:
        return result
    excess = ctx.tokens(result.messages) - ctx.target
    for _ in range(3):  # the rerun may place its placeholders a little differently: ask for that too
        out = list(messages)
        actions: list[Action] = []
        left = excess
        for pos in spots:
            if left <= 0:
                break
            own = messages[pos]
            before = ctx.ledger.tokens(own)
            short = shorten_own_summary(own, before - left, ctx)
            if short is None:
                return result
            after = ctx.ledger.tokens(short)
            out[pos] = short
            left -= before - after
            actions.append(Action(strategy, "summarize", own.index, own.index, before, after, _NOTE))
        if left > 0:
            return result
        again = rerun(out)
        over = ctx.tokens(again.messages) - ctx.target
        if over <= 0:
            return StrategyResult(again.messages, (*actions, *again.actions))
        excess += over
    return result
