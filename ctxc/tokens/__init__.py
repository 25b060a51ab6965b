"""Offline token counting: the tokenizers ctxc can count with, and the counters built on them.

``o200k_base`` (the default) and ``cl100k_base`` are OpenAI's BPE encodings, run by tiktoken from
files shipped in ``ctxc/tokens/data`` (no network, ever). ``approx`` is a fitted character-class
estimate for when speed matters more than exactness (see ``ctxc/tokens/APPROX.md``). ``anthropic``
counts with Claude's own tokenizer through the API.

Importing this package is cheap: it neither imports tiktoken nor reads an encoding file. The BPE
ranks are loaded, once per process, on the first count.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

from ctxc.errors import UsageError
from ctxc.system import cpu_count
from ctxc.tokens import workers
from ctxc.tokens.base import (
    DEFAULT_ANTHROPIC_MODEL,
    DEFAULT_TOKENIZER,
    PROCESS_MIN_BYTES,
    TOKENIZERS,
    USAGE_TOKENIZER,
    Counter,
    RecordedUsageOnly,
    StartingCounter,
    StartingTokenizer,
    Tokenizer,
)

if TYPE_CHECKING:
    from ctxc.tokens.cache import CachedCounter

_instances: dict[str, Tokenizer] = {}
_lock = threading.Lock()


def get_tokenizer(
    name: str = DEFAULT_TOKENIZER,
    *,
    model: str | None = None,
    concurrency: int = 4,
    max_retries: int = 2,
    timeout: float = 60.0,
) -> Tokenizer:
    """The shared tokenizer called ``name``; an unknown name raises :class:`UsageError` listing them.

    ``anthropic`` counts with Claude's own tokenizer through the API (``messages.count_tokens``) for
    ``model`` when it is a Claude model (else :data:`DEFAULT_ANTHROPIC_MODEL`); the other arguments
    only concern it. The SDK is imported only then.
    """
    if name not in TOKENIZERS:
        raise UsageError(f"unknown tokenizer {name!r}; choose one of: {', '.join(TOKENIZERS)}")
    claude = model if model and model.startswith("claude") else DEFAULT_ANTHROPIC_MODEL
    key = f"anthropic:{claude}" if name == "anthropic" else name
    tok = _instances.get(key)
    if tok is not None:
        return tok
    with _lock:
        tok = _instances.get(key)
        if tok is None:
            if name == "approx":
                from ctxc.tokens.approx import ApproxTokenizer

                tok = ApproxTokenizer()
            elif name == "anthropic":
                from ctxc.tokens.anthropic_backend import AnthropicTokenizer

                tok = AnthropicTokenizer(
                    claude, concurrency=concurrency, max_retries=max_retries, timeout=timeout
                )
            else:
                from ctxc.tokens.tiktoken_backend import TiktokenTokenizer

                tok = TiktokenTokenizer(name)
            _instances[key] = tok
    return tok


def make_cached_counter(
    name: str = DEFAULT_TOKENIZER, *, use_cache: bool = True, model: str | None = None, concurrency: int = 4
) -> CachedCounter:
    """The cached counter analyze and compact use: tokenizer ``name`` with the on-disk count cache
    (off when ``use_cache`` is false or ``CTXC_NO_CACHE=1``)."""
    # Imported here, not above: ctxc/__main__.py forks the counting workers after importing this
    # package, and the cache's SQLite and archive modules would delay them (bench/README.md).
    from ctxc.tokens.cache import CachedCounter, TokenCache

    tokenizer = get_tokenizer(name, model=model, concurrency=concurrency)
    return CachedCounter(tokenizer, TokenCache(disabled=not use_cache))


def make_counter(
    tokenizer: str, *, use_cache: bool = True, model: str | None = None, concurrency: int = 4
) -> Counter:
    """The counter for a tokenizer name: its cached counter, with the on-disk count cache unless
    disabled; for ``usage`` (recorded usage, see :mod:`ctxc.usage_scan`) one that counts nothing.

    ``model`` and ``concurrency`` only matter for ``anthropic``, which counts with that Claude model's
    tokenizer through the API, ``concurrency`` requests at a time.
    """
    if tokenizer == USAGE_TOKENIZER:
        return RecordedUsageOnly()
    return make_cached_counter(tokenizer, use_cache=use_cache, model=model, concurrency=concurrency)


def counting_processes(counter: object, size: int) -> contextlib.AbstractContextManager[bool]:
    """Count in worker processes, one per core, while the caller parses an input of ``size`` bytes.

    For tiktoken counters and inputs of :data:`ctxc.tokens.workers.PROCESS_MIN_BYTES` or more only
    (see :func:`ctxc.tokens.workers.worker_processes`); anything else gets a context that does nothing.
    Use it around the whole read-and-count, before starting any thread of your own.
    """
    tokenizer = getattr(counter, "tokenizer", counter)
    name, path = getattr(tokenizer, "name", ""), getattr(tokenizer, "path", None)
    if size < workers.PROCESS_MIN_BYTES or name not in workers.BUNDLED:
        return contextlib.nullcontext(False)
    return workers.worker_processes(name, path, cpu_count())


__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_TOKENIZER",
    "PROCESS_MIN_BYTES",
    "TOKENIZERS",
    "USAGE_TOKENIZER",
    "Counter",
    "RecordedUsageOnly",
    "StartingCounter",
    "StartingTokenizer",
    "Tokenizer",
    "counting_processes",
    "get_tokenizer",
    "make_cached_counter",
    "make_counter",
]
