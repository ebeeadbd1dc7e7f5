"""The JSON Schema of ``--format json`` (``schema.json``), shipped inside the package.

Loaded through :mod:`importlib.resources` so it works from a wheel, a zip or a checkout alike;
consumers can validate a report with any draft 2020-12 validator.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, cast

SCHEMA_FILE = "schema.json"


@cache
def load_schema() -> dict[str, Any]:
    """The report JSON Schema as a dict (parsed once)."""
    text = resources.files("crashlens.render").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return cast(dict[str, Any], json.loads(text))
