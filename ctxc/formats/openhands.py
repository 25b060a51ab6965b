"""OpenHands evaluation and resolver output: one task per line, its ``history`` a list of events (with ids,
or the older flat ``bare`` dicts), read as OpenHands' ConversationMemory sends them: actions are tool calls
(``finish``/``reject`` terminal), observations their results, ``condensation`` a Boundary."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ctxc.formats import register
from ctxc.formats.base import FormatAdapter, Item, count, importance_of, recorded_usage, run_timestamp
from ctxc.formats.shapes import content_text
from ctxc.model import (
    Block,
    Boundary,
    Message,
    Record,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    Usage,
    dumps_compact,
)

#: Events that never reach the model.
_SILENT_ACTIONS = frozenset(
    {"recall", "change_agent_state", "null", "condensation_request", "pause", "resume"}
)
_SILENT_OBSERVATIONS = frozenset({"null", "agent_state_changed"})
#: Agent actions that end the run: no observation answers them.
TERMINAL_ACTIONS = frozenset({"finish", "reject"})
#: Keys of a bare action dict that are bookkeeping, not the tool's arguments.
_BARE_ACTION_META = frozenset({"action", "thought", "action_risk", "is_confirmed", "security_risk"})
_USAGE = ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_creation_input_tokens")


def _dialect(event: Mapping[str, Any]) -> str:
    return "events" if "id" in event or "source" in event or "args" in event else "bare"


def _tcm(event: Mapping[str, Any]) -> dict[str, Any]:
    tcm = event.get("tool_call_metadata")
    return tcm if isinstance(tcm, dict) else {}


def _function_name(event: Mapping[str, Any], default: str) -> str:
    name = _tcm(event).get("function_name")
    return name if isinstance(name, str) else default


def _args(event: Mapping[str, Any]) -> dict[str, Any]:
    """An action's arguments: ``args`` in the events shape, the flat dict minus bookkeeping when bare."""
    if _dialect(event) == "events":
        args = event.get("args")
        return dict(args) if isinstance(args, dict) else {}
    return {k: v for k, v in event.items() if k not in _BARE_ACTION_META}


def _recall_text(event: Mapping[str, Any]) -> str:
    """The knowledge a recall observation injects: its content and every non-empty string it carries."""
    content = event.get("content")
    parts = [content] if isinstance(content, str) and content else []
    return "\n".join([*parts, *_strings(event.get("extras"))])


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str) and value:
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k == "runtime_hosts" and isinstance(v, dict):
                yield from map(str, v)
            elif k not in ("recall_type", "name", "trigger"):  # labels of the recall, not text it injects
                yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _message_role(event: Mapping[str, Any]) -> Role:
    source = event.get("source")
    if source is not None:
        return "user" if source == "user" else "assistant"
    # The bare shape records no source: an agent message waits for the user's answer, a task does not.
    args = _args(event)
    return "assistant" if args.get("wait_for_response") is True else "user"


def _usage(event: Mapping[str, Any], line: int) -> tuple[str | None, Usage | None]:
    """The model call behind an agent action (its response id, for de-duplication) and its usage."""
    response = _tcm(event).get("model_response")
    if not isinstance(response, dict):
        return None, None
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None, None
    details = usage.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens") if isinstance(details, dict) else None)
    counts = {**usage, "cached_tokens": cached or count(usage.get("cache_read_input_tokens"))}
    rid = response.get("id")
    return (rid if isinstance(rid, str) else None), recorded_usage(counts, _USAGE, line, cached_in_input=True)


class _Pairing:
    """Tool-call ids of one line: synthesized where the log has none, and how observations find theirs."""

    def __init__(self, line: int) -> None:
        self.line = line
        self.by_event_id: dict[Any, str] = {}
        self.pending: list[tuple[str, str]] = []  # bare shape: (action kind, call id), oldest first

    def call_id(self, event: Mapping[str, Any], position: int) -> str:
        call_id = _tcm(event).get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"oh-{self.line}-{event.get('id', position)}"
        if isinstance(event_id := event.get("id"), int | str):  # an object or a list is no id (nor hashable)
            self.by_event_id[event_id] = call_id
        if _dialect(event) == "bare":
            self.pending.append((str(event.get("action")), call_id))
        return call_id

    def answer(self, event: Mapping[str, Any]) -> str | None:
        """The call an observation answers, or None when it answers no tool call."""
        cause = event.get("cause")
        if isinstance(cause, int | str) and cause in self.by_event_id:
            return self.by_event_id[cause]
        tcm_id = _tcm(event).get("tool_call_id")
        if isinstance(tcm_id, str) and tcm_id:
            return tcm_id
        if _dialect(event) == "bare" and self.pending:
            kind = str(event.get("observation"))  # the oldest call of the same kind, else the oldest
            i = next((i for i, (action, _) in enumerate(self.pending) if action == kind), 0)
            return self.pending.pop(i)[1]
        return None


