"""Token accounting for compaction: every message is counted once, new ones as strategies create them.
Messages hold unhashable raw JSON, so the memo is keyed by identity and keeps the message alive."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat

from ctxc.model import Message
from ctxc.tokens import Counter
from ctxc.tokens.cost import count_messages, thinking_tokens


class Ledger:
    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        # By identity: each counted message's tokens, and the message itself, held so its id stays its.
        self._counts: dict[int, int] = {}
        self._held: dict[int, Message] = {}
        self._withheld: dict[int, int] = {}  # by identity: tokens of a counted message its client leaves out

    def count_uncounted(self, messages: Sequence[Message]) -> None:
        """Count those of ``messages`` not counted yet, in one batch (the tokenizer is fastest on batches)."""
        todo = [m for m in messages if id(m) not in self._counts]
        if todo:
            self.take_counts(todo, count_messages(todo, self.counter))

    def take_counts(self, messages: Sequence[Message], counts: Sequence[int]) -> None:
        """Take counts made while the messages were read (:func:`ctxc.tokens.reading.load_counted`)."""
        for m, n in zip(messages, counts, strict=True):
            self._counts[id(m)] = n
            self._held[id(m)] = m

    def withhold_thinking(self, messages: Iterable[Message]) -> None:
        """Count ``messages`` as their client sends them: without their thinking (another model's); a
        message of thinking alone is not sent at all. One count for all of them."""
        messages = list(messages)
        self.count_uncounted(messages)
        for m, thinking in zip(messages, thinking_tokens(messages, self.counter), strict=True):
            self._withheld[id(m)] = self._counts[id(m)] if m.kind == "thinking" else thinking

    def send_all_thinking(self) -> None:
        """Count every message with its thinking again (a replayed turn of another model)."""
        self._withheld.clear()

    def sends_thinking(self, message: Message) -> bool:
        """Whether the client sends ``message``'s thinking: not after :meth:`withhold_thinking` named it."""
        return id(message) not in self._withheld

    def tokens(self, message: Message) -> int:
        n = self._counts.get(id(message))
        if n is None:
            self.count_uncounted([message])
            n = self._counts[id(message)]
        return n - self._withheld.get(id(message), 0)

    def inherit_counts(self, new: Sequence[Message], old: Sequence[Message]) -> None:
        """Give each of ``new`` the count of the message in its place in ``old`` if it has equal blocks (a
        message's cost depends on its blocks alone, and comparing them is cheaper than counting again)."""
        if len(new) != len(old):
            return
        for n, o in zip(new, old, strict=True):
            count = self._counts.get(id(o))
            if count is not None and id(n) not in self._counts and n.blocks == o.blocks:
                self._counts[id(n)], self._held[id(n)] = count, n

    def restricted_to(self, messages: Iterable[Message]) -> Ledger:
        """A ledger with the counts of ``messages`` alone, so that this one, holding every message a
        strategy counted, can be let go."""
        out = Ledger(self.counter)
        for m in messages:
            count = self._counts.get(id(m))
            if count is not None:
                out._counts[id(m)], out._held[id(m)] = count, m
        return out

    def total(self, messages: Iterable[Message]) -> int:
        messages = list(messages)
        ids = list(map(id, messages))
        try:  # every message counted already, as adaptive's checks between stages find them
            total = sum(map(self._counts.__getitem__, ids))
        except KeyError:
            self.count_uncounted(messages)
            total = sum(map(self._counts.__getitem__, ids))
        if self._withheld:
            total -= sum(map(self._withheld.get, ids, repeat(0)))
        return total

    def count_text(self, text: str) -> int:
        return self.counter.count([text])[0] if text else 0
