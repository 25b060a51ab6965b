"""Counting while reading: messages are counted in batches as they are read, a few batches ahead.

On a large file the batches go to worker processes (:func:`ctxc.tokens.counting_processes`) that count
while this process parses the next ones; only the batches in flight are held in memory.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from ctxc.formats import load
from ctxc.model import Boundary, Message, Transcript, Usage
from ctxc.reader import ReadOptions
from ctxc.tokens.base import Counter
from ctxc.tokens.cost import Counted, start_parts

# A batch is flushed to the counter when it holds this many characters or messages. Large enough that
# shipping it to the counting workers is noise, small enough that memory stays low on a 100 MB log.
BATCH_CHARS = 2_000_000
BATCH_MESSAGES = 4_000


class CountingQueue:
    """Batches of messages being counted, oldest first, at most ``depth`` of them unfinished.

    The parser keeps a few batches ahead of the workers, so they always have one queued; more would
    only hold more messages in memory.
    """

    def __init__(self, counter: Counter, depth: int = 8) -> None:
        self.counter = counter
        self.depth = depth
        self._queue: deque[tuple[list[Message], Callable[[], Counted]]] = deque()

    def add(self, batch: list[Message]) -> Iterator[tuple[list[Message], Counted]]:
        """Start counting ``batch``; yields the oldest batches with their counts while over depth."""
        self._queue.append((batch, start_parts(batch, self.counter)))
        while len(self._queue) > self.depth:
            done, finish = self._queue.popleft()
            yield done, finish()

    def drain(self) -> Iterator[tuple[list[Message], Counted]]:
        while self._queue:
            done, finish = self._queue.popleft()
            yield done, finish()


class _Batcher:
    """Collects messages into batches of at most :data:`BATCH_CHARS` characters or
    :data:`BATCH_MESSAGES` messages."""

    def __init__(self) -> None:
        self.batch: list[Message] = []
        self.chars = 0

    def add(self, message: Message) -> list[Message] | None:
        """Add ``message``; returns the batch when it is full (and starts a new one)."""
        self.batch.append(message)
        self.chars += sum(len(getattr(b, "text", "")) for b in message.blocks)
        if self.chars >= BATCH_CHARS or len(self.batch) >= BATCH_MESSAGES:
            return self.take()
        return None

    def take(self) -> list[Message]:
        batch, self.batch, self.chars = self.batch, [], 0
        return batch


def message_batches(
    items: Iterable[Message | Usage | Boundary], sink: list[Usage | Boundary]
) -> Iterator[list[Message]]:
    """The messages of ``items`` in batches; the other items (usage, boundaries) go to ``sink``."""
    batcher = _Batcher()
    for item in items:
        if not isinstance(item, Message):
            sink.append(item)
            continue
        full = batcher.add(item)
        if full is not None:
            yield full
    if batcher.batch:
        yield batcher.take()


def load_counted(
    src: str | os.PathLike[str] | BinaryIO,
    counter: Counter,
    *,
    input_format: str | None = None,
    options: ReadOptions = ReadOptions(),
) -> tuple[Transcript, list[int]]:
    """Read a whole transcript and the tokens of each of its messages, in message order.

    Batches are counted as they are read: inside :func:`ctxc.tokens.counting_processes` the worker
    processes count while this one parses.
    """
    queue = CountingQueue(counter)
    batcher = _Batcher()
    counts: list[int] = []

    def take(message: Message) -> None:
        full = batcher.add(message)
        if full is not None:
            for _, done in queue.add(full):
                counts.extend(done.totals())

    transcript = load(src, input_format=input_format, options=options, on_message=take)
    if batcher.batch:
        for _, done in queue.add(batcher.take()):
            counts.extend(done.totals())
    for _, done in queue.drain():
        counts.extend(done.totals())
    return transcript, counts


__all__ = ["BATCH_CHARS", "BATCH_MESSAGES", "CountingQueue", "load_counted", "message_batches"]
