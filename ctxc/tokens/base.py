"""The tokenizer names and counting protocols: a :class:`Tokenizer` is one encoding, a :class:`Counter`
what analysis, compaction and agent loops count with. Modules of the package import these from here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, overload, runtime_checkable

from ctxc.errors import UsageError

DEFAULT_TOKENIZER = "o200k_base"
TOKENIZERS: tuple[str, ...] = ("o200k_base", "cl100k_base", "approx", "anthropic")
#: The Claude model ``anthropic`` counts for when no Claude ``--model`` is given.
DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"
#: The ``--tokenizer`` name that reads the usage a log recorded instead of counting (ctxc.usage_scan).
USAGE_TOKENIZER = "usage"


class Tokenizer(Protocol):
    """Counts tokens of plain text. Special-token text such as ``<|endoftext|>`` counts as text."""

    name: str

    def count(self, text: str) -> int: ...

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """Counts of ``texts`` in order; may use threads (tiktoken releases the GIL)."""
        ...


@runtime_checkable
class StartingTokenizer(Tokenizer, Protocol):
    """A :class:`Tokenizer` that can start counting and return at once (tiktoken with a pool of worker
    processes); the cached counter uses it so that its callers parse on while it counts."""

    def start_count(self, texts: Sequence[str]) -> Callable[[], list[int]]:
        """Start counting ``texts``; the returned function waits for the counts."""
        ...


class Counter(Protocol):
    """Counts many texts at once: the one interface everything above ``tokens/`` counts through."""

    name: str

    def count(self, texts: Sequence[str]) -> list[int]: ...


@runtime_checkable
class StartingCounter(Counter, Protocol):
    """A :class:`Counter` that can also start counting and return at once, so the caller parses the
    next batch while this one is counted (:func:`ctxc.tokens.cost.start_parts` takes both)."""

    def start(self, texts: Sequence[str]) -> Callable[[], list[int]]:
        """Start counting ``texts``; the returned function waits for the counts."""
        ...


class CheckedCounter:
    """A caller's :class:`Counter` whose answers are checked: a count missing, negative or not an int
    would silently misplace every cut after it."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.name = str(getattr(counter, "name", "token_counter"))

    def count(self, texts: Sequence[str]) -> list[int]:
        counts = self.counter.count(texts)
        if (
            not isinstance(counts, list | tuple)
            or len(counts) != len(texts)
            or not all(type(n) is int and n >= 0 for n in counts)
        ):
            got = f"{len(counts)} values" if isinstance(counts, list | tuple) else repr(counts)[:60]
            raise UsageError(
                f"the token counter {self.name!r} must return one int >= 0 per text; "
                f"got {got} for {len(texts)} texts"
            )
        return list(counts)


@overload
def checked(counter: None) -> None: ...
@overload
def checked(counter: Counter) -> Counter: ...
def checked(counter: Counter | None) -> Counter | None:
    """``counter``, checked unless it is None or one of ctxc's own (:func:`ctxc.tokens.make_counter`'s)."""
    if counter is None or type(counter).__module__.startswith("ctxc."):
        return counter
    if not callable(getattr(counter, "count", None)):
        raise UsageError(
            "token_counter must be a tokenizer name or an object with count(texts) -> list[int],"
            f" got {counter!r}"
        )
    return CheckedCounter(counter)


class RecordedUsageOnly:
    """What ``make_counter("usage")`` returns: it routes :func:`ctxc.analysis.analyze` to the recorded
    usage and counts nothing, so a command that needs text counted (``--forecast``, ``compact``) fails
    with a clear message instead of silently counting with another tokenizer."""

    name = USAGE_TOKENIZER

    def count(self, texts: Sequence[str]) -> list[int]:
        raise UsageError(
            "{tokenizer} usage only reads the usage a log recorded and cannot count text; "
            "use o200k_base (the default), cl100k_base, approx or anthropic for this",
            options=("tokenizer",),
        )
