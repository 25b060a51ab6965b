"""fifo: drop the oldest pairing-safe units (not pinned or tail ones) until the conversation fits. Each
dropped run leaves a placeholder citing the archive and quoting its instructions and decisions
(:func:`drop_units`, shared with ``selective``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ctxc.archive_store import citation
from ctxc.compaction.base import Action, CompactContext, StrategyResult, option, protected_units, register
from ctxc.compaction.own_summary import fit_own_summary
from ctxc.compaction.units import Unit, units
from ctxc.model import Message, TextBlock
from ctxc.summarize.extractive import PLACEHOLDER_PREFIX, QUOTES_HEADING, KeySentence, key_sentences
from ctxc.tokens.cost import count_messages


def placeholder_text(
    count: int,
    first: int,
    last: int,
    archive_id: str,
    tags: Sequence[str] = (),
    quoted: Sequence[KeySentence] = (),
    left_out: int = 0,
) -> str:
    """The note left where ``count`` messages (original indexes ``first``-``last``) were dropped, quoting
    the instructions and decisions ``quoted`` from them (``left_out`` more are only in the archive)."""
    what = "1 earlier message" if count == 1 else f"{count} earlier messages"
    span = f"index {first}" if first == last else f"indexes {first}-{last}"
    if tags:
        span += f"; importance {' and '.join(tags)}"
    verb = "was" if count == 1 else "were"
    where = (
        f"the originals are in {citation(archive_id, first, last)}"
        if archive_id
        else "no archive copy was recorded for this run"
    )
    text = f"{PLACEHOLDER_PREFIX}{what} ({span}) {verb} removed to fit the context; {where}"
    if quoted:
        text += f"\n{QUOTES_HEADING}\n" + "\n".join(f"- {k.line}" for k in quoted)
    if left_out and quoted:
        text += f"\n({left_out} more {'is' if left_out == 1 else 'are'} only in the archive)"
    elif left_out:  # quotes given up to meet the target: at least say that there were some
        text += f"\n({left_out} instruction or decision sentence(s) in them are only in the archive)"
    return text


def choose_quoted(keys: Sequence[KeySentence], cap: int) -> tuple[KeySentence, ...]:
    """At most ``cap`` of a span's key sentences, in message order: instructions before decisions, the
    newest of each first (a later instruction or decision is the one still in force)."""
    if len(keys) <= cap:
        return tuple(keys)
    ranked = sorted(range(len(keys)), key=lambda i: (keys[i].kind != "instruction", -i))
    return tuple(keys[i] for i in sorted(ranked[:cap]))


@dataclass(slots=True)
class _Run:
    """Dropped units ``[start, stop)``; ``cost``: its placeholder's tokens (None: not yet known)."""

    start: int
    stop: int
    tokens: int
    tags: frozenset[str]
    cost: int | None = None
    bare: bool = False  # its placeholder was given up to meet the target


@dataclass(frozen=True, slots=True)
class Carry:
    """Placeholders quote at most ``cap`` instruction and decision sentences each; ``keep``: never give
    them up to meet the target (adaptive summarizes instead), else only as a last resort."""

    cap: int = 8
    keep: bool = False


