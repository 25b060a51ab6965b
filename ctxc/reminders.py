"""Event reminders: restate key instructions when something happens, before instructions fade out.

An agent many turns in tends to stop following what it was told at the start. A reminder rule names
an event and a message to inject (as a user message) when the event happens:

* ``every_n_turns = N``: N model responses since the rule last fired (or since the start);
* ``token_threshold = T``: the context rises above T tokens (an integer) or above that share of the
  window (a number between 0 and 1). It fires when the context *crosses* the threshold, not on every
  turn it stays above it: after a compaction brings the context back down, the next crossing fires
  again;
* ``tool_call = "NAME"``: the last response called the tool NAME;
* ``keyword_in_response = "TEXT"``: the last response's text contains TEXT (case-insensitive);
* ``after_compaction = true``: the context was just compacted (what a summary may have lost is
  restated; the seed design used a token threshold as a stand-in for this).

Each rule may set ``max_repeats``. Rules are data (TOML, ``[[reminder]]`` tables); the evaluation is a
pure function over frozen values: :meth:`ReminderRules.due` takes the :class:`TurnState` (what the
agent loop knows at this turn) and the :class:`ReminderState` (how often and when each rule fired)
and returns the reminders due with the next state. Nothing is hidden in the rules object, so one set
of rules can serve many conversations; :class:`ctxc.agent.ContextManager` keeps the state for a loop.

A reminder is injected as ``<system-reminder id="ID">MESSAGE</system-reminder>``. The tag lets a later
run find the reminders already in a transcript (:meth:`ReminderState.from_messages`), so
``ctxc compact --reminders`` honours ``max_repeats`` across runs over the same log.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ctxc.errors import InputError, UsageError
from ctxc.model import Message, TextBlock, ToolUseBlock

Trigger = Literal["every_n_turns", "token_threshold", "tool_call", "keyword_in_response", "after_compaction"]
TRIGGERS: tuple[Trigger, ...] = (
    "every_n_turns",
    "token_threshold",
    "tool_call",
    "keyword_in_response",
    "after_compaction",
)
_RULE_KEYS = frozenset({"id", "message", "max_repeats", *TRIGGERS})
_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")
#: How a reminder appears in a conversation; the id makes earlier injections countable.
_TAG = re.compile(r'<system-reminder id="([A-Za-z0-9_.:-]+)">')


@dataclass(frozen=True, slots=True)
class ReminderRule:
    """One rule: exactly one trigger, the message to inject, and how often it may fire at most."""

    id: str
    message: str
    every_n_turns: int | None = None
    token_threshold: int | float | None = None
    tool_call: str | None = None
    keyword_in_response: str | None = None
    after_compaction: bool = False
    max_repeats: int | None = None

    def __post_init__(self) -> None:
        if not self.id or not _ID.match(self.id):
            raise UsageError(f"reminder id {self.id!r}: use letters, digits and _ . : - only")
        if not self.message.strip():
            raise UsageError(f"reminder {self.id!r} has an empty message")
        set_triggers = [t for t in TRIGGERS if _is_set(getattr(self, t))]
        if len(set_triggers) != 1:
            raise UsageError(
                f"reminder {self.id!r} needs exactly one trigger ({', '.join(TRIGGERS)}), "
                f"got {', '.join(set_triggers) or 'none'}"
            )
        if self.every_n_turns is not None and self.every_n_turns < 1:
            raise UsageError(f"reminder {self.id!r}: every_n_turns must be at least 1")
        threshold = self.token_threshold
        if threshold is not None and (
            isinstance(threshold, bool)
            or (isinstance(threshold, float) and not 0 < threshold <= 1)
            or (isinstance(threshold, int) and threshold < 1)
        ):
            raise UsageError(
                f"reminder {self.id!r}: token_threshold is a token count (an integer of at least 1) "
                "or a share of the window (a number between 0 and 1)"
            )
        if self.tool_call is not None and not self.tool_call.strip():
            raise UsageError(f"reminder {self.id!r}: tool_call names a tool")
        if self.keyword_in_response is not None and not self.keyword_in_response.strip():
            raise UsageError(f"reminder {self.id!r}: keyword_in_response is empty")
        if self.max_repeats is not None and self.max_repeats < 1:
            raise UsageError(f"reminder {self.id!r}: max_repeats must be at least 1")

    @property
    def trigger(self) -> Trigger:
        for t in TRIGGERS:
            if _is_set(getattr(self, t)):
                return t
        raise AssertionError("a rule always has one trigger")  # __post_init__ guarantees it

    def describe(self) -> str:
        """The trigger as the TOML wrote it, for tables: ``every_n_turns = 10``."""
        value = getattr(self, self.trigger)
        return f"{self.trigger} = {value!r}".replace("True", "true")


def _is_set(value: object) -> bool:
    # ``after_compaction = false`` is unset; a zero count is set (and then rejected as out of range).
    return value is not None and value is not False


@dataclass(frozen=True, slots=True)
class TurnState:
    """What the agent loop knows just before a model call.

    ``turn`` counts the model responses so far (0 before the first call). ``tool_calls`` and
    ``response`` are those of the last response; ``compacted`` says the context was compacted since
    then. ``window`` is needed only by share-of-window thresholds.
    """

    turn: int
    tokens: int
    window: int | None = None
    tool_calls: tuple[str, ...] = ()
    response: str = ""
    compacted: bool = False


@dataclass(frozen=True, slots=True)
class Reminder:
    """A reminder that fired: which rule, at which turn, why, and the text to inject."""

    rule: str
    message: str
    trigger: Trigger
    turn: int
    detail: str

    @property
    def text(self) -> str:
        return reminder_text(self.rule, self.message)


def reminder_text(rule_id: str, message: str) -> str:
    return f'<system-reminder id="{rule_id}">\n{message.strip()}\n</system-reminder>'


@dataclass(frozen=True, slots=True)
class ReminderState:
    """How often each rule has fired and at which turn it last did; which thresholds are crossed."""

    fired: Mapping[str, int] = field(default_factory=dict)
    last_turn: Mapping[str, int] = field(default_factory=dict)
    #: Threshold rules whose context was above the threshold at the last check (they fire on crossing).
    above: frozenset[str] = frozenset()

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> ReminderState:
        """The state a conversation's own history implies: the reminders already injected in it.

        A reminder counts at the turn it was injected (the responses before it); this is how a
        one-shot run (``ctxc compact --reminders``) honours ``max_repeats`` and ``every_n_turns``.
        """
        fired: dict[str, int] = {}
        last: dict[str, int] = {}
        for turn, m in _numbered(messages):
            if m.role != "user":
                continue
            for b in m.blocks:
                if isinstance(b, TextBlock):
                    for rule_id in _TAG.findall(b.text):
                        fired[rule_id] = fired.get(rule_id, 0) + 1
                        last[rule_id] = turn
        return cls(fired=fired, last_turn=last)


@dataclass(frozen=True, slots=True)
class ReminderRules:
    """An ordered set of rules (ids unique). Evaluation never mutates it: see :meth:`due`."""

    rules: tuple[ReminderRule, ...] = ()
    source: str = "-"

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for r in self.rules:
            if r.id in seen:
                raise UsageError(f"{self.source}: reminder id {r.id!r} is used twice")
            seen.add(r.id)

    def __len__(self) -> int:
        return len(self.rules)

    @classmethod
    def load(cls, path: str | Path) -> ReminderRules:
        """Rules from a TOML file of ``[[reminder]]`` tables; a bad file is a loud usage error."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError("no such reminder rules file", path=str(path)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read reminder rules: {exc}", path=str(path)) from None
        return cls.parse(text, source=str(path))

    @classmethod
    def parse(cls, text: str, *, source: str = "-") -> ReminderRules:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{source}: not valid TOML: {exc}") from None
        unknown = set(doc) - {"reminder"}
        if unknown:
            raise UsageError(f"{source}: unknown top-level keys {sorted(unknown)}; use [[reminder]] tables")
        tables = doc.get("reminder", [])
        if not isinstance(tables, list) or not tables:
            raise UsageError(f"{source}: no [[reminder]] tables")
        return cls.from_dicts(tables, source=source)

    @classmethod
    def from_dicts(cls, tables: Iterable[Mapping[str, Any]], *, source: str = "-") -> ReminderRules:
        rules: list[ReminderRule] = []
        for n, table in enumerate(tables, 1):
            if not isinstance(table, Mapping):
                raise UsageError(f"{source}: reminder {n} is not a table")
            extra = set(table) - _RULE_KEYS
            if extra:
                raise UsageError(
                    f"{source}: reminder {n} has unknown keys {sorted(extra)} "
                    f"(keys: {', '.join(sorted(_RULE_KEYS))})"
                )
            rule_id = table.get("id", f"reminder-{n}")
            message = table.get("message")
            if not isinstance(rule_id, str) or not isinstance(message, str):
                raise UsageError(f"{source}: reminder {n} needs a string id and message")
            try:
                rules.append(ReminderRule(id=rule_id, message=message, **_typed_triggers(table, rule_id)))
            except UsageError as exc:
                raise UsageError(f"{source}: {exc.message}") from None
        return cls(tuple(rules), source=source)

    def due(self, turn: TurnState, state: ReminderState) -> tuple[tuple[Reminder, ...], ReminderState]:
        """The reminders due at ``turn`` (in rule order) and the state after they fired."""
        fired = dict(state.fired)
        last = dict(state.last_turn)
        above = set(state.above)
        out: list[Reminder] = []
        for rule in self.rules:
            detail = _fires(rule, turn, state, above)
            if detail is None:
                continue
            if rule.max_repeats is not None and fired.get(rule.id, 0) >= rule.max_repeats:
                continue
            fired[rule.id] = fired.get(rule.id, 0) + 1
            last[rule.id] = turn.turn
            out.append(Reminder(rule.id, rule.message, rule.trigger, turn.turn, detail))
        return tuple(out), ReminderState(fired=fired, last_turn=last, above=frozenset(above))


