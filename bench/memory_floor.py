"""What a read transcript holds in memory: the floor under the peak of ``ctxc compact`` (issue 19, item 8).

    python bench/memory_floor.py FILE            # e.g. a log written by bench/gen_transcript.py

Reads FILE with ``ctxc.formats.load`` in this process as ``compact`` does, its lines copied into a
spool (in a temporary folder here, the archive there) that records read their bytes back from (no
counting, no strategy, no writing), and prints the RSS after the imports ``compact`` needs and after
the reading, then what the transcript holds, each object counted once, in the order it is reached:
the bytes records hold (``Record.raw`` of the lines not kept in the spool); the messages' blocks (the
texts strategies read and count); the JSON the messages keep beyond their blocks (``Message.raw``:
envelope fields, ``toolUseResult``...); the JSON only the records keep (``Record.data`` beyond all
that); the message and record objects themselves. Each is also given as a multiple of the file's size.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


class Sizer:
    """``sys.getsizeof`` summed over JSON values and dataclasses, each object counted once."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def __call__(self, obj: Any) -> int:
        if id(obj) in self.seen:
            return 0
        self.seen.add(id(obj))
        size = sys.getsizeof(obj)
        if isinstance(obj, dict):
            size += sum(self(k) + self(v) for k, v in obj.items())
        elif isinstance(obj, list | tuple):
            size += sum(self(v) for v in obj)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            size += sum(self(getattr(obj, f.name)) for f in dataclasses.fields(obj))
        return size

    def total(self, objs: Iterable[Any]) -> int:
        return sum(self(o) for o in objs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path)
    args = ap.parse_args()
    import ctxc.compaction.run  # noqa: F401  (the imports compact pays for)
    from ctxc.formats import load
    from ctxc.reader import ReadOptions, Spool

    size_mib = args.file.stat().st_size / 2**20
    before = rss_mib()
    with tempfile.TemporaryDirectory() as tmp, contextlib.closing(Spool(Path(tmp) / "spool")) as spool:
        t = load(str(args.file), options=ReadOptions(spool=spool))
        after = rss_mib()
    sizer = Sizer()
    kept = sum(r.kept for r in t.records)
    parts = [
        (f"Record.raw held ({kept:,} kept)", sizer.total(r.raw for r in t.records if not r.kept)),
        ("blocks (texts, inputs)", sizer.total(m.blocks for m in t.messages)),
        ("Message.raw beyond blocks", sizer.total(m.raw for m in t.messages)),
        ("Record.data beyond both", sizer.total(r.data for r in t.records)),
        ("Message, Record objects", sizer.total([*t.messages, *t.records])),
    ]
    print(f"{args.file.name}: {size_mib:.1f} MiB, {len(t.records):,} records, {len(t.messages):,} messages")
    print(f"{'RSS after imports':28} {before:8.1f} MiB  {before / size_mib:5.2f}x")
    print(f"{'RSS after load':28} {after:8.1f} MiB  {after / size_mib:5.2f}x")
    for label, n in parts:
        print(f"{label:28} {n / 2**20:8.1f} MiB  {n / 2**20 / size_mib:5.2f}x")


if __name__ == "__main__":
    main()
