"""ctxc: read, measure and compact LLM agent transcripts.

The library API (``load``, ``dump``, ``analyze``, ``count_tokens``, ``compact``, ``compact_messages``, the
model classes) is importable from here without the CLI. Names resolve lazily, so ``import ctxc`` costs
almost nothing: tokenizer encodings and the Anthropic SDK load only when a call needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ctxc._version import __version__

_EXPORTS = {
    "load": "ctxc.formats",
    "dump": "ctxc.formats",
    "analyze": "ctxc.analysis",
    "Analysis": "ctxc.report",
    "count_tokens": "ctxc.api",
    "compact": "ctxc.api",
    "compact_messages": "ctxc.agent",
    "CompactOptions": "ctxc.compaction.run",
    "CompactionResult": "ctxc.compaction.run",
    "Archive": "ctxc.archive",
    "Message": "ctxc.model",
    "Transcript": "ctxc.model",
    "Record": "ctxc.model",
    "TextBlock": "ctxc.model",
    "ThinkingBlock": "ctxc.model",
    "ToolUseBlock": "ctxc.model",
    "ToolResultBlock": "ctxc.model",
    "ImageBlock": "ctxc.model",
    "UnknownBlock": "ctxc.model",
    "ExitCode": "ctxc.errors",
    "compact_record": "ctxc.record",
    "RecordSource": "ctxc.record",
    "RecordResult": "ctxc.record",
    "CtxcError": "ctxc.errors",
    "ContextManager": "ctxc.agent",
    "PromptComposer": "ctxc.composer",
    "Section": "ctxc.composer",
    "ReminderRules": "ctxc.reminders",
    "ReminderRule": "ctxc.reminders",
    "TurnState": "ctxc.reminders",
}

if TYPE_CHECKING:
    from ctxc.agent import ContextManager, compact_messages
    from ctxc.analysis import analyze
    from ctxc.api import compact, count_tokens
    from ctxc.archive import Archive
    from ctxc.compaction.run import CompactionResult, CompactOptions
    from ctxc.composer import PromptComposer, Section
    from ctxc.errors import CtxcError, ExitCode
    from ctxc.formats import dump, load
    from ctxc.model import (
        ImageBlock,
        Message,
        Record,
        TextBlock,
        ThinkingBlock,
        ToolResultBlock,
        ToolUseBlock,
        Transcript,
        UnknownBlock,
    )
    from ctxc.record import RecordResult, RecordSource, compact_record
    from ctxc.reminders import ReminderRule, ReminderRules, TurnState
    from ctxc.report import Analysis


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxc' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "Analysis",
    "Archive",
    "CompactOptions",
    "CompactionResult",
    "ContextManager",
    "CtxcError",
    "ExitCode",
    "ImageBlock",
    "Message",
    "PromptComposer",
    "Record",
    "RecordResult",
    "RecordSource",
    "ReminderRule",
    "ReminderRules",
    "Section",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Transcript",
    "TurnState",
    "UnknownBlock",
    "__version__",
    "analyze",
    "compact",
    "compact_messages",
    "compact_record",
    "count_tokens",
    "dump",
    "load",
]