def _typed_triggers(table: Mapping[str, Any], rule_id: str) -> dict[str, Any]:
    """The optional fields of a rule table, type-checked (TOML gives ints, floats, strings, bools)."""
    out: dict[str, Any] = {}
    expected: dict[str, tuple[type, ...]] = {
        "every_n_turns": (int,),
        "token_threshold": (int, float),
        "tool_call": (str,),
        "keyword_in_response": (str,),
        "after_compaction": (bool,),
        "max_repeats": (int,),
    }
    for key, types in expected.items():
        if key not in table:
            continue
        value = table[key]
        if isinstance(value, bool) and bool not in types:
            raise UsageError(f"reminder {rule_id!r}: {key} must be {types[0].__name__}, not a boolean")
        if not isinstance(value, types):
            raise UsageError(f"reminder {rule_id!r}: {key} must be {types[0].__name__}, got {value!r}")
        out[key] = value
    return out


def _fires(rule: ReminderRule, turn: TurnState, state: ReminderState, above: set[str]) -> str | None:
    """Why ``rule`` fires at ``turn`` (a short phrase), or None. Updates ``above`` for thresholds."""
    if rule.every_n_turns is not None:
        since = state.last_turn.get(rule.id, 0)
        if turn.turn >= since + rule.every_n_turns:
            origin = "it last fired" if rule.id in state.last_turn else "the start"
            return f"{turn.turn - since} turns since {origin}"
        return None
    if rule.token_threshold is not None:
        limit = _limit(rule.token_threshold, turn.window)
        if limit is None:
            return None
        if turn.tokens <= limit:
            above.discard(rule.id)
            return None
        crossed = rule.id not in above
        above.add(rule.id)
        return f"context {turn.tokens:,} > {limit:,} tokens" if crossed else None
    if rule.tool_call is not None:
        return f"{rule.tool_call} called" if rule.tool_call in turn.tool_calls else None
    if rule.keyword_in_response is not None:
        word = rule.keyword_in_response
        return f"{word!r} in response" if word.lower() in turn.response.lower() else None
    if rule.after_compaction:
        return "context compacted" if turn.compacted else None
    return None


