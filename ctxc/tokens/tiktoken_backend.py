"""Exact BPE counts with tiktoken, fully offline.

``tiktoken.get_encoding`` downloads its rank files (or reads them from a cache keyed by URL), which a
tool that must run on an air-gapped machine cannot rely on. ctxc ships the two rank files itself
(``ctxc/tokens/data``), checks their SHA-256 against the hashes tiktoken pins, parses them, and builds
the :class:`tiktoken.Encoding` with the same split pattern and special tokens as
``tiktoken_ext/openai_public.py``, so counts are identical to tiktoken's own.

Nothing happens at import: tiktoken is imported and the encoding built on the first count, once per
process, under a lock so concurrent first calls load it once. Counts are usually made by worker
processes (:mod:`ctxc.tokens.workers`), which may count a small input with partial encodings
(:mod:`ctxc.tokens.partial`).
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ctxc.errors import CtxcError
from ctxc.system import cache_dir, env_flag

if TYPE_CHECKING:
    import tiktoken

    from ctxc.tokens.partial import PartialVocabulary


class EncodingSpec(NamedTuple):
    # A NamedTuple, not a dataclass: a counting worker imports this module on its critical path, and
    # dataclasses (with inspect and ast) is a costly import.
    name: str
    filename: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]
    #: The longest token's length in bytes (both files: 128; a test holds them to it).
    longest_token: int


# The constants below are copied from tiktoken 0.14.0, tiktoken_ext/openai_public.py (MIT, OpenAI).
# The hashes are the ``expected_hash`` values tiktoken checks its own downloads against.
_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
    r"""\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

SPECS: dict[str, EncodingSpec] = {
    "o200k_base": EncodingSpec(
        name="o200k_base",
        filename="o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PAT,
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
        longest_token=128,
    ),
    "cl100k_base": EncodingSpec(
        name="cl100k_base",
        filename="cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PAT,
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
        longest_token=128,
    ),
}


def read_rank_file(spec: EncodingSpec, path: Path | None = None) -> bytes:
    """The rank file's bytes (``path``, else the one ctxc ships), refused unless its SHA-256 is the one
    tiktoken pins. ctxc runs from files, not a zip (its price table is read the same way)."""
    where = str(path) if path is not None else f"ctxc/tokens/data/{spec.filename}"
    try:
        data = (path if path is not None else Path(__file__).with_name("data") / spec.filename).read_bytes()
    except OSError as exc:
        raise CtxcError(
            f"cannot read the {spec.name} token ranks ({exc}); reinstall ctxc or use {{tokenizer}} approx",
            options=("tokenizer",),
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise CtxcError(
            f"the {spec.name} token ranks at {where} are corrupt: sha256 {digest}, expected {spec.sha256}; "
            "reinstall ctxc"
        )
    return data


def parse_ranks(data: bytes, *, in_order: bool = False) -> dict[bytes, int]:
    """``base64token rank`` lines to a rank table (what tiktoken's load_tiktoken_bpe does, faster).

    ``in_order`` takes each token's rank to be its line number without reading it. The
    bundled files, whose content their sha256 fixes, are such (a test holds them to it); a file given by
    path is read in full.
    """
    import binascii

    fields = data.split()
    if len(fields) % 2:
        raise CtxcError("token rank file has an odd number of fields")
    ranks = range(len(fields) // 2) if in_order else map(int, fields[1::2])
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), ranks, strict=True))


def load_ranks(spec: EncodingSpec, path: Path | None = None) -> dict[bytes, int]:
    """The rank table, from a marshal copy in the cache directory when there is a sound one.

    Loading the marshal copy is faster than parsing the base64 rank file. The copy is written once
    after the shipped file passed its sha256 check, named after that hash, and carries a BLAKE2b of its
    own bytes, so a truncated or altered copy is ignored (and rewritten) rather than trusted. Files
    given by ``path`` are not cached.
    """
    import marshal

    cache = None
    if path is None and not env_flag("CTXC_NO_CACHE"):
        cache = cache_dir() / "bpe" / f"{spec.name}-{spec.sha256[:16]}.marshal"
    if cache is not None:
        try:
            blob = cache.read_bytes()
            digest, payload = blob[:32], blob[32:]
            if hashlib.blake2b(payload, digest_size=32).digest() == digest:
                ranks = marshal.loads(payload)
                if isinstance(ranks, dict) and len(ranks) > 1000:
                    return ranks
        except (OSError, ValueError, EOFError, TypeError):
            pass
    ranks = parse_ranks(read_rank_file(spec, path), in_order=path is None)
    if cache is not None:
        from ctxc.output import write_atomic

        payload = marshal.dumps(ranks)
        # A counting worker dies at once on SIGTERM: held here, it comes after the copy is whole.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        # An optimisation only: any failure leaves the next run parsing the file again.
        try:
            with contextlib.suppress(OSError):
                write_atomic(cache, hashlib.blake2b(payload, digest_size=32).digest() + payload, sync=False)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return ranks


