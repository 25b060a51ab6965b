"""``ctxc eval``: facts planted early in each transcript, every strategy compacts it to each target, and
each output is measured offline: needles kept or found by search, intent, survival, validity, budget."""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxc.archive import Archive
from ctxc.archive_store import sha256_hex
from ctxc.batch import expand_paths
from ctxc.compaction import strategies as registry
from ctxc.compaction.ledger import Ledger
from ctxc.compaction.run import CompactOptions, compact_transcript
from ctxc.errors import CtxcError, InputError, UsageError
from ctxc.evaluate.generate import Source, generate
from ctxc.evaluate.measures import first_requests, norm, problems, survival, text_of
from ctxc.evaluate.needles import Needle, Planted, make_instruction, make_needles, plant
from ctxc.formats import load
from ctxc.live import live_context, live_messages, sent_messages
from ctxc.model import Message
from ctxc.profiles import MAX_TOKENS
from ctxc.reader import ReadOptions, named_bytes, read_all
from ctxc.search import search_index
from ctxc.search.index import SearchIndex, open_index
from ctxc.tokens import Counter, make_counter

if TYPE_CHECKING:
    from ctxc.evaluate.judge import Judge, JudgeScore
    from ctxc.search.embed import Embedder

DEFAULT_TARGETS = (0.10, 0.25)
SURVIVAL_KINDS = ("paths", "errors", "decisions")


@dataclass(frozen=True, slots=True)
class EvalOptions:
    strategies: tuple[str, ...] = ()  # empty: every registered strategy
    targets: tuple[float, ...] = DEFAULT_TARGETS  # shares of the window
    seed: int = 0
    generated: int = 3  # sessions generated when no paths are given
    needles: int = 4
    window: int | None = None  # None: each transcript's largest conversation
    keep_last: int = 4
    tokenizer: str = "o200k_base"
    summarizer: str = "extractive"
    search_k: int = 5
    search_scope: str = "session"  # the transcript's own original, or the whole ``archive``
    hybrid: bool = False
    use_cache: bool = True
    skip_invalid: bool = False


