"""Partial encodings (ctxc.tokens.partial): the tokens a batch can use count it exactly as the whole
vocabulary does, and a counting worker rents them until a whole build is cheaper."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import regex  # tiktoken's own dependency: the one Python engine with \p{L} and possessive quantifiers
import tiktoken
from hypothesis import example, given, settings
from hypothesis import strategies as st

import ctxc
from ctxc.tokens import partial
from ctxc.tokens import tiktoken_backend as tb
from ctxc.tokens.cost import message_parts
from tests.conftest import SAMPLES, corpus_params

NAMES = ("o200k_base", "cl100k_base")

# Every class the segment cuts are judged by, and the characters at their edges: ASCII letters, digits,
# the apostrophe and slash, symbols and controls, CR/LF and other whitespace (ASCII and not), and
# non-ASCII letters, marks, digits, numerals, titlecase and modifier letters, format characters,
# emoji, CJK and Hangul.
ALPHABET = (
    "aZqsStTdmlLvVeE'/;.,-_()\"{}#=*\\0123456789 \t\n\r\x0b\x0c\x1c\x1f\x00\x7f"
    "\x85\xa0\u1680\u2003\u2028\u2029\u202f\u3000\u200b\u180e\ufeff"
    "한글ᄀ\u0301\u0663\u2167²ǅʰéßİΣ😀中"
)
TEXTS = st.text(alphabet=ALPHABET, max_size=40) | st.text(max_size=60)


@functools.cache
def ranks(name: str) -> dict[bytes, int]:
    spec = tb.SPECS[name]
    return tb.parse_ranks(tb.read_rank_file(spec), in_order=True)


@functools.cache
def whole(name: str) -> tiktoken.Encoding:
    return tb.build_encoding(tb.SPECS[name], ranks=ranks(name))


def vocabulary(name: str) -> partial.PartialVocabulary[tiktoken.Encoding]:
    spec = tb.SPECS[name]
    build = lambda tokens: tb.build_encoding(spec, ranks=dict(tokens))  # noqa: E731
    return partial.PartialVocabulary(ranks(name), spec.longest_token, build)


def count(enc: tiktoken.Encoding, text: str) -> int:
    return tb.length_counter(enc)(text)


def test_bundled_vocabularies_hold_every_byte_and_their_stated_longest_token() -> None:
    for name in NAMES:
        table = ranks(name)
        assert max(map(len, table)) == tb.SPECS[name].longest_token
        assert all(bytes((b,)) in table for b in range(256))


@settings(max_examples=600, deadline=None)
@given(TEXTS)
@example("x;\n/\n/abc")  # a symbol's tail of CR, LF and slash runs into the next word
@example("  \tword 12345's\r\n\r\nfoo's'll")
@example("a\u0301b\u0663\u0664x²³")
def test_every_piece_lies_in_one_segment(text: str) -> None:
    segments = partial.segments([text], 128)
    for name in NAMES:
        for piece in regex.findall(tb.SPECS[name].pat_str, text):
            assert any(piece in segment for segment in segments), (name, piece, segments)


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXTS, max_size=4))
@example(["hello world", "안녕하세요, 세계", "<|endoftext|> is text", "", "x" * 500])
@example(["lone \ud800 surrogate", "\udfff"])  # counted after tiktoken's repair, as the whole encoding does
def test_partial_counts_equal_the_whole_encoding(texts: list[str]) -> None:
    for name in NAMES:
        enc = vocabulary(name).encoding_for(texts, max_work=10**9)
        assert enc is not None
        assert [count(enc, t) for t in texts] == [count(whole(name), t) for t in texts]


def substring_tokens(name: str, text: str) -> set[bytes]:
    """The vocabulary's tokens found inside the exact pieces of ``text``: what encoding it may use."""
    table, longest = ranks(name), tb.SPECS[name].longest_token
    found: set[bytes] = set()
    for piece in regex.findall(tb.SPECS[name].pat_str, text):
        data = piece.encode()
        for i in range(len(data)):
            found.update(
                t for t in (data[i:j] for j in range(i + 1, min(i + longest, len(data)) + 1)) if t in table
            )
    return found


# A symbol piece's tail of CR, LF and slashes runs on without end: a chunk follows it only so far, and
# long runs of those characters are cut into windows.
LONG_TAILS = [
    ";" + "\n/" * 3000,
    "x;" + "\n\n/\r\n/" * 800 + "abc",
    ";" + "\n" * 300 + "/" + "\n" * 200 + "//\n\n/abc",
    "/" * 2000 + "\n" * 130 + "/x",
    # Tails shorter than a window, with tokens (o200k's "\n\n\n//", "\r\n\r\n//") near their end.
    ";" + "\n" * 90 + "//x",
    "x;" + "\r\n" * 45 + "//y",
    "".join(random.Random(7).choice("\r\n/;") for _ in range(6000)),
]


