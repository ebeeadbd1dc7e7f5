"""Parse one file: demultiplex ranks, assemble tracebacks, detect signals, keep per-rank stats.

Memory is bounded per rank stream (a short ring of recent lines, one open traceback, capped
evidence), never per line, so a log's size does not decide the analyzer's footprint.
"""

from __future__ import annotations

import itertools
import re
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import regex

from crashlens import facts
from crashlens.ingest.prefixes import PrefixStyle, nccl_origin, strip
from crashlens.model import (
    ChildFailure,
    Evidence,
    ExceptionInfo,
    Fact,
    FileResult,
    Hit,
    RankSummary,
    Source,
    SyncMark,
    Traceback,
)
from crashlens.parse.matcher import LineMatcher
from crashlens.parse.text import split_glued, strip_ansi
from crashlens.parse.timestamps import Stamp, monotonic_after_syslog, parse_timestamp
from crashlens.parse.torchrun import SummaryEntry, SummaryReader
from crashlens.parse.traceback import PartialTraceback, TracebackAssembler, is_user_code
from crashlens.rulebase.schema import Detector, Rule, RuleSet

RING = 32
CONTEXT = 3
MAX_HITS_PER_DETECTOR = 20
MAX_EVIDENCE_TEXT = 600
#: A traceback followed by this many more lines of the same rank was handled, not fatal.
HANDLED_AFTER_LINES = 200
#: ... or when it goes on logging: this many timestamped lines, spanning this many seconds.
HANDLED_AFTER_STAMPS = 5
HANDLED_AFTER_SECONDS = 10.0
LAST_LINES = 5
#: Lines to wait for a timestamp to give to findings that had none before them.
UNTIMED_PATIENCE = 2000

_SYSLOG_HOST = regex.compile(
    r"(?:\w{3} +\d+ [\d:.]+|\d{4}-\d\d-\d\dT\S+) (?P<host>[\w\-.]+) kernel: "
)
_HOST_RANKS = regex.compile(r"'(?P<host>[^']+)': \[(?P<ranks>[\d, ]*)\]")
_STEP = regex.compile(r"(?i)\bstep[ =:]+(?P<n>\d+)\b")
_FACT_PROBE = re.compile("|".join(re.escape(t) for t in facts.TRIGGERS))
MAX_FACTS = 200
_EMBEDDED_FRAME = re.compile(r'^\s*File "([^"]*)", line \d+', re.MULTILINE)
_CONTENT_RANK = regex.compile(r"\bRank (?P<r>\d+)\]|\bcomm 0x[0-9a-f]+ rank (?P<n>\d+) nranks")


def _origin(exc: ExceptionInfo) -> str:
    """Where an exception was raised: its innermost frame's code (``none``: no frame shown)."""
    embedded = _EMBEDDED_FRAME.findall(exc.message)
    if embedded:
        # A worker's exception re-raised by the parent: the original traceback says where.
        return "user" if is_user_code(embedded[-1]) else "library"
    if not exc.frames:
        return "none"
    return "user" if exc.frames[-1].user_code else "library"


#: Exceptions a launcher raises to report that a child process failed.
_LAUNCHER_EXCEPTIONS = ("ChildFailedError", "CalledProcessError", "ProcessExitedException")


def _launcher_report(tb: PartialTraceback) -> bool:
    return tb.exceptions[-1].type.rsplit(".", 1)[-1] in _LAUNCHER_EXCEPTIONS


def _last_step(ring: deque[tuple[int, str]], before: int) -> int | None:
    """The step number of the last ``step N`` line before line ``before``, if still in view."""
    for lineno, text in reversed(ring):
        if lineno < before:
            m = _STEP.search(text)
            if m:
                return int(m["n"])
    return None


def _group(tb: PartialTraceback) -> PartialTraceback:
    return tb.twin_of if tb.twin_of is not None else tb


def _stamp_setter(target: _PendingHit | PartialTraceback) -> Callable[[float], None]:
    def settle(t: float) -> None:
        target.stamp = (t, True)

    return settle


def _time_setter(target: _DoneTraceback) -> Callable[[float], None]:
    def settle(t: float) -> None:
        target.time, target.inferred = t, True

    return settle


