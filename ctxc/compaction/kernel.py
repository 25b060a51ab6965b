"""The compaction of one conversation: the kernel every entry point runs (``ctxc compact``,
:class:`ctxc.ContextManager`, :func:`ctxc.compact_messages`); they differ only in how messages are
read and written."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ctxc.compaction.base import Action, CompactContext, Strategy
from ctxc.compaction.ledger import Ledger
from ctxc.errors import OverTargetError, UsageError
from ctxc.live import compaction_block_boundary, last_request, quotes, request_text, session_intent
from ctxc.model import Message
from ctxc.repair import answers_in_tool_messages, repair_messages
from ctxc.validate import Problem, pairing_problems


@dataclass(frozen=True, slots=True)
class Plan:
    """How conversations are compacted: the same for every conversation of a run."""

    strategy: Strategy
    #: Its ``target`` is each conversation's whole target (what it carries as it is, and reminders, are
    #: taken off it).
    context: CompactContext
    #: The ``keep_last`` values to try in turn until the strategy meets the target.
    keep_last_steps: tuple[int, ...]
    allow_over: bool = False
    #: Whether a repair answers an unanswered call with role ``tool`` messages (the format's way).
    tool_role: bool = False
    #: The format's client sends nothing before a summary ctxc writes (see ``FormatAdapter``).
    summary_resets: bool = False

    @property
    def enforce(self) -> bool:
        """Whether ending above the target is an error (not for a best-effort strategy without one)."""
        return self.context.explicit_target or not self.strategy.best_effort

    @property
    def limit(self) -> tuple[int, str]:
        """What a conversation must end within, and its name: the target, or for a best-effort strategy
        without one the window (it may stop above the target, but an output the model cannot take is no
        best effort)."""
        return (self.context.target, "target") if self.enforce else (self.context.window, "window")


def limit_text(limit: tuple[int, str]) -> str:
    """A :attr:`Plan.limit` in words: ``the 1,800 target``, ``the 2,000-token window``."""
    tokens, what = limit
    return f"the {tokens:,} target" if what == "target" else f"the {tokens:,}-token window"


@dataclass(frozen=True, slots=True)
class ConversationResult:
    """One conversation compacted. Token figures include what the conversation carries as it is."""

    messages: tuple[Message, ...]
    actions: tuple[Action, ...]
    tokens_before: int
    tokens_after: int
    pinned_tokens: int
    repaired: tuple[Problem, ...] = ()


def compact_conversation(
    messages: Sequence[Message],
    plan: Plan,
    *,
    keep: frozenset[int],
    carried: Sequence[Message] = (),
    requests: Sequence[Message] = (),
    notes: tuple[Message | None, Message | None] = (None, None),
    conversation: Sequence[Message] = (),
    source: str | None = None,
) -> ConversationResult:
    """Compact one conversation's live ``messages`` by ``plan``, keeping ``keep``; ``carried``: what the log's
    compaction carries in; ``requests``: pinned copies from before it; ``notes``: the reminder if nothing is
    compacted, and if something is; ``conversation``: all of it, to name what is kept when over target."""
    ledger = plan.context.ledger
    target = plan.context.target
    pinned = live_pins(messages, keep, plan.strategy)
    as_is = ledger.total(carried)
    before = as_is + ledger.total(messages)
    quiet, loud = notes
    reserve = as_is + ledger.total(requests) + (ledger.tokens(loud) if loud else 0)
    ctx = replace(plan.context, target=max(1, target - reserve), pinned=pinned)
    quiet_cost = ledger.tokens(quiet) if quiet else 0
    # Read from the input: the strategy may have removed every result there was to copy.
    tool_role = plan.tool_role or answers_in_tool_messages(messages)
    out: tuple[Message, ...] = tuple(messages)
    actions: tuple[Action, ...] = ()
    copied: Action | None = None
    if not (before + quiet_cost <= target and plan.strategy.best_effort and not ctx.explicit_target):
        out, actions, ctx = _run_strategy(messages, plan, ctx, tool_role=tool_role)
        if actions or before > target:  # within target and untouched, what the client sends stays as it is
            kept_in = _keep_after_summary(out, pinned, requests, carried, summary_resets=plan.summary_resets)
            ours = {id(m) for m in out}
            if added := [m for m in kept_in if id(m) not in ours]:  # copies cost tokens: the savings say so
                first, last = min(m.index for m in added), max(m.index for m in added)
                what = "requests and pins copied into the live context"
                copied = Action("keep", "keep", first, last, 0, ledger.total(added), what)
            out = kept_in
    repaired, fixed = repair_messages(out, tool_role=tool_role)
    # What repair removed or added shows in the savings: never "nothing to do" for a smaller output.
    repair = None
    if fixed:
        span = (messages[0].index, messages[-1].index, ledger.total(out), ledger.total(repaired))
        repair = Action("repair", "repair", *span, f"{len(fixed)} pairing fix(es)")
    note = loud if actions else quiet
    if note is not None:
        repaired = (*repaired, note)
        n = messages[-1].index
        remind = Action("reminders", "remind", n, n, 0, 0, f"appended {', '.join(note.meta['rules'])}")
        actions = (*actions, remind)
    actions = (*actions, *(a for a in (copied, repair) if a is not None))
    after = as_is + ledger.total(sent_part(repaired, summary_resets=plan.summary_resets))
    if after > plan.limit[0] and not plan.allow_over:
        # What the strategy kept as it was: pinned and last messages, and what it would not touch
        # (selective's critical ones), which the error names so that the user sees what is in the way.
        given = {id(m) for m in messages}
        untouched = [m for m in repaired if id(m) in given]
        kept = as_is + ledger.total(untouched)
        tail = {m.index for m in messages[-ctx.keep_last :]}
        largest = _largest_kept(untouched, pinned, tail, requests, conversation or messages, ledger)
        raise _over_target(plan.strategy.name, after, plan.limit, kept, largest, ctx.keep_last, source)
    leftover = pairing_problems(repaired, strict=True)
    if leftover:  # repair is meant to make this impossible: fail loudly rather than hand it on
        raise AssertionError(f"output still has pairing problems: {leftover[0]}")
    pinned_tokens = ledger.total(m for m in messages if m.index in pinned)
    return ConversationResult(repaired, actions, before, after, pinned_tokens, fixed)


def _run_strategy(
    messages: Sequence[Message], plan: Plan, ctx: CompactContext, *, tool_role: bool
) -> tuple[tuple[Message, ...], tuple[Action, ...], CompactContext]:
    """The strategy's result at the first ``keep_last`` step that meets the target as written, repaired
    (else the last). Repair answers each call the output leaves unanswered (a log's errored turn); when
    only that puts it over, the strategy runs again aiming that much lower."""
    for keep_last in plan.keep_last_steps:
        ctx = replace(ctx, keep_last=keep_last)
        res = plan.strategy.compact(messages, ctx)
        raw = ctx.ledger.total(res.messages)
        written = _written(res.messages, ctx.ledger, tool_role)
        if raw <= ctx.target < written:
            lower = replace(ctx, target=max(1, ctx.target - (written - raw)))
            res = plan.strategy.compact(messages, lower)
            written = _written(res.messages, ctx.ledger, tool_role)
        if written <= ctx.target:
            break
    return res.messages, res.actions, ctx


def _written(messages: Sequence[Message], ledger: Ledger, tool_role: bool) -> int:
    """What ``messages`` cost once repaired, as the run writes them."""
    repaired, fixed = repair_messages(messages, tool_role=tool_role)
    return ledger.total(repaired if fixed else messages)


def _over_target(
    strategy: str,
    after: int,
    limit: tuple[int, str],
    kept: int,
    largest: str,
    keep_last: int,
    source: str | None,
) -> OverTargetError:
    target, what = limit  # the target, or the window when no target is enforced
    over = after - target
    beyond = f" ({kept - target:,} over the {what})" if kept > target else ""
    lower = "lower {keep_last}, or " if keep_last > 1 else ""
    return OverTargetError(
        f"{strategy} reached {after:,} tokens, {over:,} ({over / target:.0%}) over {limit_text(limit)}; "
        f"what it keeps as it was (pinned messages, the last {keep_last}, what the log's own compaction "
        f"carries and what {strategy} does not remove) is {kept:,} tokens{beyond}{largest}; "
        f"{lower}use {{allow_over}} to write it anyway",
        path=source,
        options=("keep_last", "allow_over"),
    )


def sent_part(messages: Sequence[Message], *, summary_resets: bool) -> Sequence[Message]:
    """What the client sends: where it resets at a summary ctxc writes, from the last one on."""
    if summary_resets:
        for k in range(len(messages) - 1, -1, -1):
            if messages[k].meta.get("ctxc") == "summary":
                return messages[k:]
    return messages


def _largest_kept(
    untouched: Sequence[Message],
    pinned: frozenset[int],
    tail: set[int],
    requests: Sequence[Message],
    everything: Sequence[Message],
    ledger: Ledger,
) -> str:
    """The largest of what the strategy kept as it was, named, for an over-target error: which words are
    in the way."""
    intent, last = session_intent(everything), last_request(everything)

    def name(m: Message) -> str:
        if intent is not None and m.index == intent.index:
            return "the session's first request"
        if last is not None and m.index == last.index:
            return "the last user request"
        if m.meta.get("is_compact_summary"):
            return "the log's own summary"
        if m.role == "system":
            return "a system message"
        if m.index == everything[-1].index:
            return "the last message"
        if m.index in pinned or m.index in tail:
            return "a pinned or last message"
        return f"{'an' if m.role == 'assistant' else 'a'} {m.role} message"

    largest = sorted([*requests, *untouched], key=lambda m: -ledger.tokens(m))[:3]
    named = ", ".join(f"{name(m)} (msg {max(m.index, 0)}, {ledger.tokens(m):,} tokens)" for m in largest)
    return f"; the largest: {named}" if named else ""


def live_pins(messages: Sequence[Message], keep: frozenset[int], strategy: Strategy) -> frozenset[int]:
    """The indexes a strategy must keep: ``keep``, system messages the log's compaction carried, and
    the log's own summary unless the strategy folds it into its own."""
    return frozenset(
        m.index
        for m in messages
        if m.index in keep
        or (m.role == "system" and m.meta.get("carried"))
        or (m.meta.get("is_compact_summary") and not strategy.uses_summarizer)
    )


_INDEX_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def pinned_indexes(messages: Sequence[Message], pins: Sequence[str]) -> frozenset[int]:
    """Indexes that must survive: system messages, the session's first and last requests, pins,
    critical messages and the last message."""
    if not messages:
        return frozenset()
    requests = (session_intent(messages), last_request(messages))
    keep = {messages[-1].index, *(r.index for r in requests if r is not None)}
    patterns: list[re.Pattern[str]] = []
    ranges: list[tuple[int, int]] = []
    for pin in pins:
        if not isinstance(pin, str):
            raise UsageError(
                f"{{pins}} holds strings (an index '3', a range '3-17' or a regex), got {pin!r}",
                options=("pins",),
            )
        if not pin.strip():  # an unset shell variable, say: as a regex it would pin every message
            raise UsageError("{pins} is empty; give an index, a range (3-17) or a regex", options=("pins",))
        m = _INDEX_RANGE.match(pin.strip())
        if m:
            low, high = int(m.group(1)), int(m.group(2) or m.group(1))
            if low > high:  # it would pin nothing
                raise UsageError(
                    f"{{pins}} {pin!r}: a range runs from low to high ({high}-{low})", options=("pins",)
                )
            ranges.append((low, high))
            continue
        try:
            patterns.append(re.compile(pin))
        except re.error as exc:
            raise UsageError(
                f"{{pins}} {pin!r} is neither an index, a range nor a valid regex: {exc}", options=("pins",)
            ) from None
    keep.update(
        msg.index
        for msg in messages
        if msg.role == "system"
        or msg.importance == "critical"
        or any(lo <= msg.index <= hi for lo, hi in ranges)
        or (patterns and any(p.search(msg.text) for p in patterns))
    )
    return frozenset(keep)


#: Facts of a message that a copy of it may keep (identity, such as uuids, stays with the original).
_NEUTRAL_META = frozenset({"content_string", "content_was_string", "dialect", "timestamp"})


def _keep_after_summary(
    messages: Sequence[Message],
    pinned: frozenset[int],
    requests: Sequence[Message],
    carried: Sequence[Message],
    *,
    summary_resets: bool,
) -> tuple[Message, ...]:
    """Place what must survive where the client sends it: with ``summary_resets``, pinned messages before
    ctxc's summary get a copy after it; ``requests`` go after the last summary (or first), each unless
    what the client sends already quotes it."""
    out = list(messages)
    summaries = [k for k, m in enumerate(out) if m.meta.get("ctxc") == "summary"]
    at = summaries[-1] + 1 if summaries else 0
    if summary_resets and summaries:
        said = out[summaries[-1]].text
        copies = [
            copy_of(m, "pinned")
            for m in out[: summaries[-1]]
            if m.index in pinned and is_plain(m) and not (m.is_request and quotes(said, request_text(m)))
        ]
        out[at:at] = copies
        at += len(copies)
        sent = [*carried, *out[summaries[-1] :]]
    else:
        sent = [*carried, *out]
    if not summaries:
        # After the log's own summary or compaction block, which opens the live context.
        while at < len(out) and (
            out[at].meta.get("is_compact_summary") or compaction_block_boundary(out[at]) is not None
        ):
            at += 1
    for request in requests:
        if not any(quotes(m.text, request_text(request)) for m in sent):
            out.insert(at, request)
            at += 1
    return tuple(out)


def is_plain(message: Message) -> bool:
    """A user or assistant message of words only: a copy of it pairs with nothing."""
    return message.role in ("user", "assistant") and not any(
        b.kind in ("tool_use", "tool_result") for b in message.blocks
    )


def copy_of(message: Message, why: str) -> Message:
    """``message`` as a new message: the writer gives it a record (and identity) of its own."""
    meta = {"ctxc": why, **{k: v for k, v in message.meta.items() if k in _NEUTRAL_META}}
    return replace(message, records=(), raw=None, meta=meta)


__all__ = ["ConversationResult", "Plan", "compact_conversation", "live_pins", "pinned_indexes", "sent_part"]
