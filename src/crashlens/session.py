"""One analysis session: the rules, their compiled matcher and scanner, and what was read.

Every command analyses through a :class:`Session`: ``analyze`` (:func:`crashlens.api.analyze`)
reads a tree and finishes it into a :class:`~crashlens.report.Report`; ``watch`` feeds live
parsers the session makes (:meth:`Session.parser`) and matches their snapshots
(:meth:`Session.match`); ``run`` analyses what it captured; ``rules test`` parses each fixture
with :meth:`Session.parse_lines`. Reading many files in parallel is a :class:`Runner`'s job
(:class:`SequentialRunner`, :class:`ForkRunner`), chosen per session, never global state.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import os
import stat
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from crashlens.resemble import KnownReports

from crashlens._version import __version__
from crashlens.align import align, frame_of
from crashlens.collectives import analyze as match_collectives
from crashlens.collectives import flight_hits
from crashlens.config import Config
from crashlens.errors import NoInputError
from crashlens.ingest.discover import Candidate, attribute, discover
from crashlens.ingest.flight import DumpRefused, looks_like_dump, rank_of, read_dump
from crashlens.ingest.memory import FrozenHeap, keep_freed_blocks
from crashlens.ingest.prefixes import PrefixStyle, key_pattern
from crashlens.ingest.read import NotText, Tolerant, compressed, open_binary
from crashlens.match import Facts, match
from crashlens.model import (
    FileResult,
    FlightDump,
    FlightRecord,
    Hit,
    InputFile,
    Match,
    Note,
    NoteKind,
    Skip,
    SkipKind,
    Source,
    Timeline,
    plural,
)
from crashlens.parse import (
    BlockIndex,
    FileParser,
    IndexedBlocks,
    LineIndex,
    LineMatcher,
    file_mtime,
    file_year,
    index_block,
    parse_binary,
    parse_error_file,
    parse_lines,
    reads_as_console,
    scanner_for,
)
from crashlens.parse.scan import BLOCK, TriggerScanner, ramp_points, range_blocks
from crashlens.rank import rank
from crashlens.report import Report
from crashlens.rulebase import RuleSet, load_rules

Progress = Callable[[str, int], None]

#: Below this much input, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
#: A file this big is indexed by all the workers, range by range (:class:`ForkRunner`).
SPLIT_MIN_BYTES = 64 << 20
#: The byte range one worker indexes at a time.
RANGE_BYTES = 16 << 20
STDIN = "<stdin>"


@dataclass(frozen=True, slots=True)
class FileRead:
    """What reading one candidate gave: its result (None if skipped), its inventory entry,
    and the detectors that timed out while it was parsed (worker diagnostics travel here)."""

    result: FileResult | None
    record: InputFile
    timeouts: frozenset[str] = frozenset()
    #: A Flight Recorder dump, when the file was one (``result`` is then None).
    dump: FlightDump | None = None


class Runner(Protocol):
    """Reads candidates for a session, in input order."""

    def read(
        self, session: Session, candidates: list[Candidate], progress: Progress | None
    ) -> Iterator[FileRead]: ...


class SequentialRunner:
    """Every file in this process, one after the other."""

    def read(
        self, session: Session, candidates: list[Candidate], progress: Progress | None
    ) -> Iterator[FileRead]:
        for index, cand in enumerate(candidates):
            yield session.read_candidate(cand, index, progress)


class ForkRunner:
    """Files in forked worker processes, for large inputs (files are independent until align).

    Each worker gets the session once, through the pool's initializer (a fork shares it, nothing
    is pickled and nothing global is set in the parent); results come back in input order with
    their worker's diagnostics. A file of :data:`SPLIT_MIN_BYTES` or more is parsed in this
    process while the workers index its byte ranges (:func:`~crashlens.parse.index_block`), so
    one big console uses every core. Standard input is read in the parent, which owns it.
    Falls back to :class:`SequentialRunner` for small inputs or where ``fork`` is unavailable.
    """

    def __init__(
        self,
        workers: int | None = None,
        min_bytes: int = PARALLEL_MIN_BYTES,
        split_bytes: int = SPLIT_MIN_BYTES,
    ) -> None:
        self.workers = workers or min(4, os.cpu_count() or 1)
        self.min_bytes = min_bytes
        self.split_bytes = split_bytes

    def read(
        self, session: Session, candidates: list[Candidate], progress: Progress | None
    ) -> Iterator[FileRead]:
        readable = [c for c in candidates if not c.skipped and c.display != STDIN]
        sizes = {id(c): _size(c.path) for c in readable}
        split = {id(c) for c in readable if sizes[id(c)] >= self.split_bytes and _plain(c.path)}
        if (
            self.workers < 2
            or (len(readable) < 2 and not split)
            or sum(sizes.values()) < self.min_bytes
            or not _can_fork()
        ):
            yield from SequentialRunner().read(session, candidates, progress)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if any(reads_as_console(c.path) for c in readable if id(c) in split):
            # this process needs numpy for the console's blocks, and the workers reading their
            # keys get it with the fork instead of each importing it
            importlib.import_module("numpy")
        keep_freed_blocks()  # before the fork: the workers read most of the blocks
        context = multiprocessing.get_context("fork")
        with (
            FrozenHeap() as heap,  # before the fork too: the workers inherit it frozen
            ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=context,
                initializer=_worker_init,
                initargs=(session,),
            ) as pool,
        ):
            pending = [
                None if c.display == STDIN or id(c) in split else pool.submit(_worker_read, c, i)
                for i, c in enumerate(candidates)
            ]
            for index, (cand, future) in enumerate(zip(candidates, pending, strict=True)):
                if future is not None:
                    read = future.result()
                    heap.keep()
                    _report_progress(progress, read, 0)
                    yield read
                    continue
                indexer = (
                    _RangeIndexer(pool, cand.path, sizes[id(cand)], self.workers)
                    if id(cand) in split
                    else None
                )
                read = session.read_candidate(cand, index, progress, indexer)
                heap.keep()
                yield read


def _can_fork() -> bool:
    """Whether worker processes can be forked here (multiprocessing is imported only when a
    job is big enough to want them)."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


