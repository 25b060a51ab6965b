"""Context management for an agent loop: :class:`ContextManager` says when to compact the message list
(plain Anthropic or OpenAI dicts, or Responses-API items), compacts it, and gives the due reminders and
the system prompt."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ctxc.archive import Archive
from ctxc.archive_store import discard_new_objects_on_failure, sha256_hex
from ctxc.compaction.base import Action, get_strategy
from ctxc.compaction.kernel import Plan, compact_conversation, pinned_indexes
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.run import (
    CompactOptions,
    compact_live,
    make_plan,
    ready_summarizer,
    resolve_target,
    strategy_configs,
)
from ctxc.composer import Composition, PromptComposer
from ctxc.errors import OverTargetError, UsageError
from ctxc.formats import get_adapter
from ctxc.formats.base import FormatAdapter
from ctxc.formats.dicts import SHAPES, Shape, detect_shape, from_messages, json_bytes, to_messages
from ctxc.live import compaction_block_boundary
from ctxc.model import Message, Transcript, Usage
from ctxc.profiles import resolve_window, window_for_log
from ctxc.reminders import Reminder, ReminderRule, ReminderRules, ReminderState, TurnState, last_response
from ctxc.stages import DEFAULT_THRESHOLDS, check_thresholds, stage_for
from ctxc.tokens import Counter, checked, make_counter
from ctxc.tokens.cost import count_messages
from ctxc.validate import pairing_problems

#: Messages memoised by the hash of their JSON; cleared past this (a loop's context holds far fewer).
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
        """The strategies that acted, in order, once each."""
        return tuple(dict.fromkeys(a.strategy for a in self.actions))


class ContextManager:
    """Compaction, reminders and the system prompt for one conversation. Keyword arguments mirror
    ``ctxc compact``; ``reminders`` and ``composer`` may be TOML paths; ``shape="auto"`` is OpenAI unless
    a message is Anthropic-only or an item is a Responses-API one."""

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
        shape: Literal["auto", "anthropic", "openai", "responses"] = "auto",
        allow_over: bool = True,
        use_cache: bool = True,
        min_growth: float = 0.05,
    ) -> None:
        numbers = {"target_tokens": target_tokens, "target_ratio": target_ratio, "trigger": trigger}
        numbers["min_growth"] = min_growth  # the window is checked by resolve_window
        _check_arguments(numbers, keep_last=keep_last, pins=pins, settings=settings, composer=composer)
        self.window, self.model = resolve_window(model=model, window=window)
        self._window_given = model is not None or window is not None
        self.thresholds = check_thresholds(thresholds)
        self.trigger = self.thresholds[0] if trigger is None else trigger
        if not 0 < self.trigger <= 1.5:
            raise UsageError(f"trigger is a share of the window (0-1.5), got {self.trigger}")
        if not 0 <= min_growth <= 1:
            raise UsageError(f"min_growth is a share of the window (0-1), got {min_growth}")
        self.min_growth = min_growth
        if shape not in ("auto", *SHAPES):
            raise UsageError(f"shape must be auto, {', '.join(SHAPES)}, not {shape!r}")
        self.shape = shape
        self.options = CompactOptions(
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
            settings=dict(settings or {}),
            instructions=instructions,
            use_cache=use_cache,
        )
        # An unknown strategy, a bad setting or target fails here, not mid-run.
        get_strategy(strategy)
        strategy_configs(self.options)
        #: The token target of a compaction at the full window (a system prompt lowers it).
        self.target, _ = resolve_target(self.options, self.window)
        self.counter: Counter = checked(counter) or make_counter(tokenizer, use_cache=use_cache, model=model)
        self.archive = archive if archive is None or isinstance(archive, Archive) else Archive.open(archive)
        if isinstance(reminders, str | Path):
            reminders = ReminderRules.load(reminders)
        elif reminders is not None and not isinstance(reminders, ReminderRules):
            given: Any = reminders  # a lone rule, or (refused by ReminderRules) anything else
            reminders = ReminderRules(tuple(given) if isinstance(given, Sequence) else (given,))
        self.rules: ReminderRules | None = reminders
        self.composer = PromptComposer.load(composer) if isinstance(composer, str | Path) else composer
        self.reminder_state = ReminderState()
        self.last_compaction: Compaction | None = None
        self._memo: dict[bytes, tuple[int, bool]] = {}
        self._summarizer: Any = None

    def follow_log(self, usage: Sequence[Usage]) -> None:
        """Unless a model or window was given, take the window of the model a log's calls (``usage``)
        record, as every command measuring that log does."""
        if not self._window_given:
            choice = window_for_log(usage=usage)
            self.window, self.model = choice.window, choice.model
            self.options = replace(self.options, window=self.window)
            self.target, _ = resolve_target(self.options, self.window)

    def count(self, messages: Sequence[Mapping[str, Any]] | Sequence[Message], *, system: str = "") -> int:
        """Context tokens of ``messages`` (dicts or ctxc messages) from the last one holding the provider's
        own compaction block on (the provider ignores what precedes it), plus ``system`` if given."""
        sizes = self._sizes(messages)
        start = max((i for i, (_, resets) in enumerate(sizes) if resets), default=0)
        total = self._system_tokens(system)
        return total + sum(n for n, _ in sizes[start:])

    def _sizes(self, messages: Sequence[Mapping[str, Any]] | Sequence[Message]) -> list[tuple[int, bool]]:
        """Each message's tokens and whether it holds a compaction block; a dict already seen (same
        JSON) is not counted again, so a growing list costs a hash a message."""
        require_list(messages)  # a lone dict or a string would count 0 tokens, and never compact
        sizes: list[tuple[int, bool]] = [(0, False)] * len(messages)
        objects = [(i, m) for i, m in enumerate(messages) if isinstance(m, Message)]
        counts = count_messages([m for _, m in objects], self.counter) if objects else []
        for (i, m), n in zip(objects, counts, strict=True):
            sizes[i] = (n, compaction_block_boundary(m) is not None)
        todo: dict[bytes, tuple[Mapping[str, Any], list[int]]] = {}  # dicts not seen yet, by JSON hash
        for i, d in enumerate(messages):
            if isinstance(d, Message):  # counted above
                continue
            if not isinstance(d, Mapping):  # an SDK's message object would count 0 tokens, and never compact
                raise _not_a_message(i, d)
            key = hashlib.blake2b(json_bytes(d), digest_size=16).digest()
            if (known := self._memo.get(key)) is not None:
                sizes[i] = known
            else:
                todo.setdefault(key, (d, []))[1].append(i)
        if todo:
            new = [d for d, _ in todo.values()]
            parsed = read_messages(new, self._shape(new), [where[0] for _, where in todo.values()])
            counted = count_messages(parsed, self.counter)
            # Indexes are positions in ``new``.
            by_position = {
                m.index: (n, compaction_block_boundary(m) is not None)
                for m, n in zip(parsed, counted, strict=True)
            }
            if len(self._memo) > _MEMO_LIMIT:
                self._memo.clear()
            for k, (key, (_, where)) in enumerate(todo.items()):
                self._memo[key] = size = by_position[k]
                for i in where:
                    sizes[i] = size
        return sizes

    def room(self, system: str = "") -> int:
        """The part of the window the message list may use: the window less the system prompt."""
        taken = self._system_tokens(system)
        if taken >= self.window:
            raise OverTargetError(
                f"the system prompt alone is {taken:,} tokens, the whole {self.window:,} window"
            )
        return self.window - taken

    def _system_tokens(self, system: str) -> int:
        if not system:
            return 0
        if not isinstance(system, str):  # the SDK's list of text blocks, say
            raise UsageError(f"system= is the system prompt's text (a str), got a {type(system).__name__}")
        return self.counter.count([system])[0]

    def over_trigger(self, tokens: int, *, room: int | None = None) -> bool:
        """Whether ``tokens`` call for compaction: at or past the trigger share of ``room`` (default:
        the window) and grown by ``min_growth`` of it since the last compaction."""
        room = self.window if room is None else room
        if tokens < self.trigger * room:
            return False
        last = self.last_compaction
        return last is None or tokens >= last.tokens_after + self.min_growth * room

    def needs_compaction(
        self, messages: Sequence[Mapping[str, Any]] | Sequence[Message], *, system: str = ""
    ) -> bool:
        """Whether the messages are past the trigger; a ``system`` prompt sent beside them is taken off
        the window first (pass the same to :meth:`compact`)."""
        return self.over_trigger(self.count(messages), room=self.room(system))

    def stage(self, tokens: int, *, room: int | None = None) -> int:
        """The adaptive stage (1-5) a message list of ``tokens`` is in."""
        return stage_for(tokens / (room or self.window), self.thresholds)

    def compact(self, messages: Sequence[Mapping[str, Any]], *, system: str = "") -> list[dict[str, Any]]:
        """The compacted message list, same shape, tool calls and results still paired; kept messages
        are the very dicts given. :attr:`last_compaction` says what was done."""
        room = self.room(system)
        require_list(messages)
        if not messages:
            self.last_compaction = Compaction(0, 0, 1)
            return []
        before = self.count(messages)  # first: it refuses what is not JSON, which parsing would trip on
        shape = self._shape(messages)
        parsed = tuple(replace(m, meta={**m.meta, "dialect": shape}) for m in read_messages(messages, shape))
        with discard_new_objects_on_failure():
            compacted, actions = self._compact_live(parsed, messages, room, shape)
        out = from_messages(compacted, messages, parsed, shape=shape)
        self.last_compaction = Compaction(before, self.count(out), self.stage(before, room=room), actions)
        return out

    def _compact_live(
        self, parsed: Sequence[Message], messages: Sequence[Mapping[str, Any]], room: int, shape: Shape
    ) -> tuple[tuple[Message, ...], tuple[Action, ...]]:
        """The live context (from the provider's own compaction block on) compacted by the kernel."""
        # Responses items are Codex's: each call's output is an item of its own (the adapter's tool_role).
        adapter = get_adapter("codex" if shape == "responses" else "chat")
        data = b"".join(json_bytes(m) + b"\n" for m in messages)
        archive_id = self.archive.store(data) if self.archive is not None else sha256_hex(data)
        boundaries = tuple(b for m in parsed if (b := compaction_block_boundary(m)) is not None)
        transcript = Transcript("chat", (), tuple(parsed), "<messages>", boundaries=boundaries)
        plan = self._plan(room, Ledger(self.counter), archive_id, adapter)
        outputs, outcomes = compact_live(transcript, self.options, plan, adapter)
        if self.archive is not None:
            self.archive.index(archive_id, transcript)  # for `ctxc search`; never fails the run
        return outputs.get(0, tuple(parsed)), tuple(a for o in outcomes for a in o.actions)

    def _plan(self, room: int, ledger: Ledger, archive_id: str, adapter: FormatAdapter | None = None) -> Plan:
        """The kernel's plan for a message list with ``room`` tokens of window."""
        if self._summarizer is None:
            self._summarizer = ready_summarizer(self.options)
        options = self.options if room == self.window else replace(self.options, window=room)
        return make_plan(
            options,
            window=room,
            ledger=ledger,
            summarizer=self._summarizer,
            archive=self.archive,
            archive_id=archive_id,
            adapter=adapter,
        )

    def compact_messages(
        self,
        messages: Sequence[Message],
        *,
        ledger: Ledger | None = None,
        archive_id: str = "",
        tool_role: bool | None = None,
    ) -> tuple[tuple[Message, ...], Compaction]:
        """Compact ctxc messages of one conversation in memory (what replay runs at each trigger);
        ``tool_role`` True answers an unanswered call with role ``tool`` messages."""
        plan = self._plan(self.window, ledger or Ledger(self.counter), archive_id)
        if tool_role:
            plan = replace(plan, tool_role=True)
        done = compact_conversation(messages, plan, keep=pinned_indexes(messages, self.options.pins))
        stage = self.stage(done.tokens_before)
        self.last_compaction = Compaction(done.tokens_before, done.tokens_after, stage, done.actions)
        return done.messages, self.last_compaction

    def turn_state(
        self, messages: Sequence[Mapping[str, Any]], *, turn: int, compacted: bool = False
    ) -> TurnState:
        """The :class:`~ctxc.reminders.TurnState` of a dict message list at ``turn`` (responses so far)."""
        start = len(messages)
        while start and _role(messages[start - 1]) != "assistant":
            start -= 1
        while start and _role(messages[start - 1]) == "assistant":
            start -= 1
        tokens = self.count(messages)  # first: it refuses what is not JSON, which parsing would trip on
        calls, text = last_response(to_messages(messages[start:], shape=self._shape(messages)))
        return TurnState(turn, tokens, self.window, calls, text, compacted)

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

    def compose(self, budget: int | None = None, *, fill: bool = False) -> Composition:
        if self.composer is None:
            raise UsageError("this ContextManager has no composer (pass composer=...)")
        return self.composer.compose(budget, counter=self.counter, fill=fill)

    def system_prompt(self, budget: int | None = None) -> str:
        """The composed system prompt within ``budget`` tokens (all sections when None)."""
        return self.compose(budget).prompt

    def _shape(self, messages: Sequence[Mapping[str, Any]]) -> Shape:
        return detect_shape(messages) if self.shape == "auto" else self.shape


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
    shape: Literal["auto", "anthropic", "openai", "responses"] = "auto",
    allow_over: bool = False,
) -> list[dict[str, Any]]:
    """``messages`` (plain dicts: Anthropic or OpenAI shape, or Responses-API items) compacted to at most
    ``max_tokens``, shaped like LangChain's ``trim_messages``; ``token_counter`` is a tokenizer name or a
    ``Counter``. A budget that cannot be met raises :class:`~ctxc.errors.OverTargetError` unless
    ``allow_over``; a list within it comes back as given."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise UsageError(f"max_tokens must be a positive int, got {max_tokens!r}")
    require_list(messages)
    manager = ContextManager(
        window=max_tokens if window is None else window,
        strategy=strategy,
        target_tokens=max_tokens,
        keep_last=keep_last,
        pins=pins,
        tokenizer=token_counter if isinstance(token_counter, str) else "o200k_base",
        summarizer=summarizer,
        settings=settings,
        archive=archive,
        counter=None if isinstance(token_counter, str) else token_counter,
        shape=shape,
        allow_over=allow_over,
    )
    # Within budget nothing is compacted, whatever the strategy (thinking and images would act anyway);
    # only a broken tool pairing is still repaired.
    within = manager.count(messages) <= max_tokens  # first: it refuses what is not JSON
    parsed = read_messages(messages, manager._shape(messages))
    if within and not pairing_problems(parsed, strict=True):
        return [m if isinstance(m, dict) else dict(m) for m in messages]
    return manager.compact(messages)


def _check_arguments(
    numbers: Mapping[str, object], *, keep_last: object, pins: object, settings: object, composer: object
) -> None:
    """A :class:`UsageError` for a keyword of the wrong type (a number read from the environment is a
    string), which would otherwise be a TypeError from deep inside."""
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise UsageError(f"keep_last must be an int of at least 1, got {keep_last!r}")
    if isinstance(pins, str):  # it would pin each of its characters
        raise UsageError(f"{{pins}} takes a list of pins, not one string: [{pins!r}]", options=("pins",))
    for name, value in numbers.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise UsageError(f"{name}= must be a number, got {value!r}")
    if settings is not None and not isinstance(settings, Mapping):
        raise UsageError(f"settings= is a mapping such as {{'mask.keep_last': '3'}}, got {settings!r:.80}")
    if composer is not None and not isinstance(composer, PromptComposer | str | Path):
        raise UsageError(f"composer= is a PromptComposer or a TOML path, got {composer!r:.80}")


def require_list(messages: object) -> None:
    """A :class:`UsageError` unless ``messages`` is a list (or other sequence) of messages."""
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise UsageError(f"messages must be a list of message dicts, got a {type(messages).__name__}")


def read_messages(
    messages: Sequence[Mapping[str, Any]], shape: Shape, positions: Sequence[int] | None = None
) -> list[Message]:
    """The ctxc messages of a dict list; an entry that is no message (it would count 0 tokens and be
    dropped by compaction) is a :class:`UsageError` naming its position (``positions[i]`` if given)."""
    parsed = to_messages(messages, shape=shape)
    if len(parsed) < len(messages):
        i = next(i for i, m in enumerate([*parsed, None]) if m is None or m.index != i)
        raise _not_a_message(i if positions is None else positions[i], messages[i])
    return parsed


def _not_a_message(i: int, obj: object) -> UsageError:
    return UsageError(
        f"messages[{i}] is not a message (a dict whose role is user, assistant, system, developer,"
        f" tool or function, or a Responses-API item): {obj!r:.80}"
    )


def _role(obj: Any) -> Any:
    return obj.get("role") if isinstance(obj, Mapping) else None


__all__ = ["Compaction", "ContextManager", "compact_messages", "detect_shape", "from_messages", "to_messages"]
