"""Per-file work of analyze, validate, convert and repair as picklable jobs for
:func:`ctxc.batch.run_batch`; each raises :class:`~ctxc.errors.CtxcError` for a bad file."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ctxc.archive_store import sha256_hex
from ctxc.formats import dump, get_adapter, load, open_stream
from ctxc.model import Message
from ctxc.output import atomic_output
from ctxc.pricing import default_prices
from ctxc.reader import ReadOptions, named_bytes, read_all
from ctxc.report import Analysis
from ctxc.stages import DEFAULT_THRESHOLDS
from ctxc.tokens import Counter, make_counter
from ctxc.tokens.cost import compare_with_o200k
from ctxc.validate import all_problems


@functools.lru_cache(maxsize=8)
def process_counter(tokenizer: str, use_cache: bool, model: str | None, concurrency: int) -> Counter:
    # One cached counter per process and setting: a worker analyzing 200 files loads the BPE once.
    return make_counter(tokenizer, use_cache=use_cache, model=model, concurrency=concurrency)


@dataclass(frozen=True, slots=True)
class AnalyzeJob:
    path: str
    tokenizer: str = "o200k_base"
    use_cache: bool = True
    model: str | None = None
    window: int | None = None
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
    input_format: str | None = None
    read_options: ReadOptions = ReadOptions()
    top: int = 10
    concurrency: int = 4
    forecast: bool = False  # also dry-run each adaptive stage
    prices: str | None = None  # a price table over the shipped one


def analyze_file(job: AnalyzeJob) -> Analysis:
    """``ctxc analyze`` for one file, plus the forecast and the Claude/o200k ratio when asked."""
    from ctxc.analysis import analyze

    counter = process_counter(job.tokenizer, job.use_cache, job.model, job.concurrency)
    src: Any = job.path
    data = b""
    if job.forecast or job.tokenizer == "anthropic":  # both read it again: read the input once for all
        name, data = read_all(job.path)
        src = named_bytes(name, data)
    result = analyze(
        src,
        counter=counter,
        window=job.window,
        model=job.model,
        thresholds=job.thresholds,
        input_format=job.input_format,
        options=job.read_options,
        top=job.top,
        prices=default_prices(job.prices),
    )
    if job.forecast:
        from ctxc.compaction.forecast import forecast

        transcript = load(
            named_bytes(result.path, data), input_format=job.input_format, options=job.read_options
        )
        result = replace(
            result,
            forecast=forecast(transcript, window=result.window, counter=counter, thresholds=job.thresholds),
        )
    if job.tokenizer == "anthropic":  # how far Claude's counts are from o200k's (the estimate's error)
        stream = open_stream(
            named_bytes(result.path, data), input_format=job.input_format, options=job.read_options
        )
        try:
            messages = (m for m in stream.items if isinstance(m, Message))
            result = replace(
                result, versus_o200k=compare_with_o200k(messages, counter, make_counter("o200k_base"))
            )
        finally:
            stream.close()
    return result


_PROBLEM_FIELDS = ("code", "line", "index", "conversation", "tool_id", "message")


@dataclass(frozen=True, slots=True)
class ValidateJob:
    path: str
    strict: bool = True
    input_format: str | None = None
    read_options: ReadOptions = ReadOptions()


def validate_file(job: ValidateJob) -> dict[str, Any]:
    """Every pairing and role problem of one file, as the ``ctxc.validate/1`` per-file entry."""
    t = load(job.path, input_format=job.input_format, options=job.read_options)
    problems = all_problems(t.messages, strict=job.strict)
    return {
        "path": t.source,
        "format": t.format,
        "messages": len(t.messages),
        "problems": [{k: getattr(p, k) for k in _PROBLEM_FIELDS} for p in problems],
    }


@dataclass(frozen=True, slots=True)
class ConvertJob:
    path: str
    output: str
    #: ``same`` (the input's own format, byte for byte), ``chat-anthropic`` or ``chat-openai``.
    to: str = "same"
    input_format: str | None = None
    read_options: ReadOptions = ReadOptions()
    make_dirs: bool = False


def convert_file(job: ConvertJob) -> dict[str, Any]:
    """Write one transcript in another format; returns what was written where."""
    from ctxc.convert import convert_transcript

    transcript = load(job.path, input_format=job.input_format, options=job.read_options)
    if job.make_dirs:
        Path(job.output).parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(job.output, inputs=(job.path,), like=job.path) as handle:
        if job.to == "same":
            dump(transcript, handle)
        else:
            handle.write(convert_transcript(transcript, job.to))
    return {"path": transcript.source, "format": transcript.format, "output": job.output, "to": job.to}


@dataclass(frozen=True, slots=True)
class RepairJob:
    path: str
    output: str
    archive: str | None = None  # None: ``$CTXC_ARCHIVE`` or the default
    input_format: str | None = None
    read_options: ReadOptions = ReadOptions()


def repair_file(job: RepairJob) -> dict[str, Any]:
    """Archive one transcript, then write it with its pairing problems fixed and record the run in the
    manifest; returns the manifest entry."""
    from ctxc.archive import Archive
    from ctxc.compaction.write import write_transcript
    from ctxc.repair import repair_messages

    name, data = read_all(job.path)
    transcript = load(named_bytes(name, data), input_format=job.input_format, options=job.read_options)
    store = Archive.open(job.archive)
    store.check_manifest()
    archive_id = store.store(data)
    repaired = {
        conv: repair_messages(transcript.conversation(conv)) for conv in range(transcript.conversations)
    }
    outputs = {conv: messages for conv, (messages, _) in repaired.items()}
    result = write_transcript(transcript, outputs, get_adapter(transcript.format), archive_id=archive_id)
    out_bytes = result.to_bytes()
    entry = {
        "command": "repair",
        "input_path": name,
        "output_path": job.output,
        "archive_id": archive_id,
        "input_sha256": archive_id,
        "output_sha256": sha256_hex(out_bytes),
        "format": transcript.format,
        "fixed": sum(len(fixed) for _, fixed in repaired.values()),
    }
    # Recorded before the output takes its place: no output exists that the manifest does not know.
    with atomic_output(
        job.output, inputs=(name,), like=name, before_commit=lambda: store.record_run(entry)
    ) as handle:
        handle.write(out_bytes)
    return entry
