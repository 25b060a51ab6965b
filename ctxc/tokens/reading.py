"""Counting while reading: messages are counted in batches as they are read, a few batches ahead.

On a large file the batches go to worker processes (:func:`ctxc.tokens.counting_processes`) that count
while this process parses the next ones; only the batches in flight are held in memory.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ctxc.formats import load
from ctxc.model import Message, Transcript
from ctxc.reader import ReadOptions
from ctxc.tokens.base import Counter
from ctxc.tokens.cost import Counted, start_parts

# A batch is flushed to the counter when it holds this many characters or messages. Large enough that
# shipping it to the counting workers is noise, small enough that memory stays low on a 100 MB log.
BATCH_CHARS = 2_000_000
BATCH_MESSAGES = 4_000


class CountingQueue:
    """Messages counted in batches as they come, at most ``depth`` batches unfinished.

    The parser keeps a few batches ahead of the workers, so they always have one queued; more would
    only hold more messages in memory.
    """

    def __init__(self, counter: Counter, depth: int = 8) -> None:
        self.counter = counter
        self.depth = depth
        self._batch: list[Message] = []
        self._chars = 0
        self._queue: deque[tuple[list[Message], Callable[[], Counted]]] = deque()

    def add(self, message: Message) -> list[tuple[list[Message], Counted]]:
        """Add ``message``; returns the oldest batches with their counts while over depth."""
        self._batch.append(message)
        self._chars += sum(len(getattr(b, "text", "")) for b in message.blocks)
        if self._chars < BATCH_CHARS and len(self._batch) < BATCH_MESSAGES:
            return []
        self.flush()
        done = []
        while len(self._queue) > self.depth:
            batch, finish = self._queue.popleft()
            done.append((batch, finish()))
        return done

    def flush(self) -> None:
        """Start counting the messages added since the last batch was started."""
        if self._batch:
            self._queue.append((self._batch, start_parts(self._batch, self.counter)))
            self._batch, self._chars = [], 0

    def drain(self) -> Iterator[tuple[list[Message], Counted]]:
        """Every batch not yet returned, with its counts."""
        self.flush()
        while self._queue:
            done, finish = self._queue.popleft()
            yield done, finish()


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
    counts: list[int] = []

    def take(message: Message) -> None:
        for _, done in queue.add(message):
            counts.extend(done.totals())

    transcript = load(src, input_format=input_format, options=options, on_message=take)
    for _, done in queue.drain():
        counts.extend(done.totals())
    return transcript, counts


__all__ = ["BATCH_CHARS", "BATCH_MESSAGES", "CountingQueue", "load_counted"]
