"""A fast o200k estimate without BPE: a linear model over counts of character classes and runs, taken
with whole-batch ``bytes`` operations (one ``translate`` maps each character to a class byte). The
model, its fit and its measured error are in ``APPROX.md``."""

from __future__ import annotations

import string
from collections.abc import Sequence
from operator import mul

# Class bytes. ASCII: a/A letters, d digit, p punctuation, s space or tab, n newline, "." anything else.
# Non-ASCII by UTF-8 lead byte (continuation bytes are deleted, so one class byte per character).


def _class_table() -> bytes:
    t = bytearray(b"." * 256)
    ascii_classes = {"a": string.ascii_lowercase, "A": string.ascii_uppercase, "d": string.digits}
    for cls, chars in {**ascii_classes, "p": string.punctuation}.items():
        for c in chars:
            t[ord(c)] = ord(cls)
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

#: Feature names and their coefficients, fitted by ``python bench/approx_error.py --fit``.
_FITTED: dict[str, float] = {
    "word_runs": 0.5843,  # runs of letters (ASCII, Latin-extended, Greek, Cyrillic): most words are 1 token
    "word_chunks": 0.4289,  # sum of ceil(run/5): long identifiers and foreign words split into more tokens
    "camel": 0.8185,  # lower->upper inside a word (camelCase boundaries split tokens)
    "digit_groups": 1.3745,  # sum of ceil(run/3): o200k splits numbers into 1-3 digit pieces
    "punct_runs": 0.6395,  # runs of ASCII punctuation (``"},{"`` is a piece of its own)
    "indents": 1.5437,  # runs of 2+ spaces/tabs (single spaces merge into words)
    "latin_ext": 0.3744,  # accented Latin letters (cost extra inside words)
    "greek": 0.2141,
    "cyrillic": 0.0903,
    "rtl": 0.4653,  # Hebrew, Arabic and neighbours
    "indic": 0.4586,  # Indic scripts and Thai
    "symbols": 0.53,  # U+2000-2FFF: dashes, quotes, arrows, box drawing
    "kana": 0.7409,  # U+3000-3FFF: kana and CJK punctuation
    "cjk": 0.8032,
    "hangul": 0.8048,
    "fullwidth": 1.4426,
    "astral": 2.6,  # emoji, rare ideographs: not fitted, the measured cost of an emoji
    "other": 1.6353,
}
#: Feature names, in the order :func:`feature_rows` returns them.
FEATURES: tuple[str, ...] = tuple(_FITTED)
COEFFICIENTS: tuple[float, ...] = tuple(_FITTED.values())


def _per_text(buf: bytes, keep: bytes) -> list[int]:
    """How many marker bytes each text holds: drop all but markers and joints, split at the joints."""
    return list(map(len, buf.translate(None, keep).split(b"|")))[1:]


def _starts(buf: bytes, member: bytes = b"x", mark: bytes = b"S") -> bytes:
    """Marks the first member of every run (every text starts after a "." too: see _columns)."""
    return buf.replace(b"." + member, b"." + mark)


def _features(texts: Sequence[str]) -> tuple[list[list[int]], dict[int, tuple[int, ...]]]:
    """The six ASCII features as one list per feature, and the non-ASCII class counts of the texts
    that have any, by text index. The texts are joined by NUL (the joint ``|``) + SOH (a ``.``), so no
    run crosses texts and every run begins with the pair ".member"."""
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


class ApproxTokenizer:
    """The fitted character-class estimate, for when exact BPE counts are not worth their cost."""

    name = "approx"

    def count(self, text: str) -> int:
        return estimate_many([text])[0]

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return estimate_many(texts)
