"""The ``parentUuid`` tree of a Claude Code log and the chain the client resumes from it: messages on
other branches are named by a ``branches`` boundary, responses whose thinking it does not send by an
``unsent_thinking`` one."""

from __future__ import annotations

import re
from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any, NamedTuple

from ctxc.formats.claude_code_records import SYNTHETIC_MODEL
from ctxc.live import BRANCHES, UNSENT_THINKING
from ctxc.model import Boundary, Usage

CONVERSATIONAL = ("user", "assistant")
_DATED = re.compile(r"-\d{8}$")
#: The record types Claude Code loads into its conversation tree (progress records it skips).
_ROWS = frozenset({"user", "assistant", "system", "attachment"})


def signer(model: str | None) -> str:
    """The model a response's thinking is signed for, as the client compares them: its name, dates aside."""
    return _DATED.sub("", model or "")


class _Node(NamedTuple):
    """One record of the tree, as much as finding the resumed chain needs."""

    record: int  # its index in the file's records
    line: int
    uuid: str
    parent: str | None  # through progress records, which the client skips
    kind: str
    side: bool
    message_id: str | None = None  # an assistant record's response id
    compact: bool = False  # a compact_boundary record


def _chain_up(nodes: Mapping[str, _Node], leaf: _Node) -> list[_Node] | None:
    """``leaf`` and its ancestors up to the root; None when a link names a record the file lacks."""
    chain: list[_Node] = []
    seen: set[str] = set()
    node: _Node | None = leaf
    while node is not None and node.uuid not in seen:
        seen.add(node.uuid)
        chain.append(node)
        if node.parent is None:
            break
        node = nodes.get(node.parent)
        if node is None:
            return None
    return chain


class _Resumed(NamedTuple):
    """The chain the client resumes: its records, the record before it (its compact_boundary root, else
    -1: what precedes is history, not a branch) and the line of the last main-chain row."""

    live: set[int]
    after: int
    line: int


def _resumed_chain(nodes: Mapping[str, _Node], start: _Node, results: Container[int]) -> _Resumed | None:
    """The chain Claude Code resumes when ``start`` is the last main-chain row (the leaf's chain to the
    root, the leaf's non-message descendants, every part of a response on it and their tool results);
    None when a link names a record the file lacks."""
    leaf: _Node | None = start
    seen: set[str] = set()
    while leaf is not None and leaf.kind not in CONVERSATIONAL and leaf.uuid not in seen:
        seen.add(leaf.uuid)
        leaf = nodes.get(leaf.parent) if leaf.parent else None
    chain = _chain_up(nodes, leaf) if leaf is not None and leaf.kind in CONVERSATIONAL else None
    if leaf is None or not chain:
        return None
    live = {n.record for n in chain}
    children: dict[str, list[_Node]] = {}  # non-message children, and tool results, by parent
    responses: set[str] = {n.message_id for n in chain if n.message_id}
    parts: list[str] = []
    for n in nodes.values():
        if n.parent is not None and (n.kind not in CONVERSATIONAL or n.record in results):
            children.setdefault(n.parent, []).append(n)
        if n.message_id in responses and n.side == leaf.side:
            live.add(n.record)
            parts.append(n.uuid)
    for part in parts:
        live.update(c.record for c in children.get(part, ()) if c.record in results)
    queue = [leaf.uuid]
    while queue:
        for child in children.get(queue.pop(), ()):
            if child.record not in live and child.kind not in CONVERSATIONAL:
                live.add(child.record)
                queue.append(child.uuid)
    root = chain[-1]
    return _Resumed(live, root.record if root.compact else -1, start.line)