def build_encoding(
    spec: EncodingSpec, path: Path | None = None, ranks: dict[bytes, int] | None = None
) -> tiktoken.Encoding:
    import tiktoken

    if ranks is None:
        ranks = load_ranks(spec, path)
    return tiktoken.Encoding(
        name=spec.name,
        pat_str=spec.pat_str,
        mergeable_ranks=ranks,
        special_tokens=dict(spec.special_tokens),
    )


_encodings: dict[tuple[str, Path | None], tiktoken.Encoding] = {}
_load_lock = threading.Lock()


def _encoding(spec: EncodingSpec, path: Path | None) -> tiktoken.Encoding:
    key = (spec.name, path)
    enc = _encodings.get(key)
    if enc is None:
        with _load_lock:
            enc = _encodings.get(key)
            if enc is None:
                partial = _partials.pop(key, None)  # its rank table, parsed already; not needed after
                enc = build_encoding(spec, path, partial.ranks if partial is not None else None)
                _encodings[key] = enc
    return enc


# -- partial encodings (ctxc.tokens.partial) ---------------------------------------------------------
#
# A counting worker for a small input counts each batch with an encoding of the tokens it can use,
# built in milliseconds, rather than build the whole one. Each batch's partial encoding costs time in
# proportion to its new text, so they are rented until the time spent on them reaches
# PARTIAL_SECONDS, and then the whole encoding is bought: never much more than twice the better
# choice made in hindsight.

#: Larger batches are counted with the whole encoding.
PARTIAL_MAX_CHARS = 1 << 19
#: The most byte strings a batch's partial encoding may look up (about what the whole build costs); a
#: batch of long letter runs needs more, and gets the whole encoding.
PARTIAL_MAX_WORK = 600_000
#: About what building the whole encoding costs.
PARTIAL_SECONDS = 0.4
_partials: dict[tuple[str, Path | None], PartialVocabulary[tiktoken.Encoding]] = {}


def _vocabulary(spec: EncodingSpec, path: Path | None) -> PartialVocabulary[tiktoken.Encoding] | None:
    """The partial vocabulary of ``spec``, made (the rank table parsed) on first use; None once the
    whole encoding is built. The caller holds ``_load_lock``."""
    from ctxc.tokens.partial import PartialVocabulary

    key = (spec.name, path)
    if key in _encodings:
        return None
    vocab = _partials.get(key)
    if vocab is None:
        ranks = load_ranks(spec, path)
        longest = spec.longest_token if path is None else max(map(len, ranks))
        # A copy of the tokens: the encoding keeps the dict it is given, and the vocabulary's grows.
        vocab = PartialVocabulary(ranks, longest, lambda tokens: build_encoding(spec, ranks=dict(tokens)))
        _partials[key] = vocab
    return vocab


def prepare_partial(spec: EncodingSpec, path: Path | None) -> None:
    """Import tiktoken and parse the rank table now, so that the first partial encoding costs only its
    own tokens (a counting worker does this while its parent starts)."""
    import tiktoken  # noqa: F401 - imported for its cost, paid now

    with _load_lock:
        _vocabulary(spec, path)


def length_counter(enc: tiktoken.Encoding) -> Callable[[str], int]:
    """``len(enc.encode_ordinary(text))``, without building the list of tokens.

    tiktoken's core can also write the tokens to a buffer (what its ``encode_to_numpy`` uses) of four
    bytes a token; its size is the count, and no Python int is made per token. The buffer call, given
    no allowed special tokens, encodes as ``encode_ordinary`` does (a test holds it to that); a
    tiktoken without it, and text with lone surrogates, which ``encode_ordinary`` repairs first, go
    through ``encode_ordinary``.
    """
    encode = enc.encode_ordinary
    to_buffer = getattr(getattr(enc, "_core_bpe", None), "encode_to_tiktoken_buffer", None)
    if to_buffer is None:
        return lambda text: len(encode(text))
    no_special: set[str] = set()

    def count(text: str) -> int:
        try:
            return memoryview(to_buffer(text, no_special)).nbytes >> 2
        except UnicodeEncodeError:
            return len(encode(text))

    return count


