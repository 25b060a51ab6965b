"""Pricing recorded usage: the shipped table, name matching, long-context rates, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxc.errors import InputError
from ctxc.model import Usage
from ctxc.pricing import load_prices, price_usage, saving_per_turn


def test_the_shipped_table_is_dated_and_prices_what_logs_name() -> None:
    table = load_prices()
    assert table.as_of
    for logged, name in [
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("anthropic/claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("gpt-5.1-codex", "gpt-5.1-codex"),
    ]:
        found = table.find(logged)
        assert found is not None
        assert found[0] == name
    # No prefix matching: a newer model is unpriced, not priced as an older one.
    assert table.find("claude-opus-4-99") is None
    assert table.find(None) is None


def test_each_kind_of_token_at_its_rate_per_model() -> None:
    table = load_prices()
    calls = [
        Usage(input=1_000_000, model="claude-opus-4-5-20251101"),
        Usage(output=1_000_000, model="claude-opus-4-5-20251101"),
        Usage(cache_write=1_000_000, cache_read=2_000_000, model="claude-opus-4-5"),
        Usage(input=10, output=10, model="some-local-model"),
        Usage(input=10),
    ]
    cost = price_usage(calls, table)
    assert cost.usd == pytest.approx(5 + 25 + 6.25 + 2 * 0.5)
    by_model = {m.model: m for m in cost.models}
    assert by_model["claude-opus-4-5-20251101"].calls == 2
    assert by_model["claude-opus-4-5-20251101"].usd == pytest.approx(30)
    assert cost.unpriced == ("some-local-model", "(model not recorded)")


def test_a_call_above_the_long_context_tier_is_priced_whole_at_its_rates() -> None:
    table = load_prices()
    short = price_usage([Usage(input=100_000, cache_read=100_000, model="claude-sonnet-4-5")], table)
    long = price_usage([Usage(input=100_000, cache_read=100_001, model="claude-sonnet-4-5")], table)
    assert short.usd == pytest.approx(0.1 * 3 + 0.1 * 0.3)
    assert long.usd == pytest.approx(0.1 * 6 + 0.100001 * 0.6)


def test_an_override_file_replaces_and_adds_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "prices.toml"
    mine.write_text(
        'as_of = "2027-01-01"\n'
        "[models.claude-opus-4-5]\ninput = 1\noutput = 2\ncache_write = 3\ncache_read = 4\n"
        "[models.local-llama]\ninput = 0\noutput = 0\ncache_write = 0\ncache_read = 0\n"
    )
    table = load_prices(mine)
    assert table.as_of == "2027-01-01"
    assert price_usage([Usage(input=1_000_000, model="claude-opus-4-5")], table).usd == pytest.approx(1)
    assert price_usage([Usage(input=5, model="local-llama")], table).unpriced == ()
    assert table.find("gpt-5") is not None  # the shipped models are still there
    monkeypatch.setenv("CTXC_PRICES", str(mine))
    assert load_prices().as_of == "2027-01-01"


@pytest.mark.parametrize(
    "text",
    [
        "not toml [",
        "[models.x]\ninput = 1\n",
        '[models.x]\ninput = "a"\noutput=1\ncache_write=1\ncache_read=1\n',
    ],
)
def test_a_bad_price_file_is_an_input_error_naming_it(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text(text)
    with pytest.raises(InputError, match=str(bad)):
        load_prices(bad)


def test_a_saving_is_worth_its_tokens_at_input_and_cache_read_prices() -> None:
    table = load_prices()
    assert saving_per_turn(100_000, "claude-opus-4-5-20251101", table) == pytest.approx((0.5, 0.05))
    assert saving_per_turn(100_000, "mystery", table) is None
