"""A demultiplexed block's per-line writer ids, for the fast path (:mod:`crashlens.parse.fast`).

The per-line work of an interleaved block is array arithmetic over its key ids: counts per
writer, the lines of the writers that want them, each writer's last quiet lines. A big block
does it with numpy; a small one (a 1 KB job's whole log) with lists, which give the same
answers without importing numpy (tests/test_startup.py runs both on the same blocks).
"""

from __future__ import annotations

import importlib
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

#: Blocks of up to this many lines use lists; bigger ones numpy.
SMALL_LINES = 4096


def keys_type(lines: int) -> type[BlockKeys]:
    """The :class:`BlockKeys` kind for a block of ``lines`` lines: lists up to
    :data:`SMALL_LINES`, numpy past it."""
    return ListKeys if lines <= SMALL_LINES else NumpyKeys


class BlockKeys:
    """Per line of a block: its writer's key id, and whether it was skimmed (accounted for
    without being parsed)."""

    def __init__(
        self,
        keys: array[int],
        lines: int,
        block: bytes,
        writers: int,
        ring: int,
        ends: Sequence[int] | None = None,
    ) -> None:
        self.block = block
        self.writers = writers
        self.ring = ring
        self._ends = ends
        self._load(keys, lines)

    def _load(self, keys: array[int], lines: int) -> None:
        """Take the ``lines`` lines' key ids, none skimmed yet."""
        raise NotImplementedError

    def counts(self, line: int, stop: int) -> list[int]:
        """Lines of each key id among lines ``[line, stop)``."""
        raise NotImplementedError

    def wanted(self, line: int, stop: int, wanting: set[int]) -> list[int]:
        """The lines of ``[line, stop)`` whose key id is in ``wanting``, ascending."""
        raise NotImplementedError

    def skim(self, line: int, stop: int) -> None:
        """Mark lines ``[line, stop)`` skimmed."""
        raise NotImplementedError

    def unskim(self, j: int) -> None:
        """Line ``j`` was parsed after all."""
        raise NotImplementedError

    def span(self, j: int) -> tuple[int, int]:
        """Line ``j``'s bytes in the block: ``block[begin:end]`` (without its newline)."""
        raise NotImplementedError

    def skimmed_at(self, j: int) -> bool:
        """Whether line ``j`` is skimmed (:meth:`skim`, not :meth:`unskim` since)."""
        raise NotImplementedError

    def skimmed_of(self, lines: list[int]) -> list[int]:
        """The skimmed ones of ``lines``, in their order."""
        raise NotImplementedError

    def tail(self, i: int, first: int, upto: int | None) -> list[int]:
        """The last ``ring`` skimmed lines of key id ``i`` in ``[first, upto)``, ascending."""
        raise NotImplementedError

    def tails(self, firsts: list[int]) -> list[list[int]]:
        """Per key id ``i``, :meth:`tail` of ``[firsts[i], end of block)``; ``[]`` where
        ``firsts[i]`` is negative (not wanted)."""
        return [self.tail(i, first, None) if first >= 0 else [] for i, first in enumerate(firsts)]

    def ends(self) -> Sequence[int]:
        """Offsets of the block's newlines: line ``j`` ends at ``ends()[j]``."""
        raise NotImplementedError

    def lines_of(self, i: int) -> list[int]:
        """The lines of key id ``i``, ascending."""
        raise NotImplementedError


class ListKeys(BlockKeys):
    """:class:`BlockKeys` on lists (small blocks)."""

    def _load(self, keys: array[int], lines: int) -> None:
        self.ids: list[int] = keys.tolist()
        self.skimmed = bytearray(lines)
        self._by_key: tuple[list[int], list[int]] | None = None

    def counts(self, line: int, stop: int) -> list[int]:
        counts = [0] * self.writers
        for i in self.ids[line:stop]:
            counts[i] += 1
        return counts

    def wanted(self, line: int, stop: int, wanting: set[int]) -> list[int]:
        ids = self.ids
        return [j for j in range(line, stop) if ids[j] in wanting]

    def skim(self, line: int, stop: int) -> None:
        self.skimmed[line:stop] = b"\x01" * (stop - line)

    def unskim(self, j: int) -> None:
        self.skimmed[j] = 0

    def skimmed_at(self, j: int) -> bool:
        return bool(self.skimmed[j])

    def skimmed_of(self, lines: list[int]) -> list[int]:
        skimmed = self.skimmed
        return [j for j in lines if skimmed[j]]

    def ends(self) -> Sequence[int]:
        if self._ends is None:
            block, ends = self.block, []
            at = block.find(b"\n")
            while at >= 0:
                ends.append(at)
                at = block.find(b"\n", at + 1)
            self._ends = ends
        return self._ends

    def span(self, j: int) -> tuple[int, int]:
        ends = self.ends()
        return (ends[j - 1] + 1 if j else 0), ends[j]

    def _key_order(self) -> tuple[list[int], list[int]]:
        if self._by_key is None:
            ids = self.ids
            order = sorted(range(len(ids)), key=ids.__getitem__)  # stable
            bounds = [0]
            for count in self.counts(0, len(ids)):
                bounds.append(bounds[-1] + count)
            self._by_key = (order, bounds)
        return self._by_key

    def lines_of(self, i: int) -> list[int]:
        order, bounds = self._key_order()
        return order[bounds[i] : bounds[i + 1]]

    def tail(self, i: int, first: int, upto: int | None) -> list[int]:
        order, bounds = self._key_order()
        lo = bisect_left(order, first, bounds[i], bounds[i + 1])
        hi = bounds[i + 1] if upto is None else bisect_left(order, upto, lo, bounds[i + 1])
        skimmed = self.skimmed
        return [j for j in order[lo:hi] if skimmed[j]][-self.ring :]


