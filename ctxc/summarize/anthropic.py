"""``--summarizer anthropic``: summaries written by a Claude model through the official SDK.

The SDK is imported only here and only when a call is about to be made (importing it costs ~1.3 s);
it reads ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` itself. The model is
``SummarizerOptions.model``, else ``$CTXC_SUMMARY_MODEL``, else :data:`DEFAULT_MODEL`.

What a summarize() call does:

* Cache: every call's result is stored in ``$CTXC_CACHE_DIR/summaries.sqlite3`` (SQLite in WAL mode,
  safe for several processes) under the SHA-256 of (model, prompt, max_tokens), so re-running a
  batch costs nothing. ``use_cache=False`` or ``CTXC_NO_CACHE=1`` bypasses it.
* Preflight, once per process and (base URL, key, model), before the first API call: no key is an
  :class:`AuthError`; ``GET /v1/models/{model}`` answering 401/403 is an :class:`AuthError`, 404 a
  :class:`ModelError`.
* Size: the prompt must fit the summary model's window minus the output budget and a margin, with
  the run's counts scaled up by :data:`TOKENIZER_SLACK` (Claude's tokenizers count more tokens than
  o200k for the same text). A span too large is split by messages into segments (a single message
  too large is clipped with a note), the segments are summarized concurrently (AsyncAnthropic, at
  most ``concurrency`` calls in flight), and their summaries merged by one more call, itself split
  and folded when the partial summaries do not fit. ``request.previous`` goes to the final merge.
* Reliability: the SDK retries 408/409/429/5xx/529 with backoff honouring ``retry-after``
  (``max_retries``, ``timeout`` per call); what still fails is a one-line :class:`SummarizerError`.
  A summary that is empty, cut off (stop_reason ``max_tokens``), refused, or missing a required
  heading is asked for once more, then is a :class:`SummarizerError`. A summary over its budget is
  asked for once more, shorter; the shorter one is returned and the strategy measures the rest.
* Dry run: no call and no preflight; each call the run would make is recorded with its input
  tokens (by the run's counter) and the extractive summarizer stands in for its answer (a cached
  answer is used when present), so the plan proceeds. :meth:`AnthropicSummarizer.usage` reports
  calls and tokens, marked ``estimated`` for a dry run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ctxc.archive_store import CITATION_RE, citation
from ctxc.errors import AuthError, CtxcError, ModelError, SummarizerError
from ctxc.model import Message
from ctxc.summarize import SummarizerOptions, SummaryRequest, register
from ctxc.summarize.cache import LazySummaryCache, SummaryCache
from ctxc.summarize.prompt import (
    RESULT_CHARS,
    Prompt,
    Validation,
    build_prompt,
    clip,
    render_message,
)
from ctxc.tokens import DEFAULT_ANTHROPIC_MODEL

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

log = logging.getLogger(__name__)

#: The default summary model: Anthropic's fastest current model in its models overview (Claude Haiku
#: 4.5, 200k window). Kept equal to the tokenizer's default Claude model.
DEFAULT_MODEL = DEFAULT_ANTHROPIC_MODEL
#: For a model ctxc has no profile of: the smallest window and a modest output limit of current Claude models.
FALLBACK_WINDOW = 200_000
FALLBACK_MAX_OUTPUT = 32_000
#: The run's counts (o200k by default) times this bounds Claude's own count of the same text: Claude's
#: tokenizers yield more tokens than o200k, the newest (Claude 4.7 and later) ~30% more than older ones.
TOKENIZER_SLACK = 1.35
#: Tokens of the window left unused beyond the estimate (message framing, the SDK's envelope).
PROMPT_MARGIN = 512
#: max_tokens is twice the budget plus this (the model writes in its own tokens, and a summary cut off
#: at max_tokens is lost), at least MIN_MAX_TOKENS, at most the model's output limit.
MAX_TOKENS_EXTRA = 256
MIN_MAX_TOKENS = 512

T = TypeVar("T")


def resolve_model(options: SummarizerOptions) -> str:
    return options.model or os.environ.get("CTXC_SUMMARY_MODEL", "").strip() or DEFAULT_MODEL


# ------------------------------------------------------------------------------------------- the cache


def cache_key(model: str, prompt: Prompt, max_tokens: int) -> bytes:
    return hashlib.sha256(orjson.dumps([model, prompt.system, prompt.user, max_tokens])).digest()


# ------------------------------------------------------------------------------------- error mapping

_WS = re.compile(r"\s+")


def _one_line(text: str, limit: int = 240) -> str:
    flat = _WS.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _api_message(exc: Any) -> str:
    """The error message of an API error body ({"type":"error","error":{"message":...}}), else str(exc)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            kind = err.get("type")
            return _one_line(f"{kind}: {err['message']}" if isinstance(kind, str) else err["message"])
    return _one_line(getattr(exc, "message", None) or str(exc))


