"""The live context: the part of a log its client will send the model next.

A transcript file keeps everything, but an agent resumes from its log's own last compaction: Claude
Code from its newest ``compact_boundary`` (with the summary record after it), Codex from its last
``compacted`` record (the ``replacement_history`` it holds, then what follows), pi from its last
``compaction`` entry (its summary, the kept tail before it, then what follows), a chat log from its last
``compaction`` block. Subagent runs written inline (Claude Code sidechains) are contexts of their own,
never the main one. A Claude Code log is a tree: a rewind or an edited prompt leaves the old branch in
the file, and the client resumes only the chain that ends at the newest main-chain leaf; messages on
other branches are in no context. Every count ctxc prints and every change it makes is about the live
context; this module is the one place that says which messages are in it. Each adapter supplies the
facts: which :class:`~ctxc.model.Boundary` resets, what it carries, which messages are sidechain
messages, which lie on abandoned branches (a ``branches`` item).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ctxc.model import Boundary, Message, TextBlock, Transcript, UnknownBlock

#: Markup a client injects into user text: reminders, slash-command echoes and their output, Codex's
#: environment and instructions. None of it is the user's own words.
INJECTED_MARKUP = re.compile(
    r"<(system-reminder|command-name|command-message|command-args|local-command-stdout|local-command-stderr"
    r"|environment_context|user_instructions)>"
    r".*?(?:</\1>|\Z)",
    re.S,
)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
# Whole user messages a harness writes: Codex's AGENTS.md instructions, Claude Code's command caveat
# and the marker it records when the user interrupts a turn.
_HARNESS_OPENINGS = (
    "# AGENTS.md instructions",
    "<INSTRUCTIONS>",
    "Caveat: The messages below were generated",
    "[Request interrupted by user",
)


#: The kind of the item that names the messages on abandoned branches; it is no compaction.
BRANCHES = "branches"


@dataclass(frozen=True, slots=True)
class LiveContext:
    """Which messages of a log its client sends next.

    ``resets`` holds, per conversation, the boundary its client resumes from (none: the whole
    conversation is live). ``side`` lists the conversations the client runs apart from the main one.
    ``abandoned`` holds the indexes of messages on branches the client no longer resumes.
    """

    resets: Mapping[int, Boundary] = field(default_factory=dict)
    side: frozenset[int] = frozenset()
    abandoned: frozenset[int] = frozenset()

    def is_live(self, index: int, conversation: int) -> bool:
        if conversation in self.side or index in self.abandoned:
            return False
        reset = self.resets.get(conversation)
        if reset is None or index >= reset.index:
            return True
        return reset.kept_from is not None and index >= reset.kept_from

    def split(self, messages: Iterable[Message]) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """``(history, live)`` of some messages, each in the order given."""
        history: list[Message] = []
        live: list[Message] = []
        for m in messages:
            (live if self.is_live(m.index, m.conversation) else history).append(m)
        return tuple(history), tuple(live)

    @property
    def boundary(self) -> Boundary | None:
        """The newest reset of any conversation (the main one, in a log that has one)."""
        return max(self.resets.values(), key=lambda b: b.line, default=None)


def last_resets(boundaries: Iterable[Boundary]) -> dict[int, Boundary]:
    """The newest boundary each conversation's client resumes from."""
    return {b.conversation: b for b in boundaries if b.resets}


def abandoned_messages(boundaries: Iterable[Boundary]) -> frozenset[int]:
    """Indexes of the messages on abandoned branches, as the adapter's ``branches`` items name them."""
    return frozenset(i for b in boundaries if b.kind == BRANCHES for i in b.abandoned)


def compactions(boundaries: Iterable[Boundary]) -> tuple[Boundary, ...]:
    """The compactions a log records (what reports list), without the ``branches`` items."""
    return tuple(b for b in boundaries if b.kind != BRANCHES)


def scanned_live_context(boundaries: Sequence[Boundary], side: Iterable[int]) -> LiveContext:
    """The live context from a scan's boundaries and the conversations it found to be sidechains."""
    return LiveContext(
        resets=last_resets(boundaries), side=frozenset(side), abandoned=abandoned_messages(boundaries)
    )


def side_conversations(flags: Iterable[tuple[int, bool]]) -> frozenset[int]:
    """Conversations the client runs apart: those all of whose messages are sidechain messages,
    provided some conversation is not (a subagent's own log is its main thread)."""
    side: dict[int, bool] = {}
    for conversation, is_side in flags:
        side[conversation] = side.get(conversation, True) and is_side
    if all(side.values()):
        return frozenset()
    return frozenset(c for c, s in side.items() if s)


def is_sidechain(message: Message) -> bool:
    """Whether the adapter marked ``message`` as part of a subagent run written inline."""
    return message.meta.get("is_sidechain") is True


def live_context(boundaries: Sequence[Boundary], messages: Sequence[Message]) -> LiveContext:
    """The live context of a whole transcript, from its boundaries and messages as read."""
    side = side_conversations((m.conversation, is_sidechain(m)) for m in messages)
    return LiveContext(resets=last_resets(boundaries), side=side, abandoned=abandoned_messages(boundaries))


def live_messages(transcript: Transcript) -> tuple[Message, ...]:
    """The messages of ``transcript`` its client sends next (what carried messages precede aside)."""
    return live_context(transcript.boundaries, transcript.messages).split(transcript.messages)[1]


def sent_messages(transcript: Transcript) -> tuple[Message, ...]:
    """Everything the client sends next: what its compaction records carry, then the live messages."""
    live = live_context(transcript.boundaries, transcript.messages)
    carried = (m for b in live.resets.values() for m in b.carried)
    return (*carried, *live.split(transcript.messages)[1])


def request_text(message: Message) -> str:
    """The user's own words in ``message``: injected markup removed; for a slash command, its
    arguments. Empty when the message holds none (a reminder, an environment context, a tool result)."""
    # Block by block: a Claude Code message may join several records (a tool result, the client's note
    # of an interruption, then what the user typed).
    own: list[str] = []
    args: list[str] = []
    for b in message.blocks:
        if not isinstance(b, TextBlock) or not b.text:
            continue
        words = INJECTED_MARKUP.sub("", b.text).strip()
        if words and not words.startswith(_HARNESS_OPENINGS):
            own.append(words)
        elif found := _COMMAND_ARGS.search(b.text):
            args.append(found.group(1).strip())
    return "\n".join(own) if own else next((a for a in args if a), "")


def quotes(text: str, words: str) -> bool:
    """Whether ``text`` holds ``words`` verbatim, line breaks and indentation aside (a summary indents
    the continuation lines of what it quotes)."""
    return " ".join(words.split()) in " ".join(text.split())


def session_intent(messages: Iterable[Message]) -> Message | None:
    """The session's first real user request: what every compaction must keep verbatim."""
    return next((m for m in messages if m.is_request and request_text(m)), None)


def last_request(messages: Sequence[Message]) -> Message | None:
    """The newest real user request."""
    return next((m for m in reversed(messages) if m.is_request and request_text(m)), None)


def compaction_block_boundary(message: Message) -> Boundary | None:
    """A reset at ``message`` when it holds a provider's own compaction (the Messages API's
    ``compaction`` block, the Responses API's ``compaction`` item): the provider ignores what precedes it,
    so the live context starts at this message."""
    if any(isinstance(b, UnknownBlock) and b.type == "compaction" for b in message.blocks):
        return Boundary(
            kind="compaction",
            line=message.line,
            resets=True,
            index=message.index,
            conversation=message.conversation,
        )
    return None
