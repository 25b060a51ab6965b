"""Offline token counting: the tokenizers ctxc can count with, behind one small protocol.

``o200k_base`` (the default) and ``cl100k_base`` are OpenAI's BPE encodings, run by tiktoken from
files shipped in ``ctxc/tokens/data`` (no network, ever). ``approx`` is a fitted character-class
estimate for when speed matters more than exactness (see ``ctxc/tokens/APPROX.md``).

Importing this package is cheap: it neither imports tiktoken nor reads an encoding file. The BPE
ranks are loaded, once per process, on the first count.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ctxc.errors import UsageError

if TYPE_CHECKING:
    from ctxc.tokens.cache import CountingService

DEFAULT_TOKENIZER = "o200k_base"
TOKENIZERS: tuple[str, ...] = ("o200k_base", "cl100k_base", "approx", "anthropic")
#: The Claude model ``anthropic`` counts for when no Claude ``--model`` is given.
DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"


class Tokenizer(Protocol):
    """Counts tokens of plain text. Special-token text such as ``<|endoftext|>`` counts as text."""

    name: str

    def count(self, text: str) -> int: ...

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """Counts of ``texts`` in order; may use threads (tiktoken releases the GIL)."""
        ...


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


def make_counting_service(
    name: str = DEFAULT_TOKENIZER, *, use_cache: bool = True, model: str | None = None, concurrency: int = 4
) -> CountingService:
    """The counting service analyze and compact use: tokenizer ``name`` with the on-disk count cache
    (off when ``use_cache`` is false or ``CTXC_NO_CACHE=1``)."""
    from ctxc.tokens.cache import CountingService, TokenCache

    tokenizer = get_tokenizer(name, model=model, concurrency=concurrency)
    return CountingService(tokenizer, TokenCache(disabled=not use_cache))


__all__ = ["DEFAULT_TOKENIZER", "TOKENIZERS", "Tokenizer", "get_tokenizer", "make_counting_service"]


def counting_processes(counter: object, size: int) -> contextlib.AbstractContextManager[bool]:
    """Count in worker processes, one per core, while the caller parses an input of ``size`` bytes.

    For tiktoken counters and inputs of :data:`ctxc.tokens.workers.PROCESS_MIN_BYTES` or more only
    (see :func:`ctxc.tokens.workers.worker_processes`); anything else gets a context that does nothing.
    Use it around the whole read-and-count, before starting any thread of your own.
    """
    from ctxc.system import cpu_count
    from ctxc.tokens import workers

    tokenizer = getattr(counter, "tokenizer", counter)
    name, path = getattr(tokenizer, "name", ""), getattr(tokenizer, "path", None)
    if size < workers.PROCESS_MIN_BYTES or name not in workers.BUNDLED:
        return contextlib.nullcontext(False)
    return workers.worker_processes(name, path, cpu_count())
