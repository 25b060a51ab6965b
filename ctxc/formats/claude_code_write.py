"""Compacted conversations written back as a Claude Code log, the way Claude Code records ``/compact``
(docs/formats.md says how)."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ctxc.formats.base import fix_eols, output_messages, replaces
from ctxc.formats.claude_code_records import NAMESPACE, content_len, encode_message, patch, tool_results
from ctxc.formats.claude_code_records import str_or_none as _str
from ctxc.live import abandoned_messages
from ctxc.model import Block, Message, Record, TextBlock, ToolResultBlock, ToolUseBlock, Transcript

#: Envelope fields a record ctxc writes copies from a neighbouring record, in Claude Code's key order,
#: so it belongs to the same session, directory and branch (claude-code-log requires cwd and version).
_ENVELOPE = ("userType", "cwd", "sessionId", "version", "gitBranch", "slug", "agentId", "teamName")
#: Fields of non-message records that name another record; a name that was merged away is updated.
_REFERENCES = ("sourceToolAssistantUUID", "leafUuid", "messageId")
_BOUNDARY_CONTENT = "Conversation compacted"
#: Tools that start a subagent; their ``prompt`` input is the first message of the subagent's run.
_SUBAGENT_TOOLS = frozenset({"Task", "Agent"})

#: Sort key of an output record: (file position, 0 for a source record / 1 for a new one, sequence).
_Key = tuple[float, int, int]
#: A thread of the output: the log's own (``_MAIN``), or an inline subagent run (its conversation).
_Thread = int
_MAIN: _Thread = -1


@dataclass
class _Out:
    """One output record: a source record (its bytes, or ``data`` when re-encoded) or a new one."""

    key: _Key
    index: int | None  # the source record, None for a record ctxc made
    data: dict[str, Any] | None = None  # None: the source record's bytes as they are
    boundary: bool = False
    #: A new message's record: it hangs off ``after`` (the message before it in the output) or else
    #: what the first record it replaces hung off (resolved once every uuid is known).
    new: bool = False
    after: str | None = None
    replaced_parent: str | None = None


class CompactWriter:
    """Writes compacted conversations back as a Claude Code log (see the module docstring)."""

    def __init__(
        self, transcript: Transcript, outputs: Mapping[int, Sequence[Message]], archive_id: str
    ) -> None:
        self.transcript = transcript
        self.archive_id = archive_id
        self.records = transcript.records
        self.out_msgs = output_messages(transcript, outputs)
        self.datas: list[dict[str, Any] | None] = [
            r.data if isinstance(r.data, dict) else None for r in self.records
        ]
        self.uuid_at: list[str | None] = [_str(d.get("uuid")) if d else None for d in self.datas]
        # The first record of each uuid (later ones repeat it).
        self.index_of = {u: i for i, u in reversed(list(enumerate(self.uuid_at))) if u is not None}
        self.owner: dict[int, Message] = {i: m for m in transcript.messages for i in m.records}
        self.message_records = sorted(self.owner)
        self.by_index = {(m.conversation, m.index): m for m in transcript.messages}
        self.originals = {id(m) for m in transcript.messages}
        # Records of messages on branches the client abandoned: written as they are, linked to nothing new.
        gone = abandoned_messages(transcript.boundaries)
        self.abandoned = frozenset(i for m in transcript.messages if m.index in gone for i in m.records)
        # Conversations that are inline subagent runs: sidechain chains in a log that has a main chain.
        has_main = any(not m.meta.get("is_sidechain") for m in transcript.messages)
        self.inline_runs: dict[int, bool] = {
            m.conversation: has_main and bool(m.meta.get("is_sidechain")) for m in transcript.messages
        }
        self.eol = next((r.eol for r in self.records if r.eol), b"\n")
        first = self.datas[self.message_records[0]] if self.message_records else None
        #: Whether the log's own thread is a sidechain (a 2.x subagent file): then nothing is "inline".
        self.main_side = bool(first and first.get("isSidechain") is True)
        self.dropped: set[int] = set()
        self.out_uuids: set[str] = set()
        self.absorbed: dict[str, str] = {}  # uuid of a part merged into another record -> that record's
        self.replacement: dict[int, tuple[_Key, str]] = {}  # dropped record -> the new record standing in
        self.ancestor_memo: dict[int, int | None] = {}
        #: First record of a kept message -> the last uuid written before it in its thread.
        self.prev_of: dict[int, str | None] = {}
        # Per thread, in output order: the last uuid written and the furthest source record placed
        # (new records go after it, never before their thread).
        self.tails: dict[_Thread, str | None] = {}
        self.prev_max: dict[_Thread, float] = {}

    def _parent_index(self, i: int) -> int | None:
        d = self.datas[i]
        p = _str(d.get("parentUuid")) if d else None
        return self.index_of.get(p) if p is not None else None

    def _message_ancestor(self, i: int) -> int | None:
        """The nearest message record up ``i``'s parent chain, through non-message records."""
        if i in self.ancestor_memo:
            return self.ancestor_memo[i]
        seen = {i}
        path: list[int] = []
        j = self._parent_index(i)
        found: int | None = None
        while j is not None and j not in seen:
            if j in self.owner or j in self.ancestor_memo:
                found = j if j in self.owner else self.ancestor_memo[j]
                break
            seen.add(j)
            path.append(j)
            j = self._parent_index(j)
        for k in (i, *path):
            self.ancestor_memo[k] = found
        return found

    def _new_uuid(self, seq: int, kind: str, text: str) -> str:
        digest = hashlib.sha256(f"{self.archive_id}\0{seq}\0{kind}\0{text}".encode()).hexdigest()
        return str(uuidlib.uuid5(NAMESPACE, digest))

    def _drop_inline_sidechains(self) -> None:
        """Drop the inline subagent runs whose ``Task`` call was dropped, and their new messages (1.0.x
        logs link a run to its call only by its prompt; a run starting mid-way goes with its parent)."""
        if self.main_side:
            return
        prompts = {
            b.input["prompt"]
            for m in self.transcript.messages
            if m.records and all(i in self.dropped for i in m.records)
            for b in m.blocks
            if isinstance(b, ToolUseBlock)
            and b.name in _SUBAGENT_TOOLS
            and isinstance(b.input, dict)
            and isinstance(b.input.get("prompt"), str)
        }
        gone: set[int] = set()
        for conv, inline in self.inline_runs.items():
            run = self.transcript.conversation(conv)
            if not inline or not run or not run[0].records:
                continue
            first = run[0].records[0]
            if _str((self.datas[first] or {}).get("parentUuid")) is None:
                belongs = run[0].text in prompts
            else:
                anc = self._message_ancestor(first)
                belongs = anc is not None and anc in self.dropped
            if belongs:
                gone.add(conv)
                self.dropped.update(i for m in run for i in m.records)
        if not gone:
            return
        runs = [m for c in gone for m in self.transcript.conversation(c)]
        calls = {b.id for m in runs for b in m.blocks if isinstance(b, ToolUseBlock)}

        def kept(m: Message) -> bool:
            answers = any(isinstance(b, ToolResultBlock) and b.tool_use_id in calls for b in m.blocks)
            return m.conversation not in gone and not (answers and not m.records)

        self.out_msgs = [m for m in self.out_msgs if kept(m)]

    def _drops_record(self, i: int, d: Mapping[str, Any]) -> bool:
        """Whether a non-message record goes with a dropped span."""
        for ref in ("messageId", "leafUuid"):
            target = self.index_of.get(_str(d.get(ref)) or "")
            if target is not None and target in self.dropped:
                return True
        if _str(d.get("uuid")) is None or "parentUuid" not in d:
            return False  # not in the uuid chain: stays in place
        anc = self._message_ancestor(i)
        if anc is not None:
            return anc in self.dropped
        # Off the message chain: it goes with the next message record (the last one at the end).
        pool = self.message_records
        at = bisect.bisect_left(pool, i)
        ref_msg = pool[at] if at < len(pool) else (pool[at - 1] if at > 0 else None)
        return ref_msg is not None and ref_msg in self.dropped

    def _encode_changed(self, m: Message) -> list[tuple[int, dict[str, Any] | None]]:
        """(record index, new JSON or None to keep the bytes) for a message a strategy changed."""
        datas = [self.datas[i] or {} for i in m.records]
        raw = m.raw if m.raw is not None else (datas[0] if len(datas) == 1 else tuple(datas))
        if isinstance(raw, dict) and len(m.records) == 1:
            parts: list[tuple[int, dict[str, Any], tuple[Block, ...]]] = [(m.records[0], raw, m.blocks)]
        elif isinstance(raw, tuple) and len(raw) == len(m.records) and all(isinstance(r, dict) for r in raw):
            sizes = [content_len(r) for r in raw]
            if any(n is None for n in sizes) or sum(n or 0 for n in sizes) != len(m.blocks):
                merged = encode_message(replace(m, raw=raw))
                if (keeper := _str(merged.get("uuid"))) is not None:
                    parts_uuids = (_str(r.get("uuid")) for r in raw)
                    self.absorbed.update((u, keeper) for u in parts_uuids if u is not None and u != keeper)
                return [(m.records[0], self._noted(merged, raw[0], m))]
            parts, at = [], 0
            for i, r, n in zip(m.records, raw, sizes, strict=True):
                parts.append((i, r, m.blocks[at : at + (n or 0)]))
                at += n or 0
        else:
            return [(i, None) for i in m.records]
        out: list[tuple[int, dict[str, Any] | None]] = []
        for i, part, blocks in parts:
            enc = encode_message(replace(m, blocks=blocks, raw=part, records=(i,)))
            out.append((i, None) if enc == self.datas[i] else (i, self._noted(enc, part, m)))
        return out

    def _noted(self, enc: dict[str, Any], part: Mapping[str, Any], m: Message) -> dict[str, Any]:
        """``enc`` with its ``toolUseResult`` made a note when its tool results changed: the client's copy
        of the full output would undo the compaction (and is often larger)."""
        if "toolUseResult" in enc and tool_results(enc) != tool_results(part):
            # (Imported here: reading a log must not load the archive and its file-writing modules.)
            from ctxc.archive_store import citation

            note = citation(self.archive_id, m.index)
            enc["toolUseResult"] = f"[ctxc] tool output compacted; the full output is in {note}"
        return enc

    def _envelope(
        self, body: dict[str, Any], template: Mapping[str, Any], *, boundary: bool = False
    ) -> dict[str, Any]:
        """``body`` with the template's session envelope, in the key order Claude Code writes."""
        out: dict[str, Any] = {"parentUuid": body.get("parentUuid")}
        if boundary:
            out["logicalParentUuid"] = None
        out["isSidechain"] = template.get("isSidechain") is True
        out |= {key: template[key] for key in _ENVELOPE if key in template}
        return out | {key: value for key, value in body.items() if key not in out}

    def _template(self, pos: int, thread: _Thread) -> dict[str, Any]:
        """The record a new message at output position ``pos`` takes its envelope from: one of its own
        thread (so a message of an inline subagent run is written as a sidechain record of that run)."""
        order = [*range(pos - 1, -1, -1), *range(pos + 1, len(self.out_msgs))]
        candidates: Iterable[int] = (i for k in order for i in reversed(self.out_msgs[k].records))
        if thread != _MAIN:  # also the run's records the strategy dropped
            candidates = itertools.chain(
                candidates, (i for m in self.transcript.conversation(thread) for i in m.records)
            )
        for i in candidates:
            found = self.datas[i]
            if found is not None and "sessionId" in found and self._thread_of(i) == thread:
                return found
        return next((d for d in self.datas if d is not None and "sessionId" in d), {})

    def _thread_of(self, i: int) -> _Thread:
        """The thread record ``i`` belongs to: the log's own, or the inline run (conversation) it is in."""
        d = self.datas[i]
        side = not self.main_side and d is not None and d.get("isSidechain") is True
        owner = self.owner.get(i) if side else None
        return owner.conversation if owner is not None else _MAIN

    def _pre_tokens(self, m: Message, span: tuple[int, int] | None) -> int | None:
        for key in ("pre_tokens", "tokens_before"):
            value = m.meta.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        if span is None:
            return None
        # What the window held when the replaced span ended: the last recorded call within it.
        messages = reversed(self.transcript.messages)
        within = (o for o in messages if o.conversation == m.conversation and o.index <= span[1])
        best = next((o.usage for o in within if o.usage is not None), None)
        return best.context if best is not None else None

    def write(self) -> tuple[Record, ...]:
        kept = {i for m in self.out_msgs for i in m.records}
        self.dropped = {i for i in self.owner if i not in kept}
        self._drop_inline_sidechains()
        outs: list[_Out] = []
        for i, d in enumerate(self.datas):
            if i in self.owner or (d is not None and self._drops_record(i, d)):
                continue
            outs.append(_Out((i, 0, 0), i))
            if (u := self.uuid_at[i]) is not None:
                self.out_uuids.add(u)
        seq = 0
        for pos, m in enumerate(self.out_msgs):
            if m.records and m.records[0] in self.abandoned:
                # On no chain the client resumes: nothing is linked to it or after it.
                outs.extend(_Out((i, 0, 0), i) for i in m.records)
                self.out_uuids.update(u for i in m.records if (u := self.uuid_at[i]) is not None)
            elif m.records:
                self._place_kept(m, outs)
            else:
                seq = self._place_new(pos, m, outs, seq)
        return self._finish(outs)

    def _place_kept(self, m: Message, outs: list[_Out]) -> None:
        thread = self._thread_of(m.records[0])
        self.prev_of[m.records[0]] = self.tails.get(thread)
        encoded = [(i, None) for i in m.records] if id(m) in self.originals else self._encode_changed(m)
        for i, data in encoded:
            outs.append(_Out((i, 0, 0), i, data))
            u = _str(data.get("uuid")) if data is not None else self.uuid_at[i]
            if u is not None:
                self.out_uuids.add(u)
                self.tails[thread] = u
        self.prev_max[thread] = max(self.prev_max.get(thread, -1.0), float(max(m.records)))

    def _place_new(self, pos: int, m: Message, outs: list[_Out], seq: int) -> int:
        """Place a message ctxc made; returns the next sequence number."""
        span = replaces(m)
        replaced = [
            r
            for k in (range(span[0], span[1] + 1) if span else ())
            if (orig := self.by_index.get((m.conversation, k))) is not None
            for r in orig.records
            if r in self.dropped
        ]
        inline_run = self.inline_runs.get(m.conversation, False)
        thread = m.conversation if inline_run else _MAIN
        anchor = self.prev_max.get(thread, -1.0)
        if replaced:
            anchor = max(anchor, min(replaced) - 0.5)
        if anchor < 0:
            later = next((n.records[0] for n in self.out_msgs[pos + 1 :] if n.records), len(self.records))
            anchor = later - 0.5
        # What follows in this thread is written after it.
        self.prev_max[thread] = max(self.prev_max.get(thread, -1.0), anchor)
        template = self._template(pos, thread)
        last_replaced = self.datas[max(replaced)] if replaced else None
        stamp = _str((last_replaced or {}).get("timestamp")) or _str(template.get("timestamp"))
        after = self.tails.get(thread)
        # A summary of the log's own thread is a compaction (boundary + summary record); inside an inline
        # subagent run it is an ordinary message of that run, which must stay one chain.
        if m.meta.get("ctxc") == "summary" and not inline_run:
            boundary, summary, new_uuid = self._compaction(m, span, stamp, template, (anchor, 1, seq))
            outs.extend((boundary, summary))
            key, seq = summary.key, seq + 2
        else:
            new_uuid = self._new_uuid(seq, m.role, m.text)
            side = template.get("isSidechain") is True
            meta = {**m.meta, "uuid": new_uuid, "parent_uuid": None, "is_sidechain": side, "timestamp": stamp}
            body = self._envelope(encode_message(replace(m, meta=meta)), template)
            first_parent = self.datas[min(replaced)] if replaced and after is None else None
            replaced_parent = _str((first_parent or {}).get("parentUuid"))
            out = _Out((anchor, 1, seq), None, body, new=True, after=after, replaced_parent=replaced_parent)
            outs.append(out)
            key, seq = out.key, seq + 1
        self.out_uuids.add(new_uuid)
        for r in replaced:
            self.replacement.setdefault(r, (key, new_uuid))
        self.tails[thread] = new_uuid
        return seq

    def _compaction(
        self,
        m: Message,
        span: tuple[int, int] | None,
        stamp: str | None,
        template: Mapping[str, Any],
        key: _Key,
    ) -> tuple[_Out, _Out, str]:
        """The ``compact_boundary`` and summary records Claude Code writes for ``/compact``, and the
        summary's uuid."""
        text = "\n\n".join(b.text for b in m.blocks if isinstance(b, TextBlock)) or m.text
        seq = key[2]
        b_uuid = self._new_uuid(seq, "compact_boundary", text)
        s_uuid = self._new_uuid(seq + 1, "summary", text)
        metadata: dict[str, Any] = {"trigger": _str(m.meta.get("trigger")) or "manual"}
        if (pre := self._pre_tokens(m, span)) is not None:
            metadata["preTokens"] = pre
        boundary = {
            "parentUuid": None,
            "type": "system",
            "subtype": "compact_boundary",
            "content": _BOUNDARY_CONTENT,
            "isMeta": False,
            "timestamp": stamp,
            "uuid": b_uuid,
            "level": "info",
            "compactMetadata": metadata,
        }
        summary = {
            "parentUuid": b_uuid,
            "type": "user",
            "message": {"role": "user", "content": text},
            "isVisibleInTranscriptOnly": True,
            "isCompactSummary": True,
            "uuid": s_uuid,
            "timestamp": stamp,
        }
        self.out_uuids.update((b_uuid, s_uuid))
        return (
            _Out(key, None, self._envelope(boundary, template, boundary=True), boundary=True),
            _Out((key[0], 1, seq + 1), None, self._envelope(summary, template)),
            s_uuid,
        )

    def _relink(self, parent: str | None, key: _Key) -> str | None:
        """The nearest ancestor of a dropped ``parent`` that is in the output, or what replaced it."""
        seen: set[str] = set()
        p = parent
        while p is not None:
            if p in self.out_uuids:
                return p
            if p in self.absorbed:
                return self.absorbed[p]
            j = self.index_of.get(p)
            if j is None or p in seen:
                return None  # the chain leaves the file: this record becomes a root
            seen.add(p)
            stand_in = self.replacement.get(j)
            if stand_in is not None and stand_in[0] < key:
                return stand_in[1]
            d = self.datas[j]
            p = _str(d.get("parentUuid")) if d else None
        return None

    def _changes(self, o: _Out, data: Mapping[str, Any], last: str | None) -> dict[str, Any]:
        """The top-level fields of an output record that must change (links only)."""
        changes: dict[str, Any] = {}
        if o.index in self.abandoned:
            return changes  # an abandoned branch stays byte for byte, like the history
        parent = data.get("parentUuid")
        if o.boundary:
            changes["logicalParentUuid"] = last
        elif o.new:
            changes["parentUuid"] = o.after or self._relink(o.replaced_parent, o.key)
        elif isinstance(parent, str) and parent not in self.out_uuids:
            if parent in self.absorbed:
                changes["parentUuid"] = self.absorbed[parent]
            elif parent in self.index_of:  # dropped (a link that already left the file stays)
                after = self.prev_of.get(o.index) if o.index is not None else None
                changes["parentUuid"] = after or self._relink(parent, o.key)
        if self.absorbed:
            for ref in _REFERENCES:
                target = data.get(ref)
                if isinstance(target, str) and target in self.absorbed:
                    changes[ref] = self.absorbed[target]
        return {k: v for k, v in changes.items() if data.get(k, ...) != v}

    def _finish(self, outs: list[_Out]) -> tuple[Record, ...]:
        outs.sort(key=lambda o: o.key)
        result: list[Record] = []
        last_by_side: dict[bool, str] = {}
        for o in outs:
            rec = self.records[o.index] if o.index is not None else None
            data = o.data if o.data is not None else (self.datas[o.index] if o.index is not None else None)
            if data is None:
                assert rec is not None
                result.append(rec)
                continue
            side = data.get("isSidechain") is True
            changes = self._changes(o, data, last_by_side.get(side))
            if rec is not None and o.data is None:
                result.append(patch(rec, data, {**data, **changes}) if changes else rec)
            else:
                patched = {**data, **changes}
                eol = rec.eol if rec is not None and rec.eol else self.eol
                line = rec.line if rec is not None else 0
                result.append(
                    Record(line=line, raw=orjson.dumps(patched), eol=eol, data=patched, kind="message")
                )
            if (u := _str(data.get("uuid"))) is not None:
                last_by_side[side] = u
        return fix_eols(result, self.records, self.eol)
