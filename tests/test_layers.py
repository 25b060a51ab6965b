"""ctxc's imports only point down: no module imports one of a higher layer, and no imports go in a circle.

Every import counts, at module level or inside a function or an ``if TYPE_CHECKING`` block. The
layers are those of docs/architecture.md; a module takes the layer of the longest prefix listed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "ctxc"

#: Module prefix -> layer; higher layers may import lower ones and their own, never higher ones.
LAYERS: dict[str, int] = {
    # 0: no ctxc imports but each other
    "ctxc._version": 0,
    "ctxc.errors": 0,
    "ctxc.system": 0,
    "ctxc.terminal": 0,
    "ctxc.model": 0,
    # 1: formats and what reads, checks and stores transcripts
    "ctxc.reader": 1,
    "ctxc.validate": 1,
    "ctxc.live": 1,
    "ctxc.profiles": 1,
    "ctxc.pricing": 1,
    "ctxc.sessions": 1,
    "ctxc.repair": 1,
    "ctxc.reminders": 1,
    "ctxc.output": 1,
    "ctxc.sqlite_store": 1,
    "ctxc.archive_store": 1,
    "ctxc.formats": 1,
    "ctxc.convert": 1,
    # 2: counting and the stage thresholds
    "ctxc.tokens": 2,
    "ctxc.stages": 2,
    # 3: summarizers
    "ctxc.summarize": 3,
    # 4: compaction strategies and the compaction run
    "ctxc.compaction": 4,
    # 5: the search index and what an analysis is made of
    "ctxc.search": 5,
    "ctxc.report": 5,
    "ctxc.scancache": 5,
    "ctxc.usage_scan": 5,
    # 6: features built on all of that
    "ctxc.archive": 6,
    "ctxc.compaction.files": 6,
    "ctxc.analysis": 6,
    "ctxc.api": 6,
    "ctxc.record": 6,
    "ctxc.agent": 6,
    "ctxc.composer": 6,
    "ctxc.replay": 6,
    "ctxc.evaluate": 6,
    "ctxc.batch": 6,
    "ctxc.jobs": 6,
    "ctxc.check": 6,
    "ctxc.hooks": 6,
    # 7: the command line
    "ctxc.cli": 7,
    "ctxc.cliutil": 7,
    "ctxc.cli_batch": 7,
    "ctxc.commands": 7,
    "ctxc.render": 7,
    "ctxc.__main__": 7,
    # 8: the package facade, which nothing inside ctxc imports
    "ctxc": 8,
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str:
    """The ctxc module ``name`` lives in (a name imported from a module belongs to that module)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imported(module: str, path: Path) -> Iterator[str]:
    """Every ctxc module ``module`` imports, wherever the import statement is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from pkg import sub`` imports the submodule; ``from mod import name``, the module.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            if name == "ctxc" or name.startswith("ctxc."):
                target = _resolve(name)
                if target != module:
                    yield target


def _graph() -> dict[str, set[str]]:
    return {m: set(_imported(m, p)) for m, p in MODULES.items()}


def layer_of(module: str) -> int:
    name = module
    while name not in LAYERS:
        if "." not in name:
            raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")
        name = name.rpartition(".")[0]
    return LAYERS[name]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_no_import_points_up() -> None:
    graph = _graph()
    upward = [
        f"{a} (layer {layer_of(a)}) -> {b} (layer {layer_of(b)})"
        for a in sorted(graph)
        for b in sorted(graph[a])
        if layer_of(b) > layer_of(a)
    ]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    graph = _graph()
    report = []
    for component in _cycles(graph):
        inside = set(component)
        edges = [f"  {a} -> {b}" for a in component for b in sorted(graph[a]) if b in inside]
        report.append(f"cycle of {len(component)} modules:\n" + "\n".join(edges))
    assert not report, "\n".join(report)


def test_nothing_inside_ctxc_imports_the_facade() -> None:
    importers = sorted(m for m, targets in _graph().items() if "ctxc" in targets)
    assert not importers, f"import from ctxc._version or the defining module instead: {importers}"


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("import ctxc.errors\n", "ctxc.model", {"ctxc.errors"}),
        ("from ctxc.tokens import workers\n", "ctxc.x", {"ctxc.tokens.workers"}),
        ("from ctxc.tokens import get_tokenizer\n", "ctxc.x", {"ctxc.tokens"}),
        ("def f():\n    from ctxc import analysis\n", "ctxc.x", {"ctxc.analysis"}),
        ("if TYPE_CHECKING:\n    from ctxc.archive import Archive\n", "ctxc.x", {"ctxc.archive"}),
        ("from . import base\n", "ctxc.formats.chat", {"ctxc.formats.base"}),
        ("from .. import errors\n", "ctxc.formats.chat", {"ctxc.errors"}),
    ],
)
def test_the_walk_sees_every_kind_of_import(
    tmp_path: Path, source: str, module: str, expected: set[str]
) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert set(_imported(module, path)) == expected


def test_a_cycle_and_an_upward_import_are_caught() -> None:
    graph = {"ctxc.model": {"ctxc.cli"}, "ctxc.cli": {"ctxc.analysis"}, "ctxc.analysis": {"ctxc.model"}}
    assert _cycles(graph) == [["ctxc.analysis", "ctxc.cli", "ctxc.model"]]
    assert layer_of("ctxc.model") < layer_of("ctxc.cli")