class Tree:
    """The tree of one ``read`` call (or of a usage scan, records numbered by line), noted record by
    record, and the messages placed on it."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.through: dict[str, str | None] = {}  # progress record uuid -> the parent it stands for
        self.last_row: dict[bool, str] = {}  # by sidechain flag: the last row in file order
        # Per emitted message with a uuid: its index, records, conversation and sidechain flag.
        self.emitted: list[tuple[int, tuple[int, ...], int, bool]] = []
        self.result_records: set[int] = set()  # user records holding tool results
        self.linked = False  # whether any message record names its parent (another tool's log may not)
        # Per response: its index, line, sidechain flag, model, and whether it holds thinking.
        self.responses: list[tuple[int, int, bool, str | None, bool]] = []
        # Per response with usage: the usage, its records and sidechain flag (the reader's and a scan's).
        self.calls: list[tuple[Usage, Sequence[int], bool]] = []

    def resolved(self, parent: str | None) -> str | None:
        """``parent`` as the client links it: progress records are skipped."""
        while parent is not None and parent in self.through:
            parent = self.through[parent]
        return parent

    def note(self, i: int, line: int, data: Mapping[str, Any]) -> None:
        """Note record ``i`` in the tree (once per record: kept cheap)."""
        get = data.get
        uuid = get("uuid")
        if not isinstance(uuid, str):
            return
        kind = get("type")
        parent = get("parentUuid")
        if not isinstance(parent, str):
            parent = None
        elif parent in self.through:
            parent = self.resolved(parent)
        if kind == "progress":
            self.through[uuid] = parent
            return
        if not isinstance(kind, str) or kind not in _ROWS:
            return
        side = get("isSidechain") is True
        message_id, compact, snapshot = None, False, False
        if kind == "assistant":
            message = get("message")
            message_id = message.get("id") if isinstance(message, dict) else None
            message_id = message_id if isinstance(message_id, str) else None
        elif kind == "system":
            subtype = get("subtype")
            compact, snapshot = subtype == "compact_boundary", subtype == "file_snapshot"
        self.nodes[uuid] = _Node(i, line, uuid, parent, kind, side, message_id, compact)
        if parent is not None and kind in CONVERSATIONAL:
            self.linked = True
        if not snapshot:
            self.last_row[side] = uuid

    @property
    def side(self) -> bool:
        """The sidechain flag of the thread the client resumes (a subagent's own log: its sidechain)."""
        return False not in self.last_row

    @cached_property
    def resumed(self) -> _Resumed | None:
        """The chain the client resumes, once every record is noted; None without a tree to walk (no
        record names its parent, or a link names a record the file lacks): file order is all there is."""
        start = self.nodes.get(self.last_row.get(self.side, ""))
        if start is None or not self.linked:
            return None
        return _resumed_chain(self.nodes, start, self.result_records)

    def off_chain(self, records: Sequence[int], side: bool) -> bool:
        """Whether the message or response written in ``records`` (with sidechain flag ``side``) is on a
        branch the client abandoned: of the thread it resumes, after the chain's start, not on it."""
        chain = self.resumed
        return (
            chain is not None
            and side == self.side
            and bool(records)
            and records[0] > chain.after
            and not any(i in chain.live for i in records)
        )

    def items(self, index: int) -> Iterator[Boundary | Usage]:
        """The ``branches`` item (the messages on branches the client abandoned), the ``unsent_thinking``
        item, then every call's :meth:`usage`."""
        off = [(at, conv) for at, records, conv, is_side in self.emitted if self.off_chain(records, is_side)]
        gone = tuple(at for at, _ in off)
        if self.resumed is not None and off:  # (off_chain finds none without a resumed chain)
            yield Boundary(BRANCHES, self.resumed.line, index=index, conversation=off[0][1], abandoned=gone)
        yield from self.unsent_thinking(index, frozenset(gone))
        yield from self.usage()

    def usage(self) -> Iterator[Usage]:
        """Each call's usage, marked when its response is on a branch the client abandoned: billed, but
        in no context (:func:`ctxc.live.thread_usage`)."""
        for usage, records, side in self.calls:
            yield replace(usage, abandoned=True) if self.off_chain(records, side) else usage

    def unsent_thinking(self, index: int, gone: frozenset[int]) -> Iterator[Boundary]:
        """The ``unsent_thinking`` item. Claude Code resumes with the model of the last response of the
        resumed thread (when it still offers that model, which cannot be known here) and sends only the
        thinking of responses recorded with it (dates aside): another model's signatures would not verify."""
        thread = [r for r in self.responses if r[2] == self.side and r[0] not in gone]
        last = next((r for r in reversed(thread) if r[3] and r[3] != SYNTHETIC_MODEL), None)
        if last is None:
            return
        resume = signer(last[3])
        unsent = tuple(
            at
            for at, _, _, model, thinks in thread
            if thinks and model != SYNTHETIC_MODEL and signer(model) != resume
        )
        if unsent:
            yield Boundary(UNSENT_THINKING, last[1], index=index, unsent_thinking=unsent)
