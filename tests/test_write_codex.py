"""Writing compacted Codex rollouts: a summarized span becomes a ``compacted`` record, read back by ctxc."""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxc.compaction.units import units
from ctxc.compaction.write import WritesCompacted, write_transcript
from ctxc.formats import get_adapter, load
from ctxc.formats.codex import CodexAdapter
from ctxc.model import Message, Record, TextBlock, ToolResultBlock, ToolUseBlock, Transcript
from ctxc.repair import NO_RESULT, repair_messages
from ctxc.validate import pairing_problems
from tests.conftest import CORPUS, corpus_params

_ADAPTER = get_adapter("codex")
assert isinstance(_ADAPTER, CodexAdapter)
ADAPTER: CodexAdapter = _ADAPTER
LOCALPUSH = "codex/localpush_rollout_compacted_text-redacted_0.104.jsonl"
CLI_058 = "codex/codex-session-view_rollout_cli-0.58.jsonl"
LEGACY = "codex/codex-session-viewer_legacy-format_example.jsonl"
ARCHIVE_ID = "0123456789abcdef" * 4
#: Events a dropped item may take with it (UI mirrors and the usage of the calls that made it).
DROPPABLE_EVENTS = {"user_message", "agent_message", "agent_reasoning", "token_count"}


@functools.cache
def _load(path: Path) -> Transcript:
    return load(path)


def _corpus(name: str) -> Transcript:
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    return _load(path)


def _summary(first: int, last: int, text: str | None = None) -> Message:
    body = text or f"Summary of the work so far. ctxc archive {ARCHIVE_ID[:12]} messages {first}-{last}"
    return Message(
        role="user",
        blocks=(TextBlock(body),),
        meta={"ctxc": "summary", "replaces": (first, last)},
        index=first,
    )


def _drop_units(
    t: Transcript, lo: int, hi: int, *, summary: bool = True
) -> tuple[tuple[Message, ...], int, int]:
    """The conversation with units ``lo..hi-1`` replaced by a summary (repaired as a compaction run does)."""
    msgs = t.conversation(0)
    us = units(msgs)
    start, stop = us[lo].start, us[hi - 1].stop
    first, last = msgs[start].index, msgs[stop - 1].index
    middle = (_summary(first, last),) if summary else ()
    out, _ = repair_messages((*msgs[:start], *middle, *msgs[stop:]), tool_role=True)
    return out, start, stop


