"""Pricing recorded usage: the shipped table, name matching, long-context rates, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxc.errors import InputError, UsageError
from ctxc.model import Usage
from ctxc.pricing import default_prices, load_prices, price_usage, saving_per_turn


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
    assert default_prices().as_of == "2027-01-01"


@pytest.mark.parametrize(
    "text",
    [
        "not toml [",
        "[models.x]\ninput = 1\n",
        '[models.x]\ninput = "a"\noutput=1\ncache_write=1\ncache_read=1\n',
        "[model.x]\ninput = 1\n",  # a typo of [models], which would otherwise price nothing
        "[models.x]\ninput=1\noutput=1\ncache_write=1\ncache_read=1\nlong_context = { above = 'lots' }\n",
    ],
)
def test_a_bad_price_file_is_a_usage_error_naming_it(tmp_path: Path, text: str) -> None:
    # As every option's TOML file: what is in it is a bad value (2), a file that cannot be read input (3).
    bad = tmp_path / "p.toml"
    bad.write_text(text)
    with pytest.raises(UsageError, match=str(bad)):
        load_prices(bad)
    with pytest.raises(InputError, match="no such price table"):
        load_prices(tmp_path / "none.toml")


def test_a_saving_is_worth_its_tokens_at_input_and_cache_read_prices() -> None:
    table = load_prices()
    assert saving_per_turn(100_000, "claude-opus-4-5-20251101", table) == pytest.approx((0.5, 0.05))
    assert saving_per_turn(100_000, "mystery", table) is None


def test_analyze_prices_the_recorded_usage_and_takes_a_price_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from conftest import SAMPLES, run

    code, out, _ = run(capsys, "analyze", str(SAMPLES / "claude-code.jsonl"), "-f", "json")
    assert code == 0
    usage = json.loads(out)["files"][0]["recorded_usage"]
    from ctxc.formats import load

    rates = load_prices().models["claude-sonnet-4-5"].rates
    hour = sum(u.cache_write_1h for u in load(str(SAMPLES / "claude-code.jsonl")).usage)
    expected = 1e-6 * (
        usage["input"] * rates.input
        + usage["output"] * rates.output
        + (usage["cache_write"] - hour) * rates.cache_write
        + hour * rates.cache_write_1h
        + usage["cache_read"] * rates.cache_read
    )
    assert usage["cost"]["usd"] == pytest.approx(expected)
    # To the nano-dollar: the sum of float prices (0.22113929999999998) is not printed with its noise.
    assert usage["cost"]["usd"] == round(expected, 9) == usage["cost"]["models"][0]["usd"]
    assert usage["cost"]["models"][0]["model"] == "claude-sonnet-4-5-20250929"
    mine = tmp_path / "p.toml"
    mine.write_text(
        "[models.claude-sonnet-4-5]\ninput = 0\noutput = 1000000\ncache_write = 0\ncache_read = 0\n"
    )
    code, out, _ = run(
        capsys, "analyze", str(SAMPLES / "claude-code.jsonl"), "-f", "json", "--prices", str(mine)
    )
    assert json.loads(out)["files"][0]["recorded_usage"]["cost"]["usd"] == pytest.approx(usage["output"])
    code, out, _ = run(capsys, "analyze", str(SAMPLES / "claude-code.jsonl"), "-f", "table")
    assert f"cost: ${expected:,.2f} (claude-sonnet-4-5-20250929" in out
    code, _, err = run(
        capsys, "analyze", str(SAMPLES / "claude-code.jsonl"), "--prices", str(tmp_path / "none.toml")
    )
    assert code == 3
    assert "none.toml" in err


def test_compact_says_what_its_saving_is_worth_per_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from conftest import SAMPLES, run

    report = tmp_path / "r.json"
    code, _, err = run(
        capsys,
        "compact",
        str(SAMPLES / "claude-code.jsonl"),
        "-s",
        "fifo",
        "--target-tokens",
        "4000",
        "-o",
        str(tmp_path / "o.jsonl"),
        "--report",
        str(report),
    )
    assert code == 0
    worth = json.loads(report.read_text())["run"]["saving_per_turn"]
    rates = load_prices().models["claude-sonnet-4-5"].rates
    assert worth["model"] == "claude-sonnet-4-5-20250929"
    assert worth["usd_input"] == pytest.approx(worth["tokens"] * rates.input * 1e-6)
    assert worth["usd_cache_read"] == pytest.approx(worth["tokens"] * rates.cache_read * 1e-6)
    assert "a turn at claude-sonnet-4-5-20250929 input prices" in err


def test_one_hour_cache_writes_are_read_and_priced_at_their_rate(tmp_path: Path) -> None:
    import json

    from ctxc.formats import load
    from ctxc.usage_scan import scan_usage

    table = load_prices()
    cost = price_usage([Usage(cache_write=1_000_000, cache_write_1h=400_000, model="claude-opus-4-5")], table)
    assert cost.usd == pytest.approx(0.6 * 6.25 + 0.4 * 10)
    usage = {
        "input_tokens": 3,
        "output_tokens": 5,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 700,
        "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 500},
    }
    record = {
        "type": "assistant",
        "uuid": "a1",
        "parentUuid": None,
        "sessionId": "s",
        "requestId": "r1",
        "message": {
            "id": "m1",
            "role": "assistant",
            "model": "claude-opus-4-5",
            "content": [],
            "usage": usage,
        },
    }
    log = tmp_path / "s.jsonl"
    log.write_text(json.dumps(record) + "\n")
    assert [u.cache_write_1h for u in load(str(log)).usage] == [500]
    assert [u.cache_write_1h for u in scan_usage(str(log)).usage] == [500]
