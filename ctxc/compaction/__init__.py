"""Compaction: strategies behind one Protocol, registered by name, and the run that applies them.
Adding a strategy is one module plus its name in :data:`STRATEGY_MODULES`."""

from __future__ import annotations

import importlib

from ctxc.compaction.base import (
    Action,
    CompactContext,
    Strategy,
    StrategyResult,
    get_strategy,
    register,
    strategies,
)

__all__ = ["Action", "CompactContext", "Strategy", "StrategyResult", "get_strategy", "register", "strategies"]

# Importing a strategy module registers it. Least lossy first: the order ``ctxc strategies`` lists.
STRATEGY_MODULES = (
    "dedupe",
    "thinking",
    "images",
    "offload",
    "mask",
    "fifo",
    "selective",
    "recursive",
    "hierarchical",
    "adaptive",
)
for _module in STRATEGY_MODULES:
    importlib.import_module(f"ctxc.compaction.{_module}")
