"""What each adaptive stage would remove from a transcript, without writing anything: ``potential``
(the stage alone, pushed to target 0) and ``plan`` (its share of the plan ``ctxc compact`` would run)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ctxc.archive_store import UnwrittenArchive, sha256_hex
from ctxc.compaction.adaptive import STAGES, Adaptive, AdaptiveConfig
from ctxc.compaction.base import CompactContext
from ctxc.compaction.kernel import pinned_indexes
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.run import CompactOptions, carried_copies, compact_transcript
from ctxc.formats import get_adapter
from ctxc.live import live_context
from ctxc.model import Message, Transcript
from ctxc.stages import DEFAULT_THRESHOLDS, check_thresholds
from ctxc.summarize import get_summarizer
from ctxc.tokens import Counter

STAGE_OF = {name: stage for stage, names in STAGES for name in names}


@dataclass(frozen=True, slots=True)
class StageForecast:
    stage: int
    strategies: tuple[str, ...]
    potential: int
    plan: int


def forecast(
    transcript: Transcript,
    *,
    window: int,
    counter: Counter,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    keep_last: int = 4,
) -> tuple[StageForecast, ...]:
    """Per stage, what it alone would remove from the live context, and its share of what ``ctxc
    compact`` (adaptive, no target given) removes: history, subagent runs and abandoned branches,
    which the client does not send, are in neither."""
    ledger = Ledger(counter)
    ledger.count_uncounted(transcript.messages)
    live = live_context(transcript.boundaries, transcript.messages)
    ledger.withhold_thinking(m for m in transcript.messages if m.index in live.unsent_thinking)
    rewrites = get_adapter(transcript.format).rewrites_carried
    summarizer = get_summarizer("extractive")
    archive = UnwrittenArchive.open()  # offload's pointers as a run would write them
    archive_id = sha256_hex(transcript.to_bytes())
    thresholds = check_thresholds(thresholds)
    cfg = AdaptiveConfig(*thresholds)
    potential = dict.fromkeys(STAGE_OF.values(), 0)
    for conv in range(transcript.conversations):
        messages = live.split(transcript.conversation(conv))[1]
        if not messages or conv in live.side:
            continue
        reset = live.resets.get(conv)
        if reset is not None and rewrites:  # what the compaction record carries is compacted too
            messages = (*carried_copies(reset.carried, conv), *messages)
        base = CompactContext(
            target=0,
            window=window,
            ledger=ledger,
            summarizer=summarizer,
            archive=archive,
            archive_id=archive_id,
            pinned=pinned_indexes(messages, ()),
            keep_last=keep_last,
            configs={"adaptive": cfg},
            explicit_target=True,
        )
        before = ledger.total(messages)
        for stage, names in STAGES:
            msgs: tuple[Message, ...] = tuple(messages)
            for name in names:
                msgs = Adaptive.run_stage(name, msgs, base, cfg).messages
            potential[stage] += before - ledger.total(msgs)
    options = CompactOptions(window=window, thresholds=thresholds, keep_last=keep_last)
    result = compact_transcript(
        transcript, replace(options, allow_over=True), archive=archive, counter=counter
    )
    plan = dict.fromkeys(STAGE_OF.values(), 0)
    for action in result.actions:
        plan[STAGE_OF.get(action.strategy, 2)] += action.saved
    return tuple(StageForecast(stage, names, potential[stage], plan[stage]) for stage, names in STAGES)
