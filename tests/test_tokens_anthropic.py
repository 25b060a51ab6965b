"""``--tokenizer anthropic``: the real SDK against the fake API on 127.0.0.1 (no patching of the SDK)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES
from fake_anthropic import COUNT_TOKENS, FakeAnthropic, Scripted, error_body, estimate_tokens

from ctxc.errors import AuthError, ExitCode, ModelError
from ctxc.formats import load
from ctxc.tokens import make_cached_counter
from ctxc.tokens.anthropic_backend import AnthropicTokenizer, TokenCountError
from ctxc.tokens.cache import CachedCounter, TokenCache
from ctxc.tokens.cost import MESSAGE_OVERHEAD, compare_with_o200k, count_messages, message_parts

# The fake API's fixtures (no_internet is autouse: nothing here can reach beyond loopback).

MODEL = "claude-haiku-4-5"
TEXTS = [
    "Hello, world. This sentence is long enough to count for more than the overhead.",
    "def f(x):\n    return x * 2  # a tool call's code\n" * 3,
    "한국어 문장도 토큰으로 셉니다. 그리고 이것은 꽤 긴 문장입니다.",
    '{"path": "/tmp/a.txt", "content": "quotes \\" and backslashes \\\\ escape in JSON"}',
]


def raw_count(text: str) -> int:
    """What the fake API answers for ``text`` sent as one user message."""
    return estimate_tokens({"messages": [{"role": "user", "content": text}]})


OVERHEAD = raw_count("a") - 1


def count_bodies(server: FakeAnthropic) -> list[dict[str, object]]:
    return [r.body for r in server.requests_to("/v1/messages/count_tokens")]


def test_counts_are_the_api_counts_minus_the_measured_overhead(anthropic_server: FakeAnthropic) -> None:
    tok = AnthropicTokenizer(MODEL)
    assert tok.name == f"anthropic:{MODEL}"
    counts = tok.count_batch([*TEXTS, "", TEXTS[0]])
    assert OVERHEAD > 0
    assert tok.overhead == OVERHEAD
    assert counts == [raw_count(t) - OVERHEAD for t in TEXTS] + [0, raw_count(TEXTS[0]) - OVERHEAD]
    bodies = count_bodies(anthropic_server)
    # The probe, then each distinct non-empty text once, as a one-message request for the model.
    assert len(bodies) == 1 + len(TEXTS)
    assert bodies[0] == {"model": MODEL, "messages": [{"role": "user", "content": "a"}]}
    assert sorted(b["messages"][0]["content"] for b in bodies[1:]) == sorted(TEXTS)  # type: ignore[index]
    assert all(b["model"] == MODEL for b in bodies)
    # The model was checked once, before any count.
    assert anthropic_server.requests[0].path == f"/v1/models/{MODEL}"
    # A second batch measures nothing again.
    before = len(anthropic_server.requests)
    assert tok.count("a longer text than the probe, counted on its own") == (
        raw_count("a longer text than the probe, counted on its own") - OVERHEAD
    )
    assert len(anthropic_server.requests) == before + 1


def test_whitespace_only_text_is_counted_between_bars(anthropic_server: FakeAnthropic) -> None:
    tok = AnthropicTokenizer(MODEL)
    text = "\n\n        \n"
    assert tok.count(text) == raw_count(f"|{text}|") - 2 - OVERHEAD
    assert count_bodies(anthropic_server)[-1]["messages"] == [{"role": "user", "content": f"|{text}|"}]


def test_a_text_too_large_for_one_request_is_counted_in_halves(anthropic_server: FakeAnthropic) -> None:
    tok = AnthropicTokenizer(MODEL)
    tok.count("warm up: the probe is made here")
    text = "first line of a huge tool result\n" * 40 + "second half, different text\n" * 40
    anthropic_server.script(COUNT_TOKENS, Scripted(413, error_body("request_too_large", "too large")))
    n = tok.count(text)
    sent = [b["messages"][0]["content"] for b in count_bodies(anthropic_server)[-3:]]  # type: ignore[index]
    assert sent[0] == text
    assert sent[1] + sent[2] == text
    assert sent[1].endswith("\n")  # split at a line break
    assert n == raw_count(sent[1]) + raw_count(sent[2]) - 2 * OVERHEAD


def test_concurrency_is_bounded(anthropic_server: FakeAnthropic) -> None:
    texts = [f"text number {i} with some words" for i in range(12)]
    anthropic_server.script(COUNT_TOKENS, Scripted(body={"input_tokens": 8}))  # the probe
    anthropic_server.script(
        COUNT_TOKENS, *(Scripted(body={"input_tokens": 100 + i}, delay=0.15) for i in range(len(texts)))
    )
    tok = AnthropicTokenizer(MODEL, concurrency=3)
    counts = tok.count_batch(texts)
    assert anthropic_server.max_in_flight == 3
    assert sorted(counts) == [100 + i - 7 for i in range(len(texts))]


def test_cache_hit_on_a_second_run_makes_no_request(anthropic_server: FakeAnthropic, tmp_path: Path) -> None:
    db = tmp_path / "tokens.sqlite3"
    with TokenCache(db) as cache:
        first = CachedCounter(AnthropicTokenizer(MODEL), cache).count(TEXTS)
    made = len(anthropic_server.requests)
    assert made == 2 + len(TEXTS)  # model check, probe, one per text
    with TokenCache(db) as cache:
        service = CachedCounter(AnthropicTokenizer(MODEL), cache)
        assert service.count(TEXTS) == first
        assert service.hits == len(TEXTS)
        assert service.misses == 0
    assert len(anthropic_server.requests) == made
    # Another model's counts are its own: nothing is reused across models.
    with TokenCache(db) as cache:
        other = CachedCounter(AnthropicTokenizer("claude-sonnet-4-5"), cache)
        other.count(TEXTS)
        assert other.hits == 0
    assert len(anthropic_server.requests) == made + 2 + len(TEXTS)


def test_rejected_key_is_an_auth_error(
    anthropic_server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
    with pytest.raises(AuthError, match="rejected the key") as info:
        AnthropicTokenizer(MODEL).count("anything")
    assert info.value.exit_code == ExitCode.AUTH
    assert len(anthropic_server.requests) == 1  # 401 is not retried


def test_missing_key_is_an_auth_error_before_any_request(
    anthropic_server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(AuthError, match="ANTHROPIC_API_KEY is not set"):
        AnthropicTokenizer(MODEL).count("anything")
    assert anthropic_server.requests == []


def test_unknown_model_is_a_model_error(anthropic_server: FakeAnthropic) -> None:
    with pytest.raises(ModelError, match="claude-nope") as info:
        AnthropicTokenizer("claude-nope").count("anything")
    assert info.value.exit_code == ExitCode.MODEL
    assert count_bodies(anthropic_server) == []


def test_429_is_retried_honouring_retry_after(anthropic_server: FakeAnthropic) -> None:
    limited = Scripted(429, error_body("rate_limit_error", "slow down"), {"retry-after-ms": "20"})
    anthropic_server.script(COUNT_TOKENS, limited, limited)
    tok = AnthropicTokenizer(MODEL, max_retries=2)
    assert tok.count(TEXTS[0]) == raw_count(TEXTS[0]) - OVERHEAD
    assert len(count_bodies(anthropic_server)) == 4  # probe refused twice, then probe and text


def test_overload_until_retries_are_exhausted_fails_with_exit_9(anthropic_server: FakeAnthropic) -> None:
    overloaded = Scripted(529, error_body("overloaded_error", "Overloaded"), {"retry-after-ms": "5"})
    anthropic_server.script(COUNT_TOKENS, *[overloaded] * 3)
    with pytest.raises(
        TokenCountError, match=r"token counting failed: HTTP 529 \(Overloaded\) after 2"
    ) as info:
        AnthropicTokenizer(MODEL, max_retries=2).count("x y z")
    assert info.value.exit_code == ExitCode.SUMMARIZER
    assert len(count_bodies(anthropic_server)) == 3
    assert anthropic_server.pending(COUNT_TOKENS) == 0


def test_a_slow_answer_past_the_timeout_fails(anthropic_server: FakeAnthropic) -> None:
    slow = Scripted(body={"input_tokens": 9}, delay=1.0)
    anthropic_server.script(COUNT_TOKENS, slow)
    with pytest.raises(TokenCountError, match=r"no answer within 0\.2s"):
        AnthropicTokenizer(MODEL, max_retries=0, timeout=0.2).count("x y z")


def test_compare_with_o200k_on_a_sample(anthropic_server: FakeAnthropic, tmp_path: Path) -> None:
    messages = load(open(SAMPLES / "claude-code.jsonl", "rb")).messages  # noqa: SIM115
    counter = CachedCounter(AnthropicTokenizer(MODEL), TokenCache(tmp_path / "t.sqlite3"))
    o200k = make_cached_counter("o200k_base")
    a_total, o_total, ratio = compare_with_o200k(iter(messages), counter, o200k, batch=7)
    expected_a = 0
    for m in messages:
        parts, extra = message_parts(m)
        expected_a += extra + sum(max(0, raw_count(p) - OVERHEAD) for p in parts)
    assert a_total == expected_a
    assert o_total == sum(count_messages(messages, make_cached_counter("o200k_base")))
    assert o_total > 0
    assert ratio == pytest.approx(a_total / o_total)
    assert MESSAGE_OVERHEAD * len([m for m in messages if m.blocks]) < a_total
    assert compare_with_o200k([], counter, o200k) == (0, 0, None)


def test_importing_the_backend_does_not_import_the_sdk() -> None:
    code = "import sys, ctxc.tokens.anthropic_backend; print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
