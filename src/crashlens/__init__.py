"""crashlens: find the root cause of a crashed distributed training job from its logs."""

from __future__ import annotations

from typing import Any

from crashlens._version import __version__
from crashlens.api import analyze
from crashlens.report import Report

__all__ = ["Report", "__version__", "analyze", "triage"]


def __getattr__(name: str) -> Any:
    """``crashlens.triage`` (fleet triage), imported on first use: ``import crashlens`` stays
    free of the fleet extra's packages."""
    if name == "triage":
        from crashlens.fleet import triage

        return triage
    raise AttributeError(f"module 'crashlens' has no attribute '{name}'")
