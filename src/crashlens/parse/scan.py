"""The fast path: find the few lines that need Python with one multi-literal pass over bytes.

Nearly every line of a training log is a step line, a progress bar or NCCL INFO noise that no
rule, traceback or launcher summary cares about. One scan for the union of the rules' literal
anchors and the structural triggers (traceback headers, ``ChildFailedError`` summaries) over
each raw block finds the lines that matter; everything between them is only counted.

Hyperscan (the ``fast`` extra) matches the literal set at close to a GB/s per core; RE2
(``google-re2``) runs the alternation as a DFA at a third of that; the stdlib engine is the
last fallback. benchmarks/run.py measures each.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from crashlens import facts
from crashlens.ingest.read import Readable

#: Lines that start multi-line state even when no detector literal is on them.
STRUCTURAL_TRIGGERS = (
    # (a header cut where a paste ends still starts one: IPython's, ``X    Traceback (most re``)
    "Traceback (most re",
    # A frame whose traceback header a paste lost; a final exception line on its own.
    'File "',
    "Error: ",
    "Exception: ",
    "Fatal Python error: ",
    "Root Cause (first observed failure):",
    "Failures:",
    "global_rank_mapping=",
    # A writer known only by its local rank learns its global rank from these (stream.py).
    "Rank ",
    " nranks ",
    *facts.TRIGGERS,
)
BLOCK = 2 << 20
#: A line is cut to this many bytes before decoding (the text limit is applied after).
MAX_LINE_BYTES = 64 * 1024
#: A line still unterminated after this many bytes is truncated and the rest dropped.
MAX_CARRY = 1 << 20


#: Scanner engines, fastest first: Hyperscan (the ``fast`` extra), RE2, the stdlib engine; each
#: is its module's name, imported when a scanner first needs its engine (see TriggerScanner).
BACKENDS = ("hyperscan", "re2", "re")
#: Blocks up to this many bytes may be scanned with ``bytes.find`` per literal instead of the
#: engine, until the scanner has done :data:`FIND_BUDGET` of such work (literals x bytes):
#: about what compiling the engine's database costs (some milliseconds), so a small job never
#: compiles it and a big one compiles it at once.
SMALL_BLOCK = 16 * 1024
FIND_BUDGET = 8_000_000
#: RE2's memory budget for the literal set's automaton, a cap (the DFA takes what the scanned
#: text visits). Its default, 8 MB, no longer holds the bundled rules' ~600 literals: RE2 then
#: falls back to its NFA, hundreds of times slower, and logs "DFA out of memory" on every
#: search (tests/test_fast_path.py checks the DFA fits).
RE2_MAX_MEM = 128 * 1024 * 1024


@functools.cache
def available_backends() -> tuple[str, ...]:
    """The scanner engines this installation can use, fastest first."""
    return tuple(
        name for name in BACKENDS if name == "re" or importlib.util.find_spec(name) is not None
    )


class TriggerScanner:
    """Start offsets of the lines of a block that contain any trigger literal.

    Hyperscan matches the literal set with SIMD at close to a GB/s per core; RE2 runs the
    alternation as a DFA; the stdlib engine is the fallback. All three find the same lines
    (tests/test_prefilter.py checks them against each other). The engine is imported and its
    database compiled when a block first needs it: small blocks are looked through with
    ``bytes.find``, which finds the same lines (tests/test_startup.py), while that is cheaper.
    """

    def __init__(
        self,
        literals: Iterable[str],
        literals_ci: Iterable[str] = (),
        backend: str | None = None,
        markers: Sequence[bytes] = (),
    ) -> None:
        exact = sorted(set(literals), key=len, reverse=True)
        #: Patterns (bytes regexes, ``^`` at any line start) whose first match in a block
        #: :meth:`scan` reports without making its line a trigger (Hyperscan only).
        self.markers = tuple(markers)
        folded = sorted(set(literals_ci))
        #: What it was built from (to build the same scanner on another engine).
        self.literals = (tuple(exact), tuple(folded))
        # CRASHLENS_SCANNER picks an engine (benchmarks/run.py compares them).
        self.backend = backend or os.environ.get("CRASHLENS_SCANNER") or available_backends()[0]
        if self.backend not in available_backends():
            raise ValueError(f"scanner backend {self.backend!r} is not installed")
        self._compiled = False
        self._hs: Any = None
        self.pattern: Any = None
        self._find: tuple[list[bytes], list[bytes]] | None = None
        encoded = ([x.encode("utf-8") for x in exact], [x.encode("utf-8").lower() for x in folded])
        # A scanner asked for by engine (tests, benchmarks) always uses it.
        plain = all(x and b"\n" not in x for x in (*encoded[0], *encoded[1]))
        if backend is None and plain and (exact or folded):
            self._find = encoded
        self._find_left = FIND_BUDGET

    def _compile(self) -> None:
        """Import the engine and compile the literal set for it (once)."""
        exact, folded = (list(x) for x in self.literals)
        module = importlib.import_module(self.backend)
        if self.backend == "hyperscan":
            self._hs = _hyperscan_db(module, exact, folded, self.markers)
        else:
            parts = [re.escape(lit) for lit in exact]
            parts += [f"(?i:{re.escape(lit)})" for lit in folded]
            pattern = "|".join(parts).encode("utf-8")
            if self.backend == "re2":
                options = module.Options()
                options.max_mem = RE2_MAX_MEM
                self.pattern = module.compile(pattern, options)
            else:
                self.pattern = module.compile(pattern)
        self._compiled = True

    def line_starts(self, block: bytes) -> list[int]:
        """Sorted, unique start offsets of the lines holding a trigger."""
        return self.scan(block)[0]

    def scan(self, block: bytes) -> tuple[list[int], list[int] | None]:
        """:meth:`line_starts`, and for each of :attr:`markers` the end offset of its first
        match in ``block`` (-1: none) in the same pass; None where the engine does not
        look for markers (the caller looks itself)."""
        if not self._compiled:
            work = (len(block) + 256) * (len(self.literals[0]) + len(self.literals[1]))
            if self._find is not None and len(block) <= SMALL_BLOCK and work <= self._find_left:
                self._find_left -= work
                return _find_line_starts(block, *self._find), None
            self._compile()
        if self._hs is not None:
            return self._hs_scan(block)
        starts: list[int] = []
        last = -1
        for m in self.pattern.finditer(block):
            start = block.rfind(b"\n", 0, m.start()) + 1
            if start != last:
                starts.append(start)
                last = start
        return starts, None

    def _hs_scan(self, block: bytes) -> tuple[list[int], list[int]]:
        ends: list[int] = []
        marks = [-1] * len(self.markers)
        context = (ends, marks, len(self.literals[0]) + len(self.literals[1]))
        self._hs.scan(block, match_event_handler=_collect, context=context)
        ends.sort()
        starts: list[int] = []
        line_end = -1
        for end in ends:
            if end <= line_end:
                continue  # another literal on a line already found
            start = block.rfind(b"\n", 0, end - 1) + 1
            line_end = block.find(b"\n", end - 1)
            if line_end < 0:
                line_end = len(block)
            starts.append(start)
        return starts, marks


def _find_line_starts(block: bytes, exact: list[bytes], folded: list[bytes]) -> list[int]:
    """The start offsets of the lines of ``block`` holding any of ``exact``, or any of
    ``folded`` in ASCII case (lower-cased), by ``bytes.find``; no literal holds a newline."""
    starts: set[int] = set()
    for literals, text in ((exact, block), (folded, block.lower() if folded else block)):
        for literal in literals:
            at = text.find(literal)
            while at >= 0:
                starts.add(text.rfind(b"\n", 0, at) + 1)
                line_end = text.find(b"\n", at)
                if line_end < 0:
                    break
                at = text.find(literal, line_end + 1)
    return sorted(starts)


def _collect(
    id_: int, _start: int, end: int, _flags: int, context: tuple[list[int], list[int], int]
) -> None:
    ends, marks, triggers = context
    if id_ < triggers:
        ends.append(end)
    else:
        marks[id_ - triggers] = end  # reported once (HS_FLAG_SINGLEMATCH): the first


def _hyperscan_db(
    hyperscan: Any, exact: list[str], folded: list[str], markers: Sequence[bytes] = ()
) -> Any:
    expressions = [re.escape(lit).encode("utf-8") for lit in (*exact, *folded)]
    flags = [0] * len(exact) + [hyperscan.HS_FLAG_CASELESS] * len(folded)
    expressions += markers
    flags += [hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_SINGLEMATCH] * len(markers)
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(
        expressions=expressions,
        ids=list(range(len(expressions))),
        elements=len(expressions),
        flags=flags,
    )
    return db


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
        cut = chunk.rfind(b"\n")  # the carry has none
        if cut < 0:
            data = carry + chunk
            if len(data) > MAX_CARRY:
                yield data[:MAX_LINE_BYTES] + b"\n"
                carry, dropping = b"", True
            else:
                carry = data
            continue
        block = chunk
        if carry or cut + 1 < len(chunk):
            # One copy of the block's bytes, not two (joined, then cut).
            with memoryview(chunk) as view:
                block = b"".join((carry, view[: cut + 1]))
        carry = chunk[cut + 1 :]
        yield block
    if carry and not dropping:
        yield carry + b"\n"


class _ExactReader:
    """Reads exactly ``BLOCK`` bytes per call (less only at the end of its range), so the
    blocks of a byte range are the same whoever reads them."""

    def __init__(self, fd: int, start: int, end: int) -> None:
        self.fd, self.pos, self.end = fd, start, end

    def read(self, size: int = -1, /) -> bytes:
        want = min(size if size > 0 else BLOCK, self.end - self.pos)
        parts = []
        while want > 0:
            chunk = os.pread(self.fd, want, self.pos)
            if not chunk:
                break
            parts.append(chunk)
            self.pos += len(chunk)
            want -= len(chunk)
        return b"".join(parts)


def range_blocks(path: str | os.PathLike[str], start: int, end: int) -> Iterator[bytes]:
    """The blocks (see :func:`iter_blocks`) of a file's bytes ``[start, end)``; both are line
    starts (:func:`ramp_points`), and the blocks depend on the bytes alone."""
    fd = os.open(path, os.O_RDONLY)
    try:
        yield from iter_blocks(_ExactReader(fd, start, end))
    finally:
        os.close(fd)


def ramp_points(path: str | os.PathLike[str], size: int, first: int, most: int) -> list[int]:
    """Offsets cutting a file of ``size`` bytes at line starts into ranges of ``first`` bytes,
    then twice as many each time up to ``most``: a reader that waits for the first range
    waits for a small one."""
    cuts, at, step = [], 0, first
    while at + step < size:
        at += step
        cuts.append(at)
        step = min(step * 2, most)
    return line_starts_after(path, size, cuts)


def line_starts_after(path: str | os.PathLike[str], size: int, cuts: list[int]) -> list[int]:
    """``[0, *starts, size]``: for each ascending offset of ``cuts``, the start of the first line
    after it (offsets that fall into the range before, or into the last line, are dropped)."""
    points = [0]
    fd = os.open(path, os.O_RDONLY)
    try:
        for at in cuts:
            if at <= points[-1]:
                continue
            window = os.pread(fd, MAX_CARRY, at)
            newline = window.find(b"\n")
            if newline >= 0 and at + newline + 1 < size:
                points.append(at + newline + 1)
    finally:
        os.close(fd)
    points.append(size)
    return points
