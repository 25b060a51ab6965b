"""offload: move huge tool results, and late in a session large tool inputs, into archive files. The
path, the first lines and a citation stay, so an agent with a file tool can read the rest back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from ctxc.compaction.base import (
    Action,
    CompactContext,
    StrategyResult,
    option,
    register,
    tool_calls,
    with_block,
)
from ctxc.compaction.postprocess import ToolCall, call_summary, clip, split_lines
from ctxc.model import Message, ToolResultBlock, ToolUseBlock

#: Tool input fields that carry file contents (Write/Edit/MultiEdit, str_replace_editor, apply_patch).
DEFAULT_INPUT_KEYS: tuple[str, ...] = (
    *("content", "new_string", "old_string", "newText", "oldText", "new_str", "old_str", "file_text"),
    *("patch", "input", "edits"),
)
#: Tools whose whole input is a patch string (Codex's freeform ``apply_patch``).
_PATCH_TOOLS = frozenset({"apply_patch", "applypatch", "patch"})
#: A character is at most 4 UTF-8 bytes, each at most a token: shorter strings are never tokenized.
_MAX_TOKENS_PER_CHAR = 4


@dataclass(frozen=True)
class OffloadConfig:
    threshold_tokens: int = option(20_000, "tool results over this many tokens go to an archive file", min=1)
    preview_lines: int = option(10, "first lines of an offloaded result kept in place", min=0, max=10_000)
    input_offload_share: float = option(
        0.85, "window share above which old large tool inputs are offloaded too", min=0.0, max=100.0
    )
    input_threshold_tokens: int = option(
        2_000, "tool input strings over this many tokens are offloaded", min=1
    )
    input_keys: tuple[str, ...] = option(DEFAULT_INPUT_KEYS, "tool input fields holding file contents")


#: Offloaded blobs for the search index: (digest, message index, tool name).
Notes = list[tuple[str, int, str]]


@dataclass(frozen=True, slots=True)
class Blob:
    digest: str
    path: Path


@register
class Offload:
    name: ClassVar[str] = "offload"
    uses_summarizer: ClassVar[bool] = False
    best_effort: ClassVar[bool] = False
    description: ClassVar[str] = (
        "Move tool results over 20k tokens (and, above 85% of the window, large old tool inputs) "
        "into archive files, leaving the path and a preview"
    )
    Config: ClassVar[type[Any]] = OffloadConfig

    def compact(self, messages: Sequence[Message], ctx: CompactContext) -> StrategyResult:
        if ctx.archive is None:  # nowhere to move an output to: a pointer would name a file that is not there
            return StrategyResult(tuple(messages))
        cfg: OffloadConfig = ctx.config(self)
        msgs = list(messages)
        movable = ctx.editable(msgs)
        calls = tool_calls(msgs)
        actions: list[Action] = []
        notes: Notes = []  # for the search index, written at once at the end

        def swap(pos: int, bi: int, block: ToolResultBlock | ToolUseBlock, note: str) -> None:
            action = ctx.shrink(msgs, pos, with_block(msgs[pos], bi, block), self.name, "offload", note)
            if action is not None:
                actions.append(action)

        pointers: list[tuple[int, int, ToolResultBlock, str]] = []
        for pos in movable:
            for bi, b in enumerate(msgs[pos].blocks):
                if not isinstance(b, ToolResultBlock) or not _may_exceed(b.text, cfg.threshold_tokens):
                    continue
                tokens = ctx.ledger.count_text(b.text)
                if tokens <= cfg.threshold_tokens:
                    continue
                use = calls.get(b.tool_use_id)
                call = ToolCall(use.name, use.input) if use else ToolCall(b.name or "")
                blob = store_blob(ctx, b.text, message=msgs[pos].index, tool=call.name, notes=notes)
                text = result_pointer(
                    b.text, call, blob, ctx.cite(msgs[pos].index), tokens, cfg.preview_lines
                )
                note = f"{call.name or 'tool'} result → {blob.digest[:12]}"
                pointers.append((pos, bi, replace(b, text=text), note))
        ctx.ledger.counter.count([block.text for _, _, block, _ in pointers])  # one count, not one each
        for pos, bi, block, note in pointers:
            swap(pos, bi, block, note)

        if ctx.window > 0 and ctx.ledger.total(msgs) / ctx.window > cfg.input_offload_share:
            keys = frozenset(cfg.input_keys)
            for pos in movable:
                for bi, b in enumerate(msgs[pos].blocks):
                    if not isinstance(b, ToolUseBlock):
                        continue
                    index = msgs[pos].index
                    new_input, moved = _offload_input(b, keys, cfg.input_threshold_tokens, ctx, index, notes)
                    if moved:
                        swap(pos, bi, replace(b, input=new_input), f"{b.name} input {', '.join(moved)}")
        if notes:
            ctx.archive.index_blobs(ctx.archive_id, notes)
        return StrategyResult(tuple(msgs), tuple(actions))


def store_blob(ctx: CompactContext, text: str, *, message: int, tool: str, notes: Notes) -> Blob:
    """Write ``text`` to the run's archive (unsynced: the original is; a dry run's writes nothing), noting
    ``(digest, message, tool)`` for the search index."""
    archive = ctx.archive
    assert archive is not None  # offload runs only with one
    digest = archive.store(text.encode("utf-8"), sync=False)
    notes.append((digest, message, tool))
    # Absolute: the agent reading it back may work in another directory than this run.
    return Blob(digest, archive.object_path(digest).absolute())


def result_pointer(text: str, call: ToolCall, blob: Blob, cite: str, tokens: int, preview_lines: int) -> str:
    """The text an offloaded result becomes: where it is, how big it was, and its first lines."""
    lines = split_lines(text)
    summary = call_summary(call)
    about = f" of {summary}" if summary else ""
    head = (
        f"[ctxc offloaded the {call.name or 'tool'} result{about} ({tokens:,} tokens, {len(lines):,} "
        f"line{'s' if len(lines) != 1 else ''}) "
        f"to {blob.path}; {cite}]"
    )
    preview = [clip(x) for x in lines[:preview_lines]]
    if preview:
        preview.insert(0, f"First {len(preview)} line{'s' if len(preview) != 1 else ''}:")
    rest = len(lines) - preview_lines
    if rest > 0:
        preview.append(f"… {rest:,} more line{'s' if rest != 1 else ''} in the offloaded file …")
    return "\n".join([head, *preview])


def _offload_input(
    block: ToolUseBlock, keys: frozenset[str], threshold: int, ctx: CompactContext, message: int, notes: Notes
) -> tuple[Any, list[str]]:
    """``block.input`` with every large string under one of ``keys`` replaced by a pointer, and where."""
    moved: list[str] = []

    def offloaded(value: str, label: str) -> str:
        """A pointer to the archive file ``value`` went to, if it is over the threshold; else ``value``."""
        tokens = ctx.ledger.count_text(value) if _may_exceed(value, threshold) else 0
        if tokens <= threshold:
            return value
        moved.append(label)
        blob = store_blob(ctx, value, message=message, tool=block.name, notes=notes)
        return f"[ctxc offloaded {tokens} tokens to {blob.path}; {ctx.cite(message)}]"

    def walk(value: Any, key: str | None, path: str) -> Any:
        if isinstance(value, str):
            return offloaded(value, path) if key in keys else value
        if isinstance(value, Mapping):
            return {
                k: walk(v, k if isinstance(k, str) else None, f"{path}.{k}" if path else str(k))
                for k, v in value.items()
            }
        if isinstance(value, list):
            # Items of a list inherit its key: MultiEdit's ``edits`` hold dicts, a patch list holds strings.
            return [walk(v, key, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    inp = block.input
    if not isinstance(inp, str):
        return walk(inp, None, ""), moved
    tool = block.name.rsplit("__", 1)[-1].lower()  # an MCP server's tool by its own name
    patch = tool in _PATCH_TOOLS or inp.lstrip().startswith("*** Begin Patch")
    return (offloaded(inp, "patch") if patch else inp), moved


def _may_exceed(text: str, threshold: int) -> bool:
    return len(text) * _MAX_TOKENS_PER_CHAR > threshold