def _limit(threshold: int | float, window: int | None) -> int | None:
    if isinstance(threshold, float):
        return int(threshold * window) if window else None
    return threshold


def last_response(messages: Sequence[Message]) -> tuple[tuple[str, ...], str]:
    """Tool names called and text said by the last assistant turn (consecutive assistant messages)."""
    end = len(messages)
    while end and messages[end - 1].role != "assistant":
        end -= 1
    start = end
    while start and messages[start - 1].role == "assistant":
        start -= 1
    names: list[str] = []
    texts: list[str] = []
    for m in messages[start:end]:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                names.append(b.name)
            elif isinstance(b, TextBlock) and b.text:
                texts.append(b.text)
    return tuple(names), "\n".join(texts)


def _numbered(messages: Iterable[Message]) -> Iterator[tuple[int, Message]]:
    """Each message with the number of model responses (runs of assistant messages) up to it."""
    turn = 0
    prev = ""
    for m in messages:
        if m.role == "assistant" and prev != "assistant":
            turn += 1
        prev = m.role
        yield turn, m


def count_turns(messages: Iterable[Message]) -> int:
    """Model responses in a conversation: runs of consecutive assistant messages."""
    return max((turn for turn, _ in _numbered(messages)), default=0)


def turn_state_at_end(
    messages: Sequence[Message],
    *,
    tokens: int,
    window: int | None = None,
    compacted: bool = False,
) -> TurnState:
    """The :class:`TurnState` at the end of a recorded conversation (what ``compact`` evaluates)."""
    calls, text = last_response(messages)
    return TurnState(
        turn=count_turns(messages),
        tokens=tokens,
        window=window,
        tool_calls=calls,
        response=text,
        compacted=compacted,
    )


