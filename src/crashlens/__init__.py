"""crashlens: find the root cause of a crashed distributed training job from its logs."""

__version__ = "0.1.0"

from crashlens.api import analyze
from crashlens.report import Report

__all__ = ["Report", "__version__", "analyze"]
