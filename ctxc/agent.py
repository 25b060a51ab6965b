"""Context management for an agent loop: one object the loop consults every turn.

:class:`ContextManager` works on the message list an agent sends to its model, as plain dicts in the
Anthropic shape (content blocks, ``tool_use``/``tool_result``) or the OpenAI shape (``tool_calls``,
role ``tool``), exactly as an SDK takes them. Each turn the loop asks:

* :meth:`~ContextManager.needs_compaction`: is the context past the trigger share of the window?
  Counting is cheap to repeat: each message is counted once (memoised by a hash of its JSON) and
  texts are counted through the cached counter;
* :meth:`~ContextManager.compact`: the compacted list, in the shape it was given, by the real
  strategies through the kernel ``ctxc compact`` runs (:func:`~ctxc.compaction.kernel.compact_conversation`:
  pins, strategy, repair, tool pairing checked before it is returned);
* :meth:`~ContextManager.reminders_due`: which reminder rules fire at this turn (the manager keeps
  how often each fired, see :mod:`ctxc.reminders`);
* :meth:`~ContextManager.system_prompt`: the prioritised system prompt within a token budget
  (:mod:`ctxc.composer`).

"Should I compact?" (the trigger, data) is kept apart from "how" (the strategy). The trigger defaults
to the first adaptive stage threshold (60% of the window): the adaptive strategy then does exactly
what its stage calls for, least lossy first, stopping as soon as the context is below the trigger.
After a compaction the next one is due only once the context has grown by ``min_growth`` of the
window (5%) beyond what that compaction left, so a loop never compacts turn after turn for a few
tokens (each compaction also invalidates the provider's prompt cache); if a stage's strategies
free too little, the context climbs into the next stage and that stage's strategies run. A higher
trigger with ``target_ratio`` below it gives wider hysteresis (compact at 80%, down to 50%).

``examples/agent_loop.py`` is a whole loop with a fake model. :func:`compact_messages` is the same
compaction as one call, shaped like LangChain's ``trim_messages``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ctxc.errors import UsageError
from ctxc.formats.dicts import Shape, detect_shape, from_messages, json_bytes, to_messages
from ctxc.model import Message, Transcript
from ctxc.reminders import (
    Reminder,
    ReminderRule,
    ReminderRules,
    ReminderState,
    TurnState,
    last_response,
)
from ctxc.stages import DEFAULT_THRESHOLDS, check_thresholds, stage_for
from ctxc.tokens import make_counter

if TYPE_CHECKING:
    from ctxc.archive import Archive
    from ctxc.compaction.base import Action
    from ctxc.compaction.kernel import Plan
    from ctxc.compaction.ledger import Ledger
    from ctxc.compaction.run import CompactOptions
    from ctxc.composer import Composition, PromptComposer
    from ctxc.tokens import Counter

#: Messages memoised by the hash of their JSON; cleared when it grows past this (a loop's context
#: holds far fewer; the cached counter's own memo keeps texts cheap after a clear).
_MEMO_LIMIT = 200_000


@dataclass(frozen=True, slots=True)
class Compaction:
    """What one compaction did: tokens before and after, the stage it ran in, and its actions."""

    tokens_before: int
    tokens_after: int
    stage: int
    actions: tuple[Action, ...] = ()

    @property
    def freed(self) -> int:
        return self.tokens_before - self.tokens_after

    @property
    def changed(self) -> bool:
        """Whether any strategy acted (a compaction below its target may do nothing)."""
        return any(a.strategy not in ("repair", "reminders") for a in self.actions)

    @property
    def strategies(self) -> tuple[str, ...]:
        """The strategies that acted, in order, once each (adaptive names its stages' strategies)."""
        seen: dict[str, None] = {}
        for a in self.actions:
            seen.setdefault(a.strategy, None)
        return tuple(seen)


class ContextManager:
    """Compaction, reminders and the system prompt for one agent loop (one conversation).

    The manager is a small stateful object: it remembers how often each reminder fired and the last
    compaction; everything else is configuration. Keyword arguments mirror ``ctxc compact``.

    ``reminders`` is a :class:`~ctxc.reminders.ReminderRules`, a sequence of rules, or a TOML path;
    ``composer`` a :class:`~ctxc.composer.PromptComposer` or a TOML path. ``shape`` is ``"auto"``
    (decided from the messages: OpenAI unless a message is Anthropic-only), ``"anthropic"`` or
    ``"openai"``. ``allow_over`` (default on) returns the best effort when a strategy cannot reach
    its target, rather than raising :class:`~ctxc.errors.OverTargetError` in the middle of a run.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        window: int | None = None,
        strategy: str = "adaptive",
        reminders: ReminderRules | Sequence[ReminderRule] | str | Path | None = None,
        composer: PromptComposer | str | Path | None = None,
        trigger: float | None = None,
        target_ratio: float | None = None,
        target_tokens: int | None = None,
        keep_last: int = 4,
        pins: Sequence[str] = (),
        thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
        tokenizer: str = "o200k_base",
        summarizer: str = "extractive",
        settings: Mapping[str, str] | None = None,
        instructions: str | None = None,
        archive: Archive | str | Path | None = None,
        counter: Counter | None = None,
        shape: Literal["auto", "anthropic", "openai"] = "auto",
        allow_over: bool = True,
        use_cache: bool = True,
        min_growth: float = 0.05,
    ) -> None:
        from ctxc.compaction.base import get_strategy
        from ctxc.compaction.run import CompactOptions, resolve_target, strategy_configs
        from ctxc.profiles import resolve_window

        self.window, self.model = resolve_window(model=model, window=window)
        self.thresholds = check_thresholds(thresholds)
        self.trigger = self.thresholds[0] if trigger is None else trigger
        if not 0 < self.trigger <= 1.5:
            raise UsageError(f"trigger is a share of the window (0-1.5), got {self.trigger}")
        if not 0 <= min_growth <= 1:
            raise UsageError(f"min_growth is a share of the window (0-1), got {min_growth}")
        self.min_growth = min_growth
        if shape not in ("auto", "anthropic", "openai"):
            raise UsageError(f"shape must be auto, anthropic or openai, not {shape!r}")
        self.shape = shape
        sets = dict(settings or {})
        self.options: CompactOptions = CompactOptions(
            strategy=strategy,
            target_tokens=target_tokens,
            target_ratio=target_ratio,
            model=model,
            window=self.window,
            keep_last=keep_last,
            pins=tuple(pins),
            summarizer=summarizer,
            tokenizer=tokenizer,
            thresholds=self.thresholds,
            allow_over=allow_over,
            settings=sets,
            instructions=instructions,
            use_cache=use_cache,
        )
        # An unknown strategy, a bad setting or target fails here, not mid-run.
        get_strategy(strategy)
        strategy_configs(self.options)
        #: The token target of a compaction at the full window (a system prompt lowers it).
        self.target, _ = resolve_target(self.options, self.window)
        self.counter: Counter = counter or make_counter(tokenizer, use_cache=use_cache, model=model)
        self.archive = _open_archive(archive)
        self.rules = _rules(reminders)
        self.composer = _composer(composer)
        self.reminder_state = ReminderState()
        self.last_compaction: Compaction | None = None
        #: Tokens the last compaction left: the next is due only after ``min_growth`` more.
        self._last_after: int | None = None
        self._memo: dict[bytes, int] = {}
        self._summarizer: Any = None

    # ------------------------------------------------------------------------------------- counting

    def count(self, messages: Sequence[Mapping[str, Any]] | Sequence[Message], *, system: str = "") -> int:
        """Context tokens of ``messages`` (dicts or ctxc messages), plus ``system`` if given.

        A dict already seen (same JSON) is not parsed or counted again, so calling this on a growing
        list every turn costs a hash of each message, not a tokenization.
        """
        import hashlib

        total = self.counter.count([system])[0] if system else 0
        todo: list[tuple[bytes, Mapping[str, Any]]] = []
        objects: list[Message] = []
        for m in messages:
            if isinstance(m, Message):
                objects.append(m)
                continue
            key = hashlib.blake2b(json_bytes(m), digest_size=16).digest()
            n = self._memo.get(key)
            if n is None:
                todo.append((key, m))
            else:
                total += n
        if objects:
            total += sum(_count(objects, self.counter))
        if todo:
            dicts = [m for _, m in todo]
            parsed = to_messages(dicts, shape=self._shape(dicts))
            # Indexes are positions in ``dicts``; a dict that is not a message (unknown role) is free.
            tokens = dict(zip((msg.index for msg in parsed), _count(parsed, self.counter), strict=True))
            if len(self._memo) > _MEMO_LIMIT:
                self._memo.clear()
            for i, (key, _) in enumerate(todo):
                n = tokens.get(i, 0)
                self._memo[key] = n
                total += n
        return total

    def room(self, system: str = "") -> int:
        """The part of the window the message list may use: the window less the system prompt."""
        taken = self.counter.count([system])[0] if system else 0
        if taken >= self.window:
            from ctxc.errors import OverTargetError

            raise OverTargetError(
                f"the system prompt alone is {taken:,} tokens, the whole {self.window:,} window"
            )
        return self.window - taken

    def over_trigger(self, tokens: int, *, room: int | None = None) -> bool:
        """Whether a message list of ``tokens`` calls for compaction: at or past the trigger share of
        ``room`` (default: the window) and grown by ``min_growth`` of it since the last compaction."""
        room = self.window if room is None else room
        if tokens < self.trigger * room:
            return False
        last = self._last_after
        return last is None or tokens >= last + self.min_growth * room

    def _record(self, compaction: Compaction) -> Compaction:
        self.last_compaction = compaction
        self._last_after = compaction.tokens_after
        return compaction

    def needs_compaction(
        self, messages: Sequence[Mapping[str, Any]] | Sequence[Message], *, system: str = ""
    ) -> bool:
        """Whether the messages are past the trigger. A ``system`` prompt sent beside them
        (Anthropic's ``system=``) is taken off the window first; pass the same to :meth:`compact`."""
        return self.over_trigger(self.count(messages), room=self.room(system))

    def stage(self, tokens: int, *, room: int | None = None) -> int:
        """The adaptive stage (1-5) a message list of ``tokens`` is in."""
        return stage_for(tokens / (room or self.window), self.thresholds)

    # ----------------------------------------------------------------------------------- compaction

    def compact(self, messages: Sequence[Mapping[str, Any]], *, system: str = "") -> list[dict[str, Any]]:
        """The compacted message list, same shape, tool calls and results still paired.

        Messages kept as they were are returned as the very dicts given; new ones (summaries,
        placeholders, "no result was recorded" answers) are built in the list's shape. With an
        archive, the list is stored first and summaries cite it. A ``system`` prompt is taken off the
        window, as in :meth:`needs_compaction`. :attr:`last_compaction` says what was done.
        """
        from ctxc.archive_store import discard_new_objects_on_failure

        room = self.room(system)
        if not messages:
            self._record(Compaction(0, 0, 1))
            return []
        shape = self._shape(messages)
        parsed = tuple(
            replace(m, meta={**m.meta, "dialect": shape}) for m in to_messages(messages, shape=shape)
        )
        before = self.count(messages)
        with discard_new_objects_on_failure():
            compacted, actions = self._compact_live(parsed, messages, room)
        out = from_messages(compacted, messages, parsed, shape=shape)
        after = self.count(out)
        self._record(Compaction(before, after, self.stage(before, room=room), actions))
        return out

    def _compact_live(
        self, parsed: Sequence[Message], messages: Sequence[Mapping[str, Any]], room: int
    ) -> tuple[tuple[Message, ...], tuple[Action, ...]]:
        """The live context (from the provider's own compaction block on) compacted by the kernel;
        the list is stored in the archive first, and what is replaced cites it."""
        from ctxc.archive_store import sha256_hex
        from ctxc.compaction.ledger import Ledger
        from ctxc.compaction.run import compact_live
        from ctxc.formats import get_adapter
        from ctxc.live import compaction_block_boundary

        data = b"".join(json_bytes(m) + b"\n" for m in messages)
        archive_id = self.archive.store(data) if self.archive is not None else sha256_hex(data)
        boundaries = tuple(b for m in parsed if (b := compaction_block_boundary(m)) is not None)
        transcript = Transcript("chat", (), tuple(parsed), "<messages>", boundaries=boundaries)
        plan = self._plan(room, Ledger(self.counter), archive_id)
        outputs, outcomes = compact_live(transcript, self.options, plan, get_adapter("chat"))
        if self.archive is not None:
            self.archive.index(archive_id, transcript)  # for `ctxc search`; never fails the run
        return outputs.get(0, tuple(parsed)), tuple(a for o in outcomes for a in o.actions)

    def _plan(self, room: int, ledger: Ledger, archive_id: str) -> Plan:
        """The kernel's plan for a message list with ``room`` tokens of window."""
        from ctxc.compaction.run import make_plan

        options = self.options if room == self.window else replace(self.options, window=room)
        return make_plan(
            options,
            window=room,
            ledger=ledger,
            summarizer=self._get_summarizer(),
            archive=self.archive,
            archive_id=archive_id,
        )

    def compact_messages(
        self,
        messages: Sequence[Message],
        *,
        ledger: Ledger | None = None,
        archive_id: str = "",
        tool_role: bool | None = None,
    ) -> tuple[tuple[Message, ...], Compaction]:
        """Compact ctxc messages of one conversation in memory (what replay runs every trigger).

        The kernel of :func:`~ctxc.compaction.run.compact_transcript` (pins, strategy, repair, pairing
        check) without a file. ``ledger`` lets a caller that compacts the same growing list many
        times count each message once. ``tool_role`` True answers an unanswered call with role
        ``tool`` messages (as does a list that holds any); otherwise with a user message of results.
        """
        from ctxc.compaction.kernel import compact_conversation, pinned_indexes
        from ctxc.compaction.ledger import Ledger

        plan = self._plan(self.window, ledger or Ledger(self.counter), archive_id)
        if tool_role:
            plan = replace(plan, tool_role=True)
        done = compact_conversation(messages, plan, keep=pinned_indexes(messages, self.options.pins))
        compaction = Compaction(
            done.tokens_before, done.tokens_after, self.stage(done.tokens_before), done.actions
        )
        return done.messages, self._record(compaction)

    def _get_summarizer(self) -> Any:
        if self._summarizer is None:
            from ctxc.compaction.run import ready_summarizer

            self._summarizer = ready_summarizer(self.options)
        return self._summarizer

    # ------------------------------------------------------------------------------------ reminders

    def turn_state(
        self, messages: Sequence[Mapping[str, Any]], *, turn: int, compacted: bool = False
    ) -> TurnState:
        """The :class:`~ctxc.reminders.TurnState` of a dict message list at ``turn`` (responses so far)."""
        tail_start = len(messages)
        while tail_start and _role(messages[tail_start - 1]) != "assistant":
            tail_start -= 1
        while tail_start and _role(messages[tail_start - 1]) == "assistant":
            tail_start -= 1
        tail = to_messages(messages[tail_start:], shape=self._shape(messages))
        calls, text = last_response(tail)
        return TurnState(
            turn=turn,
            tokens=self.count(messages),
            window=self.window,
            tool_calls=calls,
            response=text,
            compacted=compacted,
        )

    def reminders_due(self, state: TurnState) -> tuple[Reminder, ...]:
        """The reminders that fire at ``state``; the manager records that they fired."""
        if self.rules is None:
            return ()
        if state.window is None:
            state = replace(state, window=self.window)
        due, self.reminder_state = self.rules.due(state, self.reminder_state)
        return due

    @property
    def fired(self) -> Mapping[str, int]:
        """How often each reminder rule has fired so far."""
        return dict(self.reminder_state.fired)

    @staticmethod
    def reminder_message(reminders: Sequence[Reminder]) -> dict[str, Any]:
        """One user message carrying ``reminders``, valid in both shapes."""
        return {"role": "user", "content": "\n\n".join(r.text for r in reminders)}

    # ------------------------------------------------------------------------------- system prompt

    def compose(self, budget: int | None = None, *, fill: bool = False) -> Composition:
        if self.composer is None:
            raise UsageError("this ContextManager has no composer (pass composer=...)")
        return self.composer.compose(budget, counter=self.counter, fill=fill)

    def system_prompt(self, budget: int | None = None) -> str:
        """The composed system prompt within ``budget`` tokens (all sections when None)."""
        return self.compose(budget).prompt

    # ---------------------------------------------------------------------------------------- shape

    def _shape(self, messages: Sequence[Mapping[str, Any]]) -> Shape:
        if self.shape != "auto":
            return self.shape
        return detect_shape(messages)


def compact_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int,
    strategy: str = "adaptive",
    token_counter: str | Counter = "o200k_base",
    window: int | None = None,
    keep_last: int = 4,
    pins: Sequence[str] = (),
    settings: Mapping[str, str] | None = None,
    summarizer: str = "extractive",
    archive: Archive | str | Path | None = None,
    shape: Literal["auto", "anthropic", "openai"] = "auto",
    allow_over: bool = False,
) -> list[dict[str, Any]]:
    """``messages`` (plain dicts, Anthropic or OpenAI shape) compacted to at most ``max_tokens``.

    Shaped like LangChain's ``trim_messages``: messages in, messages out, no files. ``strategy`` is
    any of ``ctxc strategies``; ``token_counter`` a tokenizer name (``o200k_base``, ``cl100k_base``,
    ``approx``, ``anthropic``) or an object with ``count(texts) -> list[int]``. Kept messages are the
    very dicts given; tool calls and results stay paired. ``window`` (default ``max_tokens``) is the
    model's, for the adaptive stages. A budget that cannot be met raises
    :class:`~ctxc.errors.OverTargetError` unless ``allow_over``.
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise UsageError(f"max_tokens must be a positive int, got {max_tokens!r}")
    counter = None if isinstance(token_counter, str) else token_counter
    manager = ContextManager(
        window=window or max_tokens,
        strategy=strategy,
        target_tokens=max_tokens,
        keep_last=keep_last,
        pins=pins,
        tokenizer=token_counter if isinstance(token_counter, str) else "o200k_base",
        summarizer=summarizer,
        settings=settings,
        archive=archive,
        counter=counter,
        shape=shape,
        allow_over=allow_over,
    )
    return manager.compact(messages)


def _role(obj: Any) -> Any:
    return obj.get("role") if isinstance(obj, Mapping) else None


def _count(messages: Sequence[Message], counter: Counter) -> list[int]:
    from ctxc.tokens.cost import count_messages

    return count_messages(messages, counter)


def _open_archive(archive: Archive | str | Path | None) -> Archive | None:
    if archive is None:
        return None
    from ctxc.archive import Archive

    return archive if isinstance(archive, Archive) else Archive.open(str(archive))


def _rules(reminders: ReminderRules | Sequence[ReminderRule] | str | Path | None) -> ReminderRules | None:
    if reminders is None:
        return None
    if isinstance(reminders, ReminderRules):
        return reminders
    if isinstance(reminders, str | Path):
        return ReminderRules.load(reminders)
    return ReminderRules(tuple(reminders))


def _composer(composer: PromptComposer | str | Path | None) -> PromptComposer | None:
    if composer is None:
        return None
    from ctxc.composer import PromptComposer

    return composer if isinstance(composer, PromptComposer) else PromptComposer.load(composer)


__all__ = ["Compaction", "ContextManager", "compact_messages", "detect_shape", "from_messages", "to_messages"]
