"""The fast path's first half: index a block of whole lines, with no parser state.

An index says where a block's trigger lines are (:class:`~crashlens.parse.scan.TriggerScanner`)
and, when some line carries a launcher prefix, which writer each line is (a key id per line).
It depends on the bytes alone, so the blocks of one big file are indexed in worker processes
while the parser, which keeps per-writer state across the whole file, takes them in order
(:meth:`crashlens.parse.fast.FastPath.take`).
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass

from crashlens.ingest.prefixes import PREFIX_MARKER, PrefixKeys
from crashlens.parse.scan import TriggerScanner


@dataclass(frozen=True, slots=True)
class BlockIndex:
    """Where a block's trigger lines are, and each line's writer when lines are prefixed."""

    #: Newlines in the block (every block ends with one).
    lines: int
    #: Byte offsets of the lines holding a trigger literal, ascending.
    triggers: tuple[int, ...]
    #: Their line indexes in the block (0-based), in the same order.
    trigger_lines: tuple[int, ...]
    #: Per line, an index into ``key_table``; None when no line has a prefix (one writer).
    keys: array[int] | None = None
    #: The distinct prefixes as raw bytes (``b""``: no prefix).
    key_table: tuple[bytes, ...] = ()
    #: Where the block's first NCCL line's `` NCCL `` is (-1: it has none; None: not known).
    nccl: int | None = None


#: What the scanner reports the first of, besides the triggers (see :func:`scanner_markers`).
NCCL_MARK = b" NCCL "
#: What :data:`~crashlens.ingest.prefixes.PREFIX_MARKER` matches (a newline, then ``[``).
PREFIX_MARK = b"\n["


def find_nccl(block: bytes, start: int, end: int, first: int | None) -> int:
    """Where the first `` NCCL `` of ``block[start:end]`` is (-1: none), knowing where the
    block's first one is (:attr:`BlockIndex.nccl`; None: not known)."""
    if first is not None and (first < 0 or first >= end):
        return -1
    return block.find(NCCL_MARK, max(start, first or 0), end)


def scanner_markers() -> tuple[bytes, ...]:
    """The markers of the fast path's scanner (:attr:`TriggerScanner.markers`), in the order
    :func:`index_block` reads them: the first NCCL line (its pid, see
    :meth:`~crashlens.parse.state.Stream.learn_pid`), a line that may start with a launcher
    prefix (:data:`~crashlens.ingest.prefixes.PREFIX_MARKER`)."""
    return (NCCL_MARK, PREFIX_MARKER)


def index_block(block: bytes, scanner: TriggerScanner, prefixes: PrefixKeys) -> BlockIndex:
    """Index ``block`` (whole lines, ending with a newline)."""
    starts, marks = scanner.scan(block)
    nccl = mark = None
    if marks is not None and len(marks) == 2:
        nccl = marks[0] - len(NCCL_MARK) if marks[0] >= 0 else -1
        mark = marks[1] - len(PREFIX_MARK) if marks[1] >= 0 else -1
    lines, trigger_lines = line_numbers(block, starts)
    if prefixes.single(block, 0, len(block), mark):
        return BlockIndex(lines, tuple(starts), tuple(trigger_lines), nccl=nccl)
    keys = prefixes.keys(block, 0, len(block), lines, mark)
    table = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    ids = array("I", map(table.__getitem__, keys))
    return BlockIndex(lines, tuple(starts), tuple(trigger_lines), ids, tuple(table), nccl)


#: Blocks this big count their lines with numpy once it is loaded (a big interleaved block
#: loads it, :mod:`crashlens.parse.keyed`): about five times faster than ``bytes.count``, which
#: tests each byte in turn; numpy is never imported for this alone.
NUMPY_BYTES = 256 * 1024
#: Up to this many triggers, the lines before each are counted range by range.
FEW_TRIGGERS = 64


def line_numbers(block: bytes, starts: list[int]) -> tuple[int, list[int]]:
    """The number of newlines in ``block`` and the line index of each offset in ``starts``
    (ascending line starts)."""
    np = sys.modules.get("numpy")
    if np is not None and len(block) >= NUMPY_BYTES:
        newline = np.frombuffer(block, dtype=np.uint8) == 10
        if len(starts) > FEW_TRIGGERS:
            ends = np.flatnonzero(newline)
            found: list[int] = np.searchsorted(ends, starts).tolist()
            return len(ends), found
        counted = np.count_nonzero
    else:
        newline, counted = None, None
    out = []
    line, prev = 0, 0
    count = block.count
    for start in starts:
        line += int(counted(newline[prev:start])) if counted else count(b"\n", prev, start)
        out.append(line)
        prev = start
    return line + (int(counted(newline[prev:])) if counted else count(b"\n", prev)), out
