"""Per-file work of validate, convert and repair as picklable jobs for
:func:`ctxc.batch.run_batch`; each raises :class:`~ctxc.errors.CtxcError` for a bad file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxc.archive_store import sha256_hex
from ctxc.formats import dump, get_adapter, load
from ctxc.output import atomic_output, make_parents
from ctxc.reader import CUT_OFF, ReadOptions, named_bytes, read_all
from ctxc.validate import all_problems

_PROBLEM_FIELDS = ("code", "line", "index", "conversation", "tool_id", "message")


@dataclass(frozen=True, slots=True)
class ValidateJob:
    path: str
    strict: bool = True
    input_format: str | None = None
    read_options: ReadOptions = ReadOptions()


def validate_file(job: ValidateJob) -> dict[str, Any]:
    """Every pairing and role problem of one file, as the ``ctxc.validate/1`` per-file entry; ``warnings``
    are what does not fail it: a last line cut off mid-record is what a session still being written
    holds, so only a log known to be finished is damaged by it."""
    t = load(job.path, input_format=job.input_format, options=job.read_options)
    problems = all_problems(t.messages, strict=job.strict)
    warnings = [{"code": "cut_off", "line": t.cut_line, "message": CUT_OFF}] if t.cut_line else []
    return {
        "path": t.source,
        "format": t.format,
        "messages": len(t.messages),
        "problems": [{k: getattr(p, k) for k in _PROBLEM_FIELDS} for p in problems],
        "warnings": warnings,
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
        make_parents(job.output)
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
    store.refuse_output_inside(job.output)
    archive_id = store.store(data)
    adapter = get_adapter(transcript.format)
    # A format that answers calls with role ``tool`` says so; a chat log shows it by its own results.
    tool_role = True if adapter.tool_role else None
    repaired = {
        conv: repair_messages(transcript.conversation(conv), tool_role=tool_role)
        for conv in range(transcript.conversations)
    }
    outputs = {conv: messages for conv, (messages, _) in repaired.items()}
    result = write_transcript(transcript, outputs, adapter, archive_id=archive_id)
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
