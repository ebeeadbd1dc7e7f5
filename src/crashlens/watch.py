"""``crashlens watch``: follow a live log tree and speak up as soon as a root cause appears.

A CUDA OOM on one rank is followed by every other rank waiting in a collective until the NCCL
watchdog fires, often ten minutes later; an alert at the OOM saves those minutes on every GPU.
The watcher therefore reads only what was appended since the last look, keeps one
:class:`~crashlens.parse.FileParser` alive per file (the very parser ``analyze`` uses, so a
signal is detected identically live and post mortem), and after each pass evaluates the rules'
conditions (:func:`crashlens.match.match`) over the hits found so far.

Appended data takes the same fast path as ``analyze`` (:func:`crashlens.parse.parse_binary`):
one multi-literal scan (:class:`~crashlens.parse.scan.TriggerScanner`) over each block of whole
lines finds the lines a rule, a traceback or a launcher summary needs; the parser sees those,
and the quiet lines between them are only counted (:mod:`crashlens.parse.fast`). A file's
first :data:`~crashlens.parse.SNIFF_LINES` lines are fed line by line while they are sampled;
then the file stays on the line-by-line path if ``parse_binary`` would keep it there (a kernel
log, a rule set with a detector that must see every line).

Memory is bounded by the parsers' own caps plus, per file, one partial line and the first
:data:`~crashlens.parse.SNIFF_LINES` lines while the prefix style and the path are decided.

Reading a live parser's hits: a :class:`FileParser` only freezes its findings in ``close()``,
which finalizes it; :meth:`HitCollector.snapshot <crashlens.parse.hits.HitCollector.snapshot>` (its
``collector``) gives frozen copies meanwhile, without traceback
ids, which only the fallback rules need, and fallback rules never alert (see :func:`alertable`).
The rules, matcher and scanner are the :class:`~crashlens.session.Session`'s, so ``watch``
reads ``crashlens.yaml`` like ``analyze``.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from crashlens.ingest.discover import attribute, discover
from crashlens.ingest.prefixes import PrefixStyle, sniff_style
from crashlens.ingest.read import MAX_LINE, NotText, cap_line, iter_lines, sniff
from crashlens.model import Fact, Hit, Skip, SkipKind, Source
from crashlens.parse import (
    SNIFF_LINES,
    FileParser,
    fast_path_ok,
    file_year,
    scan_block,
)
from crashlens.ruletypes import Rule, RuleSet
from crashlens.session import Session

#: Most bytes read from one file in one pass while following; a busy file cannot starve the
#: others, and a watcher that falls behind still advances every file each pass.
READ_CAP = 8 << 20
#: Warn (at most every LAG_WARN_EVERY_S) when this much appended data is still unread.
LAG_WARN_BYTES = 64 << 20
LAG_WARN_EVERY_S = 60.0
#: The fast path is decided on the first SNIFF_LINES lines or this many bytes, as in analyze.
SAMPLE_BYTES = 256 * 1024


def alertable(rule: Rule) -> bool:
    """Whether a match of ``rule`` raises an alert: root causes only.

    Symptoms (NCCL timeouts, launcher teardown) are what the alert wants to get ahead of. The
    fallback "uncaught exception" rule is left out: whether a traceback was fatal or handled is
    only known once its writer stops logging, and an alert can run ``scancel``.
    """
    return rule.kind == "cause" and not rule.fallback


@dataclass(frozen=True, slots=True)
class Alert:
    """A root cause seen for the first time while the job runs."""

    rule: Rule
    hit: Hit
    detected_at: float

    @property
    def key(self) -> tuple[str, str]:
        """What makes two alerts the same cause: at most one alert per key."""
        return (self.rule.id, self.rule.cls)

    def line(self) -> str:
        """``crashlens watch: <time> rank <r> <class> <rule title> (<file>:<line>)``."""
        when = _local_iso(self.detected_at)
        ev = self.hit.evidence
        rank = "?" if ev.rank is None else str(ev.rank)
        return (
            f"crashlens watch: {when} rank {rank} {self.rule.cls} {self.rule.title} "
            f"({ev.file}:{ev.line})"
        )

    def env(self) -> dict[str, str]:
        """The ``CRASHLENS_*`` variables given to the ``--on-cause`` hook."""
        ev = self.hit.evidence
        return {
            "CRASHLENS_RULE": self.rule.id,
            "CRASHLENS_CLASS": self.rule.cls,
            "CRASHLENS_RANK": "" if ev.rank is None else str(ev.rank),
            "CRASHLENS_FILE": ev.file,
            "CRASHLENS_LINE": str(ev.line),
        }


def _local_iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t).isoformat(timespec="seconds")


@dataclass(slots=True)
class _Tail:
    """Read position and parser of one followed file."""

    path: Path
    display: str
    ident: tuple[int, int] | None = None
    offset: int = 0
    lines: int = 0
    partial: bytes = b""
    dropping: bool = False
    parser: FileParser | None = None
    head: list[tuple[int, str]] = field(default_factory=list)
    seen_hits: int = 0
    skipped: Skip | None = None
    #: The first lines (text), sampled to decide the path; emptied once it is decided.
    sample: list[str] = field(default_factory=list)
    sample_bytes: int = 0
    #: None while undecided, then whether appended blocks take the fast path.
    fast: bool | None = None

    def reset(self, ident: tuple[int, int] | None) -> None:
        """Start over: the file was truncated or replaced (rotation)."""
        self.ident = ident
        self.offset = 0
        self.lines = 0
        self.partial = b""
        self.dropping = False
        self.parser = None
        self.head = []
        self.seen_hits = 0
        self.skipped = None
        self.sample = []
        self.sample_bytes = 0
        self.fast = None


class Watcher:
    """Incremental analysis of a log tree: call :meth:`poll` repeatedly; it returns new alerts."""

    def __init__(
        self,
        root: Path,
        rules: RuleSet | Session,
        *,
        read_cap: int | None = READ_CAP,
        fast: bool = True,
    ) -> None:
        self.root = root
        self.session = rules if isinstance(rules, Session) else Session(rules, fast=fast)
        self.rules = self.session.rules
        #: The fast-path scanner (None: every line goes through ``FileParser.feed``).
        self.scanner = self.session.scanner
        self.read_cap = read_cap
        self.tails: dict[str, _Tail] = {}
        self.alerted: set[tuple[str, str]] = set()
        self._alertable = {r.id for r in self.rules.rules if alertable(r)}
        self.bytes_read = 0
        #: Bytes known to be waiting after the last pass (0 when the watcher is caught up).
        self.backlog = 0

    # -- one pass -----------------------------------------------------------------------
    def poll(self, now: float) -> list[Alert]:
        """Find new/rotated/removed files, read what was appended, return alerts raised."""
        self._scan()
        self.backlog = 0
        for tail in self.tails.values():
            self._read(tail)
        return self._check(now)

    def _scan(self) -> None:
        present: dict[str, Path] = {}
        for cand in discover([self.root]):
            if cand.skipped is None:
                present[cand.display] = cand.path
        for gone in [d for d in self.tails if d not in present]:
            # Forget removed files: keeps memory bounded on trees that rotate and delete.
            del self.tails[gone]
        for display, path in present.items():
            if display not in self.tails:
                self.tails[display] = _Tail(path=path, display=display)

    def _read(self, tail: _Tail) -> None:
        try:
            with open(tail.path, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    return
                ident = (st.st_dev, st.st_ino)
                if tail.ident is None:
                    tail.ident = ident
                elif ident != tail.ident or st.st_size < tail.offset:
                    tail.reset(ident)  # replaced (rename rotation) or truncated (copytruncate)
                if tail.skipped is not None or st.st_size == tail.offset:
                    return
                f.seek(tail.offset)
                data = f.read(self.read_cap if self.read_cap is not None else -1)
                self.backlog += max(0, st.st_size - tail.offset - len(data))
        except OSError:
            return  # vanished between the scan and the read; the next scan forgets it
        if not data:
            return
        if tail.offset == 0 and not self._usable(tail, data):
            return
        tail.offset += len(data)
        self.bytes_read += len(data)
        self._feed(tail, data)

    def _usable(self, tail: _Tail, head: bytes) -> bool:
        """Only plain UTF-8 text is followed; compressed rotations and binaries are skipped."""
        try:
            compression, encoding = sniff(head[:8192])
        except NotText as exc:
            tail.skipped = Skip(SkipKind.NOT_TEXT, str(exc))
            return False
        if compression is not None or encoding != "utf-8":
            tail.skipped = Skip(
                SkipKind.NOT_FOLLOWED, f"not followed live ({compression or encoding})"
            )
            return False
        if attribute(tail.display).kind == "errorfile":
            tail.skipped = Skip(
                SkipKind.NOT_FOLLOWED,
                "torchelastic error file (read by analyze, not followed live)",
            )
            return False
        return True

    def _feed(self, tail: _Tail, data: bytes) -> None:
        if tail.dropping:
            # The rest of an overlong line that was already emitted truncated.
            end = data.find(b"\n")
            if end < 0:
                return
            data = data[end + 1 :]
            tail.dropping = False
        data = tail.partial + data if tail.partial else data
        cut = data.rfind(b"\n") + 1
        complete, rest = data[:cut], data[cut:]
        if complete:
            self._block(tail, complete)
        if len(rest) > MAX_LINE:
            tail.lines += 1
            text = cap_line(rest[: MAX_LINE * 4].decode("utf-8", "replace"))
            self._lines(tail, [(tail.lines, text)])
            tail.dropping = True
            rest = b""
        tail.partial = rest
        if tail.parser is None and tail.head:
            # Sniff on what there is rather than wait for SNIFF_LINES: an alert must not wait
            # for a quiet file to print 200 lines.
            self._start_parser(tail)

    def _block(self, tail: _Tail, block: bytes) -> None:
        """Parse a block of whole lines (each ends with ``\\n``) on the file's path."""
        if tail.fast is None:
            # Sample the first lines line by line; decide the path once there are enough.
            cut = _after_newlines(block, SNIFF_LINES - len(tail.sample))
            cut = min(cut, max(block.rfind(b"\n", 0, SAMPLE_BYTES - tail.sample_bytes) + 1, 1))
            cut = block.find(b"\n", cut - 1) + 1  # whole lines, at least one
            head, block = block[:cut], block[cut:]
            tail.sample.extend(head.decode("utf-8", "replace").splitlines())
            del tail.sample[SNIFF_LINES:]
            tail.sample_bytes += len(head)
            self._by_line(tail, head)
            if len(tail.sample) >= SNIFF_LINES or tail.sample_bytes >= SAMPLE_BYTES:
                tail.fast = self._fast_ok(tail)
                tail.sample = []
        if not block:
            return
        if tail.fast and self.scanner is not None:
            parser = tail.parser if tail.parser is not None else self._start_parser(tail)
            tail.lines = scan_block(parser, self.scanner, block, tail.lines)
        else:
            self._by_line(tail, block)

    def _by_line(self, tail: _Tail, block: bytes) -> None:
        base = tail.lines
        self._lines(tail, ((base + n, text) for n, text in iter_lines(io.BytesIO(block))))
        tail.lines += block.count(b"\n")

    def _fast_ok(self, tail: _Tail) -> bool:
        """Whether ``parse_binary`` would read this file on the fast path (see its docstring)."""
        parser = tail.parser if tail.parser is not None else self._start_parser(tail)
        return fast_path_ok(parser.source, "utf-8", self.scanner)

    def _lines(self, tail: _Tail, lines: Iterable[tuple[int, str]]) -> None:
        parser = tail.parser
        if parser is None:
            for item in lines:
                if parser is not None:
                    parser.feed(*item)
                    continue
                tail.head.append(item)
                if len(tail.head) >= SNIFF_LINES:
                    parser = self._start_parser(tail)
            return
        feed = parser.feed
        for lineno, text in lines:
            feed(lineno, text)

    def _start_parser(self, tail: _Tail) -> FileParser:
        head = tail.head
        style = sniff_style(text for _, text in head) if head else PrefixStyle()
        source: Source = attribute(tail.display)
        parser = self.session.parser(source, year=file_year(tail.path), style=style)
        for lineno, text in head:
            parser.feed(lineno, text)
        tail.head = []
        tail.parser = parser
        return parser

    # -- alerts ---------------------------------------------------------------------------
    def _check(self, now: float) -> list[Alert]:
        """Evaluate the conditions of alertable rules that got new hits in this pass."""
        candidates: set[str] = set()
        for tail in self.tails.values():
            parser = tail.parser
            if parser is None or parser.collector.count == tail.seen_hits:
                continue
            for rule_id in parser.collector.rules_since(tail.seen_hits):
                rule = self.rules.by_id[rule_id]
                if rule_id in self._alertable and (rule_id, rule.cls) not in self.alerted:
                    candidates.add(rule_id)
            tail.seen_hits = parser.collector.count
        if not candidates:
            return []
        hits: list[Hit] = []
        facts: list[Fact] = []
        for tail in self.tails.values():
            if tail.parser is not None:
                hits.extend(tail.parser.collector.snapshot(candidates))
                facts.extend(tail.parser.facts)
        alerts: list[Alert] = []
        # With the facts read so far, so a rule with ``when:`` (a version range) can alert live.
        for found in self.session.match(hits, facts):
            rule = found.rule
            key = (rule.id, rule.cls)
            if rule.id not in candidates or key in self.alerted or not found.hits:
                continue
            self.alerted.add(key)
            alerts.append(Alert(rule=rule, hit=found.hits[0], detected_at=now))
        return alerts


