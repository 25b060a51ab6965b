"""A system prompt of prioritised sections within a token budget: optional sections are kept highest
priority first while they fit, required ones always (see docs/library.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxc.errors import InputError, OverTargetError, UsageError
from ctxc.profiles import MAX_TOKENS
from ctxc.reader import parse_toml, read_toml
from ctxc.tokens import checked, make_counter

if TYPE_CHECKING:
    from ctxc.tokens import Counter

#: Standard priorities (safety constraints are best made required), by the names TOML may use for them.
PRIORITIES: Mapping[str, int] = {
    "safety": 100,
    "role": 90,
    "task": 80,
    "tools": 70,
    "output_format": 60,
    "examples": 40,
    "background": 20,
}
SAFETY, ROLE, TASK, TOOLS, OUTPUT_FORMAT, EXAMPLES, BACKGROUND = PRIORITIES.values()

DEFAULT_SEPARATOR = "\n\n"
_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")
_SECTION_KEYS = frozenset({"id", "priority", "required", "content", "file"})


@dataclass(frozen=True, slots=True)
class Section:
    id: str
    content: str
    priority: int = 50
    required: bool = False

    def __post_init__(self) -> None:
        for key, kind in (("id", str), ("content", str), ("required", bool)):
            if not isinstance(getattr(self, key), kind):
                raise UsageError(f"section {key} must be a {kind.__name__}, got {getattr(self, key)!r:.80}")
        if not _ID.match(self.id):
            raise UsageError(f"section id {self.id!r}: use letters, digits and _ . : - only")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise UsageError(f"section {self.id!r}: priority must be an integer 0-100")
        if not 0 <= self.priority <= 100:
            raise UsageError(f"section {self.id!r}: priority must be between 0 and 100, got {self.priority}")


@dataclass(frozen=True, slots=True)
class SectionOutcome:
    """One section in a composition: its tokens, whether it was kept, and why not."""

    section: Section
    tokens: int
    kept: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Composition:
    """A composed prompt, its tokens, and every section in priority order (kept and dropped)."""

    prompt: str
    tokens: int
    budget: int | None
    sections: tuple[SectionOutcome, ...]
    base: bool = False

    @property
    def kept(self) -> tuple[SectionOutcome, ...]:
        return tuple(s for s in self.sections if s.kept)

    @property
    def dropped(self) -> tuple[SectionOutcome, ...]:
        return tuple(s for s in self.sections if not s.kept)


@dataclass(frozen=True, slots=True)
class PromptComposer:
    """Sections (ids unique) and an optional override. Immutable: ``add``/``remove`` return a new one."""

    sections: tuple[Section, ...] = ()
    base: str | None = None
    separator: str = DEFAULT_SEPARATOR

    def __post_init__(self) -> None:
        if strangers := [s for s in self.sections if not isinstance(s, Section)]:
            raise UsageError(f"a composer's sections are Section objects, got {strangers[0]!r:.80}")
        if not isinstance(self.base, str | None) or not isinstance(self.separator, str):
            raise UsageError(
                f"base must be a string or None and separator a string, got {self.base!r:.80}"
                f" and {self.separator!r:.80}"
            )
        ids = [s.id for s in self.sections]
        if twice := next((i for n, i in enumerate(ids) if i in ids[:n]), None):
            raise UsageError(f"section id {twice!r} is used twice")

    def add(self, section: Section) -> PromptComposer:
        return replace(self, sections=(*self.sections, section))

    def remove(self, section_id: str) -> PromptComposer:
        return replace(self, sections=tuple(s for s in self.sections if s.id != section_id))

    def with_base(self, base: str | None) -> PromptComposer:
        return replace(self, base=base)

    def ordered(self) -> tuple[Section, ...]:
        """Highest priority first (a stable sort: equal priorities keep their order)."""
        return tuple(sorted(self.sections, key=lambda s: -s.priority))

    def compose(
        self, budget: int | None = None, *, counter: Counter | None = None, fill: bool = False
    ) -> Composition:
        """The prompt within ``budget`` tokens (None: no limit); ``fill`` keeps lower ones that fit too."""
        if budget is not None and not 0 < budget <= MAX_TOKENS:
            raise UsageError(
                f"the prompt budget must be a positive number of tokens up to 2**53, not {budget}"
            )
        count = (checked(counter) or make_counter("o200k_base")).count
        ordered = self.ordered()
        pairs = list(zip(ordered, count([s.content for s in ordered]) if ordered else [], strict=True))
        if self.base is not None:
            base_tokens = count([self.base])[0]
            if budget is not None and base_tokens > budget:
                raise OverTargetError(
                    f"the override prompt is {base_tokens:,} tokens, over the budget of {budget:,}"
                )
            outcomes = tuple(SectionOutcome(s, n, False, "replaced by the override prompt") for s, n in pairs)
            return Composition(self.base, base_tokens, budget, outcomes, base=True)

        sep = count([self.separator])[0] if self.separator else 0
        required = [(s, n) for s, n in pairs if s.required]
        used = sum(n for _, n in required) + sep * max(len(required) - 1, 0)
        if budget is not None and used > budget:
            names = ", ".join(s.id for s, _ in required)
            raise OverTargetError(
                f"the required sections ({names}) alone are {used:,} tokens, {used - budget:,} over the "
                f"budget of {budget:,}; shorten them or raise the budget"
            )
        keep = {s.id for s, _ in required}
        stopped = False
        for s, n in pairs:
            if s.required:
                continue
            extra = n + (sep if keep else 0)
            if (budget is None or used + extra <= budget) and (fill or not stopped):
                keep.add(s.id)
                used += extra
            else:
                stopped = True
        # BPE merges across a separator can add a token: measure the prompt itself, drop more if needed.
        while True:
            prompt = self.separator.join(s.content for s in ordered if s.id in keep)
            total = count([prompt])[0] if prompt else 0
            if budget is None or total <= budget:
                break
            optional = [s for s in ordered if s.id in keep and not s.required]
            if not optional:
                raise OverTargetError(
                    f"the required sections are {total:,} tokens as one prompt, over the budget of {budget:,}"
                )
            keep.discard(optional[-1].id)
        outcomes = tuple(
            SectionOutcome(s, n, s.id in keep, "" if s.id in keep else "over budget") for s, n in pairs
        )
        return Composition(prompt, total, budget, outcomes)

    @classmethod
    def load(cls, path: str | Path) -> PromptComposer:
        """Sections from a TOML file; ``file = ...`` contents are read relative to it."""
        return cls.parse(read_toml(path, "prompt file"), source=str(path), root=Path(path).parent)

    @classmethod
    def parse(cls, text: str, *, source: str = "-", root: Path | None = None) -> PromptComposer:
        doc = parse_toml(text, source, {"section", "base", "separator"})
        base = doc.get("base")
        separator = doc.get("separator", DEFAULT_SEPARATOR)
        if base is not None and not isinstance(base, str):
            raise UsageError(f"{source}: base must be a string")
        if not isinstance(separator, str):
            raise UsageError(f"{source}: separator must be a string")
        tables = doc.get("section", [])
        if not isinstance(tables, list) or (not tables and base is None):
            raise UsageError(f"{source}: no [[section]] tables")
        try:
            sections = tuple(_section(t, n, root or Path.cwd()) for n, t in enumerate(tables, 1))
            return cls(sections, base=base, separator=separator)
        except (UsageError, InputError) as exc:  # the prompt file is what to fix: name it first
            raise type(exc)(f"{source}: {exc.message}") from None


def _section(table: Any, n: int, root: Path) -> Section:
    if not isinstance(table, dict):
        raise UsageError(f"section {n} is not a table")
    if extra := set(table) - _SECTION_KEYS:
        keys = ", ".join(sorted(_SECTION_KEYS))
        raise UsageError(f"section {n} has unknown keys {sorted(extra)} (keys: {keys})")
    sid = table.get("id")
    if not isinstance(sid, str):
        raise UsageError(f"section {n} needs a string id")
    if ("content" in table) == ("file" in table):
        raise UsageError(f"section {sid!r} needs exactly one of content and file")
    key = "file" if "file" in table else "content"
    if not isinstance(content := table[key], str):
        raise UsageError(f"section {sid!r}: {key} must be a string")
    if key == "file":
        path = root / content
        try:
            content = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"section {sid!r}: no such file {path}") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"section {sid!r}: {path} is not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            raise InputError(f"section {sid!r}: cannot read {path}: {exc.strerror or exc}") from None
    priority = table.get("priority", 50)
    if isinstance(priority, str):
        if priority.lower() not in PRIORITIES:
            raise UsageError(
                f"section {sid!r}: unknown priority name {priority!r} (names: {', '.join(PRIORITIES)})"
            )
        priority = PRIORITIES[priority.lower()]
    required = table.get("required", False)
    if not isinstance(required, bool):
        raise UsageError(f"section {sid!r}: required must be true or false")
    return Section(sid, content.strip("\n"), priority, required)


def compose(
    sections: Iterable[Section] | Sequence[Section],
    budget: int | None = None,
    *,
    base: str | None = None,
    counter: Counter | None = None,
    fill: bool = False,
) -> Composition:
    return PromptComposer(tuple(sections), base=base).compose(budget, counter=counter, fill=fill)
