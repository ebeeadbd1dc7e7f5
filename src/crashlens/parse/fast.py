"""The fast path's second half: take indexed blocks in order, parse only what state needs.

Trigger lines (:mod:`crashlens.parse.index`) go through the full parser. The quiet runs between
them are only accounted for, per writer: line counts, an NCCL pid, the last lines kept raw in
the writer's ring. A writer whose open state needs its next lines (a traceback being read, a
first timestamp not yet seen, a handled-or-fatal verdict still open) gets them fed one by one,
the others do not; so a 64-rank console costs about what 64 per-rank files cost.

The per-line work of an interleaved block is array arithmetic over its key ids (numpy): counts
per writer, and each writer's last quiet lines, taken once per block or just before the
writer's ring is read (:meth:`FastPath.settle`).
"""

from __future__ import annotations

import heapq
import importlib
from array import array
from typing import TYPE_CHECKING, Any, Protocol

from crashlens.ingest.prefixes import PrefixStyle, strip
from crashlens.parse.index import BlockIndex
from crashlens.parse.repeat import Repeat
from crashlens.parse.state import RING, Stream

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


class LineParser(Protocol):
    """What the fast path needs of its file's parser (:class:`~crashlens.parse.stream.FileParser`
    is one): the per-line path for the lines it must see, the accounting for the rest. A
    protocol, so that this module does not import the parser that imports it."""

    lines: int
    last_lineno: int
    style: PrefixStyle

    def feed_bytes(
        self, block: bytes, pos: int, lineno: int, *, quiet: bool = False
    ) -> tuple[int, int]: ...
    def feed_raw(self, raw: bytes, lineno: int, *, quiet: bool = False) -> None: ...
    def glance(self, stream: Stream, raw: bytes, lineno: int) -> None: ...
    def default_stream(self) -> Stream: ...
    def stream_of(self, rank: int | None, local: int | None, host: str | None) -> Stream: ...
    def skip(self, block: bytes, start: int, end: int, count: int, last_lineno: int) -> None: ...
    def repeats(self, header: bytes) -> list[Repeat] | None: ...
    def usable(self, stream: Stream, repeats: list[Repeat]) -> list[Repeat]: ...
    def replay(self, stream: Stream, repeat: Repeat, linenos: list[int]) -> None: ...


class _LazyNumpy:
    """numpy, imported the first time a block has prefixes (a one-writer job never pays it)."""

    def __getattr__(self, name: str) -> Any:
        module = importlib.import_module("numpy")
        globals()["np"] = module
        return getattr(module, name)


if not TYPE_CHECKING:
    np = _LazyNumpy()


