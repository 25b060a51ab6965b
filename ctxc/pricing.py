"""What the usage a log recorded cost, from a dated price table (``prices.toml``, overridable). Names
drop a provider prefix and a date or version suffix; an unknown model is unpriced, never guessed (no
prefix matching, which would price ``claude-opus-4-7`` as ``claude-opus-4``)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxc.errors import UsageError
from ctxc.model import Usage
from ctxc.reader import parse_toml, read_toml

SHIPPED = Path(__file__).with_name("prices.toml")
_PER_TOKEN = 1e-6  # the table is in dollars per million tokens


def _usd(dollars: float) -> float:
    """Dollars to the nano-dollar: below it a sum of float prices holds only binary noise
    (0.22113929999999998 for 0.2211393), which JSON would print."""
    return round(dollars, 9)


_SUFFIX = re.compile(r"(?:[-@]\d{8}|[-@]v\d+(?::\d+)?)$")


@dataclass(frozen=True)
class Rates:
    """Dollars per million tokens of each kind."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    #: Writes to the one-hour cache (Anthropic: twice the input price); the five-minute price if unset.
    cache_write_1h: float


@dataclass(frozen=True)
class Price:
    rates: Rates
    #: Rates of a call whose whole input is above ``long_above`` tokens (None: no such tier).
    long_rates: Rates | None = None
    long_above: int = 0

    def of(self, usage: Usage) -> float:
        """The dollars one call cost."""
        r = self.long_rates if self.long_rates is not None and usage.context > self.long_above else self.rates
        return _PER_TOKEN * (
            usage.input * r.input
            + usage.output * r.output
            + (usage.cache_write - usage.cache_write_1h) * r.cache_write
            + usage.cache_write_1h * r.cache_write_1h
            + usage.cache_read * r.cache_read
        )


@dataclass(frozen=True)
class PriceTable:
    as_of: str
    models: Mapping[str, Price]

    def find(self, model: str | None) -> tuple[str, Price] | None:
        """The table's name and price for ``model`` as a log names it, or None when unknown."""
        if not model:
            return None
        name = model.rsplit("/", 1)[-1].lower()
        for candidate in (name, _SUFFIX.sub("", name)):
            if candidate in self.models:
                return candidate, self.models[candidate]
        return None


@dataclass(frozen=True)
class ModelCost:
    """One model's recorded calls, their tokens, and what they cost (None when the model is unpriced)."""

    model: str
    calls: int
    input: int
    output: int
    cache_write: int
    cache_read: int
    usd: float | None


@dataclass(frozen=True)
class Cost:
    """What a log's recorded usage cost: the priced total, per model, and the models left unpriced."""

    usd: float
    as_of: str
    models: tuple[ModelCost, ...]

    @property
    def unpriced(self) -> tuple[str, ...]:
        return tuple(m.model for m in self.models if m.usd is None)


def _rates(doc: Mapping[str, Any], where: str) -> Rates:
    try:
        given, output, written, read = (
            float(doc[k]) for k in ("input", "output", "cache_write", "cache_read")
        )
        return Rates(given, output, written, read, float(doc.get("cache_write_1h", written)))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{where}: needs numbers input, output, cache_write and cache_read ({exc})"
        ) from None


def _read(file: str | os.PathLike[str]) -> tuple[str, dict[str, Price]]:
    """A price table file's date and models."""
    source = str(file)
    doc = parse_toml(read_toml(file, "price table"), source, {"as_of", "models"})
    models = doc.get("models", {})
    if not isinstance(models, dict):
        raise UsageError(f"{source}: [models] must be a table of models")
    out: dict[str, Price] = {}
    for name, entry in models.items():
        if not isinstance(entry, dict):
            raise UsageError(f"{source}: models.{name} must be a table")
        long = entry.get("long_context")
        try:
            above = int(long.get("above", 0)) if isinstance(long, dict) else 0
        except (TypeError, ValueError):
            raise UsageError(f"{source}: models.{name}.long_context.above must be a number") from None
        out[name.lower()] = Price(
            _rates(entry, f"{source}: models.{name}"),
            _rates(long, f"{source}: models.{name}.long_context") if isinstance(long, dict) else None,
            above,
        )
    return str(doc.get("as_of", "")), out


def load_prices(override: str | os.PathLike[str] | None = None) -> PriceTable:
    """The shipped table, with the models of the ``override`` file replacing or added."""
    as_of, models = _read(SHIPPED)
    if override:
        extra_as_of, extra_models = _read(override)
        models |= extra_models
        as_of = extra_as_of or as_of
    return PriceTable(as_of, models)


_cached_prices = functools.cache(load_prices)


def default_prices(override: str | None = None) -> PriceTable:
    """The shipped table with the ``override`` file (else ``$CTXC_PRICES``), read once per process."""
    return _cached_prices(override or os.environ.get("CTXC_PRICES") or None)


def price_usage(usage: Iterable[Usage], table: PriceTable) -> Cost:
    """The cost of recorded calls, per model (in order of first use)."""
    by_model: dict[str, list[Usage]] = {}
    for u in usage:
        by_model.setdefault(u.model or "(model not recorded)", []).append(u)
    models = [
        ModelCost(
            name,
            len(calls),
            sum(u.input for u in calls),
            sum(u.output for u in calls),
            sum(u.cache_write for u in calls),
            sum(u.cache_read for u in calls),
            _usd(sum(found[1].of(u) for u in calls)) if (found := table.find(calls[0].model)) else None,
        )
        for name, calls in by_model.items()
    ]
    return Cost(_usd(sum(m.usd for m in models if m.usd is not None)), table.as_of, tuple(models))


def saving_per_turn(tokens: int, model: str | None, table: PriceTable) -> tuple[float, float] | None:
    """What ``tokens`` fewer in the context save on every following call, at the model's input and
    cache-read prices (None when unpriced)."""
    found = table.find(model)
    if found is None:
        return None
    rates = found[1].rates
    return _usd(tokens * rates.input * _PER_TOKEN), _usd(tokens * rates.cache_read * _PER_TOKEN)
