"""Exact counts from part of a BPE vocabulary: the tokens a batch of texts can use.

Building tiktoken's encoding costs time in proportion to its vocabulary (200,000 tokens for o200k), in
a Rust constructor that holds the GIL: more than the rest of a small ``analyze``. A small input uses a
few thousand of those tokens, and an encoding built from them alone is built far sooner and counts it
identically (bench/README.md has the figures). Why that holds:

tiktoken cuts a text into *pieces* with its encoding's regex, and encodes each piece by looking up byte
strings of that piece only (the whole piece, then adjacent parts it merges). So an encoding that holds
every vocabulary token occurring inside some piece finds the same ranks and makes the same merges.

The pieces are cut by the regex engine inside tiktoken, which Python cannot call, and Python's ``re``
has no ``\\p{L}``. So ctxc cuts coarser *segments*, at places where no piece of o200k's or cl100k's
pattern can run across, judged only from classes every Unicode version agrees on: ASCII letters,
ASCII digits, other ASCII, White_Space (a fixed list of 25 code points, which is what ``\\s`` means to
tiktoken's regex engine), and everything else, which might be a letter, a digit, a mark or a symbol
and is never cut next to except where every one of those would be.

1. :func:`_chunkers`/:data:`_SPACE`: a piece is either all whitespace (inside a run of it), or at most
   one whitespace character, then non-whitespace, then a tail of CR, LF and ``/`` (the
   symbol pattern ``' ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*'``). Chunks of those shapes cover every piece; they
   overlap, and are deduplicated (a transcript repeats its words). Such a tail can run on without
   end (``x;\\n/\\n/...``), and following it to its end from every slash in it would take time
   quadratic in its length. Only a piece's byte strings up to the longest token matter, so a chunk
   follows its tail for that many characters, and a run of CR, LF and ``/`` longer than that is
   also cut into windows twice that long, each starting that far after the last: a byte string
   starting before the tail then lies in the chunk, and one inside it in a window.
2. :data:`_CUT` splits a chunk where a piece never has character x followed by character y: a
   letter before an ASCII symbol other than the apostrophe of o200k's ``'s``/``'ll`` (or before CR,
   LF), anything but a digit (or an unknown) next to a digit, non-whitespace before whitespace
   other than CR and LF, and CR or LF before anything but whitespace and ``/``.

Every token a piece uses is then a byte string of one segment no longer than the vocabulary's longest
token. Those the vocabulary holds make the partial encoding. Tests hold segments to the exact pieces
(cut by the ``regex`` module, which tiktoken depends on), the tokens found to every token inside the
pieces of long tails, and counts to the whole encoding's.

Enumerating the byte strings of a segment costs its length times the longest token in the worst case
(a run of letters), so a batch whose segments would take longer than building the whole encoding gets
None, and the caller builds that (:mod:`ctxc.tokens.tiktoken_backend` decides).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

#: The encoding a vocabulary's builder makes (tiktoken.Encoding).
E = TypeVar("E")

# Unicode White_Space, stable since Unicode 6.3 (which dropped U+180E), and what \s matches in the
# Rust regex crate tiktoken uses; CR and LF apart, since the cuts treat them differently.
_WS_NOT_CRLF = "\t\x0b\x0c \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_WS = "\r\n" + _WS_NOT_CRLF
_ASCII_NOT_DIGIT = "\\x00-\\x2f\\x3a-\\x7f"
# ASCII that is neither a letter, a digit, whitespace nor the apostrophe; CR and LF added.
_AFTER_LETTER = "\\r\\n\\x00-\\x08\\x0e-\\x1f!-&(-/:-@\\[-`{-\\x7f"

_SPACE = re.compile(f"[{_WS}]+")
_TAIL_CHARS = "[\\r\\n/]"
_CUT = re.compile(
    "|".join(
        (
            f"(?<=[A-Za-z])(?=[{_AFTER_LETTER}])",
            f"(?<=[0-9])(?=[{_ASCII_NOT_DIGIT}{_WS}])",
            f"(?<=[{_ASCII_NOT_DIGIT}{_WS}])(?=[0-9])",
            f"(?<=[^{_WS}])(?=[{_WS_NOT_CRLF}])",
            f"(?<=[\\r\\n])(?=[^{_WS}/])",
        )
    )
)
#: Chunks this short are enumerated whole: cutting them costs more than it saves.
_CUT_FROM = 8


@functools.cache
def _chunkers(longest: int) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Chunks: one whitespace character at most, the non-whitespace after it, and up to ``longest``
    characters of its CR/LF/slash tail (looked at, not consumed, so the next chunk may start in it);
    and the runs of tail characters longer than ``longest``, to be cut into windows."""
    return (
        re.compile(f"([{_WS}]?[^{_WS}]+)(?=({_TAIL_CHARS}{{0,{longest}}}))"),
        re.compile(f"{_TAIL_CHARS}{{{longest + 1},}}"),
    )