def _parse_event(
    event: Mapping[str, Any], position: int, pairing: _Pairing
) -> tuple[Role, tuple[Block, ...], dict[str, Any]] | None:
    """Role, blocks and meta for one event, or None when the event is not part of the model's context."""
    dialect = _dialect(event)
    meta: dict[str, Any] = {"event_index": position, "dialect": dialect}
    if "id" in event:
        meta["event_id"] = event["id"]
    if "source" in event:
        meta["source"] = event["source"]
    action = event.get("action")
    if isinstance(action, str):
        meta["action"] = action
        args = _args(event)
        if action in _SILENT_ACTIONS or action == "condensation":
            return None
        if action == "system":
            blocks: list[Block] = [TextBlock(text=content_text(args.get("content")))]
            if "tools" in args:
                tools = args["tools"]
                blocks.append(UnknownBlock(raw=tools, text=dumps_compact(tools), type="tools"))
            return "system", tuple(blocks), meta
        if action == "message":
            role = _message_role(event)
            return role, (TextBlock(text=content_text(args.get("content"))),), meta
        if event.get("source") == "user":
            # A user's own command or edit: OpenHands shows it to the model as user text, not a tool call.
            return "user", (UnknownBlock(raw=args, text=dumps_compact(args), type=f"user_{action}"),), meta
        name = _function_name(event, action)
        call_id = pairing.call_id(event, position)
        if action == "think":
            return "assistant", (ToolUseBlock(id=call_id, name=name, input=args),), meta
        tool_input = {k: v for k, v in args.items() if k != "thought"}
        thought = (args if dialect == "events" else event).get("thought")
        said = (TextBlock(thought),) if isinstance(thought, str) and thought else ()
        call = ToolUseBlock(call_id, name, tool_input, terminal=action in TERMINAL_ACTIONS)
        return "assistant", (*said, call), meta
    observation = event.get("observation")
    if not isinstance(observation, str):
        return None
    meta["observation"] = observation
    if observation in _SILENT_OBSERVATIONS:
        return None
    if observation == "recall":
        meta["injected"] = True
        return "user", (UnknownBlock(event.get("extras"), _recall_text(event), type="recall"),), meta
    text = content_text(event.get("content"))
    answered = None if observation == "agent_condensation" else pairing.answer(event)
    if answered is None:
        return "user", (TextBlock(text=text),), meta
    name = _function_name(event, observation)
    is_error = observation == "error" or event.get("success") is False
    return "tool", (ToolResultBlock(tool_use_id=answered, text=text, is_error=is_error, name=name),), meta


def _condensation(event: Mapping[str, Any], line: int) -> Boundary | None:
    if event.get("action") != "condensation":
        return None
    args = _args(event)
    trigger = "summary" if args.get("summary") else ("forget" if args.get("forgotten_event_ids") else None)
    return Boundary(kind="openhands_condensation", line=line, trigger=trigger)


def _history_items(
    history: list[Any], line: int, rec_index: int, conversation: int, index: int
) -> Iterator[Item]:
    """The messages (indexed from ``index``), usage and boundaries of one line's event history."""
    pairing = _Pairing(line)
    seen_responses: set[str] = set()
    for position, event in enumerate(history):
        if not isinstance(event, dict):
            continue
        boundary = _condensation(event, line)
        if boundary is not None:
            yield boundary
            continue
        parsed = _parse_event(event, position, pairing)
        if parsed is None:
            continue
        role, blocks, meta = parsed
        rid, usage = _usage(event, line) if role == "assistant" else (None, None)
        if rid in seen_responses:
            usage = None  # several calls of one response: its usage belongs to the first
        if rid is not None:
            seen_responses.add(rid)
        meta["record"] = rec_index
        yield Message(
            role, blocks, line, index, (rec_index,), conversation, importance_of(event), usage, meta, event
        )
        index += 1
        if usage is not None:
            yield usage


class _ReplayPairing(_Pairing):
    """Pairing for re-parsing one event alone: the ids are the ones the message already carries."""

    def __init__(self, message: Message) -> None:
        super().__init__(message.line)
        self._uses = [b.id for b in message.blocks if isinstance(b, ToolUseBlock)]
        self._results = [b.tool_use_id for b in message.blocks if isinstance(b, ToolResultBlock)]

    def call_id(self, event: Mapping[str, Any], position: int) -> str:
        return self._uses[0] if self._uses else super().call_id(event, position)

    def answer(self, event: Mapping[str, Any]) -> str | None:
        return self._results[0] if self._results else None


