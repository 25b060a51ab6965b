"""``ctxc eval``: targeted, deterministic, offline measurements of each compaction strategy.

For each transcript (given, or generated from a seed by :mod:`ctxc.evaluate.generate`), facts are
planted early (:mod:`ctxc.evaluate.needles`), then every strategy compacts it to each target, and
each output is measured:

* **needle recovery**: each planted fact is either still in the output (verbatim, or in a summary) or
  found by ``ctxc search`` in the top ``search_k`` hits (the hit's chunk holds the fact);
* **intent kept**: each conversation's first request and the planted, pinned instruction survive;
* **survival rate**: the share of file paths (from tool inputs), error lines (from tool results) and
  decision sentences (from user and assistant text) still in the output, verbatim or in a summary;
* **validity**: no pairing problem (strict) and no role problem the input did not already have;
* **budget**: every conversation at or under its target;
* **cost**: output/input token ratio, and the wall time of the compaction.

The window is, unless given, the size of the transcript's largest conversation, so a target of 10%
means "to a tenth of what it is": compaction is always forced. Strategies that only shrink tool
output (offload, mask) then miss the budget, which the table shows; outputs are written with
``allow_over`` so that they can be measured. Everything but the times is a function of the inputs and
the seed. Searches run after every original is archived and indexed, against the whole evaluation
archive; by default each needle is looked for in its own transcript's original (``ctxc search --id``,
as an agent does with the archive id its summary cites), with ``search_scope="archive"`` in all of it.
"""

from __future__ import annotations

import contextlib
import random
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxc.errors import CtxcError, UsageError
from ctxc.evaluate.needles import Needle, Planted, make_instruction, make_needles, plant
from ctxc.live import live_context, live_messages, request_text, sent_messages, session_intent
from ctxc.model import Message, TextBlock, ToolResultBlock, ToolUseBlock, Transcript
from ctxc.search.chunks import render_input

if TYPE_CHECKING:
    from ctxc.archive import Archive
    from ctxc.evaluate.judge import Judge, JudgeScore
    from ctxc.search.embed import Embedder
    from ctxc.search.index import SearchIndex
    from ctxc.tokens import Counter

DEFAULT_TARGETS = (0.10, 0.25)
SURVIVAL_KINDS = ("paths", "errors", "decisions")

_PATH_KEYS = ("file_path", "path", "filename", "notebook_path", "target_file", "file")
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.M)
#: A line that says what went wrong: an exception with its message, a test failure, a tool's error.
#: A traceback's header says only that something did, so it is not one.
_ERROR_LINE = re.compile(r"(\b\w*(?:Error|Exception)\b:|\bFAILED\b|\bfatal:|\berror:|\bERROR\b)")
_DECISION = re.compile(
    r"\b(decided|decide to|we'll use|I'll use|let's use|let's go with|going with|go with|chose|opted for|"
    r"instead of|rather than|switch(?:ed)? to)\b",
    re.I,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True, slots=True)
class EvalOptions:
    #: Strategy names; empty means every registered strategy.
    strategies: tuple[str, ...] = ()
    #: Targets as shares of the window.
    targets: tuple[float, ...] = DEFAULT_TARGETS
    seed: int = 0
    #: Sessions generated when no paths are given.
    generated: int = 3
    needles: int = 4
    #: The window the targets are shares of; None: each transcript's largest conversation.
    window: int | None = None
    keep_last: int = 4
    tokenizer: str = "o200k_base"
    summarizer: str = "extractive"
    search_k: int = 5
    #: ``session``: search the transcript's own original (``ctxc search --id``, what an agent does with
    #: the archive id its summary cites); ``archive``: the whole evaluation archive, every file competing.
    search_scope: str = "session"
    hybrid: bool = False
    use_cache: bool = True
    #: Skip lines that are not JSON objects (``--skip-invalid``); by default they are an error, as in
    #: every other command.
    skip_invalid: bool = False


@dataclass(frozen=True, slots=True)
class NeedleOutcome:
    kind: str
    subject: str
    value: str
    query: str
    message: int
    retained: bool
    #: 1-based rank of the first search hit holding the value, among the top ``search_k``; else None.
    search_rank: int | None

    @property
    def recovered(self) -> bool:
        return self.retained or self.search_rank is not None


