"""``--summarizer anthropic``: summaries by a Claude model through the SDK (imported only to call it).
A span too large for one prompt is summarized as segments, concurrently, then merged."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from ctxc.archive_store import CITATION_RE, citation
from ctxc.errors import AuthError, CtxcError, ModelError, SummarizerError
from ctxc.model import Message
from ctxc.summarize import SummarizerOptions, SummaryRequest, register
from ctxc.summarize.cache import Spent, SummaryCache, summary_cache
from ctxc.summarize.facts import plural
from ctxc.summarize.prompt import Prompt, Validation, build_prompt, clip, one_line, render_message
from ctxc.tokens import DEFAULT_ANTHROPIC_MODEL

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

DEFAULT_MODEL = DEFAULT_ANTHROPIC_MODEL
#: For a model ctxc has no profile of: the smallest window and a modest output limit of current models.
FALLBACK_WINDOW = 200_000
FALLBACK_MAX_OUTPUT = 32_000
#: The run's counts times this bounds Claude's own count of the same text (its tokenizers yield more).
TOKENIZER_SLACK = 1.35
PROMPT_MARGIN = 512  # tokens left for message framing and the SDK's envelope
#: max_tokens is twice the budget plus this (a summary cut off at max_tokens is lost), within limits.
MAX_TOKENS_EXTRA = 256
MIN_MAX_TOKENS = 512

T = TypeVar("T")


def resolve_model(model: str | None) -> str:
    return model or os.environ.get("CTXC_SUMMARY_MODEL", "").strip() or DEFAULT_MODEL


def _size(prompt: Prompt, count: Callable[[str], int]) -> int:
    return count(prompt.system) + count(prompt.user)


def _api_message(exc: Any) -> str:
    """The error message of an API error body ({"type":"error","error":{"message":...}}), else str(exc)."""
    body = getattr(exc, "body", None)
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        kind = err.get("type")
        return one_line(f"{kind}: {err['message']}" if isinstance(kind, str) else err["message"])
    return one_line(getattr(exc, "message", None) or str(exc))


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


#: (base URL, key fingerprint, model) already preflighted in this process.
_PREFLIGHTED: set[tuple[str, str, str]] = set()


@dataclass(frozen=True, slots=True)
class Reply:
    text: str  # the text of the answer's text blocks
    stop: str | None
    input_tokens: int
    output_tokens: int


class AnthropicAPI:
    """One Claude model through the SDK's async client, for the summarizer and the eval judge: the key and
    model checked once per process, failures mapped to one-line ctxc errors, usage counted. Calls run on
    a private event loop in a daemon thread: summarize() is synchronous, may run inside another loop, and
    the async client keeps its connections only on one loop."""

    def __init__(self, model: str, *, max_retries: int, timeout: float, needs: str) -> None:
        self.model = model
        self.max_retries = max_retries
        self.timeout = timeout
        self.needs = needs  # who needs the key, for the error when there is none
        self.spent = Spent()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: AsyncAnthropic | None = None
        self._preflight_lock: asyncio.Lock | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="ctxc-anthropic", daemon=True)
            self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # Ctrl-C or a failure: stop the calls in flight
            raise

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                self.run(client.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = self._preflight_lock = None

    def _make_client(self) -> AsyncAnthropic:
        if self._client is None:
            import anthropic

            try:
                client = anthropic.AsyncAnthropic(max_retries=self.max_retries, timeout=self.timeout)
            except anthropic.CredentialsError as exc:  # a configured profile that cannot be loaded
                raise AuthError(f"no usable Anthropic credentials: {one_line(str(exc))}") from None
            if client.api_key is None and client.auth_token is None and client.credentials is None:
                raise AuthError(
                    f"ANTHROPIC_API_KEY is not set ({self.needs} needs an API key)", options=("judge",)
                )
            self._client = client
        return self._client

    def _map(self, exc: BaseException) -> CtxcError:
        """A one-line ctxc error for an SDK exception (after the SDK's own retries)."""
        import anthropic

        base_url = str(self._client.base_url) if self._client is not None else "?"
        api, said = "the Anthropic API", one_line(str(exc))
        if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
            status = f"{exc.status_code} {_api_message(exc)}"
            return AuthError(f"the API key was rejected ({status}); check ANTHROPIC_API_KEY")
        if isinstance(exc, anthropic.NotFoundError):
            return ModelError(
                f"unknown model {self.model!r} (the API at {base_url} answered 404 {_api_message(exc)}); "
                "choose one with {summarizer_options.model} or CTXC_SUMMARY_MODEL",
                options=("summarizer_options.model",),
            )
        if isinstance(exc, anthropic.APIStatusError):
            retried = exc.status_code in (408, 409, 429) or exc.status_code >= 500
            after = f" after {plural(self.max_retries, 'retry', 'retries')}" if retried else ""
            return SummarizerError(f"{api} failed{after}: {exc.status_code} {_api_message(exc)}")
        if isinstance(exc, anthropic.APITimeoutError):
            return SummarizerError(
                f"{api} did not answer within {self.timeout:g}s ({self.max_retries} retries); "
                "raise {summarizer_options.timeout} or try again later",
                options=("summarizer_options.timeout",),
            )
        if isinstance(exc, anthropic.APIConnectionError):
            cause = one_line(str(exc.__cause__ or exc))
            return SummarizerError(f"could not reach {api} at {base_url}: {cause}")
        if isinstance(exc, anthropic.APIResponseValidationError | ValueError):
            return SummarizerError(f"malformed response from {api} at {base_url}: {said}")
        return SummarizerError(f"{api} call failed: {type(exc).__name__}: {said}")

    async def preflight(self) -> None:
        """Check the key and the model (``GET /v1/models/{model}``), once per process."""
        if self._preflight_lock is None:
            self._preflight_lock = asyncio.Lock()
        async with self._preflight_lock:
            client = self._make_client()
            secret = client.api_key or client.auth_token or ""
            ident = (str(client.base_url), hashlib.sha256(secret.encode()).hexdigest()[:16], self.model)
            if ident not in _PREFLIGHTED:
                import anthropic

                try:
                    await client.models.retrieve(self.model)
                except (anthropic.AnthropicError, ValueError) as exc:
                    raise self._map(exc) from None
                _PREFLIGHTED.add(ident)

    async def create(self, system: str, user: str, max_tokens: int) -> Reply:
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
        self.spent.calls += 1
        content = getattr(resp, "content", None)
        if getattr(resp, "type", None) != "message" or not isinstance(content, list):
            raise SummarizerError(
                f"malformed response from the Anthropic API at {client.base_url}: not a message with content"
            )
        usage = getattr(resp, "usage", None)
        found = (getattr(usage, attr, None) for attr in ("input_tokens", "output_tokens"))
        n_in, n_out = (n if isinstance(n, int) else 0 for n in found)
        self.spent.input_tokens += n_in
        self.spent.output_tokens += n_out
        texts = [getattr(b, "text", None) for b in content if getattr(b, "type", None) == "text"]
        stop = getattr(resp, "stop_reason", None)
        text = "".join(t for t in texts if isinstance(t, str))
        return Reply(text, stop if isinstance(stop, str) else None, n_in, n_out)


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
        cache: SummaryCache | None = None,
    ) -> None:
        from ctxc.profiles import find_profile

        self.options = options = options or SummarizerOptions()
        if options.concurrency < 1:
            raise SummarizerError(
                f"{{summarizer_options.concurrency}} must be at least 1, not {options.concurrency}",
                options=("summarizer_options.concurrency",),
            )
        self.model = resolve_model(options.model)
        profile = find_profile(self.model)
        self.window = window or (profile.window if profile else FALLBACK_WINDOW)
        self.max_output = profile.max_output if profile else FALLBACK_MAX_OUTPUT
        retries, timeout = options.max_retries, options.timeout
        self.api = AnthropicAPI(
            self.model, max_retries=retries, timeout=timeout, needs="the anthropic summarizer"
        )
        self._cache = summary_cache(options.use_cache, cache)
        self._sem: asyncio.Semaphore | None = None

    def usage(self) -> dict[str, Any]:
        """API calls and tokens spent so far (a dry run's are estimates, output as the budgets asked for)."""
        return {"model": self.model, **asdict(self.api.spent), "estimated": self.options.dry_run}

    def close(self) -> None:
        """Close the HTTP client and stop the private event loop (fine to leave to process exit too)."""
        self.api.close()
        self._sem = None

    def max_tokens(self, budget: int) -> int:
        return max(MIN_MAX_TOKENS, min(self.max_output, 2 * max(1, budget) + MAX_TOKENS_EXTRA))

    def input_limit(self, budget: int) -> int:
        """The most prompt tokens (by the run's counter) one call may carry."""
        return int((self.window - self.max_tokens(budget) - PROMPT_MARGIN) / TOKENIZER_SLACK)

    def preflight(self) -> None:
        """Check the key and the model now (the CLI may call this before any work); a no-op in a dry run."""
        if not self.options.dry_run:
            self.api.run(self.api.preflight())

    async def _ask(self, request: SummaryRequest, prompt: Prompt, count: Callable[[str], int]) -> str:
        """A validated summary for one prompt: from the cache, the dry-run stand-in, or the API."""
        max_tokens = self.max_tokens(request.budget)
        key = SummaryCache.key(self.model, prompt.system, prompt.user, max_tokens)
        if (hit := self._cache.lookup(key, self.api.spent)) is not None:
            return hit
        if self.options.dry_run:
            return self.api.spent.stand_in(request, count, _size(prompt, count))
        await self.api.preflight()
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.options.concurrency)
        async with self._sem:
            check = Validation(request, count, who=f"model {self.model}")
            text = None
            while text is None:
                reply = await self.api.create(prompt.system, check.extend(prompt.user), max_tokens)
                text = check.offer(reply.text, reply.stop, max_tokens=max_tokens)
        self._cache.put(key, self.model, text, _size(prompt, count), count(text))
        return text

    def _cite(self, request: SummaryRequest, messages: Sequence[Message]) -> str:
        m = CITATION_RE.search(request.citation)
        if m is None or not messages:
            return request.citation
        return citation(m.group(1), messages[0].index, messages[-1].index)

    def _segments(
        self, request: SummaryRequest, limit: int, count: Callable[[str], int]
    ) -> list[tuple[SummaryRequest, str]]:
        """The span cut by messages into sub-requests whose prompts fit; each with its rendering."""
        empty = build_prompt(replace(request, messages=(), previous=None), transcript="")
        room = limit - _size(empty, count) - 16  # the per-segment labels
        if room <= 0:
            raise SummarizerError(
                f"the summary model's window ({self.window:,} tokens) cannot hold the summarization prompt"
            )
        chunks: list[list[tuple[Message, str]]] = []
        used = 0
        for m in request.messages:
            text, cost = self._clip_to(render_message(m), room, count)
            if not chunks or used + cost > room:
                chunks.append([])
                used = 0
            chunks[-1].append((m, text))
            used += cost
        out = []
        for chunk in chunks:
            ms = tuple(m for m, _ in chunk)
            sub = replace(request, messages=ms, citation=self._cite(request, ms), previous=None)
            out.append((sub, "\n\n".join(t for _, t in chunk)))
        return out

    def _clip_to(self, text: str, room: int, count: Callable[[str], int]) -> tuple[str, int]:
        """A message's text and cost; one too large for a call keeps its head and tail, noting the cut."""
        clipped, chars, cost = text, len(text), count(text) + 2
        while cost > room:
            chars = int(chars * min(0.9, room / cost))
            if chars < 1:
                raise SummarizerError(
                    f"the summary model's window ({self.window:,} tokens) cannot hold even part of a message"
                )
            clipped = clip(text, chars, "characters of this message")
            cost = count(clipped) + 2
        return clipped, cost

    async def _summarize(self, request: SummaryRequest, count: Callable[[str], int]) -> str:
        limit = self.input_limit(request.budget)
        # A long history never goes out as one huge prompt, even when the model's window could take it.
        segment_limit = min(limit, max(1_000, self.options.segment_tokens))
        prompt = build_prompt(request)
        if _size(prompt, count) <= segment_limit:
            return await self._ask(request, prompt, count)
        segments = self._segments(request, segment_limit, count)
        if len(segments) == 1:  # one message was clipped to fit
            sub, text = segments[0]
            whole = replace(sub, citation=request.citation, previous=request.previous)
            single = build_prompt(whole, transcript=text)
            if _size(single, count) <= limit:
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
            if _size(prompt, count) <= limit:
                return await self._ask(request, prompt, count)
            # Too many partial summaries for one call: merge them in groups that fit, then again.
            inner = replace(request, previous=None)
            groups: list[list[_Part]] = []
            for part in parts:
                if groups and _size(self._merge_prompt(inner, [*groups[-1], part]), count) <= limit:
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
        return self.api.run(self._summarize(request, count))


register("anthropic", AnthropicSummarizer)
