"""What the parser keeps per writer: the stream, its pending findings, its done tracebacks.

A file holds one writer, or several interleaved behind launcher prefixes; each gets a
:class:`Stream` under a typed :class:`StreamKey`. Memory is bounded per stream (a short ring
of recent lines, one open traceback, capped findings), never per line.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from crashlens import lazyre
from crashlens.ingest.prefixes import PrefixStyle, nccl_origin, strip
from crashlens.model import CUT_TRACEBACK, Source
from crashlens.parse.torchrun import SummaryReader
from crashlens.parse.traceback import PartialTraceback, Printed, TracebackAssembler
from crashlens.ruletypes import Detector, Rule

RING = 32
#: Characters of a line kept as evidence, context or last words (in the ring and in findings).
MAX_EVIDENCE_TEXT = 600
#: A traceback followed by this many more lines of the same writer was handled, not fatal.
HANDLED_AFTER_LINES = 200
#: ... or when it goes on logging: this many timestamped lines, spanning this many seconds.
HANDLED_AFTER_STAMPS = 5
HANDLED_AFTER_SECONDS = 10.0
#: ... or when any later line of its writer is stamped this long after it: the process outlived
#: it (a teardown after a real crash follows within seconds, not a minute). Only when the
#: traceback's time is its own (its line is stamped, or the stamped error record right before
#: it printed it): an inferred time from far above is a lower bound that proves nothing.
HANDLED_AFTER_GAP_S = 60.0
#: A log record at a level whose handlers print the traceback of the exception being handled.
ERROR_RECORD = lazyre.compile_regex(r"\b(?:ERROR|WARNING|WARN|CRITICAL|EXCEPTION|FATAL)\b")
#: The line before a traceback announcing a retry (``logger.exception("... retrying")``): the
#: writer caught it and went on. Not "giving up after 3 retries": that one is final.
RETRY_ANNOUNCED = lazyre.compile_regex(
    r"(?i)\bretrying\b|\bwill (?:be )?retr(?:y|ied)\b|\bretry in \d"
)
#: CPython's report of an exception it cannot raise (PyErr_WriteUnraisable: "Exception
#: ignored in: <object>", 3.13's "Exception ignored while ..." / "... on calling ..."; atexit's
#: "Error in atexit._run_exitfuncs:" before 3.10), printed right before its traceback.
UNRAISABLE = lazyre.compile_regex(
    r"\s{0,4}(?:Exception ignored (?:in|on|while)\b|Error in atexit\._run_exitfuncs:)"
)
#: threading's report of an exception that ended a thread other than the main one
#: (Lib/threading.py excepthook: "Exception in thread <name>:", 3.10+ "... <name> (<target>):").
THREAD_EXCEPTION = lazyre.compile_regex(r"\s{0,4}Exception in thread [^\n]{1,200}:\s*$")
#: A training step a line logs (``step 120``, ``Step: 3``, ``step=40``); not a
#: percentage (tqdm's ``step: 100%|...``, a bar that redraws, and is closed, as a process exits).
STEP = lazyre.compile_regex(r"(?i)\bstep[ =:]+(?P<n>\d+)\b(?!\s?%)")
#: Exceptions a launcher raises to report that a child process failed.
LAUNCHER_EXCEPTIONS = (
    "ChildFailedError",
    "CalledProcessError",
    "ProcessExitedException",
    "ProcessRaisedException",
)
#: torch.multiprocessing.spawn's report of a child's exception (spawn.py ``join``): the child's
#: traceback follows this line, inside the parent's ProcessRaisedException (a bare Exception
#: before torch 1.5). The number is the child's process index, its local rank.
SPAWN_CHILD = lazyre.compile_regex(
    r"-- Process (?P<index>\d+) terminated with the following error:\s*$"
)


class StreamKey(NamedTuple):
    """Who wrote a line: a local rank (and host), else a global rank, else just a host."""

    by: Literal["local", "rank", "host"]
    number: int | None
    host: str | None


def numbered(
    block: bytes, ends: Sequence[int], base: int, lines: list[int]
) -> list[tuple[int, bytes]]:
    """Lines ``lines`` of ``block`` (whose newlines are at ``ends``) with their file line
    numbers (the block's first line is ``base + 1``), for a ring."""
    return [(base + j + 1, block[ends[j - 1] + 1 if j else 0 : ends[j]]) for j in lines]


def ring_text(raw: bytes, style: PrefixStyle) -> str:
    """What a ring keeps of a quiet line given raw (:meth:`Ring.extend_raw`) once it is read:
    its last ``\r`` state, cut to :data:`MAX_EVIDENCE_TEXT`, prefixes stripped (a stamp
    prefix kept before the text)."""
    decoded = raw.decode("utf-8", "replace").rsplit("\r", 1)[-1][:MAX_EVIDENCE_TEXT]
    decoded, prefix = strip(decoded, style)
    return prefix.stamp + decoded if prefix.stamp else decoded


class Ring:
    """A writer's last :data:`RING` lines as ``(lineno, text)``, oldest first.

    Quiet lines the fast path only skims arrive raw (bytes, prefix still on) and most are
    pushed out again unread; each is decoded and stripped only when it is read. A block's
    tail arrives deferred (:meth:`defer_raw`): its lines are cut from the block only when the
    ring is read, and never when the writer's next block brings a whole ring of newer ones.
    """

    __slots__ = ("_after", "_lazy", "_lines", "_style")

    def __init__(self) -> None:
        self._lines: deque[tuple[int, str | bytes]] = deque(maxlen=RING)
        self._style = PrefixStyle()
        #: A deferred tail, newer than ``_lines``: a block, its newline offsets, the file line
        #: number before its first line and the block lines (ascending).
        self._lazy: tuple[bytes, Sequence[int], int, list[int]] | None = None
        #: Parsed lines newer than the deferred tail (:meth:`defer_round`).
        self._after: list[tuple[int, str]] = []

    def append(self, item: tuple[int, str]) -> None:
        """Add a parsed line (its text already stripped of launcher prefixes)."""
        self._flush()
        self._lines.append(item)

    def extend_raw(self, items: Iterable[tuple[int, bytes]], style: PrefixStyle) -> None:
        """Add quiet lines, oldest first, as they are in the file."""
        self._flush()
        self._style = style
        self._lines.extend(items)

    def defer_raw(
        self, block: bytes, ends: Sequence[int], base: int, lines: list[int], style: PrefixStyle
    ) -> None:
        """Add block lines ``lines`` (ascending; line ``j`` ends at ``ends[j]`` and is file
        line ``base + j + 1``) as :meth:`extend_raw` would, without cutting them yet."""
        self.defer_round(block, ends, base, lines, [], style)

    def defer_round(
        self,
        block: bytes,
        ends: Sequence[int],
        base: int,
        lines: list[int],
        items: list[tuple[int, str]],
        style: PrefixStyle,
    ) -> None:
        """:meth:`defer_raw` of ``lines``, then :meth:`append` of each of ``items`` (a
        repeated traceback's parsed lines), all cut and added only when the ring is read."""
        if len(lines) + len(items) >= RING:
            # all pushed out by the new ones (the deferred ones too)
            self._lines.clear()
            self._lazy, self._after = None, []
        else:
            self._flush()
        self._style = style
        self._lazy = (block, ends, base, lines[-RING:]) if lines else None
        self._after = items

    def _flush(self) -> None:
        lazy = self._lazy
        if lazy is not None:
            self._lazy = None
            self._lines.extend(numbered(*lazy))
        if self._after:
            self._lines.extend(self._after)
            self._after = []

    def _line(self, index: int) -> tuple[int, str]:
        lineno, text = self._lines[index]
        if isinstance(text, bytes):
            text = ring_text(text, self._style)
            self._lines[index] = (lineno, text)
        return lineno, text

    def items(self) -> list[tuple[int, str]]:
        """The lines, oldest first."""
        self._flush()
        return [self._line(i) for i in range(len(self._lines))]

    def last(self, n: int) -> list[tuple[int, str]]:
        """The last ``n`` lines, oldest first."""
        self._flush()
        size = len(self._lines)
        return [self._line(i) for i in range(max(0, size - n), size)]

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return iter(self.items())

    def __reversed__(self) -> Iterator[tuple[int, str]]:
        self._flush()
        for i in range(len(self._lines) - 1, -1, -1):
            yield self._line(i)

    def before(self, lineno: int) -> Iterator[tuple[int, str]]:
        """The lines before line ``lineno``, newest first (later ones are not decoded)."""
        self._flush()
        lines = self._lines
        for i in range(len(lines) - 1, -1, -1):
            if lines[i][0] < lineno:
                yield self._line(i)

    def __len__(self) -> int:
        self._flush()
        return len(self._lines)

    def __getitem__(self, index: int) -> tuple[int, str]:
        self._flush()
        return self._line(index)


#: Bytes before a quiet range's end split at once for its last lines (:meth:`remember_tail`).
TAIL_WINDOW = 8192


@dataclass(slots=True)
class PendingHit:
    """A finding whose time, rank or fatal verdict may still be settled by later lines."""

    rule: Rule
    det: Detector
    fields: dict[str, str]
    lineno: int
    text: str
    stamp: tuple[float | None, bool]
    context: tuple[str, ...]
    stream: Stream
    tb: PartialTraceback | None = None
    rank_override: int | None = None


def _at_exit(tb: PartialTraceback) -> bool:
    """Whether ``tb`` was raised by a weakref finalizer the interpreter ran at exit (its
    outermost frame is weakref's ``_exitfunc``): CPython prints it with no line before it
    and exits as it would have, so the program had already ended."""
    frames = tb.exceptions[0].frames if tb.exceptions else tb.frames
    return (
        bool(frames) and frames[0].function == "_exitfunc" and frames[0].file.endswith("weakref.py")
    )


def _thread_cancelled(tb: PartialTraceback) -> bool:
    """Whether ``tb`` is a thread other than the main one stopped by a cancellation: threading
    printed it ("Exception in thread <name>:") and every exception it shows is a
    ``...CancelledError`` (TensorFlow's queue runners when the session closes, asyncio's and
    concurrent.futures' tasks when their loop or pool shuts down). The thread was told to stop,
    so the process did not die of it; a thread's other exceptions are judged as any other. A
    log cut inside the chain is judged on what it shows."""
    if THREAD_EXCEPTION.match(tb.prelude) is None:
        return False
    shown = [e.type for e in tb.exceptions if e.type != CUT_TRACEBACK]
    return bool(shown) and all(t.rsplit(".", 1)[-1] == "CancelledError" for t in shown)


@dataclass(slots=True)
class DoneTraceback:
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
    #: Identical handled tracebacks printed after it, folded into it.
    repeats: int = 0
    #: What it prints (:meth:`PartialTraceback.printed`), what a later round is compared with.
    printed: Printed = field(init=False)
    #: The line before it announced a retry: handled, whatever follows.
    retried: bool = field(init=False)
    #: The line before it is the interpreter's "Exception ignored in: <object>": an exception
    #: it could not raise (in ``__del__``, a callback, at exit) and printed and went on from.
    ignored: bool = field(init=False)

    def __post_init__(self) -> None:
        self.printed = self.tb.printed()
        self.retried = RETRY_ANNOUNCED.search(self.tb.prelude) is not None
        self.ignored = (
            UNRAISABLE.match(self.tb.prelude) is not None
            or _at_exit(self.tb)
            or _thread_cancelled(self.tb)
        )

    def handled(self, stream_lines: int) -> bool:
        """Whether the writer went on working after printing it (so it did not die of it): it
        announced a retry right before it, logged a later training step, many more lines, a
        run of timestamps, or anything a minute or more later."""
        if self.progressed or stream_lines - self.lines_at_end > HANDLED_AFTER_LINES:
            return True
        if self.retried or self.ignored:
            return True
        if self.time is None or not self.later:
            return False
        if self.tb.timed_close and self.later[-1] - self.time >= HANDLED_AFTER_GAP_S:
            return True
        if len(self.later) < HANDLED_AFTER_STAMPS:
            return False
        return self.later[-1] - self.time >= HANDLED_AFTER_SECONDS

    def watching(self, stream_lines: int) -> bool:
        """Whether the lines after it can still change the verdict (the fast path feeds them)."""
        return (
            not self.progressed  # a later step: handled, whatever follows
            and not self.retried  # so is an announced retry
            and not self.ignored  # and one the interpreter printed and went on from
            and len(self.later) < HANDLED_AFTER_STAMPS
            and stream_lines - self.lines_at_end <= HANDLED_AFTER_LINES
        )

    def observe(self, stream_lines: int, text: str, stamp: float | None) -> None:
        """Take note of a later line of its writer: a timestamp, a later training step."""
        if stamp is not None:
            self.later.append(stamp)
        if not self.progressed and stream_lines - self.lines_at_end <= HANDLED_AFTER_LINES:
            step = STEP.search(text)
            self.progressed = step is not None and (
                self.step_before is None or int(step["n"]) > self.step_before
            )


@dataclass(slots=True)
class Stream:
    """One writer's lines inside a file (one rank, or the whole file if unprefixed)."""

    source: Source
    rank: int | None
    local_rank: int | None
    host: str | None
    ring: Ring = field(default_factory=Ring)
    assembler: TracebackAssembler = field(default_factory=TracebackAssembler)
    summary: SummaryReader = field(default_factory=SummaryReader)
    lines: int = 0
    first_time: float | None = None
    probe_first: int = 50
    last_stamp: tuple[int, float] | None = None
    tb_done: list[DoneTraceback] = field(default_factory=list)
    #: The newest traceback and the one of ``tb_done`` it prints again: folded into that one
    #: once it proves handled, else kept as a traceback of its own.
    fold: tuple[DoneTraceback, DoneTraceback] | None = None
    watch: DoneTraceback | None = None
    #: Findings with no earlier timestamp in their stream, waiting for the next one.
    untimed: list[Callable[[float], None]] = field(default_factory=list)
    untimed_wait: int = 0
    pids: set[int] = field(default_factory=set)
    #: Quiet lines still searched for an NCCL pid (the fast path gives up on a writer that
    #: never logs NCCL lines).
    pid_budget: int = 5000
    #: The raw lines of the traceback being read, while it may become a repeat
    #: (:mod:`crashlens.parse.repeat`), and that traceback.
    recording: list[bytes] | None = None
    recording_tb: PartialTraceback | None = None
    #: How many of ``recording`` lead to its last exception line so far.
    recording_end: int = 0
    #: :meth:`wants_lines` was False, and nothing has been fed to it since (only a fed line
    #: can make it True again: every other change to its state only closes what is open).
    settled: bool = False

    def wants_lines(self) -> bool:
        """Whether open state (a traceback, a summary, a pending time) needs its next lines."""
        return (
            self.assembler.current is not None
            or self.summary.active
            or (self.first_time is None and self.probe_first > 0)
            or bool(self.untimed)
            or (self.watch is not None and self.watch.watching(self.lines))
        )

    def observing_only(self) -> bool:
        """Whether all open state needs from the next lines is what a glance gives: a timestamp
        (the first one, or the time of untimed findings) or the signs that a traceback was
        handled (later stamps, a later step). The fast path then glances at its quiet lines
        (:meth:`~crashlens.parse.stream.FileParser.glance`) instead of parsing them."""
        return self.assembler.current is None and not self.summary.active and self.wants_lines()

    def remember_tail(
        self, block: bytes, start: int, end: int, count: int, last_lineno: int, style: PrefixStyle
    ) -> None:
        """Keep the last ``count`` of the quiet lines ``block[start:end]`` in the ring."""
        stop = end - 1
        low = max(start, stop - TAIL_WINDOW)
        if low == start:
            lines = block[start:stop].split(b"\n")[-count:]
        else:
            # Split the window the last lines usually fit in: ``count`` newlines in it.
            lines = block[low:stop].rsplit(b"\n", count)[1:]
            if len(lines) < count:  # longer lines: walk back to the start of the tail
                tail_start = stop
                for _ in range(count):
                    tail_start = block.rfind(b"\n", start, tail_start)
                    if tail_start < 0:
                        tail_start = start - 1
                        break
                lines = block[tail_start + 1 : stop].split(b"\n")
        first = last_lineno - len(lines) + 1
        self.ring.extend_raw(zip(range(first, last_lineno + 1), lines, strict=True), style)

    def learn_pid(self, raw: bytes) -> bool:
        """Take the host and pid of an NCCL line; whether it had them."""
        origin = nccl_origin(raw.decode("utf-8", "replace"))
        if origin is None or origin.pid is None:
            return False
        self.pids.add(origin.pid)
        self.host = self.host or origin.host
        return True

    def last_step(self, before: int) -> int | None:
        """The number of the last ``step N`` line before line ``before``, if still in view."""
        for _, text in self.ring.before(before):
            m = STEP.search(text)
            if m:
                return int(m["n"])
        return None

    def verdicts(self) -> Iterator[tuple[DoneTraceback, bool, bool]]:
        """Each done traceback with whether it was fatal and whether it was handled.

        The last one is fatal unless its writer went on working. Tracebacks printed together
        (processes sharing a console) end or go on together, and a launcher's own traceback
        (``ChildFailedError``...) after a worker's does not make the worker's survivable: it
        is the launcher reporting that very death.
        """
        workers = [d for d in self.tb_done if not launcher_report(d.tb)]
        last_group = _group(workers[-1].tb) if workers else None
        for done in self.tb_done:
            tb = done.tb
            last = _group(tb) is last_group or launcher_report(tb)
            handled = done.handled(self.lines)
            fatal = (last and not handled) or tb.exceptions[-1].type == "Fatal Python error"
            yield done, fatal, handled


#: The launchers' entry points: a console script (``bin/torchrun``) or the module it runs.
_LAUNCHER_SCRIPTS = frozenset({"torchrun", "deepspeed", "accelerate", "torchx"})
_LAUNCHER_MODULES = (
    "torch/distributed/run.py",
    "torch/distributed/launch.py",
    "deepspeed/launcher/runner.py",
    "accelerate/commands/accelerate_cli.py",
    "accelerate/commands/launch.py",
)


def launcher_report(tb: PartialTraceback) -> bool:
    """Whether a traceback is a launcher's report of a failed child: one of the launchers'
    exceptions, what torch.multiprocessing.spawn's ``join`` raised (torch < 1.5 raised a
    bare ``Exception`` carrying the child's traceback), or a traceback the log ends in whose
    outermost frame is a launcher's entry point (its exception, cut off, was that report)."""
    final = tb.exceptions[-1]
    if final.type.rsplit(".", 1)[-1] in LAUNCHER_EXCEPTIONS:
        return True
    if final.type == CUT_TRACEBACK and final.frames and _launcher_entry(final.frames[0].file):
        return True
    last = final.frames[-1] if final.frames else None
    return (
        last is not None
        and last.function == "join"
        and last.file.replace("\\", "/").endswith("torch/multiprocessing/spawn.py")
    )


def _launcher_entry(path: str) -> bool:
    path = path.replace("\\", "/")
    parts = path.rsplit("/", 2)
    if len(parts) >= 2 and parts[-2] == "bin" and parts[-1] in _LAUNCHER_SCRIPTS:
        return True
    return path.endswith(_LAUNCHER_MODULES)


def spawn_child(tb: PartialTraceback) -> int | None:
    """The process index of the torch.multiprocessing.spawn child whose traceback ``tb`` is
    (spawn's parent printed it after ``-- Process N terminated with the following error:``)."""
    m = SPAWN_CHILD.search(tb.prelude)
    return int(m["index"]) if m else None


def _group(tb: PartialTraceback) -> PartialTraceback:
    return tb.twin_of if tb.twin_of is not None else tb


def stamp_setter(target: PendingHit | PartialTraceback) -> Callable[[float], None]:
    """A callback giving ``target`` an inferred time once one is known."""

    def settle(t: float) -> None:
        target.stamp = (t, True)

    return settle


def time_setter(target: DoneTraceback) -> Callable[[float], None]:
    """A callback giving a done traceback an inferred time once one is known."""

    def settle(t: float) -> None:
        target.time, target.inferred = t, True

    return settle
