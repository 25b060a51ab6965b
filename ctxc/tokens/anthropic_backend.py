"""Exact Claude token counts through the API's ``messages.count_tokens`` (the tokenizer is not
published): each distinct text is its own one-message request, ``concurrency`` at a time, less the
request's fixed framing, so a count means what an o200k count means. The SDK retries transient errors."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from ctxc.errors import AuthError, CtxcError, ExitCode, ModelError

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic


T = TypeVar("T")

#: The text whose count, minus its one token, is a message's fixed framing.
_PROBE = "a"
#: A text of this many characters or more that the API refuses as too large is counted in parts.
_SPLIT_MIN_CHARS = 2


class TokenCountError(CtxcError):
    """Counting through the API failed after retries; exit 9, as for summarizers: a model API call failed."""

    exit_code = ExitCode.SUMMARIZER


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, even when called inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class AnthropicTokenizer:
    """The ``anthropic`` tokenizer: Claude's own counts for ``model`` (in ``name``, which keys the
    token cache: counts of different models must never mix)."""

    def __init__(
        self, model: str, *, concurrency: int = 4, max_retries: int = 2, timeout: float = 60.0
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.model = model
        self.name = f"anthropic:{model}"
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.timeout = timeout
        #: Requests made (the preflight model lookup and overhead probe included).
        self.requests = 0
        #: The fixed per-request tokens subtracted from every count (None until measured).
        self.overhead: int | None = None

    def count(self, text: str) -> int:
        return self.count_batch([text])[0]

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """Counts of ``texts`` in order: one request per distinct non-empty text, ``concurrency`` at once."""
        distinct = sorted({t for t in texts if t})
        if not distinct:
            return [0] * len(texts)
        counts = _run(self._count_distinct(distinct))
        known = dict(zip(distinct, counts, strict=True))
        return [known[t] if t else 0 for t in texts]

    def _client(self) -> AsyncAnthropic:
        from anthropic import AsyncAnthropic

        # Base URL and key come from ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY, as the SDK reads them.
        return AsyncAnthropic(max_retries=self.max_retries, timeout=self.timeout)

    async def _count_distinct(self, texts: list[str]) -> list[int]:
        client = self._client()
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            await client.close()
            raise AuthError(
                "ANTHROPIC_API_KEY is not set: {tokenizer} anthropic counts tokens through the Anthropic API",
                options=("tokenizer",),
            )
        out = [0] * len(texts)
        async with client:
            await self._preflight(client)
            overhead = self.overhead or 0
            gate = asyncio.Semaphore(self.concurrency)

            async def one(i: int) -> None:
                out[i] = max(0, await self._count_text(client, gate, texts[i]) - overhead)

            try:
                async with asyncio.TaskGroup() as group:
                    for i in range(len(texts)):
                        group.create_task(one(i))
            except ExceptionGroup as eg:
                # TaskGroup wraps failures; surface the first one as the ctxc error it already is.
                raise _first(eg) from None
        return out

    async def _preflight(self, client: AsyncAnthropic) -> None:
        """Once per tokenizer: check key and model (one-line errors), then measure the overhead."""
        if self.overhead is not None:
            return
        self.requests += 1
        try:
            await client.models.retrieve(self.model)
        except Exception as exc:
            raise self._error(exc) from exc
        self.overhead = max(0, await self._request(client, _PROBE) - 1)

    async def _count_text(self, client: AsyncAnthropic, gate: asyncio.Semaphore, text: str) -> int:
        """The raw count of ``text`` as a one-message request (overhead included)."""
        from anthropic import APIStatusError

        if not text.strip():  # the API refuses a whitespace-only text
            async with gate:
                return max(0, await self._request(client, f"|{text}|") - 2)
        try:
            async with gate:
                return await self._request(client, text)
        except TokenCountError as exc:
            cause = exc.__cause__
            too_large = isinstance(cause, APIStatusError) and cause.status_code == 413
            if not too_large or len(text) < _SPLIT_MIN_CHARS:
                raise
        # Too large for one request: count two halves (each carries the overhead once).
        head, tail = _halves(text)
        return (
            await self._count_text(client, gate, head)
            + await self._count_text(client, gate, tail)
            - (self.overhead or 0)
        )

    async def _request(self, client: AsyncAnthropic, text: str) -> int:
        self.requests += 1
        try:
            result = await client.messages.count_tokens(
                model=self.model, messages=[{"role": "user", "content": text}]
            )
        except Exception as exc:
            raise self._error(exc) from exc
        return int(result.input_tokens)

    def _error(self, exc: BaseException) -> CtxcError:
        """The ctxc error for an SDK failure: auth → exit 10, unknown model → 11, the rest → 9."""
        import anthropic

        if isinstance(exc, CtxcError):
            return exc
        if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
            return AuthError(f"the Anthropic API rejected the key ({exc.status_code}: {_api_message(exc)})")
        if isinstance(exc, anthropic.NotFoundError):
            return ModelError(f"unknown model {self.model!r} ({_api_message(exc)})")
        retries = f"after {self.max_retries} retr{'y' if self.max_retries == 1 else 'ies'}"
        if isinstance(exc, anthropic.APITimeoutError):
            return TokenCountError(f"token counting failed: no answer within {self.timeout:g}s {retries}")
        if isinstance(exc, anthropic.APIStatusError):
            return TokenCountError(
                f"token counting failed: HTTP {exc.status_code} ({_api_message(exc)}) {retries}"
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return TokenCountError(f"token counting failed: cannot reach the Anthropic API ({exc})")
        return TokenCountError(f"token counting failed: {type(exc).__name__}: {exc}")


def _api_message(exc: Any) -> str:
    msg = getattr(exc, "api_message", None) or getattr(exc, "message", None) or str(exc)
    return " ".join(str(msg).split())[:200]


def _first(eg: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = eg
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _halves(text: str) -> tuple[str, str]:
    """Split near the middle, at a line break when there is one in the middle half."""
    mid = len(text) // 2
    cut = text.rfind("\n", len(text) // 4, mid + len(text) // 4)
    cut = cut + 1 if cut > 0 else mid
    return text[:cut], text[cut:]


__all__ = ["AnthropicTokenizer", "TokenCountError"]
