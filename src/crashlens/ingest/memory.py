"""Keep the memory of freed blocks in the process for the next ones (glibc's malloc), and
keep what a big read has built out of the cyclic garbage collector's way.

A big input is read in blocks of a few MB (:data:`crashlens.parse.scan.BLOCK`), each a new
``bytes`` object, and its index, keys and slices are about as big. glibc gives a freed chunk
that size back to the kernel (it was mmapped, or it tops a heap past the trim threshold), so
the next block's memory is faulted in again, page by page: on a 512 MB tree, about a third of
the reading time went to page faults. With fixed thresholds above a block's size the freed
memory stays mapped and the next block reuses it; peak memory is what the biggest moment
needs, as before, since nothing more is ever live at once.
"""

from __future__ import annotations

import gc
import sys
from types import TracebackType

#: Chunks up to this size come from the heap (a block, its carry and its index fit).
MMAP_THRESHOLD = 16 << 20
#: Free memory at the top of the heap up to this size is kept.
TRIM_THRESHOLD = 64 << 20
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_blocks() -> bool:
    """Set glibc's thresholds for reading big inputs (forked workers inherit them); whether
    they could be set (not glibc, or no ``ctypes``: nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):
        return False
    ok: bool = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1) and ok


class FrozenHeap:
    """While a big input is read: the objects made so far (modules, rules, the results that
    came back) are left out of the garbage collector's full passes (``gc.freeze``).

    Every full pass walks every tracked object, and a job with tens of thousands of
    tracebacks brings back that many objects per file: on the retry-heavy 512 MB mix the
    passes over what was already kept took a third of the parent's CPU time (0.23 of 0.68 s).
    Freezing before the workers fork also spares them the passes over what they inherit. Only
    cycles among frozen objects wait for the end (:meth:`__exit__` unfreezes); nothing is done
    where something else froze the heap already (a forking server's own ``gc.freeze``).
    """

    def __init__(self) -> None:
        self._mine = False

    def __enter__(self) -> FrozenHeap:
        self._mine = gc.get_freeze_count() == 0
        self.keep()
        return self

    def keep(self) -> None:
        """Leave everything made so far out of later full passes."""
        if self._mine:
            gc.freeze()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._mine:
            gc.unfreeze()
            self._mine = False