@pytest.mark.parametrize("text", LONG_TAILS, ids=range(len(LONG_TAILS)))
def test_long_tails_keep_every_token_their_pieces_use(text: str) -> None:
    for name in NAMES:
        vocab = vocabulary(name)
        enc = vocab.encoding_for([text], max_work=10**9)
        assert enc is not None
        assert substring_tokens(name, text) <= enc._mergeable_ranks.keys()
        assert count(enc, text) == count(whole(name), text)


def transcript_texts(path: Path) -> Iterator[str]:
    for message in ctxc.load(path).messages:
        yield from message_parts(message)[0]


@pytest.mark.parametrize("path", [*corpus_params("**/*.jsonl"), *map(str, sorted(SAMPLES.glob("*.jsonl")))])
def test_partial_counts_equal_the_whole_encoding_on_real_transcripts(path: Path | str) -> None:
    texts = list(transcript_texts(Path(path)))
    for name in NAMES:
        enc = vocabulary(name).encoding_for(texts, max_work=10**9)
        assert enc is not None
        counter, reference = tb.length_counter(enc), tb.length_counter(whole(name))
        assert list(map(counter, texts)) == list(map(reference, texts))


def test_vocabulary_grows_by_what_each_batch_adds() -> None:
    vocab = vocabulary("o200k_base")
    first = vocab.encoding_for(["the same words", "again"], max_work=10**6)
    assert vocab.encoding_for(["again", "the same words"], max_work=10**6) is first  # nothing new
    grown = vocab.encoding_for(["different text 123"], max_work=10**6)
    assert grown is not None
    assert grown is not first
    for text in ("the same words", "different text 123"):
        assert count(grown, text) == count(whole("o200k_base"), text)
    assert vocab.encoding_for([], max_work=0) is grown


def test_a_batch_that_costs_more_than_the_work_allowed_gets_none() -> None:
    vocab = vocabulary("o200k_base")
    letters = "abcdefghij" * 100  # one segment of 1,000 letters: 1,000 x 128 byte strings
    assert vocab.encoding_for([letters], max_work=100_000) is None
    enc = vocab.encoding_for([letters], max_work=200_000)
    assert enc is not None
    assert count(enc, letters) == count(whole("o200k_base"), letters)


def fresh_state(monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path | None]:
    """The backend as in a new process, for o200k_base: nothing built, nothing rented."""
    key = ("o200k_base", None)
    for table in (tb._encodings, tb._partials):
        monkeypatch.delitem(table, key, raising=False)
    return key


def test_policy_rents_partial_encodings_then_builds_the_whole_one(monkeypatch: pytest.MonkeyPatch) -> None:
    key = fresh_state(monkeypatch)
    spec = tb.SPECS["o200k_base"]
    texts = ["a short batch", "of texts"]
    counts = list(map(tb.counter_for(spec, None, texts), texts))
    assert counts == [count(whole("o200k_base"), t) for t in texts]
    assert key in tb._partials
    assert key not in tb._encodings
    # A batch over the size limit is counted with the whole encoding, built from the parsed ranks.
    big = ["word "] * (tb.PARTIAL_MAX_CHARS // 5 + 1)
    assert tb.counter_for(spec, None, big)("word ") == count(whole("o200k_base"), "word ")
    assert key in tb._encodings
    assert key not in tb._partials
    # Once the whole encoding exists, even the smallest batch uses it.
    assert tb.counter_for(spec, None, ["hi"])("hi") == count(whole("o200k_base"), "hi")
    assert key not in tb._partials


def test_policy_stops_renting_once_the_time_spent_reaches_a_build(monkeypatch: pytest.MonkeyPatch) -> None:
    key = fresh_state(monkeypatch)
    spec = tb.SPECS["o200k_base"]
    assert tb.counter_for(spec, None, ["rented"])("rented") == count(whole("o200k_base"), "rented")
    assert key in tb._partials
    tb._partials[key].seconds = tb.PARTIAL_SECONDS
    assert tb.counter_for(spec, None, ["bought"])("bought") == count(whole("o200k_base"), "bought")
    assert key in tb._encodings
    assert key not in tb._partials


def test_counting_in_this_process_builds_the_whole_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    # Partial encodings are for a counting worker of a small input; a process counting for itself
    # (a library caller, a batch worker) may count many inputs, and builds the whole one at once.
    key = fresh_state(monkeypatch)
    assert tb.TiktokenTokenizer("o200k_base").count_batch(["a few", "words"]) == [2, 1]
    assert key in tb._encodings
    assert key not in tb._partials
