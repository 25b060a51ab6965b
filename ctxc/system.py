"""Facts about the machine that several parts of ctxc size their work by."""

from __future__ import annotations

import functools
import os


@functools.cache
def cpu_count() -> int:
    """Cores this process may use: the affinity mask (a container's or ``taskset``'s share), not the
    machine's total. Asked once per process; counting asks for every batch."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
