"""Token counting: tiktoken's ``o200k_base`` and ``cl100k_base`` from files shipped in
``ctxc/tokens/data`` (no network), the ``approx`` estimate (``APPROX.md``) and Claude's ``anthropic``
API counts. Importing is cheap: tiktoken and an encoding are loaded on the first count."""

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
    TOKENIZERS,
    USAGE_TOKENIZER,
    Counter,
    RecordedUsageOnly,
    StartingCounter,
    StartingTokenizer,
    Tokenizer,
    checked,
)
from ctxc.tokens.workers import PROCESS_MIN_BYTES

if TYPE_CHECKING:
    from ctxc.tokens.cache import CachedCounter

_instances: dict[str, Tokenizer] = {}
_lock = threading.Lock()


def get_tokenizer(
    name: str = DEFAULT_TOKENIZER, *, model: str | None = None, concurrency: int = 4
) -> Tokenizer:
    """The shared tokenizer called ``name`` (a :class:`UsageError` when unknown). ``anthropic`` counts
    for ``model`` when it is a Claude model (else :data:`DEFAULT_ANTHROPIC_MODEL`), ``concurrency``
    requests at a time (as its first use asked)."""
    if name not in TOKENIZERS:
        raise UsageError(f"unknown tokenizer {name!r}; choose one of: {', '.join(TOKENIZERS)}")
    claude = model if model and model.startswith("claude") else DEFAULT_ANTHROPIC_MODEL
    key = f"anthropic:{claude}" if name == "anthropic" else name
    with _lock:
        tok = _instances.get(key)
        if tok is None:
            if name == "approx":
                from ctxc.tokens.approx import ApproxTokenizer

                tok = ApproxTokenizer()
            elif name == "anthropic":
                from ctxc.tokens.anthropic_backend import AnthropicTokenizer

                tok = AnthropicTokenizer(claude, concurrency=concurrency)
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
    """The counter for a tokenizer name: :func:`make_cached_counter`, or for ``usage`` (recorded usage,
    see :mod:`ctxc.usage_scan`) one that counts nothing."""
    if tokenizer == USAGE_TOKENIZER:
        return RecordedUsageOnly()
    return make_cached_counter(tokenizer, use_cache=use_cache, model=model, concurrency=concurrency)


def counting_processes(counter: object, size: int) -> contextlib.AbstractContextManager[bool]:
    """Count in worker processes, one per core, while the caller parses an input of ``size`` bytes
    (tiktoken counters and inputs of ``PROCESS_MIN_BYTES`` or more; else a context that does nothing).
    Use it around the whole read-and-count, before starting any thread of your own."""
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
    "checked",
    "counting_processes",
    "get_tokenizer",
    "make_cached_counter",
    "make_counter",
]
