"""Parse one file: demultiplex writers, assemble tracebacks, find signals, keep per-rank stats.

:class:`FileParser` routes each line to its writer's :class:`~crashlens.parse.state.Stream`,
its :class:`~crashlens.parse.traceback.TracebackAssembler` and the file's
:class:`~crashlens.parse.hits.HitCollector`; the :class:`~crashlens.parse.clock.Clock` times
them. Memory is bounded per stream, never per line, so a log's size does not decide the
analyzer's footprint.
"""

from __future__ import annotations

import itertools

from crashlens import facts, lazyre
from crashlens.ingest.prefixes import NO_PREFIX, PrefixStyle, key_pattern, nccl_origin, strip
from crashlens.ingest.read import cap_line, strip_ansi
from crashlens.model import (
    CUT_TRACEBACK,
    ChildFailure,
    Evidence,
    Fact,
    FileResult,
    RankSummary,
    Source,
    SyncMark,
    Traceback,
)
from crashlens.parse.clock import UNTIMED_PATIENCE, Clock
from crashlens.parse.fast import FastPath
from crashlens.parse.hits import HitCollector, Verdicts
from crashlens.parse.index import BlockIndex, find_nccl
from crashlens.parse.matcher import LineMatcher
from crashlens.parse.repeat import (
    MAX_REPEAT_LINE_BYTES,
    MAX_REPEAT_LINES,
    Repeat,
    RepeatMemo,
    build,
    fast_forward,
)
from crashlens.parse.scan import MAX_LINE_BYTES, TriggerScanner
from crashlens.parse.state import (
    ERROR_RECORD,
    MAX_EVIDENCE_TEXT,
    RETRY_ANNOUNCED,
    RING,
    STEP,
    DoneTraceback,
    Stream,
    StreamKey,
    launcher_report,
    ring_text,
    spawn_child,
    stamp_setter,
    time_setter,
)
from crashlens.parse.text import split_glued
from crashlens.parse.timestamps import parse_timestamp
from crashlens.parse.torchrun import SummaryEntry
from crashlens.parse.traceback import PartialTraceback, Printed, ends_message
from crashlens.ruletypes import RuleSet

LAST_LINES = 5
MAX_FACTS = 200
#: Final exceptions a traceback is never folded into its predecessor with (each is an end).
_NEVER_FOLDED = ("Fatal Python error", CUT_TRACEBACK)
#: How many of a stream's newest tracebacks a new one is compared with (a retry loop whose
#: message takes different lines after it alternates between a few).
FOLD_WINDOW = 8
_HOST_RANKS = lazyre.compile_regex(r"'(?P<host>[^']+)': \[(?P<ranks>[\d, ]*)\]")
_FACT_PROBE = TriggerScanner(facts.TRIGGERS)
_CONTENT_RANK = lazyre.compile_regex(
    r"\bRank (?P<r>\d+)\]|\bcomm 0x[0-9a-f]+ rank (?P<n>\d+) nranks"
)
_SUMMARY_STARTS = ("Failures:", "Root Cause (first observed failure):")
#: Tracebacks (their first lines, hashed) seen once: the second time, they become a repeat.
MAX_SEEN = 4096


