"""Summary bullets ("facts") and how the extractive summarizer fits them to a budget, deterministically:
lower tiers shrink first (routine counts, events, then quotes), bullets matching the user's focus last."""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ctxc.archive_store import CITATION_RE
from ctxc.model import Message
from ctxc.summarize import SECTIONS, SummaryRequest
from ctxc.summarize.toolcalls import shorten

INTENT, DECISIONS, ARTIFACTS, ERRORS, STATE, NEXT = SECTIONS

#: The first request is the session's intent: never dropped, never cut below this many characters.
FIRST_REQUEST_FLOOR = 500
#: The label of :attr:`SummaryRequest.intent`, which is quoted whole whatever the budget.
INTENT_LABEL = "the session's intent (its first request, verbatim): "
EMPTY = "none recorded"
#: Shortening levels tried, longest first, before any bullet is dropped.
SHORTEN_LEVELS = (300, 160, 80)


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
    """The material of a span sorted by how much detail it deserves (tiers 1 to 3)."""

    verbatim: tuple[Fact, ...]
    events: tuple[Fact, ...]
    routine: tuple[Fact, ...]
    earlier: tuple[Fact, ...] = ()  # bullets of earlier summaries found in the span
    omitted: Mapping[str, int] = field(default_factory=dict)


def norm(text: str) -> str:
    return " ".join(text.split()).lower()


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def span_label(messages: Sequence[Message]) -> str:
    if not messages:
        return "(none)"
    first, last = messages[0].index, messages[-1].index
    return str(first) if first == last else f"{first}-{last}"


def _top(counts: Mapping[str, int], k: int = 5) -> str:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in ranked[:k])
    return shown + (", …" if len(ranked) > k else "")


@dataclass
class Routine:
    """Routine work, counted for the tier-3 bullets: files read, searches and listings (``work``), and
    commands run and other tool calls by name (``tables`` "ran" and "other"); ``totals`` may exceed a
    table's sum when an earlier summary listed only its top names. ``seqs``: the last seq of each kind."""

    reads: dict[str, None] = field(default_factory=dict)
    read_total: int = 0
    work: Counter[str] = field(default_factory=Counter)
    tables: dict[str, Counter[str]] = field(default_factory=lambda: {"ran": Counter(), "other": Counter()})
    totals: Counter[str] = field(default_factory=Counter)
    seqs: dict[str, int] = field(default_factory=dict)

    def facts(self) -> list[Fact]:
        out: list[Fact] = []
        reads, work, seqs = list(self.reads), self.work, self.seqs
        if reads:
            more = self.read_total - min(len(reads), 6)
            shown = ", ".join(reads[:6]) + (f", +{more} more" if more > 0 else "")
            count = plural(max(self.read_total, len(reads)), "file")
            out.append(Fact(ARTIFACTS, f"read {count} ({shown})", seqs["read"], 3))
        labels = [plural(work["search"], "search", "searches")] if work["search"] else []
        labels += [plural(work["list"], "listing")] if work["list"] else []
        if labels:
            out.append(Fact(ARTIFACTS, "routine: " + ", ".join(labels), seqs["work"], 3))
        for key, unit in (("ran", "command"), ("other", "other tool call")):
            table, total = self.tables[key], self.totals[key]
            if table:
                listed = _top(table)
                if sum(table.values()) < total and not listed.endswith("…"):
                    listed += ", …"
                text = f"{plural(total, unit)} ({listed})"
                out.append(Fact(ARTIFACTS, f"ran {text}" if key == "ran" else text, seqs[key], 3))
        return out


_ROUTINE_BULLET = re.compile(r"^(?:read \d+ files?|routine:|ran \d+ commands?|\d+ other tool calls?) ")
_OMITTED_RE = re.compile(r"^\((\d+) older items? omitted")


def previous_facts(text: str, seq0: int) -> tuple[list[Fact], Counter[str]]:
    """Bullets of an earlier ctxc summary, by section, in order, and its omitted counts."""
    facts: list[Fact] = []
    omitted: Counter[str] = Counter()
    bullets: list[tuple[str, list[str]]] = []
    section: str | None = None
    current: list[str] | None = None  # the lines of the bullet being read
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("## "):
            section = line[3:].strip() if line[3:].strip() in SECTIONS else None
            current = None
        elif section is None:
            continue
        elif line.startswith("- "):
            current = [line[2:]]
            bullets.append((section, current))
        elif line.startswith("  ") and current is not None:
            current.append(line[2:])
    for section, lines in bullets:
        body = "\n".join(lines)
        if m := _OMITTED_RE.match(body):
            omitted[section] += int(m.group(1))
        elif body.strip() and body.strip() != EMPTY:
            tier = 1 if section in (INTENT, DECISIONS) else 3 if _ROUTINE_BULLET.match(body) else 2
            facts.append(Fact(section, body, seq0 + len(facts), tier))
    return facts, omitted


