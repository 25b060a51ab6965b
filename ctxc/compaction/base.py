"""What every compaction strategy shares: the Protocol, its context, its result, the registry.

A strategy is a mechanism: given one conversation's messages and a :class:`CompactContext` (the token
target, what is pinned, a token ledger, the archive, the summarizer), it returns new messages and a
record of what it did. *Whether* to compact and how far to escalate is the adaptive strategy's
business (data: thresholds), not the mechanisms'.

Adding a strategy is one module that defines a class with ``name``, ``description``, ``Config``,
``uses_summarizer``, ``best_effort`` and ``compact`` and calls :func:`register`, plus one line in
:data:`ctxc.compaction.STRATEGY_MODULES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ctxc.errors import UsageError
from ctxc.model import Message

if TYPE_CHECKING:
    from ctxc.archive_store import ArchiveStore
    from ctxc.compaction.ledger import Ledger
    from ctxc.summarize import Summarizer


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a strategy did, in original message indexes (inclusive), with its token effect."""

    strategy: str
    kind: str  # drop | mask | shrink | offload | summarize | repair
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
        name = strategy.name
        cfg = self.configs.get(name)
        return cfg if cfg is not None else strategy.Config()

    def tokens(self, messages: Sequence[Message]) -> int:
        return self.ledger.total(messages)

    def under_target(self, messages: Sequence[Message]) -> bool:
        return self.ledger.total(messages) <= self.target


@runtime_checkable
class Strategy(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    #: The strategy's options: a frozen dataclass whose fields carry defaults and ``metadata`` with
    #: ``help`` and ``min``/``max``; validated by :func:`parse_config`.
    Config: ClassVar[type[Any]]
    #: Whether it may call the summarizer: a summarizer that calls out is then checked (its key, its
    #: model) before any work, and the log's own summary is the strategy's to fold in, not pinned.
    uses_summarizer: ClassVar[bool]
    #: Whether, without an explicit target, it decides itself how far to go (adaptive stops at the
    #: stage usage calls for): a conversation already under the default target is left alone, and
    #: ending above that target is not an error.
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
    try:
        return _STRATEGIES[name]()
    except KeyError:
        raise UsageError(f"unknown strategy {name!r} (known: {', '.join(sorted(_STRATEGIES))})") from None


def option(default: Any, help: str, *, min: float | None = None, max: float | None = None) -> Any:
    """A config field with its description and range, for ``ctxc strategies --options`` and validation."""
    return field(default=default, metadata={"help": help, "min": min, "max": max})


def parse_config(strategy: type[Strategy] | Strategy, values: Mapping[str, str]) -> Any:
    """Build a strategy's Config from ``name=value`` strings, loudly rejecting unknown or bad values."""
    cfg_cls = strategy.Config
    fields = {f.name: f for f in dataclasses.fields(cfg_cls)}
    kwargs: dict[str, Any] = {}
    for key, text in values.items():
        if key not in fields:
            raise UsageError(
                f"strategy {strategy.name!r} has no option {key!r} "
                f"(options: {', '.join(sorted(fields)) or 'none'})"
            )
        f = fields[key]
        default = f.default
        conv: Callable[[str], Any]
        if isinstance(default, bool):
            conv = _to_bool
        elif isinstance(default, int):
            conv = int
        elif isinstance(default, float):
            conv = float
        elif isinstance(default, tuple):
            conv = _to_tuple
        else:
            conv = str
        try:
            value = conv(text)
        except ValueError:
            raise UsageError(
                f"{strategy.name}.{key}: cannot read {text!r} as {type(default).__name__}"
            ) from None
        lo, hi = f.metadata.get("min"), f.metadata.get("max")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if lo is not None and value < lo:
                raise UsageError(f"{strategy.name}.{key} must be at least {lo}, got {value}")
            if hi is not None and value > hi:
                raise UsageError(f"{strategy.name}.{key} must be at most {hi}, got {value}")
        kwargs[key] = value
    return cfg_cls(**kwargs)


def _to_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _to_tuple(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())