def segments(texts: Sequence[str], longest: int) -> set[str]:
    """The distinct segments of ``texts``: every byte string of at most ``longest`` bytes of a piece of
    o200k's or cl100k's pattern lies in one (as does every piece of at most ``longest`` characters)."""
    words, long_tails = _chunkers(longest)
    chunks: set[str] = set()
    for text in texts:
        chunks.update(map("".join, words.findall(text)))
        chunks.update(_SPACE.findall(text))
        for run in long_tails.findall(text):
            chunks.update(run[i : i + 2 * longest] for i in range(0, len(run) - longest, longest))
    out: set[str] = set()
    for chunk in chunks:
        if len(chunk) < _CUT_FROM:
            out.add(chunk)
        else:
            out.update(_CUT.split(chunk))
    return out


def _utf8(segment: str) -> bytes:
    try:
        return segment.encode()
    except UnicodeEncodeError:
        # A lone surrogate: tiktoken encodes such text after this same repair (Encoding.encode_ordinary).
        return segment.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


class PartialVocabulary(Generic[E]):
    """Partial encodings of one vocabulary, grown batch by batch.

    The tokens found so far are kept, with the segments already looked through, so a later batch that
    repeats earlier text (compaction counts its output after its input) costs only what is new.
    """

    def __init__(self, ranks: dict[bytes, int], longest: int, build: Callable[[dict[bytes, int]], E]) -> None:
        """``ranks`` is the whole vocabulary, ``longest`` the length of its longest token in bytes, and
        ``build`` makes an encoding of some of its tokens (it must copy the dict it is given)."""
        self.ranks = ranks
        self._build = build
        self._longest = longest
        self._seen: set[str] = set()
        # Every byte is a token of both vocabularies; with them all, an encoding can be built for no text.
        single = (bytes((i,)) for i in range(256))
        self._tokens = {byte: ranks[byte] for byte in single if byte in ranks}
        self._encoding: E | None = None
        #: Time spent making partial encodings, which the caller adds up to decide when to build the
        #: whole one instead.
        self.seconds = 0.0

    def encoding_for(self, texts: Sequence[str], max_work: int) -> E | None:
        """An encoding that counts ``texts`` exactly as the whole vocabulary does, or None if finding its
        tokens would take more than ``max_work`` byte strings looked up."""
        new = segments(texts, self._longest) - self._seen
        longest = self._longest
        work = 0
        encoded: list[bytes] = []
        for segment in new:
            data = _utf8(segment)
            work += len(data) * min(len(data), longest)
            if work > max_work:
                return None
            encoded.append(data)
        found: set[bytes] = set()
        for data in encoded:
            n = len(data)
            found.update({data[i:j] for i in range(n) for j in range(i + 1, min(i + longest, n) + 1)})
        found &= self.ranks.keys()
        found -= self._tokens.keys()
        self._seen |= new
        if found or self._encoding is None:
            ranks = self.ranks
            self._tokens.update({token: ranks[token] for token in found})
            self._encoding = self._build(self._tokens)
        return self._encoding
