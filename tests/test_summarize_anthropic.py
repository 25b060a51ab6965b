"""``--summarizer anthropic``: the real SDK over real HTTP against the fake API on 127.0.0.1.

Nothing in the SDK is patched: ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY point it at the fake server,
and ``no_internet`` refuses any connection that is not loopback.
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, SAMPLES
from fake_anthropic import (
    MESSAGES,
    MODELS,
    FakeAnthropic,
    Scripted,
    default_summary,
    error_body,
    message_body,
    system_text,
    user_text,
)

from ctxc.archive_store import CITATION_RE
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.errors import AuthError, ModelError, SummarizerError
from ctxc.formats import load
from ctxc.model import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from ctxc.summarize import ESSENTIAL_SECTIONS, SECTIONS, SummarizerOptions, SummaryRequest, get_summarizer
from ctxc.summarize.anthropic import DEFAULT_MODEL, AnthropicSummarizer, SummaryCache
from ctxc.summarize.extractive import ExtractiveSummarizer
from ctxc.summarize.prompt import build_prompt, check_summary
from ctxc.tokens import get_tokenizer
from ctxc.validate import pairing_problems

# The fixtures (a fake API per test, no connection but loopback) come from the fake_anthropic plugin.

TOK = get_tokenizer("o200k_base")
CITE = "ctxc archive 0123456789ab messages 1-19"
FAST = SummarizerOptions(max_retries=2, timeout=5.0)


def count(text: str) -> int:
    return TOK.count(text) if text else 0


@pytest.fixture(scope="module")
def messages() -> tuple[Message, ...]:
    return load(SAMPLES / "claude-code.jsonl").messages


def request_of(messages: tuple[Message, ...], **kw: Any) -> SummaryRequest:
    span = messages[1:20]
    return SummaryRequest(messages=span, citation=CITE, budget=kw.pop("budget", 400), **kw)


@pytest.fixture(autouse=True)
def _private_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test gets its own summary cache, and no profile on disk can supply a key.
    monkeypatch.setenv("CTXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    for name in ("ANTHROPIC_CONFIG_DIR", "ANTHROPIC_PROFILE", "ANTHROPIC_FEDERATION_RULE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CTXC_SUMMARY_MODEL", raising=False)
    monkeypatch.delenv("CTXC_NO_CACHE", raising=False)


@pytest.fixture
def make() -> Iterator[Callable[..., AnthropicSummarizer]]:
    made: list[AnthropicSummarizer] = []

    def build(options: SummarizerOptions = FAST, **kw: Any) -> AnthropicSummarizer:
        s = AnthropicSummarizer(options, **kw)
        made.append(s)
        return s

    yield build
    for s in made:
        s.close()


def prompt_tokens(body: dict[str, Any]) -> int:
    return count(system_text(body)) + count(user_text(body))


# ------------------------------------------------------------------------------------------ happy path


def test_success_returns_the_servers_summary(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    s = make()
    text = s.summarize(request_of(messages), count)
    assert text.startswith("Summary by the fake API.")
    assert CITE in text.splitlines()[0]
    assert check_summary(text, SECTIONS) == []
    paths = [r.path for r in anthropic_server.requests]
    assert paths == [f"/v1/models/{DEFAULT_MODEL}", "/v1/messages"]  # preflight first, then the call
    body = anthropic_server.message_requests[0].body
    assert body["model"] == DEFAULT_MODEL == "claude-haiku-4-5"
    assert body["max_tokens"] == s.max_tokens(400)
    usage = s.usage()
    assert (usage["calls"], usage["cache_hits"], usage["estimated"]) == (1, 0, False)
    assert usage["output_tokens"] > 0
    assert usage["input_tokens"] == default_summary(body)["usage"]["input_tokens"]


def test_registered_and_model_from_environment(
    anthropic_server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, messages: tuple[Message, ...]
) -> None:
    monkeypatch.setenv("CTXC_SUMMARY_MODEL", "claude-sonnet-4-6")
    s = get_summarizer("anthropic", FAST)
    assert isinstance(s, AnthropicSummarizer)
    try:
        s.summarize(request_of(messages), count)
    finally:
        s.close()
    assert anthropic_server.message_requests[0].body["model"] == "claude-sonnet-4-6"
    explicit = AnthropicSummarizer(replace(FAST, model="claude-haiku-4-5"))
    assert explicit.model == "claude-haiku-4-5"


def test_request_carries_sections_citation_instructions_and_previous(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    previous = "Earlier summary: the user wanted KRW rounding fixed (PREVIOUS-MARKER)."
    req = request_of(messages, previous=previous, instructions="focus on the pytest failures")
    make().summarize(req, count)
    body = anthropic_server.message_requests[0].body
    system, user = system_text(body), user_text(body)
    for section in SECTIONS:
        assert f"## {section}" in system
    assert CITE in system
    assert "<instructions>\nfocus on the pytest failures\n</instructions>" in user
    assert "<previous_summary>\nEarlier summary: the user wanted KRW rounding" in user
    assert "PREVIOUS-MARKER" in user
    assert "→ tool call Bash" in user  # the transcript is rendered, tool calls included
    assert body["messages"][0]["role"] == "user"


def test_essential_request_asks_only_for_essential_sections(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    text = make().summarize(request_of(messages, essential=True), count)
    system = system_text(anthropic_server.message_requests[0].body)
    assert [s for s in SECTIONS if f"## {s}" in system] == list(ESSENTIAL_SECTIONS)
    assert check_summary(text, ESSENTIAL_SECTIONS) == []


def test_citation_is_added_when_the_model_leaves_it_out(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    text = "\n".join(f"## {s}\n- x" for s in SECTIONS)
    anthropic_server.script(MESSAGES, Scripted(body=message_body(text)))
    out = make().summarize(request_of(messages), count)
    assert CITE in out.splitlines()[0]
    assert CITATION_RE.search(out.splitlines()[0])


# ------------------------------------------------------------------------------------------- retries


def test_429_then_success_honours_retry_after(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    # 1.2 s is longer than the SDK's own first backoff (at most 0.5 s): waiting it proves the header is read.
    anthropic_server.script(
        MESSAGES,
        Scripted(429, error_body("rate_limit_error", "slow down"), {"retry-after": "1.2"}),
    )
    text = make().summarize(request_of(messages), count)
    assert text.startswith("Summary by the fake API.")
    calls = anthropic_server.message_requests
    assert len(calls) == 2
    assert calls[1].time - calls[0].time >= 1.2
    assert calls[1].headers["x-stainless-retry-count"] == "1"


def test_429_with_retry_after_zero_then_success(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    anthropic_server.script(
        MESSAGES, Scripted(429, error_body("rate_limit_error", "slow down"), {"retry-after": "0"})
    )
    assert make().summarize(request_of(messages), count).startswith("Summary by the fake API.")
    assert len(anthropic_server.message_requests) == 2


@pytest.mark.parametrize(
    ("status", "kind"), [(529, "overloaded_error"), (500, "api_error"), (503, "api_error")]
)
def test_server_errors_until_retries_are_exhausted(
    anthropic_server: FakeAnthropic,
    make: Callable[..., AnthropicSummarizer],
    messages: tuple[Message, ...],
    status: int,
    kind: str,
) -> None:
    fail = Scripted(status, error_body(kind, "try later"), {"retry-after-ms": "5"})
    anthropic_server.script(MESSAGES, fail, fail, fail, fail)
    s = make(replace(FAST, max_retries=2))
    with pytest.raises(SummarizerError) as err:
        s.summarize(request_of(messages), count)
    assert len(anthropic_server.message_requests) == 3  # the first try and two retries
    message = str(err.value)
    assert "\n" not in message
    assert f"{status} {kind}: try later" in message
    assert "after 2 retries" in message
    assert s.usage()["calls"] == 0


def test_bad_request_is_not_retried(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    anthropic_server.script(
        MESSAGES, Scripted(400, error_body("invalid_request_error", "prompt is too long"))
    )
    with pytest.raises(SummarizerError, match=r"400 invalid_request_error: prompt is too long$"):
        make().summarize(request_of(messages), count)
    assert len(anthropic_server.message_requests) == 1


def test_slow_response_past_the_timeout(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    anthropic_server.script(MESSAGES, Scripted(body=default_summary({}), delay=3.0))
    s = make(SummarizerOptions(max_retries=0, timeout=0.5))
    start = time.monotonic()
    with pytest.raises(SummarizerError, match=r"did not answer within 0.5s"):
        s.summarize(request_of(messages), count)
    assert time.monotonic() - start < 2.5
    assert len(anthropic_server.message_requests) == 1


def test_connection_refused_is_a_summarizer_error(
    monkeypatch: pytest.MonkeyPatch, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    server = FakeAnthropic()  # bound but never served: connecting works, nothing answers
    port = server.url.rsplit(":", 1)[1]
    server.stop()  # now the port is closed
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    with pytest.raises(SummarizerError, match=r"could not reach the Anthropic API at http://127\.0\.0\.1"):
        make(SummarizerOptions(max_retries=0, timeout=2)).summarize(request_of(messages), count)


# ------------------------------------------------------------------------------------ key and model


def test_rejected_key_is_an_auth_error_before_any_summary_call(
    anthropic_server: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[..., AnthropicSummarizer],
    messages: tuple[Message, ...],
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
    with pytest.raises(AuthError, match=r"the API key was rejected \(401 authentication_error"):
        make().summarize(request_of(messages), count)
    assert [r.path for r in anthropic_server.requests] == [f"/v1/models/{DEFAULT_MODEL}"]


def test_401_on_the_call_itself_is_an_auth_error(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    anthropic_server.script(MESSAGES, Scripted(401, error_body("authentication_error", "key revoked")))
    with pytest.raises(AuthError, match="key revoked"):
        make().summarize(request_of(messages), count)


def test_missing_key_fails_before_any_request(
    anthropic_server: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[..., AnthropicSummarizer],
    messages: tuple[Message, ...],
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(AuthError, match="ANTHROPIC_API_KEY is not set"):
        make().summarize(request_of(messages), count)
    assert anthropic_server.requests == []


def test_unloadable_credentials_profile_is_an_auth_error(
    anthropic_server: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    make: Callable[..., AnthropicSummarizer],
    messages: tuple[Message, ...],
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "no-such-config"))
    with pytest.raises(AuthError, match="no usable Anthropic credentials"):
        make().summarize(request_of(messages), count)
    assert anthropic_server.requests == []


def test_unknown_model_is_a_model_error(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    s = make(replace(FAST, model="claude-nonexistent-9"))
    with pytest.raises(ModelError, match="unknown model 'claude-nonexistent-9'"):
        s.summarize(request_of(messages), count)
    assert [r.path for r in anthropic_server.requests] == ["/v1/models/claude-nonexistent-9"]


def test_preflight_runs_once_per_process(
    anthropic_server: FakeAnthropic,
    make: Callable[..., AnthropicSummarizer],
    messages: tuple[Message, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The process-wide memo is keyed by base URL: an earlier test on a reused loopback port would answer it.
    monkeypatch.setattr("ctxc.summarize.anthropic._PREFLIGHTED", set())
    make().summarize(request_of(messages), count)
    make().summarize(request_of(messages, budget=300), count)
    assert len(anthropic_server.requests_to("/v1/models/")) == 1
    assert len(anthropic_server.message_requests) == 2


def test_explicit_preflight_reports_a_bad_model_before_work(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer]
) -> None:
    anthropic_server.script(MODELS, Scripted(404, error_body("not_found_error", "model: claude-haiku-4-5")))
    with pytest.raises(ModelError):
        make().preflight()
    assert anthropic_server.message_requests == []


# ------------------------------------------------------------------------------------ bad answers


@pytest.mark.parametrize(
    "body",
    [b"this is not json{", {"unexpected": "shape"}, {"type": "message", "content": "not a list"}],
    ids=["invalid-json", "wrong-shape", "content-not-a-list"],
)
def test_malformed_body_is_a_summarizer_error(
    anthropic_server: FakeAnthropic,
    make: Callable[..., AnthropicSummarizer],
    messages: tuple[Message, ...],
    body: Any,
) -> None:
    anthropic_server.script(MESSAGES, Scripted(200, body))
    with pytest.raises(SummarizerError, match="malformed response from the Anthropic API"):
        make().summarize(request_of(messages), count)


def _no_sections() -> dict[str, Any]:
    return message_body(f"About {CITE}: the user fixed rounding.")


BAD_ANSWERS = {
    "empty": (lambda: message_body(""), "came back empty"),
    "truncated": (
        lambda: message_body("## Session intent\n- half a sen", stop_reason="max_tokens"),
        "cut off",
    ),
    "no-sections": (_no_sections, "lacks the section"),
    "refused": (lambda: message_body("I can't help with that.", stop_reason="refusal"), "refused"),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
def test_bad_summary_twice_is_an_error(
    anthropic_server: FakeAnthropic,
    make: Callable[..., AnthropicSummarizer],
    messages: tuple[Message, ...],
    case: str,
) -> None:
    bad, reason = BAD_ANSWERS[case]
    anthropic_server.script(MESSAGES, Scripted(body=bad()), Scripted(body=bad()), Scripted(body=bad()))
    with pytest.raises(SummarizerError, match=reason):
        make().summarize(request_of(messages), count)
    calls = anthropic_server.message_requests
    assert len(calls) == 2  # retried once, not more
    assert user_text(calls[1].body).startswith(user_text(calls[0].body))
    assert user_text(calls[1].body) != user_text(calls[0].body)  # the retry says what went wrong


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
def test_bad_summary_then_good_one_succeeds(
    anthropic_server: FakeAnthropic,
    make: Callable[..., AnthropicSummarizer],
    messages: tuple[Message, ...],
    case: str,
) -> None:
    bad, _ = BAD_ANSWERS[case]
    anthropic_server.script(MESSAGES, Scripted(body=bad()))
    text = make().summarize(request_of(messages), count)
    assert check_summary(text, SECTIONS) == []
    assert len(anthropic_server.message_requests) == 2


def test_summary_over_budget_is_asked_again_shorter(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    long = f"First line cites {CITE}.\n" + "\n".join(f"## {s}\n" + "- detail word " * 80 for s in SECTIONS)
    anthropic_server.script(MESSAGES, Scripted(body=message_body(long)))
    text = make().summarize(request_of(messages, budget=200), count)
    assert count(text) <= 200
    calls = anthropic_server.message_requests
    assert len(calls) == 2
    assert "the limit is 200" in user_text(calls[1].body)


# -------------------------------------------------------------------------------- size and concurrency


def test_span_over_the_window_is_split_and_folded(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    s = make(window=5000)
    req = request_of(messages, budget=300, previous="PREVIOUS-MARKER summary of messages before 1.")
    limit = s.input_limit(300)
    assert build_prompt(req).system  # the whole span would not fit in one call:
    assert count(build_prompt(req).system) + count(build_prompt(req).user) > limit
    text = s.summarize(req, count)
    calls = [r.body for r in anthropic_server.message_requests]
    assert len(calls) >= 3
    assert all(prompt_tokens(b) <= limit for b in calls)
    *segments, merge = calls
    assert all("<transcript" in user_text(b) for b in segments)
    assert "<partial_summaries>" in user_text(merge)
    # Each segment cites its own message range; together they cover the span. Segments are sent
    # concurrently, so the server may see them in any order.
    ranges = [CITATION_RE.search(system_text(b)) for b in segments]
    spans = sorted((int(m.group(2)), int(m.group(3) or m.group(2))) for m in ranges if m)
    assert len(spans) == len(segments)
    assert (spans[0][0], spans[-1][1]) == (1, 19)
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans))
    # The previous summary goes to the final merge only; the merge cites the whole span.
    assert "PREVIOUS-MARKER" in user_text(merge)
    assert not any("PREVIOUS-MARKER" in user_text(b) for b in segments)
    assert CITE in system_text(merge)
    assert CITE in text
    assert s.usage()["calls"] == len(calls)


def test_partial_summaries_that_do_not_fit_are_folded_in_groups(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    # Long partial summaries: the merge of all of them does not fit, so groups are merged first.
    def long_summary(body: dict[str, Any]) -> dict[str, Any]:
        resp = default_summary(body)
        text = resp["content"][0]["text"] + "- filler words for size " * 20 + "\n"
        return message_body(text)

    anthropic_server.responder = long_summary
    s = make(window=4200)
    req = request_of(messages, budget=1000)
    limit = s.input_limit(1000)
    s.summarize(req, count)
    calls = [r.body for r in anthropic_server.message_requests]
    merges = [b for b in calls if "<partial_summaries>" in user_text(b)]
    assert len(merges) >= 2  # at least one group merge and the final merge
    assert all(prompt_tokens(b) <= limit for b in calls)
    assert CITE in system_text(merges[-1])


def test_single_huge_message_is_clipped_not_sent_whole(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer]
) -> None:
    huge = " ".join(f"line{i} of a pasted log" for i in range(6000))
    msgs = (
        Message("user", (TextBlock("fix the build"),), index=1),
        Message("user", (TextBlock(huge),), index=2),
        Message("assistant", (TextBlock("done"),), index=3),
    )
    s = make(window=6000)
    req = SummaryRequest(messages=msgs, citation="ctxc archive 0123456789ab messages 1-3", budget=300)
    s.summarize(req, count)
    calls = [r.body for r in anthropic_server.message_requests]
    limit = s.input_limit(300)
    assert all(prompt_tokens(b) <= limit for b in calls)
    sent = "\n".join(user_text(b) for b in calls)
    assert "omitted here" in sent
    assert "line0 of a pasted log" in sent  # head and tail kept
    assert "line5999 of a pasted log" in sent
    assert huge not in sent


def test_concurrency_is_bounded(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    def slow(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.15)
        return default_summary(body)

    anthropic_server.responder = slow
    s = make(replace(FAST, concurrency=3), window=2600)
    s.summarize(request_of(messages, budget=200), count)
    segments = [r for r in anthropic_server.message_requests if "<transcript" in user_text(r.body)]
    assert len(segments) >= 6
    assert anthropic_server.max_in_flight == 3  # concurrent, and never more than allowed


def test_concurrency_one_is_sequential(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    def slow(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.05)
        return default_summary(body)

    anthropic_server.responder = slow
    make(replace(FAST, concurrency=1), window=3200).summarize(request_of(messages, budget=200), count)
    assert len(anthropic_server.message_requests) >= 4
    assert anthropic_server.max_in_flight == 1


def test_a_failing_segment_fails_the_summary(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    anthropic_server.script(MESSAGES, Scripted(500, error_body("api_error", "boom"), {"retry-after-ms": "1"}))
    with pytest.raises(SummarizerError, match="500 api_error: boom"):
        make(replace(FAST, max_retries=0), window=3200).summarize(request_of(messages, budget=200), count)


# -------------------------------------------------------------------------------------------- cache


def test_second_run_is_a_cache_hit(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    first = make().summarize(request_of(messages), count)
    assert len(anthropic_server.message_requests) == 1
    again = make()
    assert again.summarize(request_of(messages), count) == first
    assert len(anthropic_server.message_requests) == 1  # no second call
    assert (again.usage()["cache_hits"], again.usage()["calls"]) == (1, 0)
    # A different prompt (other instructions) is a different key.
    make().summarize(request_of(messages, instructions="only the errors"), count)
    assert len(anthropic_server.message_requests) == 2


def test_no_cache_bypasses_the_cache(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    make().summarize(request_of(messages), count)
    bypass = make(replace(FAST, use_cache=False))
    bypass.summarize(request_of(messages), count)
    assert len(anthropic_server.message_requests) == 2
    assert bypass.usage()["cache_hits"] == 0


def test_invalid_answers_are_not_cached(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    anthropic_server.script(MESSAGES, Scripted(body=message_body("")), Scripted(body=message_body("")))
    with pytest.raises(SummarizerError):
        make().summarize(request_of(messages), count)
    make().summarize(request_of(messages), count)
    assert len(anthropic_server.message_requests) == 3


_CHILD = """
import sys
from ctxc.formats import load
from ctxc.summarize import SummarizerOptions, SummaryRequest
from ctxc.summarize.anthropic import AnthropicSummarizer
from ctxc.tokens import get_tokenizer
tok = get_tokenizer("o200k_base")
msgs = load(sys.argv[1]).messages
s = AnthropicSummarizer(SummarizerOptions(max_retries=0, timeout=10))
for budget in range(300, 300 + int(sys.argv[2])):
    cite = "ctxc archive 0123456789ab messages 1-19"
    req = SummaryRequest(messages=msgs[1:20], citation=cite, budget=budget)
    s.summarize(req, lambda t: tok.count(t) if t else 0)
