"""JSON output: the stable contract other tools parse (see docs/json.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crashlens.report import Report


def render(report: Report, **_: Any) -> str:
    """The report as pretty-printed JSON (keys stable, ``schema_version`` first)."""
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"
