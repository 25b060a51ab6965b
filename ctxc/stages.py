"""Compaction stages: the window shares where each begins, their names, and the stage of a share (the
one home of the thresholds)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from ctxc.errors import UsageError

#: Window shares at which stages 2, 3, 4 and 5 begin (the adaptive pipeline's defaults).
DEFAULT_THRESHOLDS: tuple[float, float, float, float] = (0.60, 0.70, 0.80, 0.90)
#: The same, as the CLI's ``--thresholds`` takes them.
DEFAULT_THRESHOLDS_TEXT = ",".join(f"{t:g}" for t in DEFAULT_THRESHOLDS)

STAGE_NAMES = {
    1: "none",
    2: "tool-output post-processing",
    3: "trim old messages",
    4: "summarize history",
    5: "essential summary only",
}


def stage_for(share: float, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> int:
    """The stage (1-5) a context filled to ``share`` of the window is in (thresholds ascending)."""
    return bisect_right(thresholds, share) + 1


def check_thresholds(thresholds: Sequence[float]) -> tuple[float, float, float, float]:
    """Four increasing window shares, or :class:`UsageError`."""
    if (
        len(thresholds) != 4
        or any(isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t < 1.5 for t in thresholds)
        or list(thresholds) != sorted(thresholds)
    ):
        raise UsageError("thresholds must be four increasing window shares, e.g. 0.6,0.7,0.8,0.9")
    return (thresholds[0], thresholds[1], thresholds[2], thresholds[3])
