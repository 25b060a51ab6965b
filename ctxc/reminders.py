"""Event reminders: rules (TOML ``[[reminder]]`` tables, one trigger each) restate key instructions
when something happens; each is tagged with its rule's id, so a later run can count them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from ctxc.errors import UsageError
from ctxc.model import Message, TextBlock, ToolUseBlock
from ctxc.reader import parse_toml, read_toml

Trigger = Literal["every_n_turns", "token_threshold", "tool_call", "keyword_in_response", "after_compaction"]
TRIGGERS: tuple[Trigger, ...] = get_args(Trigger)
#: The types a rule's optional fields may have.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "every_n_turns": (int,),
    "token_threshold": (int, float),
    "tool_call": (str,),
    "keyword_in_response": (str,),
    "after_compaction": (bool,),
    "max_repeats": (int,),
}
_RULE_KEYS = frozenset({"id", "message", *_FIELD_TYPES})
_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")
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
        for key in ("id", "message"):
            if not isinstance(getattr(self, key), str):
                raise UsageError(f"reminder {key} must be a string, got {getattr(self, key)!r}")
        if not self.id or not _ID.match(self.id):
            raise UsageError(f"reminder id {self.id!r}: use letters, digits and _ . : - only")
        if not self.message.strip():
            raise UsageError(f"reminder {self.id!r} has an empty message")
        for key, types in _FIELD_TYPES.items():
            value, name = getattr(self, key), types[0].__name__
            if isinstance(value, bool) and bool not in types:
                raise UsageError(f"reminder {self.id!r}: {key} must be {name}, not a boolean")
            if value is not None and not isinstance(value, types):
                raise UsageError(f"reminder {self.id!r}: {key} must be {name}, got {value!r}")
        set_triggers = [t for t in TRIGGERS if _is_set(getattr(self, t))]
        if len(set_triggers) != 1:
            raise UsageError(
                f"reminder {self.id!r} needs exactly one trigger ({', '.join(TRIGGERS)}), "
                f"got {', '.join(set_triggers) or 'none'}"
            )
        tool, word, t = self.tool_call, self.keyword_in_response, self.token_threshold
        bad_threshold = (isinstance(t, float) and not 0 < t <= 1) or (isinstance(t, int) and t < 1)
        problems = {
            "every_n_turns must be at least 1": self.every_n_turns is not None and self.every_n_turns < 1,
            "token_threshold is a token count (an integer of at least 1) or a share of the window "
            "(a number between 0 and 1)": bad_threshold,
            "tool_call names a tool": tool is not None and not tool.strip(),
            "keyword_in_response is empty": word is not None and not word.strip(),
            "max_repeats must be at least 1": self.max_repeats is not None and self.max_repeats < 1,
        }
        for problem, found in problems.items():
            if found:
                raise UsageError(f"reminder {self.id!r}: {problem}")

    @property
    def trigger(self) -> Trigger:
        return next(t for t in TRIGGERS if _is_set(getattr(self, t)))

    def describe(self) -> str:
        """The trigger as the TOML wrote it, for tables: ``every_n_turns = 10``."""
        return f"{self.trigger} = {getattr(self, self.trigger)!r}".replace("True", "true")


def _is_set(value: object) -> bool:
    # ``after_compaction = false`` is unset; a zero count is set (and then rejected as out of range).
    return value is not None and value is not False


@dataclass(frozen=True, slots=True)
class TurnState:
    """What the agent loop knows before a model call (``turn``: the responses so far)."""

    turn: int
    tokens: int
    window: int | None = None  # needed only by share-of-window thresholds
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
    above: frozenset[str] = frozenset()  # threshold rules above at the last check (they fire on crossing)

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> ReminderState:
        """The reminders already injected in a conversation, each at its turn (so ``max_repeats`` holds)."""
        fired: dict[str, int] = {}
        last: dict[str, int] = {}
        for turn, m in _numbered(messages):
            texts = [b.text for b in m.blocks if isinstance(b, TextBlock)] if m.role == "user" else []
            for rule_id in (rule_id for text in texts for rule_id in _TAG.findall(text)):
                fired[rule_id] = fired.get(rule_id, 0) + 1
                last[rule_id] = turn
        return cls(fired=fired, last_turn=last)


@dataclass(frozen=True, slots=True)
class ReminderRules:
    """An ordered set of rules (ids unique). Evaluation never mutates it: see :meth:`due`."""

    rules: tuple[ReminderRule, ...] = ()
    source: str = "-"

    def __post_init__(self) -> None:
        if strangers := [r for r in self.rules if not isinstance(r, ReminderRule)]:
            raise UsageError(f"reminders are ReminderRule objects or a TOML path, got {strangers[0]!r:.80}")
        ids = [r.id for r in self.rules]
        if twice := next((i for n, i in enumerate(ids) if i in ids[:n]), None):
            raise UsageError(f"{self.source}: reminder id {twice!r} is used twice")

    def __len__(self) -> int:
        return len(self.rules)

    @classmethod
    def load(cls, path: str | Path) -> ReminderRules:
        """Rules from a TOML file of ``[[reminder]]`` tables; a bad file is a loud usage error."""
        return cls.parse(read_toml(path, "reminder rules file"), source=str(path))

    @classmethod
    def parse(cls, text: str, *, source: str = "-") -> ReminderRules:
        doc = parse_toml(text, source, {"reminder"}, "; use [[reminder]] tables")
        tables = doc.get("reminder", [])
        if not isinstance(tables, list) or not tables:
            raise UsageError(f"{source}: no [[reminder]] tables")
        rules: list[ReminderRule] = []
        for n, table in enumerate(tables, 1):
            if not isinstance(table, Mapping):
                raise UsageError(f"{source}: reminder {n} is not a table")
            if extra := set(table) - _RULE_KEYS:
                keys = ", ".join(sorted(_RULE_KEYS))
                raise UsageError(f"{source}: reminder {n} has unknown keys {sorted(extra)} (keys: {keys})")
            rule_id = table.get("id", f"reminder-{n}")
            message = table.get("message")
            if not isinstance(rule_id, str) or not isinstance(message, str):
                raise UsageError(f"{source}: reminder {n} needs a string id and message")
            fields = {key: table[key] for key in _FIELD_TYPES if key in table}
            try:
                rules.append(ReminderRule(id=rule_id, message=message, **fields))
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
            if detail is None or (rule.max_repeats is not None and fired.get(rule.id, 0) >= rule.max_repeats):
                continue
            fired[rule.id] = fired.get(rule.id, 0) + 1
            last[rule.id] = turn.turn
            out.append(Reminder(rule.id, rule.message, rule.trigger, turn.turn, detail))
        return tuple(out), ReminderState(fired=fired, last_turn=last, above=frozenset(above))


def _fires(rule: ReminderRule, turn: TurnState, state: ReminderState, above: set[str]) -> str | None:
    """Why ``rule`` fires at ``turn`` (a short phrase), or None. Updates ``above`` for thresholds."""
    if rule.every_n_turns is not None:
        since = state.last_turn.get(rule.id, 0)
        if turn.turn < since + rule.every_n_turns:
            return None
        origin = "it last fired" if rule.id in state.last_turn else "the start"
        return f"{turn.turn - since} turns since {origin}"
    if (t := rule.token_threshold) is not None:
        limit = t if not isinstance(t, float) else int(t * turn.window) if turn.window else None
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
    return "context compacted" if rule.after_compaction and turn.compacted else None


def last_response(messages: Sequence[Message]) -> tuple[tuple[str, ...], str]:
    """Tool names called and text said by the last assistant turn (consecutive assistant messages)."""
    end = len(messages)
    while end and messages[end - 1].role != "assistant":
        end -= 1
    start = end
    while start and messages[start - 1].role == "assistant":
        start -= 1
    blocks = [b for m in messages[start:end] for b in m.blocks]
    names = tuple(b.name for b in blocks if isinstance(b, ToolUseBlock))
    return names, "\n".join(b.text for b in blocks if isinstance(b, TextBlock) and b.text)


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


def due_at_end(
    rules: ReminderRules,
    messages: Sequence[Message],
    *,
    tokens: int,
    window: int | None = None,
    compacted: bool = False,
) -> tuple[Reminder, ...]:
    """The reminders due at the end of a recorded conversation, given those already in it."""
    calls, text = last_response(messages)
    turn = TurnState(count_turns(messages), tokens, window, calls, text, compacted)
    return rules.due(turn, ReminderState.from_messages(messages))[0]


def reminder_message(reminders: Sequence[Reminder], *, after: Message | None = None) -> Message:
    """One new user message carrying ``reminders``, placed (and reported) where ``after`` is."""
    return Message(
        role="user",
        blocks=(TextBlock("\n\n".join(r.text for r in reminders)),),
        line=after.line if after else 0,
        index=after.index if after else 0,
        conversation=after.conversation if after else 0,
        meta={"ctxc": "reminder", "rules": tuple(r.rule for r in reminders)},
    )