print(s.usage()["calls"], s.usage()["cache_hits"])
"""


def test_two_processes_share_the_cache(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    n = 12
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(SAMPLES / "claude-code.jsonl"), str(n)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        calls, hits = map(int, out.split())
        assert calls + hits == n
        assert "unusable" not in err  # neither process lost the cache to locking
    assert SummaryCache().size() == n
    # Every summary either process wrote is readable now: a third run calls nothing.
    before = len(anthropic_server.message_requests)
    s = make()
    for budget in range(300, 300 + n):
        s.summarize(request_of(messages, budget=budget), count)
    assert len(anthropic_server.message_requests) == before
    assert s.usage()["cache_hits"] == n


# ------------------------------------------------------------------------------------------ dry run


def test_dry_run_calls_nothing_and_estimates(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    req = request_of(messages)
    s = make(replace(FAST, dry_run=True))
    text = s.summarize(req, count)
    assert anthropic_server.requests == []
    assert text == ExtractiveSummarizer().summarize(req, count)
    prompt = build_prompt(req)
    usage = s.usage()
    assert usage["estimated"] is True
    assert usage["calls"] == 1
    assert usage["input_tokens"] == count(prompt.system) + count(prompt.user)


def test_dry_run_plans_the_split(
    anthropic_server: FakeAnthropic, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    dry = make(replace(FAST, dry_run=True), window=5000)
    dry.summarize(request_of(messages, budget=300), count)
    assert anthropic_server.requests == []
    assert dry.usage()["calls"] >= 3  # segments and the merge
    real = make(window=5000)
    real.summarize(request_of(messages, budget=300), count)
    # Segment prompts are exact in the plan; the merge's partial summaries differ (extractive stand-ins).
    assert dry.usage()["calls"] == len(anthropic_server.message_requests)


_DRY_CHILD = """
import sys
from ctxc.formats import load
from ctxc.summarize import SummarizerOptions, SummaryRequest, get_summarizer
import ctxc.summarize.anthropic
from ctxc.tokens import get_tokenizer
tok = get_tokenizer("o200k_base")
msgs = load(sys.argv[1]).messages
s = get_summarizer("anthropic", SummarizerOptions(dry_run=True))
s.preflight()
req = SummaryRequest(messages=msgs[1:20], citation="ctxc archive 0123456789ab messages 1-19", budget=400)
text = s.summarize(req, lambda t: tok.count(t) if t else 0)
assert "ctxc archive 0123456789ab" in text
print(s.usage()["calls"], "anthropic" in sys.modules)
"""


def test_dry_run_needs_no_key_and_never_imports_the_sdk(tmp_path: Path) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(PYTHONPATH=str(ROOT), ANTHROPIC_BASE_URL="http://127.0.0.1:9", CTXC_CACHE_DIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", _DRY_CHILD, str(SAMPLES / "claude-code.jsonl")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["1", "False"]


# ---------------------------------------------------------------------------------------- end to end


def test_compact_hierarchical_with_the_anthropic_summarizer(anthropic_server: FakeAnthropic) -> None:
    transcript = load(SAMPLES / "claude-code.jsonl")
    options = CompactOptions(
        strategy="hierarchical",
        target_tokens=3000,
        summarizer="anthropic",
        summarizer_options=SummarizerOptions(max_retries=1, timeout=10),
    )
    result = compact_transcript(transcript, options)
    assert anthropic_server.message_requests
    summaries = [m for m in result.transcript.messages if "Summary by the fake API." in m.text]
    assert len(summaries) == 1
    assert summaries[0].meta["is_compact_summary"] is True  # written as Claude Code writes its summaries
    assert CITATION_RE.search(summaries[0].text)
    assert result.summarizer_usage is not None
    assert result.summarizer_usage["calls"] >= 1
    # The written file reads back as a valid Claude Code transcript with the summary in it.
    back = load(__import__("io").BytesIO(result.transcript.to_bytes()))
    assert back.format == "claude-code"
    assert pairing_problems(back.messages, strict=True) == []
    assert any("Summary by the fake API." in m.text for m in back.messages)
    assert result.tokens_after <= 3000


# ------------------------------------------------------------------------------- guard and the prompt


def test_no_internet_guard_refuses_anything_but_loopback() -> None:
    with pytest.raises(OSError, match="loopback"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("api.anthropic.com", 443)
    with socket.socket() as sock, pytest.raises(OSError, match="loopback"):
        sock.connect(("8.8.8.8", 53))


def test_default_base_url_is_unreachable_under_the_guard(
    monkeypatch: pytest.MonkeyPatch, make: Callable[..., AnthropicSummarizer], messages: tuple[Message, ...]
) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-real")
    with pytest.raises(
        SummarizerError, match=r"could not reach the Anthropic API at https://api\.anthropic\.com"
    ):
        make(SummarizerOptions(max_retries=0, timeout=2)).summarize(request_of(messages), count)


def test_check_summary_finds_missing_headings() -> None:
    text = "Summary.\n\n# Session intent\n- a\n### decisions:\n- b\n**Current state**\n## Next steps  \n"
    missing = ["Artifacts and files touched", "Errors and fixes", "Current state"]
    assert check_summary(text, SECTIONS) == missing
    assert check_summary("", ESSENTIAL_SECTIONS) == list(ESSENTIAL_SECTIONS)


def test_prompt_clips_tool_results_and_inputs(messages: tuple[Message, ...]) -> None:
    big = ToolResultBlock("t1", "HEAD " + "x" * 50_000 + " TAIL", is_error=True, name="Bash")
    call = ToolUseBlock("t1", "Write", {"file_path": "a.py", "content": "y" * 10_000})
    msgs = (
        Message("assistant", (TextBlock("writing"), call, ThinkingBlock("SECRET-THOUGHT")), index=4),
        Message("user", (big,), index=5),
    )
    req = SummaryRequest(messages=msgs, citation="ctxc archive 0123456789ab messages 4-5", budget=500)
    user = build_prompt(req, result_chars=1000).user
    assert '<transcript messages="4-5">' in user
    assert '→ tool call Write (id t1): {"file_path":"a.py","content":"yyy' in user
    assert "← tool ERROR result of Bash (id t1):\nHEAD" in user
    assert "TAIL" in user  # the end of a result (a traceback's last line) survives
    assert "omitted here; the full text is in the archive" in user
    assert "SECRET-THOUGHT" not in user
    assert len(user) < 5000
    assert len(build_prompt(req, result_chars=20_000).user) > 20_000  # the size is configurable


def test_merge_prompt_lists_the_parts_in_order() -> None:
    req = SummaryRequest(messages=(), citation=CITE, budget=500, previous="OLD", instructions="keep paths")
    prompt = build_prompt(req, parts=[("ctxc archive 0123456789ab messages 1-9", "P1"), (CITE, "P2")])
    assert "partial summaries" in prompt.system
    assert prompt.user.index("<instructions>") < prompt.user.index("OLD") < prompt.user.index("P1")
    assert prompt.user.index("P1") < prompt.user.index("P2")
    assert '<part n="2" covers="ctxc archive 0123456789ab messages 1-19">' in prompt.user
    assert prompt.text == f"{prompt.system}\n\n{prompt.user}"
