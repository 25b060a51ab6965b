"""Offline token counting: the tokenizers ctxc can count with, behind one small protocol.

``o200k_base`` (the default) and ``cl100k_base`` are OpenAI's BPE encodings, run by tiktoken from
files shipped in ``ctxc/tokens/data`` (no network, ever). ``approx`` is a fitted character-class
estimate for when speed matters more than exactness (see ``ctxc/tokens/APPROX.md``).

Importing this package is cheap: it neither imports tiktoken nor reads an encoding file. The BPE
ranks are loaded, once per process, on the first count.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ctxc.errors import UsageError

if TYPE_CHECKING:
    from ctxc.tokens.cache import CountingService

DEFAULT_TOKENIZER = "o200k_base"
TOKENIZERS: tuple[str, ...] = ("o200k_base", "cl100k_base", "approx")


class Tokenizer(Protocol):
    """Counts tokens of plain text. Special-token text such as ``<|endoftext|>`` counts as text."""

    name: str

    def count(self, text: str) -> int: ...

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """Counts of ``texts`` in order; may use threads (tiktoken releases the GIL)."""
        ...


_instances: dict[str, Tokenizer] = {}
_lock = threading.Lock()


def get_tokenizer(name: str = DEFAULT_TOKENIZER) -> Tokenizer:
    """The shared tokenizer called ``name``; an unknown name raises :class:`UsageError` listing them."""
    tok = _instances.get(name)
    if tok is not None:
        return tok
    if name not in TOKENIZERS:
        raise UsageError(f"unknown tokenizer {name!r}; choose one of: {', '.join(TOKENIZERS)}")
    with _lock:
        tok = _instances.get(name)
        if tok is None:
            if name == "approx":
                from ctxc.tokens.approx import ApproxTokenizer

                tok = ApproxTokenizer()
            else:
                from ctxc.tokens.tiktoken_backend import TiktokenTokenizer

                tok = TiktokenTokenizer(name)
            _instances[name] = tok
    return tok


def make_counting_service(name: str = DEFAULT_TOKENIZER, *, use_cache: bool = True) -> CountingService:
    """The counting service analyze and compact use: tokenizer ``name`` with the on-disk count cache
    (off when ``use_cache`` is false or ``CTXC_NO_CACHE=1``)."""
    from ctxc.tokens.cache import CountingService, TokenCache

    return CountingService(get_tokenizer(name), TokenCache(disabled=not use_cache))


__all__ = ["DEFAULT_TOKENIZER", "TOKENIZERS", "Tokenizer", "get_tokenizer", "make_counting_service"]
