"""Compacted Codex rollouts, written as Codex records its own compaction (docs/formats.md says how)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from ctxc.formats.base import fix_eols, output_messages, replaces, run_timestamp
from ctxc.formats.codex_items import encode_compacted, encode_message, is_envelope, new_item
from ctxc.model import Message, Record, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, Transcript

#: UI events that repeat a conversation item, and the payload field holding the repeated text.
_MIRRORS = {"user_message": "message", "agent_message": "message", "agent_reasoning": "text"}


def _mirror_kind(m: Message) -> str | None:
    """Which mirror event Codex writes for this message, if any."""
    itype = m.meta.get("item_type")
    if itype == "reasoning":
        return "agent_reasoning"
    if itype == "message" and "source_role" not in m.meta:
        return {"user": "user_message", "assistant": "agent_message"}.get(m.role)
    return None


def _texts(m: Message) -> set[str]:
    return {m.text, *(b.text for b in m.blocks if isinstance(b, TextBlock | ThinkingBlock))}


def _tool_ids(m: Message) -> set[str]:
    ids = {b.id for b in m.blocks if isinstance(b, ToolUseBlock)}
    ids |= {b.tool_use_id for b in m.blocks if isinstance(b, ToolResultBlock)}
    return ids | {v for k in ("id", "call_id") if isinstance(v := m.meta.get(k), str)}


def _envelope_type(data: Any) -> str | None:
    return data["type"] if isinstance(data, dict) and is_envelope(data) else None


def _is_event(data: Any, etype: str | None = None) -> bool:
    return _envelope_type(data) == "event_msg" and (etype is None or data["payload"].get("type") == etype)


class CompactedWriter:
    """One pass over the input records that writes the compacted rollout."""

    def __init__(self, transcript: Transcript, outputs: Mapping[int, Sequence[Message]]) -> None:
        self.records = transcript.records
        originals = transcript.messages
        self.original_ids = {id(m) for m in originals}
        self.by_record = {r: m for m in originals for r in m.records}
        self.out_messages = output_messages(transcript, outputs)
        kept = {r for m in self.out_messages for r in m.records}
        self.dropped = {r for r in self.by_record if r not in kept}
        # The log's last compaction, whose replacement_history compaction may have changed.
        reset = next((b for b in reversed(transcript.boundaries) if b.resets and b.carried), None)
        self.reset_record = (
            None if reset is None else next(r for r, rec in enumerate(self.records) if rec.line == reset.line)
        )
        self.carried = reset.carried if reset is not None else ()
        self.legacy = bool(originals) and originals[0].meta.get("dialect") == "legacy"
        self.removed = self._removed_events()
        # Call types by id: a result ctxc adds must be the output item its call's type expects.
        uses = [(b, m) for m in originals for b in m.blocks if isinstance(b, ToolUseBlock)]
        self.call_types = {b.id: str(m.meta.get("item_type")) for b, m in uses}
        self.eol = next((r.eol for r in self.records if r.eol), b"\n")
        self.out: list[Record] = []
        # The history Codex would resume with at this point of the output (see _emit).
        self.view: list[Any] = []
        self.last_timestamp: str | None = None
        self.next_record = 0

    def _removed_events(self) -> set[int]:
        """Events of dropped messages: their UI mirrors, tool events and the token counts of their calls
        (only events next to a dropped message are candidates)."""
        if not self.dropped:
            return set()
        message_records = sorted(self.by_record)
        by_kind: dict[str, list[int]] = {}
        for r in message_records:
            if (kind := _mirror_kind(self.by_record[r])) is not None:
                by_kind.setdefault(kind, []).append(r)
        kept_ids = {i for m in self.out_messages for i in _tool_ids(m)}
        dropped_ids = {i for r in self.dropped for i in _tool_ids(self.by_record[r])} - kept_ids
        removed: set[int] = set()
        for r, rec in enumerate(self.records):
            if r in self.by_record or not _is_event(rec.data):
                continue
            before, after = _around(message_records, r)
            if before not in self.dropped and after not in self.dropped:
                continue
            payload = rec.data["payload"]
            etype = str(payload.get("type"))
            if etype == "token_count":
                owner = before  # a call's usage is recorded after the items it produced
            elif etype in _MIRRORS:
                owner = self._mirror_owner(r, etype, payload.get(_MIRRORS[etype]), by_kind)
            else:
                call_id = payload.get("call_id", payload.get("callId"))
                if isinstance(call_id, str) and call_id in dropped_ids:
                    removed.add(r)
                continue
            if owner in self.dropped:
                removed.add(r)
        return removed

    def _mirror_owner(self, r: int, etype: str, text: Any, by_kind: Mapping[str, list[int]]) -> int | None:
        """The item a mirror event repeats: the neighbour of its kind (before it for streamed output, after
        for user input) with the same text, else the nearest (redacted logs differ in text)."""
        before, after = _around(by_kind.get(etype, []), r)
        if isinstance(text, str):
            same = [c for c in (before, after) if c is not None and text in _texts(self.by_record[c])]
            if len(same) == 1:
                return same[0]
        if before is None or after is None:
            return after if before is None else before
        if r - before != after - r:
            return before if r - before < after - r else after
        return before if etype == "user_message" else after

    def _emit(self, rec: Record) -> None:
        self.out.append(rec)
        data = rec.data
        rtype = _envelope_type(data)
        if rtype == "response_item":
            self.view.append(data["payload"])
        elif rtype == "compacted" and isinstance(data["payload"].get("replacement_history"), list):
            self.view = list(data["payload"]["replacement_history"])
        if rtype is not None and isinstance(data.get("timestamp"), str):
            self.last_timestamp = data["timestamp"]

    def _emit_new(self, data: dict[str, Any]) -> None:
        self._emit(Record(line=0, raw=orjson.dumps(data), eol=self.eol, data=data, kind="message"))

    def _emit_compaction(self, text: str, items: list[Any], ts: str) -> None:
        self._emit_new(encode_compacted(text, items, ts))
        self._emit_new({"timestamp": ts, "type": "event_msg", "payload": {"type": "context_compacted"}})

    def _flush_until(self, stop: int) -> None:
        """Pass the records before ``stop``: non-message records unless removed; message records never
        (kept ones are written by their message, dropped ones not at all)."""
        for r in range(self.next_record, stop):
            if r not in self.by_record and r not in self.removed:
                self._emit(self.records[r])
        self.next_record = max(self.next_record, stop)

    def _replaced(self, m: Message, start: int, limit: int) -> int | None:
        """The first dropped record in ``start..limit`` that ``m`` says it replaces (``meta["replaces"]``)."""
        span = replaces(m)
        if span is None:
            return None
        dropped = (r for r in range(start, limit) if r in self.dropped)
        return next((r for r in dropped if span[0] <= self.by_record[r].index <= span[1]), None)

    def _after_compaction(self, r: int, limit: int) -> int:
        """The record after compaction record ``r`` and the ``context_compacted`` event mirroring it."""
        r += 1
        return r + 1 if r < limit and _is_event(self.records[r].data, "context_compacted") else r

    def _after_compactions(self, anchor: int, limit: int) -> int:
        # A recorded compaction between here and the next kept message would reset Codex's history
        # after a new message and lose it: new messages go after it (and its context_compacted event).
        for r in range(anchor, limit):
            if _envelope_type(self.records[r].data) == "compacted":
                anchor = self._after_compaction(r, limit)
        return anchor

    def _timestamp(self, r: int | None) -> str:
        """The time of record ``r``, else of the line before it: deterministic, and in order."""
        ts = None if r is None else self.records[r].data.get("timestamp")
        return ts if isinstance(ts, str) else self.last_timestamp or run_timestamp()

    def _item(self, m: Message) -> dict[str, Any]:
        results = [b for b in m.blocks if isinstance(b, ToolResultBlock)]
        if results and "item_type" not in m.meta:
            call_type = self.call_types.get(results[0].tool_use_id)
            itype = "custom_tool_call_output" if call_type == "custom_tool_call" else "function_call_output"
            m = replace(m, meta={**m.meta, "item_type": itype})
        return new_item(m)

    def _carried_part(self) -> tuple[int, int]:
        """The output span of new messages around the log's compaction record that stand for its carried
        history (they hold carried messages or replace some: indexes below 0), else (0, 0)."""
        if self.reset_record is None:
            return 0, 0
        messages = self.out_messages
        before = [i for i, m in enumerate(messages) if m.records and m.records[0] < self.reset_record]
        start = before[-1] + 1 if before else 0
        end = start
        while end < len(messages) and not messages[end].records:
            end += 1
        if not any(m.meta.get("carried") or (replaces(m) or (0, 0))[0] < 0 for m in messages[start:end]):
            return 0, 0
        return start, end

    def _rewrite_carried(self, part: Sequence[Message]) -> None:
        """A ``compacted`` record after the log's own, carrying ``part`` as the history Codex resumes
        with; nothing when ``part`` is what the log's record already carries."""
        same = len(part) == len(self.carried) and all(
            m.meta.get("carried") and m.blocks == c.blocks for m, c in zip(part, self.carried, strict=True)
        )
        if same:
            return
        assert self.reset_record is not None
        self._flush_until(self._after_compaction(self.reset_record, len(self.records)))
        ts = self._timestamp(self.reset_record)
        items = [self._item(m) if m.raw is None else encode_message(m) for m in part]
        self._emit_compaction("\n\n".join(m.text for m in part if m.meta.get("ctxc") == "summary"), items, ts)

    def write(self) -> tuple[Record, ...]:
        messages = self.out_messages
        # The first input record of the next kept message at or after each output position.
        next_kept = [len(self.records)] * (len(messages) + 1)
        for i in range(len(messages) - 1, -1, -1):
            next_kept[i] = messages[i].records[0] if messages[i].records else next_kept[i + 1]
        carried_from, carried_to = self._carried_part()
        for i, m in enumerate(messages):
            if carried_from <= i < carried_to:
                if i == carried_from:
                    self._rewrite_carried(messages[carried_from:carried_to])
            elif m.records:
                self._write_kept(m)
            else:
                self._write_new(m, next_kept[i])
        self._flush_until(len(self.records))
        return fix_eols(self.out, self.records, self.eol)

    def _write_kept(self, m: Message) -> None:
        first = m.records[0]
        self._flush_until(first)
        if id(m) in self.original_ids:
            for r in m.records:
                self._emit(self.records[r])
        else:
            src = self.records[first]
            data = encode_message(m)
            self._emit(Record(src.line, orjson.dumps(data), src.eol or self.eol, data, "message"))
        self.next_record = max(self.next_record, m.records[-1] + 1)

    def _write_new(self, m: Message, limit: int) -> None:
        # A new message goes where the first record it replaces was, else right after what is written;
        # never before a compaction record Codex would then resume from without it.
        replaced = self._replaced(m, self.next_record, limit)
        anchor = self._after_compactions(self.next_record if replaced is None else replaced, limit)
        self._flush_until(anchor)
        ts = self._timestamp(self._replaced(m, anchor, limit))
        if m.raw is not None:
            self._emit_new(encode_message(m))
        elif self.legacy:
            self._emit_new(self._item(m))
        else:
            if m.meta.get("ctxc") == "summary":
                self._emit_compaction(m.text, list(self.view), ts)
            self._emit_new({"timestamp": ts, "type": "response_item", "payload": self._item(m)})


def _around(pool: Sequence[int], r: int) -> tuple[int | None, int | None]:
    """The entries of sorted ``pool`` just before ``r`` and at or after it."""
    pos = bisect_left(pool, r)
    return (pool[pos - 1] if pos else None), (pool[pos] if pos < len(pool) else None)
