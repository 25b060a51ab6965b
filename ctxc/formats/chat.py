"""Plain chat logs: one Anthropic- or OpenAI-shaped message per line, parsed by :mod:`ctxc.formats.dicts`.
Lines whose role starts with ``_`` are bookkeeping (Kimi CLI's ``_checkpoint``, ``_usage``), kept as is."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from ctxc.formats import register
from ctxc.formats.base import FormatAdapter, Item, count, importance_of
from ctxc.formats.dicts import (
    ChatState,
    detect_dialect,
    encode_chat_message,
    parse_chat_message,
    parse_usage,
    uses_responses_parts,
)
from ctxc.formats.shapes import openai_role
from ctxc.live import compaction_block_boundary
from ctxc.model import Message, Record, Usage


class ChatAdapter(FormatAdapter):
    name = "chat"
    usage_before_response = True  # Kimi's _usage line is the context as the next call is made
    description = "Anthropic or OpenAI chat messages, one per line (Kimi CLI context files, API logs)"

    def sniff(self, sample: Sequence[Record]) -> int:
        with_role, marked = 0, False
        for rec in sample:
            data = rec.data
            if not isinstance(data, dict):
                continue
            if ("type" in data and "payload" in data) or uses_responses_parts(data):
                return 0  # a Codex rollout envelope or legacy response item
            role = data.get("role")
            if not isinstance(role, str):
                continue
            if role.startswith("_"):
                with_role += 1
                marked = True
            elif openai_role(role) is not None:
                with_role += 1
                marked = marked or detect_dialect(data) is not None
        if with_role == 0 or with_role * 2 < len(sample):
            return 0
        return 80 if marked else 60

    def read(self, records: Iterable[tuple[int, Record]]) -> Iterator[Item]:
        state = ChatState()
        index = conversation = 0
        in_conversation = False
        for i, rec in records:
            obj = rec.data
            if not isinstance(obj, dict):
                continue
            role = obj.get("role")
            if isinstance(role, str) and role.startswith("_"):
                if role == "_usage" and (tokens := count(obj.get("token_count"))):
                    # Kimi's running context size: what the model saw as input at that point.
                    yield Usage(input=tokens, line=rec.line)
                elif role == "_conversation":
                    # ctxc's own marker between conversations when it writes several into one chat file.
                    given = obj.get("index")
                    if isinstance(given, int) and not isinstance(given, bool):
                        conversation = given
                    elif in_conversation:
                        conversation += 1
                    state = ChatState()
                    in_conversation = False
                continue
            parsed = parse_chat_message(obj, state, synth_id=f"fc-{rec.line}")
            if parsed is None:
                continue
            msg_role, blocks, meta = parsed
            usage = parse_usage(obj.get("usage"), rec.line)
            message = Message(
                msg_role, blocks, rec.line, index, (i,), conversation, importance_of(obj), usage, meta, obj
            )
            if (reset := compaction_block_boundary(message)) is not None:
                yield reset
            yield message
            if usage is not None:
                yield usage
            index += 1
            in_conversation = True

    encode_message = staticmethod(encode_chat_message)


register(ChatAdapter())