class FileParser:
    """Feed a file's lines in order, then :meth:`close` to get its :class:`FileResult`."""

    def __init__(
        self,
        source: Source,
        rules: RuleSet,
        matcher: LineMatcher,
        *,
        year: int,
        style: PrefixStyle,
        tb_ids: itertools.count[int],
        time_override: float | None = None,
        ceiling: float | None = None,
    ) -> None:
        self.source = source
        self.style = style
        self.tb_ids = tb_ids
        self.clock = Clock(
            year, kernel=source.kind == "kernel", override=time_override, ceiling=ceiling
        )
        self.collector = HitCollector(source, rules, matcher, self.clock)
        self.streams: dict[StreamKey, Stream] = {}
        self.rank_map: dict[tuple[str, int], int] = {}
        self.facts: list[Fact] = []
        self._fact_keys: set[tuple[str, str | None, int | None]] = set()
        self.lines = 0
        self.last_lineno = 0
        #: Physical lines that went through the per-line path (:meth:`feed`); the fast path
        #: only accounts for the others.
        self.fed = 0
        self._fed_at = -1
        self._line_stream: Stream = self._stream(None, None, None)
        self.fast = FastPath(self)
        self.prefixes = key_pattern(style)
        self.memo = RepeatMemo()
        self._seen: set[int] = set()
        #: The line being fed holds no trigger literal (:meth:`feed_raw`).
        self._plain = False
        #: Blank lines fed in a row (a double-spaced paste keeps every second one).
        self._blanks = 0

    # -- per line -----------------------------------------------------------------------
    def feed(self, lineno: int, raw: str) -> None:
        """Process one physical (or ``\\r``-split) line."""
        if lineno != self._fed_at:  # tqdm's ``\r`` states of one line count once
            self.fed, self._fed_at = self.fed + 1, lineno
        if self.style.double_spaced:
            if not raw.strip():
                # every other blank line is a paste's doubled line break; the second of a
                # pair is a blank line of the log's own
                self._blanks += 1
                if self._blanks % 2:
                    return
            else:
                self._blanks = 0
        # Blanks at the end of a line are a paste's or a terminal's, never the program's words.
        for part in split_glued(strip_ansi(raw).rstrip(" \t")):
            self._feed(lineno, part)

    def _feed(self, lineno: int, raw: str) -> None:
        # Counts are of physical lines: tqdm's ``\r``-separated states share one line number.
        new_line = lineno != self.last_lineno
        self.lines += new_line
        self.last_lineno = lineno
        text, prefix = strip(raw, self.style)
        # A stamped console (``crashlens run``, kubectl --timestamps) has its time in a prefix.
        timed = prefix.stamp + text if prefix.stamp else text
        if new_line:
            stream = self._stream(prefix.rank, prefix.local_rank, prefix.host)
            self._line_stream = stream
            if self.fast.pending:
                self.fast.settle(stream, lineno)
        else:
            # A physical line has one writer, the one its first prefix names: the states of a
            # progress bar redrawn after ``\r`` and text glued to it are that writer's.
            stream = self._line_stream
        if prefix.rank is not None and stream.rank is None:
            stream.rank = prefix.rank
        stream.settled = False
        stream.lines += new_line
        self._observe(stream, lineno, text, timed)
        stream.summary.feed(lineno, text)
        in_tb = stream.assembler.feed(lineno, text)
        current = stream.assembler.current
        if current is not None and current.stamp is None:
            self._time_traceback(stream, current, lineno, timed)
        if stream.assembler.done:
            self._complete_tracebacks(stream)
            if not in_tb and stream.watch is not None:
                # The line that closed the traceback is already the writer going on.
                stream.watch.observe(stream.lines, text, self.clock.stamp(timed))
        if not self._plain:
            self.collector.on_line(stream, lineno, text, in_tb, timed)
        stream.ring.append((lineno, timed))

    def _time_traceback(
        self, stream: Stream, current: PartialTraceback, lineno: int, timed: str
    ) -> None:
        """A traceback that starts at line ``lineno``: its time and the line before it."""
        if stream.ring:
            current.prelude = stream.ring[-1][1]
        current.stamp = self.clock.time_of(stream, lineno, timed)
        last = stream.last_stamp
        # Its time is its own when the traceback is stamped, or when the line right before
        # it is the stamped error record that printed it (``logger.exception(...)``,
        # ``logger.warning(..., exc_info=True)``), not some earlier line's.
        current.timed_close = not current.stamp[1] or (
            last is not None
            and last[0] >= lineno - 1
            and ERROR_RECORD.search(current.prelude) is not None
        )
        if current.stamp[0] is None:
            stream.untimed.append(stamp_setter(current))

    def _observe(self, stream: Stream, lineno: int, text: str, timed: str) -> None:
        """What a line tells besides its findings: times, ranks, pids, facts, progress."""
        if stream.first_time is None and stream.probe_first > 0:
            stream.probe_first -= 1
            stamp = self.clock.stamp(timed)
            if stamp is not None:
                stream.first_time = stamp
                stream.last_stamp = (lineno, stamp)
        if stream.rank is None and stream.local_rank is not None and "ank" in text:
            # Only a single writer's stream (one local rank) may learn its rank from content.
            m = _CONTENT_RANK.search(text)
            if m:
                stream.rank = int(m["r"] or m["n"])
        if " NCCL " in text:
            origin = nccl_origin(text)
            if origin is not None and origin.pid is not None:
                stream.pids.add(origin.pid)
                if stream.host is None and origin.host:
                    stream.host = origin.host
        watch = stream.watch
        if watch is not None and watch.watching(stream.lines):
            watch.observe(stream.lines, text, self.clock.stamp(timed))
        self.clock.learn(text)
        if "global_rank_mapping=" in text:
            self.rank_map.update(_rank_mapping(text))
        if not self._plain and _FACT_PROBE.line_starts(text.encode("utf-8", "replace")):
            for key, value in facts.extract(text).items():
                seen = (key, stream.host, stream.rank)
                if seen not in self._fact_keys and len(self.facts) < MAX_FACTS:
                    self._fact_keys.add(seen)
                    self.facts.append(
                        Fact(key, value, self.source.path, lineno, stream.host, stream.rank)
                    )
        if stream.untimed:
            self.clock.settle(stream, timed)

    def _stream(self, rank: int | None, local: int | None, host: str | None) -> Stream:
        src = self.source
        if local is None and rank is not None and rank == src.rank and host in (None, src.host):
            # ``[rank3]:`` lines in rank 3's own file are the same writer as its plain lines.
            rank, host = None, None
        if local is not None:
            key = StreamKey("local", local, host)
        elif rank is not None:
            key = StreamKey("rank", rank, host)
        else:
            key = StreamKey("host", None, host)
        stream = self.streams.get(key)
        if stream is None:
            stream = Stream(
                source=src,
                rank=rank if rank is not None else (src.rank if local is None else None),
                local_rank=local if local is not None else src.local_rank,
                host=host or src.host,
            )
            self.streams[key] = stream
        return stream

    def _complete_tracebacks(self, stream: Stream) -> None:
        for tb in stream.assembler.done:
            start_text = tb.text[0] if tb.text else ""
            when, inferred = tb.stamp or self.clock.time_of(stream, tb.start_line, start_text)
            done = DoneTraceback(tb, stream.lines, when, inferred)
            done.step_before = stream.last_step(tb.start_line)
            self._settle_fold(stream)
            stream.watch = done
            if when is None:
                stream.untimed.append(time_setter(done))
            like = _repeated(stream, done)
            if like is not None:
                stream.fold = (done, like)  # a retry loop's next round, decided by what follows
                continue
            stream.tb_done.append(done)
            self.collector.on_traceback(stream, done)
        stream.assembler.done.clear()

    def _settle_fold(self, stream: Stream) -> None:
        """Decide the traceback that repeated an earlier one: handled (its writer went on), it
        is folded into that one, whose findings and verdict stand for both, and which takes
        its place as the stream's newest; else it is a traceback of its own."""
        if stream.fold is None:
            return
        done, like = stream.fold
        stream.fold = None
        if done.handled(stream.lines):
            _fold_into(stream, like)
            return
        stream.tb_done.append(done)
        self.collector.on_traceback(stream, done)

    # -- fast path: lines nothing needs are counted, not parsed ---------------------------
    def feed_bytes(
        self, block: bytes, pos: int, lineno: int, *, quiet: bool = False
    ) -> tuple[int, int]:
        """Feed the line of ``block`` starting at ``pos``; return the next position and its
        line number. ``quiet``: the line holds no trigger literal (see :meth:`feed_raw`)."""
        end = block.find(b"\n", pos)
        if end < 0:
            end = len(block)
        self.feed_raw(block[pos : min(end, pos + MAX_LINE_BYTES)], lineno + 1, quiet=quiet)
        return end + 1, lineno + 1

    def feed_raw(self, raw: bytes, lineno: int, *, quiet: bool = False) -> None:
        """Feed one physical line given as bytes (cut to :data:`MAX_LINE_BYTES` or not).

        ``quiet``: the fast path's index found no trigger literal in it, so no detector and no
        fact extractor can match it (unless removing terminal markup joins one: then it is
        looked at as any other line).
        """
        self._plain = quiet and b"\x1b" not in raw
        text = cap_line(raw[:MAX_LINE_BYTES].decode("utf-8", "replace"))
        if "\r" in text:
            for part in text.split("\r"):
                if part:
                    self.feed(lineno, part)
        else:
            self.feed(lineno, text)
        self._plain = False
        stream = self._line_stream
        if stream.recording is not None or stream.assembler.current is not None:
            self._record(stream, raw, lineno)

    # -- repeats: a traceback printed again is recognised, not parsed again ----------------
    def _record(self, stream: Stream, raw: bytes, lineno: int) -> None:
        """Keep the raw lines of the traceback ``stream`` is reading; learn them as a repeat
        (:mod:`crashlens.parse.repeat`) when it ends, if they were seen before."""
        cur = stream.assembler.current
        rec = stream.recording
        if rec is not None:
            inside = cur is not None and cur is stream.recording_tb
            if inside and len(rec) < MAX_REPEAT_LINES and len(raw) <= MAX_REPEAT_LINE_BYTES:
                rec.append(raw)
                assert cur is not None
                if cur.exc_line == lineno and cur.exc_type is not None:
                    stream.recording_end = len(rec)
                return
            # It ended (or grew too long to keep): what led to its last exception line so far.
            stream.recording = stream.recording_tb = None
            self._learn(rec[: stream.recording_end])
            if inside:
                return
        if (
            cur is not None
            and cur.start_line == lineno
            and cur.line_count == 1
            and len(raw) <= MAX_REPEAT_LINE_BYTES
        ):
            stream.recording, stream.recording_tb, stream.recording_end = [raw], cur, 0

    def _learn(self, lines: list[bytes]) -> None:
        """Make a repeat of a traceback's first ``lines`` the second time they are seen."""
        if not self.memo.wants(lines):
            return
        seen = hash(tuple(lines))
        if seen not in self._seen:
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            self._seen.add(seen)
            return
        texts: list[str] = []
        bare = True
        for raw in lines:
            if b"\r" in raw or len(raw) >= MAX_LINE_BYTES:
                return
            text = raw.decode("utf-8", "replace")
            if cap_line(text) != text or split_glued(strip_ansi(text)) != (text,):
                return
            text, prefix = strip(text, self.style)
            if prefix.stamp:
                return
            bare = bare and prefix == NO_PREFIX
            texts.append(text)
        repeat = build(lines, texts, self._inert, self._line_detectors, bare=bare)
        if repeat is not None:
            self.memo.add(repeat)

    def _inert(self, text: str) -> bool:
        """Whether a line inside a traceback tells nothing but its text: no time, step, pid,
        rank, fact or launcher summary (so taking it as a repeat changes nothing else)."""
        return (
            parse_timestamp(text, self.clock.year) is None
            and STEP.search(text) is None
            and " NCCL " not in text
            and "global_rank_mapping=" not in text
            and _CONTENT_RANK.search(text) is None
            and text.strip() not in _SUMMARY_STARTS
            and not _FACT_PROBE.line_starts(text.encode("utf-8", "replace"))
        )

    def _line_detectors(self, text: str) -> tuple[tuple[str, str], ...]:
        found = self.collector.matcher.match(text, self.source.kind)
        return tuple((rule.id, det.name) for rule, det, _ in found)

    def repeats(self, header: bytes) -> list[Repeat] | None:
        """The repeats whose header line is ``header`` (raw), if any."""
        return self.memo.get(header)

    def usable(self, stream: Stream, repeats: list[Repeat]) -> list[Repeat]:
        """Of ``repeats``, those ``stream`` may take now: it is between tracebacks and not in
        a launcher summary, and their lines would add no finding."""
        if stream.assembler.current is not None or stream.summary.active:
            return []
        capped = self.collector.capped
        return [r for r in repeats if all(capped(stream, *d) for d in r.detectors)]

    def replay(self, stream: Stream, repeat: Repeat, linenos: list[int]) -> None:
        """Take ``repeat``'s lines as lines ``linenos`` of ``stream`` (the header's first), as
        the per-line path would: they are inert (:func:`~crashlens.parse.repeat.build`), so
        all they do is count, start the traceback, take its time and fill the ring."""
        header = linenos[0]
        self._line_stream = stream
        stream.settled = False
        if self.fast.pending:
            self.fast.settle(stream, header)
        n = len(linenos)
        self.lines += n
        self.last_lineno = linenos[-1]
        stream.lines += 1  # the rest once the traceback has its time
        if stream.first_time is None and stream.probe_first > 0:
            stream.probe_first = max(0, stream.probe_first - n)
        self._wait_untimed(stream, 1)
        stream.assembler.feed(header, repeat.header)
        current = stream.assembler.current
        assert current is not None
        self._time_traceback(stream, current, header, repeat.header)
        stream.lines += n - 1
        ring = stream.ring
        ring.append((header, repeat.header))
        for item in zip(linenos[1:], repeat.texts, strict=True):
            ring.append(item)
        self._wait_untimed(stream, n - 1)
        fast_forward(repeat, stream.assembler, linenos)

    def fold_round(
        self,
        stream: Stream,
        repeat: Repeat,
        closer: bytes | None,
        linenos: list[int],
        *,
        fed: bool = False,
    ) -> bool:
        """Take ``repeat``'s lines (at ``linenos``, the header's first; ``closer``: the raw
        line of the stream after them, if in view) as one more round of a retry loop when that
        is what the per-line path would make of them: announced as retried by the line before,
        ended by the next line (another record), and the same as a traceback of the stream it
        survived, into which it is folded. Then nothing is assembled; the lines count and fill
        the ring. False: not such a round (nothing changed but what the per-line path would
        have changed first: the ring's skimmed lines, the stream's time cache, the round
        before's fold).

        ``fed``: the caller feeds ``closer`` (a quiet line) right after, as the per-line path
        would have fed it to end the round: then a closer of progress-bar states (``\r``)
        whose first state ends the message folds too, when no earlier traceback of the stream
        is still watching its lines (the first state is then read alike, the round open or
        not: it ends the message, then is a line of its own)."""
        closed = repeat.closed
        if closed is None or closer is None:
            return False
        if (
            fed
            and stream.watch is not None
            and stream.watch.watching(stream.lines + len(linenos) + 1)
        ):
            return False
        header = linenos[0]
        if self.fast.pending:
            self.fast.settle(stream, header)  # the ring's skimmed lines, as replay's first step
        if (
            (stream.fold is not None and not stream.fold[0].handled(stream.lines))
            or not stream.ring
            or closed.final in _NEVER_FOLDED
            or not RETRY_ANNOUNCED.search(stream.ring[-1][1])
            or not self._ends_message(closer, bars=fed)
        ):
            return False
        n = len(linenos)
        self._settle_fold(stream)  # the round before, handled already: as its end would
        like = _fold_target(stream, closed.printed, stream.lines + n)
        if like is None or self.clock.time_of(stream, header, repeat.header)[0] is None:
            return False
        self._line_stream = stream
        stream.settled = False
        self.lines += n
        self.last_lineno = linenos[-1]
        if stream.first_time is None and stream.probe_first > 0:
            stream.probe_first = max(0, stream.probe_first - n)
        stream.lines += n
        self._wait_untimed(stream, n)
        ring = stream.ring
        ring.append((header, repeat.header))
        for item in zip(linenos[1:], repeat.texts, strict=True):
            ring.append(item)
        stream.watch = None  # the round's own watch, done with at once (it was retried)
        _fold_into(stream, like)
        return True

    def run_ready(self, stream: Stream, repeat: Repeat) -> bool:
        """Whether, right after a round of ``repeat`` was folded (:meth:`fold_round`), the
        stream's next rounds of it may be folded in bulk (:meth:`fold_run`), their lines
        accounted as quiet ones: nothing of its state waits for its lines, the traceback they
        fold into is its newest, the clock reads a line the same whenever it is read (no
        override, the year known), and each line of the repeat reads the same from the ring
        raw as parsed (no longer than the ring keeps)."""
        closed = repeat.closed
        if closed is None or not stream.tb_done:
            return False
        like = stream.tb_done[-1]
        return (
            self.clock.override is None
            and self.clock.year_known
            and stream.fold is None
            and stream.last_stamp is not None
            and not stream.wants_lines()
            and like.tb.twin_of is None
            and not like.tb.twin_exceptions
            and like.printed == closed.printed
            and max(map(len, repeat.lines)) <= MAX_EVIDENCE_TEXT
        )

    def round_ok(self, announce: bytes, closer: bytes) -> bool:
        """Whether a round of a retry loop whose line before is ``announce`` and line after is
        ``closer`` (raw) folds as :meth:`fold_round` folds one: announced as retried (as the
        ring reads that line) and ended by the next record."""
        return self._announced(announce, closer) is not None

    def _announced(self, announce: bytes, closer: bytes) -> str | None:
        """The ring's text of ``announce`` when a round between it and ``closer`` folds
        (:meth:`round_ok`); None when it does not. A closer of progress-bar states is read by
        its first state, as the per-line path reads it: the rounds folded here are of a
        stream nothing watches (:meth:`run_ready`, :meth:`fold_later`), so the bar left in
        the quiet run is then only a line, like every other bar the fast path passes over."""
        text = ring_text(announce, self.style)
        if RETRY_ANNOUNCED.search(text) is None or not self._ends_message(closer, bars=True):
            return None
        return text

    def fold_run(self, stream: Stream, count: int, lineno: int, announce: bytes) -> bool:
        """Fold ``count`` more rounds (each :meth:`round_ok`, after a round :meth:`run_ready`
        was true for) into the stream's newest traceback, as :meth:`fold_round` would one by
        one; their lines are counted and kept by the fast path as quiet ones. ``announce``: the
        line before the last round's header (line ``lineno``), whose time the stream's clock
        takes from there. False, and nothing done, when that line has no time."""
        stamp = self.clock.stamp(ring_text(announce, self.style))
        if stamp is None:
            return False
        stream.last_stamp = (lineno, stamp)
        stream.tb_done[-1].repeats += count
        stream.settled = False
        self._line_stream = stream
        return True

    def fold_later(
        self,
        stream: Stream,
        repeat: Repeat,
        closer: bytes | None,
        announce: bytes,
        lineno: int,
        linenos: list[int],
    ) -> list[tuple[int, str]] | None:
        """Fold ``repeat``'s lines (at ``linenos``; ``closer``: the stream's raw line after
        them) as :meth:`fold_round` would, before the quiet lines of other writers printed
        among the stream's are accounted for: when nothing of the stream waits for its lines
        and the round folds whatever it has printed since (no round before it undecided, the
        traceback it folds into handled for good: announced as retried or followed by a
        later step), the clock reads a line alike whenever it is read, and ``announce`` (the
        stream's quiet line before the header, line ``lineno``, which the ring holds then)
        announced the retry and has a time. Then the round's lines as the ring is to take
        them after the stream's quiet lines before it; None (and nothing done) otherwise."""
        closed = repeat.closed
        if (
            closed is None
            or closer is None
            or stream.fold is not None
            or closed.final in _NEVER_FOLDED
            or self.clock.override is not None
            or not self.clock.year_known
            or stream.wants_lines()
        ):
            return None
        like = _newest(stream, closed.printed)
        if like is None or not (like.retried or like.progressed):
            return None
        text = self._announced(announce, closer)
        if text is None:
            return None
        stamp = self.clock.stamp(text)
        if stamp is None:
            return None
        n = len(linenos)
        self._line_stream = stream
        stream.settled = False
        self.lines += n
        self.last_lineno = linenos[-1]
        stream.lines += n
        stream.last_stamp = (lineno, stamp)
        stream.watch = None  # the round's own watch, done with at once (it was retried)
        _fold_into(stream, like)
        return [(linenos[0], repeat.header), *zip(linenos[1:], repeat.texts, strict=True)]

    def _ends_message(self, raw: bytes, *, bars: bool = False) -> bool:
        """Whether the raw line ``raw`` ends a traceback's one-line message as the assembler
        would see it: another record (a timestamp, a progress bar, NCCL's). ``bars``: a line
        of ``\r``-separated states is fed state by state, and its first state decides."""
        if not raw or b"\x1b" in raw or b"Traceback" in raw:
            return False
        text = raw[:MAX_LINE_BYTES].decode("utf-8", "replace")
        if "\r" in text:
            if not bars:
                return False
            text = next((part for part in text.split("\r") if part), "")
        parts = split_glued(text.rstrip(" \t"))
        if len(parts) != 1:
            return False
        text, _ = strip(parts[0], self.style)
        return ends_message(text)

    @staticmethod
    def _wait_untimed(stream: Stream, lines: int) -> None:
        """What :meth:`Clock.settle` does with ``lines`` lines that have no time."""
        for _ in range(lines):
            if not stream.untimed:
                return
            stream.untimed_wait += 1
            if stream.untimed_wait > UNTIMED_PATIENCE:
                stream.untimed.clear()

    def glance(self, stream: Stream, raw: bytes, lineno: int) -> None:
        """Read of a quiet line of ``stream`` only what its open state waits for
        (:meth:`Stream.observing_only`): a first timestamp, the time untimed findings take,
        what tells a traceback handled. The line counts as the stream's now; the caller
        accounts for it as quiet (and takes it off ``stream.lines`` first)."""
        stream.lines += 1
        first = True
        for part in raw[:MAX_LINE_BYTES].decode("utf-8", "replace").split("\r"):
            if not part:
                continue
            text, prefix = strip(part, self.style) if first else (part, None)
            first = False
            timed = prefix.stamp + text if prefix is not None and prefix.stamp else text
            stamp = self.clock.stamp(timed)
            if stream.first_time is None and stream.probe_first > 0:
                stream.probe_first -= 1
                if stamp is not None:
                    stream.first_time = stamp
                    stream.last_stamp = (lineno, stamp)
            watch = stream.watch
            if watch is not None and watch.watching(stream.lines):
                watch.observe(stream.lines, text, stamp)
            if stream.untimed:
                self.clock.settle(stream, timed)

    def take(self, block: bytes, index: BlockIndex, lineno: int) -> int:
        """Parse a block of whole lines on the fast path (see :mod:`crashlens.parse.fast`);
        return the number of its last line."""
        return self.fast.take(block, index, lineno)

    def default_stream(self) -> Stream:
        """The stream of lines with no launcher prefix."""
        return self._stream(None, None, None)

    def stream_of(self, rank: int | None, local: int | None, host: str | None) -> Stream:
        """The stream of the writer a prefix names (rank learnt from it too)."""
        stream = self._stream(rank, local, host)
        if rank is not None and stream.rank is None:
            stream.rank = rank
        return stream

    def skip(
        self,
        block: bytes,
        start: int,
        end: int,
        count: int,
        last_lineno: int,
        nccl: int | None = None,
    ) -> None:
        """Account for ``count`` quiet lines ``block[start:end]`` ending at ``last_lineno``;
        ``nccl``: where the block's first NCCL line is (-1: none, None: not known).

        Only what later stages can ask about is kept: line counts, the last lines (evidence
        context, timestamps to inherit, the rank's last words) and one NCCL pid.
        """
        if count <= 0:
            return
        stream = self._stream(None, None, None)
        self.lines += count
        stream.lines += count
        self.last_lineno = last_lineno
        if not stream.pids:
            at = find_nccl(block, start, end, nccl)
            if at >= 0:
                line_start = block.rfind(b"\n", start, at) + 1 or start
                line_end = block.find(b"\n", at, end)
                stream.learn_pid(block[line_start:line_end])
        stream.remember_tail(block, start, end, min(RING, count), last_lineno, self.style)

    # -- end of file --------------------------------------------------------------------
    def close(self) -> FileResult:
        """Finish every stream and freeze what was found."""
        tracebacks: list[Traceback] = []
        verdicts: Verdicts = {}
        failures: list[ChildFailure] = []
        ranks: list[RankSummary] = []
        sync: list[SyncMark] = []
        #: One text for the tracebacks a writer repeated (pickled once when sent back).
        texts: dict[tuple[str, ...], str] = {}
        for stream in self.streams.values():
            _read_last_words(stream)
            if stream.ring and stream.assembler.current is None:
                stream.assembler.cut_header(*stream.ring[-1])
            stream.assembler.close()
            self._complete_tracebacks(stream)
            self._settle_fold(stream)
            stream.summary.close()
            for done, fatal, handled in stream.verdicts():
                ident = next(self.tb_ids)
                verdicts[id(done.tb)] = (ident, True if fatal else (False if handled else None))
                tracebacks.append(_traceback(ident, stream, done, fatal, texts))
            failures.extend(_failure(self.source, e) for e in stream.summary.done)
            sync.extend(_step_marks(stream, self.clock))
            if stream.host and stream.local_rank is not None and stream.rank is not None:
                self.rank_map.setdefault((stream.host, stream.local_rank), stream.rank)
            ranks.append(_summary(stream, self.clock))
        return FileResult(
            [self.collector.freeze(h, verdicts) for h in self.collector.pending],
            tracebacks,
            failures,
            ranks,
            self.lines,
            assumed_year=None if self.clock.year_known else self.clock.year,
            rank_map=self.rank_map,
            facts=self.facts,
            sync=sync,
            fed_lines=self.fed,
        )