class FastPath:
    """Takes one file's indexed blocks for its parser (a :class:`LineParser`)."""

    def __init__(self, parser: LineParser) -> None:
        self.parser = parser
        self._key_streams: dict[bytes, Stream] = {}
        # The block being taken, for demultiplexed blocks only.
        self._block = b""
        self._base = 0
        self._streams: list[Stream] = []
        self._ids: np.ndarray | None = None
        #: The same key ids, for reading one at a time.
        self._keys: array[int] = array("I")
        self._skimmed: np.ndarray | None = None
        self._ends: np.ndarray | None = None
        self._by_key: tuple[np.ndarray, np.ndarray] | None = None
        #: Streams (by id) with skimmed lines in this block their ring has not taken yet.
        self.pending: dict[int, Stream] = {}
        #: Per stream (by id), the block line up to which its ring has taken skimmed lines.
        self._taken: dict[int, int] = {}
        #: Block lines of interleaved writers already taken as part of a repeated traceback
        #: (:meth:`_repeat`), and the same as a heap for the quiet runs to pop.
        self._replayed: set[int] = set()
        self._replayed_heap: list[int] = []
        self._ends_list: list[int] | None = None
        self._by_stream: dict[int, np.ndarray] = {}

    def take(self, block: bytes, index: BlockIndex, lineno: int) -> int:
        """Parse ``block`` with its ``index``; return the number of its last line."""
        parser = self.parser
        self._start_block(block, index, lineno)
        pos = line = 0
        for start, at in zip(index.triggers, index.trigger_lines, strict=True):
            if at < line or at in self._replayed:
                continue  # taken already, as part of a repeated traceback
            lineno = self._quiet(block, pos, start, line, at, lineno)
            end = block.find(b"\n", start)
            repeats = parser.repeats(block[start:end]) if end >= 0 else None
            if repeats is not None:
                taken = self._repeat(block, repeats, end + 1, at, lineno)
                if taken is not None:
                    pos, lineno, line = taken
                    continue
            pos, lineno = parser.feed_bytes(block, start, lineno)
            line = at + 1
        lineno = self._quiet(block, pos, len(block), line, index.lines, lineno)
        self._end_block()
        return lineno

    def _start_block(self, block: bytes, index: BlockIndex, lineno: int) -> None:
        self._block, self._base = block, lineno
        if index.keys is None:
            self._ids = None
            return
        self._streams = [self._key_stream(key) for key in index.key_table]
        self._keys = index.keys
        self._ids = np.frombuffer(index.keys, dtype=np.uint32)
        self._skimmed = np.zeros(index.lines, dtype=bool)
        self._ends = self._by_key = None

    def _end_block(self) -> None:
        if self.pending:
            self._take_tails()
        self.pending.clear()
        self._taken.clear()
        self._replayed.clear()
        self._replayed_heap.clear()
        self._ends_list = None
        self._by_stream.clear()
        self._block = b""
        self._ids = self._skimmed = self._ends = self._by_key = None

    # -- repeated tracebacks -------------------------------------------------------------
    def _repeat(
        self, block: bytes, repeats: list[Repeat], pos: int, at: int, lineno: int
    ) -> tuple[int, int, int] | None:
        """At a traceback header (block line ``at``, ``pos`` just after it), take it and its
        writer's next lines as one of ``repeats`` when they are one's; then the next position,
        line number and block line (a one-writer block), or the same with the lines passed
        over later (an interleaved one). None: not a repeat, to be fed as usual."""
        if self._ids is None:
            stream = self.parser.default_stream()
        else:
            stream = self._streams[self._keys[at]]
        usable = self.parser.usable(stream, repeats)
        if not usable:
            return None
        if self._ids is None:
            for repeat in usable:
                if repeat.bare and block.startswith(repeat.rest, pos):
                    n = len(repeat.texts)
                    self.parser.replay(stream, repeat, list(range(lineno + 1, lineno + n + 2)))
                    return pos + len(repeat.rest), lineno + n + 1, at + n + 1
            return None
        lines = self._repeat_lines(block, stream, usable, at)
        if lines is None:
            return None
        repeat, taken = lines
        self.parser.replay(stream, repeat, [self._base + j + 1 for j in (at, *taken)])
        self._replayed.update(taken)
        for j in taken:
            heapq.heappush(self._replayed_heap, j)
        return pos, lineno + 1, at + 1

    def _repeat_lines(
        self, block: bytes, stream: Stream, repeats: list[Repeat], at: int
    ) -> tuple[Repeat, list[int]] | None:
        """In an interleaved block, the repeat whose lines after its header (block line
        ``at``) are ``stream``'s next lines, and those lines' block indexes."""
        mine = self._writer_lines(stream)
        first = int(np.searchsorted(mine, at)) + 1
        ends = self._end_list()
        for repeat in repeats:
            n = len(repeat.texts)
            lines = mine[first : first + n].tolist()
            if len(lines) == n and all(
                block[ends[j - 1] + 1 : ends[j]] == raw
                for j, raw in zip(lines, repeat.lines[1:], strict=True)
            ):
                return repeat, lines
        return None

    def _writer_lines(self, stream: Stream) -> np.ndarray:
        """The block's line indexes of ``stream``'s lines (under any of its prefixes)."""
        lines = self._by_stream.get(id(stream))
        if lines is None:
            parts = [self._lines_of(i) for i, s in enumerate(self._streams) if s is stream]
            lines = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
            self._by_stream[id(stream)] = lines
        return lines

    # -- quiet runs ---------------------------------------------------------------------
    def _quiet(self, block: bytes, start: int, end: int, line: int, stop: int, lineno: int) -> int:
        if start >= end:
            return lineno
        if self._ids is None:
            return self._quiet_single(block, start, end, stop - line, lineno)
        return self._quiet_demux(block, start, end, line, stop, lineno)

    def _quiet_single(self, block: bytes, start: int, end: int, count: int, lineno: int) -> int:
        """No line carries a launcher prefix: all are the file's own writer's."""
        parser = self.parser
        stream = parser.default_stream()
        while start < end and (parser.lines == 0 or stream.wants_lines()):
            if parser.lines and stream.observing_only():
                # What open state waits for is glanced at, not parsed: the lines stay quiet.
                probed = start
                n = 0
                while probed < end and stream.observing_only():
                    stop = block.find(b"\n", probed, end)
                    stop = end if stop < 0 else stop
                    parser.glance(stream, block[probed:stop], lineno + n + 1)
                    probed, n = stop + 1, n + 1
                stream.lines -= n  # skip counts them
                parser.skip(block, start, probed, n, lineno + n)
                start, lineno, count = probed, lineno + n, count - n
                continue
            start, lineno = parser.feed_bytes(block, start, lineno, quiet=True)
            count -= 1
        if start < end:
            parser.skip(block, start, end, count, lineno + count)
            lineno += count
        return lineno

    def _quiet_demux(
        self, block: bytes, start: int, end: int, line: int, stop: int, lineno: int
    ) -> int:
        """Interleaved writers: each line is the writer's its prefix names."""
        assert self._ids is not None and self._skimmed is not None
        parser, streams = self.parser, self._streams
        ids = self._ids[line:stop]
        keys = self._keys
        counts: list[int] = np.bincount(ids, minlength=len(streams)).tolist()
        present = [i for i, count in enumerate(counts) if count]
        wanting = set()
        for i in present:
            stream = streams[i]
            if not stream.settled:
                if stream.wants_lines():
                    wanting.add(i)
                else:
                    stream.settled = True
        glanced: dict[int, int] = {}
        skimmed = self._skimmed
        skimmed[line:stop] = True
        replayed = self._replayed_in(stop)
        for j in replayed:  # counted and kept by the writer's repeat already
            skimmed[j] = False
            counts[keys[j]] -= 1
        if wanting:
            # Only the wanting writers' lines are visited, in file order.
            if len(wanting) == 1:
                mask = ids == next(iter(wanting))
            else:
                table = np.zeros(len(streams), dtype=bool)
                table[list(wanting)] = True
                mask = table[ids]
            ends = self._end_list()
            for j in (np.flatnonzero(mask) + line).tolist():
                i = keys[j]
                if i not in wanting or j in replayed:
                    continue
                raw = block[ends[j - 1] + 1 if j else 0 : ends[j]]
                if streams[i].observing_only():
                    # Glanced at for what open state waits for; the line stays skimmed.
                    parser.glance(streams[i], raw, self._base + j + 1)
                    glanced[i] = glanced.get(i, 0) + 1
                else:
                    parser.feed_raw(raw, self._base + j + 1, quiet=True)
                    skimmed[j] = False
                    counts[i] -= 1
                if not streams[i].wants_lines():
                    streams[i].settled = True
                    wanting.discard(i)
                    if not wanting:
                        break
        n = len(ids)
        parser.lines += sum(counts)
        parser.last_lineno = lineno + n
        for i, n_glanced in glanced.items():
            streams[i].lines -= n_glanced  # counted with the quiet lines below
        nccl: list[tuple[int, int, int]] | None = None
        for i in present:
            count = counts[i]
            if count:
                stream = streams[i]
                stream.lines += count
                self.pending[id(stream)] = stream
                if not stream.pids and stream.pid_budget > 0:
                    if nccl is None:  # one scan of the range for every writer that hunts
                        nccl = self._nccl_lines(block, start, end, line)
                    self._hunt_pid(stream, i, block, nccl, count)
        return lineno + n

    def _replayed_in(self, stop: int) -> set[int]:
        """The replayed block lines before ``stop`` not yet accounted for by a quiet run."""
        heap = self._replayed_heap
        if not heap or heap[0] >= stop:
            return set()
        out = set()
        while heap and heap[0] < stop:
            out.add(heapq.heappop(heap))
        return out

    @staticmethod
    def _nccl_lines(block: bytes, start: int, end: int, line: int) -> list[tuple[int, int, int]]:
        """The NCCL lines of ``block[start:end]`` (whose first line is the block's ``line``):
        (line index in the block, start, end)."""
        out = []
        at = block.find(b" NCCL ", start, end)
        counted, lines = start, line
        while at >= 0:
            line_start = block.rfind(b"\n", start, at) + 1 or start
            lines += block.count(b"\n", counted, line_start)
            counted = line_start
            line_end = block.find(b"\n", at, end)
            line_end = end if line_end < 0 else line_end
            out.append((lines, line_start, line_end))
            at = block.find(b" NCCL ", line_end + 1, end)
        return out

    def _hunt_pid(
        self, stream: Stream, i: int, block: bytes, nccl: list[tuple[int, int, int]], n: int
    ) -> None:
        """A writer with no pid yet takes the one of its first NCCL line here."""
        keys = self._keys
        for lines, line_start, line_end in nccl:
            if keys[lines] == i and stream.learn_pid(block[line_start:line_end]):
                return
        stream.pid_budget -= n

    def _key_stream(self, key: bytes) -> Stream:
        stream = self._key_streams.get(key)
        if stream is None:
            if key:
                _, prefix = strip(key.decode("utf-8", "replace") + "x", self.parser.style)
                stream = self.parser.stream_of(prefix.rank, prefix.local_rank, prefix.host)
            else:
                stream = self.parser.default_stream()
            self._key_streams[key] = stream
        return stream

    # -- tails: each writer's last skimmed lines ----------------------------------------
    def settle(self, stream: Stream, lineno: int) -> None:
        """Give ``stream``'s ring its skimmed lines before line ``lineno`` (which it is
        about to read)."""
        if id(stream) in self.pending:
            self._take_tail(stream, lineno - 1 - self._base)

    def _line_ends(self) -> np.ndarray:
        """Offsets of the current block's newlines (line ``j`` ends at ``ends[j]``)."""
        if self._ends is None:
            self._ends = np.flatnonzero(np.frombuffer(self._block, dtype=np.uint8) == 10)
        return self._ends

    def _end_list(self) -> list[int]:
        """:meth:`_line_ends` as a list (for indexing one by one)."""
        if self._ends_list is None:
            self._ends_list = self._line_ends().tolist()
        return self._ends_list

    def _key_order(self) -> tuple[np.ndarray, np.ndarray]:
        """The block's line indexes sorted by key id (stable), and each id's bounds in it."""
        if self._by_key is None:
            assert self._ids is not None
            order = np.argsort(self._ids, kind="stable")
            bounds = np.searchsorted(self._ids[order], np.arange(len(self._streams) + 1))
            self._by_key = (order, bounds)
        return self._by_key

    def _lines_of(self, i: int) -> np.ndarray:
        """The block's line indexes with key id ``i``, ascending."""
        order, bounds = self._key_order()
        return order[bounds[i] : bounds[i + 1]]

    def _take_tails(self) -> None:
        """At the end of a block: every pending stream's last skimmed lines, in one pass."""
        assert self._ids is not None and self._skimmed is not None
        order, bounds = self._key_order()
        skimmed = self._skimmed
        picked: dict[int, list[int]] = {}
        for i, stream in enumerate(self._streams):
            if id(stream) not in self.pending:
                continue
            first = self._taken.get(id(stream), 0)
            mine = order[bounds[i] : bounds[i + 1]]
            mine = mine[np.searchsorted(mine, first) :]
            picked.setdefault(id(stream), []).extend(mine[skimmed[mine]][-RING:].tolist())
        ends = self._end_list()
        block, base, style = self._block, self._base, self.parser.style
        for key, lines in picked.items():
            if not lines:
                continue
            lines.sort()
            tail = [
                (base + j + 1, block[(ends[j - 1] + 1 if j else 0) : ends[j]])
                for j in lines[-RING:]
            ]
            self.pending[key].ring.extend_raw(tail, style)

    def _take_tail(self, stream: Stream, upto: int) -> None:
        """Add ``stream``'s last skimmed block lines before line ``upto`` to its ring."""
        assert self._skimmed is not None
        self.pending.pop(id(stream), None)
        first = self._taken.get(id(stream), 0)
        self._taken[id(stream)] = upto
        mine = self._writer_lines(stream)
        mine = mine[np.searchsorted(mine, first) : np.searchsorted(mine, upto)]
        picked: list[int] = mine[self._skimmed[mine]][-RING:].tolist()
        if not picked:
            return
        ends = self._end_list()
        block, base = self._block, self._base
        tail = [(base + j + 1, block[(ends[j - 1] + 1 if j else 0) : ends[j]]) for j in picked]
        stream.ring.extend_raw(tail, self.parser.style)
