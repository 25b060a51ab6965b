"""fifo: drop the oldest pairing-safe units until the conversation fits the target.

Pinned units (system messages, the first request, ``--pin`` matches, critical messages) stay where
they are, and so does the tail: the units holding the last ``keep_last`` messages are a floor that is
never dropped, even when the target then cannot be met (the run reports how far over it is). Each
contiguous dropped run leaves one short user message citing the archive range it came from, unless
that placeholder would cost as much as the run itself, or the target can only be met without it.

The dropping machinery (:func:`drop_units`) is shared with ``selective``, which differs only in the
order it offers units in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ctxc.analysis import count_messages
from ctxc.archive import citation
from ctxc.compaction.base import Action, CompactContext, StrategyResult, option, register
from ctxc.compaction.units import Unit, units
from ctxc.model import Message, TextBlock


def protected_units(messages: Sequence[Message], parts: Sequence[Unit], ctx: CompactContext) -> set[int]:
    """Positions (into ``parts``) of units no trimming strategy may drop.

    A unit is protected when it holds a pinned message, one of the last ``ctx.keep_last`` messages, or
    the last message (kept even when the caller pinned nothing, because the next turn answers it).
    """
    tail_start = len(messages) - max(ctx.keep_last, 1)
    out: set[int] = set()
    for u, part in enumerate(parts):
        if part.stop > tail_start or any(m.index in ctx.pinned for m in part.messages(messages)):
            out.add(u)
    return out


def placeholder_text(count: int, first: int, last: int, archive_id: str, tags: Sequence[str] = ()) -> str:
    """The note left where ``count`` messages (original indexes ``first``-``last``) were dropped."""
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
    return f"[ctxc] {what} ({span}) {verb} removed to fit the context; {where}"


def placeholder_message(removed: Sequence[Message], archive_id: str, tags: Sequence[str] = ()) -> Message:
    """A brand-new user message standing in for ``removed`` (a contiguous run, in order)."""
    first, last = removed[0].index, removed[-1].index
    return Message(
        role="user",
        blocks=(TextBlock(placeholder_text(len(removed), first, last, archive_id, tags)),),
        index=first,
        conversation=removed[0].conversation,
        meta={"ctxc": "placeholder", "replaces": (first, last)},
    )


@dataclass(slots=True)
class _Run:
    """A contiguous stretch of dropped units ``[start, stop)`` (positions into the unit list)."""

    start: int
    stop: int
    tokens: int
    tags: frozenset[str]
    #: What the run costs in the output: its placeholder's tokens, or 0 without one. None = not yet known.
    cost: int | None = None
    #: Its placeholder was given up to meet the target.
    bare: bool = False


class _Plan:
    """Which units are dropped, as merged runs, with the output's token total kept up to date.

    Dropping is O(1) per unit; placeholder costs are computed only once the kept messages alone are
    within the target, since before that no placeholder arithmetic can change the decision to go on.
    """

    def __init__(
        self, messages: Sequence[Message], parts: Sequence[Unit], ctx: CompactContext, placeholders: bool
    ) -> None:
        self.messages = messages
        self.parts = parts
        self.ctx = ctx
        self.placeholders = placeholders
        self.unit_tokens = [ctx.ledger.total(p.messages(messages)) for p in parts]
        self.kept = sum(self.unit_tokens)
        self.by_start: dict[int, _Run] = {}
        self.by_stop: dict[int, _Run] = {}
        self.known_cost = 0  # sum of the costs of runs whose cost is known
        self.unknown: set[int] = set()  # starts of runs whose cost is not yet known
        self._text_cost: dict[str, int] = {}

    def drop(self, u: int, tag: str | None) -> None:
        tokens = self.unit_tokens[u]
        self.kept -= tokens
        run = _Run(u, u + 1, tokens, frozenset((tag,)) if tag else frozenset())
        left = self.by_stop.get(u)
        right = self.by_start.get(u + 1)
        for old in (left, right):
            if old is not None:
                self._forget(old)
                run = _Run(
                    min(run.start, old.start),
                    max(run.stop, old.stop),
                    run.tokens + old.tokens,
                    run.tags | old.tags,
                )
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
        if self.kept > self.ctx.target:
            return False
        runs = [self.by_start[start] for start in sorted(self.unknown)]
        self._count(runs)
        for run in runs:
            run.cost = self._placeholder(run)[1]
            self.known_cost += run.cost
        self.unknown.clear()
        return self.kept + self.known_cost <= self.ctx.target

    def shed_placeholders(self) -> None:
        """With nothing left to drop, give up placeholders (oldest first) if that meets the target:
        the target is the promise; the citation is a convenience (the manifest still has the range)."""
        if self.kept > self.ctx.target or self.under_target():
            return  # (under_target has now costed every run)
        for start in sorted(self.by_start):
            if self.kept + self.known_cost <= self.ctx.target:
                break
            run = self.by_start[start]
            assert run.cost is not None
            self.known_cost -= run.cost
            run.cost, run.bare = 0, True

    def _removed(self, run: _Run) -> Sequence[Message]:
        return self.messages[self.parts[run.start].start : self.parts[run.stop - 1].stop]

    def _candidate(self, run: _Run) -> Message:
        return placeholder_message(self._removed(run), self.ctx.archive_id, sorted(run.tags))

    def _count(self, runs: Sequence[_Run]) -> None:
        """Count the placeholders of ``runs`` in one batch (the tokenizer is fastest on batches).

        Counted without the ledger, so that candidates never written are not kept alive in its memo.
        """
        if not self.placeholders:
            return
        todo = {m.text: m for m in map(self._candidate, runs) if m.text not in self._text_cost}
        if todo:
            counts = count_messages(list(todo.values()), self.ctx.ledger.counter)
            self._text_cost.update(zip(todo, counts, strict=True))

    def _placeholder(self, run: _Run) -> tuple[Message | None, int]:
        """The run's placeholder and its tokens, or (None, 0) when it is off or not worth its cost."""
        if not self.placeholders or run.bare:
            return None, 0
        msg = self._candidate(run)
        tokens = self._text_cost.get(msg.text)
        if tokens is None:
            self._count([run])
            tokens = self._text_cost[msg.text]
        return (msg, tokens) if tokens < run.tokens else (None, 0)

    def result(self, strategy: str) -> StrategyResult:
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
            note = f"{len(removed)} message(s)"
            if run.tags:
                note += f", importance {'/'.join(sorted(run.tags))}"
            note += ", placeholder" if msg is not None else ", no placeholder"
            if run.bare:
                note += " (left out to meet the target)"
            actions.append(
                Action(strategy, "drop", removed[0].index, removed[-1].index, run.tokens, after, note)
            )
            u = run.stop
        return StrategyResult(tuple(out), tuple(actions))