def _read_last_words(stream: Stream) -> None:
    """Offer the traceback assembler the last lines of a writer that showed no traceback.

    The fast path reads whole only the lines a trigger flags and skims the rest; a final
    exception line standing alone whose class says neither "Error" nor "Exception"
    (``requests.exceptions.ConnectTimeout: ...``) flags nothing. How a process ended is in its
    last lines, so a writer with no traceback yet has its unread ones read as every line is
    on the slow path, and both paths find the same ending. (A writer with one has an ending
    already, and its retry rounds were folded without the assembler seeing them.)
    """
    asm = stream.assembler
    if asm.current is not None or asm.done or stream.tb_done or stream.fold:
        return
    seen = asm.last_line
    for lineno, text in stream.ring.last(RING):
        if lineno > seen:
            asm.feed(lineno, text)


def _step_marks(stream: Stream, clock: Clock) -> list[SyncMark]:
    """Training-step lines among a rank's last lines: every rank finishes step N together.

    Under synchronous data parallelism the step's collective makes "step N" lines of all
    ranks simultaneous, which is what the clock-skew estimate needs. Only the last lines
    are looked at (the ring), so this costs nothing per line.
    """
    if stream.rank is None:
        return []
    marks = []
    for _, text in stream.ring:
        m = STEP.search(text)
        if m is None:
            continue
        stamp = clock.stamp(text)
        if stamp is not None:
            marks.append(SyncMark(f"step {m['n']}", stamp, stream.host, stream.rank))
    return marks