class _Plan:
    """Which units are dropped, as merged runs, with the output's token total kept up to date.
    Placeholders are costed only once the kept messages alone are within the target."""

    def __init__(
        self,
        messages: Sequence[Message],
        parts: Sequence[Unit],
        ctx: CompactContext,
        placeholders: bool,
        carry: Carry = Carry(),
    ) -> None:
        self.messages = messages
        self.parts = parts
        self.ctx = ctx
        self.placeholders = placeholders
        self.carry = carry
        self.level = carry.cap  # how many key sentences a placeholder quotes now
        self.unit_tokens = [ctx.ledger.total(p.messages(messages)) for p in parts]
        self.kept = sum(self.unit_tokens)
        self.by_start: dict[int, _Run] = {}
        self.by_stop: dict[int, _Run] = {}
        self.known_cost = 0  # sum of the costs of runs whose cost is known
        self.unknown: set[int] = set()  # starts of runs whose cost is not yet known
        self._text_cost: dict[str, int] = {}
        self._keys: dict[int, tuple[KeySentence, ...]] = {}  # message position -> its key sentences

    def drop(self, u: int, tag: str | None) -> None:
        tokens = self.unit_tokens[u]
        self.kept -= tokens
        run = _Run(u, u + 1, tokens, frozenset((tag,)) if tag else frozenset())
        for old in (self.by_stop.get(u), self.by_start.get(u + 1)):  # the runs it joins
            if old is not None:
                self._forget(old)
                start, stop = min(run.start, old.start), max(run.stop, old.stop)
                run = _Run(start, stop, run.tokens + old.tokens, run.tags | old.tags)
        self.by_start[run.start] = run
        self.by_stop[run.stop] = run
        self.unknown.add(run.start)

    def _forget(self, run: _Run) -> None:
        del self.by_start[run.start]
        del self.by_stop[run.stop]
        if run.cost is None:
            self.unknown.discard(run.start)
        else:
            self.known_cost -= run.cost

    def under_target(self) -> bool:
        # Over before the runs not yet costed are: over after (they are costed together, later).
        if self.kept + self.known_cost > self.ctx.target:
            return False
        self._cost_runs()
        return self.kept + self.known_cost <= self.ctx.target

    def _cost_runs(self) -> None:
        """Cost the runs whose cost is not yet known, in one count."""
        runs = [self.by_start[start] for start in sorted(self.unknown)]
        self._count(runs)
        for run in runs:
            run.cost = self._placeholder(run)[1]
            self.known_cost += run.cost
        self.unknown.clear()

    def cheaper_kept(self, offered: Iterable[int]) -> set[int]:
        """The units of ``offered`` that cost less than a placeholder quoting them would (a short
        instruction, say): they are kept unless the target needs them gone. Counted in one batch."""
        if not self.placeholders or self.level == 0:
            return set()
        cheaper: set[int] = set()
        doubt: list[tuple[int, _Run, str]] = []
        for u in offered:
            run = _Run(u, u + 1, self.unit_tokens[u], frozenset())
            if not self._keys_of(run):
                continue
            text = self._candidate(run).text
            # Bounds that spare counting: a text has fewer tokens than characters, and more than an eighth.
            if self.unit_tokens[u] * 8 < len(text):
                cheaper.add(u)
            elif self.unit_tokens[u] <= len(text) + 16:
                doubt.append((u, run, text))
        self._count([run for _, run, _ in doubt])
        return cheaper | {u for u, _, text in doubt if self._text_cost[text] >= self.unit_tokens[u]}

    def shed_placeholders(self, spared: Sequence[tuple[int, str | None]] = ()) -> None:
        """With nothing left to drop and the output still over the target, give up what placeholders
        cost if that meets it: bare citations (oldest first), then unless ``carry.keep`` fewer quotes,
        then none (and drop the ``spared`` units), then the rest. The target is the promise; the
        citation a convenience."""
        if self.kept > self.ctx.target and not spared:
            return  # nothing placeholders give up can meet the target
        if self.kept <= self.ctx.target:
            self._cost_runs()
            quoting = {start for start, run in self.by_start.items() if self._keys_of(run)}
            for start in sorted(self.by_start):
                if start not in quoting and self._give_up(self.by_start[start]):
                    return
        if self.carry.keep:
            return  # the caller summarizes rather than lose the decisions
        while self.level > 0:
            self.level //= 2
            self.known_cost = 0  # every run is costed afresh at the new level
            for run in self.by_start.values():
                run.cost = None
            self.unknown = set(self.by_start)
            if self.under_target():
                return
        for u, tag in spared:
            self.drop(u, tag)
            if self.under_target():
                return
        if self.kept > self.ctx.target:
            return  # best effort: the undroppable alone is over the target
        self._cost_runs()
        for start in sorted(self.by_start):
            if self._give_up(self.by_start[start]):
                return

    def _give_up(self, run: _Run) -> bool:
        """Leave ``run`` (the output being over the target) without a placeholder; whether the output
        is now within the target."""
        assert run.cost is not None
        self.known_cost -= run.cost
        run.cost, run.bare = 0, True
        return self.kept + self.known_cost <= self.ctx.target

    def _removed(self, run: _Run) -> Sequence[Message]:
        return self.messages[self.parts[run.start].start : self.parts[run.stop - 1].stop]

    def _keys_of(self, run: _Run) -> list[KeySentence]:
        """The key sentences of the run's messages, in order (each message's found once, then cached)."""
        out: dict[str, KeySentence] = {}
        msgs = self.messages
        for pos in range(self.parts[run.start].start, self.parts[run.stop - 1].stop):
            keys = self._keys.get(pos)
            if keys is None:
                keys = self._keys[pos] = key_sentences(msgs[pos], msgs[pos - 1] if pos else None)
            for k in keys:
                out.setdefault(k.text, k)
        return list(out.values())

    def _candidate(self, run: _Run) -> Message:
        """The run's placeholder: a brand-new user message standing in for its messages."""
        keys = self._keys_of(run) if self.carry.cap else []  # quoting off: a bare citation
        quoted = choose_quoted(keys, self.level)
        removed = self._removed(run)
        first, last, left_out = removed[0].index, removed[-1].index, len(keys) - len(quoted)
        text = placeholder_text(
            len(removed), first, last, self.ctx.archive_id, sorted(run.tags), quoted, left_out
        )
        meta = {"ctxc": "placeholder", "replaces": (first, last), "quoted": quoted}
        return Message(
            "user", (TextBlock(text),), index=first, conversation=removed[0].conversation, meta=meta
        )

    def _count(self, runs: Sequence[_Run]) -> None:
        """Count the placeholders of ``runs`` in one batch, without the ledger (whose memo would keep
        candidates never written alive)."""
        if not self.placeholders:
            return
        todo = {m.text: m for m in map(self._candidate, runs) if m.text not in self._text_cost}
        if todo:
            counts = count_messages(list(todo.values()), self.ctx.ledger.counter)
            self._text_cost.update(zip(todo, counts, strict=True))

    def _placeholder(self, run: _Run) -> tuple[Message | None, int]:
        """The run's placeholder and its tokens, or (None, 0) when it is off or a bare citation costing
        as much as the run (one quoting instructions or decisions is always worth it)."""
        if not self.placeholders or run.bare:
            return None, 0
        msg = self._candidate(run)
        tokens = self._text_cost[msg.text]  # counted with the others: see its callers
        worth = tokens < run.tokens or bool(msg.meta["quoted"])
        return (msg, tokens) if worth else (None, 0)

    def result(self, strategy: str) -> StrategyResult:
        self._count([run for run in self.by_start.values() if not run.bare])  # those not yet costed
        out: list[Message] = []
        actions: list[Action] = []
        u = 0
        while u < len(self.parts):
            run = self.by_start.get(u)
            if run is None:
                out.extend(self.parts[u].messages(self.messages))
                u += 1
                continue
            removed = self._removed(run)
            msg, after = self._placeholder(run)
            if msg is not None:
                out.append(msg)
            keys = len(self._keys_of(run)) if self.placeholders else 0
            quoted = len(msg.meta["quoted"]) if msg is not None else 0
            parts = [
                f"{len(removed)} message(s)",
                f", importance {'/'.join(sorted(run.tags))}" if run.tags else "",
                ", placeholder" if msg is not None else ", no placeholder",
                " (left out to meet the target)" if run.bare else "",
                f", {quoted} instruction/decision sentence(s) quoted" if quoted else "",
                f", {keys - quoted} not quoted (in the archive)" if keys > quoted else "",
            ]
            first, last = removed[0].index, removed[-1].index
            actions.append(Action(strategy, "drop", first, last, run.tokens, after, "".join(parts)))
            u = run.stop
        return StrategyResult(tuple(out), tuple(actions))