def _set_text(event: dict[str, Any], holder: dict[str, Any], key: str, new: str) -> None:
    """Set ``holder[key]``; the event's display ``message`` follows when it was a copy of the old text."""
    old = holder.get(key)
    holder[key] = new
    if event.get("message") == old and isinstance(old, str):
        event["message"] = new


def _action_event(
    base: dict[str, Any], action: str, args: dict[str, Any], bare: bool, thought: str | None
) -> dict[str, Any]:
    """An action event with ``args`` (and the thought beside them unless ``thought`` is None)."""
    args = dict(args) if thought is None else {**args, "thought": thought}
    if bare:
        keep = {k: v for k, v in base.items() if k in _BARE_ACTION_META and k != "thought"}
        return {**keep, **args, "action": action}
    event = {**base, "action": action, "args": args}
    event.setdefault("message", "")
    return event


def _encode_events(message: Message, dialect: str | None = None) -> list[dict[str, Any]]:
    """The event(s) for a message: its raw event when unchanged, else that event updated (or a new one);
    an assistant message with several tool calls gives one event per call."""
    raw = message.raw if isinstance(message.raw, dict) else None
    if raw is not None:
        position = message.meta.get("event_index", 0)
        parsed = _parse_event(raw, position if isinstance(position, int) else 0, _ReplayPairing(message))
        if parsed is not None and parsed[:2] == (message.role, message.blocks):
            return [raw]
    bare = (_dialect(raw) if raw is not None else (dialect or message.meta.get("dialect"))) == "bare"
    event: dict[str, Any] = dict(raw) if raw is not None else {}
    if raw is None and not bare:
        event = {
            # OpenHands writes naive ISO times; encode_line gives a new event its neighbour's time.
            "timestamp": str(message.meta.get("timestamp") or run_timestamp().removesuffix("Z")),
            "source": "user" if message.role == "user" else "agent",
        }
    uses = [b for b in message.blocks if isinstance(b, ToolUseBlock)]
    results = [b for b in message.blocks if isinstance(b, ToolResultBlock)]
    unknown = [b for b in message.blocks if isinstance(b, UnknownBlock)]
    text = "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock | ThinkingBlock) and b.text)
    action = event.get("action") if isinstance(event.get("action"), str) else None

    if "observation" in event or results:
        content = results[0].text if results else text
        if "observation" not in event:
            name = results[0].name if results and results[0].name else "run"
            event = {**event, "observation": name, "content": content, "extras": {}}
            if not bare:
                event["message"] = ""  # OpenHands' one-line display summary; the model sees content
            return [event]
        if event.get("observation") == "recall":
            return [{**event, "extras": unknown[0].raw}] if unknown else [event]
        _set_text(event, event, "content", content)
        return [event]

    if uses:
        out: list[dict[str, Any]] = []
        for i, use in enumerate(uses):
            base = event if i == 0 else {k: v for k, v in event.items() if k in ("timestamp", "source")}
            kind = action if (i == 0 and action) else use.name
            args = dict(use.input) if isinstance(use.input, dict) else {"input": use.input}
            thought = None if kind == "think" else (text if i == 0 else "")
            out.append(_action_event(base, kind, args, bare, thought))
        return out

    if action == "system" or (action is None and message.role == "system"):
        args = _args(event)  # an event built here has the shape ``bare`` says
        _set_text(event, args, "content", text)
        tools = [b for b in unknown if b.type == "tools"]
        if tools:
            args["tools"] = tools[0].raw
        if raw is None and not bare:
            event["message"] = text
        return [_action_event(event, "system", args, bare, None)]

    if action not in (None, "message") and unknown:
        # A user's own action (a command they ran): its arguments are the unknown block.
        args = unknown[0].raw if isinstance(unknown[0].raw, dict) else {}
        return [_action_event(event, action, args, bare, None)]

    if bare:
        if action != "message":
            event = {"action": "message", "content": "", "image_urls": None}
            event["wait_for_response"] = message.role == "assistant"
        _set_text(event, event, "content", text)
        return [event]
    if action == "message" and isinstance(event.get("args"), dict):
        args = dict(event["args"])
    else:
        args = {"content": "", "image_urls": None, "wait_for_response": False}
        event["source"] = "user" if message.role in ("user", "system") else "agent"
        event["message"] = ""
    _set_text(event, args, "content", text)
    event.update(action="message", args=args)
    return [event]


