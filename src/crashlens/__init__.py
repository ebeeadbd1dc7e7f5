"""crashlens: find the root cause of a crashed distributed training job from its logs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from crashlens._version import __version__

if TYPE_CHECKING:
    from crashlens.api import analyze
    from crashlens.fleet import triage
    from crashlens.report import Report

__all__ = ["Report", "__version__", "analyze", "triage"]

#: Names of the package, from the modules that define them, imported on first use: the
#: command line imports only what its command needs, and ``crashlens.triage`` (fleet triage)
#: keeps ``import crashlens`` free of the fleet extra's packages.
_LAZY = {"analyze": "crashlens.api", "Report": "crashlens.report", "triage": "crashlens.fleet"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'crashlens' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
