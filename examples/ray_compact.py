"""Compact a conversation dataset with Ray Data: ``ctxc.compact_record`` mapped over its lines.

    pip install 'ctxc[ray]'
    python examples/ray_compact.py dataset.jsonl compacted.jsonl --target-ratio 0.3 --window 10000
    python examples/ray_compact.py dataset.jsonl compacted.jsonl --as-file     # cite the file, like the CLI

Each line of a dataset (``{"messages": [...]}``) is one conversation and is compacted on its own, so
the job is a plain ``map``: Ray spreads it over every core of a machine or a cluster. Each record runs
the per-conversation kernel of ``ctxc compact`` (``ctxc.compaction.kernel.compact_conversation``).
Each result row carries the compacted line, the tokens before and after, and the status (``ok``,
``skipped`` for a line that is not a conversation, ``error`` with the message ctxc would print).

By default every record cites itself (``ctxc archive <sha256 of the line> messages 0-7``). With
``--as-file`` the records cite the dataset file as ``ctxc compact dataset.jsonl`` does, and the output
is byte for byte what that command writes; this needs one pass over the file on the driver first
(:func:`ctxc.record.record_sources`), to number the messages across the file.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any

from ctxc.compaction.run import CompactOptions
from ctxc.record import compact_row, record_sources


def compact_dataset(
    path: str, options: CompactOptions, *, as_file: bool = False, num_cpus: int | None = None
) -> list[dict[str, Any]]:
    """Result rows (see :meth:`ctxc.record.RecordResult.to_row`), one per line of ``path``, in order."""
    import ray

    if not ray.is_initialized():
        # A local Ray on loopback only, no dashboard: nothing listens beyond this machine.
        ray.init(
            num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False
        )
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    if as_file:
        rows = []
        with open(path, encoding="utf-8") as handle:
            for text, source in zip(handle.read().splitlines(), record_sources(path), strict=True):
                row: dict[str, Any] = {"text": text}
                if source is not None:
                    row.update(archive_id=source.archive_id, first_index=source.first_index, line=source.line)
                rows.append(row)
        ds: Any = ray.data.from_items(rows)
    else:
        ds = ray.data.read_text(path)
    rows_out: list[dict[str, Any]] = ds.map(functools.partial(compact_row, options=options)).take_all()
    return rows_out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("output")
    ap.add_argument("--target-ratio", type=float)
    ap.add_argument("--target-tokens", type=int)
    ap.add_argument("--window", type=int)
    ap.add_argument("--strategy", default="adaptive")
    ap.add_argument("--allow-over", action="store_true")
    ap.add_argument("--as-file", action="store_true", help="cite the dataset file, as `ctxc compact` does")
    args = ap.parse_args(argv)
    try:
        import ray  # noqa: F401  (checked before any work: a traceback would bury the fix)
    except ImportError:
        ap.exit(2, f"{ap.prog}: error: this example needs Ray: pip install 'ctxc[ray]'\n")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    options = CompactOptions(
        strategy=args.strategy,
        target_ratio=args.target_ratio,
        target_tokens=args.target_tokens,
        window=args.window,
        allow_over=args.allow_over,
    )
    rows = compact_dataset(args.dataset, options, as_file=args.as_file)
    failed = [r for r in rows if r["status"] == "error"]
    with open(args.output, "w", encoding="utf-8") as out:
        for r in rows:
            if r["line"] is not None:
                out.write(r["line"] + "\n")
    before = sum(r["tokens_before"] for r in rows)
    after = sum(r["tokens_after"] for r in rows)
    print(f"{len(rows)} records: {before:,} -> {after:,} tokens; {len(failed)} failed", file=sys.stderr)
    for r in failed:
        print(f"error: {r['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
