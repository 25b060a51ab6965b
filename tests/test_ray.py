"""``examples/ray_compact.py``: compact_record mapped over a dataset on a local Ray, checked against the
CLI. Skipped when ray is not installed (it is the optional extra ``ctxc[ray]``, not a test dependency)."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, SAMPLES

ray = pytest.importorskip("ray")

from ctxc.cli import main  # noqa: E402
from ctxc.compaction.run import CompactOptions  # noqa: E402
from ctxc.record import compact_record  # noqa: E402

DATASET = SAMPLES / "dataset.jsonl"
OPTIONS = CompactOptions(target_ratio=0.3, window=10_000, allow_over=True)
# What a citation names: the archive id, and message numbers (within the record, or across the file).
CITATION = re.compile(r"ctxc archive [0-9a-f]{12}|messages \d+(?:-\d+)?")


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("ray_compact", ROOT / "examples" / "ray_compact.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def cli_output(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    tmp = tmp_path_factory.mktemp("cli")
    out = tmp / "out.jsonl"
    with pytest.raises(SystemExit) as exc:
        main(["compact", str(DATASET), "-o", str(out), "--archive", str(tmp / "a"), "-q",
              "--target-ratio", "0.3", "--window", "10000", "--allow-over"])  # fmt: skip
    assert exc.value.code == 0
    return out.read_text(encoding="utf-8").splitlines()


def test_ray_as_file_equals_the_cli_byte_for_byte(local_ray: None, cli_output: list[str]) -> None:
    rows = load_example().compact_dataset(str(DATASET), OPTIONS, as_file=True)
    assert [r["status"] for r in rows] == ["ok"] * len(cli_output)
    assert [r["line"] for r in rows] == cli_output


def test_ray_read_text_map_equals_local_records_and_the_cli(local_ray: None, cli_output: list[str]) -> None:
    rows = load_example().compact_dataset(str(DATASET), OPTIONS)
    lines = DATASET.read_text(encoding="utf-8").splitlines()
    assert rows == [compact_record(line, OPTIONS).to_row() for line in lines]
    # Self-cited records differ from the file-cited CLI output only in the ids and numbers they cite.
    assert [CITATION.sub("<cite>", r["line"]) for r in rows] == [
        CITATION.sub("<cite>", x) for x in cli_output
    ]
    assert sum(r["tokens_after"] for r in rows) < sum(r["tokens_before"] for r in rows)


def test_example_script_end_to_end(local_ray: None, cli_output: list[str], tmp_path: Path) -> None:
    out = tmp_path / "ray.jsonl"
    args = [str(DATASET), str(out), "--target-ratio", "0.3", "--window", "10000", "--allow-over", "--as-file"]
    assert load_example().main(args) == 0
    assert out.read_text(encoding="utf-8").splitlines() == cli_output