def _summary(stream: Stream, clock: Clock) -> RankSummary:
    path = stream.source.path
    return RankSummary(
        rank=stream.rank,
        host=stream.host,
        files={path},
        lines=stream.lines,
        first_time=stream.first_time,
        last_time=clock.last_time(stream),
        last_lines=[t[:MAX_EVIDENCE_TEXT] for _, t in stream.ring.last(LAST_LINES)],
        last_file=path,
        last_lineno=stream.ring[-1][0] if stream.ring else 0,
        pids=set(stream.pids),
    )


def _rank_mapping(text: str) -> dict[tuple[str, int], int]:
    """DeepSpeed's ``global_rank_mapping={'node-01': [0, 1], ...}``: (host, local) -> rank."""
    tail = text.split("global_rank_mapping=", 1)[1]
    out = {}
    for m in _HOST_RANKS.finditer(tail):
        ranks = [int(r) for r in m["ranks"].split(",") if r.strip().isdigit()]
        for local, rank in enumerate(ranks):
            out[(m["host"], local)] = rank
    return out


def _traceback(
    ident: int, stream: Stream, done: DoneTraceback, fatal: bool, texts: dict[tuple[str, ...], str]
) -> Traceback:
    tb = done.tb
    lines = tuple(tb.text)
    text = texts.get(lines)
    if text is None:
        text = texts[lines] = "\n".join(lines)
    child = spawn_child(tb)
    # spawn's parent printed its child's traceback: the writer's rank is not the child's
    rank = stream.rank if child is None else None
    return Traceback(
        id=ident,
        source=stream.source,
        rank=rank,
        host=stream.host,
        start_line=tb.start_line,
        exceptions=tuple(tb.exceptions),
        text=text,
        time=done.time,
        time_inferred=done.inferred,
        fatal=fatal,
        repeats=done.repeats,
        spawn_index=child,
    )


