"""Fit and measure ctxc's ``approx`` tokenizer against o200k_base.

    python bench/approx_error.py            # error table + speed, with the shipped coefficients
    python bench/approx_error.py --fit      # refit the coefficients, print them, then the table

Text sets: every corpus file (/work/shared/corpus or $CTXC_CORPUS; the string values of its records,
minus base64 image data, encrypted reasoning and signatures, which are never counted as text),
Debian's gettext catalogs for 13 languages (/usr/share/locale/*/LC_MESSAGES/*.mo, first ~300k chars
each), the Korean manual pages (/usr/share/man/ko) and Vim's Korean, Japanese and Chinese tutors, when
those are installed. Error is that of the
total tokens of a set: (approx - o200k) / o200k.
"""

from __future__ import annotations

import argparse
import base64
import gettext
import gzip
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxc.tokens import approx, get_tokenizer  # noqa: E402

CORPUS = Path(os.environ.get("CTXC_CORPUS", ROOT.parent / "shared" / "corpus"))
SKIP_KEYS = {"data", "encrypted_content", "signature"}
LANGS = ("ko", "ja", "zh_CN", "ru", "de", "fr", "es", "el", "vi", "ar", "he", "hi", "th")
TUTORS = {"ko": "tutor.ko.utf-8", "ja": "tutor.ja.utf-8", "zh": "tutor.zh.utf-8"}
CHUNK = 4000  # characters of consecutive texts pooled into one fitting sample


def _strings(value: object, key: str | None, out: list[str]) -> None:
    if isinstance(value, str):
        if value and key not in SKIP_KEYS and not value.startswith("data:image"):
            out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings(v, k, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, key, out)


def corpus_sets() -> dict[str, list[str]]:
    sets: dict[str, list[str]] = {}
    for path in sorted(CORPUS.rglob("*")):
        if path.suffix not in (".json", ".jsonl"):
            continue
        raw = path.read_bytes()
        docs = (
            [orjson.loads(raw)]
            if path.suffix == ".json"
            else [orjson.loads(line) for line in raw.splitlines() if line.strip()]
        )
        out: list[str] = []
        for doc in docs:
            _strings(doc, None, out)
        sets[str(path.relative_to(CORPUS))] = out
    return sets


def language_sets() -> dict[str, list[str]]:
    sets: dict[str, list[str]] = {}
    for lang in LANGS:
        out: list[str] = []
        size = 0
        for mo in sorted(Path("/usr/share/locale", lang, "LC_MESSAGES").glob("*.mo")):
            try:
                with mo.open("rb") as fh:
                    catalog = gettext.GNUTranslations(fh)._catalog  # type: ignore[attr-defined]
            except (OSError, UnicodeDecodeError):
                continue
            for text in catalog.values():
                if isinstance(text, str) and text and size < 300_000:
                    out.append(text)
                    size += len(text)
        if out:
            sets[f"catalog/{lang}"] = out
    man: list[str] = []
    for page in sorted(Path("/usr/share/man/ko").rglob("*.gz")):
        # Korean manual pages: technical prose. roff requests (lines starting with ".") are dropped.
        text = gzip.decompress(page.read_bytes()).decode("utf-8", "replace")
        man.append("\n".join(line for line in text.splitlines() if not line.startswith(".")))
    if man:
        sets["man-pages/ko"] = man
    for lang, name in TUTORS.items():
        for path in sorted(Path("/usr/share/vim").glob(f"vim*/tutor/{name}")):
            sets[f"vim-tutor/{lang}"] = [path.read_text(encoding="utf-8")]
    return sets


def stress_sets() -> dict[str, list[str]]:
    r = random.Random(7)
    blob = bytes(r.randrange(256) for _ in range(60_000))
    return {
        "stress/base64": [base64.b64encode(blob).decode()],
        "stress/hex": [blob.hex()],
        "stress/uuids": ["\n".join(str(uuid.UUID(int=r.getrandbits(128))) for _ in range(2000))],
        "stress/numbers": [" ".join(str(r.randrange(10**9)) for _ in range(10_000))],
        "stress/json-records": [
            json.dumps([{"id": i, "name": f"item{i}", "value": r.random()} for i in range(2000)])
        ],
        "stress/emoji-mixed": ["😀🎉👍🏽 café naïve Ñandú 東京 서울 ✅ → " * 500],
        "stress/same-letter": ["x" * 50_000],
    }


def _pooled(texts: list[str], counts: list[int]) -> Iterator[tuple[list[float], int]]:
    acc = [0.0] * len(approx.FEATURES)
    tokens = size = 0
    for text, n, row in zip(texts, counts, approx.feature_rows(texts), strict=True):
        for i, f in enumerate(row):
            acc[i] += f
        tokens += n
        size += len(text)
        if size >= CHUNK:
            yield acc, tokens
            acc, tokens, size = [0.0] * len(approx.FEATURES), 0, 0
    if tokens:
        yield acc, tokens


def _solve(rows: list[list[float]], ys: list[float], ws: list[float]) -> list[float]:
    """Weighted least squares by the normal equations (a handful of features: no numpy needed)."""
    k = len(rows[0])
    a = [[0.0] * (k + 1) for _ in range(k)]
    for x, y, w in zip(rows, ys, ws, strict=True):
        for i in range(k):
            xi = x[i] * w
            if xi:
                row = a[i]
                for j in range(k):
                    row[j] += xi * x[j]
                row[k] += xi * y
    for i in range(k):
        a[i][i] += 1e-9
    for i in range(k):
        p = max(range(i, k), key=lambda r: abs(a[r][i]))
        a[i], a[p] = a[p], a[i]
        for r in range(k):
            if r != i and a[i][i]:
                f = a[r][i] / a[i][i]
                a[r] = [u - f * v for u, v in zip(a[r], a[i], strict=True)]
    return [a[i][k] / a[i][i] if a[i][i] else 0.0 for i in range(k)]