def due_at_end(
    rules: ReminderRules,
    messages: Sequence[Message],
    *,
    tokens: int,
    window: int | None = None,
    compacted: bool = False,
) -> tuple[Reminder, ...]:
    """The reminders due at the end of a recorded conversation, given the reminders already in it.

    This is the one-shot evaluation ``ctxc compact --reminders`` runs: ``tokens`` is the context that
    called for compaction, ``compacted`` whether compaction changed the conversation.
    """
    state = ReminderState.from_messages(messages)
    turn = turn_state_at_end(messages, tokens=tokens, window=window, compacted=compacted)
    return rules.due(turn, state)[0]


def reminder_message(reminders: Sequence[Reminder], *, after: Message | None = None) -> Message:
    """One new user message carrying ``reminders``, placed after ``after`` (no records of its own:
    the format's writer encodes it). It takes ``after``'s index and line, as a summary takes the
    index of what it replaced, so reports place it where it was injected."""
    return Message(
        role="user",
        blocks=(TextBlock("\n\n".join(r.text for r in reminders)),),
        line=after.line if after is not None else 0,
        index=after.index if after is not None else 0,
        conversation=after.conversation if after is not None else 0,
        meta={"ctxc": "reminder", "rules": tuple(r.rule for r in reminders)},
    )


__all__ = [
    "TRIGGERS",
    "Reminder",
    "ReminderRule",
    "ReminderRules",
    "ReminderState",
    "TurnState",
    "count_turns",
    "due_at_end",
    "last_response",
    "reminder_message",
    "reminder_text",
    "turn_state_at_end",
]