@dataclass(frozen=True, slots=True)
class NeedleOutcome:
    kind: str
    subject: str
    value: str
    query: str
    message: int
    retained: bool
    search_rank: int | None  # 1-based, among the top ``search_k`` hits

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
    # (kept, total) of first requests (one per conversation), pinned instructions, and each SURVIVAL_KIND
    first_requests: tuple[int, int] = (0, 0)
    pinned: tuple[int, int] = (0, 0)
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
        head = {f.name: getattr(self, f.name) for f in fields(self)[:9]}
        return {
            **head,
            "ratio": round(self.ratio, 4),
            "seconds": round(self.seconds, 3),
            "needles": [{**asdict(n), "recovered": n.recovered} for n in self.needles],
            "intent": {"first_requests": list(self.first_requests), "pinned": list(self.pinned)},
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
        needles = {"recovered": self.needles_recovered, "total": self.needles, "retained": self.retained}
        return {
            **{k: getattr(self, k) for k in ("strategy", "target_ratio", "files")},
            "needles": {**needles, "by_search": self.by_search},
            "intent": {"kept": self.intent_kept, "total": self.intent},
            "survival": {k: list(v) for k, v in self.survival.items()},
            **{k: getattr(self, k) for k in ("valid", "budget_ok", "errors")},
            "mean_ratio": round(self.mean_ratio, 4),
            "seconds": round(self.seconds, 3),
            "judge": None if self.judge is None else round(self.judge, 4),
        }


def _total(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    pairs = list(pairs)
    return sum(k for k, _ in pairs), sum(t for _, t in pairs)


def _row(strategy: str, target: float, cases: list[Case]) -> Row:
    needles = [n for c in cases for n in c.needles]
    by_search = sum((not n.retained) and n.search_rank is not None for n in needles)
    intent = _total((c.first_requests[0] + c.pinned[0], c.first_requests[1] + c.pinned[1]) for c in cases)
    ok = [c for c in cases if c.error is None]
    judged = [c.judge.overall for c in cases if c.judge is not None]
    return Row(
        strategy=strategy,
        target_ratio=target,
        files=len(cases),
        needles_recovered=sum(n.recovered for n in needles),
        needles=len(needles),
        retained=sum(n.retained for n in needles),
        by_search=by_search,
        intent_kept=intent[0],
        intent=intent[1],
        survival={k: _total(c.survival.get(k, (0, 0)) for c in cases) for k in SURVIVAL_KINDS},
        valid=sum(c.valid for c in cases),
        budget_ok=sum(c.budget_ok for c in cases),
        errors=len(cases) - len(ok),
        mean_ratio=sum(c.ratio for c in ok) / len(ok) if ok else 1.0,
        seconds=sum(c.seconds for c in cases),
        judge=sum(judged) / len(judged) if judged else None,
    )


@dataclass(frozen=True, slots=True)
class FailedSource:
    """A transcript that could not be read or planted, so no case measures it: as the batch commands
    report a failed file (``error`` names the file and line)."""

    path: str
    error: str
    exit_code: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class EvalReport:
    options: EvalOptions
    cases: tuple[Case, ...]
    planted: Mapping[str, tuple[int, int]]  # per source: needles planted, asked for
    failed: tuple[FailedSource, ...] = ()

    def rows(self) -> list[Row]:
        groups: dict[tuple[str, float], list[Case]] = {}
        for c in self.cases:
            groups.setdefault((c.strategy, c.target_ratio), []).append(c)
        return [_row(strategy, target, cases) for (strategy, target), cases in groups.items()]

    def lost_needles(self) -> list[tuple[Case, NeedleOutcome]]:
        """Every needle neither retained nor found by search: the findings to look at."""
        return [(c, n) for c in self.cases for n in c.needles if not n.recovered]


def sources_from(paths: Sequence[str], options: EvalOptions) -> list[Source | str]:
    """The files of ``paths`` (directories walked; :func:`run_eval` reads them), or generated sessions
    when there are none."""
    if not paths:
        return list(generate(options.seed, options.generated))
    files = expand_paths(list(paths))
    if "-" in files:
        raise UsageError("ctxc eval reads files, not stdin (it needs a name and several passes)")
    return list(files)


def _read(src: Source | str) -> Source:
    if isinstance(src, Source):
        return src
    try:
        return Source(*read_all(src))  # its errors, as every command's: "no such file", a folder
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=src) from exc


@dataclass(frozen=True, slots=True)
class _Prepared:
    source: Source
    planted: Planted
    window: int
    requests: list[str]  # the first requests of its conversations
    sent: tuple[Message, ...]  # what the client sent before compaction
    exclude: list[str]  # the planted texts, which survival does not count


def _prepare(src: Source, options: EvalOptions, counter: Counter) -> _Prepared:
    """The source read, its needles and instruction planted, and what its cases measure against."""
    rng = random.Random(f"ctxc-eval/{options.seed}/{Path(src.name).name}")
    t = load(named_bytes(src.name, src.data), options=ReadOptions(skip_invalid=options.skip_invalid))
    planted = plant(
        t, make_needles(rng, options.needles), instruction=make_instruction(rng), keep_last=options.keep_last
    )
    t = planted.transcript
    live = live_context(t.boundaries, t.messages)
    ledger = Ledger(counter)  # counts the live context as sent, as compaction does
    ledger.withhold_thinking(m for m in t.messages if m.index in live.unsent_thinking)
    # A conversation's size is what its client sends: what its compaction record carries, and the rest.
    carried = {c: reset.carried for c, reset in live.resets.items()}
    sizes = [
        ledger.total([*carried.get(c, ()), *live.split(t.conversation(c))[1]]) for c in range(t.conversations)
    ]
    exclude = [n.value for n in planted.needles] + ([planted.instruction] if planted.instruction else [])
    window = options.window or max([*sizes, 1])
    return _Prepared(src, planted, window, first_requests(t), tuple(sent_messages(t)), exclude)


def _check(options: EvalOptions) -> tuple[str, ...]:
    """The strategies to run; a usage error for an unknown one or a bad option."""
    names = options.strategies or tuple(registry())
    unknown = [n for n in names if n not in registry()]
    if unknown:
        raise UsageError(f"unknown strategy {unknown[0]!r} (known: {', '.join(sorted(registry()))})")
    if not options.targets or any(not 0 < t <= 1 for t in options.targets):
        raise UsageError(
            "{targets} are shares of the window between 0 and 1, e.g. 0.1,0.25", options=("targets",)
        )
    if options.window is not None and not 0 < options.window <= MAX_TOKENS:
        raise UsageError(
            f"{{window}} must be a positive number of tokens up to 2**53, not {options.window}",
            options=("window",),
        )
    if options.search_scope not in ("session", "archive"):
        raise UsageError(
            f"{{search_scope}} is session or archive, not {options.search_scope!r}", options=("search_scope",)
        )
    if options.needles < 1 or options.search_k < 1:
        raise UsageError("{needles} and {search_k} must be at least 1", options=("needles", "search_k"))
    return names


def _measure(
    prep: _Prepared,
    strategy: str,
    target: float,
    options: EvalOptions,
    store: Archive,
    counter: Counter,
    judge: Judge | None,
) -> tuple[Case, tuple[bool, ...]]:
    """One compaction measured, and which needles its output still holds."""
    t, planted = prep.planted.transcript, prep.planted
    opts = CompactOptions(
        strategy=strategy,
        target_ratio=target,
        window=prep.window,
        keep_last=options.keep_last,
        pins=(planted.pin,) if planted.pin else (),
        summarizer=options.summarizer,
        tokenizer=options.tokenizer,
        allow_over=True,
        use_cache=options.use_cache,
    )
    case = Case(prep.source.name, t.format, strategy, target, prep.window, int(target * prep.window), "")
    start = time.perf_counter()
    try:
        result = compact_transcript(t, opts, archive=store, counter=counter, original_bytes=planted.data)
    except CtxcError as exc:
        return replace(case, error=str(exc)), ()
    seconds = time.perf_counter() - start
    out = result.transcript
    sent = sent_messages(out)  # what the client sends next
    out_text = text_of(sent)
    flat = norm(out_text)
    instruction = planted.instruction
    case = replace(
        case,
        archive_id=result.archive_id,
        tokens_before=result.tokens_before,
        tokens_after=result.tokens_after,
        seconds=seconds,
        first_requests=(sum(norm(r) in flat for r in prep.requests), len(prep.requests)),
        pinned=(1 if instruction and norm(instruction) in flat else 0, 1 if instruction else 0),
        # Of what the client sent before: history it no longer sends is not lost here.
        survival=survival(prep.sent, out_text, exclude=prep.exclude),
        problems=problems(live_messages(out), live_messages(t)),
        budget_ok=all(c.tokens_after <= c.target for c in result.conversations),
        judge=judge.score(sent, planted, t) if judge is not None else None,
    )
    return case, tuple(n.value in out_text for n in planted.needles)


def run_eval(
    sources: Sequence[Source | str],
    options: EvalOptions = EvalOptions(),
    *,
    archive: str | Path | None = None,
    judge: Judge | None = None,
    progress: Callable[[str], None] | None = None,
    fail_fast: bool = False,
    on_failed: Callable[[FailedSource], None] | None = None,
) -> EvalReport:
    """Plant, compact with every strategy to every target, search, measure (in ``archive`` if given).
    ``sources`` are transcripts or file paths; one that cannot be read goes to the report's ``failed``
    (and to ``on_failed``, before any measuring) and the others are still measured, unless
    ``fail_fast``: then the report holds that failure alone, and nothing is measured."""
    names = _check(options)
    counter = make_counter(options.tokenizer, use_cache=options.use_cache)
    prepared: list[_Prepared] = []
    failed: list[FailedSource] = []
    for src in sources:
        try:
            prepared.append(_prepare(_read(src), options, counter))
        except UsageError:
            raise  # wrong for every file: stop at once
        except CtxcError as exc:
            name = src.name if isinstance(src, Source) else src
            where = "" if exc.path is not None else f"{name}: "  # the error names its file itself
            failure = FailedSource(exc.path or name, where + str(exc), int(exc.exit_code))
            failed.append(failure)
            if on_failed is not None:
                on_failed(failure)
            if fail_fast:
                return EvalReport(options, (), {}, (failure,))
    measured: list[tuple[_Prepared, Case, tuple[bool, ...]]] = []
    temporary = tempfile.TemporaryDirectory(prefix="ctxc-eval-") if archive is None else None
    with temporary or contextlib.nullcontext(str(archive)) as directory:
        store = Archive(Path(directory))
        for prep in prepared:
            for strategy in names:
                for target in options.targets:
                    if progress is not None:
                        progress(f"{Path(prep.source.name).name}: {strategy} to {target:.0%}")
                    case, retained = _measure(prep, strategy, target, options, store, counter, judge)
                    measured.append((prep, case, retained))
        # Search once every original is archived and indexed: needles compete with all of it.
        ranks = _search_ranks(prepared, store, options)
    cases: list[Case] = []
    for prep, case, retained in measured:
        name = prep.source.name
        outcomes = (  # read only for a case without error: a failed one measured no needles
            NeedleOutcome(n.kind, n.subject, n.value, n.query, n.message, retained[k], ranks[(name, k)])
            for k, n in enumerate(prep.planted.needles)
        )
        cases.append(case if case.error is not None else replace(case, needles=tuple(outcomes)))
    planted = {p.source.name: (len(p.planted.needles), options.needles) for p in prepared}
    return EvalReport(options, tuple(cases), planted, tuple(failed))


def _search_ranks(
    prepared: Sequence[_Prepared], store: Archive, options: EvalOptions
) -> dict[tuple[str, int], int | None]:
    """(source, needle number) → :func:`_search_rank` of every planted needle, in one open index."""
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
                ranks[(prep.source.name, k)] = _search_rank(index, needle, ident, options, embedder)
    return ranks


def _search_rank(
    index: SearchIndex, needle: Needle, ident: str, options: EvalOptions, embedder: Embedder | None
) -> int | None:
    """The 1-based rank of the first top hit in the needle's own original (``ident``) holding its value."""
    scope = ident if options.search_scope == "session" else None
    hybrid = embedder is not None
    hits = search_index(
        index, needle.query, limit=options.search_k, hybrid=hybrid, archive_id=scope, embedder=embedder
    )
    found = (r for r, hit in enumerate(hits, 1) if hit.archive_id == ident and needle.value in hit.text)
    return next(found, None)
