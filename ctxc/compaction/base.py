"""What every compaction strategy shares: the Protocol, its context, its result, the registry. A
strategy is a mechanism; whether to compact, and how far, is the adaptive strategy's business."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ctxc.archive_store import citation
from ctxc.errors import UsageError
from ctxc.model import Block, Message, ToolUseBlock

if TYPE_CHECKING:
    from ctxc.archive_store import ArchiveStore
    from ctxc.compaction.ledger import Ledger
    from ctxc.compaction.units import Unit
    from ctxc.summarize import Summarizer

#: How every note, placeholder and pointer ctxc writes into a message begins.
CTXC_MARK = "[ctxc"
#: A block's place: (position in the message list, position in the message's blocks).
Slot = tuple[int, int]
#: A message's new blocks: (its position in the list, the blocks, a note saying why).
Change = tuple[int, Sequence[Block], str]


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a strategy did, in original message indexes (inclusive), with its token effect."""

    strategy: str
    kind: str  # drop | mask | shrink | offload | summarize | keep | repair
    first: int
    last: int
    tokens_before: int
    tokens_after: int
    note: str = ""

    @property
    def saved(self) -> int:
        return self.tokens_before - self.tokens_after


@dataclass(frozen=True, slots=True)
class StrategyResult:
    messages: tuple[Message, ...]
    actions: tuple[Action, ...] = ()


@dataclass(frozen=True, slots=True)
class CompactContext:
    """Everything a strategy may consult. ``pinned`` holds indexes of messages that must survive."""

    target: int
    window: int
    ledger: Ledger
    summarizer: Summarizer
    archive: ArchiveStore | None = None
    archive_id: str = ""
    pinned: frozenset[int] = frozenset()
    keep_last: int = 4
    #: Per-strategy configs by strategy name (already validated).
    configs: Mapping[str, Any] = field(default_factory=dict)
    #: Whether an explicit target was given: the adaptive pipeline then escalates as far as needed.
    explicit_target: bool = False
    instructions: str | None = None

    def config(self, strategy: type[Strategy] | Strategy) -> Any:
        cfg = self.configs.get(strategy.name)
        return cfg if cfg is not None else strategy.Config()

    def tokens(self, messages: Sequence[Message]) -> int:
        return self.ledger.total(messages)

    def under_target(self, messages: Sequence[Message]) -> bool:
        return self.ledger.total(messages) <= self.target

    def editable(self, messages: Sequence[Message], stop: int | None = None) -> list[int]:
        """Positions (below ``stop``) of the messages a strategy may rewrite: not pinned, and not among
        the last ``keep_last`` (kept verbatim)."""
        end = len(messages) - self.keep_last if self.keep_last > 0 else len(messages)
        end = end if stop is None else min(stop, end)
        return [pos for pos in range(max(0, end)) if messages[pos].index not in self.pinned]

    def cite(self, first: int, last: int | None = None) -> str:
        return citation(self.archive_id, first, last)

    def shrink(
        self, msgs: list[Message], pos: int, blocks: Sequence[Block], strategy: str, kind: str, note: str
    ) -> Action | None:
        """Give ``msgs[pos]`` these blocks if that makes it smaller, and say so; else None."""
        done = self.shrink_all(msgs, [(pos, blocks, note)], strategy, kind)
        return done[0] if done else None

    def shrink_all(
        self, msgs: list[Message], changes: Sequence[Change], strategy: str, kind: str
    ) -> list[Action]:
        """:meth:`shrink` at distinct positions, the new messages counted in one batch."""
        news = [(pos, replace(msgs[pos], blocks=tuple(blocks)), note) for pos, blocks, note in changes]
        self.ledger.count_uncounted([new for _, new, _ in news])
        actions: list[Action] = []
        for pos, new, note in news:
            old = msgs[pos]
            before, after = self.ledger.tokens(old), self.ledger.tokens(new)
            if after < before:
                msgs[pos] = new
                actions.append(Action(strategy, kind, old.index, old.index, before, after, note))
        return actions


def tool_calls(messages: Sequence[Message]) -> dict[str, ToolUseBlock]:
    """Every tool call of ``messages`` by its id."""
    return {b.id: b for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)}