def _stamp_near(history: Sequence[Any], after: int) -> str | None:
    """The time of the event at ``after`` or the nearest one before it, else of the first event after."""
    order = [*range(min(after, len(history) - 1), -1, -1), *range(after + 1, len(history))]
    stamps = (history[i].get("timestamp") for i in order if isinstance(history[i], dict))
    return next((str(t) for t in stamps if isinstance(t, str)), None)


def encode_line(messages: Sequence[Message], template_raw: Mapping[str, Any]) -> dict[str, Any]:
    """A line's dict with its ``history`` rebuilt from ``messages``: events that were never messages stay;
    new ones go after the message before them, with fresh ids and a new result's ``cause`` set."""
    history = template_raw.get("history")
    history = history if isinstance(history, list) else []
    bare = {_dialect(e) for e in history if isinstance(e, dict)} == {"bare"}
    pairing = _Pairing(0)
    was_message = [
        isinstance(e, dict) and _condensation(e, 0) is None and _parse_event(e, i, pairing) is not None
        for i, e in enumerate(history)
    ]
    kept: dict[int, list[dict[str, Any]]] = {}
    inserted: dict[int, list[dict[str, Any]]] = {}
    call_events: dict[str, dict[str, Any]] = {}  # tool-call id -> the action event written for it
    causes: list[tuple[dict[str, Any], str]] = []  # new observation events and the call they answer
    after = -1
    for message in messages:
        m = message
        position = m.meta.get("event_index")
        is_kept = isinstance(m.raw, dict) and isinstance(position, int) and 0 <= position < len(history)
        if not is_kept and "timestamp" not in m.meta:
            stamp = _stamp_near(history, after)
            if stamp is not None:
                m = replace(m, meta={**m.meta, "timestamp": stamp})
        events = _encode_events(m, "bare" if bare else "events")
        uses = [b.id for b in m.blocks if isinstance(b, ToolUseBlock)]
        call_events.update(zip(uses, events, strict=False))
        if is_kept:
            assert isinstance(position, int)
            kept.setdefault(position, []).extend(events)
            after = position
        else:
            inserted.setdefault(after, []).extend(events)
            if events:
                causes.extend((events[0], b.tool_use_id) for b in m.blocks if isinstance(b, ToolResultBlock))

    out: list[Any] = list(inserted.get(-1, []))
    for i, event in enumerate(history):
        out.extend(kept.get(i, []) if was_message[i] else [event])
        out.extend(inserted.get(i, []))
    if not bare:
        ids = [e["id"] for e in out if isinstance(e, dict) and isinstance(e.get("id"), int)]
        next_id = max(ids, default=-1) + 1
        for event in out:
            if isinstance(event, dict) and "id" not in event:
                event["id"] = next_id  # events built by _encode_events are fresh dicts: safe to fill in
                next_id += 1
        for event, call_id in causes:
            action_event = call_events.get(call_id)
            if action_event is not None and "cause" not in event:
                event["cause"] = action_event["id"]
    return {**template_raw, "history": out}


def _is_trajectory(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("history"), list)


class OpenHandsAdapter(FormatAdapter):
    name = "openhands"
    tool_role = True
    description = "OpenHands evaluation/resolver output (one task per line with its event history)"
    #: Actions whose tool call ends the run (the reader marks them ``terminal``).
    terminal_actions = TERMINAL_ACTIONS

    def sniff(self, sample: Sequence[Record]) -> int:
        records = [r.data for r in sample if isinstance(r.data, dict)]
        # SWE-agent documents, codex envelopes and datasets also have lists of turns.
        if not records or any("trajectory" in d or "payload" in d or "messages" in d for d in records):
            return 0
        marked = [d for d in records if _is_trajectory(d) and ("instance_id" in d or "instruction" in d)]
        if len(marked) == len(records):
            return 95
        if all(_is_trajectory(d) for d in records):
            events = [e for d in records for e in d["history"][:5] if isinstance(e, dict)]
            if events and all("action" in e or "observation" in e for e in events):
                return 70
        return 0

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        index = 0
        lines = ((i, rec) for i, rec in records if _is_trajectory(rec.data))
        for conversation, (rec_index, record) in enumerate(lines):
            for item in _history_items(record.data["history"], record.line, rec_index, conversation, index):
                index += isinstance(item, Message)
                yield item

    encode_conversation = staticmethod(encode_line)

    def encode_message(self, message: Message) -> dict[str, Any]:
        events = _encode_events(message)
        if len(events) != 1:
            raise ValueError(
                f"an OpenHands event holds one tool call, this message has {len(events)}: use encode_line"
            )
        return events[0]


register(OpenHandsAdapter())
