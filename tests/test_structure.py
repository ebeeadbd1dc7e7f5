"""The code stays readable: no function body over 80 lines (a CLI command's option
declarations, its signature, do not count)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "crashlens"
MAX_BODY = 80


def test_no_function_body_over_80_lines() -> None:
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                body = (node.end_lineno or node.lineno) - node.body[0].lineno + 1
                if body > MAX_BODY:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({body} lines)")
    assert not long, "cut these into named steps:\n" + "\n".join(long)
