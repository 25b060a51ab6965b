"""Facts about the machine that several parts of ctxc size their work by, and where it keeps caches."""

from __future__ import annotations

import functools
import os
from pathlib import Path


@functools.cache
def cpu_count() -> int:
    """Cores this process may use: the affinity mask (a container's or ``taskset``'s share), not the
    machine's total. Asked once per process; counting asks for every batch."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cache_dir() -> Path:
    """Where ctxc keeps what it can recompute (token counts, scans, the parsed rank table, summaries):
    ``$CTXC_CACHE_DIR``, else ``$XDG_CACHE_HOME/ctxc``, else ``~/.cache/ctxc``."""
    base = os.environ.get("CTXC_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ctxc"


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to something other than "", 0, false or no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")
