"""The fast path's second half: take indexed blocks in order, parse only what state needs.

Trigger lines (:mod:`crashlens.parse.index`) go through the full parser. The quiet runs between
them are only accounted for, per writer: line counts, an NCCL pid, the last lines kept raw in
the writer's ring. A writer whose open state needs its next lines (a traceback being read, a
first timestamp not yet seen, a handled-or-fatal verdict still open) gets them fed one by one,
the others do not; so a 64-rank console costs about what 64 per-rank files cost.

The per-line work of an interleaved block is array arithmetic over its key ids
(:mod:`crashlens.parse.keyed`: numpy for big blocks): counts per writer, and each writer's last
quiet lines, taken once per block or just before the writer's ring is read
(:meth:`FastPath.settle`).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import chain
from typing import Protocol

from crashlens.ingest.prefixes import PrefixStyle, strip
from crashlens.parse.index import NCCL_MARK, BlockIndex, find_nccl
from crashlens.parse.keyed import BlockKeys, keys_type
from crashlens.parse.repeat import Repeat
from crashlens.parse.state import RING, Stream, numbered


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
    def skip(
        self, block: bytes, start: int, end: int, count: int, last_lineno: int, nccl: int | None
    ) -> None: ...
    def repeats(self, header: bytes) -> list[Repeat] | None: ...
    def usable(self, stream: Stream, repeats: list[Repeat]) -> list[Repeat]: ...
    def replay(self, stream: Stream, repeat: Repeat, linenos: list[int]) -> None: ...

    def fold_round(
        self,
        stream: Stream,
        repeat: Repeat,
        closer: bytes | None,
        linenos: list[int],
        *,
        fed: bool = False,
    ) -> bool: ...
    def run_ready(self, stream: Stream, repeat: Repeat) -> bool: ...
    def round_ok(self, announce: bytes, closer: bytes) -> bool: ...
    def fold_run(self, stream: Stream, count: int, lineno: int, announce: bytes) -> bool: ...
    def fold_later(
        self,
        stream: Stream,
        repeat: Repeat,
        closer: bytes | None,
        announce: bytes,
        lineno: int,
        linenos: list[int],
    ) -> list[tuple[int, str]] | None: ...


class FastPath:
    """Takes one file's indexed blocks for its parser (a :class:`LineParser`)."""

    def __init__(self, parser: LineParser) -> None:
        self.parser = parser
        self._key_streams: dict[bytes, Stream] = {}
        # The block being taken, for demultiplexed blocks only.
        self._block = b""
        self._base = 0
        #: The block's first NCCL line (:attr:`BlockIndex.nccl`).
        self._nccl: int | None = None
        self._streams: list[Stream] = []
        #: The block's key ids per line (None when no line has a prefix), and the same ids
        #: for reading one at a time.
        self._bk: BlockKeys | None = None
        self._keys: array[int] = array("I")
        #: Streams (by id) with skimmed lines in this block their ring has not taken yet.
        self.pending: dict[int, Stream] = {}
        #: Per stream (by id), the block line up to which its ring has taken skimmed lines.
        self._taken: dict[int, int] = {}
        #: Block lines of interleaved writers already taken as part of a repeated traceback
        #: (:meth:`_repeat`), and the same as a heap for the quiet runs to pop.
        self._replayed: set[int] = set()
        self._replayed_heap: list[int] = []
        self._by_stream: dict[int, list[int]] = {}
        #: Per stream (by id), its key ids in the block (a writer may have several prefixes).
        self._key_ids: dict[int, list[int]] = {}
        #: The block being taken's index, and the block line before which a run of folded
        #: rounds took every trigger (:meth:`_fold_run`; one-writer blocks).
        self._index: BlockIndex | None = None
        self._absorbed = 0

    def take(self, block: bytes, index: BlockIndex, lineno: int) -> int:
        """Parse ``block`` with its ``index``; return the number of its last line."""
        parser = self.parser
        self._start_block(block, index, lineno)
        pos = line = 0
        for start, at in zip(index.triggers, index.trigger_lines, strict=True):
            if at < line or at < self._absorbed or at in self._replayed:
                continue  # taken already, as part of a repeated traceback
            end = block.find(b"\n", start)
            if self._bk is not None and end >= 0:
                repeats = parser.repeats(block[start:end])
                if repeats is not None and self._fold_later(repeats, at, line):
                    continue  # a retried round, folded: its lines stay in the quiet run
            lineno = self._quiet(block, pos, start, line, at, lineno)
            # (the quiet run may have ended a traceback that became a repeat)
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
        self._block, self._base, self._nccl = block, lineno, index.nccl
        self._index, self._absorbed = index, 0
        if index.keys is None:
            self._bk = None
            return
        self._streams = [self._key_stream(key) for key in index.key_table]
        self._key_ids.clear()
        for i, stream in enumerate(self._streams):
            self._key_ids.setdefault(id(stream), []).append(i)
        self._keys = index.keys
        self._bk = keys_type(index.lines)(
            index.keys, index.lines, block, len(self._streams), RING, index.ends
        )

    def _end_block(self) -> None:
        if self.pending:
            self._take_tails()
        self.pending.clear()
        self._taken.clear()
        self._replayed.clear()
        self._replayed_heap.clear()
        self._by_stream.clear()
        self._block = b""
        self._bk = None
        self._index = None

    # -- repeated tracebacks -------------------------------------------------------------
    def _repeat(
        self, block: bytes, repeats: list[Repeat], pos: int, at: int, lineno: int
    ) -> tuple[int, int, int] | None:
        """At a traceback header (block line ``at``, ``pos`` just after it), take it and its
        writer's next lines as one of ``repeats`` when they are one's; then the next position,
        line number and block line (a one-writer block), or the same with the lines passed
        over later (an interleaved one). None: not a repeat, to be fed as usual."""
        bk = self._bk
        stream = self.parser.default_stream() if bk is None else self._streams[self._keys[at]]
        usable = self.parser.usable(stream, repeats)
        if not usable:
            return None
        if self._bk is None:
            for repeat in usable:
                if repeat.bare and block.startswith(repeat.rest, pos):
                    n = len(repeat.texts)
                    after = pos + len(repeat.rest)
                    stop = block.find(b"\n", after)
                    closer = block[after:stop] if stop >= 0 else None
                    linenos = list(range(lineno + 1, lineno + n + 2))
                    if self.parser.fold_round(stream, repeat, closer, linenos):
                        self._fold_run(block, stream, repeat, usable, at + n + 1)
                    elif closer is None or not self._quiet_line(at + n + 1):
                        self.parser.replay(stream, repeat, linenos)
                    elif self.parser.fold_round(stream, repeat, closer, linenos, fed=True):
                        # fed as the per-line path feeds it to end the round (no bulk run
                        # after it: a run starts after a record)
                        pos, lineno = self.parser.feed_bytes(
                            block, after, lineno + n + 1, quiet=True
                        )
                        return pos, lineno, at + n + 2
                    else:
                        self.parser.replay(stream, repeat, linenos)
                    return after, lineno + n + 1, at + n + 1
            return None
        lines = self._repeat_lines(block, stream, usable, at)
        if lines is None:
            return None
        repeat, taken = lines
        linenos = [self._base + j + 1 for j in (at, *taken)]
        parser = self.parser
        following = self._next_of(stream, taken[-1])
        closer = None if following is None else self._raw(following)
        if not parser.fold_round(stream, repeat, closer, linenos):
            if (
                closer is not None
                and following is not None
                and self._quiet_line(following)
                and parser.fold_round(stream, repeat, closer, linenos, fed=True)
            ):
                # fed as the per-line path feeds it to end the round: the writer's next line,
                # a quiet one (what else its block holds is a quiet run's or another writer's)
                parser.feed_raw(closer, self._base + following + 1, quiet=True)
                taken = [*taken, following]
            else:
                parser.replay(stream, repeat, linenos)
        self._replayed.update(taken)
        for j in taken:
            heapq.heappush(self._replayed_heap, j)
        return pos, lineno + 1, at + 1

    def _quiet_line(self, j: int) -> bool:
        """Whether block line ``j`` holds no trigger (the per-line path feeds it as quiet)."""
        index = self._index
        assert index is not None
        lines = index.trigger_lines
        k = bisect_left(lines, j)
        return k == len(lines) or lines[k] != j

    def _next_of(self, stream: Stream, j: int) -> int | None:
        """The block line of ``stream``'s line after its block line ``j``, if in the block."""
        mine = self._writer_lines(stream)
        k = bisect_left(mine, j) + 1
        return mine[k] if k < len(mine) else None

    def _fold_run(
        self, block: bytes, stream: Stream, repeat: Repeat, usable: list[Repeat], line: int
    ) -> None:
        """Right after a round of ``repeat`` was folded from its bytes (a one-writer block;
        block line ``line`` follows it), take every next round of the block that would fold the
        same way, at once: the next trigger is its header again, the same repeat (the first of
        ``usable`` whose lines follow), announced as retried by the line before it and ended by
        the line after it. Their lines are then left in the quiet run that follows (counted,
        and the ring's last lines, which read the same raw as parsed), and the rounds are
        folded in one step (:meth:`LineParser.fold_run`). Nothing is done when the stream's
        state is not one a run may be taken in (:meth:`LineParser.run_ready`)."""
        parser = self.parser
        if not parser.run_ready(stream, repeat):
            return
        index = self._index
        assert index is not None
        triggers, trigger_lines = index.triggers, index.trigger_lines
        header, rest = repeat.lines[0], repeat.rest
        n = len(repeat.texts)
        k = bisect_left(trigger_lines, line)
        #: Per round: the block line of the line before its header, and that line's span.
        rounds: list[tuple[int, int, int]] = []
        while k < len(triggers):
            start, at = triggers[k], trigger_lines[k]
            end = start + len(header)
            if block[end : end + 1] != b"\n" or not block.startswith(header, start):
                break
            taken = next((r for r in usable if r.bare and block.startswith(r.rest, end + 1)), None)
            if taken is not repeat:
                break
            after = end + 1 + len(rest)
            stop = block.find(b"\n", after)
            if stop < 0:
                break
            announce = block.rfind(b"\n", 0, start - 1) + 1
            if not parser.round_ok(block[announce : start - 1], block[after:stop]):
                break
            rounds.append((at - 1, announce, start - 1))
            k = bisect_left(trigger_lines, at + n + 1, k)
        while rounds:
            before, announce, end = rounds[-1]
            if parser.fold_run(stream, len(rounds), self._base + before + 1, block[announce:end]):
                self._absorbed = before + n + 2
                return
            rounds.pop()

    def _fold_later(self, repeats: list[Repeat], at: int, line: int) -> bool:
        """In an interleaved block, fold the round of a retry loop whose header is block line
        ``at`` without ending the quiet run that started at block line ``line``: when it is a
        round :meth:`LineParser.fold_later` folds (its writer waits for none of its lines, and
        its line before is a quiet one, which the ring reads as it is in the block). Its
        lines are then taken as a repeat's (:meth:`_repeat`), and the writer's ring takes its
        quiet lines before the header and the round's, cut when it is read."""
        bk = self._bk
        assert bk is not None
        stream = self._streams[self._keys[at]]
        parser = self.parser
        usable = parser.usable(stream, repeats)
        if not usable:
            return False
        found = self._repeat_lines(self._block, stream, usable, at)
        if found is None:
            return False
        repeat, taken = found
        mine = self._writer_lines(stream)
        k = bisect_left(mine, at)
        replayed = self._replayed
        if k == 0:
            return False
        before = mine[k - 1]
        if before in replayed or (before < line and not bk.skimmed_at(before)):
            return False  # the ring's newest line is not the quiet line before
        base = self._base
        announce = self._raw(before)
        linenos = [base + j + 1 for j in (at, *taken)]
        closer = self._line_after(stream, taken[-1])
        items = parser.fold_later(stream, repeat, closer, announce, base + before + 1, linenos)
        if items is None:
            return False
        # The writer's quiet lines since its ring last took any, newest first: those of the
        # run not yet accounted for (all but the rounds'), and the skimmed ones before it.
        low = bisect_left(mine, self._taken.get(id(stream), 0), 0, k)
        mid = bisect_left(mine, line, low, k)
        picked = [j for j in mine[max(mid, k - 2 * RING) : k] if j not in replayed]
        if len(picked) < RING and max(mid, k - 2 * RING) > low:
            picked = self._older_tail(mine, low, mid, k, picked)
        picked = picked[-RING:]
        self.pending.pop(id(stream), None)
        self._taken[id(stream)] = at
        stream.ring.defer_round(self._block, self._end_list(), base, picked, items, parser.style)
        replayed.add(at)
        replayed.update(taken)
        heapq.heappush(self._replayed_heap, at)
        for j in taken:
            heapq.heappush(self._replayed_heap, j)
        return True

    def _older_tail(
        self, mine: list[int], low: int, mid: int, k: int, picked: list[int]
    ) -> list[int]:
        """:meth:`_fold_later`'s ring lines when the newest ones did not make a ring: the
        writer's lines ``mine[mid:k]`` but the rounds', after its skimmed ones of
        ``mine[low:mid]`` (accounted for already)."""
        bk = self._bk
        assert bk is not None
        replayed = self._replayed
        picked = [j for j in mine[mid:k] if j not in replayed]
        stop = mid
        while len(picked) < RING and stop > low:
            start = max(low, stop - 2 * RING)
            picked[:0] = bk.skimmed_of(mine[start:stop])
            stop = start
        return picked

    def _repeat_lines(
        self, block: bytes, stream: Stream, repeats: list[Repeat], at: int
    ) -> tuple[Repeat, list[int]] | None:
        """In an interleaved block, the repeat whose lines after its header (block line
        ``at``) are ``stream``'s next lines, and those lines' block indexes."""
        mine = self._writer_lines(stream)
        first = bisect_left(mine, at) + 1
        ends = self._end_list()
        for repeat in repeats:
            n = len(repeat.texts)
            lines = mine[first : first + n]
            if len(lines) == n and _same_lines(block, ends, lines, repeat.lines):
                return repeat, lines
        return None

    def _line_after(self, stream: Stream, j: int) -> bytes | None:
        """The raw line of ``stream`` after its block line ``j``, if the block holds one."""
        following = self._next_of(stream, j)
        return None if following is None else self._raw(following)

    def _raw(self, j: int) -> bytes:
        """Block line ``j``'s bytes (an interleaved block's), without its newline."""
        assert self._bk is not None
        begin, end = self._bk.span(j)
        return self._block[begin:end]

    def _writer_lines(self, stream: Stream) -> list[int]:
        """The block's line indexes of ``stream``'s lines (under any of its prefixes)."""
        lines = self._by_stream.get(id(stream))
        if lines is None:
            assert self._bk is not None
            bk = self._bk
            parts = [bk.lines_of(i) for i in self._key_ids[id(stream)]]
            if len(parts) == 1:
                lines = parts[0]
            else:
                # each part ascending: one sort of their concatenation merges the runs
                lines = list(chain.from_iterable(parts))
                lines.sort()
            self._by_stream[id(stream)] = lines
        return lines

    # -- quiet runs ---------------------------------------------------------------------
    def _quiet(self, block: bytes, start: int, end: int, line: int, stop: int, lineno: int) -> int:
        if start >= end:
            return lineno
        if self._bk is None:
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
                parser.skip(block, start, probed, n, lineno + n, self._nccl)
                start, lineno, count = probed, lineno + n, count - n
                continue
            start, lineno = parser.feed_bytes(block, start, lineno, quiet=True)
            count -= 1
        if start < end:
            parser.skip(block, start, end, count, lineno + count, self._nccl)
            lineno += count
        return lineno

    def _quiet_demux(
        self, block: bytes, start: int, end: int, line: int, stop: int, lineno: int
    ) -> int:
        """Interleaved writers: each line is the writer's its prefix names."""
        bk = self._bk
        assert bk is not None
        parser, streams = self.parser, self._streams
        keys = self._keys
        counts = bk.counts(line, stop)
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
        bk.skim(line, stop)
        replayed = self._replayed_in(stop)
        for j in replayed:  # counted and kept by the writer's repeat already
            bk.unskim(j)
            counts[keys[j]] -= 1
        if wanting:
            # Only the wanting writers' lines are visited, in file order.
            ends = self._end_list()
            for j in bk.wanted(line, stop, wanting):
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
                    bk.unskim(j)
                    counts[i] -= 1
                if not streams[i].wants_lines():
                    streams[i].settled = True
                    wanting.discard(i)
                    if not wanting:
                        break
        n = stop - line
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
                        nccl = self._nccl_lines(block, start, end, line, self._nccl)
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
    def _nccl_lines(
        block: bytes, start: int, end: int, line: int, first: int | None
    ) -> list[tuple[int, int, int]]:
        """The NCCL lines of ``block[start:end]`` (whose first line is the block's ``line``):
        (line index in the block, start, end). ``first``: the block's first (-1: none, None:
        not known)."""
        out: list[tuple[int, int, int]] = []
        at = find_nccl(block, start, end, first)
        counted, lines = start, line
        while at >= 0:
            line_start = block.rfind(b"\n", start, at) + 1 or start
            lines += block.count(b"\n", counted, line_start)
            counted = line_start
            line_end = block.find(b"\n", at, end)
            line_end = end if line_end < 0 else line_end
            out.append((lines, line_start, line_end))
            at = block.find(NCCL_MARK, line_end + 1, end)
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

    def _end_list(self) -> Sequence[int]:
        """Offsets of the current block's newlines (line ``j`` ends at ``ends[j]``)."""
        assert self._bk is not None
        return self._bk.ends()

    def _take_tails(self) -> None:
        """At the end of a block: every pending stream's last skimmed lines, in one pass,
        deferred to when its ring is read (:meth:`~crashlens.parse.state.Ring.defer_raw`)."""
        keys = self._bk
        assert keys is not None
        pending, taken = self.pending, self._taken
        firsts = [
            taken.get(id(stream), 0) if id(stream) in pending else -1 for stream in self._streams
        ]
        picked: dict[int, list[int]] = {}
        for i, lines in enumerate(keys.tails(firsts)):
            if lines:
                key = id(self._streams[i])
                have = picked.get(key)
                picked[key] = lines if have is None else sorted(have + lines)
        block, base, style = self._block, self._base, self.parser.style
        ends = keys.ends()
        for key, lines in picked.items():
            pending[key].ring.defer_raw(block, ends, base, lines, style)

    def _take_tail(self, stream: Stream, upto: int) -> None:
        """Add ``stream``'s last skimmed block lines before line ``upto`` to its ring."""
        keys = self._bk
        assert keys is not None
        self.pending.pop(id(stream), None)
        first = self._taken.get(id(stream), 0)
        self._taken[id(stream)] = upto
        picked: list[int] = []
        for i in self._key_ids.get(id(stream), ()):
            picked.extend(keys.tail(i, first, upto))
        if not picked:
            return
        picked.sort()
        tail = numbered(self._block, keys.ends(), self._base, picked[-RING:])
        stream.ring.extend_raw(tail, self.parser.style)


def _same_lines(
    block: bytes, ends: Sequence[int], lines: Sequence[int], raws: Sequence[bytes]
) -> bool:
    """Whether block lines ``lines`` (newlines at ``ends``) are ``raws[1:]``, byte for byte:
    compared in place, without cutting each line out of the block."""
    for j, raw in zip(lines, raws[1:], strict=True):
        start = ends[j - 1] + 1
        if ends[j] - start != len(raw) or not block.startswith(raw, start):
            return False
    return True
