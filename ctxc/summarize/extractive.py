"""The default summarizer, offline: requests and decisions quoted verbatim (tier 1), errors, file changes
and state in a line each (tier 2), routine work counted (tier 3), fitted to the budget by ``compose``."""

from __future__ import annotations

import bisect
import re
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from ctxc.live import request_text
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.summarize import SummaryRequest, register
from ctxc.summarize.facts import (
    ARTIFACTS,
    DECISIONS,
    ERRORS,
    FIRST_REQUEST_FLOOR,
    INTENT,
    NEXT,
    STATE,
    Fact,
    Routine,
    Tiers,
    compose,
    norm,
    plural,
    previous_facts,
)
from ctxc.summarize.toolcalls import Call, classify_call, error_line, shorten

REQUEST_CHARS = 400  # later requests are shortened (users paste logs into them)
DECISION_CHARS = 400
#: How a placeholder's text starts and how it lists what it quotes (see ctxc.compaction.fifo).
PLACEHOLDER_PREFIX = "[ctxc] "
QUOTES_HEADING = "Instructions and decisions in them, verbatim:"
_QUOTED_LINE = re.compile(r"^- msg (\d+) \((\w+)\): (.*)$")

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
# Sentence ends: Latin and CJK punctuation followed by space, or a line break.
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?。\uff01\uff1f])\s+|\n+")


def _sentences(text: str) -> Iterator[str]:
    for part in _SENTENCE_SPLIT.split(_FENCE.sub(" ", text)):
        s = part.strip().lstrip("-*•>#0123456789.) ").strip()
        if s:
            yield s


def _text_of(m: Message) -> str:
    return "\n".join(b.text for b in m.blocks if isinstance(b, TextBlock) and b.text).replace("\r\n", "\n")


def _is_placeholder_text(m: Message) -> bool:
    """A placeholder read back from a file (its metadata is gone): ctxc's note, not a user's words."""
    first = m.blocks[0] if len(m.blocks) == 1 else None
    return m.role == "user" and isinstance(first, TextBlock) and first.text.startswith(PLACEHOLDER_PREFIX)


def _is_request(m: Message, prev: Message | None) -> bool:
    """A user's own words (:attr:`Message.is_request`): not ctxc's, not injected, not an observation."""
    meta = m.meta
    if not m.is_request or meta.get("ctxc") or _is_placeholder_text(m):
        return False  # a placeholder's text: ctxc's own note, read back from a file
    if prev is not None and prev.role == "assistant" and prev.meta.get("action") and "history_index" in meta:
        return False  # SWE-agent classic: the user turn after an action is that action's observation
    return meta.get("source") != "environment"  # OpenHands: the runtime speaking


def _request_text(m: Message) -> str:
    """The user's own words (:func:`~ctxc.live.request_text`, a slash command's arguments included)."""
    return request_text(m).replace("\r\n", "\n")


def _asked_and_said(m: Message, prev: Message | None) -> tuple[str, str]:
    """What ``m`` asks (its user's request, else "") and what it says that may hold decisions: an
    assistant's text, a user's request; never a tool's or the harness's words."""
    asked = _request_text(m) if _is_request(m, prev) else ""
    return asked, _text_of(m) if m.role == "assistant" else asked


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
#: A superset of what the two patterns match, checked first: most messages state no choice at all.
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
    low = text.lower()
    if not any(k in low for k in _DECISION_HINTS):
        return
    for s in _sentences(text):
        if 12 <= len(s) <= 1200 and (
            _DECISION.search(s) or (_INTENT.search(s) and not _ROUTINE_INTENT.search(s))
        ):
            yield s


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