def _middle(t: Transcript) -> tuple[int, int]:
    n = len(units(t.conversation(0)))
    lo = n // 3
    return lo, max(2 * n // 3, lo + 1)


def _write(t: Transcript, out: Sequence[Message]) -> tuple[Record, ...]:
    return ADAPTER.write_compacted(t, {0: tuple(out)}, archive_id=ARCHIVE_ID)


def _bytes(records: Sequence[Record]) -> bytes:
    return b"".join(r.to_bytes() for r in records)


def _reload(data: bytes) -> Transcript:
    return load(io.BytesIO(data))  # sniffed, not forced: the output must still look like Codex


def _etype(data: Any) -> str | None:
    if isinstance(data, dict) and data.get("type") == "event_msg" and isinstance(data.get("payload"), dict):
        t = data["payload"].get("type")
        return t if isinstance(t, str) else None
    return None


def _model_history(records: Sequence[Any]) -> list[Any]:
    """What Codex rebuilds on resume from these parsed lines: response items, reset by ``compacted``."""
    view: list[Any] = []
    for d in records:
        if d.get("type") == "response_item":
            view.append(d["payload"])
        elif d.get("type") == "compacted" and isinstance(d["payload"].get("replacement_history"), list):
            view = list(d["payload"]["replacement_history"])
    return view


def _localpush_compaction() -> tuple[dict[str, Any], dict[str, Any]]:
    lines = [orjson.loads(r.raw) for r in _corpus(LOCALPUSH).records if r.raw.strip()]
    i = next(i for i, d in enumerate(lines) if d["type"] == "compacted")
    return lines[i], lines[i + 1]


def _shape(rec: dict[str, Any]) -> tuple[list[str], list[str]]:
    return list(rec), list(rec["payload"])


def _signature(m: Message) -> tuple[str, str, str]:
    return m.role, m.kind, m.text


# ------------------------------------------------------------------------------------------- corpus


@pytest.mark.parametrize("path", corpus_params("codex/*.jsonl"))
def test_summarized_span_is_written_as_a_codex_compaction(path: Path) -> None:
    t = _load(path)
    lo, hi = _middle(t)
    out, start, stop = _drop_units(t, lo, hi)
    msgs = t.conversation(0)
    dropped_msgs = msgs[start:stop]
    dropped_records = {r for m in dropped_msgs for r in m.records}
    first_dropped = min(dropped_records)
    records = _write(t, out)
    data = _bytes(records)
    assert data == _bytes(_write(t, out)), "two runs must give the same bytes"

    # Every original line that stays is written byte for byte, in its original order.
    original_lines = {r.line: r for r in t.records}
    old = [r for r in records if r.line != 0]
    assert [r.line for r in old] == sorted(r.line for r in old)
    originals = {id(m) for m in t.messages}
    for r in old:
        src = original_lines[r.line]
        assert r.to_bytes() == src.to_bytes() or r.data != src.data  # re-encoded only if changed
    for m in out:
        if id(m) in originals:
            assert all(any(r is t.records[i] for r in old) for i in m.records)

    # Only dropped items and the events that went with them are missing, each next to a dropped item
    # (repair may drop an orphan result elsewhere, so "dropped" is every item the output lacks).
    kept_lines = {r.line for r in old}
    message_records = sorted(r for m in msgs for r in m.records)
    gone = set(message_records) - {r for m in out for r in m.records}
    assert dropped_records <= gone
    for i, rec in enumerate(t.records):
        if rec.line in kept_lines or i in gone:
            continue
        before = max((r for r in message_records if r < i), default=None)
        after = min((r for r in message_records if r > i), default=None)
        assert before in gone or after in gone, f"line {rec.line} away from dropped items was removed"
        etype = _etype(rec.data)
        assert etype in DROPPABLE_EVENTS or "call_id" in rec.data["payload"], rec.raw[:200]
    # No UI mirror or token count from strictly inside the dropped span survives.
    for i in range(first_dropped, max(dropped_records)):
        if _etype(t.records[i].data) in DROPPABLE_EVENTS:
            assert t.records[i].line not in kept_lines, f"mirror at line {t.records[i].line} kept"

    new = [r for r in records if r.line == 0]
    summary_text = next(m.text for m in out if m.meta.get("ctxc") == "summary")
    reread = _reload(data)
    assert reread.format == "codex"
    if path.name == Path(LEGACY).name:
        # Legacy rollouts have no compacted record: the summary is a bare user item where the span was.
        assert [r.data for r in new if "record_type" not in r.data] == [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": summary_text}]}
        ]
        assert not any(d.data.get("type") == "compacted" for d in records)
    else:
        ref_compacted, ref_event = _localpush_compaction()
        k = next(i for i, r in enumerate(records) if r.line == 0 and r.data["type"] == "compacted")
        compacted, event, item = (r.data for r in records[k : k + 3])
        assert _shape(compacted) == _shape(ref_compacted)
        assert compacted["payload"]["message"] == summary_text
        assert list(event) == list(ref_event)
        assert event["payload"] == ref_event["payload"]
        assert item["type"] == "response_item"
        assert item["payload"] == {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": summary_text}],
        }
        # Placed at the first dropped item, or after a compaction recorded inside the span (Codex resumes
        # from the last compacted record), and stamped with the time of the first dropped item after that.
        prev = next(i for i, r in enumerate(t.records) if r is records[k - 1])
        position = {id(r): j for j, r in enumerate(records)}
        recorded = [
            i
            for i in range(first_dropped, max(dropped_records))
            if t.records[i].data.get("type") == "compacted" and id(t.records[i]) in position
        ]
        assert all(position[id(t.records[i])] < k for i in recorded)
        assert prev < first_dropped or recorded
        stamp = min((i for i in dropped_records if i > prev), default=first_dropped)
        ts = t.records[stamp].data["timestamp"]
        assert compacted["timestamp"] == event["timestamp"] == item["timestamp"] == ts
        # replacement_history is exactly the model history before it (the pinned prefix, here).
        prior = [r.data for r in records[:k] if isinstance(r.data, dict)]
        history = compacted["payload"]["replacement_history"]
        assert history == _model_history(prior)
        assert all(isinstance(h, dict) and isinstance(h.get("type"), str) for h in history)
        if not any(d.get("type") == "compacted" for d in prior):
            assert history == [d["payload"] for d in prior if d["type"] == "response_item"]
        # ... and the reader sees one boundary there, then the summary as a user message.
        line = k + 1
        assert ("codex_compacted", line, True) in [(b.kind, b.line, b.resets) for b in reread.boundaries]
        assert not any(b.kind == "codex_context_compacted" and b.line == line + 1 for b in reread.boundaries)
        summary_msg = next(m for m in reread.messages if m.line == line + 2)
        assert (summary_msg.role, summary_msg.text) == ("user", summary_text)
    assert [_signature(m) for m in reread.messages] == [_signature(m) for m in out]
    assert pairing_problems(reread.messages, strict=True) == []


@pytest.mark.parametrize("path", corpus_params("codex/*.jsonl"))
def test_nothing_dropped_is_byte_identical(path: Path) -> None:
    t = _load(path)
    assert _bytes(_write(t, t.conversation(0))) == path.read_bytes()
    # A conversation the caller leaves out is unchanged, not dropped.
    assert _bytes(ADAPTER.write_compacted(t, {}, archive_id=ARCHIVE_ID)) == path.read_bytes()


def test_adapter_is_the_write_hook() -> None:
    assert isinstance(ADAPTER, WritesCompacted)


def test_write_transcript_uses_the_hook() -> None:
    t = _corpus(CLI_058)
    out, _, _ = _drop_units(t, *_middle(t))
    written = write_transcript(t, {0: out}, ADAPTER, archive_id=ARCHIVE_ID)
    assert written.to_bytes() == _bytes(_write(t, out))
    assert written.messages == out


def test_span_over_a_recorded_compaction_keeps_ours_last() -> None:
    """Codex resumes from the last ``compacted`` record: ours must come after one inside the span."""
    t = _corpus(LOCALPUSH)
    (old,) = [i for i, r in enumerate(t.records) if r.data.get("type") == "compacted"]
    msgs = t.conversation(0)
    us = units(msgs)
    lo = next(i for i, u in enumerate(us) if msgs[u.start].records[0] > old) - 3
    out, _, _ = _drop_units(t, lo, lo + 6)
    records = _write(t, out)
    k = next(i for i, r in enumerate(records) if r.line == 0 and r.data["type"] == "compacted")
    assert records[k - 2] is t.records[old]
    assert _etype(records[k - 1].data) == "context_compacted"
    ours = records[k].data["payload"]["replacement_history"]
    assert ours == t.records[old].data["payload"]["replacement_history"]
    reread = _reload(_bytes(records))
    assert [b.kind for b in reread.boundaries].count("codex_compacted") == 2
    assert pairing_problems(reread.messages, strict=True) == []
    assert [_signature(m) for m in reread.messages] == [_signature(m) for m in out]


def test_two_summaries_chain_their_histories() -> None:
    t = _corpus(CLI_058)
    msgs = t.conversation(0)
    us = units(msgs)
    a, b, c, d = us[5].start, us[10].start, us[20].start, us[25].start
    s1 = _summary(msgs[a].index, msgs[b - 1].index)
    s2 = _summary(msgs[c].index, msgs[d - 1].index)
    out = (*msgs[:a], s1, *msgs[b:c], s2, *msgs[d:])
    records = _write(t, out)
    ks = [i for i, r in enumerate(records) if r.line == 0 and r.data["type"] == "compacted"]
    assert len(ks) == 2
    second = records[ks[1]].data["payload"]["replacement_history"]
    first = records[ks[0]].data["payload"]["replacement_history"]
    between = [r.data["payload"] for r in records[ks[0] + 2 : ks[1]] if r.data.get("type") == "response_item"]
    assert second == [*first, *between]
    assert between[0]["content"][0]["text"] == s1.text
    reread = _reload(_bytes(records))
    assert [_signature(m) for m in reread.messages] == [_signature(m) for m in out]
    assert pairing_problems(reread.messages, strict=True) == []


# -------------------------------------------------------------------------------- changed and new items


def test_changed_result_is_reencoded_in_place() -> None:
    """A masked tool output (what ``mask`` produces) keeps its line, envelope and call id."""
    t = _corpus(CLI_058)
    msgs = t.conversation(0)
    target = next(m for m in msgs if m.role == "tool")
    (block,) = target.blocks
    assert isinstance(block, ToolResultBlock)
    masked = dataclasses.replace(target, blocks=(dataclasses.replace(block, text="[masked: see archive]"),))
    out = tuple(masked if m is target else m for m in msgs)
    records = _write(t, out)
    assert len(records) == len(t.records)
    (i,) = target.records
    changed = records[i].data
    src = t.records[i].data
    assert changed["timestamp"] == src["timestamp"]
    assert changed["payload"] == {**src["payload"], "output": "[masked: see archive]"}
    assert all(records[j] is t.records[j] for j in range(len(records)) if j != i)
    reread = _reload(_bytes(records))
    assert reread.messages[target.index].text == "[masked: see archive]"
    assert pairing_problems(reread.messages, strict=True) == []


def test_repair_results_answer_with_the_call_type() -> None:
    """Results ctxc adds for calls whose output is gone are items of the type the call expects."""
    t = _corpus(LOCALPUSH)
    msgs = t.conversation(0)

    def call_type(result: Message) -> str:
        (b,) = result.blocks
        assert isinstance(b, ToolResultBlock)
        call = next(
            m for m in msgs if any(isinstance(c, ToolUseBlock) and c.id == b.tool_use_id for c in m.blocks)
        )
        return str(call.meta["item_type"])

    custom = next(m for m in msgs if m.role == "tool" and call_type(m) == "custom_tool_call")
    function = next(m for m in msgs if m.role == "tool" and call_type(m) == "function_call")
    gone = {custom.index, function.index}
    out, fixed = repair_messages(tuple(m for m in msgs if m.index not in gone), tool_role=True)
    assert len(fixed) == 2
    records = _write(t, out)
    new = {r.data["payload"]["call_id"]: i for i, r in enumerate(records) if r.line == 0}
    assert len(new) == 2
    for m, itype in ((custom, "custom_tool_call_output"), (function, "function_call_output")):
        (b,) = m.blocks
        assert isinstance(b, ToolResultBlock)
        i = new[b.tool_use_id]
        assert records[i].data["payload"] == {"type": itype, "call_id": b.tool_use_id, "output": NO_RESULT}
        # No span to take a time from: the line before it (the turn it answers) gives it.
        assert records[i].data["timestamp"] == records[i - 1].data["timestamp"]
    reread = _reload(_bytes(records))
    assert pairing_problems(reread.messages, strict=True) == []
    assert [_signature(m) for m in reread.messages] == [_signature(m) for m in out]


def test_placeholder_replaces_span_without_compacted_record() -> None:
    t = _corpus(CLI_058)
    out, start, stop = _drop_units(t, 4, 8, summary=False)
    msgs = t.conversation(0)
    first, last = msgs[start].index, msgs[stop - 1].index
    note = Message(
        role="user",
        blocks=(
            TextBlock(f"[ctxc] messages dropped: ctxc archive {ARCHIVE_ID[:12]} messages {first}-{last}"),
        ),
        meta={"ctxc": "placeholder", "replaces": (first, last)},
        index=first,
    )
    out = (*out[:start], note, *out[start:])
    records = _write(t, out)
    assert not any(r.data.get("type") == "compacted" for r in records)
    (new,) = [r for r in records if r.line == 0]
    assert new.data["timestamp"] == t.records[msgs[start].records[0]].data["timestamp"]
    assert new.data["payload"]["content"][0]["text"] == note.text
    reread = _reload(_bytes(records))
    assert [_signature(m) for m in reread.messages] == [_signature(m) for m in out]


# -------------------------------------------------------------------------- which events go with items


def _env(payload: dict[str, Any], rtype: str = "response_item", second: int = 0) -> dict[str, Any]:
    return {"timestamp": f"2026-01-01T00:00:{second:02d}.000Z", "type": rtype, "payload": payload}


def _msg(role: str, text: str) -> dict[str, Any]:
    part = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}


