"""selective: drop ephemeral units, then normal ones, oldest first; critical, pinned and tail units stay.
A message's importance is its ``importance`` field, else the first matching rule of a TOML rules file
(the shipped ``importance.toml``; see docs/strategies.md); a unit takes its messages' highest."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar

from ctxc.compaction.base import Action, CompactContext, StrategyResult, option, protected_units, register
from ctxc.compaction.fifo import CARRY_HELP, PLACEHOLDER_HELP, Carry, drop_units
from ctxc.compaction.own_summary import fit_own_summary
from ctxc.compaction.units import units
from ctxc.errors import UsageError
from ctxc.model import BLOCK_KINDS, ROLES, ImageBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from ctxc.reader import parse_toml, read_toml
from ctxc.tokens.cost import image_tokens

#: Importance levels, least important first (the order units are dropped in).
LEVELS: tuple[str, ...] = ("ephemeral", "normal", "critical")
_RANK = {level: n for n, level in enumerate(LEVELS)}
SHIPPED_RULES = "importance.toml"
#: What a rule may test, besides its ``name`` and the ``importance`` it assigns.
_CONDITIONS = ("role", "kind", "tool", "regex", "min_tokens", "max_tokens", "older_than", "follows", "meta")
_RULE_KEYS = frozenset(("name", "importance", *_CONDITIONS))
_TOP_KEYS = frozenset({"default", "rule"})
_KINDS = frozenset((*BLOCK_KINDS, "empty"))


@dataclass(frozen=True, slots=True)
class _Where:
    """What a rule may ask beyond the message itself."""

    age: int  # how many messages come after it
    tools: tuple[str, ...]  # lower-cased names of the tools it calls or answers
    previous: str  # the role before it ("" for none)
    tokens: Callable[[], int]


@dataclass(frozen=True, slots=True)
class Rule:
    importance: str
    name: str = ""
    roles: frozenset[str] | None = None
    kinds: frozenset[str] | None = None
    #: Shell-style tool name patterns, lower-cased and compiled into one regex (names are lower-cased).
    tools: re.Pattern[str] | None = None
    regex: re.Pattern[str] | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    older_than: int | None = None
    follows: frozenset[str] | None = None
    meta: tuple[tuple[str, Any], ...] = ()

    def matches(self, m: Message, where: _Where) -> bool:
        """Whether ``m`` matches. Cheap conditions first; the size and the regex are looked at last."""
        if self.roles is not None and m.role not in self.roles:
            return False
        if self.follows is not None and where.previous not in self.follows:
            return False
        if self.kinds is not None and m.kind not in self.kinds:
            return False
        if self.older_than is not None and where.age <= self.older_than:
            return False
        if self.meta and any(not _same(m.meta.get(key), value) for key, value in self.meta):
            return False
        if self.tools is not None and not (where.tools and all(self.tools.match(t) for t in where.tools)):
            return False
        if self.min_tokens is not None or self.max_tokens is not None:
            n = where.tokens()
            if n < (self.min_tokens or 0) or (self.max_tokens is not None and n > self.max_tokens):
                return False
        return self.regex is None or self.regex.search(m.text) is not None


def _same(a: Any, b: Any) -> bool:
    # TOML true must not match a meta value of 1 (Python says True == 1).
    return isinstance(a, bool) == isinstance(b, bool) and a == b


@dataclass(frozen=True, slots=True)
class Rules:
    rules: tuple[Rule, ...]
    default: str = "normal"


def load_rules(path: str = "") -> Rules:
    """The rules in ``path``, or the shipped defaults when it is empty. Problems are UsageErrors."""
    if not path:
        text = resources.files("ctxc.compaction").joinpath(SHIPPED_RULES).read_text(encoding="utf-8")
        return parse_rules(text, SHIPPED_RULES)
    return parse_rules(read_toml(path, "importance rules file"), path)


class _Bad(Exception):
    """A problem in a rules document; :func:`parse_rules` makes it a UsageError naming the document."""


@functools.lru_cache(maxsize=16)
def parse_rules(text: str, source: str = "<rules>") -> Rules:
    """Parse and validate a rules document; every problem names ``source`` and the rule."""
    doc = parse_toml(text, source, _TOP_KEYS, f" (known: {', '.join(sorted(_TOP_KEYS))})")
    try:
        default = _level(doc.get("default", "normal"), "default")
        tables = doc.get("rule", [])
        if not isinstance(tables, list):
            raise _Bad("'rule' must be an array of tables ([[rule]])")
        return Rules(tuple(_rule(t, n) for n, t in enumerate(tables, 1)), default)
    except _Bad as exc:
        raise UsageError(f"importance rules: {exc}", path=source) from None


def _level(value: Any, where: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in _RANK:
        raise _Bad(f"{where} must be one of {', '.join(LEVELS)}, got {value!r}")
    return value.strip().lower()


def _names(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
        raise _Bad(f"{where} must be a non-empty string or a list of non-empty strings")
    return tuple(items)


def _choices(table: Mapping[str, Any], key: str, label: str, known: Sequence[str]) -> frozenset[str] | None:
    """The lower-cased values under ``key`` (roles, or kinds), each one of ``known``."""
    if key not in table:
        return None
    values = frozenset(r.lower() for r in _names(table[key], f"{label}: {key}"))
    bad = sorted(values - set(known))
    if bad:
        where, noun = (label, "kind") if key == "kind" else (f"{label}: {key}", "role")
        raise _Bad(f"{where}: unknown {noun} {bad[0]!r} ({noun}s: {', '.join(known)})")
    return values


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Bad(f"{where} must be a whole number of at least 0, got {value!r}")
    return value


def _rule(table: Any, n: int) -> Rule:
    if not isinstance(table, dict):
        raise _Bad(f"rule {n} must be a table")
    label = f"rule {n}" + (f" ({table['name']!r})" if isinstance(table.get("name"), str) else "")
    unknown = sorted(set(table) - _RULE_KEYS)
    if unknown:
        raise _Bad(f"{label}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_RULE_KEYS))})")
    if "importance" not in table:
        raise _Bad(f"{label}: missing 'importance'")
    name = table.get("name", "")
    if not isinstance(name, str):
        raise _Bad(f"{label}: name must be a string")
    roles, follows = (_choices(table, key, label, ROLES) for key in ("role", "follows"))
    kinds = _choices(table, "kind", label, sorted(_KINDS))
    tools = None
    if "tool" in table:
        patterns = _names(table["tool"], f"{label}: tool")
        tools = re.compile("|".join(f"(?:{fnmatch.translate(p.lower())})" for p in patterns))
    regex = table.get("regex")
    if regex is not None:
        if not isinstance(regex, str):
            raise _Bad(f"{label}: regex must be a string")
        try:
            regex = re.compile(regex)
        except re.error as exc:
            raise _Bad(f"{label}: bad regex {table['regex']!r}: {exc}") from None
    meta = table.get("meta", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str | int | float | bool) for v in meta.values()):
        raise _Bad(f"{label}: meta must be a table of plain values, e.g. meta = {{ is_meta = true }}")
    sizes = {
        k: _count(table[k], f"{label}: {k}") for k in ("min_tokens", "max_tokens", "older_than") if k in table
    }
    if "min_tokens" in sizes and "max_tokens" in sizes and sizes["min_tokens"] > sizes["max_tokens"]:
        raise _Bad(f"{label}: min_tokens is above max_tokens")
    importance = _level(table["importance"], f"{label}: importance")
    meta_items = tuple(sorted(meta.items()))
    return Rule(importance, name, roles, kinds, tools, regex, follows=follows, meta=meta_items, **sizes)


def classify(messages: Sequence[Message], rules: Rules, tokens: Callable[[Message], int]) -> list[str]:
    """Each message's importance: its own recorded ``importance`` when valid, else the rules'."""
    call_names = {b.id: b.name for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    n = len(messages)
    out: list[str] = []
    for pos, m in enumerate(messages):
        own = m.importance.strip().lower() if isinstance(m.importance, str) else ""
        if own in _RANK:
            out.append(own)
            continue
        where = _Where(
            age=n - 1 - pos,
            tools=_tool_names(m, call_names),
            previous=messages[pos - 1].role if pos else "",
            tokens=functools.partial(tokens, m),
        )
        out.append(next((r.importance for r in rules.rules if r.matches(m, where)), rules.default))
    return out


def _tool_names(m: Message, call_names: Mapping[str, str]) -> tuple[str, ...]:
    """Lower-cased names of the tools ``m`` calls or answers (a result's name comes from its call)."""
    return tuple(
        (b.name if isinstance(b, ToolUseBlock) else b.name or call_names.get(b.tool_use_id, "")).lower()
        for b in m.blocks
        if isinstance(b, ToolUseBlock | ToolResultBlock)
    )


@dataclass(frozen=True, slots=True)
class SelectiveConfig:
    rules: str = option("", "TOML file of importance rules (empty: the shipped importance.toml)")
    placeholder: bool = option(True, PLACEHOLDER_HELP)
    carry: int = option(8, CARRY_HELP, min=0, max=1000)
    keep_quotes: bool = option(
        False, "never give up quoted instructions and decisions to meet the target (report it over instead)"
    )

    def __post_init__(self) -> None:
        load_rules(self.rules)  # a bad rules file is a usage error up front, not halfway through a run


@register
class Selective:
    name: ClassVar[str] = "selective"
    uses_summarizer: ClassVar[bool] = False
    best_effort: ClassVar[bool] = False
    description: ClassVar[str] = (
        "Drop ephemeral, then normal messages (importance from the log or TOML rules), oldest first"
    )
    Config: ClassVar[type[SelectiveConfig]] = SelectiveConfig

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        cfg: SelectiveConfig = ctx.config(self)
        rules = load_rules(cfg.rules)
        carry = Carry(cfg.carry, keep=cfg.keep_quotes)
        critical: list[int] = []  # positions of the critical messages that may not be dropped

        def drop(msgs: Sequence[Message]) -> StrategyResult:
            levels = classify(msgs, rules, ctx.ledger.tokens)
            parts = units(msgs)
            keep = protected_units(msgs, parts, ctx)
            unit_level = [max(levels[p.start : p.stop], key=_RANK.__getitem__) for p in parts]
            critical[:] = [
                pos
                for u, part in enumerate(parts)
                if u not in keep and unit_level[u] == "critical"
                for pos in range(part.start, part.stop)
            ]
            offered = [
                (u, level) for u, level in enumerate(unit_level) if u not in keep and level != "critical"
            ]
            order = sorted(offered, key=lambda item: _RANK[item[1]])  # ephemeral first, each oldest first
            return drop_units(
                msgs, ctx, parts, order, strategy=self.name, placeholders=cfg.placeholder, carry=carry
            )

        result = drop(messages)
        if ctx.under_target(result.messages):
            return result
        # Critical units stay, but their images are not words: shed as few as the target needs first.
        base, shed_actions = shed_images(messages, critical, ctx.tokens(result.messages) - ctx.target, ctx)
        best = drop(base) if shed_actions else result
        if shed_actions and ctx.under_target(best.messages):
            return StrategyResult(best.messages, (*shed_actions, *best.actions))
        # Then what is pinned is over the target: the log's own summary gives up detail, not the run.
        fitted = fit_own_summary(base, ctx, best, drop, self.name)
        if fitted is best:
            return result  # still over: the images stay too
        return StrategyResult(fitted.messages, (*shed_actions, *fitted.actions))


def image_note(block: ImageBlock, index: int, ctx: CompactContext) -> str:
    """What an image shed from a user message becomes: that it was there, and where the original is."""
    size = f"{image_tokens(block):,} tokens"
    if block.width and block.height:
        size = f"{block.width}x{block.height}, {size}"
    return f"[ctxc: image removed to fit the context ({size}); original in {ctx.cite(index)}]"


def shed_images(
    messages: Sequence[Message], positions: Sequence[int], excess: int, ctx: CompactContext
) -> tuple[tuple[Message, ...], tuple[Action, ...]]:
    """``messages`` with the images of the user messages at ``positions`` (oldest first) replaced by a
    note, until that saves ``excess`` tokens (or all of them), and what that did."""
    out = list(messages)
    actions: list[Action] = []
    saved = 0
    for pos in positions:
        m = out[pos]
        if m.role != "user" or not any(isinstance(b, ImageBlock) for b in m.blocks):
            continue
        blocks = [
            TextBlock(image_note(b, m.index, ctx)) if isinstance(b, ImageBlock) else b for b in m.blocks
        ]
        n = sum(isinstance(b, ImageBlock) for b in m.blocks)
        note = f"{n} image(s) of a critical user message; its words kept"
        action = ctx.shrink(out, pos, blocks, "selective", "shrink", note)
        if action is None:
            continue
        actions.append(action)
        saved += action.saved
        if saved >= excess:
            break
    return tuple(out), tuple(actions)