def _retryable(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


def map_api_error(
    exc: BaseException, *, model: str, base_url: str, max_retries: int, timeout: float
) -> CtxcError:
    """A one-line ctxc error for an SDK exception (after the SDK's own retries)."""
    import anthropic

    if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
        return AuthError(
            f"the API key was rejected ({exc.status_code} {_api_message(exc)}); check ANTHROPIC_API_KEY"
        )
    if isinstance(exc, anthropic.NotFoundError):
        return ModelError(
            f"unknown model {model!r} (the API at {base_url} answered 404 {_api_message(exc)}); "
            "choose one with --summary-model or CTXC_SUMMARY_MODEL"
        )
    if isinstance(exc, anthropic.APIStatusError):
        after = (
            f" after {max_retries} retr{'y' if max_retries == 1 else 'ies'}"
            if _retryable(exc.status_code)
            else ""
        )
        return SummarizerError(f"the Anthropic API failed{after}: {exc.status_code} {_api_message(exc)}")
    if isinstance(exc, anthropic.APITimeoutError):
        return SummarizerError(
            f"the Anthropic API did not answer within {timeout:g}s ({max_retries} retries); "
            "raise --timeout or try again later"
        )
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc
        return SummarizerError(f"could not reach the Anthropic API at {base_url}: {_one_line(str(cause))}")
    if isinstance(exc, anthropic.APIResponseValidationError | ValueError):
        return SummarizerError(
            f"malformed response from the Anthropic API at {base_url}: {_one_line(str(exc))}"
        )
    return SummarizerError(f"the Anthropic API call failed: {type(exc).__name__}: {_one_line(str(exc))}")


# ------------------------------------------------------------------------------------ the event loop


class _LoopThread:
    """A private event loop in a daemon thread: summarize() is synchronous (the Protocol), may be
    called from code that already runs a loop, and the async client keeps its connections between
    calls only if it always runs on the same loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ctxc-anthropic", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # Ctrl-C or a failure: stop the calls in flight
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


async def _all(coros: Iterable[Awaitable[T]]) -> list[T]:
    """Run concurrently; on the first failure cancel the others and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


# ---------------------------------------------------------------------------------------- summarizer

#: (base URL, key fingerprint, model) already preflighted in this process.
_PREFLIGHTED: set[tuple[str, str, str]] = set()
_PREFLIGHT_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Part:
    """A partial summary and the messages it covers (for citations and the dry run's stand-in)."""

    messages: tuple[Message, ...]
    text: str


class AnthropicSummarizer:
    name = "anthropic"

    def __init__(
        self,
        options: SummarizerOptions | None = None,
        *,
        window: int | None = None,
        max_output: int | None = None,
        result_chars: int = RESULT_CHARS,
        cache: SummaryCache | None = None,
    ) -> None:
        from ctxc.profiles import find_profile

        self.options = options or SummarizerOptions()
        if self.options.concurrency < 1:
            raise SummarizerError(f"--concurrency must be at least 1, not {self.options.concurrency}")
        self.model = resolve_model(self.options)
        profile = find_profile(self.model)
        self.window = window or (profile.window if profile else FALLBACK_WINDOW)
        self.max_output = max_output or (profile.max_output if profile else FALLBACK_MAX_OUTPUT)
        self.result_chars = result_chars
        self._cache = LazySummaryCache(self.options.use_cache, cache)
        self._loop: _LoopThread | None = None
        self._client: AsyncAnthropic | None = None
        self._preflighted = False
        self._calls = 0
        self._input_tokens = 0
        self._output_tokens = 0
        self._cache_hits = 0
        self._sem: asyncio.Semaphore | None = None
        self._preflight_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------------------------------ reporting

    def usage(self) -> dict[str, Any]:
        """API calls and tokens spent so far (a dry run's are estimates: input by the run's counter,
        output as the budgets asked for, an upper bound)."""
        return {
            "model": self.model,
            "calls": self._calls,
            "input_tokens": self._input_tokens,
            "output_tokens": self._output_tokens,
            "cache_hits": self._cache_hits,
            "estimated": self.options.dry_run,
        }

    # ------------------------------------------------------------------------------------- plumbing

    @property
    def cache(self) -> SummaryCache | None:
        return self._cache.get()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            self._loop = _LoopThread()
        return self._loop.run(coro)

    def close(self) -> None:
        """Close the HTTP client and stop the private event loop (also fine to leave to process exit)."""
        if self._loop is None:
            return
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                self._loop.run(client.close())
        self._loop.stop()
        self._loop = None
        self._sem = None
        self._preflight_lock = None

    def max_tokens(self, budget: int) -> int:
        return max(MIN_MAX_TOKENS, min(self.max_output, 2 * max(1, budget) + MAX_TOKENS_EXTRA))

    def input_limit(self, budget: int) -> int:
        """The most prompt tokens (by the run's counter) one call may carry."""
        return int((self.window - self.max_tokens(budget) - PROMPT_MARGIN) / TOKENIZER_SLACK)

    def _make_client(self) -> AsyncAnthropic:
        if self._client is None:
            import anthropic

            try:
                client = anthropic.AsyncAnthropic(
                    max_retries=self.options.max_retries, timeout=self.options.timeout
                )
            except anthropic.CredentialsError as exc:  # a configured profile that cannot be loaded
                raise AuthError(f"no usable Anthropic credentials: {_one_line(str(exc))}") from None
            if client.api_key is None and client.auth_token is None and client.credentials is None:
                raise AuthError("ANTHROPIC_API_KEY is not set (the anthropic summarizer needs an API key)")
            self._client = client
        return self._client

    def _map(self, exc: BaseException) -> CtxcError:
        base = str(self._client.base_url) if self._client is not None else "?"
        return map_api_error(
            exc,
            model=self.model,
            base_url=base,
            max_retries=self.options.max_retries,
            timeout=self.options.timeout,
        )

    # ------------------------------------------------------------------------------------ preflight

    def preflight(self) -> None:
        """Check the key and the model now (the CLI may call this before any work); a no-op in a dry run."""
        if not self.options.dry_run:
            self._run(self._preflight())

    async def _preflight(self) -> None:
        if self._preflight_lock is None:
            self._preflight_lock = asyncio.Lock()
        async with self._preflight_lock:
            if self._preflighted:
                return
            client = self._make_client()
            secret = client.api_key or client.auth_token or ""
            ident = (str(client.base_url), hashlib.sha256(secret.encode()).hexdigest()[:16], self.model)
            with _PREFLIGHT_LOCK:
                done = ident in _PREFLIGHTED
            if not done:
                import anthropic

                try:
                    await client.models.retrieve(self.model)
                except (anthropic.AnthropicError, ValueError) as exc:
                    raise self._map(exc) from None
                with _PREFLIGHT_LOCK:
                    _PREFLIGHTED.add(ident)
            self._preflighted = True

    # ---------------------------------------------------------------------------------------- calls

    async def _create(self, system: str, user: str, max_tokens: int) -> tuple[str, str | None]:
        """One Messages API call: the text of its text blocks and its stop reason."""
        import anthropic

        client = self._make_client()
        try:
            resp = await client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=system,
                messages=[{"role": "user", "content": user}],
            )
        except (anthropic.AnthropicError, ValueError) as exc:
            raise self._map(exc) from None
        self._calls += 1
        content = getattr(resp, "content", None)
        if getattr(resp, "type", None) != "message" or not isinstance(content, list):
            raise SummarizerError(
                f"malformed response from the Anthropic API at {client.base_url}: not a message with content"
            )
        usage = getattr(resp, "usage", None)
        for attr in ("input_tokens", "output_tokens"):
            n = getattr(usage, attr, None)
            if isinstance(n, int):
                if attr == "input_tokens":
                    self._input_tokens += n
                else:
                    self._output_tokens += n
        texts = [
            b.text
            for b in content
            if getattr(b, "type", None) == "text" and isinstance(getattr(b, "text", None), str)
        ]
        stop = getattr(resp, "stop_reason", None)
        return "".join(texts), stop if isinstance(stop, str) else None

    async def _ask(self, request: SummaryRequest, prompt: Prompt, count: Callable[[str], int]) -> str:
        """A validated summary for one prompt: from the cache, the dry-run stand-in, or the API."""
        max_tokens = self.max_tokens(request.budget)
        key = cache_key(self.model, prompt, max_tokens)
        cache = self.cache
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:
                self._cache_hits += 1
                return hit
        if self.options.dry_run:
            from ctxc.summarize.extractive import ExtractiveSummarizer

            self._calls += 1
            self._input_tokens += count(prompt.system) + count(prompt.user)
            self._output_tokens += request.budget
            return ExtractiveSummarizer().summarize(request, count)
        await self._preflight()
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.options.concurrency)
        async with self._sem:
            text = await self._validated(request, prompt, max_tokens, count)
        if cache is not None:
            cache.put(key, self.model, text, count(prompt.system) + count(prompt.user), count(text))
        return text

    async def _validated(
        self, request: SummaryRequest, prompt: Prompt, max_tokens: int, count: Callable[[str], int]
    ) -> str:
        check = Validation(request, count, who=f"model {self.model}")
        while True:
            raw, stop = await self._create(prompt.system, check.extend(prompt.user), max_tokens)
            summary = check.offer(raw, stop, max_tokens=max_tokens)
            if summary is not None:
                return summary

    # ------------------------------------------------------------------------------------- planning

    def _archive_id(self, request: SummaryRequest) -> str | None:
        m = CITATION_RE.search(request.citation)
        return m.group(1) if m else None

    def _cite(self, request: SummaryRequest, messages: Sequence[Message]) -> str:
        archive_id = self._archive_id(request)
        if archive_id is None or not messages:
            return request.citation
        return citation(archive_id, messages[0].index, messages[-1].index)

    def _fits(self, prompt: Prompt, limit: int, count: Callable[[str], int]) -> bool:
        return count(prompt.system) + count(prompt.user) <= limit

    def _segments(
        self, request: SummaryRequest, limit: int, count: Callable[[str], int]
    ) -> list[tuple[SummaryRequest, str]]:
        """The span cut by messages into sub-requests whose prompts fit; each with its rendering."""
        bare = replace(request, messages=(), previous=None)
        empty = build_prompt(bare, transcript="")
        room = limit - count(empty.system) - count(empty.user) - 16  # the per-segment labels
        if room <= 0:
            raise SummarizerError(
                f"the summary model's window ({self.window:,} tokens) cannot hold the summarization prompt"
            )
        out: list[tuple[SummaryRequest, str]] = []
        chunk: list[Message] = []
        texts: list[str] = []
        used = 0
        for m in request.messages:
            text = render_message(m, result_chars=self.result_chars)
            cost = count(text) + 2
            if cost > room:
                text, cost = self._clip_to(text, room, count)
            if chunk and used + cost > room:
                out.append(self._segment(request, chunk, texts))
                chunk, texts, used = [], [], 0
            chunk.append(m)
            texts.append(text)
            used += cost
        if chunk:
            out.append(self._segment(request, chunk, texts))
        return out

    def _segment(
        self, request: SummaryRequest, chunk: list[Message], texts: list[str]
    ) -> tuple[SummaryRequest, str]:
        sub = replace(request, messages=tuple(chunk), citation=self._cite(request, chunk), previous=None)
        return sub, "\n\n".join(texts)

    def _clip_to(self, text: str, room: int, count: Callable[[str], int]) -> tuple[str, int]:
        """A single message too large for one call: keep its head and tail, noting the cut."""
        original, clipped = text, text
        chars = len(original)
        cost = count(original) + 2
        while cost > room:
            chars = int(chars * min(0.9, room / cost))
            if chars < 1:
                raise SummarizerError(
                    f"the summary model's window ({self.window:,} tokens) cannot hold even part of a message"
                )
            clipped = clip(original, chars, "characters of this message")
            cost = count(clipped) + 2
        return clipped, cost

    async def _summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        limit = self.input_limit(request.budget)
        # Independent segments are summarized concurrently, then merged: a long history never goes out
        # as one huge prompt even when the model's window could take it.
        segment_limit = min(limit, max(1_000, self.options.segment_tokens))
        prompt = build_prompt(request, result_chars=self.result_chars)
        if self._fits(prompt, segment_limit, count):
            return await self._ask(request, prompt, count)
        segments = self._segments(request, segment_limit, count)
        if len(segments) == 1:  # one message was clipped to fit
            sub, text = segments[0]
            whole = replace(sub, citation=request.citation, previous=request.previous)
            single = build_prompt(whole, transcript=text)
            if self._fits(single, limit, count):
                return await self._ask(whole, single, count)
        texts = await _all(
            self._ask(sub, build_prompt(sub, transcript=text), count) for sub, text in segments
        )
        parts = [_Part(sub.messages, text) for (sub, _), text in zip(segments, texts, strict=True)]
        return await self._merge(request, parts, limit, count)

    def _merge_prompt(self, request: SummaryRequest, parts: Sequence[_Part]) -> Prompt:
        return build_prompt(request, parts=[(self._cite(request, p.messages), p.text) for p in parts])

    async def _merge(
        self, request: SummaryRequest, parts: list[_Part], limit: int, count: Callable[[str], int]
    ) -> str:
        while True:
            prompt = self._merge_prompt(request, parts)
            if self._fits(prompt, limit, count):
                return await self._ask(request, prompt, count)
            # Too many partial summaries for one call: merge them in groups that fit, then again.
            inner = replace(request, previous=None)
            groups: list[list[_Part]] = []
            for part in parts:
                if groups and self._fits(self._merge_prompt(inner, [*groups[-1], part]), limit, count):
                    groups[-1].append(part)
                else:
                    groups.append([part])
            if len(groups) >= len(parts):
                raise SummarizerError(
                    f"partial summaries do not fit the summary model's window ({self.window:,} tokens) two "
                    "at a time; lower the summary budget"
                )

            parts = await _all(self._fold(request, inner, g, count) for g in groups)

    async def _fold(
        self, request: SummaryRequest, inner: SummaryRequest, group: list[_Part], count: Callable[[str], int]
    ) -> _Part:
        """One partial summary of a group of consecutive partial summaries."""
        if len(group) == 1:
            return group[0]
        msgs = tuple(m for p in group for m in p.messages)
        sub = replace(inner, messages=msgs, citation=self._cite(request, msgs))
        return _Part(msgs, await self._ask(sub, self._merge_prompt(sub, group), count))

    def summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        return self._run(self._summarize(request, count))


register("anthropic", AnthropicSummarizer)