class NumpyKeys(BlockKeys):
    """:class:`BlockKeys` on numpy arrays (big blocks; numpy is imported for the first)."""

    def _load(self, keys: array[int], lines: int) -> None:
        self.np: Any = importlib.import_module("numpy")
        self.ids = self.np.frombuffer(keys, dtype=self.np.uint32)
        self.skimmed = self.np.zeros(lines, dtype=bool)
        self._by_key: Any = None

    def counts(self, line: int, stop: int) -> list[int]:
        counts: list[int] = self.np.bincount(self.ids[line:stop], minlength=self.writers).tolist()
        return counts

    def wanted(self, line: int, stop: int, wanting: set[int]) -> list[int]:
        np, ids = self.np, self.ids[line:stop]
        if len(wanting) == 1:
            mask = ids == next(iter(wanting))
        else:  # a lookup per line (np.isin sorts, a hundred microseconds per call)
            table = np.zeros(self.writers, dtype=bool)
            table[list(wanting)] = True
            mask = table[ids]
        lines: list[int] = (np.flatnonzero(mask) + line).tolist()
        return lines

    def skim(self, line: int, stop: int) -> None:
        self.skimmed[line:stop] = True

    def unskim(self, j: int) -> None:
        self.skimmed[j] = False

    def skimmed_at(self, j: int) -> bool:
        return bool(self.skimmed[j])

    def skimmed_of(self, lines: list[int]) -> list[int]:
        if len(lines) < 8:
            return [j for j in lines if self.skimmed[j]]
        at = self.np.asarray(lines)
        picked: list[int] = at[self.skimmed[at]].tolist()
        return picked

    def ends(self) -> Sequence[int]:
        if self._ends is None:
            np = self.np
            self._ends = np.flatnonzero(np.frombuffer(self.block, dtype=np.uint8) == 10).tolist()
        return self._ends

    def span(self, j: int) -> tuple[int, int]:
        ends = self.ends()
        return (ends[j - 1] + 1 if j else 0), ends[j]

    def _key_order(self) -> Any:
        if self._by_key is None:
            np = self.np
            ids = self.ids
            if self.writers <= 1 << 16:
                ids = ids.astype(np.uint16)  # numpy sorts 16-bit keys by radix, ten times faster
            order = np.argsort(ids, kind="stable")
            bounds = np.searchsorted(self.ids[order], np.arange(self.writers + 1))
            self._by_key = (order, bounds)
        return self._by_key

    def tails(self, firsts: list[int]) -> list[list[int]]:
        # Every key's at once: in key order, a skimmed line is in its key's tail when fewer
        # than ``ring`` skimmed lines of the key come after it.
        np = self.np
        order, bounds = self._key_order()
        key_of = np.repeat(np.arange(self.writers), np.diff(bounds))
        low = np.asarray(firsts)
        low[low < 0] = len(self.ids)  # no line is at or after it
        mask = self.skimmed[order] & (order >= low[key_of])
        running = np.cumsum(mask)
        at_end = running[np.maximum(bounds[1:] - 1, 0)]
        mask &= (at_end[key_of] - running) < self.ring
        picked: list[int] = order[mask].tolist()
        counts: list[int] = np.bincount(key_of[mask], minlength=self.writers).tolist()
        out, at = [], 0
        for count in counts:
            out.append(picked[at : at + count])
            at += count
        return out

    def lines_of(self, i: int) -> list[int]:
        order, bounds = self._key_order()
        lines: list[int] = order[bounds[i] : bounds[i + 1]].tolist()
        return lines

    def tail(self, i: int, first: int, upto: int | None) -> list[int]:
        np = self.np
        order, bounds = self._key_order()
        mine = order[bounds[i] : bounds[i + 1]]
        stop = None if upto is None else np.searchsorted(mine, upto)
        mine = mine[np.searchsorted(mine, first) : stop]
        lines: list[int] = mine[self.skimmed[mine]][-self.ring :].tolist()
        return lines
