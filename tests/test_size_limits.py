"""Issue 19's limits on the code's shape: no module over 500 lines, no function over 80 (decorators
included), so that each reads in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

CTXC = Path(__file__).resolve().parents[1] / "ctxc"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(CTXC.rglob("*.py"))


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(CTXC)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, long


def test_no_function_is_over_80_lines() -> None:
    long: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                assert node.end_lineno is not None
                if (n := node.end_lineno - start + 1) > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(CTXC)}:{node.name}"] = n
    assert not long, long
