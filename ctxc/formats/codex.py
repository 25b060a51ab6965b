"""OpenAI Codex CLI rollouts (``~/.codex/sessions/**/rollout-*.jsonl``): ``{timestamp, type, payload}`` lines
whose ``response_item`` lines are the model's history, one message each, or (legacy, 2025-09) bare items
after a ``{id, timestamp, instructions}`` header. Items: :mod:`.codex_items`; writing: :mod:`.codex_write`."""

from __future__ import annotations

import os
import secrets
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ctxc.errors import FormatError
from ctxc.formats import register
from ctxc.formats.base import (
    FormatAdapter,
    Item,
    count,
    importance_of,
    recorded_usage,
    rename_session,
    run_time,
)
from ctxc.formats.codex_items import (
    CALL_TYPES,
    ENVELOPE_TYPES,
    ITEM_TYPES,
    RESULT_TYPES,
    encode_message,
    history_messages,
    is_envelope,
    parse_item,
)
from ctxc.formats.codex_write import CompactedWriter
from ctxc.formats.dicts import uses_responses_parts
from ctxc.live import compaction_block_boundary, request_text
from ctxc.model import Boundary, Message, Record, TextBlock, ToolUseBlock, Transcript, Usage


def _is_bare_item(data: Mapping[str, Any]) -> bool:
    """A legacy bare ResponseItem; a message must use Responses-API parts to tell it from chat logs."""
    itype = data.get("type")
    if not isinstance(itype, str) or itype not in ITEM_TYPES or "payload" in data:
        return False
    if itype == "message":
        return isinstance(data.get("role"), str) and uses_responses_parts(data)
    if itype in CALL_TYPES or itype in RESULT_TYPES:
        return "call_id" in data
    return itype in ("reasoning", "ghost_snapshot", "web_search_call")


def _codex_shaped(data: Mapping[str, Any], *, first: bool) -> bool:
    if is_envelope(data):
        return data["type"] in ENVELOPE_TYPES
    keys = data.keys()
    legacy_header = {"id", "timestamp", "instructions"} <= keys and not keys & {"type", "messages"}
    return data.get("record_type") == "state" or _is_bare_item(data) or (first and legacy_header)


_USAGE_KEYS = ("input_tokens", "output_tokens", "cached_input_tokens", "cache_write_input_tokens")


def _usage(payload: Mapping[str, Any], line: int, last_total: list[Any], model: str | None) -> Usage | None:
    """A Usage for a token_count event that records a new API call (made with ``model``), else None: one
    repeating the last totals is a rate-limit refresh, skipped so sums are not doubled."""
    info = payload.get("info")
    if isinstance(info, dict):
        last, total = info.get("last_token_usage"), info.get("total_token_usage")
        window = info.get("model_context_window")
    elif "info" not in payload and "input_tokens" in payload:  # older flat token_count events
        last, total, window = payload, None, None
    else:
        return None
    if not isinstance(last, dict):
        return None
    if total is not None:
        if total == last_total[0]:
            return None
        last_total[0] = total
    if count(last.get("input_tokens")) == 0 and count(last.get("output_tokens")) == 0:
        return None
    # Codex input_tokens is the whole prompt, cached tokens included: keep Usage.context == input_tokens.
    window = window if count(window) > 0 else None
    return recorded_usage(last, _USAGE_KEYS, line, cached_in_input=True, window=window, model=model)