def _after_newlines(block: bytes, n: int) -> int:
    """The offset just after the ``n``-th newline of ``block`` (its length if fewer)."""
    pos = 0
    for _ in range(max(n, 1)):
        nl = block.find(b"\n", pos)
        if nl < 0:
            return len(block)
        pos = nl + 1
    return pos


AlertSink = Callable[[Alert], None]


class HookRunner:
    """Runs the ``--on-cause`` command through the shell, without blocking the watcher.

    A hook that hangs (an unreachable scheduler) must not stop the watcher from reading, so
    hooks are started and reaped later; :meth:`wait` is called on the way out.
    """

    def __init__(self, command: str, warn: Callable[[str], None]) -> None:
        self.command = command
        self.warn = warn
        self.running: list[subprocess.Popen[bytes]] = []

    def start(self, alert: Alert) -> None:
        self.reap()
        env = {**os.environ, **alert.env()}
        try:
            self.running.append(subprocess.Popen(self.command, shell=True, env=env))
        except OSError as exc:
            self.warn(f"--on-cause could not start: {exc}")

    def reap(self) -> None:
        for proc in list(self.running):
            code = proc.poll()
            if code is not None:
                self.running.remove(proc)
                if code != 0:
                    self.warn(f"--on-cause hook exited with status {code}")

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for proc in self.running:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.warn(f"--on-cause hook (pid {proc.pid}) still running; left behind")
        self.reap()


def follow(
    watcher: Watcher,
    *,
    interval: float,
    once: bool,
    on_alert: AlertSink,
    warn: Callable[[str], None],
    should_stop: Callable[[], bool] = lambda: False,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Poll ``watcher`` every ``interval`` seconds until stopped; return the number of alerts.

    With ``once`` the tree is read to its current end once and the function returns.
    ``on_ready`` is called after the first pass (the CLI says what it is watching).
    ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM turned into it by the CLI) ends the loop cleanly.
    """
    count = 0
    last_lag_note = 0.0
    try:
        while True:
            started = time.monotonic()
            for alert in watcher.poll(time.time()):
                count += 1
                on_alert(alert)
            if once and watcher.backlog == 0:
                return count
            if on_ready is not None:
                on_ready()
                on_ready = None
            if watcher.backlog > LAG_WARN_BYTES and started - last_lag_note > LAG_WARN_EVERY_S:
                last_lag_note = started
                warn(f"falling behind the log tree by {watcher.backlog / 1e6:.0f} MB")
            if should_stop():
                return count
            if watcher.backlog == 0:
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return count
