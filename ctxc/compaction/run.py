"""One compaction run: archive the original, compact each conversation, repair, check, write back.

This is the library entry point behind ``ctxc compact``. The order is the safety argument: the
original is stored in the archive (content-addressed, atomic) before any output exists, the output is
validated (pairing) and measured (target) before it is written, and it is written atomically.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ctxc.archive_store import ArchiveStore, discard_new_objects_on_failure, sha256_hex
from ctxc.compaction.base import Action, CompactContext, get_strategy, parse_config, strategies
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.write import write_transcript
from ctxc.errors import OverTargetError, UsageError
from ctxc.formats import get_adapter
from ctxc.live import last_request, live_context, quotes, request_text, session_intent
from ctxc.model import Message, Transcript
from ctxc.output import Data
from ctxc.repair import repair_messages
from ctxc.stages import DEFAULT_THRESHOLDS
from ctxc.summarize import SummarizerOptions, get_summarizer, quoting_intent
from ctxc.tokens import Counter, make_counter
from ctxc.validate import Problem, pairing_problems

if TYPE_CHECKING:
    from concurrent.futures import Future

    from ctxc.reminders import ReminderRules

#: The last messages kept verbatim unless the caller says otherwise.
DEFAULT_KEEP_LAST = 4

#: Strategies that may call the summarizer (adaptive does from stage 4 on).
SUMMARIZING = frozenset({"recursive", "hierarchical", "adaptive"})


@dataclass(frozen=True, slots=True)
class CompactOptions:
    strategy: str = "adaptive"
    target_tokens: int | None = None
    target_ratio: float | None = None
    model: str | None = None
    window: int | None = None
    keep_last: int = DEFAULT_KEEP_LAST
    #: Never keep fewer than ``keep_last`` (the CLI sets it when --keep-last is given). Otherwise an
    #: explicit target that cannot be met keeps fewer of the last messages, down to one, before failing.
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
    #: How a summarizer that calls out (a model API, a command) is set up; see SummarizerOptions.
    summarizer_options: SummarizerOptions = field(default_factory=SummarizerOptions)
    #: ``--reminders``: rules whose due reminders are appended to each conversation after compaction
    #: (see :mod:`ctxc.reminders`); they count against the target like any message.
    reminders: ReminderRules | None = None


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


def parse_settings(settings: Mapping[str, str]) -> dict[str, Any]:
    """``{"mask.keep_last": "3"}`` → ``{"mask": MaskConfig(keep_last=3)}``, rejecting unknown names."""
    grouped: dict[str, dict[str, str]] = {}
    for key, value in settings.items():
        name, _, opt = key.partition(".")
        if not opt:
            raise UsageError(f"--set takes strategy.option=value, got {key!r}")
        grouped.setdefault(name, {})[opt] = value
    known = strategies()
    out: dict[str, Any] = {}
    for name, values in grouped.items():
        if name not in known:
            raise UsageError(f"--set names unknown strategy {name!r} (known: {', '.join(sorted(known))})")
        out[name] = parse_config(known[name], values)
    return out


def strategy_configs(options: CompactOptions) -> dict[str, Any]:
    """Each strategy's validated Config from ``options.settings``. The run's thresholds are the
    adaptive stages' defaults; an explicit ``adaptive.stageN`` setting wins."""
    stages = {f"adaptive.stage{n}": str(v) for n, v in zip((2, 3, 4, 5), options.thresholds, strict=True)}
    return parse_settings({**stages, **options.settings})