#: Units weighed against their placeholders at a time.
_CHUNK = 256


def drop_units(
    messages: Sequence[Message],
    ctx: CompactContext,
    parts: Sequence[Unit],
    order: Sequence[tuple[int, str | None]],
    *,
    strategy: str,
    placeholders: bool,
    carry: Carry = Carry(),
) -> StrategyResult:
    """Drop units in ``order`` (positions, each with an optional tag named in its placeholder) until the
    output is within ``ctx.target``, else everything offered (the run decides if over is allowed)."""
    plan = _Plan(messages, parts, ctx, placeholders, carry)
    if plan.under_target():
        return StrategyResult(tuple(messages))
    spared: list[tuple[int, str | None]] = []
    cheaper: set[int] = set()
    for k, (u, tag) in enumerate(order):
        if k % _CHUNK == 0:  # weighed a chunk at a time: one count, not one per unit
            cheaper = plan.cheaper_kept(v for v, _ in order[k : k + _CHUNK])
        if u in cheaper:
            spared.append((u, tag))
            continue
        plan.drop(u, tag)
        if plan.under_target():
            break
    else:
        plan.shed_placeholders(spared)
    return plan.result(strategy)


#: Options of the trimming strategies.
CARRY_HELP = "instruction and decision sentences each placeholder quotes from what it replaces (0: none)"
PLACEHOLDER_HELP = "leave one short message citing the archive range where each run of messages was dropped"


@dataclass(frozen=True, slots=True)
class FifoConfig:
    placeholder: bool = option(True, PLACEHOLDER_HELP)
    carry: int = option(8, CARRY_HELP, min=0, max=1000)


@register
class Fifo:
    name: ClassVar[str] = "fifo"
    uses_summarizer: ClassVar[bool] = False
    best_effort: ClassVar[bool] = False
    description: ClassVar[str] = (
        "Drop the oldest messages (whole tool turns) until under the target; keeps pinned and the last N"
    )
    Config: ClassVar[type[FifoConfig]] = FifoConfig

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: FifoConfig = ctx.config(self)

        def drop(msgs: Sequence[Message]) -> StrategyResult:
            parts = units(msgs)
            keep = protected_units(msgs, parts, ctx)
            order = [(u, None) for u in range(len(parts)) if u not in keep]
            carry = Carry(cfg.carry)
            return drop_units(
                msgs, ctx, parts, order, strategy=self.name, placeholders=cfg.placeholder, carry=carry
            )

        result = drop(messages)
        if ctx.under_target(result.messages):
            return result
        # What is pinned is over the target: the log's own summary gives up detail rather than the run.
        return fit_own_summary(messages, ctx, result, drop, self.name)
