"""ctxc: read, measure and compact LLM agent transcripts. The library API, without the CLI; its names
resolve lazily, so ``import ctxc`` loads no tokenizer encoding or Anthropic SDK until a call needs one."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ctxc._version import __version__

#: Where each name of the library API lives.
_MODULES = {
    "ctxc.formats": "load dump",
    "ctxc.analysis": "analyze",
    "ctxc.report": "Analysis",
    "ctxc.api": "count_tokens compact",
    "ctxc.agent": "compact_messages ContextManager",
    "ctxc.compaction.run": "CompactOptions CompactionResult",
    "ctxc.archive": "Archive",
    "ctxc.model": "Message Transcript Record TextBlock ThinkingBlock ToolUseBlock ToolResultBlock ImageBlock"
    " UnknownBlock",
    "ctxc.errors": "ExitCode CtxcError",
    "ctxc.record": "compact_record RecordSource RecordResult",
    "ctxc.composer": "PromptComposer Section",
    "ctxc.reminders": "ReminderRules ReminderRule TurnState",
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names.split()}

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