_INDEX_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def pinned_indexes(messages: Sequence[Message], pins: Sequence[str]) -> frozenset[int]:
    """Indexes that must survive: system messages, the session's first and last requests, pins,
    critical messages and the last message."""
    keep: set[int] = set()
    if not messages:
        return frozenset()
    keep.add(messages[-1].index)
    for request in (session_intent(messages), last_request(messages)):
        if request is not None:
            keep.add(request.index)
    patterns: list[re.Pattern[str]] = []
    ranges: list[tuple[int, int]] = []
    for pin in pins:
        m = _INDEX_RANGE.match(pin.strip())
        if m:
            lo = int(m.group(1))
            ranges.append((lo, int(m.group(2) or lo)))
            continue
        try:
            patterns.append(re.compile(pin))
        except re.error as exc:
            raise UsageError(f"--pin {pin!r} is neither an index, a range nor a valid regex: {exc}") from None
    for msg in messages:
        if msg.role == "system" or msg.importance == "critical":
            keep.add(msg.index)
        if any(lo <= msg.index <= hi for lo, hi in ranges):
            keep.add(msg.index)
        if patterns:
            text = msg.text
            if any(p.search(text) for p in patterns):
                keep.add(msg.index)
    return frozenset(keep)


def resolve_target(options: CompactOptions, window: int) -> tuple[int, bool]:
    if options.target_tokens is not None and options.target_ratio is not None:
        raise UsageError("give --target-tokens or --target-ratio, not both")
    if options.target_tokens is not None:
        if options.target_tokens <= 0:
            raise UsageError("--target-tokens must be positive")
        return options.target_tokens, True
    if options.target_ratio is not None:
        if not 0 < options.target_ratio <= 1:
            raise UsageError("--target-ratio is a share of the window between 0 and 1")
        return int(options.target_ratio * window), True
    # No explicit target: get out of compaction territory, i.e. below the first stage threshold.
    return int(options.thresholds[0] * window), False


def ready_summarizer(options: CompactOptions) -> Any:
    """The summarizer ``options`` name, checked first when the strategy may call it: a missing or
    rejected key, or an unknown model, fails before any work."""
    summarizer = get_summarizer(options.summarizer, options.summarizer_options)
    preflight = getattr(summarizer, "preflight", None)
    if options.strategy in SUMMARIZING and callable(preflight):
        preflight()
    return summarizer


def compact_transcript(
    transcript: Transcript,
    options: CompactOptions = CompactOptions(),
    *,
    archive: ArchiveStore | None = None,
    counter: Counter | None = None,
    original_bytes: bytes | None = None,
    counts: Sequence[int] | None = None,
) -> CompactionResult:
    """Compact every conversation of ``transcript``. With an archive, the original is stored first.

    ``counts``: the tokens of each message by ``counter``, when the caller counted them as it read.
    A run that fails (the original cannot be stored on a full disk, say) leaves none of the objects it
    offloaded in the archive.
    """
    with discard_new_objects_on_failure():
        return _compact_transcript(
            transcript,
            options,
            archive=archive,
            counter=counter,
            original_bytes=original_bytes,
            counts=counts,
        )