def _event(etype: str, **fields: Any) -> dict[str, Any]:
    return _env({"type": etype, **fields}, "event_msg")


def _rollout(lines: list[tuple[str, dict[str, Any]]]) -> tuple[Transcript, dict[str, int]]:
    """A rollout from (label, line) pairs, and each label's record index."""
    data = b"".join(
        orjson.dumps({**d, "timestamp": f"2026-01-01T00:00:{i:02d}.000Z"}) + b"\n"
        for i, (_, d) in enumerate(lines)
    )
    t = load(io.BytesIO(data), input_format="codex")
    return t, {label: i for i, (label, _) in enumerate(lines)}


def _events_on_both_sides(mirror_text: bool) -> list[tuple[str, dict[str, Any]]]:
    """One kept turn, one dropped turn, one kept turn; mirrors written before and after their items."""

    def t(s: str) -> str:
        return s if mirror_text else f"[redacted {s}]"

    usage: dict[str, Any] = {"info": None, "rate_limits": {}}
    return [
        ("meta", _env({"id": "s"}, "session_meta")),
        ("u1", _env(_msg("user", "first request"))),
        ("u1_event", _event("user_message", message=t("first request"))),  # after its item
        ("ctx1", _env({"turn_id": "a"}, "turn_context")),
        ("r1_event", _event("agent_reasoning", text=t("thinking"))),  # before its item
        ("r1", _env({"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]})),
        ("call", _env({"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"})),
        ("exec", _event("exec_command_end", call_id="c1", aggregated_output="big output")),
        ("tc1", _event("token_count", **usage)),
        ("out", _env({"type": "function_call_output", "call_id": "c1", "output": "big output"})),
        ("tc2", _event("token_count", **usage)),
        ("a1_event", _event("agent_message", message=t("done"))),
        ("a1", _env(_msg("assistant", "done"))),
        ("tc3", _event("token_count", **usage)),
        ("task", _event("task_complete", last_agent_message="done")),
        ("ctx2", _env({"turn_id": "b"}, "turn_context")),
        ("u2_event", _event("user_message", message=t("second request"))),  # before its item this time
        ("u2", _env(_msg("user", "second request"))),
        ("a2_event", _event("agent_message", message=t("ok"))),
        ("a2", _env(_msg("assistant", "ok"))),
        ("tc4", _event("token_count", **usage)),
    ]


@pytest.mark.parametrize("mirror_text", [True, False], ids=["same-text", "redacted-text"])
def test_events_of_dropped_items_go_and_others_stay(mirror_text: bool) -> None:
    t, at = _rollout(_events_on_both_sides(mirror_text))
    msgs = t.conversation(0)
    dropped = [m for m in msgs if m.records[0] in (at["r1"], at["call"], at["out"], at["a1"])]
    assert [m.index for m in dropped] == [1, 2, 3, 4]
    out = (msgs[0], _summary(dropped[0].index, dropped[-1].index, "S"), *msgs[5:])
    records = _write(t, out)
    kept = {label for label, i in at.items() if any(r is t.records[i] for r in records)}
    assert kept == {
        "meta",
        "u1",
        "u1_event",
        "ctx1",
        "task",
        "ctx2",
        "u2_event",
        "u2",
        "a2_event",
        "a2",
        "tc4",
    }
    labels = [next((lb for lb, i in at.items() if r is t.records[i]), r.data["type"]) for r in records]
    assert labels == [
        "meta", "u1", "u1_event", "ctx1", "compacted", "event_msg", "response_item",
        "task", "ctx2", "u2_event", "u2", "a2_event", "a2", "tc4",
    ]  # fmt: skip
    assert records[4].data["timestamp"] == t.records[at["r1"]].data["timestamp"]
    assert records[4].data["payload"]["replacement_history"] == [t.records[at["u1"]].data["payload"]]


@pytest.mark.parametrize(("mirror_text", "kept_event"), [(True, False), (False, True)])
def test_mirror_text_beats_distance(mirror_text: bool, kept_event: bool) -> None:
    """A mirror written after its (dropped) item but nearer the next (kept) one goes with the item whose
    text it repeats; without matching text (redacted logs) the nearer item wins."""
    usage: dict[str, Any] = {"info": None, "rate_limits": {}}
    t, at = _rollout(
        [
            ("u1", _env(_msg("user", "go"))),
            ("a1", _env(_msg("assistant", "first answer"))),
            ("tc1", _event("token_count", **usage)),
            ("ctx", _env({"turn_id": "x"}, "turn_context")),
            ("ctx2", _env({"turn_id": "y"}, "turn_context")),
            ("a1_event", _event("agent_message", message="first answer" if mirror_text else "[redacted]")),
            ("a2", _env(_msg("assistant", "second answer"))),
        ]
    )
    u1, _a1, a2 = t.conversation(0)
    records = _write(t, (u1, a2))
    assert (t.records[at["a1_event"]] in records) is kept_event
    assert t.records[at["tc1"]] not in records
    assert t.records[at["ctx"]] in records


def test_legacy_summary_takes_the_span_place() -> None:
    t = _corpus(LEGACY)
    out, start, _ = _drop_units(t, 10, 20)
    records = _write(t, out)
    first = t.conversation(0)[start].records[0]
    k = next(i for i, r in enumerate(records) if r.line == 0)
    # Everything before the first dropped item is unchanged (legacy rollouts have no events to remove).
    assert records[:k] == t.records[:first]
    assert records[k].data["role"] == "user"
    assert "timestamp" not in records[k].data


# ------------------------------------------------------------------------------------ property-based


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from([CLI_058, LOCALPUSH]))
def test_any_span_reads_back_valid(data: st.DataObject, name: str) -> None:
    t = _corpus(name)
    n = len(units(t.conversation(0)))
    lo = data.draw(st.integers(1, n - 2), label="first unit")
    hi = data.draw(st.integers(lo + 1, n - 1), label="stop unit")
    out, _, _ = _drop_units(t, lo, hi, summary=data.draw(st.booleans(), label="summary"))
    records = _write(t, out)
    reread = _reload(_bytes(records))
    assert [_signature(m) for m in reread.messages] == [_signature(m) for m in out]
    assert pairing_problems(reread.messages, strict=True) == []
    compacted = [i for i, r in enumerate(records) if r.line == 0 and r.data["type"] == "compacted"]
    for k in compacted:
        before = [r.data for r in records[:k] if isinstance(r.data, dict)]
        assert records[k].data["payload"]["replacement_history"] == _model_history(before)