#: Sections that describe "now": a newer span's bullets supersede an earlier summary's.
_SUPERSEDED = (STATE, NEXT)
_READ_COUNT = re.compile(r"^read (\d+) files? \((.*)\)$")
_ROUTINE_COUNT = re.compile(r"^routine: (.*)$")
_TOOL_COUNT = re.compile(r"^(?:ran (\d+) commands?|(\d+) other tool calls?) \((.*)\)$")
_TOP_ITEM = re.compile(r"^(.*?)(?: x(\d+))?$")


def _fold(facts: list[Fact], omitted: dict[str, int]) -> list[Fact]:
    """Merge an earlier summary's bullets (negative seq) with a newer span's: its state and next steps go
    when the span has its own (stale is wrong, not just old); routine counts add up per kind."""
    newer = {f.section for f in facts if f.seq >= 0}
    out = [f for f in facts if not (f.section in _SUPERSEDED and f.section in newer and f.seq < 0)]
    for section in newer.intersection(_SUPERSEDED):
        omitted.pop(section, None)
    routine = [f for f in out if f.section == ARTIFACTS and f.tier == 3]
    if not any(f.seq < 0 for f in routine) or len(routine) <= 1:
        return out
    return [f for f in out if not (f.section == ARTIFACTS and f.tier == 3)] + _merge_counts(routine)


def _merge_counts(routine: list[Fact]) -> list[Fact]:
    """Routine count bullets of several summaries added up into one of each kind."""
    r = Routine()
    kept: list[Fact] = []
    for f in routine:
        if m := _READ_COUNT.match(f.body):
            names = [n for n in m.group(2).split(", ") if n and not re.fullmatch(r"\+\d+ more", n)]
            r.read_total += int(m.group(1)) - sum(1 for n in names if n in r.reads)
            r.reads.update(dict.fromkeys(names))
            key = "read"
        elif m := _ROUTINE_COUNT.match(f.body):
            for part in m.group(1).split(", "):
                n, _, what = part.partition(" ")
                if n.isdigit():
                    r.work["search" if what.startswith("search") else "list"] += int(n)
            key = "work"
        elif m := _TOOL_COUNT.match(f.body):
            key = "ran" if m.group(1) else "other"
            r.totals[key] += int(m.group(1) or m.group(2))
            for item in m.group(3).split(", "):
                top = _TOP_ITEM.match(item)
                if top and top.group(1) not in ("", "…"):
                    r.tables[key][top.group(1)] += int(top.group(2) or 1)
        else:
            kept.append(f)  # shortened by an earlier shrink: kept as it is
            continue
        r.seqs[key] = max(r.seqs.get(key, f.seq), f.seq)
    return kept + r.facts()


def _render_fact(f: Fact, limit: int | None) -> str:
    body = f.body
    if limit is not None and len(body) > max(limit, f.floor):
        # A floor keeps the body's first characters exactly as written (the session's intent).
        body = body[: f.floor] + "…" if limit <= f.floor else shorten(body, limit)
    lines = body.split("\n")
    return "\n".join([f"- {f.label}{lines[0]}", *(f"  {ln}" for ln in lines[1:])])


def _header(request: SummaryRequest) -> list[str]:
    m = CITATION_RE.search(request.citation)
    if m and m.group(2):
        span = m.group(2) + (f"-{m.group(3)}" if m.group(3) else "")
    else:
        span = span_label(sorted(request.messages, key=lambda msg: msg.index))
    lines = [
        f"Summary of messages {span} (ctxc extractive). The full original is archived: "
        f"{request.citation}; run `ctxc restore` / `ctxc show` to recover details."
    ]
    if request.instructions and request.instructions.strip():
        lines.append(f"Focus: {shorten(request.instructions, 300)}")
    return lines


_STOP = frozenset((
    "the", "and", "for", "with", "that", "this", "from", "into", "about", "keep", "focus", "what", "which",
    "only", "all", "any", "are", "was", "were", "has", "have", "had", "not", "but", "its", "our", "your",
))  # fmt: skip
_PARTICLES = re.compile(r"(?:으로|에서|에게|까지|부터|이나|처럼|을|를|이|가|은|는|에|의|로|와|과|도|만)$")
_HANGUL = re.compile(r"[가-힣]")


def focus_words(instructions: str | None) -> tuple[str, ...]:
    """Words of the instructions worth matching; Korean particles are stripped (데이터를 → 데이터)."""
    out: list[str] = []
    for word in re.findall(r"\w+", (instructions or "").lower()):
        w = _PARTICLES.sub("", word) if _HANGUL.search(word) and len(word) > 2 else word
        if len(w) >= (2 if _HANGUL.search(w) else 3) and w not in _STOP and w not in out:
            out.append(w)
    return tuple(out)


@dataclass
class _Draft:
    """The bullets being fitted: which are live, how far each is shortened, what was omitted."""

    sections: tuple[str, ...]
    header: list[str]
    facts: list[Fact]
    omitted: Counter[str]
    limits: dict[int, int] = field(default_factory=dict)  # fact position -> char limit
    dropped: set[int] = field(default_factory=set)

    def fact_line(self, i: int) -> str:
        return _render_fact(self.facts[i], self.limits.get(i))

    def render(self) -> str:
        out = list(self.header)
        live = [i for i in range(len(self.facts)) if i not in self.dropped]
        # Tier order inside a section puts routine counts after the events they summarize.
        live.sort(key=lambda i: (self.facts[i].tier, self.facts[i].seq, i))
        for s in self.sections:
            out += ["", f"## {s}"]
            n = self.omitted[s]
            if n:
                out.append(f"- ({plural(n, 'older item')} omitted)")
            lines = [self.fact_line(i) for i in live if self.facts[i].section == s]
            out += lines if lines or n else [f"- {EMPTY}"]
        return "\n".join(out) + "\n"