def counter_for(
    spec: EncodingSpec, path: Path | None, texts: Sequence[str] | None = None
) -> Callable[[str], int]:
    """A function counting ``texts`` (or any text, when None) as encoding ``spec`` does: with a partial
    encoding while those pay, else with the whole one."""
    enc = None
    if texts is not None and sum(map(len, texts)) <= PARTIAL_MAX_CHARS:
        with _load_lock:
            vocab = _vocabulary(spec, path)
            if vocab is not None and vocab.seconds < PARTIAL_SECONDS:
                started = time.perf_counter()
                enc = vocab.encoding_for(texts, PARTIAL_MAX_WORK)
                vocab.seconds += time.perf_counter() - started
    return length_counter(enc if enc is not None else _encoding(spec, path))  # two getattrs: no cache


class Pool(Protocol):
    """Worker processes counting with one encoding (:class:`ctxc.tokens.workers.CountingPool`)."""

    name: str
    path: Path | None
    size: int
    #: Whether a worker has answered (so that waiting no longer includes its build).
    answered: bool
    #: Seconds spent waiting for small batches once a worker had answered.
    waited: float

    @property
    def usable(self) -> bool: ...

    def start(self, texts: Sequence[str]) -> Callable[[], list[int] | None]: ...

    def close(self) -> None: ...


#: The pool counting for this process, if any: set by :mod:`ctxc.tokens.workers`.
pools: list[Pool] = []

#: A batch of at least this many characters always goes to the pool.
POOL_MIN_CHARS = 1 << 16
#: About what building an encoding costs. Smaller batches go to the pool until the time spent waiting
#: for their answers adds up to this; then this process builds its own encoding, since a round trip to
#: a worker costs more than counting a small batch (bench/README.md, "adaptive").
BUILD_SECONDS = 0.4


def pool_for(name: str, path: Path | None = None) -> Pool | None:
    """The pool counting with ``name`` (and rank file ``path``), if there is one the caller may use."""
    if pools and pools[0].name == name and pools[0].path == path and pools[0].usable:
        return pools[0]
    return None


class TiktokenTokenizer:
    """A tiktoken encoding loaded from ctxc's bundled, hash-checked rank file."""

    def __init__(self, name: str, *, path: Path | None = None) -> None:
        if name not in SPECS:
            raise CtxcError(f"no bundled BPE encoding named {name!r}")
        self.name = name
        self._spec = SPECS[name]
        #: The rank file given instead of the bundled one, if any.
        self.path = path

    def count(self, text: str) -> int:
        # encode_ordinary: special-token text is ordinary text, so a transcript quoting
        # "<|endoftext|>" is counted rather than rejected.
        return self.count_batch([text])[0]

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return self.start_count(texts)()

    def start_count(self, texts: Sequence[str]) -> Callable[[], list[int]]:
        """Start counting ``texts``; the returned function waits for the counts.

        With a pool of counting processes (:mod:`ctxc.tokens.workers`) a batch is sent to it and this
        returns at once, so the caller goes on parsing while they count. Otherwise the counting is
        done here, now; so is a small batch's once this process has the encoding, or once waiting for
        such batches has cost :data:`BUILD_SECONDS` (then this process builds it).
        """
        pool = pool_for(self.name, self.path) if texts else None
        small = pool is not None and sum(map(len, texts)) < POOL_MIN_CHARS
        if pool is None or (small and (pool.waited >= BUILD_SECONDS or (self.name, self.path) in _encodings)):
            counts = self._count_here(texts)
            return lambda: counts
        timed = small and pool.answered
        pending = pool.start(texts)

        def collect() -> list[int]:
            started = time.perf_counter()
            counts = pending()
            if timed:
                pool.waited += time.perf_counter() - started
            # None: a worker failed (a corrupt rank file); counting here raises the real error.
            return self._count_here(texts) if counts is None else counts

        return collect

    def _count_here(self, texts: Sequence[str]) -> list[int]:
        return list(map(counter_for(self._spec, self.path), texts))