def drop_units(
    messages: Sequence[Message],
    ctx: CompactContext,
    parts: Sequence[Unit],
    order: Iterable[tuple[int, str | None]],
    *,
    strategy: str,
    placeholders: bool,
) -> StrategyResult:
    """Drop units in ``order`` (unit positions, each with an optional tag named in its placeholder)
    until the output is within ``ctx.target``; if it never is, everything offered is dropped (best
    effort: the caller's run decides whether over-target output may be written)."""
    plan = _Plan(messages, parts, ctx, placeholders)
    if plan.under_target():
        return StrategyResult(tuple(messages))
    for u, tag in order:
        plan.drop(u, tag)
        if plan.under_target():
            break
    else:
        plan.shed_placeholders()
    return plan.result(strategy)


@dataclass(frozen=True, slots=True)
class FifoConfig:
    placeholder: bool = option(
        True, "leave one short message citing the archive range where each run of messages was dropped"
    )


@register
class Fifo:
    name: ClassVar[str] = "fifo"
    description: ClassVar[str] = (
        "Drop the oldest messages (whole tool turns) until under the target; keeps pinned and the last N"
    )
    Config: ClassVar[type[FifoConfig]] = FifoConfig

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: FifoConfig = ctx.config(self)
        parts = units(messages)
        keep = protected_units(messages, parts, ctx)
        order = ((u, None) for u in range(len(parts)) if u not in keep)
        return drop_units(messages, ctx, parts, order, strategy=self.name, placeholders=cfg.placeholder)