@dataclass(slots=True)
class _PendingHit:
    rule: Rule
    det: Detector
    fields: dict[str, str]
    lineno: int
    text: str
    stamp: tuple[float | None, bool]
    context: tuple[str, ...]
    stream: _Stream
    tb: PartialTraceback | None = None
    rank_override: int | None = None


@dataclass(slots=True)
class _DoneTraceback:
    """A completed traceback and what its stream printed after it (to tell handled from fatal)."""

    tb: PartialTraceback
    lines_at_end: int
    time: float | None
    inferred: bool
    later: list[float] = field(default_factory=list)
    #: The writer logged a later training step after it (``step 3`` after ``step 2``).
    progressed: bool = False
    #: The last step number its writer logged before it, if the recent lines show one.
    step_before: int | None = None

    def handled(self, stream_lines: int) -> bool:
        """Whether the writer went on working after printing it (so it did not die of it)."""
        if self.progressed or stream_lines - self.lines_at_end > HANDLED_AFTER_LINES:
            return True
        if len(self.later) < HANDLED_AFTER_STAMPS or self.time is None:
            return False
        return self.later[-1] - self.time >= HANDLED_AFTER_SECONDS


@dataclass(slots=True)
class _Stream:
    """One writer's lines inside a file (one rank, or the whole file if unprefixed)."""

    source: Source
    rank: int | None
    local_rank: int | None
    host: str | None
    ring: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=RING))
    assembler: TracebackAssembler = field(default_factory=TracebackAssembler)
    summary: SummaryReader = field(default_factory=SummaryReader)
    lines: int = 0
    first_time: float | None = None
    probe_first: int = 50
    last_stamp: tuple[int, float] | None = None
    tb_done: list[_DoneTraceback] = field(default_factory=list)
    watch: _DoneTraceback | None = None
    #: Findings with no earlier timestamp in their stream, waiting for the next one.
    untimed: list[Callable[[float], None]] = field(default_factory=list)
    untimed_wait: int = 0
    pids: set[int] = field(default_factory=set)


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
    ) -> None:
        self.source = source
        self.rules = rules
        self.matcher = matcher
        self.exc_detectors = rules.exception_detectors()
        self.year = year
        self.style = style
        self.tb_ids = tb_ids
        self.time_override = time_override
        self.streams: dict[tuple[Any, ...], _Stream] = {}
        self.hits: list[_PendingHit] = []
        self.hit_counts: dict[str, int] = {}
        self.per_det: dict[tuple[str, str, int], int] = {}
        self.mono_offset: float | None = None
        self.year_known = False
        self.rank_map: dict[tuple[str, int], int] = {}
        self.facts: list[Fact] = []
        self.sync: list[SyncMark] = []
        self.fact_keys: set[tuple[str, str | None, int | None]] = set()
        self.fact_probe = _FACT_PROBE
        self.lines = 0
        self.last_lineno = 0

    # -- per line -----------------------------------------------------------------------
    def feed(self, lineno: int, raw: str) -> None:
        """Process one physical (or ``\\r``-split) line."""
        for part in split_glued(strip_ansi(raw)):
            self._feed(lineno, part)

    def _feed(self, lineno: int, raw: str) -> None:
        # Counts are of physical lines: tqdm's ``\r``-separated states share one line number.
        new_line = lineno != self.last_lineno
        self.lines += new_line
        self.last_lineno = lineno
        text, prefix = strip(raw, self.style)
        # A stamped console (``crashlens run``, kubectl --timestamps) has its time in a prefix.
        timed = prefix.stamp + text if prefix.stamp else text
        stream = self._stream(prefix.rank, prefix.local_rank, prefix.host)
        if prefix.rank is not None and stream.rank is None:
            stream.rank = prefix.rank
        stream.lines += new_line
        if stream.first_time is None and stream.probe_first > 0:
            stream.probe_first -= 1
            stamp = self._stamp(timed)
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
        if watch is not None and len(watch.later) < HANDLED_AFTER_STAMPS:
            later = self._stamp(timed)
            if later is not None:
                watch.later.append(later)
            if not watch.progressed and stream.lines - watch.lines_at_end <= HANDLED_AFTER_LINES:
                step = _STEP.search(text)
                watch.progressed = step is not None and (
                    watch.step_before is None or int(step["n"]) > watch.step_before
                )
        if self.source.kind == "kernel" and self.mono_offset is None:
            self._learn_monotonic(text)
        if "global_rank_mapping=" in text:
            self._learn_rank_mapping(text)
        if self.fact_probe.search(text):
            self._learn_facts(stream, lineno, text)
        if stream.untimed:
            self._settle_untimed(stream, timed)
            stream.untimed_wait += 1
            if stream.untimed_wait > UNTIMED_PATIENCE:
                stream.untimed.clear()
        stream.summary.feed(lineno, text)
        in_tb = stream.assembler.feed(lineno, text)
        current = stream.assembler.current
        if current is not None and current.stamp is None:
            current.stamp = self._time_of(stream, lineno, timed)
            if current.stamp[0] is None:
                stream.untimed.append(_stamp_setter(current))
        if stream.assembler.done:
            self._complete_tracebacks(stream)
        matches = self.matcher.match(text, self.source.kind)
        if matches:
            for rule, det, found in matches:
                self._add_hit(stream, rule, det, found, lineno, text, in_tb, timed)
        stream.ring.append((lineno, timed))

    def _stream(self, rank: int | None, local: int | None, host: str | None) -> _Stream:
        key: tuple[Any, ...]
        src = self.source
        if local is None and rank is not None and rank == src.rank and host in (None, src.host):
            # ``[rank3]:`` lines in rank 3's own file are the same writer as its plain lines.
            rank, host = None, None
        if local is not None:
            key = ("L", local, host)
        elif rank is not None:
            key = ("R", rank, host)
        else:
            key = ("H", host)
        stream = self.streams.get(key)
        if stream is None:
            stream = _Stream(
                source=src,
                rank=rank if rank is not None else (src.rank if local is None else None),
                local_rank=local if local is not None else src.local_rank,
                host=host or src.host,
            )
            self.streams[key] = stream
        return stream

    def _stamp(self, text: str) -> float | None:
        if self.time_override is not None:
            return self.time_override
        stamp = parse_timestamp(text, self.year)
        if stamp is None:
            return None
        if stamp.has_year and not stamp.monotonic and not self.year_known:
            # Year-less formats elsewhere in this file take the year of its dated lines.
            self.year = time.gmtime(stamp.value).tm_year
            self.year_known = True
        return self._wall(stamp)

    def _wall(self, stamp: Stamp) -> float | None:
        if stamp.monotonic:
            return None if self.mono_offset is None else stamp.value + self.mono_offset
        return stamp.value

    def _learn_facts(self, stream: _Stream, lineno: int, text: str) -> None:
        for key, value in facts.extract(text).items():
            seen = (key, stream.host, stream.rank)
            if seen not in self.fact_keys and len(self.facts) < MAX_FACTS:
                self.fact_keys.add(seen)
                fact = Fact(key, value, self.source.path, lineno, stream.host, stream.rank)
                self.facts.append(fact)

    def _learn_rank_mapping(self, text: str) -> None:
        """DeepSpeed's ``global_rank_mapping={'node-01': [0, 1], ...}``: (host, local) -> rank."""
        tail = text.split("global_rank_mapping=", 1)[1]
        for m in _HOST_RANKS.finditer(tail):
            ranks = [int(r) for r in m["ranks"].split(",") if r.strip().isdigit()]
            for local, rank in enumerate(ranks):
                self.rank_map[(m["host"], local)] = rank

    def _learn_monotonic(self, text: str) -> None:
        mono = monotonic_after_syslog(text)
        if mono is None:
            return
        stamp = parse_timestamp(text, self.year)
        if stamp is not None and not stamp.monotonic:
            self.mono_offset = stamp.value - mono

    def _time_of(self, stream: _Stream, lineno: int, text: str) -> tuple[float | None, bool]:
        """The line's own time, else the nearest earlier time in its stream (inferred)."""
        own = self._stamp(text)
        if own is not None:
            stream.last_stamp = (lineno, own)
            return own, False
        floor = stream.last_stamp[0] if stream.last_stamp else -1
        for prev_no, prev in reversed(stream.ring):
            if prev_no <= floor:
                break
            found = self._stamp(prev)
            if found is not None:
                stream.last_stamp = (prev_no, found)
                return found, True
        if stream.last_stamp is not None:
            return stream.last_stamp[1], True
        return None, True

    # -- fast path: lines nothing needs are counted, not parsed ---------------------------
    def wants_lines(self) -> bool:
        """Whether open state (a traceback, a summary, a pending time) needs the next lines."""
        if not self.streams:
            return True
        for stream in self.streams.values():
            if stream.assembler.current is not None or stream.summary.active:
                return True
            if stream.first_time is None and stream.probe_first > 0:
                return True
            if stream.untimed:
                return True
            watch = stream.watch
            if (
                watch is not None
                and len(watch.later) < HANDLED_AFTER_STAMPS
                and stream.lines - watch.lines_at_end <= HANDLED_AFTER_LINES
            ):
                return True
        return False

    def skip(self, block: bytes, start: int, end: int, count: int, last_lineno: int) -> None:
        """Account for ``count`` quiet lines ``block[start:end]`` ending at ``last_lineno``.

        Only what later stages can ask about is kept: line counts, the last lines (evidence
        context, timestamps to inherit, the rank's last words) and one NCCL pid.
        """
        if count <= 0:
            return
        stream = self._stream(None, None, None)
        self.lines += count
        stream.lines += count
        if not stream.pids:
            at = block.find(b" NCCL ", start, end)
            if at >= 0:
                line_start = block.rfind(b"\n", start, at) + 1
                line_end = block.find(b"\n", at, end)
                origin = nccl_origin(block[line_start:line_end].decode("utf-8", "replace"))
                if origin is not None and origin.pid is not None:
                    stream.pids.add(origin.pid)
                    stream.host = stream.host or origin.host
        tail_start = end - 1
        for _ in range(min(RING, count)):
            tail_start = block.rfind(b"\n", start, tail_start)
            if tail_start < 0:
                tail_start = start - 1
                break
        tail = block[max(tail_start + 1, start) : end - 1].decode("utf-8", "replace")
        lines = tail.split("\n")
        first = last_lineno - len(lines) + 1
        for offset, text in enumerate(lines):
            text = text.rsplit("\r", 1)[-1][:MAX_EVIDENCE_TEXT]
            stream.ring.append((first + offset, strip(text, self.style)[0]))

    # -- hits ---------------------------------------------------------------------------
    def _add_hit(
        self,
        stream: _Stream,
        rule: Rule,
        det: Detector,
        found: Any,
        lineno: int,
        text: str,
        in_tb: bool,
        timed: str,
    ) -> None:
        self.hit_counts[rule.id] = self.hit_counts.get(rule.id, 0) + 1
        key = (rule.id, det.name, id(stream))
        count = self.per_det.get(key, 0)
        if count >= MAX_HITS_PER_DETECTOR:
            return
        self.per_det[key] = count + 1
        fields = {k: v for k, v in found.groupdict().items() if v is not None}
        if self.source.kind == "kernel" and self.mono_offset is None:
            # Seconds since boot: kept so align can put the line on the wall clock later,
            # from a pid the line shares with a timed event elsewhere.
            stamp = parse_timestamp(text, self.year)
            if stamp is not None and stamp.monotonic:
                fields["uptime_s"] = f"{stamp.value:.6f}"
        pending = _PendingHit(
            rule=rule,
            det=det,
            fields=fields,
            lineno=lineno,
            text=text[:MAX_EVIDENCE_TEXT],
            stamp=self._hit_time(stream, lineno, timed, in_tb),
            context=tuple(t[:MAX_EVIDENCE_TEXT] for _, t in list(stream.ring)[-CONTEXT:]),
            stream=stream,
            rank_override=stream.summary.current_rank,
        )
        if in_tb and stream.assembler.current is not None:
            pending.tb = stream.assembler.current
        if pending.stamp[0] is None:
            stream.untimed.append(_stamp_setter(pending))
        self.hits.append(pending)

    def _settle_untimed(self, stream: _Stream, text: str) -> None:
        """Give untimed findings the first later timestamp of their stream (an upper bound).

        A rank that never logged a timestamp before dying (only rank 0 logs steps) still gets
        the time of the first stamped line after its traceback, e.g. c10d's teardown warning.
        """
        later = self._stamp(text)
        if later is None:
            return
        for settle in stream.untimed:
            settle(later)
        stream.untimed.clear()
        stream.untimed_wait = 0

    def _hit_time(
        self, stream: _Stream, lineno: int, text: str, in_tb: bool
    ) -> tuple[float | None, bool]:
        """A line's time; inside a traceback, the traceback's (its lines carry none)."""
        current = stream.assembler.current
        if in_tb and current is not None and current.stamp is not None:
            own = self._stamp(text)
            return (own, False) if own is not None else (current.stamp[0], True)
        return self._time_of(stream, lineno, text)

    def _complete_tracebacks(self, stream: _Stream) -> None:
        for tb in stream.assembler.done:
            start_text = tb.text[0] if tb.text else ""
            when, inferred = tb.stamp or self._time_of(stream, tb.start_line, start_text)
            done = _DoneTraceback(tb, stream.lines, when, inferred)
            done.step_before = _last_step(stream.ring, tb.start_line)
            stream.tb_done.append(done)
            stream.watch = done
            if when is None:
                stream.untimed.append(_time_setter(done))
            self._exception_hits(stream, tb, when, inferred)
        stream.assembler.done.clear()

    def _exception_hits(
        self, stream: _Stream, tb: PartialTraceback, when: float | None, inferred: bool
    ) -> None:
        for rule, det in self.exc_detectors:
            if det.sources is not None and self.source.kind not in det.sources:
                continue
            targets: list[tuple[int, str]]
            if det.origin is not None and _origin(tb.exceptions[-1]) not in det.origin:
                continue
            if det.scope == "traceback":
                final = tb.exceptions[-1]
                targets = [(final.lineno, "\n".join(tb.text))]
                shown = f"{final.type}: {final.message}".split("\n", 1)[0]
            else:
                # Newest first: the exception that escaped is the one that killed the process.
                targets = [(e.lineno, f"{e.type}: {e.message}") for e in reversed(tb.exceptions)]
                shown = ""
            for lineno, target in targets:
                found = self.matcher.search(rule, det, target)
                if found is None:
                    continue
                first_line = shown or target.split("\n", 1)[0]
                self.hit_counts[rule.id] = self.hit_counts.get(rule.id, 0) + 1
                pending = _PendingHit(
                    rule=rule,
                    det=det,
                    fields={k: v for k, v in found.groupdict().items() if v is not None},
                    lineno=lineno,
                    text=first_line[:MAX_EVIDENCE_TEXT],
                    stamp=(when, inferred),
                    context=tuple(t[:MAX_EVIDENCE_TEXT] for t in tb.text[-CONTEXT - 1 : -1]),
                    stream=stream,
                    tb=tb,
                )
                self.hits.append(pending)
                if when is None:
                    stream.untimed.append(_stamp_setter(pending))
                break

    # -- reading a live parser -----------------------------------------------------------
    @property
    def hit_count(self) -> int:
        """How many findings the parser holds so far (it only grows)."""
        return len(self.hits)

    def rules_hit_since(self, count: int) -> set[str]:
        """Ids of the rules with a finding after the first ``count`` ones."""
        return {pending.rule.id for pending in self.hits[count:]}

    def snapshot(self, rule_ids: Collection[str] | None = None) -> list[Hit]:
        """Frozen copies of the findings so far (of ``rule_ids`` only); the parser stays usable.

        Findings inside tracebacks carry no traceback id and no fatal verdict yet: both are
        only known when the writer stops (:meth:`close`).
        """
        return [
            self._freeze(pending, {})
            for pending in self.hits
            if rule_ids is None or pending.rule.id in rule_ids
        ]

    # -- end of file --------------------------------------------------------------------
    def close(self) -> FileResult:
        """Finish every stream and freeze what was found."""
        tracebacks: list[Traceback] = []
        tb_ids: dict[int, tuple[int, bool | None]] = {}
        failures: list[ChildFailure] = []
        ranks: list[RankSummary] = []
        for stream in self.streams.values():
            stream.assembler.close()
            self._complete_tracebacks(stream)
            stream.summary.close()
            # Tracebacks printed together (processes sharing a console) end or go on together.
            # A launcher's own traceback (ChildFailedError...) after a worker's does not make
            # the worker's survivable: it is the launcher reporting that very death.
            workers = [d for d in stream.tb_done if not _launcher_report(d.tb)]
            last_group = _group(workers[-1].tb) if workers else None
            for done in stream.tb_done:
                tb, when, inferred = done.tb, done.time, done.inferred
                last = _group(tb) is last_group or _launcher_report(tb)
                handled = done.handled(stream.lines)
                fatal = (last and not handled) or tb.exceptions[-1].type == "Fatal Python error"
                ident = next(self.tb_ids)
                # For its findings: fatal, survived (handled), or not known (others followed).
                tb_ids[id(tb)] = (ident, True if fatal else (False if handled else None))
                tracebacks.append(
                    Traceback(
                        id=ident,
                        source=self.source,
                        rank=stream.rank,
                        host=stream.host,
                        start_line=tb.start_line,
                        exceptions=tuple(tb.exceptions),
                        text="\n".join(tb.text),
                        time=when,
                        time_inferred=inferred,
                        fatal=fatal,
                    )
                )
            failures.extend(self._failure(stream, e) for e in stream.summary.done)
            self.sync.extend(self._step_marks(stream))
            if stream.host and stream.local_rank is not None and stream.rank is not None:
                self.rank_map.setdefault((stream.host, stream.local_rank), stream.rank)
            ranks.append(self._summary(stream))
        hits = [self._freeze(h, tb_ids) for h in self.hits]
        return FileResult(
            hits,
            tracebacks,
            failures,
            ranks,
            self.lines,
            self.hit_counts,
            assumed_year=None if self.year_known else self.year,
            rank_map=self.rank_map,
            facts=self.facts,
            sync=self.sync,
        )

    def _freeze(self, hit: _PendingHit, tb_ids: dict[int, tuple[int, bool | None]]) -> Hit:
        stream = hit.stream
        rank = hit.rank_override if hit.rank_override is not None else stream.rank
        if rank is None:
            # A message naming its rank ("[Rank 3]", Open MPI "process rank 3"), or srun's
            # "task 3" (srun's task id is the global rank torchrun-less jobs use).
            named = hit.fields.get("rank") or hit.fields.get("tasks", "")
            if named.isdigit():
                rank = int(named)
        host = stream.host or hit.fields.get("host")
        if host is None and self.source.kind == "kernel":
            m = _SYSLOG_HOST.match(hit.text)
            host = m["host"] if m else None
        tb_id, fatal = tb_ids.get(id(hit.tb), (None, None)) if hit.tb is not None else (None, None)
        when, inferred = hit.stamp
        return Hit(
            rule_id=hit.rule.id,
            detector=hit.det.name,
            evidence=Evidence(
                file=self.source.path,
                line=hit.lineno,
                rank=rank,
                host=host,
                time=when,
                time_inferred=inferred,
                text=hit.text,
                context=hit.context,
            ),
            fields=hit.fields,
            traceback_id=tb_id,
            fatal=fatal,
        )

    def _step_marks(self, stream: _Stream) -> list[SyncMark]:
        """Training-step lines among a rank's last lines: every rank finishes step N together.

        Under synchronous data parallelism the step's collective makes "step N" lines of all
        ranks simultaneous, which is what the clock-skew estimate needs. Only the last lines
        are looked at (the ring), so this costs nothing per line.
        """
        if stream.rank is None:
            return []
        marks = []
        for _, text in stream.ring:
            m = _STEP.search(text)
            if m is None:
                continue
            stamp = self._stamp(text)
            if stamp is not None:
                marks.append(SyncMark(f"step {m['n']}", stamp, stream.host, stream.rank))
        return marks

    def _failure(self, stream: _Stream, entry: SummaryEntry) -> ChildFailure:
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
                file=self.source.path,
                line=entry.lineno,
                rank=entry.rank,
                host=entry.fields.get("host"),
                time=entry.time,
                time_inferred=False,
                text=text[:MAX_EVIDENCE_TEXT],
            ),
        )

    def _summary(self, stream: _Stream) -> RankSummary:
        last_time = None
        for _, text in reversed(stream.ring):
            last_time = self._stamp(text)
            if last_time is not None:
                break
        if last_time is None and stream.last_stamp is not None:
            last_time = stream.last_stamp[1]
        return RankSummary(
            rank=stream.rank,
            host=stream.host,
            files={self.source.path},
            lines=stream.lines,
            first_time=stream.first_time,
            last_time=last_time,
            last_lines=[t[:MAX_EVIDENCE_TEXT] for _, t in list(stream.ring)[-LAST_LINES:]],
            last_file=self.source.path,
            last_lineno=stream.ring[-1][0] if stream.ring else 0,
            pids=set(stream.pids),
        )