def uuid7() -> str:
    """A time-ordered UUID (version 7), the kind Codex names its sessions with."""
    millis = time.time_ns() // 1_000_000
    rand_a, rand_b = secrets.randbits(12), secrets.randbits(62)
    return str(uuid.UUID(int=(millis << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b))


class CodexAdapter(FormatAdapter):
    name = "codex"
    tool_role = True
    usage_needles: tuple[bytes, ...] = (b'"token_count"', b'compacted"', b'"turn_context"')
    rewrites_carried = True  # a new compacted record replaces the last one's replacement_history
    description = (
        "OpenAI Codex CLI rollout (session_meta/response_item/event_msg lines, and the 2025 legacy form)"
    )

    # Forking (``compact --fork``): a rollout is ``rollout-<time>-<id>.jsonl``, its ``session_meta`` naming
    # the id; Codex finds a session by the id in the file name.
    def new_session_id(self) -> str:
        return uuid7()

    def with_session_id(self, transcript: Transcript, session_id: str) -> Transcript:
        metas = (r.data for r in transcript.records if isinstance(r.data, dict))
        payload = next((d.get("payload") for d in metas if d.get("type") == "session_meta"), None)
        old = payload.get("id") if isinstance(payload, dict) else None
        if not isinstance(old, str) or not old:
            why = "this rollout names no session id (session_meta.payload.id)"
            raise FormatError(why, path=transcript.source)
        return rename_session(transcript, (b"id", b"session_id"), session_id, old=old)

    def fork_path(self, original: str, session_id: str) -> str:
        stamp = run_time().strftime("%Y-%m-%dT%H-%M-%S")
        return os.path.join(os.path.dirname(original), f"rollout-{stamp}-{session_id}.jsonl")

    def resume_command(self, session_id: str) -> str:
        return f"codex resume {session_id}"

    def sniff(self, sample: Sequence[Record]) -> int:
        records = [r.data for r in sample if isinstance(r.data, dict)]
        hits = sum(1 for i, data in enumerate(records) if _codex_shaped(data, first=i == 0))
        if records and hits * 2 >= len(records):
            return 95
        return 40 if hits else 0

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        index = 0
        call_names: dict[str, str] = {}
        last_total: list[Any] = [None]
        last_usage: Usage | None = None
        model: str | None = None  # from the newest turn_context
        requests: list[Message] = []  # the user's requests since the last compaction
        compacted_pending = False  # a `compacted` record whose context_compacted event has not come yet
        for rec_index, rec in records:
            data = rec.data
            if not isinstance(data, dict):
                continue
            rtype = data.get("type") if is_envelope(data) else None
            payload: Any = data.get("payload")
            if rtype == "turn_context":
                named = payload.get("model")
                model = named if isinstance(named, str) and named else model
            elif rtype == "event_msg" and payload.get("type") == "token_count":
                if (usage := _usage(payload, rec.line, last_total, model)) is not None:
                    last_usage = usage
                    yield usage
            elif rtype == "event_msg" and payload.get("type") == "context_compacted":
                if not compacted_pending:
                    yield Boundary(kind="codex_context_compacted", line=rec.line, pre_tokens=_pre(last_usage))
                compacted_pending = False  # the event that mirrors the compacted record
            elif rtype == "compacted":
                compacted_pending = True
                carried = _carried(payload, rec.line, requests)
                requests = [m for m in carried if m.is_request]
                # Codex resumes from its last compacted record.
                pre = _pre(last_usage)
                yield Boundary(
                    "codex_compacted", rec.line, pre_tokens=pre, resets=True, index=index, carried=carried
                )
            elif (message := _message(data, rtype, rec_index, rec.line, index, call_names)) is not None:
                compacted_pending = False
                if message.is_request and request_text(message):
                    requests.append(message)
                if (reset := compaction_block_boundary(message)) is not None:
                    yield reset
                yield message
                index += 1

    def write_compacted(
        self, transcript: Transcript, outputs: Mapping[int, Sequence[Message]], *, archive_id: str
    ) -> tuple[Record, ...]:
        """The rollout with ``outputs`` in place of its conversation, recorded as Codex would (``archive_id``
        is already cited in the summary and placeholder texts)."""
        del archive_id
        return CompactedWriter(transcript, outputs).write()

    encode_message = staticmethod(encode_message)


def _message(
    data: dict[str, Any], rtype: str | None, rec_index: int, line: int, index: int, call_names: dict[str, str]
) -> Message | None:
    """The message of a ``response_item`` line or a legacy bare item, else None."""
    itype = data.get("type")  # a legacy bare item's; an object or a list is no item type (nor hashable)
    if rtype == "response_item":
        payload, dialect = data["payload"], "current"
    elif rtype is None and isinstance(itype, str) and itype in ITEM_TYPES and "payload" not in data:
        payload, dialect = data, "legacy"
    else:
        return None
    parsed = parse_item(payload, line, call_names)
    if parsed is None:
        return None
    role, blocks, meta = parsed
    # Names stay known for the whole file: a call may be answered more than once.
    call_names.update((b.id, b.name) for b in blocks if isinstance(b, ToolUseBlock))
    meta["dialect"] = dialect
    if rtype is not None and isinstance(data.get("timestamp"), str):
        meta["timestamp"] = data["timestamp"]
    importance = importance_of(data if "importance" in data else payload)
    return Message(role, blocks, line, index, (rec_index,), importance=importance, meta=meta, raw=data)


def _carried(payload: Any, line: int, requests: Sequence[Message]) -> tuple[Message, ...]:
    """What Codex resumes with from a ``compacted`` record: its ``replacement_history`` or, for records
    that have none (older clients), the user's requests so far and the summary as a user message."""
    if not isinstance(payload, dict):
        return ()
    if isinstance(payload.get("replacement_history"), list):
        return history_messages(payload, line)
    summary = payload.get("message")
    kept = tuple(replace(m, line=line) for m in requests)
    if not isinstance(summary, str) or not summary:
        return kept
    return (*kept, Message("user", (TextBlock(text=summary),), line=line, meta={"is_compact_summary": True}))


def _pre(usage: Usage | None) -> int | None:
    # Context of the last recorded call plus what it produced: the history size compaction replaced.
    return None if usage is None else usage.context + usage.output


register(CodexAdapter())
