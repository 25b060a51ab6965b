"""One compaction run: archive the original, compact each conversation, repair, check, write back.
The order is the safety argument: the original is archived before any output exists, and the output
is validated and measured before it is written."""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ctxc.archive_store import ArchiveStore, discard_new_objects_on_failure, sha256_hex
from ctxc.compaction.base import Action, CompactContext, Strategy, get_strategy, parse_config, strategies
from ctxc.compaction.kernel import (
    Plan,
    compact_conversation,
    copy_of,
    is_plain,
    limit_text,
    pinned_indexes,
)
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.write import write_transcript
from ctxc.errors import OverTargetError, UsageError
from ctxc.formats import get_adapter
from ctxc.formats.base import FormatAdapter
from ctxc.live import live_context, request_text, session_intent
from ctxc.model import Message, Transcript
from ctxc.output import Data
from ctxc.profiles import MAX_TOKENS
from ctxc.stages import DEFAULT_THRESHOLDS
from ctxc.summarize import SummarizerOptions, get_summarizer, quoting_intent
from ctxc.tokens import Counter, checked, make_counter
from ctxc.validate import Problem, pairing_problems

if TYPE_CHECKING:
    from concurrent.futures import Future

    from ctxc.reminders import ReminderRules

#: The last messages kept verbatim unless the caller says otherwise.
DEFAULT_KEEP_LAST = 4


@dataclass(frozen=True, slots=True)
class CompactOptions:
    strategy: str = "adaptive"
    target_tokens: int | None = None
    target_ratio: float | None = None
    model: str | None = None
    window: int | None = None
    keep_last: int = DEFAULT_KEEP_LAST
    #: Never keep fewer than ``keep_last`` (--keep-last given); else an explicit target that cannot be
    #: met keeps fewer, down to one, before failing.
    strict_keep_last: bool = False
    #: ``--pin`` values: a message index (``12``), an index range (``3-7``), or a regular expression.
    pins: tuple[str, ...] = ()
    summarizer: str = "extractive"
    tokenizer: str = "o200k_base"
    thresholds: tuple[float, float, float, float] = DEFAULT_THRESHOLDS
    allow_over: bool = False
    #: Raw ``strategy.option=value`` settings, validated against each strategy's Config.
    settings: Mapping[str, str] = field(default_factory=dict)
    instructions: str | None = None
    use_cache: bool = True
    summarizer_options: SummarizerOptions = field(default_factory=SummarizerOptions)
    #: ``--reminders``: due reminders are appended after compaction, counted against the target.
    reminders: ReminderRules | None = None

    def counter(self) -> Counter:
        """The token counter these options name."""
        concurrency = self.summarizer_options.concurrency
        return make_counter(
            self.tokenizer, use_cache=self.use_cache, model=self.model, concurrency=concurrency
        )


@dataclass(frozen=True, slots=True)
class ConversationOutcome:
    conversation: int
    tokens_before: int
    tokens_after: int
    target: int
    pinned_tokens: int
    actions: tuple[Action, ...]
    repaired: tuple[Problem, ...] = ()