def emoji_factor(enc_count: object) -> float:
    """o200k tokens per astral character, emoji in running text (too rare in the corpus to fit)."""
    from collections.abc import Callable

    assert callable(enc_count)
    count: Callable[[str], int] = enc_count
    emoji = [chr(c) for c in range(0x1F300, 0x1FAFF) if chr(c).isprintable()]
    text = " ".join(emoji)
    return (count(text) - count(" ".join("x" * len(emoji))) + len(emoji)) / len(emoji)


def fit(samples: list[tuple[list[float], int]], fixed: dict[int, float]) -> list[float]:
    """Non-negative weighted least squares: refit without the most negative feature until none is."""
    active = [i for i in range(len(approx.FEATURES)) if i not in fixed]
    while True:
        rows, ys, ws = [], [], []
        for x, y in samples:
            if y <= 0:
                continue
            rows.append([x[i] for i in active])
            ys.append(y - sum(c * x[i] for i, c in fixed.items()))
            ws.append(1.0 / y)  # relative error: a token in a short sample weighs more
        used = [i for i in range(len(active)) if any(r[i] for r in rows)]
        active = [active[i] for i in used]
        rows = [[r[i] for i in used] for r in rows]
        coef = _solve(rows, ys, ws)
        worst = min(range(len(active)), key=lambda j: coef[j])
        if coef[worst] >= 0:
            break
        active.pop(worst)
    out = [0.0] * len(approx.FEATURES)
    for i, c in fixed.items():
        out[i] = c
    for i, c in zip(active, coef, strict=True):
        out[i] = round(c, 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="refit the coefficients first")
    args = ap.parse_args()

    enc = get_tokenizer("o200k_base")
    corpus = corpus_sets()
    langs = language_sets()
    stress = stress_sets()
    every = {**corpus, **langs, **stress}
    counts = {name: enc.count_batch(texts) for name, texts in every.items()}

    coef = list(approx.COEFFICIENTS)
    if args.fit:
        samples = [s for name in (*corpus, *langs) for s in _pooled(every[name], counts[name])]
        astral = approx.FEATURES.index("astral")
        coef = fit(samples, {astral: round(emoji_factor(enc.count), 2)})
        print("_FITTED: dict[str, float] = {")
        for name, c in zip(approx.FEATURES, coef, strict=True):
            print(f'    "{name}": {c},')
        print("}\n")

    def error(name: str) -> tuple[int, float, float, int]:
        texts = every[name]
        truth = sum(counts[name])
        est = sum(approx.estimate_many(texts, coef))
        chars = sum(map(len, texts))
        return truth, (est - truth) / truth, (chars / 4 - truth) / truth, chars

    print("| set | chars | o200k | approx error | chars/4 error |")
    print("|---|---:|---:|---:|---:|")
    summary: dict[str, list[float]] = {"corpus": [], "languages": [], "korean": [], "stress": []}
    for name in every:
        truth, err, naive, chars = error(name)
        print(f"| {name} | {chars:,} | {truth:,} | {100 * err:+.1f}% | {100 * naive:+.1f}% |")
        group = "corpus" if name in corpus else "stress" if name in stress else "languages"
        summary[group].append(err)
        if name.endswith("/ko"):
            summary["korean"].append(err)
    print()
    for group, errs in summary.items():
        if errs:
            mean = sum(map(abs, errs)) / len(errs)
            worst = max(errs, key=abs)
            print(f"{group}: {len(errs)} sets, mean |error| {100 * mean:.1f}%, worst {100 * worst:+.1f}%")
    fitted = summary["corpus"] + summary["languages"]
    print(
        f"corpus+languages: mean |error| {100 * sum(map(abs, fitted)) / len(fitted):.1f}%, "
        f"worst {100 * max(fitted, key=abs):+.1f}%"
    )

    texts = [t for name in corpus for t in corpus[name]]
    truths = [n for name in corpus for n in counts[name]]
    rel = sorted(
        abs(e - n) / n for e, n in zip(approx.estimate_many(texts, coef), truths, strict=True) if n >= 50
    )
    if rel:
        print(
            f"single corpus strings of >= 50 tokens ({len(rel):,}): |error| median "
            f"{100 * rel[len(rel) // 2]:.1f}%, p90 {100 * rel[len(rel) * 9 // 10]:.1f}%, "
            f"p99 {100 * rel[len(rel) * 99 // 100]:.1f}%"
        )
    chars = sum(map(len, texts))
    tok = approx.ApproxTokenizer()
    t0 = time.perf_counter()
    tok.count_batch(texts)
    dt_approx = time.perf_counter() - t0
    t0 = time.perf_counter()
    for t in texts:
        enc.count(t)
    dt_single = time.perf_counter() - t0
    t0 = time.perf_counter()
    enc.count_batch(texts)
    dt_batch = time.perf_counter() - t0
    mb = chars / 1e6
    print(
        f"\nspeed on {mb:.1f}M chars of corpus text in {len(texts):,} strings: "
        f"approx {mb / dt_approx:.1f} MB/s, "
        f"o200k {mb / dt_single:.1f} MB/s single thread, {mb / dt_batch:.1f} MB/s count_batch "
        f"({os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