@dataclass(frozen=True, slots=True)
class Case:
    """One transcript compacted by one strategy to one target, measured."""

    source: str
    format: str
    strategy: str
    target_ratio: float
    window: int
    target_tokens: int
    archive_id: str
    tokens_before: int = 0
    tokens_after: int = 0
    seconds: float = 0.0
    needles: tuple[NeedleOutcome, ...] = ()
    #: (kept, total) first requests, one per conversation.
    first_requests: tuple[int, int] = (0, 0)
    #: (kept, total) pinned instructions.
    pinned: tuple[int, int] = (0, 0)
    #: kind → (kept, total) for paths, errors, decisions.
    survival: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    problems: int = 0
    budget_ok: bool = False
    error: str | None = None
    judge: JudgeScore | None = None

    @property
    def ratio(self) -> float:
        return self.tokens_after / self.tokens_before if self.tokens_before else 1.0

    @property
    def valid(self) -> bool:
        return self.error is None and self.problems == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "strategy": self.strategy,
            "target_ratio": self.target_ratio,
            "window": self.window,
            "target_tokens": self.target_tokens,
            "archive_id": self.archive_id,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "ratio": round(self.ratio, 4),
            "seconds": round(self.seconds, 3),
            "needles": [
                {
                    "kind": n.kind,
                    "subject": n.subject,
                    "value": n.value,
                    "query": n.query,
                    "message": n.message,
                    "retained": n.retained,
                    "search_rank": n.search_rank,
                    "recovered": n.recovered,
                }
                for n in self.needles
            ],
            "intent": {
                "first_requests": list(self.first_requests),
                "pinned": list(self.pinned),
            },
            "survival": {k: list(v) for k, v in self.survival.items()},
            "problems": self.problems,
            "valid": self.valid,
            "budget_ok": self.budget_ok,
            "error": self.error,
            "judge": self.judge.to_json() if self.judge is not None else None,
        }


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: a strategy at a target, over every transcript."""

    strategy: str
    target_ratio: float
    files: int
    needles_recovered: int
    needles: int
    retained: int
    by_search: int
    intent_kept: int
    intent: int
    survival: Mapping[str, tuple[int, int]]
    valid: int
    budget_ok: int
    errors: int
    mean_ratio: float
    seconds: float
    judge: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "target_ratio": self.target_ratio,
            "files": self.files,
            "needles": {
                "recovered": self.needles_recovered,
                "total": self.needles,
                "retained": self.retained,
                "by_search": self.by_search,
            },
            "intent": {"kept": self.intent_kept, "total": self.intent},
            "survival": {k: list(v) for k, v in self.survival.items()},
            "valid": self.valid,
            "budget_ok": self.budget_ok,
            "errors": self.errors,
            "mean_ratio": round(self.mean_ratio, 4),
            "seconds": round(self.seconds, 3),
            "judge": None if self.judge is None else round(self.judge, 4),
        }


@dataclass(frozen=True, slots=True)
class EvalReport:
    options: EvalOptions
    cases: tuple[Case, ...]
    #: Needles asked for and planted, per source (short files have room for fewer).
    planted: Mapping[str, tuple[int, int]]

    def rows(self) -> list[Row]:
        groups: dict[tuple[str, float], list[Case]] = {}
        for c in self.cases:
            groups.setdefault((c.strategy, c.target_ratio), []).append(c)
        rows: list[Row] = []
        for (strategy, target), cases in groups.items():
            needles = [n for c in cases for n in c.needles]
            survival = {
                k: (
                    sum(c.survival.get(k, (0, 0))[0] for c in cases),
                    sum(c.survival.get(k, (0, 0))[1] for c in cases),
                )
                for k in SURVIVAL_KINDS
            }
            ok = [c for c in cases if c.error is None]
            judged = [c.judge.overall for c in cases if c.judge is not None]
            rows.append(
                Row(
                    strategy=strategy,
                    target_ratio=target,
                    files=len(cases),
                    needles_recovered=sum(n.recovered for n in needles),
                    needles=len(needles),
                    retained=sum(n.retained for n in needles),
                    by_search=sum((not n.retained) and n.search_rank is not None for n in needles),
                    intent_kept=sum(c.first_requests[0] + c.pinned[0] for c in cases),
                    intent=sum(c.first_requests[1] + c.pinned[1] for c in cases),
                    survival=survival,
                    valid=sum(c.valid for c in cases),
                    budget_ok=sum(c.budget_ok for c in cases),
                    errors=len(cases) - len(ok),
                    mean_ratio=sum(c.ratio for c in ok) / len(ok) if ok else 1.0,
                    seconds=sum(c.seconds for c in cases),
                    judge=sum(judged) / len(judged) if judged else None,
                )
            )
        return rows

    def lost_needles(self) -> list[tuple[Case, NeedleOutcome]]:
        """Every needle neither retained nor found by search: the findings to look at."""
        return [(c, n) for c in self.cases for n in c.needles if not n.recovered]


# ------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    data: bytes


def _load(src: Source, *, skip_invalid: bool = False) -> Transcript:
    from ctxc.formats import load
    from ctxc.reader import ReadOptions, named_bytes

    return load(named_bytes(src.name, src.data), options=ReadOptions(skip_invalid=skip_invalid))


def sources_from(paths: Sequence[str], options: EvalOptions) -> list[Source]:
    """The files of ``paths`` (directories walked), or generated sessions when there are none."""
    if not paths:
        from ctxc.evaluate.generate import generate

        return [Source(g.name, g.data) for g in generate(options.seed, options.generated)]
    from ctxc.batch import expand_paths
    from ctxc.errors import InputError

    out: list[Source] = []
    for p in expand_paths(list(paths)):
        if p == "-":
            raise UsageError("ctxc eval reads files, not stdin (it needs a name and several passes)")
        try:
            out.append(Source(p, Path(p).read_bytes()))
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", path=p) from exc
    return out


# ------------------------------------------------------------------------------------------ measures


def text_of(messages: Sequence[Message]) -> str:
    """Everything a model would read of ``messages``: texts, tool inputs (unescaped), tool results."""
    parts: list[str] = []
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                parts.append(f"{b.name} {render_input(b.input)}")
            elif isinstance(b, TextBlock | ToolResultBlock):
                parts.append(b.text)
            else:
                text = getattr(b, "text", "")
                if isinstance(text, str) and text:
                    parts.append(text)
    return "\n".join(parts)


def _norm(text: str) -> str:
    return " ".join(text.split())


def _paths(messages: Sequence[Message]) -> list[str]:
    found: dict[str, None] = {}
    for m in messages:
        for b in m.blocks:
            if not isinstance(b, ToolUseBlock):
                continue
            inp = b.input
            if isinstance(inp, Mapping):
                for key in _PATH_KEYS:
                    v = inp.get(key)
                    if isinstance(v, str) and 2 < len(v) < 300 and "\n" not in v and ("/" in v or "." in v):
                        found.setdefault(v.strip(), None)
                patch = next((v for v in inp.values() if isinstance(v, str) and "*** " in v), "")
            else:
                patch = inp if isinstance(inp, str) else ""
            for match in _PATCH_FILE.finditer(patch):
                found.setdefault(match.group(1).strip(), None)
    return list(found)


def _errors(messages: Sequence[Message]) -> list[str]:
    """The telling line of each tool result that reports an error (deduplicated)."""
    found: dict[str, None] = {}
    for m in messages:
        for b in m.blocks:
            if not isinstance(b, ToolResultBlock):
                continue
            lines = [ln.strip() for ln in b.text.splitlines() if ln.strip()]
            hit = next((ln for ln in lines if _ERROR_LINE.search(ln)), None)
            if hit is None and b.is_error and lines:
                hit = lines[0]
            if hit is not None and len(hit) >= 8:
                found.setdefault(_norm(hit)[:200], None)
    return list(found)


def _decisions(messages: Sequence[Message], exclude: Sequence[str]) -> list[str]:
    found: dict[str, None] = {}
    for m in messages:
        if m.role not in ("user", "assistant"):
            continue
        for b in m.blocks:
            if not isinstance(b, TextBlock):
                continue
            for sentence in _SENTENCE.split(b.text):
                s = _norm(sentence)
                if 20 <= len(s) <= 300 and _DECISION.search(s) and not any(x in s for x in exclude):
                    found.setdefault(s, None)
    return list(found)


def survival(
    original: Sequence[Message], output_text: str, *, exclude: Sequence[str] = ()
) -> dict[str, tuple[int, int]]:
    """kind → (kept, total) of file paths, error lines and decision sentences of ``original``."""
    out = _norm(output_text)
    items = {
        "paths": _paths(original),
        "errors": [e for e in _errors(original) if not any(x in e for x in exclude)],
        "decisions": _decisions(original, exclude),
    }
    return {k: (sum(_norm(v) in out for v in vs), len(vs)) for k, vs in items.items()}


def first_requests(transcript: Transcript) -> list[str]:
    """The user's own words of each conversation's first request (:func:`ctxc.live.session_intent`).

    Subagent runs (Claude Code sidechains) are left out: their first "request" is the prompt the
    parent agent wrote into its Task call, not the user's intent, and a run goes with that call when
    compaction drops it.
    """
    out: list[str] = []
    for conv in range(transcript.conversations):
        m = session_intent(transcript.conversation(conv))
        if m is not None and not m.meta.get("is_sidechain"):
            out.append(request_text(m))
    return out


def _problems(output: Sequence[Message], original: Sequence[Message]) -> int:
    """Strict pairing problems of the output, plus role problems beyond those the input had."""
    from ctxc.validate import pairing_problems, role_problems

    before: dict[str, int] = {}
    for p in role_problems(original):
        before[p.code] = before.get(p.code, 0) + 1
    after: dict[str, int] = {}
    for p in role_problems(output):
        after[p.code] = after.get(p.code, 0) + 1
    extra = sum(max(0, n - before.get(code, 0)) for code, n in after.items())
    return len(pairing_problems(output, strict=True)) + extra


# -------------------------------------------------------------------------------------------- running


@dataclass(frozen=True, slots=True)
class _Prepared:
    source: Source
    planted: Planted
    window: int


def _window_of(t: Transcript, counter: Counter) -> int:
    from ctxc.tokens.cost import count_messages

    live = live_context(t.boundaries, t.messages)
    sizes = [sum(count_messages(live.split(t.conversation(c))[1], counter)) for c in range(t.conversations)]
    return max([*sizes, 1])


@contextlib.contextmanager
def _archive(explicit: str | Path | None) -> Iterator[Archive]:
    from ctxc.archive import Archive

    if explicit is not None:
        yield Archive(Path(explicit))
        return
    with tempfile.TemporaryDirectory(prefix="ctxc-eval-") as tmp:
        yield Archive(Path(tmp))


def run_eval(
    sources: Sequence[Source],
    options: EvalOptions = EvalOptions(),
    *,
    archive: str | Path | None = None,
    judge: Judge | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvalReport:
    """Plant, compact with every strategy to every target, search, measure (see the module docstring).

    ``archive`` keeps the evaluation's archive (originals, index) in that directory; by default it is
    a temporary one, removed at the end.
    """
    from ctxc.compaction import strategies as registry
    from ctxc.compaction.run import CompactOptions, compact_transcript
    from ctxc.tokens import make_counter

    names = options.strategies or tuple(registry())
    unknown = [n for n in names if n not in registry()]
    if unknown:
        raise UsageError(f"unknown strategy {unknown[0]!r} (known: {', '.join(sorted(registry()))})")
    if not options.targets or any(not 0 < t <= 1 for t in options.targets):
        raise UsageError("--targets are shares of the window between 0 and 1, e.g. 0.1,0.25")
    if options.search_scope not in ("session", "archive"):
        raise UsageError(f"--search-scope is session or archive, not {options.search_scope!r}")
    if options.needles < 1 or options.search_k < 1:
        raise UsageError("--needles and --search-k must be at least 1")
    counter = make_counter(options.tokenizer, use_cache=options.use_cache)
    prepared: list[_Prepared] = []
    planted_counts: dict[str, tuple[int, int]] = {}
    for src in sources:
        rng = random.Random(f"ctxc-eval/{options.seed}/{Path(src.name).name}")
        transcript = _load(src, skip_invalid=options.skip_invalid)
        planted = plant(
            transcript,
            make_needles(rng, options.needles),
            instruction=make_instruction(rng),
            keep_last=options.keep_last,
        )
        window = options.window or _window_of(planted.transcript, counter)
        prepared.append(_Prepared(src, planted, window))
        planted_counts[src.name] = (len(planted.needles), options.needles)

    raw_cases: list[tuple[_Prepared, Case, tuple[bool, ...]]] = []
    with _archive(archive) as store:
        for prep in prepared:
            t = prep.planted.transcript
            requests = first_requests(t)
            sent_before = sent_messages(t)
            exclude = [n.value for n in prep.planted.needles] + (
                [prep.planted.instruction] if prep.planted.instruction else []
            )
            for strategy in names:
                for target in options.targets:
                    if progress is not None:
                        progress(f"{Path(prep.source.name).name}: {strategy} to {target:.0%}")
                    opts = CompactOptions(
                        strategy=strategy,
                        target_ratio=target,
                        window=prep.window,
                        keep_last=options.keep_last,
                        pins=(prep.planted.pin,) if prep.planted.pin else (),
                        summarizer=options.summarizer,
                        tokenizer=options.tokenizer,
                        allow_over=True,
                        use_cache=options.use_cache,
                    )
                    base = Case(
                        source=prep.source.name,
                        format=t.format,
                        strategy=strategy,
                        target_ratio=target,
                        window=prep.window,
                        target_tokens=int(target * prep.window),
                        archive_id="",
                    )
                    start = time.perf_counter()
                    try:
                        result = compact_transcript(
                            t, opts, archive=store, counter=counter, original_bytes=prep.planted.data
                        )
                    except CtxcError as exc:
                        raw_cases.append((prep, replace(base, error=str(exc)), ()))
                        continue
                    seconds = time.perf_counter() - start
                    out = result.transcript
                    out_text = text_of(sent_messages(out))  # what the client sends next
                    flat = _norm(out_text)
                    retained = tuple(n.value in out_text for n in prep.planted.needles)
                    pinned = (
                        1 if prep.planted.instruction and _norm(prep.planted.instruction) in flat else 0,
                        1 if prep.planted.instruction else 0,
                    )
                    case = replace(
                        base,
                        archive_id=result.archive_id,
                        tokens_before=result.tokens_before,
                        tokens_after=result.tokens_after,
                        seconds=seconds,
                        first_requests=(sum(_norm(r) in flat for r in requests), len(requests)),
                        pinned=pinned,
                        # Of what the client sent before: history it no longer sends is not lost here.
                        survival=survival(sent_before, out_text, exclude=exclude),
                        problems=_problems(live_messages(out), live_messages(t)),
                        budget_ok=all(c.tokens_after <= c.target for c in result.conversations),
                        judge=judge.score(out.messages, prep.planted, t) if judge is not None else None,
                    )
                    raw_cases.append((prep, case, retained))

        # Search once every original is archived and indexed: needles compete with all of it.
        ranks = _search_ranks(prepared, store, options)

    cases: list[Case] = []
    for prep, case, retained in raw_cases:
        if case.error is not None:
            cases.append(case)
            continue
        outcomes = tuple(
            NeedleOutcome(
                n.kind,
                n.subject,
                n.value,
                n.query,
                n.message,
                retained[k],
                ranks[(prep.source.name, k)],
            )
            for k, n in enumerate(prep.planted.needles)
        )
        cases.append(replace(case, needles=outcomes))
    return EvalReport(options, tuple(cases), planted_counts)


def _search_ranks(
    prepared: Sequence[_Prepared], store: Archive, options: EvalOptions
) -> dict[tuple[str, int], int | None]:
    """(source, needle number) → :func:`_search_rank` of every planted needle, in one open index."""
    from ctxc.archive_store import sha256_hex
    from ctxc.search.index import open_index

    ranks: dict[tuple[str, int], int | None] = {}
    if not any(prep.planted.needles for prep in prepared):
        return ranks
    embedder: Embedder | None = None
    if options.hybrid:
        from ctxc.search.embed import default_embedder

        embedder = default_embedder()
    with open_index(store.root, must_exist=True) as index:
        for prep in prepared:
            ident = sha256_hex(prep.planted.data)
            for k, needle in enumerate(prep.planted.needles):
                ranks[(prep.source.name, k)] = _search_rank(
                    index,
                    needle,
                    ident,
                    options.search_k,
                    embedder=embedder,
                    scoped=options.search_scope == "session",
                )
    return ranks


def _search_rank(
    index: SearchIndex,
    needle: Needle,
    ident: str,
    k: int,
    *,
    embedder: Embedder | None,
    scoped: bool,
) -> int | None:
    from ctxc.search import search_index

    hits = search_index(
        index,
        needle.query,
        limit=k,
        hybrid=embedder is not None,
        archive_id=ident if scoped else None,
        embedder=embedder,
    )
    for rank, hit in enumerate(hits, 1):
        if hit.archive_id == ident and needle.value in hit.text:
            return int(rank)
    return None
