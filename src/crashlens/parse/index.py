"""The fast path's first half: index a block of whole lines, with no parser state.

An index says where a block's trigger lines are (:class:`~crashlens.parse.scan.TriggerScanner`)
and, when some line carries a launcher prefix, which writer each line is (a key id per line).
It depends on the bytes alone, so the blocks of one big file are indexed in worker processes
while the parser, which keeps per-writer state across the whole file, takes them in order
(:meth:`crashlens.parse.fast.FastPath.take`).
"""

from __future__ import annotations

import importlib
import sys
from array import array
from dataclasses import dataclass
from typing import Any

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
    #: Offsets of the block's newlines, when indexing found them (a dense console's): the
    #: parser's process then need not scan the block for them again.
    ends: array[int] | None = None


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
    if lines > DENSE_LINES and prefixes.bracketed and prefixes.dense(block, 0, len(block)):
        dense = dense_ids(block, prefixes)
        if dense is not None:
            ids, key_table, ends = dense
            return BlockIndex(
                lines, tuple(starts), tuple(trigger_lines), ids, key_table, nccl, ends
            )
    keys = prefixes.keys(block, 0, len(block), lines, mark)
    table = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    ids = array("I", map(table.__getitem__, keys))
    return BlockIndex(lines, tuple(starts), tuple(trigger_lines), ids, tuple(table), nccl)


#: A combined console's blocks of more lines than this read their keys with numpy
#: (:func:`dense_ids`); numpy's import costs more than a small block's regex.
DENSE_LINES = 4096
#: The bytes at a line's start :func:`dense_ids` reads: a ``[rank123]: `` or ``[default7]:``
#: key fits; a longer one (or another prefix after it) is read by the regex, line by line.
KEY_WINDOW = 16
#: When more of a block's lines than this share need the regex, it reads them all.
DENSE_FALLBACK_SHARE = 0.1


def dense_ids(
    block: bytes, prefixes: PrefixKeys
) -> tuple[array[int], tuple[bytes, ...], array[int]] | None:
    """The key id of each line of ``block`` and the distinct keys (``b""``: no prefix), as
    :meth:`PrefixKeys.keys` reads them, for a combined console whose prefixes are the
    launchers' ``[name]:`` (``prefixes.bracketed``): vectorised over the first
    :data:`KEY_WINDOW` bytes of every line, about three times faster than a regex match per
    line. The lines it cannot settle in those bytes (a longer key, a second prefix after the
    first, kubectl's or Open MPI's tags) are read by the regex; None when too many are. The
    block's newline offsets come with them (:attr:`BlockIndex.ends`)."""
    np: Any = importlib.import_module("numpy")
    w = KEY_WINDOW
    arr = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(arr == 10)
    n = len(ends)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    # w bytes to read the key in, and three more: the ":" after "]", a space, a next "["
    padded = np.concatenate((arr, np.zeros(w + 3, dtype=np.uint8)))
    win = np.lib.stride_tricks.sliding_window_view(padded, w + 3)[starts]
    rows = np.arange(n)
    close = win[:, :w] == ord("]")
    has_close = close.any(axis=1)
    j = close.argmax(axis=1)  # the first "]"
    stop = (win[:, :w] == ord(":")) | (win[:, :w] == ord("\n"))
    first_stop = np.where(stop.any(axis=1), stop.argmax(axis=1), w)
    c1 = win[:, 1]
    name = ((c1 | 0x20) >= ord("a")) & ((c1 | 0x20) <= ord("z")) | (c1 == ord("_"))
    opens = win[:, 0] == ord("[")
    # "[name]:" with nothing but "]" and ":" ending the name (the bracket key's regex)
    key = opens & has_close & name & (first_stop == j + 1) & (win[rows, j + 1] == ord(":"))
    length = np.where(key, j + 2, 0)
    length += key & (win[rows, length] == ord(" "))
    # A line the window cannot settle: a key that may run past it, another prefix right after
    # the key, or a "[" line that may be kubectl's "[pod/...] ", Open MPI's "[1,0]<stdout>:" or
    # Determined's "[rank=3] "
    digit = (c1 >= ord("0")) & (c1 <= ord("9"))
    unsure = (key & ((length >= w) | (win[rows, length] == ord("[")))) | (
        opens
        & ~key
        & (digit | (c1 == ord("p")) | (win[:, 5] == ord("=")) | (~has_close & (first_stop == w)))
    )
    unsure_rows = np.flatnonzero(unsure)
    if len(unsure_rows) > DENSE_FALLBACK_SHARE * n:
        return None
    sure_rows = np.flatnonzero(~unsure)
    win = win[sure_rows, :w]  # a copy
    win[np.arange(w)[None, :] >= length[sure_rows, None]] = 0
    halves = win.view(np.uint64)
    digest = halves[:, 0] ^ (halves[:, 1] * np.uint64(0x9E3779B97F4A7C15))
    _, first, inverse = np.unique(digest, return_index=True, return_inverse=True)
    if not (halves[first[inverse]] == halves).all():
        return None  # two keys with one digest: the regex reads them
    at = sure_rows[first]
    spans = zip(starts[at].tolist(), length[at].tolist(), strict=True)
    index = {block[s : s + k]: i for i, (s, k) in enumerate(spans)}
    ids = np.empty(n, dtype=np.uint32)
    ids[sure_rows] = inverse
    seen = at.tolist()  # per key id, the first line with it
    for row in unsure_rows.tolist():
        k = prefixes.key_at(block, int(starts[row]), int(ends[row]) + 1)
        i = index.setdefault(k, len(index))
        if i == len(seen):
            seen.append(row)
        seen[i] = min(seen[i], row)
        ids[row] = i
    # number the keys in the order they first appear, as the regex's reading does
    order = np.argsort(np.asarray(seen))
    renumber = np.empty(len(order), dtype=np.uint32)
    renumber[order] = np.arange(len(order), dtype=np.uint32)
    table = list(index)
    ids = renumber[ids]
    table = [table[i] for i in order.tolist()]
    return array("I", ids.tobytes()), tuple(table), array("I", ends.astype(np.uint32).tobytes())


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