_USER_LABEL = re.compile(r"^msg \d+ \(user\): ")
#: The shrinking steps, in order: (action, bullets matching the focus, drop ranks).
_STEPS = (
    ("shorten", False, (0, 1)),
    ("drop", False, (0,)),
    ("drop", False, (1,)),
    ("shorten", False, (2,)),
    ("drop", False, (2,)),
    ("shorten", True, (0, 1, 2)),
    ("drop", True, (0,)),
    ("drop", True, (1,)),
    ("drop", True, (2,)),
)


def _restates(f: Fact, intent: str) -> bool:
    """Whether a Session intent bullet quotes ``intent`` again, whole or shortened."""
    if f.section != INTENT:
        return False
    body = norm(_USER_LABEL.sub("", f.label + f.body)).rstrip("…").strip()
    key = norm(intent)
    return bool(body) and (body == key or body.endswith(key) or key.startswith(body))


def compose(
    request: SummaryRequest, count: Callable[[str], int], tiers: Tiers, previous: Iterable[Fact] = ()
) -> str:
    """Render the tiers into the fixed sections and shrink deterministically to the budget."""
    sections = request.sections
    omitted = dict(tiers.omitted)
    facts = [*previous, *tiers.earlier, *tiers.verbatim, *tiers.events, *tiers.routine]
    intent = request.intent.strip() if request.intent else ""
    if intent:
        # The intent is quoted once, first and whole; other bullets that restate it go.
        quote = Fact(INTENT, intent, -3_000_000, 1, INTENT_LABEL, floor=len(intent), keep=True)
        facts = [quote, *(f for f in facts if not _restates(f, intent))]
    unique: dict[tuple[str, str], Fact] = {}
    for f in _fold(facts, omitted):
        unique.setdefault((f.section, norm(f.label + f.body)), f)
    merged = [f for f in unique.values() if f.section in sections]
    # The first bullet of Session intent is the session's intent, wherever it came from.
    firsts = sorted(
        (i for i, f in enumerate(merged) if f.section == INTENT), key=lambda i: (merged[i].seq, i)
    )
    for rank, i in enumerate(firsts):
        floor = (len(merged[i].body) if intent else FIRST_REQUEST_FLOOR) if rank == 0 else 0
        merged[i] = replace(merged[i], keep=rank == 0, floor=floor)
    draft = _Draft(
        sections, _header(request), merged, Counter({k: v for k, v in omitted.items() if k in sections})
    )
    text = draft.render()
    if count(text) <= request.budget:
        return text
    words = focus_words(request.instructions)
    focused = [any(w in (f.label + f.body).lower() for w in words) for f in merged]
    # Which bullets go first: routine counts (tier 3), then events (tier 2), then tier 1.
    ranks = [0 if f.tier >= 3 else 1 if f.tier == 2 else 2 for f in merged]
    for action, focus, wanted in _STEPS:
        ids = [i for i in range(len(merged)) if focused[i] == focus and ranks[i] in wanted]
        step = _shorten_step if action == "shorten" else _drop_step
        fitted = step(draft, ids, request.budget, count) if ids else None
        if fitted is not None:
            return fitted
    return draft.render()  # the minimum: headings, citation and the session's intent


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


#: The share of the estimated excess a round of drops aims at: a bullet dropped too many is lost.
_AIM = 0.9


def _drop_step(draft: _Draft, ids: list[int], budget: int, count: Callable[[str], int]) -> str | None:
    """Drop the oldest of ``ids`` from the largest sections until the text fits (or none are left)."""
    facts = draft.facts
    queues: dict[str, deque[int]] = {}
    for i in sorted(ids, key=lambda i: (facts[i].seq, i)):
        if i not in draft.dropped and not facts[i].keep:
            queues.setdefault(facts[i].section, deque()).append(i)
    last: tuple[int, int] | None = None  # the previous round's count and characters dropped
    while True:
        text = draft.render()
        total = count(text)
        if total <= budget:
            return text
        if not any(queues.values()):
            return None
        # Dropped lines are estimated (counting each is slow) at the tokens per character of the last round's.
        if last is not None and last[0] > total:
            per_char = (last[0] - total) / last[1]
        else:
            per_char = total / max(1, len(text))
        excess = (total - budget) * _AIM
        removed = 0.0
        dropped_chars = 0
        # Section sizes in characters: only used to decide where to cut.
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
            removed += (len(line) + 1) * per_char
            dropped_chars += len(line) + 1
            size[section] -= len(line)
            draft.dropped.add(victim)
            draft.omitted[section] += 1
        last = (total, dropped_chars)