def _compact_transcript(
    transcript: Transcript,
    options: CompactOptions,
    *,
    archive: ArchiveStore | None,
    counter: Counter | None,
    original_bytes: bytes | None,
    counts: Sequence[int] | None,
) -> CompactionResult:
    from ctxc.profiles import resolve_window

    window, _ = resolve_window(model=options.model, window=options.window)
    target, explicit = resolve_target(options, window)
    strategy = get_strategy(options.strategy)
    configs = strategy_configs(options)
    summarizer = ready_summarizer(options)
    counter = counter or make_counter(
        options.tokenizer,
        use_cache=options.use_cache,
        model=options.model,
        concurrency=options.summarizer_options.concurrency,
    )
    ledger = Ledger(counter)
    data = original_bytes if original_bytes is not None else transcript.parts()
    archive_id = input_sha = archive.object_id(data) if archive is not None else sha256_hex(data)
    stored = _store_in_background(archive, data, archive_id)
    if counts is not None:
        ledger.seed(transcript.messages, counts)
    else:
        ledger.prime(transcript.messages)

    outcomes: list[ConversationOutcome] = []
    outputs: dict[int, tuple[Message, ...]] = {}
    adapter = get_adapter(transcript.format)
    tool_role_default = transcript.format in ("codex", "pi", "openhands")
    # Only the live context is compacted: what the client no longer sends (before the log's own
    # compaction, subagent runs written inline) stays as it is.
    live = live_context(transcript.boundaries, transcript.messages)
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
        # What must survive but lies before the log's own compaction goes into the live context.
        requests = tuple(_copy(m, "pinned") for m in history if m.index in keep and _plain(m))
        # What the log's compaction record carries into the live context counts. Where the writer can
        # replace it, it is compacted with the rest; elsewhere it stays as it is.
        as_is: tuple[Message, ...] = reset.carried if reset is not None else ()
        if as_is and adapter.rewrites_carried:
            messages = (*_carried_copies(as_is, conv), *messages)
            as_is = ()
        pinned = frozenset(
            m.index
            for m in messages
            if m.index in keep
            or (m.role == "system" and m.meta.get("carried"))
            # fifo and selective keep the log's own summary; a summarizing strategy folds it in.
            or (m.meta.get("is_compact_summary") and options.strategy not in SUMMARIZING)
        )
        carried = ledger.total(as_is)
        before = carried + ledger.total(messages)
        # Reminders are appended after compaction, so the strategy aims below the target by their cost.
        quiet_note, compacted_note = _reminder_messages(options, messages, before, window)
        reserve = ledger.total([compacted_note]) if compacted_note else 0
        reserve += carried + ledger.total(requests)
        # A summary quotes the session's intent whenever the client would not see it otherwise: it lies
        # before the log's own compaction, or ctxc's summary is itself where the client resumes.
        intent = session_intent(chain)
        hidden = intent is not None and (
            adapter.summary_resets or all(m.index != intent.index for m in messages)
        )
        ctx = CompactContext(
            target=max(1, target - reserve),
            window=window,
            ledger=ledger,
            summarizer=quoting_intent(summarizer, request_text(intent) if intent and hidden else None),
            archive=archive,
            archive_id=archive_id,
            pinned=pinned,
            keep_last=options.keep_last,
            configs=configs,
            explicit_target=explicit,
            instructions=options.instructions,
        )
        quiet_cost = ledger.total([quiet_note]) if quiet_note else 0
        if before + quiet_cost <= target and not explicit and options.strategy == "adaptive":
            result_messages: tuple[Message, ...] = tuple(messages)
            actions: tuple[Action, ...] = ()
        else:
            for keep_last in _keep_last_steps(options, explicit):
                ctx = replace(ctx, keep_last=keep_last)
                res = strategy.compact(messages, ctx)
                if ledger.total(res.messages) <= ctx.target:
                    break
            result_messages, actions = res.messages, res.actions
            result_messages = _keep_after_summary(
                result_messages,
                pinned,
                requests,
                as_is,
                summary_resets=adapter.summary_resets,
            )
        repaired_msgs, fixed = repair_messages(
            result_messages, tool_role=None if any(m.role == "tool" for m in messages) else tool_role_default
        )
        # What repair removed (orphan results) or added (stand-in results) shows in the savings, so a
        # report never says "nothing to do" for an output smaller than its input.
        repair_tokens = (ledger.total(result_messages), ledger.total(repaired_msgs)) if fixed else (0, 0)
        note = compacted_note if actions else quiet_note
        if note is not None:
            repaired_msgs = (*repaired_msgs, note)
            rules = ", ".join(note.meta["rules"])
            n = messages[-1].index
            actions = (*actions, Action("reminders", "remind", n, n, 0, 0, f"appended {rules}"))
        after = carried + ledger.total(sent_part(repaired_msgs, summary_resets=adapter.summary_resets))
        if fixed:
            actions = (
                *actions,
                Action(
                    "repair",
                    "repair",
                    messages[0].index,
                    messages[-1].index,
                    *repair_tokens,
                    f"{len(fixed)} pairing fix(es)",
                ),
            )
        pinned_tokens = ledger.total(m for m in messages if m.index in pinned)
        tail = {m.index for m in messages[-ctx.keep_last :]}
        kept_tokens = carried + ledger.total(m for m in messages if m.index in pinned or m.index in tail)
        # The adaptive pipeline without an explicit target stops at the stage usage calls for by design;
        # falling short of the default target is then not an error.
        enforce = explicit or options.strategy != "adaptive"
        if after > target and enforce and not options.allow_over:
            over = after - target
            raise OverTargetError(
                f"{options.strategy} reached {after:,} tokens, {over:,} ({over / target:.0%}) over the "
                f"{target:,} target; "
                f"what is always kept (pinned messages, the last {ctx.keep_last} and what the log's "
                f"own compaction carries) is {kept_tokens:,} tokens"
                + (f" ({kept_tokens - target:,} over the target)" if kept_tokens > target else "")
                + f"{_largest_kept(messages, pinned, tail, requests, everything, ledger)}; "
                + ("lower --keep-last, or " if ctx.keep_last > 1 else "")
                + "use --allow-over to write it anyway",
                path=transcript.source,
            )
        leftover = pairing_problems(repaired_msgs, strict=True)
        if leftover:  # repair is meant to make this impossible: fail loudly rather than write it
            raise AssertionError(f"output still has pairing problems: {leftover[0]}")
        outputs[conv] = (*history, *repaired_msgs)
        outcomes.append(ConversationOutcome(conv, before, after, target, pinned_tokens, actions, fixed))

    written = write_transcript(transcript, outputs, adapter, archive_id=archive_id)
    out = _verify(
        written,
        transcript,
        outcomes,
        ledger,
        enforce=explicit or options.strategy != "adaptive",
        allow_over=options.allow_over,
    )
    if archive is not None and stored is not None:
        # The original is on disk before this returns, so before the caller writes any output.
        if stored.result() != archive_id:
            raise AssertionError("the archive stored other bytes than the original")
        archive.index(archive_id, transcript)  # for `ctxc search`; never fails the run
    usage = getattr(summarizer, "usage", None)
    return CompactionResult(
        transcript=out,
        archive_id=archive_id,
        input_sha256=input_sha,
        window=window,
        conversations=tuple(outcomes),
        summarizer_usage=usage() if callable(usage) else None,
    )


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
    """Place what must survive where the client sends it.

    Where the client drops what precedes a summary ctxc writes (``summary_resets``), pinned messages
    kept before the summary get a copy after it (the originals stay where they were, in the file's
    history). Copies of pinned messages from before the log's own compaction (the session's first and
    last requests among them) go after the last summary (or first), each unless what the client sends
    already quotes it.
    """
    out = list(messages)
    summaries = [k for k, m in enumerate(out) if m.meta.get("ctxc") == "summary"]
    at = summaries[-1] + 1 if summaries else 0
    if summary_resets and summaries:
        said = out[summaries[-1]].text
        copies = [
            _copy(m, "pinned")
            for m in out[: summaries[-1]]
            if m.index in pinned and _plain(m) and not (m.is_request and quotes(said, request_text(m)))
        ]
        out[at:at] = copies
        at += len(copies)
        sent = [*carried, *out[summaries[-1] :]]
    else:
        sent = [*carried, *out]
    if not summaries:
        # After the log's own summary, which opens the live context.
        while at < len(out) and out[at].meta.get("is_compact_summary"):
            at += 1
    for request in requests:
        if not any(quotes(m.text, request_text(request)) for m in sent):
            out.insert(at, request)
            at += 1
    return tuple(out)


