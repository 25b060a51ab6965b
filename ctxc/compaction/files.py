"""Compacting one file end to end: read, archive, compact, write atomically, record the run. A job and
its report are plain data, so each file of a batch takes the same steps in a worker process."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from dataclasses import asdict, dataclass
from typing import Any, BinaryIO

from ctxc.archive import Archive
from ctxc.archive_store import ArchiveStore, UnwrittenArchive
from ctxc.compaction.base import Action
from ctxc.compaction.run import CompactionResult, CompactOptions, compact_transcript
from ctxc.errors import UsageError
from ctxc.formats import get_adapter
from ctxc.formats.base import ForksSessions
from ctxc.live import thread_usage
from ctxc.model import Transcript
from ctxc.output import atomic_output, check_output, dumps, envelope, make_parents
from ctxc.pricing import default_prices, saving_per_turn
from ctxc.reader import ReadOptions, Spool, named_bytes, open_binary, read_all
from ctxc.tokens import counting_processes
from ctxc.tokens.reading import load_counted


@dataclass(frozen=True, slots=True)
class CompactJob:
    """Everything one file's compaction needs; picklable, so it can run in a worker process."""

    path: str
    output: str  # a file, ``-`` for stdout; for ``in_place`` the input itself
    options: CompactOptions
    archive: str | None = None
    input_format: str | None = None
    read_options: ReadOptions = ReadOptions()
    dry_run: bool = False
    in_place: bool = False
    make_dirs: bool = False  # create the output's directory first (``--out-dir``)
    index: bool = True  # index the original for ``ctxc search`` now (not with ``--no-index``)
    #: Write the run's report here (one file's ``--report``), before the output takes its name.
    report: str | None = None
    fork: bool = False  # write a new session beside the original, with a new id (``output`` is unused)
    #: In a batch, its options fingerprint, recorded in the manifest with the output path (for re-runs).
    batch_options: str | None = None


def options_fingerprint_doc(job: CompactJob) -> dict[str, Any]:
    """What decides a file's output (not retries, timeouts, concurrency or caching): a batch re-run
    with the same of these may skip the file."""
    opts = asdict(job.options)
    summarizer = opts.pop("summarizer_options")
    opts.pop("use_cache")
    opts["summarizer_model"] = summarizer.get("model")
    opts["summarizer_command"] = summarizer.get("command")
    opts["segment_tokens"] = summarizer.get("segment_tokens")
    return {
        **opts,
        "input_format": job.input_format,
        "skip_invalid": job.read_options.skip_invalid,
        "in_place": job.in_place,
    }


def _saving_worth(result: CompactionResult, options: CompactOptions) -> dict[str, Any] | None:
    """What the tokens removed save on every following call, at the model's input and cache-read
    prices; None when it is unpriced."""
    models = [u.model for u in thread_usage(result.transcript.usage) if u.model]
    model = options.model or (models[-1] if models else None)
    saved = result.tokens_before - result.tokens_after
    table = default_prices()
    worth = saving_per_turn(saved, model, table)
    if worth is None or saved <= 0:
        return None
    return {
        "model": model,
        "tokens": saved,
        "usd_input": worth[0],
        "usd_cache_read": worth[1],
        "as_of": table.as_of,
    }


#: An action's fields, read directly: ``asdict`` deep-copies each value, for thousands of actions.
_ACTION_FIELDS = tuple(f.name for f in dataclasses.fields(Action))


def compaction_report(
    result: CompactionResult, options: CompactOptions, name: str, output: str
) -> dict[str, Any]:
    """The ``ctxc.compact/1`` document: what ``--report`` writes and the manifest's ``run`` entry."""
    return envelope(
        "compact",
        run={
            "input_path": name,
            "output_path": output,
            "archive_id": result.archive_id,
            "input_sha256": result.input_sha256,
            "format": result.transcript.format,
            "strategy": options.strategy,
            "options": {
                "target_tokens": options.target_tokens,
                "target_ratio": options.target_ratio,
                "model": options.model,
                "window": result.window,
                "keep_last": options.keep_last,
                "pins": list(options.pins),
                "summarizer": options.summarizer,
                "tokenizer": options.tokenizer,
                "settings": dict(options.settings),
            },
            "tokens_before": result.tokens_before,
            "tokens_after": result.tokens_after,
            "savings": result.savings_by_strategy(),
            "summarizer": {"name": options.summarizer, **dict(result.summarizer_usage or {})},
            "saving_per_turn": _saving_worth(result, options),
        },
        conversations=[
            {
                "conversation": c.conversation,
                "tokens_before": c.tokens_before,
                "tokens_after": c.tokens_after,
                "target": c.target,
                "pinned_tokens": c.pinned_tokens,
                "actions": [{k: getattr(a, k) for k in _ACTION_FIELDS} for a in c.actions],
                "repaired": [p.message for p in c.repaired],
            }
            for c in result.conversations
        ],
    )


