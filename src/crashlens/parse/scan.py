"""The fast path: find the few lines that need Python with one multi-literal pass over bytes.

Nearly every line of a training log is a step line, a progress bar or NCCL INFO noise that no
rule, traceback or launcher summary cares about. One scan for the union of the rules' literal
anchors and the structural triggers (traceback headers, ``ChildFailedError`` summaries) over
each raw block finds the lines that matter; everything between them is only counted.

RE2 (``google-re2``) runs the literal alternation as a DFA at hundreds of MB/s; the stdlib
engine is the fallback when it is not installed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from crashlens import facts
from crashlens.ingest.read import Readable

try:  # pragma: no cover - exercised in whichever environment runs the tests
    import re2 as _re2
except ImportError:  # pragma: no cover
    _re2 = None

#: Lines that start multi-line state even when no detector literal is on them.
STRUCTURAL_TRIGGERS = (
    "Traceback (most recent call last)",
    # A frame whose traceback header a paste lost; a final exception line on its own.
    'File "',
    "Error: ",
    "Exception: ",
    "Fatal Python error: ",
    "Root Cause (first observed failure):",
    "Failures:",
    "global_rank_mapping=",
    *facts.TRIGGERS,
)
BLOCK = 2 << 20
#: A line is cut to this many bytes before decoding (the text limit is applied after).
MAX_LINE_BYTES = 64 * 1024
#: A line still unterminated after this many bytes is truncated and the rest dropped.
MAX_CARRY = 1 << 20


class TriggerScanner:
    """Start offsets of the lines of a block that contain any trigger literal."""

    def __init__(self, literals: Iterable[str], literals_ci: Iterable[str] = ()) -> None:
        parts = [re.escape(lit) for lit in sorted(set(literals), key=len, reverse=True)]
        parts += [f"(?i:{re.escape(lit)})" for lit in sorted(set(literals_ci))]
        pattern = "|".join(parts).encode("utf-8")
        self.pattern: Any = (_re2 if _re2 is not None else re).compile(pattern)

    def line_starts(self, block: bytes) -> list[int]:
        """Sorted, unique start offsets of the lines holding a trigger."""
        starts: list[int] = []
        last = -1
        for m in self.pattern.finditer(block):
            start = block.rfind(b"\n", 0, m.start()) + 1
            if start != last:
                starts.append(start)
                last = start
        return starts


def iter_blocks(stream: Readable, head: bytes = b"") -> Iterator[bytes]:
    """Yield blocks of whole lines (each ends with ``\\n``) from ``head`` then ``stream``.

    A line with no newline after :data:`MAX_CARRY` bytes is cut to :data:`MAX_LINE_BYTES` and
    the rest of it skipped, so one 100 MB line costs one bounded buffer.
    """
    read = getattr(stream, "read1", stream.read)
    carry = b""
    dropping = False
    pending = head
    while True:
        chunk = pending or read(BLOCK)
        pending = b""
        if not chunk:
            break
        if dropping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk = chunk[nl + 1 :]
            dropping = False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_CARRY:
                yield data[:MAX_LINE_BYTES] + b"\n"
                carry, dropping = b"", True
            else:
                carry = data
            continue
        yield data[: cut + 1]
        carry = data[cut + 1 :]
    if carry and not dropping:
        yield carry + b"\n"