@dataclass(frozen=True, slots=True)
class CompactionResult:
    transcript: Transcript
    archive_id: str
    input_sha256: str
    window: int
    conversations: tuple[ConversationOutcome, ...]
    #: What the summarizer spent (calls, input and output tokens, cache hits), when it reports it.
    summarizer_usage: Mapping[str, Any] | None = None

    @property
    def tokens_before(self) -> int:
        return sum(c.tokens_before for c in self.conversations)

    @property
    def tokens_after(self) -> int:
        return sum(c.tokens_after for c in self.conversations)

    @property
    def actions(self) -> tuple[Action, ...]:
        return tuple(a for c in self.conversations for a in c.actions)

    def savings_by_strategy(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.actions:
            out[a.strategy] = out.get(a.strategy, 0) + a.saved
        return out


def strategy_configs(options: CompactOptions) -> dict[str, Any]:
    """Each strategy's validated Config from ``options.settings`` (``{"mask.keep_last": "3"}`` →
    ``{"mask": MaskConfig(keep_last=3)}``), rejecting unknown names. The run's thresholds are the
    adaptive stages' defaults; an explicit ``adaptive.stageN`` setting wins."""
    stages = {f"adaptive.stage{n}": str(v) for n, v in zip((2, 3, 4, 5), options.thresholds, strict=True)}
    grouped: dict[str, dict[str, str]] = {}
    for key, value in {**stages, **options.settings}.items():
        name, _, opt = key.partition(".")
        if not opt:
            raise UsageError(f"{{settings}} takes strategy.option=value, got {key!r}", options=("settings",))
        grouped.setdefault(name, {})[opt] = value
    known = strategies()
    out: dict[str, Any] = {}
    for name, values in grouped.items():
        if name not in known:
            raise UsageError(
                f"{{settings}} names unknown strategy {name!r} (known: {', '.join(sorted(known))})",
                options=("settings",),
            )
        out[name] = parse_config(known[name], values)
    return out


def resolve_target(options: CompactOptions, window: int) -> tuple[int, bool]:
    if options.target_tokens is not None and options.target_ratio is not None:
        raise UsageError(
            "give {target_tokens} or {target_ratio}, not both", options=("target_tokens", "target_ratio")
        )
    if options.target_tokens is not None:
        if not 0 < options.target_tokens <= MAX_TOKENS:
            raise UsageError("{target_tokens} must be positive, up to 2**53", options=("target_tokens",))
        return min(options.target_tokens, window), True  # more than the window could not be sent
    if options.target_ratio is not None:
        if not 0 < options.target_ratio <= 1:
            raise UsageError(
                "{target_ratio} is a share of the window between 0 and 1", options=("target_ratio",)
            )
        return int(options.target_ratio * window), True
    # No explicit target: get out of compaction territory, i.e. below the first stage threshold.
    return int(options.thresholds[0] * window), False


def ready_summarizer(options: CompactOptions) -> Any:
    """The summarizer ``options`` name, checked first when the strategy may call it: a missing or
    rejected key, or an unknown model, fails before any work."""
    summarizer = get_summarizer(options.summarizer, options.summarizer_options)
    preflight = getattr(summarizer, "preflight", None)
    if get_strategy(options.strategy).uses_summarizer and callable(preflight):
        preflight()
    return summarizer


def compact_transcript(
    transcript: Transcript,
    options: CompactOptions = CompactOptions(),
    *,
    archive: ArchiveStore | None = None,
    counter: Counter | None = None,
    original_bytes: Data | None = None,
    counts: Sequence[int] | None = None,
) -> CompactionResult:
    """Compact every conversation of ``transcript`` (``counts``: its messages' tokens, if counted as read).
    With an archive the original is stored first; a failed run leaves none of the objects it offloaded.
    With neither a model nor a window in ``options``, the window is the one the log records."""
    from ctxc.profiles import window_for_log

    with discard_new_objects_on_failure():
        window = window_for_log(model=options.model, window=options.window, usage=transcript.usage).window
        resolve_target(options, window)  # a bad target fails before the summarizer is checked
        summarizer = ready_summarizer(options)
        ledger = Ledger(checked(counter) or options.counter())
        data = original_bytes if original_bytes is not None else list(transcript.parts())
        archive_id = input_sha = archive.object_id(data) if archive is not None else sha256_hex(data)
        stored = _store_in_background(archive, data, archive_id)
        if counts is not None:
            ledger.take_counts(transcript.messages, counts)
        else:
            ledger.count_uncounted(transcript.messages)
        adapter = get_adapter(transcript.format)
        plan = make_plan(
            options,
            window=window,
            ledger=ledger,
            summarizer=summarizer,
            archive=archive,
            archive_id=archive_id,
            adapter=adapter,
        )
        # Collections skip what exists now (the read transcript: millions of objects, none garbage), so
        # the strategies' own garbage is still collected without a full pass over it.
        gc.freeze()
        try:
            outputs, outcomes = compact_live(transcript, options, plan, adapter)
        finally:
            gc.unfreeze()
        written = write_transcript(transcript, outputs, adapter, archive_id=archive_id)
        # The read-back needs the counts of what was written alone: the rest goes before it.
        limit, ledger = plan.limit, ledger.restricted_to(written.messages)
        del plan
        out = _verify(written, transcript, outcomes, ledger, limit=limit, allow_over=options.allow_over)
        if archive is not None and stored is not None:
            # The original is on disk before this returns, so before the caller writes any output.
            if stored.result() != archive_id:
                raise AssertionError("the archive stored other bytes than the original")
            archive.index(archive_id, transcript)  # for `ctxc search`; never fails the run
        usage = getattr(summarizer, "usage", None)
        spent = usage() if callable(usage) else None
        return CompactionResult(
            transcript=out,
            archive_id=archive_id,
            input_sha256=input_sha,
            window=window,
            conversations=tuple(outcomes),
            summarizer_usage=spent,
        )


def make_plan(
    options: CompactOptions,
    window: int,
    ledger: Ledger,
    summarizer: Any,
    archive: ArchiveStore | None = None,
    archive_id: str = "",
    adapter: FormatAdapter | None = None,
) -> Plan:
    """The :class:`~ctxc.compaction.kernel.Plan` ``options`` describe at ``window``, with the facts of
    the format written (``tool_role``, ``summary_resets``; without one, a chat list's)."""
    target, explicit = resolve_target(options, window)
    strategy = get_strategy(options.strategy)
    context = CompactContext(
        target=target,
        window=window,
        ledger=ledger,
        summarizer=summarizer,
        archive=archive,
        archive_id=archive_id,
        keep_last=options.keep_last,
        configs=strategy_configs(options),
        explicit_target=explicit,
        instructions=options.instructions,
    )
    steps = _keep_last_steps(options, explicit, strategy)
    return Plan(
        strategy,
        context,
        steps,
        allow_over=options.allow_over,
        tool_role=adapter.tool_role if adapter is not None else False,
        summary_resets=adapter.summary_resets if adapter is not None else False,
    )


def compact_live(
    transcript: Transcript, options: CompactOptions, plan: Plan, adapter: FormatAdapter
) -> tuple[dict[int, tuple[Message, ...]], list[ConversationOutcome]]:
    """Each conversation's live context compacted by the kernel, its history first and as it is; and
    what became of each."""
    outcomes: list[ConversationOutcome] = []
    outputs: dict[int, tuple[Message, ...]] = {}
    # What the client no longer sends (before the log's own compaction, inline subagent runs) stays.
    live = live_context(transcript.boundaries, transcript.messages)
    plan.context.ledger.withhold_thinking(m for m in transcript.messages if m.index in live.unsent_thinking)
    for conv in range(transcript.conversations):
        everything = transcript.conversation(conv)
        if conv in live.side:
            continue
        history, messages = live.split(everything)
        if not messages:
            continue
        # Pins come from the chain the client resumes, not from abandoned branches.
        chain = tuple(m for m in everything if m.index not in live.abandoned)
        keep = pinned_indexes(chain, options.pins)
        reset = live.resets.get(conv)
        if reset is not None and reset.kind == "compaction":  # without its block the provider reads it all
            keep |= {reset.index}
        # What must survive but lies before the log's own compaction goes into the live context, unless
        # an earlier run's copy is there already: then that copy is what is kept.
        pinned = [m for m in history if m.index in keep and is_plain(m)]
        wanted = {m.text for m in pinned}  # only these are looked up (every text: a pass over the log)
        copied = {m.text: m.index for m in messages if is_plain(m) and m.text in wanted} if wanted else {}
        keep |= {copied[m.text] for m in pinned if m.text in copied}
        requests = tuple(copy_of(m, "pinned") for m in pinned if m.text not in copied)
        # What the log's compaction carries in counts; it is compacted too where the writer can replace it.
        as_is: tuple[Message, ...] = reset.carried if reset is not None else ()
        if as_is and adapter.rewrites_carried:
            messages = (*carried_copies(as_is, conv), *messages)
            as_is = ()
        notes = _reminder_messages(options, messages, as_is, plan)
        done = compact_conversation(
            messages,
            _quoting_intent(plan, chain, messages),
            keep=keep,
            carried=as_is,
            requests=requests,
            notes=notes,
            conversation=everything,
            source=transcript.source,
        )
        outputs[conv] = (*history, *done.messages)
        outcomes.append(
            ConversationOutcome(
                conv,
                done.tokens_before,
                done.tokens_after,
                plan.context.target,
                done.pinned_tokens,
                done.actions,
                done.repaired,
            )
        )
    return outputs, outcomes


def _quoting_intent(plan: Plan, chain: Sequence[Message], messages: Sequence[Message]) -> Plan:
    """``plan`` with a summarizer that quotes the session's intent whenever the client would not see it
    otherwise: it lies before the log's own compaction, or ctxc's summary is itself where the client
    resumes."""
    intent = session_intent(chain)
    hidden = intent is not None and (plan.summary_resets or all(m.index != intent.index for m in messages))
    quoted = quoting_intent(plan.context.summarizer, request_text(intent) if intent and hidden else None)
    return replace(plan, context=replace(plan.context, summarizer=quoted))


def _keep_last_steps(options: CompactOptions, explicit: bool, strategy: Strategy) -> tuple[int, ...]:
    """The ``keep_last`` values to try in turn: the one asked for, then, under an explicit target and
    unless it is strict, fewer down to one. Not with a summarizer that calls out: each try would be
    paid for again."""
    local = not strategy.uses_summarizer or options.summarizer == "extractive"
    if options.strict_keep_last or not explicit or not local:
        return (options.keep_last,)
    return tuple(range(options.keep_last, 0, -1)) or (1,)


def carried_copies(carried: Sequence[Message], conversation: int) -> tuple[Message, ...]:
    """What a compaction record carries, as messages a strategy may compact: indexes below the file's
    own (they belong to no record), marked so the writer knows them."""
    return tuple(
        replace(m, index=k - len(carried), conversation=conversation, meta={**m.meta, "carried": True})
        for k, m in enumerate(carried)
    )


def _reminder_messages(
    options: CompactOptions, messages: Sequence[Message], carried: Sequence[Message], plan: Plan
) -> tuple[Message | None, Message | None]:
    """The reminder message to append if nothing is compacted, and the one if something is; the rules
    measure the live context with what the log's compaction carries into it."""
    if options.reminders is None:
        return None, None
    from ctxc.reminders import due_at_end, reminder_message

    ledger, window = plan.context.ledger, plan.context.window
    tokens = ledger.total(carried) + ledger.total(messages)
    rules = options.reminders
    due = [due_at_end(rules, messages, tokens=tokens, window=window, compacted=c) for c in (False, True)]
    quiet, loud = (reminder_message(d, after=messages[-1]) if d else None for d in due)
    return quiet, loud


def _store_in_background(archive: ArchiveStore | None, data: Data, digest: str) -> Future[str] | None:
    """Store the original in a thread: copying and syncing up to 100 MB to disk, without the GIL, while
    the strategy runs. A run that fails meanwhile still finishes storing it, as if it had failed just
    after an up-front store; the caller waits for it before writing any output."""
    if archive is None:
        return None
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxc-store")
    try:
        return pool.submit(archive.store, data, digest)
    finally:
        pool.shutdown(wait=False)  # the thread ends when the store is done


def _verify(
    written: Transcript,
    source: Transcript,
    outcomes: list[ConversationOutcome],
    ledger: Ledger,
    *,
    limit: tuple[int, str],
    allow_over: bool,
) -> Transcript:
    """Read the output back as any reader would, and hold it to pairing and ``limit`` (the target, or the
    window: :attr:`Plan.limit`); the figures reported are the file's (a writer may drop records the
    strategy kept)."""
    from ctxc.formats import reload
    from ctxc.reader import DEFAULT_MAX_LINE_BYTES, ReadOptions

    # Read back as the input was read: its invalid lines (--skip-invalid) and long lines are written back.
    options = ReadOptions(
        skip_invalid=any(r.kind == "invalid" for r in source.records),
        max_line_bytes=max(DEFAULT_MAX_LINE_BYTES, sum(r.size + len(r.eol) for r in written.records)),
    )
    reread = reload(written, source, options=options)
    live = live_context(reread.boundaries, reread.messages)
    for conversation in {o.conversation for o in outcomes}:
        problems = pairing_problems(live.split(reread.conversation(conversation))[1], strict=True)
        if problems:
            raise AssertionError(f"compacted output has a pairing problem: {problems[0]}")
    ledger.inherit_counts(reread.messages, written.messages)  # most lines read back as they were written
    ledger.withhold_thinking(m for m in reread.messages if m.index in live.unsent_thinking)
    for k, outcome in enumerate(outcomes):
        reset = live.resets.get(outcome.conversation)
        carried = ledger.total(reset.carried) if reset is not None else 0
        after = carried + ledger.total(live.split(reread.conversation(outcome.conversation))[1])
        outcomes[k] = replace(outcome, tokens_after=after)
        if after > limit[0] and not allow_over:
            raise OverTargetError(
                f"the written output is {after:,} tokens, {after - limit[0]:,} over {limit_text(limit)}",
                path=source.source,
            )
    return replace(reread, source=source.source)
