"""crashlens: find the root cause of a crashed distributed training job from its logs."""

from crashlens._version import __version__
from crashlens.api import analyze
from crashlens.report import Report

__all__ = ["Report", "__version__", "analyze"]