def sent_part(messages: Sequence[Message], *, summary_resets: bool) -> Sequence[Message]:
    """What the client sends of ``messages``: where it resets at a summary ctxc writes, from the last
    one on (what precedes it stays in the file, and its pinned messages have copies after it)."""
    if summary_resets:
        for k in range(len(messages) - 1, -1, -1):
            if messages[k].meta.get("ctxc") == "summary":
                return messages[k:]
    return messages


def _largest_kept(
    messages: Sequence[Message],
    pinned: frozenset[int],
    tail: set[int],
    requests: Sequence[Message],
    everything: Sequence[Message],
    ledger: Ledger,
) -> str:
    """The largest of what must stay, named, for an over-target error: which words are in the way."""
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
        return "the last message" if m.index == messages[-1].index else "a pinned or last message"

    kept = [*requests, *(m for m in messages if m.index in pinned or m.index in tail)]
    largest = sorted(kept, key=lambda m: -ledger.tokens(m))[:3]
    named = ", ".join(f"{name(m)} (msg {max(m.index, 0)}, {ledger.tokens(m):,} tokens)" for m in largest)
    return f"; the largest: {named}" if named else ""


def _keep_last_steps(options: CompactOptions, explicit: bool) -> tuple[int, ...]:
    """The ``keep_last`` values to try in turn: the one asked for, then, under an explicit target and
    unless it is strict, fewer down to one. Not with a summarizer that calls out: each try would be
    paid for again."""
    local = options.strategy not in SUMMARIZING or options.summarizer == "extractive"
    if options.strict_keep_last or not explicit or not local:
        return (options.keep_last,)
    return tuple(range(options.keep_last, 0, -1)) or (1,)