def key_sentences(m: Message, prev: Message | None = None) -> tuple[KeySentence, ...]:
    """The user instructions and decisions in one message, as the summary's tier 1 quotes them; a ctxc
    placeholder gives those of the messages it replaced (``meta["quoted"]``): trimming twice loses none."""
    if m.meta.get("ctxc") == "placeholder":
        quoted = m.meta.get("quoted")
        return tuple(k for k in quoted if isinstance(k, KeySentence)) if isinstance(quoted, tuple) else ()
    if _is_placeholder_text(m):
        _, _, quoted = _text_of(m).partition(QUOTES_HEADING)
        found = (_QUOTED_LINE.match(line) for line in quoted.splitlines())
        return tuple(
            KeySentence(int(f[1]), f[2], f[3], "instruction" if f[2] == "user" else "decision")
            for f in found
            if f
        )
    if m.meta.get("ctxc") or m.meta.get("is_demo") or m.meta.get("is_compact_summary"):
        return ()
    out: list[KeySentence] = []
    asked, said = _asked_and_said(m, prev)
    if asked:
        out.append(KeySentence(m.index, m.role, shorten(asked, REQUEST_CHARS), "instruction"))
    out += [KeySentence(m.index, m.role, shorten(s, DECISION_CHARS), "decision") for s in _decisions(said)]
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Outcome:
    call: Call
    error: str | None


#: A stated plan counts as current only if it came within the last few assistant texts.
_PLAN_TURNS = 3
_NEXT = re.compile(
    r"\b(?:next|todo|remaining|remains|need to|needs to|will|should|going to|plan to|afterwards|i'll|we'll"
    r"|let's|still (?:need|have|to))\b|TODO|다음|남은|해야|예정|하겠|할게|필요",
    re.I,
)


@dataclass
class _Reader:
    """What :func:`tier_messages` gathers while it reads a span in order."""

    verbatim: list[Fact] = field(default_factory=list)
    earlier: list[Fact] = field(default_factory=list)
    omitted: Counter[str] = field(default_factory=Counter)
    calls: dict[str, Call] = field(default_factory=dict)
    outcomes: list[_Outcome] = field(default_factory=list)
    decisions_seen: set[str] = field(default_factory=set)
    first_request: bool = True
    # The last few assistant messages with text: a plan stated long ago is no longer the plan.
    recent: deque[tuple[int, Message]] = field(default_factory=lambda: deque(maxlen=_PLAN_TURNS))
    plan_call: Call | None = None

    def read(self, pos: int, m: Message, prev: Message | None) -> None:
        if m.meta.get("is_demo"):
            return  # SWE-agent demonstrations: another task's worked example, not this session
        if m.meta.get("ctxc") == "summary":
            facts, omitted = previous_facts(_text_of(m), -1_000_000 + len(self.earlier))
            self.earlier += facts
            self.omitted.update(omitted)
        elif m.meta.get("ctxc") == "placeholder" or _is_placeholder_text(m):
            # What a trimming strategy quoted from the messages it removed: quoted again, verbatim.
            for quote in key_sentences(m):
                label = f"msg {quote.index} ({quote.role}): "
                if quote.kind == "instruction":
                    self.verbatim.append(Fact(INTENT, quote.text, pos, 1, label))
                else:
                    self._decision(quote.text, quote.text, pos, label)
        elif m.meta.get("is_compact_summary"):
            label = f"earlier summary (msg {m.index}): "
            if (text := _text_of(m)).strip():
                self.verbatim.append(Fact(INTENT, shorten(text, 600), pos, 1, label))
        else:
            self._message(pos, m, prev)

    def _decision(self, said: str, quote: str, pos: int, label: str) -> None:
        """A decision quoted once, however often it was stated."""
        if (key := norm(said)) not in self.decisions_seen:
            self.decisions_seen.add(key)
            self.verbatim.append(Fact(DECISIONS, f'"{quote}"', pos, 1, label))

    def _message(self, pos: int, m: Message, prev: Message | None) -> None:
        asked, said = _asked_and_said(m, prev)
        if asked:
            label = f"msg {m.index} (user): "
            if self.first_request:
                self.verbatim.append(Fact(INTENT, asked, pos, 1, label, floor=FIRST_REQUEST_FLOOR, keep=True))
                self.first_request = False
            else:
                self.verbatim.append(Fact(INTENT, shorten(asked, REQUEST_CHARS), pos, 1, label))
        if said and not m.meta.get("ctxc"):
            for s in _decisions(said):
                self._decision(s, shorten(s, DECISION_CHARS), pos, f"msg {m.index} ({m.role}): ")
        if m.role == "assistant":
            if said.strip():
                self.recent.append((pos, m))
            for b in m.blocks:
                if isinstance(b, ToolUseBlock):
                    call = self.calls[b.id] = classify_call(b, pos, m.index)
                    if call.kind == "plan":
                        self.plan_call = call
        for b in m.blocks:
            if isinstance(b, ToolResultBlock) and (found := self.calls.get(b.tool_use_id)) is not None:
                self.outcomes.append(_Outcome(found, error_line(b, found, m.meta.get("exit_code"))))

    def tiers(self) -> Tiers:
        calls = list(self.calls.values())
        verbatim, events = list(self.verbatim), [*_file_events(calls), *_error_events(self.outcomes)]
        # The last words and the plan are quotes (tier 1); tool outcomes are events (tier 2).
        for f in [*_state(self.recent, self.outcomes), *_next_steps(self.recent, self.plan_call)]:
            (verbatim if f.tier == 1 else events).append(f)
        routine = _routine_counts(calls)
        return Tiers(tuple(verbatim), tuple(events), tuple(routine), tuple(self.earlier), self.omitted)