def protected_units(
    messages: Sequence[Message], parts: Sequence[Unit], ctx: CompactContext, keep_last: int | None = None
) -> set[int]:
    """Positions (into ``parts``) of the units holding a pinned message or one of the last ``keep_last``
    (default ``ctx.keep_last``; at least one) messages: no strategy drops or summarizes them."""
    tail_start = len(messages) - max(ctx.keep_last if keep_last is None else keep_last, 1)
    return {
        u
        for u, part in enumerate(parts)
        if part.stop > tail_start or any(m.index in ctx.pinned for m in part.messages(messages))
    }


def with_block(message: Message, at: int, block: Block) -> tuple[Block, ...]:
    """``message``'s blocks with the one at ``at`` replaced."""
    return (*message.blocks[:at], block, *message.blocks[at + 1 :])


@runtime_checkable
class Strategy(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    #: A frozen dataclass of options whose fields are made by :func:`option`.
    Config: ClassVar[type[Any]]
    #: It may call the summarizer (checked before any work), and folds in the log's own summary.
    uses_summarizer: ClassVar[bool]
    #: Without an explicit target it decides how far to go (ending above the default target is no error,
    #: above the window is).
    best_effort: ClassVar[bool]

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult: ...


_STRATEGIES: dict[str, type[Strategy]] = {}
#: What a strategy class must declare: a missing fact fails at registration, never defaults silently.
_REQUIRED = ("name", "description", "Config", "uses_summarizer", "best_effort", "compact")


def register(cls: type[Any]) -> type[Any]:
    """Class decorator: make a strategy available by its ``name``."""
    missing = [attr for attr in _REQUIRED if not hasattr(cls, attr)]
    if missing:
        raise TypeError(f"strategy class {cls.__name__} does not declare {', '.join(missing)}")
    if cls.name in _STRATEGIES:
        raise ValueError(f"strategy {cls.name!r} registered twice")
    _STRATEGIES[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove a strategy (a test's or a plugin's); unknown names are an error."""
    del _STRATEGIES[name]


def strategies() -> dict[str, type[Strategy]]:
    return dict(_STRATEGIES)


def get_strategy(name: str) -> Strategy:
    found = _STRATEGIES.get(name) if isinstance(name, str) else None  # a list would be unhashable
    if found is None:
        raise UsageError(f"unknown strategy {name!r} (known: {', '.join(sorted(_STRATEGIES))})")
    return found()


def option(default: Any, help: str, *, min: float | None = None, max: float | None = None) -> Any:
    """A config field with its description and range, for ``ctxc strategies --options`` and validation."""
    return field(default=default, metadata={"help": help, "min": min, "max": max})


def parse_config(strategy: type[Strategy] | Strategy, values: Mapping[str, str]) -> Any:
    """Build a strategy's Config from ``name=value`` strings, loudly rejecting unknown or bad values."""
    fields = {f.name: f for f in dataclasses.fields(strategy.Config)}
    kwargs: dict[str, Any] = {}
    for key, given in values.items():
        if key not in fields:
            raise UsageError(
                f"strategy {strategy.name!r} has no option {key!r} "
                f"(options: {', '.join(sorted(fields)) or 'none'})"
            )
        f = fields[key]
        try:
            value = _CONVERTERS.get(type(f.default), str)(_as_text(given))
        except ValueError:
            raise UsageError(
                f"{strategy.name}.{key}: cannot read {given!r} as {type(f.default).__name__}"
            ) from None
        lo, hi = f.metadata.get("min"), f.metadata.get("max")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if lo is not None and value < lo:
                raise UsageError(f"{strategy.name}.{key} must be at least {lo}, got {value}")
            if hi is not None and value > hi:
                raise UsageError(f"{strategy.name}.{key} must be at most {hi}, got {value}")
        kwargs[key] = value
    return strategy.Config(**kwargs)


def _as_text(value: object) -> str:
    """A setting as ``--set`` gives it; a library caller may give its own value (3, False, ["a", "b"])."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    if isinstance(value, int | float):
        return str(value)
    raise ValueError(value)


def _to_bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(text)
    return low in ("1", "true", "yes", "on")


def _to_tuple(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


_CONVERTERS: dict[type, Callable[[str], Any]] = {bool: _to_bool, int: int, float: float, tuple: _to_tuple}
