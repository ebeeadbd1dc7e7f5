"""Ingest stage: find input files, decode them, and attribute lines to ranks and hosts."""

from crashlens.ingest.discover import discover
from crashlens.ingest.read import iter_lines, open_text

__all__ = ["discover", "iter_lines", "open_text"]