def tier_messages(messages: Sequence[Message]) -> Tiers:
    """Sort a span into tiers: verbatim instructions and decisions, one-line events, routine counts."""
    reader = _Reader()
    for pos, m in enumerate(messages):
        reader.read(pos, m, messages[pos - 1] if pos else None)
    return reader.tiers()


def _file_events(calls: Sequence[Call]) -> list[Fact]:
    touched: dict[str, list[tuple[str, Call]]] = {}
    read_first: set[str] = set()
    for c in calls:
        read_first.update(p for p in c.reads if p not in touched)
        for action, p in c.changes:
            touched.setdefault(p, []).append((action, c))
    out: list[Fact] = []
    for path, acts in touched.items():
        (first_action, first), last = acts[0], acts[-1][1]
        span = f"msg {first.index}" if first.index == last.index else f"msgs {first.index}-{last.index}"
        n_edits = sum(1 for a, _ in acts if a == "edited")
        edits = f"{n_edits} edits" if n_edits > 1 else "1 edit"
        if acts[-1][0] == "deleted":
            what = "deleted" if first_action == "deleted" else f"{first_action} then deleted"
            body = f"{what} {path} ({span})"
        elif first_action == "created":
            what = "wrote" if path in read_first else "created"
            body = f"{what} {path} ({f'then {edits}, {span}' if n_edits else span})"
        else:
            body = f"edited {path} ({edits}, {span})"
        out.append(Fact(ARTIFACTS, body, last.pos, 2))
    return sorted(out, key=lambda f: f.seq)


def _routine_counts(calls: Sequence[Call]) -> list[Fact]:
    changed = {p for c in calls for _, p in c.changes}
    r = Routine()
    last = {"search": -1, "list": -1}
    for c in calls:
        for p in c.reads:
            if p not in changed:
                r.reads[p] = None
                r.seqs["read"] = c.pos
        if c.kind in last:
            r.work[c.kind] += 1
            last[c.kind] = c.pos
        elif c.kind == "command" or (c.kind == "read" and not c.reads):
            r.tables["ran"][c.key] += 1
            r.seqs["ran"] = c.pos
        elif c.kind == "other":
            r.tables["other"][c.name] += 1
            r.seqs["other"] = c.pos
    r.seqs["work"] = max(last.values())
    r.read_total = len(r.reads)
    r.totals.update({k: sum(t.values()) for k, t in r.tables.items()})
    return r.facts()