def compact_file(job: CompactJob) -> dict[str, Any]:
    """Compact one file and return its report: archive the original, write a temporary output, record the
    run, then rename the output into place (no partial output; every compacted file is on record)."""
    if job.in_place and job.path == "-":
        raise UsageError("{in_place} needs a file, not stdin", options=("in_place",))
    if job.fork and job.path == "-":
        raise UsageError("{fork} needs a session file, not stdin", options=("fork",))
    if not job.dry_run and not job.make_dirs and not job.fork:  # a bad -o fails now, not after the work
        check_output(job.output, inputs=() if job.in_place else (job.path,))
    if job.path != "-":  # a missing or unreadable input fails before an archive is made for it
        open_binary(job.path)[1].close()
    if job.dry_run:  # planned against the archive it would store in, which stays as it is
        return _compact_file(job, UnwrittenArchive.open(job.archive), None)
    store = Archive.open(job.archive, index_on_write=job.index)
    store.check_manifest()  # fail before archiving and compacting, not after the output
    store.refuse_output_inside(job.output)
    with contextlib.closing(store.spool()) as spool:
        return _compact_file(job, store, spool)


def _compact_file(job: CompactJob, store: ArchiveStore, spool: Spool | None) -> dict[str, Any]:
    # A file's bytes go to the archive's spool as it is parsed (not held twice); stdin is read whole first.
    source: str | BinaryIO = job.path
    size = 0
    if job.path == "-":
        name, whole = read_all(job.path)
        source, size = named_bytes(name, whole), len(whole)
        del whole
    else:
        with contextlib.suppress(OSError):  # the reader says what is wrong with the file
            size = os.stat(job.path).st_size
    opts = job.options
    counter = opts.counter()
    # A large input is counted on every core, each batch while the next is parsed.
    with counting_processes(counter, size):
        options = dataclasses.replace(job.read_options, spool=spool)
        transcript, counts = load_counted(source, counter, input_format=job.input_format, options=options)
        source = job.path  # stdin's bytes are the records' now
        name = transcript.source
        fork = _fork(transcript, name, job) if job.fork else None
        output = fork[1] if fork is not None else job.output
        result = compact_transcript(
            transcript, opts, archive=store, counter=counter, original_bytes=spool, counts=counts
        )
    doc = compaction_report(result, job.options, name, output)
    written = result.transcript
    if fork is not None:
        adapter, _, session_id = fork
        written = adapter.with_session_id(written, session_id)
        doc["run"] |= {"session_id": session_id, "resume": adapter.resume_command(session_id)}
    if job.dry_run:
        return doc
    if job.make_dirs:
        make_parents(job.output)
    run = {**doc["run"], "output_sha256": ""}  # filled in as the output is written
    if job.batch_options is not None:
        run["batch"] = {"options": job.batch_options, "output": os.path.realpath(job.output)}
    recorded: list[dict[str, Any]] = []

    digest = hashlib.sha256()

    def record() -> None:
        run["output_sha256"] = digest.hexdigest()
        recorded.append(store.record_run(run))
        if job.report is not None:  # a report that cannot be written fails the run: no output either
            with atomic_output(job.report, inputs=(name,)) as handle:
                handle.write(dumps({**doc, "run": recorded[0]}))

    # In place is the one write onto an input (the original is archived). The run is recorded before the
    # output takes its place: no output exists that the manifest does not know.
    with atomic_output(
        output,
        inputs=() if job.in_place else (name,),
        like=name,
        before_commit=record,
        swept=job.batch_options is not None,  # compact_batch swept every output folder first
    ) as handle:
        for part in written.parts():  # record by record: the output is never one large bytes object
            digest.update(part)
            handle.write(part)
    return {**doc, "run": recorded[0]}


def _fork(transcript: Transcript, name: str, job: CompactJob) -> tuple[ForksSessions, str, str]:
    """The adapter, the new session's path and its id, for ``--fork``."""
    adapter = get_adapter(transcript.format)
    if not isinstance(adapter, ForksSessions):
        raise UsageError(
            f"{{fork}} needs a Claude Code session or a Codex rollout; {name} is {transcript.format}",
            options=("fork",),
        )
    session_id = adapter.new_session_id()
    path = adapter.fork_path(name, session_id)
    if not job.dry_run:
        check_output(path, inputs=(name,))
    return adapter, path, session_id