def _repeated(stream: Stream, done: DoneTraceback) -> DoneTraceback | None:
    """The recent traceback of the stream that ``done`` prints again, if its writer survived
    it: ``done`` is then a retry loop's next round, which may be folded into it. Only a plain
    traceback of one process is (no other process's printed among it, no launcher report, no
    fatal error), and only when no line finding points into it."""
    tb = done.tb
    if (
        tb.line_hits
        or tb.twins
        or tb.twin_of is not None
        or tb.twin_exceptions
        or tb.exceptions[-1].type in _NEVER_FOLDED
        or launcher_report(tb)
    ):
        return None
    return _fold_target(stream, done.printed, stream.lines)


def _fold_target(stream: Stream, printed: Printed, lines: int) -> DoneTraceback | None:
    """The newest of the stream's recent tracebacks that prints ``printed``, if its writer
    survived it (the stream at ``lines`` lines): a round printing it is folded into that one."""
    like = _newest(stream, printed)
    return like if like is not None and like.handled(lines) else None


def _newest(stream: Stream, printed: Printed) -> DoneTraceback | None:
    """The newest of the stream's recent tracebacks that prints ``printed``."""
    for like in reversed(stream.tb_done[-FOLD_WINDOW:]):
        if like.tb.twin_of is None and not like.tb.twin_exceptions and like.printed == printed:
            return like
    return None


def _fold_into(stream: Stream, like: DoneTraceback) -> None:
    """One more handled round of ``like``, which now stands where the loop ended."""
    like.repeats += 1
    if stream.tb_done[-1] is not like:
        stream.tb_done.remove(like)
        stream.tb_done.append(like)


def _failure(source: Source, entry: SummaryEntry) -> ChildFailure:
    text = " ".join(f"{k}: {v}" for k, v in entry.fields.items() if k != "traceback")
    return ChildFailure(
        rank=entry.rank,
        local_rank=entry.local_rank,
        host=entry.fields.get("host"),
        exitcode=entry.exitcode,
        pid=entry.pid,
        time=entry.time,
        message="\n".join(entry.message)[:2000],
        root_cause=entry.root_cause,
        evidence=Evidence(
            file=source.path,
            line=entry.lineno,
            rank=entry.rank,
            host=entry.fields.get("host"),
            time=entry.time,
            time_inferred=False,
            text=text[:MAX_EVIDENCE_TEXT],
        ),
    )