def _error_events(outcomes: Sequence[_Outcome]) -> list[Fact]:
    """One line per distinct failure (same call key and error line), with the fix when one follows."""
    groups: dict[tuple[str, str], list[int]] = {}
    successes: dict[str, list[int]] = {}
    for i, o in enumerate(outcomes):
        if o.error is None:
            successes.setdefault(o.call.key, []).append(i)
        else:
            groups.setdefault((o.call.key, shorten(o.error, 200)), []).append(i)
    out: list[Fact] = []
    for (key, err), idxs in groups.items():
        first, last_i = outcomes[idxs[0]].call, idxs[-1]
        later = successes.get(key, [])
        at = bisect.bisect_right(later, last_i)
        times = f" (x{len(idxs)})" if len(idxs) > 1 else ""
        # The error text leads so that shortening keeps it; the call and the outcome follow.
        body = f"{err}{times} [{first.label}]"
        if at < len(later):
            changed = (p for o in outcomes[last_i + 1 : later[at]] for _, p in o.call.changes)
            edits = list(dict.fromkeys(changed))
            how = f" after changing {', '.join(edits[:3])}" if edits else ""
            body += f" → fixed{how}: succeeded at msg {outcomes[later[at]].call.index}"
        else:
            body += " → no later success in this span"
        out.append(Fact(ERRORS, body, first.pos, 2, f"msg {first.index}: "))
    return sorted(out, key=lambda f: f.seq)


def _state(recent: Sequence[tuple[int, Message]], outcomes: Sequence[_Outcome]) -> list[Fact]:
    out: list[Fact] = []
    if recent:
        pos, m = recent[-1]
        label = f"last assistant message (msg {m.index}): "
        out.append(Fact(STATE, shorten(_text_of(m), 500), pos, 1, label))
    for o in outcomes[-3:]:
        status = "ok" if o.error is None else f"error: {shorten(o.error, 160)}"
        out.append(Fact(STATE, f"{o.call.label} → {status}", o.call.pos, 2, f"msg {o.call.index} "))
    return out


def _next_steps(recent: Sequence[tuple[int, Message]], plan_call: Call | None) -> list[Fact]:
    """The open items of the last todo/plan call and the plan stated last (unless a todo list since)."""
    out: list[Fact] = []
    if plan_call is not None and plan_call.plan is not None:
        label = f"open plan items (msg {plan_call.index}): "
        items = [shorten(item, 300) for item in plan_call.plan]
        items = items or [f"all {plural(plan_call.plan_done, 'planned item')} done"]
        out += [
            Fact(NEXT, item, plan_call.pos * 1000 + i, 1, "" if i else label) for i, item in enumerate(items)
        ]
    for pos, m in reversed(recent):
        if plan_call is not None and plan_call.pos > pos:
            break  # a todo list written since supersedes what was said before it
        sentences = [s for s in _sentences(_text_of(m)) if _NEXT.search(s) and len(s) >= 8]
        if sentences:
            label = f"msg {m.index} (assistant): "
            out += [
                Fact(NEXT, f'"{shorten(s, 300)}"', pos * 1000 + i, 1, label)
                for i, s in enumerate(sentences[-5:])
            ]
            break
    return out


class ExtractiveSummarizer:
    """Summaries built from the transcript itself: deterministic, offline, instant."""

    name = "extractive"

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        tiers = tier_messages(request.messages)
        previous: list[Fact] = []
        if request.previous:
            previous, omitted = previous_facts(request.previous, -2_000_000)
            if omitted:
                omitted.update(tiers.omitted)
                tiers = replace(tiers, omitted=omitted)
        return compose(request, count, tiers, previous)


register("extractive", lambda _options: ExtractiveSummarizer())
