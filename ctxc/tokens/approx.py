"""A fast o200k estimate without BPE: a linear model over character-class features.

Why not ``len(text) / 4``: that rule reads 40-57% low on Korean, Japanese and Chinese, 55-65% low on
hashes and base64, and 10-40% low on agent tool output, because o200k spends far more tokens per
character on those than on English prose.

How: a batch of texts is joined, encoded to UTF-8 and mapped with one ``bytes.translate`` (which also
drops UTF-8 continuation bytes) to one class byte per character: ASCII lower/upper letter, digit,
punctuation, space, newline, and by UTF-8 lead byte Latin-extended, Greek, Cyrillic, Hebrew/Arabic,
Indic/Thai, symbols, kana/CJK punctuation, CJK ideographs, Hangul, fullwidth, astral (emoji). The
features are counts of classes and of runs, computed with whole-batch ``bytes`` operations in C
(no per-character Python loop, no regex). The coefficients are a non-negative least-squares fit
(weights 1/tokens) made by ``bench/approx_error.py --fit`` against o200k_base on the corpus
(/work/shared/corpus: the string values of every record) plus Debian's gettext catalogs in 13
languages, the Korean manual pages and Vim's Korean/Japanese/Chinese tutors.

Measured error of a set's total tokens vs o200k_base (``bench/approx_error.py``, see APPROX.md):

* corpus, 23 files: mean |error| 2.9%, worst -8.3% (chars/4: mean 13.4%, worst -40.6%)
* Korean: UI strings +1.5%, manual pages -2.2%, Vim tutor -1.8% (chars/4: -40% to -57%); everyday
  prose costs o200k fewer tokens per syllable, and a news-style paragraph reads +20%
* all 40 fitted sets (corpus + 13 languages + man pages + tutors): mean 3.5%, worst -15.7%
  (Traditional Chinese, which o200k splits finer than the Simplified Chinese the CJK rate fits)
* single corpus strings of >= 50 tokens: |error| median 5.5%, p90 14.3%, p99 24.4%
* adversarial: random base64 -23%, hex +17%, UUIDs +11%, one letter repeated -31%
* speed: 13-15 MB/s over corpus strings (86k strings averaging 100 chars), ~21 MB/s on one large
  text; o200k measures 5-6 MB/s single-threaded, 9-10 MB/s batched on 2 cores, on the same text
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import mul

# Class bytes. ASCII: a/A letters, d digit, p punctuation, s space or tab, n newline, "." anything else.
# Non-ASCII by UTF-8 lead byte (continuation bytes are deleted, so one class byte per character).
_ASCII_PUNCT = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def _class_table() -> bytes:
    t = bytearray(b"." * 256)
    for c in range(ord("a"), ord("z") + 1):
        t[c] = ord("a")
    for c in range(ord("A"), ord("Z") + 1):
        t[c] = ord("A")
    for c in range(ord("0"), ord("9") + 1):
        t[c] = ord("d")
    for c in _ASCII_PUNCT:
        t[c] = ord("p")
    t[ord(" ")] = t[ord("\t")] = ord("s")
    t[ord("\n")] = t[ord("\r")] = ord("n")
    t[0] = ord("|")  # NUL: the joint between the texts of a batch
    leads = {
        0xC2: "o",  # U+0080-00BF Latin-1 symbols and NBSP
        **dict.fromkeys(range(195, 206), "L"),  # U+00C0-037F Latin extended, IPA, combining marks
        **dict.fromkeys(range(206, 208), "G"),  # Greek
        **dict.fromkeys(range(208, 213), "Y"),  # Cyrillic
        **dict.fromkeys(range(213, 224), "R"),  # Armenian, Hebrew, Arabic, Syriac, Thaana
        0xE0: "I",  # U+0800-0FFF Indic scripts, Thai, Lao, Tibetan
        0xE1: "L",  # U+1000-1FFF mostly Latin Extended Additional (Vietnamese) in practice
        0xE2: "S",  # U+2000-2FFF punctuation, arrows, box drawing, dingbats
        0xE3: "K",  # U+3000-3FFF CJK punctuation, kana, CJK extension A
        **dict.fromkeys(range(228, 234), "C"),  # U+4000-9FFF CJK ideographs
        **dict.fromkeys(range(234, 238), "H"),  # U+A000-DFFF mostly Hangul syllables
        0xEE: "o",  # private use
        0xEF: "F",  # U+F000-FFFF compatibility ideographs, fullwidth forms, specials
        **dict.fromkeys(range(240, 245), "E"),  # astral: emoji, rare ideographs
    }
    for b, cls in leads.items():
        t[b] = ord(cls)
    return bytes(t)


_CLASSES = _class_table()
_CONTINUATION = bytes(range(0x80, 0xC0))


_SEP = ord("|")  # class byte of NUL, which joins the texts of a batch


def _member_table(members: bytes) -> bytes:
    """Maps the class bytes in ``members`` to ``x``, the joint to ``|``, and every other byte to ``.``."""
    t = bytearray(b"." * 256)
    for c in members:
        t[c] = ord("x")
    t[_SEP] = _SEP
    return bytes(t)


def _keep(*kept: int) -> bytes:
    return bytes(c for c in range(256) if c not in kept and c != _SEP)


_WORD = _member_table(b"aALGY")
_DIGIT = _member_table(b"d")
_PUNCT = _member_table(b"p")
_SPACE = _member_table(b"s")
_KEEP_S = _keep(ord("S"))
_KEEP_T = _keep(ord("T"))
_KEEP_WIDE = _keep(*b"LGYRIKSCHFEo")
_WIDE_CLASSES = (b"L", b"G", b"Y", b"R", b"I", b"S", b"K", b"C", b"H", b"F", b"E", b"o")

#: Feature names, in the order :func:`feature_rows` returns them.
FEATURES: tuple[str, ...] = (
    "word_runs",  # runs of letters (ASCII, Latin-extended, Greek, Cyrillic): most words are 1 token
    "word_chunks",  # sum of ceil(run/5): long identifiers and foreign words split into more tokens
    "camel",  # lower->upper inside a word (camelCase boundaries split tokens)
    "digit_groups",  # sum of ceil(run/3): o200k splits numbers into 1-3 digit pieces
    "punct_runs",  # runs of ASCII punctuation (``"},{"`` is a piece of its own)
    "indents",  # runs of 2+ spaces/tabs (indentation is a token; single spaces merge into words)
    "latin_ext",  # accented Latin letters (cost extra inside words)
    "greek",
    "cyrillic",
    "rtl",  # Hebrew, Arabic and neighbours
    "indic",  # Indic scripts and Thai
    "symbols",  # U+2000-2FFF: dashes, quotes, arrows, box drawing
    "kana",  # U+3000-3FFF: kana and CJK punctuation
    "cjk",
    "hangul",
    "fullwidth",
    "astral",
    "other",
)


def _per_text(buf: bytes, keep: bytes) -> list[int]:
    """How many marker bytes each text holds: drop all but markers and joints, split at the joints."""
    return list(map(len, buf.translate(None, keep).split(b"|")))[1:]


def _starts(buf: bytes, member: bytes = b"x", mark: bytes = b"S") -> bytes:
    """Marks the first member of every run (every text starts after a "." too: see _columns)."""
    return buf.replace(b"." + member, b"." + mark)


def _features(texts: Sequence[str]) -> tuple[list[list[int]], dict[int, tuple[int, ...]]]:
    """The six ASCII features as one list per feature, and the non-ASCII class counts of the texts
    that have any, by text index.

    The texts are joined by NUL + SOH and every step is one C-level ``bytes`` operation over the
    whole batch: per-text Python work is a ``len`` per feature. Each character becomes exactly one
    class byte, NUL becomes the joint ``|`` and SOH a ``.``, so no run crosses from one text into
    the next and every run, even one at the start of a text, begins with the pair ".member".
    """
    if any("\0" in t for t in texts):
        texts = [t.replace("\0", "\x01") for t in texts]  # both are class "." : same features
    joined = "\0\x01" + "\0\x01".join(texts)
    m = joined.encode("utf-8", "surrogatepass").translate(_CLASSES, _CONTINUATION)
    word = _starts(m.translate(_WORD))
    digit = _starts(m.translate(_DIGIT))
    word_runs = _per_text(word, _KEEP_S)
    digit_runs = _per_text(digit, _KEEP_S)
    # After the marked first character, each further full chunk of a run is one more piece.
    word_more = _per_text(word.replace(b"xxxxx", b"T...."), _KEEP_T)
    digit_more = _per_text(digit.replace(b"xxx", b"T.."), _KEEP_T)
    head = [
        word_runs,
        [r + x for r, x in zip(word_runs, word_more, strict=True)],
        _per_text(m.replace(b"aA", b"aT"), _KEEP_T),
        [r + x for r, x in zip(digit_runs, digit_more, strict=True)],
        _per_text(_starts(m.translate(_PUNCT)), _KEEP_S),
        # Indent runs are marked "SS": halve.
        [v // 2 for v in _per_text(_starts(m.translate(_SPACE), b"xx", b"SS"), _KEEP_S)],
    ]
    wide: dict[int, tuple[int, ...]] = {}
    if not joined.isascii():
        for i, seg in enumerate(m.translate(None, _KEEP_WIDE).split(b"|")[1:]):
            if seg:
                wide[i] = tuple(seg.count(cls) for cls in _WIDE_CLASSES)
    return head, wide


_NO_WIDE = (0,) * len(_WIDE_CLASSES)


def feature_rows(texts: Sequence[str]) -> list[tuple[int, ...]]:
    """:data:`FEATURES` counts of each text (for fitting and tests)."""
    if not texts:
        return []
    head, wide = _features(texts)
    return [(*row, *wide.get(i, _NO_WIDE)) for i, row in enumerate(zip(*head, strict=True))]


def features(text: str) -> tuple[int, ...]:
    return feature_rows([text])[0]


#: Fitted by ``python bench/approx_error.py --fit`` (see APPROX.md); one per feature.
COEFFICIENTS: tuple[float, ...] = (
    0.5843,  # word_runs
    0.4289,  # word_chunks
    0.8185,  # camel
    1.3745,  # digit_groups
    0.6395,  # punct_runs
    1.5437,  # indents
    0.3744,  # latin_ext
    0.2141,  # greek
    0.0903,  # cyrillic
    0.4653,  # rtl
    0.4586,  # indic
    0.53,  # symbols
    0.7409,  # kana
    0.8032,  # cjk
    0.8048,  # hangul
    1.4426,  # fullwidth
    2.6,  # astral
    1.6353,  # other
)


def estimate_many(texts: Sequence[str], coefficients: Sequence[float] = COEFFICIENTS) -> list[int]:
    """Estimated o200k tokens of each text: 0 for an empty string, at least 1 otherwise."""
    if not texts:
        return []
    head, wide = _features(texts)
    c0, c1, c2, c3, c4, c5 = coefficients[:6]
    c_wide = coefficients[6:]
    totals = [
        c0 * a + c1 * b + c2 * c + c3 * d + c4 * e + c5 * f for a, b, c, d, e, f in zip(*head, strict=True)
    ]
    for i, counts in wide.items():
        totals[i] += sum(map(mul, c_wide, counts))
    return [max(1, round(t)) if text else 0 for t, text in zip(totals, texts, strict=True)]


def estimate(text: str, coefficients: Sequence[float] = COEFFICIENTS) -> int:
    return estimate_many([text], coefficients)[0]


class ApproxTokenizer:
    """The fitted character-class estimate, for when exact BPE counts are not worth their cost."""

    name = "approx"

    def count(self, text: str) -> int:
        return estimate(text)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return estimate_many(texts)