class _RangeIndexer:
    """A big file's blocks, indexed by the pool's workers range by range, handed out in order.

    At most two ranges per worker are in flight, so indexes never pile up in memory.
    """

    def __init__(self, pool: ProcessPoolExecutor, path: Path, size: int, workers: int) -> None:
        self.pool, self.path, self.size, self.workers = pool, path, size, workers

    def __call__(self, style: PrefixStyle) -> Iterator[tuple[bytes, BlockIndex]]:
        parts = max(self.workers * 2, -(-self.size // RANGE_BYTES))
        most = min(RANGE_BYTES, self.size // parts)
        points = ramp_points(self.path, self.size, min(BLOCK, most), max(most, 1))
        ranges = itertools.pairwise(points)
        flight: deque[tuple[int, int, Future[list[BlockIndex]]]] = deque()

        def submit() -> None:
            span = next(ranges, None)
            if span is not None:
                start, end = span
                flight.append(
                    (start, end, self.pool.submit(_worker_index, self.path, *span, style))
                )

        for _ in range(self.workers * 2):
            submit()
        while flight:
            start, end, future = flight.popleft()
            submit()
            indexes = future.result()
            yield from zip(range_blocks(self.path, start, end), indexes, strict=True)


_WORKER_SESSION: list[Session] = []


def _worker_init(session: Session) -> None:
    """In a worker process only: remember the session it reads for."""
    _WORKER_SESSION[:] = [session]


def _worker_read(cand: Candidate, index: int) -> FileRead:
    return _WORKER_SESSION[0].read_candidate(cand, index)


def _worker_index(path: Path, start: int, end: int, style: PrefixStyle) -> list[BlockIndex]:
    scanner = _WORKER_SESSION[0].scanner
    assert scanner is not None
    prefixes = key_pattern(style)
    return [index_block(block, scanner, prefixes) for block in range_blocks(path, start, end)]


def _report_progress(progress: Progress | None, read: FileRead, told: int) -> None:
    """Tell ``progress`` the rest of a file's bytes once it is read (``told`` were already)."""
    if progress is not None and read.record.skipped is None and read.record.bytes > told:
        progress(read.record.path, read.record.bytes - told)


@dataclass(frozen=True, slots=True)
class RulePack:
    """A rule set compiled once: the line detectors' literal index and the fast path's
    scanner. Never changed after it is built, so any number of analyses share one (a fleet
    worker's jobs); what an analysis learns while it runs is in its own :class:`LineMatcher`."""

    rules: RuleSet
    fast: bool
    index: LineIndex
    scanner: TriggerScanner | None

    @classmethod
    def compile(cls, rules: RuleSet, *, fast: bool = True) -> RulePack:
        """The pack of ``rules``: one already built for that very rule set (the last few are
        kept, each holding its rules, so an identity is never reused while it is) or a new one.
        A program that calls :func:`crashlens.analyze` per job compiles its rules once."""
        key = (id(rules), fast)
        pack = _PACKS.get(key)
        if pack is None or pack.rules is not rules:
            index = LineIndex(rules)
            pack = cls(rules, fast, index, scanner_for(index) if fast else None)
            if len(_PACKS) >= KEEP_PACKS:
                del _PACKS[next(iter(_PACKS))]
            _PACKS[key] = pack
        return pack


#: How many compiled rule sets :meth:`RulePack.compile` keeps (oldest dropped first).
KEEP_PACKS = 4
_PACKS: dict[tuple[int, bool], RulePack] = {}


@dataclass(slots=True)
class Session:
    """An analysis: rules with the config applied, compiled once (its :class:`RulePack`), the
    state of this analysis, and the files read so far."""

    rules: RuleSet
    skew: dict[str, float] = field(default_factory=dict)
    fast: bool = True
    runner: Runner = field(default_factory=ForkRunner)
    #: The compiled rules; built from ``rules`` when not given (or given for other rules).
    pack: RulePack | None = None
    #: The known reports a fallback is compared with; ``None`` is the bundled index.
    known: KnownReports | None = None
    matcher: LineMatcher = field(init=False)
    scanner: TriggerScanner | None = field(init=False)
    inputs: list[InputFile] = field(default_factory=list, init=False)
    results: list[FileResult] = field(default_factory=list, init=False)
    dumps: list[FlightDump] = field(default_factory=list, init=False)
    notes: list[Note] = field(default_factory=list, init=False)
    timeouts: set[str] = field(default_factory=set, init=False)
    _tb_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1), init=False)

    def __post_init__(self) -> None:
        pack = self.pack
        if pack is None or pack.rules is not self.rules or pack.fast != self.fast:
            pack = self.pack = RulePack.compile(self.rules, fast=self.fast)
        self.matcher = LineMatcher(pack.index)
        self.scanner = pack.scanner
        self.notes.extend(
            Note(f"rule file left out: {problem}", NoteKind.RULE_LEFT_OUT)
            for problem in self.rules.skipped
        )

    @classmethod
    def configured(
        cls,
        rule_dirs: Sequence[str | os.PathLike[str]] = (),
        *,
        config: Config | None = None,
        skew: Mapping[str, float] | None = None,
        disable: Sequence[str] = (),
        strict_rules: bool = False,
        fast: bool = True,
        runner: Runner | None = None,
        known: KnownReports | None = None,
    ) -> Session:
        """A session with ``crashlens.yaml`` applied: its rule dirs, ``disable:`` and ``skew:``
        (``config``; none given means no config), then ``rule_dirs``, ``disable`` and ``skew``;
        ``known``: the known reports a fallback is compared with (``None``: the bundled)."""
        config = config or Config()
        dirs = [Path(p) for p in (*config.rules, *rule_dirs)]
        rules = load_rules(dirs, strict=strict_rules)
        rules = Config(disable=(*config.disable, *disable)).apply(rules)
        return cls(
            rules,
            skew={**config.skew, **(skew or {})},
            fast=fast,
            runner=runner or ForkRunner(),
            known=known,
        )

    # -- reading ------------------------------------------------------------------------
    def read_paths(
        self, paths: Iterable[str | os.PathLike[str]], progress: Progress | None = None
    ) -> Session:
        """Discover and read every file under ``paths`` (``"-"`` is stdin)."""
        return self.read_candidates(list(discover(list(paths))), progress)

    def read_candidates(
        self, candidates: list[Candidate], progress: Progress | None = None
    ) -> Session:
        """Read files found by other means (a scheduler's record of a job, a fleet worker)."""
        for read in self.runner.read(self, candidates, progress):
            self.add(read)
        return self

    def add(self, read: FileRead) -> None:
        """Take one file's result into the session, with its notes and diagnostics."""
        record = read.record
        self.inputs.append(record)
        self.timeouts.update(read.timeouts)
        if read.dump is not None:
            self.dumps.append(read.dump)
        elif read.result is not None:
            self.results.append(read.result)
            if record.note:
                self.notes.append(Note.on_file(record.path, record.note))
        elif record.skipped is not None and record.skipped.kind is not SkipKind.NOT_A_LOG:
            self.notes.append(Note.on_file(record.path, record.skipped, skipped=True))

    def read_candidate(
        self,
        cand: Candidate,
        index: int,
        progress: Progress | None = None,
        indexer: IndexedBlocks | None = None,
    ) -> FileRead:
        """Read one discovered file (or stdin) in this process; ``progress`` hears of each
        block of a plain file as it is parsed; ``indexer`` gives its blocks indexed."""
        tb_ids = itertools.count((index + 1) * 1_000_000)  # unique per file, whoever reads it
        before = set(self.matcher.timeouts)
        told = [0]

        def advance(n: int) -> None:
            if progress is not None and told[0] + n <= size:
                told[0] += n
                progress(cand.display, n)

        size = _size(cand.path) if cand.display != STDIN else 0
        dump = _flight_dump(cand) if not cand.skipped and cand.display != STDIN else None
        if dump is not None:
            _report_progress(progress, dump, 0)
            return dump
        result, record = self._read_one(cand, tb_ids, advance, indexer)
        read = FileRead(result, record, frozenset(set(self.matcher.timeouts) - before))
        _report_progress(progress, read, told[0])
        return read

    def _read_one(
        self,
        cand: Candidate,
        tb_ids: itertools.count[int],
        advance: Callable[[int], None],
        indexer: IndexedBlocks | None,
    ) -> tuple[FileResult | None, InputFile]:
        if cand.skipped:
            return None, InputFile(cand.display, 0, "unknown", skipped=cand.skipped)
        is_stdin = cand.display == STDIN
        size = 0 if is_stdin else _size(cand.path)
        source = cand.source or attribute(cand.display)
        try:
            stream, encoding = open_binary(cand.path, sys.stdin.buffer if is_stdin else None)
        except NotText as exc:
            skip = Skip(SkipKind.NOT_TEXT, str(exc))
            return None, InputFile(cand.display, size, source.kind, skipped=skip)
        except OSError as exc:
            skip = Skip(SkipKind.UNREADABLE, f"cannot read: {exc.strerror or exc}")
            return None, InputFile(cand.display, size, source.kind, skipped=skip)
        reader = Tolerant(stream)
        try:
            if source.kind == "errorfile":
                try:
                    result = parse_error_file(
                        source, reader, self.rules, self.matcher, tb_ids=tb_ids
                    )
                except ValueError as exc:
                    skip = Skip(SkipKind.MALFORMED, str(exc))
                    return None, InputFile(cand.display, size, source.kind, skipped=skip)
            else:
                path = None if is_stdin else cand.path
                year, ceiling = file_year(path), file_mtime(path)
                result = parse_binary(
                    source,
                    reader,
                    encoding,
                    self.rules,
                    self.matcher,
                    self.scanner,
                    year=year,
                    ceiling=ceiling,
                    tb_ids=tb_ids,
                    progress=advance,
                    indexed=indexer,
                )
        except (OSError, EOFError) as exc:
            skip = Skip(SkipKind.UNREADABLE, f"read error: {exc}")
            return None, InputFile(cand.display, size, source.kind, skipped=skip)
        finally:
            if not is_stdin:
                stream.close()
        # Keep what was read before any damage (a truncated .gz, a file that vanished).
        note = f"read stopped early: {reader.damage}" if reader.damage else None
        if note is None and result.lines == 0:
            note = "empty file"
        return result, InputFile(cand.display, size, source.kind, lines=result.lines, note=note)

    def parse_lines(
        self, source: Source, lines: Iterable[tuple[int, str]], *, year: int
    ) -> FileResult:
        """Parse ``(lineno, text)`` pairs of one file with this session's rules."""
        return parse_lines(source, lines, self.rules, self.matcher, year=year, tb_ids=self._tb_ids)

    def parser(self, source: Source, *, year: int, style: PrefixStyle) -> FileParser:
        """A live parser to feed line by line (``watch``); its ``collector`` reads its findings."""
        return FileParser(
            source, self.rules, self.matcher, year=year, style=style, tb_ids=self._tb_ids
        )

    # -- analysing ----------------------------------------------------------------------
    def timeline(self, results: list[FileResult] | None = None) -> Timeline:
        """The session's results (or ``results``) on one clock."""
        sync = {rule.id: rule.sync for rule in self.rules.rules if rule.sync}
        return align(self.results if results is None else results, self.skew, sync)

    def match(self, hits: Iterable[Hit], facts: Facts | None = None) -> list[Match]:
        """The rules whose conditions hold over ``hits`` (with the environment ``facts``)."""
        return match(hits, self.rules, facts=facts)

    def _why_nothing(self) -> str:
        """Why no file could be read: each skip reason with its count, and the other notes."""
        reasons = Counter(f.skipped for f in self.inputs if f.skipped)
        said = [f"{n} file(s) skipped: {why}" for why, n in reasons.most_common()]
        said += [n for n in self.notes if n.kind is not NoteKind.SKIPPED_FILE]
        return "; ".join(said) or "no files found"

    def collectives(self) -> FlightRecord | None:
        """The Flight Recorder dumps read, matched across ranks (None: no dump was read)."""
        return match_collectives(self.dumps) if self.dumps else None

    def hits(self, timeline: Timeline) -> tuple[list[Hit], FlightRecord | None]:
        """The timeline's hits and those of the Flight Recorder findings, with the record."""
        flight = self.collectives()
        if flight is None:
            return timeline.hits, None
        return [*timeline.hits, *flight_hits(flight, self.rules)], flight

    def finish(self) -> Report:
        """Rank what was read into the report.

        Raises:
            NoInputError: when not a single input file could be read.
        """
        notes = list(self.notes)
        if not self.results and not self.dumps:
            raise NoInputError(f"nothing readable in the given paths ({self._why_nothing()})")
        read = [f for f in self.inputs if f.skipped is None]
        if not self.dumps and all(f.lines == 0 and f.note == "empty file" for f in read):
            # A log that was never written must not pass a CI gate as "no failure".
            raise NoInputError(
                f"nothing to analyse: {plural(len(self.results), 'input')} read, all empty"
            )
        timeline = self.timeline()
        # A finding that only means something where the job ended (a launcher's start-up
        # banner) says nothing anywhere else: it is not an event of the job.
        only_at_end = {r.id for r in self.rules.rules if r.condition.ends_job}
        if only_at_end:
            timeline.hits = [h for h in timeline.hits if h.ends_job or h.rule_id not in only_at_end]
        hits, flight = self.hits(timeline)
        if flight is not None:
            notes.extend(Note(n) for n in flight.notes)
            if flight.missing:
                missing = ", ".join(map(str, flight.missing))
                notes.append(Note(f"no Flight Recorder dump for rank(s) {missing}"))
        matches = self.match(hits, timeline.facts)
        causes, first = rank(matches, timeline)
        if any(c.match.rule.resemble for c in causes):
            # only a job with a finding that says how, not why, pays for the comparison
            # (a 0.5 MB index)
            from crashlens.resemble import resemble

            causes = resemble(causes, timeline, self.known)
        notes.extend(Note(f"detector {k} timed out and was skipped") for k in sorted(self.timeouts))
        notes = fold_notes(notes)
        return Report(
            causes=causes,
            first_failure=first,
            ranks=timeline.ranks,
            inputs=list(self.inputs),
            notes=notes,
            timeline_builder=functools.partial(frame_of, timeline, {m.rule.id for m in matches}),
            tracebacks=timeline.tracebacks,
            clock_skew=timeline.clock_skew,
            facts=timeline.facts,
            rules_loaded=len(self.rules.rules),
            tool_version=__version__,
            flight=flight,
        )


def _flight_dump(cand: Candidate) -> FileRead | None:
    """The candidate read as a Flight Recorder dump, when its first bytes say it is one.

    Only a file whose name ends in a rank can be one (the writer appends the rank to its
    prefix), so the logs of a tree are not opened twice."""
    if rank_of(Path(cand.display).name) is None:
        return None
    try:
        # Non-blocking, and only a regular file: a path swapped for a FIFO after discovery
        # must not block the analysis (the text reader reports it).
        fd = os.open(cand.path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        head = os.read(fd, 64) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        head = b""
    finally:
        os.close(fd)
    if not looks_like_dump(head):
        return None
    size = _size(cand.path)
    try:
        dump = read_dump(cand.path, cand.display)
    except DumpRefused as exc:
        skip = Skip(SkipKind.MALFORMED, str(exc))
        return FileRead(None, InputFile(cand.display, size, "flight", skipped=skip))
    except OSError as exc:
        skip = Skip(SkipKind.UNREADABLE, f"cannot read: {exc.strerror or exc}")
        return FileRead(None, InputFile(cand.display, size, "flight", skipped=skip))
    note = (
        f"Flight Recorder dump of rank {dump.rank}: {len(dump.calls)} calls, "
        f"format {dump.version} ({dump.format})"
    )
    return FileRead(None, InputFile(cand.display, size, "flight", note=note), dump=dump)


#: Notes about this many files or more for the same reason are said once.
FOLD_NOTES_AT = 3


def fold_notes(notes: list[Note]) -> list[Note]:
    """Notes that say the same of many files said once, in the place of the first: a
    torchrun ``--log-dir`` tree of 64 ranks has 64 empty ``stdout.log`` files, one line."""
    groups: dict[tuple[NoteKind, str], list[str]] = {}
    for note in notes:
        if note.path is not None and note.reason is not None:
            groups.setdefault((note.kind, note.reason), []).append(note.path)
    out: list[Note] = []
    said: set[tuple[NoteKind, str]] = set()
    for note in notes:
        key = (note.kind, note.reason) if note.path is not None and note.reason else None
        if key is None or len(groups[key]) < FOLD_NOTES_AT:
            out.append(note)
        elif key not in said:
            said.add(key)
            paths = groups[key]
            shown = ", ".join(paths[:2])
            verb = " skipped" if key[0] is NoteKind.SKIPPED_FILE else ""
            text = f"{len(paths)} files{verb}: {key[1]} ({shown} and {len(paths) - 2} more)"
            out.append(Note(text, key[0]))
    return out


def input_size(paths: Sequence[str | os.PathLike[str]]) -> int:
    """Total bytes of the files an analysis of ``paths`` would read (for progress bars)."""
    return sum(_size(c.path) for c in discover(paths) if not c.skipped and c.display != STDIN)


def _plain(path: Path) -> bool:
    """Whether a file is read as it is on disk (not decompressed): it can be split."""
    try:
        with path.open("rb") as f:
            return not compressed(f.read(8))
    except OSError:
        return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
