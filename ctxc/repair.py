"""Make a conversation valid for its API, changing as little as possible: reused or missing call ids are
fixed, orphan results removed, and unanswered calls get a "no result" result right after their turn."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from ctxc.model import MISSING_IDS, Block, Message, TextBlock, ToolResultBlock, ToolUseBlock, UnknownBlock
from ctxc.validate import TOOL_BLOCK_TYPES, Problem, openai_chat, pairing_problems

#: The problems :func:`_fix_ids` removes before pairing is repaired.
_ID_PROBLEMS = frozenset({"duplicate_call", "missing_id"})

NO_RESULT = "[ctxc] no result was recorded for this tool call"


def _carries_results(m: Message) -> bool:
    return m.role == "tool" or (m.role == "user" and any(isinstance(b, ToolResultBlock) for b in m.blocks))


def answers_in_tool_messages(messages: Sequence[Message]) -> bool:
    """Whether a call's result travels in a role ``tool`` message: as the first result in ``messages``
    does or, with none to copy, when they speak OpenAI's dialect (a chat log's ``meta["dialect"]``)."""
    carrier = next((m for m in messages if _carries_results(m)), None)
    if carrier is not None:
        return carrier.role == "tool"
    return any(m.meta.get("dialect") == "openai" for m in messages)


def repair_messages(
    messages: Sequence[Message], *, tool_role: bool | None = None
) -> tuple[tuple[Message, ...], tuple[Problem, ...]]:
    """Return repaired messages (per conversation) and the problems that were fixed."""
    found = pairing_problems(messages, strict=True)
    if not found:
        return tuple(messages), ()
    problems = found
    if any(p.code in _ID_PROBLEMS for p in found):
        messages = _fix_ids(messages)
        problems = pairing_problems(messages, strict=True)
    if tool_role is None:
        tool_role = answers_in_tool_messages(messages)
    drop_results: dict[tuple[int, int], set[str]] = defaultdict(set)  # (conversation, index) -> result ids
    for p in problems:
        if p.code not in ("unanswered_call", "duplicate_result"):
            drop_results[(p.conversation, p.index)].add(p.tool_id)
    # A repeated result goes, its first copy stays: both may be in one message (a line written twice).
    repeated = {(p.conversation, p.tool_id) for p in problems if p.code == "duplicate_result"}
    seen_results: set[tuple[int, str]] = set()
    # Results that were not adjacent are dropped too, so their calls need answering again.
    answer = {
        (p.conversation, p.tool_id) for p in problems if p.code in ("unanswered_call", "result_not_adjacent")
    }
    out: list[Message] = []
    pending: list[tuple[int, ToolUseBlock]] = []  # calls of the current assistant turn still to answer

    def flush() -> None:
        if not pending:
            return
        conv = pending[0][0]
        results = [ToolResultBlock(b.id, text=NO_RESULT, is_error=True, name=b.name) for _, b in pending]
        if tool_role:
            out.extend(Message("tool", (r,), conversation=conv, meta={"ctxc": "repair"}) for r in results)
        else:
            out.append(Message("user", tuple(results), conversation=conv, meta={"ctxc": "repair"}))
        pending.clear()

    prev: Message | None = None
    for m in messages:
        continues_turn = (
            prev is not None
            and m.conversation == prev.conversation
            and (
                (m.role == "assistant" and prev.role == "assistant" and not openai_chat(m))
                or _carries_results(m)
            )
        )
        if pending and not continues_turn:
            flush()  # right after the turn's own results, before anything else is said
        gone = drop_results.get((m.conversation, m.index), set())
        blocks = tuple(b for b in m.blocks if not _dropped(b, m.conversation, gone, repeated, seen_results))
        if len(blocks) == len(m.blocks):
            out.append(m)
        elif any(not isinstance(b, TextBlock) or b.text.strip() for b in blocks):
            out.append(replace(m, blocks=blocks))
        # else: nothing (or only blank text) is left, and an empty message is invalid too: drop it.
        if m.role == "assistant":
            pending.extend(
                (m.conversation, b)
                for b in m.blocks
                if isinstance(b, ToolUseBlock) and (m.conversation, b.id) in answer
            )
        prev = m
    flush()
    return tuple(out), tuple(found)


def _dropped(
    b: Block, conversation: int, gone: set[str], repeated: set[tuple[int, str]], seen: set[tuple[int, str]]
) -> bool:
    """Whether repair drops ``b``: a result listed in ``gone``, or a repeat of one already ``seen``."""
    if not isinstance(b, ToolResultBlock):
        return False
    key = (conversation, b.tool_use_id)
    dropped = b.tool_use_id in gone or (key in repeated and key in seen)
    seen.add(key)
    return dropped


def _fix_ids(messages: Sequence[Message]) -> list[Message]:
    """Messages whose calls all have ids of their own, written in the file (see the module doc)."""
    taken: dict[int, set[str]] = defaultdict(set)  # every id a conversation uses, to make new ones
    for m in messages:
        taken[m.conversation].update(b.id for b in m.blocks if isinstance(b, ToolUseBlock))
    seen: dict[int, set[str]] = defaultdict(set)
    # Per conversation and id as read: the new ids of calls still to answer (in call order), and the latest.
    waiting: dict[tuple[int, str], list[str]] = defaultdict(list)
    latest: dict[tuple[int, str], str] = {}
    out: list[Message] = []
    for m in messages:
        conv = m.conversation
        blocks: list[Block] = []
        for block in m.blocks:
            b = block
            if isinstance(b, UnknownBlock) and b.type in TOOL_BLOCK_TYPES:
                continue  # a call or result without a usable id: nothing can pair with it
            if isinstance(b, ToolUseBlock) and m.role == "assistant":
                read_id = b.id
                if read_id in seen[conv]:
                    k = 2
                    while f"{read_id}-{k}" in taken[conv]:
                        k += 1
                    b = replace(b, id=f"{read_id}-{k}")
                    taken[conv].add(b.id)
                seen[conv].add(b.id)
                waiting[(conv, read_id)].append(b.id)
                latest[(conv, read_id)] = b.id
            elif isinstance(b, ToolResultBlock):
                key = (conv, b.tool_use_id)
                target = waiting[key].pop(0) if waiting.get(key) else latest.get(key, b.tool_use_id)
                if target != b.tool_use_id:
                    b = replace(b, tool_use_id=target)
            blocks.append(b)
        meta = {k: v for k, v in m.meta.items() if k != MISSING_IDS} if MISSING_IDS in m.meta else m.meta
        same = len(blocks) == len(m.blocks) and all(x is y for x, y in zip(blocks, m.blocks, strict=True))
        if same and meta is m.meta:
            out.append(m)
        elif blocks:  # else only id-less tool blocks were there, and an empty message is invalid too
            out.append(replace(m, blocks=tuple(blocks), meta=meta))
    return out
