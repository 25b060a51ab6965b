"""Optional hybrid ranking: 0.4 * BM25 (over the best candidate's) + 0.6 * cosine similarity, with the
model inside the ``tokenlearn-static-model`` wheel (``ctxc[embed]``); vectors are stored in the index."""

from __future__ import annotations

import importlib.metadata
import math
from array import array
from collections.abc import Sequence
from dataclasses import replace
from operator import mul
from typing import Any, Protocol

from ctxc.errors import UsageError
from ctxc.search.index import Hit, SearchIndex, _collapse

BM25_WEIGHT = 0.4
EMBED_WEIGHT = 0.6
CANDIDATES = 100
BATCH = 256
#: Characters of a chunk given to the embedder (a static model averages word vectors: more text blurs).
EMBED_CHARS = 2_400


class Embedder(Protocol):
    #: Stored with each vector, so vectors of another model are never compared.
    name: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class StaticModelEmbedder:
    """``tokenlearn-static-model``: weights and tokenizer inside the wheel, encoded in Rust."""

    def __init__(self) -> None:
        try:
            # By name, not an import statement: the package has no type information, and is optional.
            module: Any = importlib.import_module("static_model")
        except ImportError:
            raise UsageError(
                "hybrid ranking needs the embedding extra: pip install 'ctxc[embed]' "
                "(the model ships inside the tokenlearn-static-model wheel; nothing is downloaded)"
            ) from None
        self._embed = module.get_embeddings
        self.name = f"tokenlearn-static-model/{importlib.metadata.version('tokenlearn-static-model')}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        out = self._embed([t[:EMBED_CHARS] for t in texts])
        return [[float(x) for x in v] for v in out]


default_embedder = StaticModelEmbedder


def _unit(vec: Sequence[float]) -> array[float]:
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return array("f", (x / norm for x in vec))


def _vectors(index: SearchIndex, embedder: Embedder, ids: Sequence[int]) -> dict[int, array[float]]:
    """Unit vectors of every chunk in ``ids``, embedding (and storing) those not yet embedded."""
    out = {i: array("f", raw) for i, raw in index.vectors(embedder.name, ids).items()}
    missing = [i for i in ids if i not in out]
    for start in range(0, len(missing), BATCH * 8):
        part = missing[start : start + BATCH * 8]
        texts = index.texts(part)
        order = [i for i in part if i in texts]
        fresh: list[tuple[int, bytes]] = []
        for b in range(0, len(order), BATCH):
            batch = order[b : b + BATCH]
            vecs = embedder.embed([f"{texts[i][0]}\n{texts[i][1]}" for i in batch])
            for i, v in zip(batch, vecs, strict=True):
                unit = _unit(v)
                out[i] = unit
                fresh.append((i, unit.tobytes()))
        index.put_vectors(embedder.name, fresh)
    return out


def hybrid_search(
    index: SearchIndex,
    query: str,
    *,
    limit: int,
    embedder: Embedder,
    archive_id: str | None = None,
    raw: bool = False,
) -> list[Hit]:
    """The best ``limit`` chunks by ``0.4 * BM25 (normalised) + 0.6 * cosine similarity``."""
    try:
        lexical = index.bm25(query, limit=CANDIDATES, archive_id=archive_id, raw=raw)
    except UsageError:
        if raw:
            raise
        lexical = []  # a query of stopwords only still has a meaning to embed
    vectors = _vectors(index, embedder, index.chunk_ids(archive_id))
    q = _unit(embedder.embed([query])[0])
    sims = {i: max(0.0, sum(map(mul, q, v))) for i, v in vectors.items()}
    best_bm25 = max((h.bm25 for h in lexical), default=0.0) or 1.0
    candidates = {h.chunk_id: h for h in lexical}
    by_meaning = sorted(sims, key=lambda i: (-sims[i], i))[:CANDIDATES]
    for i, h in index.hits_by_id([i for i in by_meaning if i not in candidates]).items():
        candidates[i] = replace(h, bm25=0.0)
    scored = [
        replace(h, score=BM25_WEIGHT * (h.bm25 / best_bm25) + EMBED_WEIGHT * sim, similarity=sim)
        for i, h in candidates.items()
        for sim in [sims.get(i, 0.0)]
    ]
    scored.sort(key=lambda h: (-h.score, h.chunk_id))
    return _collapse(scored, limit)