def _carried_copies(carried: Sequence[Message], conversation: int) -> tuple[Message, ...]:
    """What a compaction record carries, as messages a strategy may compact: indexes below the file's
    own (they belong to no record), marked so the writer knows them."""
    return tuple(
        replace(m, index=k - len(carried), conversation=conversation, meta={**m.meta, "carried": True})
        for k, m in enumerate(carried)
    )


def _plain(message: Message) -> bool:
    """A user or assistant message of words only: a copy of it pairs with nothing."""
    return message.role in ("user", "assistant") and not any(
        b.kind in ("tool_use", "tool_result") for b in message.blocks
    )


def _copy(message: Message, why: str) -> Message:
    """``message`` as a new message: the writer gives it a record (and identity) of its own."""
    meta = {"ctxc": why, **{k: v for k, v in message.meta.items() if k in _NEUTRAL_META}}
    return replace(message, records=(), raw=None, meta=meta)


def _reminder_messages(
    options: CompactOptions, messages: Sequence[Message], tokens: int, window: int
) -> tuple[Message | None, Message | None]:
    """The reminder message to append if nothing is compacted, and the one if something is."""
    if options.reminders is None:
        return None, None
    from ctxc.reminders import due_at_end, reminder_message

    out: list[Message | None] = []
    for compacted in (False, True):
        due = due_at_end(options.reminders, messages, tokens=tokens, window=window, compacted=compacted)
        out.append(reminder_message(due, after=messages[-1]) if due else None)
    return out[0], out[1]


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
    enforce: bool,
    allow_over: bool,
) -> Transcript:
    """Read the output back as any reader would, and hold it to the invariants: pairing and target.

    Writers may drop records the strategy kept (a subagent run whose Task call was summarized away),
    so the figures reported are those of the file as written, not of the strategy's message list.
    """
    from ctxc.formats import reload
    from ctxc.reader import DEFAULT_MAX_LINE_BYTES, ReadOptions

    # Lines the input kept as invalid (--skip-invalid) are written back as they were, and a line the
    # input's --max-line-mb allowed may be over the default limit: read back as the input was read.
    options = ReadOptions(
        skip_invalid=any(r.kind == "invalid" for r in source.records),
        max_line_bytes=max(DEFAULT_MAX_LINE_BYTES, sum(len(r.raw) + len(r.eol) for r in written.records)),
    )
    reread = reload(written, source, options=options)
    live = live_context(reread.boundaries, reread.messages)
    for conversation in {o.conversation for o in outcomes}:
        problems = pairing_problems(live.split(reread.conversation(conversation))[1], strict=True)
        if problems:
            raise AssertionError(f"compacted output has a pairing problem: {problems[0]}")
    ledger.carry(reread.messages, written.messages)  # most lines read back as they were written
    for k, outcome in enumerate(outcomes):
        reset = live.resets.get(outcome.conversation)
        carried = ledger.total(reset.carried) if reset is not None else 0
        after = carried + ledger.total(live.split(reread.conversation(outcome.conversation))[1])
        outcomes[k] = replace(outcome, tokens_after=after)
        if after > outcome.target and enforce and not allow_over:
            over = after - outcome.target
            raise OverTargetError(
                f"the written output is {after:,} tokens, {over:,} over the {outcome.target:,} target",
                path=source.source,
            )
    return replace(reread, source=source.source)
