"""The live context, the part of a log its client sends the model next: from the log's last resetting
:class:`~ctxc.model.Boundary` on, without inline subagent runs (contexts of their own) or abandoned
branches. Every count and change ctxc makes is about it; this module alone decides it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ctxc.model import Boundary, Message, TextBlock, ThinkingBlock, Transcript, UnknownBlock, Usage

#: Markup a client injects into user text (reminders, slash commands, Codex's environment and subagent
#: notices, the output of a shell command the user ran with Claude Code's ``!`` or Codex's): not the
#: user's words.
INJECTED_MARKUP = re.compile(
    r"<(system-reminder|command-name|command-message|command-args|local-command-stdout|local-command-stderr"
    r"|local-command-caveat|environment_context|user_instructions|user_shell_command|turn_aborted"
    r"|task-notification|bash-input|bash-stdout|bash-stderr|subagent_notification)>"
    r".*?(?:</\1>|\Z)",
    re.S,
)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
# Whole user messages a harness writes (instructions, a skill Codex loads, a command caveat, an
# interruption marker).
_HARNESS_OPENINGS = (
    "# AGENTS.md instructions",
    "<INSTRUCTIONS>",
    "<skill>",
    "Caveat: The messages below were generated",
    "[Request interrupted by user",
)
#: The kind of the item that names the messages on abandoned branches; it is no compaction.
BRANCHES = "branches"
#: The kind of the item that names the messages whose thinking the client does not send; no compaction.
UNSENT_THINKING = "unsent_thinking"


@dataclass(frozen=True, slots=True)
class LiveContext:
    """Which messages of a log its client sends next: per conversation the boundary it resumes from
    (``resets``), the conversations run apart from the main one (``side``), the indexes of messages
    on abandoned branches, and of those whose thinking blocks it leaves out (``unsent_thinking``)."""

    resets: Mapping[int, Boundary] = field(default_factory=dict)
    side: frozenset[int] = frozenset()
    abandoned: frozenset[int] = frozenset()
    unsent_thinking: frozenset[int] = frozenset()

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


def abandoned_messages(boundaries: Iterable[Boundary]) -> frozenset[int]:
    """Indexes of the messages on abandoned branches, as the adapter's ``branches`` items name them."""
    return frozenset(i for b in boundaries if b.kind == BRANCHES for i in b.abandoned)


def compactions(boundaries: Iterable[Boundary]) -> tuple[Boundary, ...]:
    """The compactions a log records (what reports list), without the ``branches`` and
    ``unsent_thinking`` items."""
    return tuple(b for b in boundaries if b.kind not in (BRANCHES, UNSENT_THINKING))


def scanned_live_context(boundaries: Sequence[Boundary], side: Iterable[int]) -> LiveContext:
    """The live context from a scan's boundaries and the conversations it found to be sidechains."""
    # Each conversation's client resumes from its newest resetting boundary.
    resets = {b.conversation: b for b in boundaries if b.resets}
    unsent = frozenset(i for b in boundaries for i in b.unsent_thinking)
    return LiveContext(resets, frozenset(side), abandoned_messages(boundaries), unsent)


def side_conversations(flags: Iterable[tuple[int, bool]]) -> frozenset[int]:
    """Conversations the client runs apart: those all of whose messages are sidechain messages,
    provided some conversation is not (a subagent's own log is its main thread)."""
    side: dict[int, bool] = {}
    for conversation, is_side in flags:
        side[conversation] = side.get(conversation, True) and is_side
    return frozenset() if all(side.values()) else frozenset(c for c, s in side.items() if s)


def thread_usage(usage: Sequence[Usage]) -> tuple[Usage, ...]:
    """The calls of the chain the client resumes, which name its model and measure its context: without
    those of inline subagent runs, unless every call is one (a subagent's own log is its main thread),
    and without those on abandoned branches (billed, but in no context)."""
    own = tuple(u for u in usage if not u.sidechain) or tuple(usage)
    return tuple(u for u in own if not u.abandoned)


def is_sidechain(message: Message) -> bool:
    """Whether the adapter marked ``message`` as part of a subagent run written inline."""
    return message.meta.get("is_sidechain") is True


def live_context(boundaries: Sequence[Boundary], messages: Sequence[Message]) -> LiveContext:
    """The live context of a whole transcript, from its boundaries and messages as read."""
    return scanned_live_context(
        boundaries, side_conversations((m.conversation, is_sidechain(m)) for m in messages)
    )


def live_messages(transcript: Transcript) -> tuple[Message, ...]:
    """The messages of ``transcript`` its client sends next (what carried messages precede aside)."""
    return live_context(transcript.boundaries, transcript.messages).split(transcript.messages)[1]


def sent_messages(transcript: Transcript) -> tuple[Message, ...]:
    """Everything the client sends next: what its compaction records carry, then the live messages
    without the thinking it leaves out (a message of that thinking alone not at all)."""
    live = live_context(transcript.boundaries, transcript.messages)
    sent = [
        m
        if m.index not in live.unsent_thinking
        else replace(m, blocks=tuple(b for b in m.blocks if not isinstance(b, ThinkingBlock)))
        for m in live.split(transcript.messages)[1]
        if m.index not in live.unsent_thinking or m.kind != "thinking"
    ]
    return (*(m for b in live.resets.values() for m in b.carried), *sent)


def request_text(message: Message) -> str:
    """The user's own words in ``message``, block by block, injected markup removed; for a slash
    command, its arguments. Empty when it holds none (a reminder, an environment context, a tool result)."""
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
    """A reset at ``message`` when it holds a provider's own compaction block or item: the provider
    ignores what precedes it."""
    if not any(isinstance(b, UnknownBlock) and b.type == "compaction" for b in message.blocks):
        return None
    return Boundary(
        "compaction", message.line, resets=True, index=message.index, conversation=message.conversation
    )
