"""Plain data handed from one pipeline stage to the next (no I/O, no pandas).

Every type that passes between stages lives here, so stages import this module, not each
other: ingest -> parse (:class:`FileResult`) -> align (:class:`Timeline`) -> match
(:class:`Match`) -> rank (:class:`Cause`, :class:`FirstFailure`) -> the report.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from crashlens import lazyre
from crashlens.provenance import is_user_path, launched_script

if TYPE_CHECKING:
    from crashlens.ruletypes import Rule

SourceKind = Literal["worker", "launcher", "kernel", "scheduler", "errorfile"]
#: The kinds ingest actually gives files (``launcher`` is reserved: no input is read as one).
PRODUCED_SOURCE_KINDS: tuple[SourceKind, ...] = ("worker", "kernel", "scheduler", "errorfile")

#: The stable root-cause vocabulary users aggregate on; rules map many-to-one onto it.
CAUSE_CLASSES: tuple[str, ...] = (
    "cuda_oom",
    "host_oom",
    "shm_exhausted",
    "dataloader_worker_crash",
    "datasets_map_worker_died",
    "corrupt_data",
    "nccl_timeout",
    "nccl_error",
    "rendezvous_failure",
    "env_misconfig",
    "version_mismatch",
    "missing_dependency",
    "file_not_found",
    "permission_denied",
    "device_mismatch",
    "cuda_error",
    "gpu_hardware",
    "disk_full",
    "too_many_open_files",
    "numerical_instability",
    "segfault",
    "scheduler_kill",
    "user_code_error",
    "unknown",
)


#: How :func:`_constructor_call` pickles an object: a constructor and its arguments.
_Call = tuple[Callable[..., object], tuple[object, ...]]


def _constructor_call(obj: object) -> _Call:
    """How a frozen dataclass is pickled: the call that makes it again, its fields in order
    (loaded several times faster than slots' field-by-field state; a worker process sends
    every hit and traceback of its files back this way)."""
    return type(obj), tuple(getattr(obj, name) for name in obj.__match_args__)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Source:
    """Where a stream of log lines came from, and who wrote it as far as the path tells."""

    path: str
    kind: SourceKind = "worker"
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """One log line that supports a finding, with enough context to cite and show it."""

    file: str
    line: int
    rank: int | None
    host: str | None
    time: float | None
    time_inferred: bool
    text: str
    context: tuple[str, ...] = ()

    def __reduce__(self) -> _Call:
        return _constructor_call(self)


#: The exception type given to a traceback the log ends in before its exception line.
CUT_TRACEBACK = "IncompleteTraceback"
#: How a cut traceback's message names the class an IPython header showed (the log's own word).
CUT_IPYTHON_NAMED = "IPython's header names it"
#: The message given to a compile error's traceback the log ends in before the compiler's.
CUT_COMPILE_MESSAGE = "the log ends before the compiler's message"


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a Python traceback."""

    file: str
    line: int
    function: str
    user_code: bool
    #: The source line the traceback printed under the frame (``loss.backward()``), if any.
    code: str = ""

    def __reduce__(self) -> _Call:
        return _constructor_call(self)

    def __str__(self) -> str:
        """``data.py:91 in __getitem__``."""
        return (
            f"{self.file}:{self.line} in {self.function}"
            if self.function
            else (f"{self.file}:{self.line}")
        )


@dataclass(frozen=True, slots=True)
class ExceptionInfo:
    """One exception of a (possibly chained) traceback."""

    type: str
    message: str
    frames: tuple[Frame, ...]
    lineno: int
    #: The log starts inside this exception's traceback (a paste that lost its header and
    #: outer frames): the frames where the process began, the user's script's, are not shown.
    head_lost: bool = False
    #: For a log cut before this exception's line (:data:`CUT_TRACEBACK`): the class a header
    #: above it named (IPython's ``---> ... ValueError``), the only part of it the log shows.
    named: str = ""

    def __reduce__(self) -> _Call:
        return _constructor_call(self)


@dataclass(frozen=True, slots=True)
class Traceback:
    """An assembled traceback; ``exceptions`` are in printed order, the last one was raised."""

    id: int
    source: Source
    rank: int | None
    host: str | None
    start_line: int
    exceptions: tuple[ExceptionInfo, ...]
    text: str
    time: float | None
    time_inferred: bool
    fatal: bool = False
    #: Identical tracebacks its writer printed after it, each one handled (a retry loop):
    #: folded into this one, which stands for them all.
    repeats: int = 0
    #: The torch.multiprocessing.spawn child whose traceback this is (its process index), when
    #: its parent printed it; align makes it the rank on a job of one node.
    spawn_index: int | None = None

    def __reduce__(self) -> _Call:
        return _constructor_call(self)

    @property
    def final(self) -> ExceptionInfo:
        """The exception that escaped (printed last)."""
        return self.exceptions[-1]


def _int(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


@dataclass(frozen=True, slots=True)
class Roles:
    """A hit's reserved capture fields, typed once when the hit is frozen.

    Rules name capture groups freely (``{size}`` in a remediation); these names have a meaning
    the analyzer acts on (docs/rules.md, "Reserved fields"): who (``rank``, ``local_rank``,
    ``tasks``, ``host``, ``pid``, ``pids``), when (``uptime_s``), how a process ended
    (``exitcode``, ``signal``), and who waits for whom (``timeout_ms``, ``last_completed``,
    ``waits_on``).
    A value that does not parse is left out, never guessed.
    """

    rank: int | None = None
    local_rank: int | None = None
    #: The process index torch.multiprocessing.spawn gave the writer (``fn(i, ...)``): a local
    #: rank by role, which scripts also use as the rank on one node.
    spawn_index: int | None = None
    host: str | None = None
    pids: tuple[int, ...] = ()
    uptime_s: float | None = None
    exitcode: int | None = None
    signal: str | None = None
    last_completed: int | None = None
    waits_on: int | None = None
    timeout_ms: int | None = None
    #: A collective check naming what this writer ran (``op``) and what another rank ran
    #: (``peer``, ``peer_op``): a desync, whose culprit is the rank in the minority.
    op: str | None = None
    peer: int | None = None
    peer_op: str | None = None

    def __reduce__(self) -> _Call:
        return _constructor_call(self)

    @property
    def waiting(self) -> bool:
        """Whether the writer was waiting for others when it logged this (a timed-out
        collective, the work it last completed, the rank it waits on): hang evidence."""
        return (
            self.timeout_ms is not None
            or self.last_completed is not None
            or self.waits_on is not None
        )

    @property
    def pid(self) -> int | None:
        """The first (or only) pid named."""
        return self.pids[0] if self.pids else None

    @classmethod
    def of(cls, fields: dict[str, str]) -> Roles:
        """The reserved fields of a hit's captures, typed."""
        pids = [p for p in (_int(x) for x in fields.get("pids", "").split(",")) if p is not None]
        pid = _int(fields.get("pid"))
        try:
            uptime = float(fields["uptime_s"]) if "uptime_s" in fields else None
        except ValueError:
            uptime = None
        # srun's "task 3" (a single task id) is the global rank torchrun-less jobs use.
        rank = _int(fields.get("rank"))
        return cls(
            rank=rank if rank is not None else _int(fields.get("tasks")),
            local_rank=_int(fields.get("local_rank")),
            spawn_index=_int(fields.get("spawn_index")),
            host=fields.get("host"),
            pids=((pid,) if pid is not None else ()) + tuple(p for p in pids if p != pid),
            uptime_s=uptime,
            exitcode=_int(fields.get("exitcode")),
            signal=fields.get("signal"),
            last_completed=_int(fields.get("last_completed")),
            waits_on=_int(fields.get("waits_on")),
            timeout_ms=_int(fields.get("timeout_ms")),
            op=fields.get("op"),
            peer=_int(fields.get("peer")),
            peer_op=fields.get("peer_op"),
        )


_UNSET_ROLES = Roles()


@dataclass(frozen=True, slots=True)
class Hit:
    """A rule detector matched a line (or a traceback) of the logs."""

    rule_id: str
    detector: str
    evidence: Evidence
    fields: dict[str, str]
    traceback_id: int | None = None
    fatal: bool | None = None
    #: The reserved fields, typed (from ``fields`` unless given).
    roles: Roles = field(default_factory=lambda: _UNSET_ROLES)
    #: Its line is the last its writer printed (nothing after it but blank lines).
    last_words: bool = False
    #: The job ended on it: every writer's last line with words holds a finding of its rule
    #: (set by :func:`crashlens.align.mark_job_ends`).
    ends_job: bool = False

    def __post_init__(self) -> None:
        if self.roles is _UNSET_ROLES:
            object.__setattr__(self, "roles", Roles.of(self.fields))

    def __reduce__(self) -> _Call:
        return _constructor_call(self)


@dataclass(frozen=True, slots=True)
class ChildFailure:
    """One entry of a torchelastic ``ChildFailedError`` summary or an ``error.json`` file."""

    rank: int | None
    local_rank: int | None
    host: str | None
    exitcode: int | None
    pid: int | None
    time: float | None
    message: str
    root_cause: bool
    evidence: Evidence


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """One entry of a rank's Flight Recorder: a collective (or point-to-point op) it called."""

    #: The entry's ``record_id``: its place in the rank's ring buffer.
    record: int
    #: The process group's name and description (``process_group``: ``("0", "default_pg")``).
    group: str
    group_desc: str
    #: ``collective_seq_id`` (``p2p_seq_id`` for a point-to-point op): the same number on every
    #: rank of the group for the same call.
    seq: int
    p2p: bool
    #: ``profiling_name`` without the backend: ``all_reduce``, ``broadcast``, ``send``.
    op: str
    backend: str
    input_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_sizes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    #: ``scheduled``, ``started`` or ``completed`` (gloo leaves every entry ``scheduled``).
    state: str
    #: When the rank called it, in seconds since the epoch (``time_created_ns``).
    time: float | None
    timeout_ms: int | None
    #: The innermost frame of the user's code in the call's stack (pickle dumps carry stacks).
    user_frame: Frame | None = None

    @property
    def shape(self) -> str:
        """Sizes and dtypes as one comparable string: ``[[16]] Float``."""
        sizes = ", ".join("[" + ", ".join(map(str, s)) + "]" for s in self.input_sizes)
        return f"[{sizes}] {'/'.join(self.input_dtypes)}".strip()


@dataclass(frozen=True, slots=True)
class FlightDump:
    """One rank's Flight Recorder dump, as read (``comm_lib_trace_rank_<N>``)."""

    path: str
    rank: int
    #: The dump format's ``version`` (``"2.10"``) and how it was stored.
    version: str
    format: Literal["pickle", "json"]
    #: Process group name -> (description, member ranks), from ``pg_config``.
    groups: tuple[tuple[str, str, tuple[int, ...]], ...]
    calls: tuple[CollectiveCall, ...]
    #: A problem worth saying while reading it (an unknown version), or None.
    note: str | None = None

    def last_calls(self) -> list[CollectiveCall]:
        """The last collective of each process group: where the rank was when it dumped."""
        last: dict[str, CollectiveCall] = {}
        for call in self.calls:
            if not call.p2p and (call.group not in last or call.seq > last[call.group].seq):
                last[call.group] = call
        return [last[g] for g in sorted(last)]


@dataclass(frozen=True, slots=True)
class CollectiveFinding:
    """What the ranks' dumps show about one process group's last collectives.

    ``kind``: ``not_joined`` (``culprits`` never entered the collective ``waiting`` ranks were
    in), ``mismatch`` (at the same sequence number ``culprits`` called another op, sizes or
    dtypes), ``no_dump`` (the ranks that left no dump are the only ones that can be missing
    from it).
    """

    kind: Literal["not_joined", "mismatch", "no_dump"]
    group: str
    group_desc: str
    seq: int
    #: What the waiting ranks called at ``seq`` (op and shape), and what the culprits did.
    op: str
    shape: str
    culprits: tuple[int, ...]
    waiting: tuple[int, ...]
    culprit_op: str | None
    culprit_shape: str | None
    #: The culprits' last entry in this group (sequence number, op), where they were instead.
    culprit_last: tuple[int, str] | None
    #: When the waiting ranks entered the collective (the earliest), and its timeout.
    time: float | None
    timeout_ms: int | None
    #: Members of the group whose dump is not among the inputs.
    missing_dumps: tuple[int, ...]
    #: The dump cited (a culprit's, else a waiting rank's) and the culprit's own code at its
    #: last collective (pickle dumps carry the stack).
    file: str
    frame: Frame | None = None

    @property
    def text(self) -> str:
        """The finding as one sentence."""
        who = ranks_text(self.culprits)
        waiting = ranks_text(self.waiting)
        where = f"{self.op} #{self.seq} of process group {self.group_label}"
        if self.kind == "mismatch":
            theirs = self.culprit_op if self.culprit_op != self.op else self.culprit_shape
            mine = self.op if self.culprit_op != self.op else self.shape
            return f"{who} called {theirs} where {waiting} called {mine} ({where})"
        if self.kind == "no_dump":
            return f"{who} left no dump; {waiting} waited in {where}"
        last = (
            f"; its last collective was {self.culprit_last[1]} #{self.culprit_last[0]}"
            if self.culprit_last is not None
            else ""
        )
        return f"{who} never entered {where}, which {waiting} waited in{last}"

    @property
    def group_label(self) -> str:
        """``0 (default_pg)``."""
        return f"{self.group} ({self.group_desc})" if self.group_desc else self.group


def location(file: str, line: int) -> str:
    """``file:line``, or the file alone for evidence that has no line (a Flight Recorder dump)."""
    return f"{file}:{line}" if line > 0 else file


def ranks_text(ranks: tuple[int, ...]) -> str:
    """``rank 3``, ``ranks 0, 1, 2``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks))


@dataclass(frozen=True, slots=True)
class FlightRecord:
    """Every Flight Recorder dump read for the job, and what matching them found."""

    dumps: tuple[FlightDump, ...]
    findings: tuple[CollectiveFinding, ...]
    #: Members of the job's groups with no dump among the inputs.
    missing: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(slots=True)
class RankSummary:
    """What is known about one rank after reading every file."""

    rank: int | None
    host: str | None = None
    files: set[str] = field(default_factory=set)
    lines: int = 0
    first_time: float | None = None
    last_time: float | None = None
    last_lines: list[str] = field(default_factory=list)
    last_file: str = ""
    last_lineno: int = 0
    exitcode: int | None = None
    pids: set[int] = field(default_factory=set)


class SkipKind(StrEnum):
    """Why a file was not read, as code asks it (:class:`Skip`)."""

    MISSING = "missing"  #: the path does not exist
    UNREADABLE = "unreadable"  #: permissions, a vanished file, an I/O error
    NOT_A_FILE = "not-a-file"  #: a device, a fifo, a socket
    NOT_A_LOG = "not-a-log"  #: a name a job holds beside its logs (code, configs, weights)
    LINK = "link"  #: a symlink not followed (a loop, outside the tree, a walked directory)
    NOT_TEXT = "not-text"  #: binary, or an encoding that is not text
    MALFORMED = "malformed"  #: a structured input (an error file, a dump) that does not parse
    NOT_FOLLOWED = "not-followed"  #: read by ``analyze``, not tailed by ``watch``


class Skip(str):
    """Why a file was not read: the text reports show, and its :class:`SkipKind` for code.

    A ``str`` so every renderer and the JSON keep printing the reason as they always did;
    decisions ask ``kind``, never the wording.
    """

    kind: SkipKind

    def __new__(cls, kind: SkipKind, text: str) -> Skip:
        self = super().__new__(cls, text)
        self.kind = kind
        return self

    def __reduce__(self) -> tuple[type[Skip], tuple[SkipKind, str]]:
        return (Skip, (self.kind, str(self)))


class NoteKind(StrEnum):
    """What a note of the analysis is about (:class:`Note`)."""

    GENERAL = "general"
    FILE = "file"  #: about one file that was read (``<path>: read stopped early: ...``)
    SKIPPED_FILE = "skipped-file"  #: a file that was not read (also listed with the inputs)
    RULE_LEFT_OUT = "rule-left-out"  #: an invalid user rule file left out


class Note(str):
    """A note of the analysis: its text, and for code a :class:`NoteKind` and, for a note on
    one file, the file and what is said of it (a ``str``, as :class:`Skip`)."""

    kind: NoteKind
    path: str | None
    reason: str | None

    def __new__(
        cls,
        text: str,
        kind: NoteKind = NoteKind.GENERAL,
        path: str | None = None,
        reason: str | None = None,
    ) -> Note:
        self = super().__new__(cls, text)
        self.kind, self.path, self.reason = kind, path, reason
        return self

    @classmethod
    def on_file(cls, path: str, reason: str, *, skipped: bool = False) -> Note:
        """``<path>: <reason>``, or ``skipped <path>: <reason>`` for a file not read."""
        if skipped:
            return cls(f"skipped {path}: {reason}", NoteKind.SKIPPED_FILE, path, reason)
        return cls(f"{path}: {reason}", NoteKind.FILE, path, reason)

    def __reduce__(self) -> tuple[type[Note], tuple[str, NoteKind, str | None, str | None]]:
        return (Note, (str(self), self.kind, self.path, self.reason))


@dataclass(frozen=True, slots=True)
class InputFile:
    """A file (or stdin) offered to the analyzer and what became of it."""

    path: str
    bytes: int
    kind: str
    lines: int = 0
    skipped: Skip | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class ClockSkew:
    """How far a host's clock runs ahead of the reference host's, and how sure that is."""

    offset_s: float
    uncertainty_s: float
    basis: str
    applied: bool


@dataclass(frozen=True, slots=True)
class Fact:
    """Something the logs state about the environment (``torch=2.1.2`` on node-01, line 12)."""

    key: str
    value: str
    file: str
    line: int
    host: str | None
    rank: int | None


@dataclass(frozen=True, slots=True)
class SyncMark:
    """A moment every rank lives through together (``step 120`` done), as one rank logged it."""

    key: str
    time: float
    host: str | None
    rank: int | None


#: Evidence lines shown per cause.
MAX_EVIDENCE = 12


@dataclass(slots=True)
class FileResult:
    """What one file contributed: signals, tracebacks, launcher reports, per-rank stats."""

    hits: list[Hit]
    tracebacks: list[Traceback]
    failures: list[ChildFailure]
    ranks: list[RankSummary]
    lines: int
    assumed_year: int | None = None
    #: (host, local rank) -> global rank, from launcher output and stacked prefixes.
    rank_map: dict[tuple[str, int], int] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)
    sync: list[SyncMark] = field(default_factory=list)
    #: Lines (or ``\r``-split parts) that took the per-line path; on the fast path the
    #: trigger lines and what open state needed around them (benchmarks/run.py reports it).
    fed_lines: int = 0


@dataclass(slots=True)
class Timeline:
    """Every finding of the job, on one clock, plus per-rank summaries."""

    hits: list[Hit]
    tracebacks: list[Traceback]
    failures: list[ChildFailure]
    ranks: list[RankSummary]
    clock_skew: dict[str, ClockSkew] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Match:
    """A rule whose condition held, with the hits that made it hold (oldest first)."""

    rule: Rule
    hits: tuple[Hit, ...]

    @property
    def first_time(self) -> float | None:
        """Time of the earliest timed hit."""
        times = [h.evidence.time for h in self.hits if h.evidence.time is not None]
        return min(times) if times else None

    @property
    def ranks(self) -> list[int]:
        """Ranks the evidence came from."""
        return sorted({h.evidence.rank for h in self.hits if h.evidence.rank is not None})

    @property
    def hosts(self) -> list[str]:
        """Hosts the evidence came from."""
        return sorted({h.evidence.host for h in self.hits if h.evidence.host})

    @property
    def fields(self) -> dict[str, str]:
        """Named-group captures: the fatal hits' first, then the earliest (others fill gaps).

        An exception that was logged and survived is not what ended the process, so it is
        not what the remediation talks about when the fatal one is known.
        """
        out: dict[str, str] = {}
        order = {True: 0, None: 1, False: 2}
        for h in sorted(self.hits, key=lambda h: order[h.fatal]):
            for key, value in h.fields.items():
                out.setdefault(key, value)
        return out


@dataclass(frozen=True, slots=True)
class Explained:
    """A symptom (or secondary cause) attributed to a cause."""

    rule_id: str
    cls: str
    title: str
    ranks: tuple[int, ...]
    count: int
    first_seen: float | None


@dataclass(frozen=True, slots=True)
class FirstFailure:
    """Where the failure began: the earliest fatal event of the job."""

    rank: int | None
    host: str | None
    time: float | None
    file: str
    line: int
    text: str
    kind: Literal["crash", "hang", "unknown"] = "crash"
    rule_id: str | None = None
    time_inferred: bool = False
    #: The innermost frame of the user's code in the failing traceback, when one was printed.
    frame: Frame | None = None

    def subject(self, escape: Callable[[str], str] = str) -> str:
        """Who failed first, as every format says it: ``rank 5 on node-02``, ``the process``
        (``escape`` makes the host safe for the format)."""
        who = f"rank {self.rank}" if self.rank is not None else "the process"
        return f"{who} on {escape(self.host)}" if self.host else who

    @property
    def verb(self) -> str:
        """``failed first``, or for a hang ``stopped making progress first (hang)``."""
        return "stopped making progress first (hang)" if self.kind == "hang" else "failed first"

    @property
    def kind_note(self) -> str:
        """After a "First failure:" label, what the label does not say: `` (hang)`` or nothing."""
        return " (hang)" if self.kind == "hang" else ""


@dataclass(frozen=True, slots=True)
class KnownReport:
    """A labelled crash report of the corpus' tune part: its thread and its diagnosed class."""

    source: str
    cls: str
    #: The exception line (or the last line read) the report ended in, as its log printed it.
    exception: str

    def __reduce__(self) -> _Call:
        return _constructor_call(self)


#: Held-out reports a fallback's guesses must have been measured on before one is stated as
#: ``likely`` (:attr:`Cause.class_label`).
MEASURED = 5


@dataclass(frozen=True, slots=True)
class Resemblance:
    """What a cause no rule names resembles among known reports (:mod:`crashlens.resemble`)."""

    #: The most likely class, and its share of the likelihood over every class (0..1].
    cls: str
    share: float
    #: The known reports of that class closest to this one, nearest first.
    reports: tuple[KnownReport, ...]
    #: How often the same rule's guess was right on held-out labelled reports (each
    #: compared without itself and without the rules written from it): (right, of).
    record: tuple[int, int] | None = None

    def __reduce__(self) -> _Call:
        return _constructor_call(self)


@dataclass(slots=True)
class Cause:
    """A ranked finding: a root cause, or an unexplained symptom when no cause is visible."""

    match: Match
    kind: Literal["cause", "symptom"]
    confidence: float = 0.0
    explains: list[Explained] = field(default_factory=list)
    #: Environment facts (versions, batch size...) for remediation placeholders.
    environment: dict[str, str] = field(default_factory=dict)
    #: The rule's remediation with its placeholders filled (by the rank stage): Markdown, in
    #: which every value taken from the logs is plain text or a code span, never markup.
    remediation: str = ""
    #: The innermost frame of the user's code in the fatal traceback (``{user_frame}``).
    user_frame: Frame | None = None
    #: For a finding that tells how, not why (``resemble: true``), the known reports it resembles.
    resemblance: Resemblance | None = None

    @property
    def cls(self) -> str:
        """The class this finding states: its rule's, or what its resemblance makes likely."""
        return self.resemblance.cls if self.resemblance is not None else self.match.rule.cls

    @property
    def class_label(self) -> str:
        """The class as a report states it: ``likely <class>`` where only a resemblance to
        known reports says it (:mod:`crashlens.resemble`), ``possibly <class>`` where the class
        holds no more than half the likelihood, or such a guess was right for fewer than half
        of the held-out reports its fallback answered, or fewer than :data:`MEASURED` held-out
        reports measured it (2 right of 3 says little)."""
        r = self.resemblance
        if r is None or r.cls == self.match.rule.cls:
            return self.cls
        right, of = r.record or (0, 0)
        if r.share <= 0.5 or of < MEASURED or 2 * right < of:
            return f"possibly {self.cls}"
        return f"likely {self.cls}"

    @property
    def rule_id(self) -> str:
        """The rule that matched."""
        return self.match.rule.id

    @property
    def first_seen(self) -> float | None:
        """Earliest evidence time."""
        return self.match.first_time

    @property
    def evidence(self) -> list[Evidence]:
        """Evidence to show: the fatal hits first, then the earliest, capped."""
        hits = sorted(self.match.hits, key=evidence_order)
        seen: set[tuple[str, int]] = set()
        out = []
        for h in hits:
            key = (h.evidence.file, h.evidence.line)
            if key not in seen:
                seen.add(key)
                out.append(h.evidence)
        return sorted(out[:MAX_EVIDENCE], key=time_order)

    @property
    def lead(self) -> Evidence | None:
        """The line to cite first: the earliest fatal one, else the earliest of any kind.

        A handled exception (logged, and the process went on) never leads when the cause
        also has the line that ended a process.
        """
        hits = sorted(self.match.hits, key=evidence_order)
        return hits[0].evidence if hits else None


def evidence_order(h: Hit) -> tuple[int, float]:
    """Fatal hits first (then not-known, then handled), each group oldest first."""
    fatal_rank = 0 if h.fatal else (1 if h.fatal is None else 2)
    t = h.evidence.time
    return (fatal_rank, t if t is not None else math.inf)


def time_order(ev: Evidence) -> tuple[float, str, int]:
    """Oldest first; untimed last, in file order."""
    return (ev.time if ev.time is not None else math.inf, ev.file, ev.line)


def iso(t: float | None) -> str | None:
    """A POSIX time as ISO 8601 (UTC where the log gave a zone, else the clock as printed)."""
    if t is None:
        return None
    return (
        dt.datetime.fromtimestamp(t, dt.UTC).replace(tzinfo=None).isoformat(timespec="milliseconds")
    )


_EMBEDDED_FRAME = lazyre.compile(
    r'^\s*File "(?P<file>[^"\n]+)", line (?P<line>\d+), in (?P<func>\S+)', re.M
)


def embedded_frames(exc: ExceptionInfo) -> list[Frame]:
    """The frames of a worker's ``Original Traceback`` that ``exc``'s message carries (a
    DataLoader worker's exception re-raised by the main process), oldest first.

    The script the main process was launched with is the user's in the worker too.
    """
    script = launched_script(exc.frames)
    return [
        Frame(m["file"], int(m["line"]), m["func"], m["file"] == script or is_user_path(m["file"]))
        for m in _EMBEDDED_FRAME.finditer(exc.message)
    ]


Origin = Literal["user", "called", "import", "library", "unseen", "none", "cut"]


def exception_origin(exc: ExceptionInfo) -> Origin:
    """Where an exception was raised, and whether the user's code led there.

    ``user``: its innermost frame is the user's code; ``called``: it was raised inside Python
    or a library that the user's code called (a frame of theirs is on the stack); ``import``:
    raised by a library's own module body while an import ran it (its innermost frame and the
    one that imported it are both ``<module>``: the library cannot even load in this
    environment, whoever imported it); ``library``:
    no frame of the user's is shown; ``unseen``: none is shown, but the log starts inside the
    traceback, so its outer frames (where the user's script called in) are not in it;
    ``none``: no frame at all; ``cut``: the log ends inside the traceback, so what was raised
    is not known. A worker's exception re-raised by its parent is judged by the worker's
    original traceback.
    """
    if exc.type == CUT_TRACEBACK:
        return "cut"
    frames = embedded_frames(exc) or list(exc.frames)
    if not frames:
        return "none"
    if frames[-1].user_code:
        return "user"
    if len(frames) >= 2 and frames[-1].function == frames[-2].function == "<module>":
        return "import"
    if any(f.user_code for f in frames) or any(f.user_code for f in exc.frames):
        return "called"
    return "unseen" if exc.head_lost else "library"


def chain_origin(chain: Sequence[ExceptionInfo], at: int = -1) -> Origin:
    """Where the exception ``chain[at]`` (by default the one that escaped) was raised, judged
    with the whole chain.

    Each exception of a chain (``During handling of the above exception...``, ``The above
    exception was the direct cause...``) shows only part of one stack: the earlier ones from
    the frame that caught them down, the last one from the process's top. So a library's
    exception whose own frames hold none of the user's is still the user's (``called``) when
    another exception of its chain passed through their code: their callback raised and the
    library re-raised it, or their script is on the stack the library's handler ran in.
    """
    others = [*chain[:at], *chain[at:][1:]]
    where = exception_origin(chain[at])
    if where in ("library", "unseen", "none") and any(
        f.user_code for exc in others for f in (*embedded_frames(exc), *exc.frames)
    ):
        return "called"
    return where


def judged_origin(chain: Sequence[ExceptionInfo], escaped: Origin | None = None) -> Origin:
    """Where the exception a chain is judged by was raised: the one that escaped or, when the
    log ends inside the chain, the one before the cut (what was raised while handling it is
    not known). ``escaped``: :func:`chain_origin` of the chain, where the caller has it."""
    where = chain_origin(chain) if escaped is None else escaped
    return chain_origin(chain, len(chain) - 2) if where == "cut" and len(chain) > 1 else where


def user_frame(tb: Traceback) -> Frame | None:
    """The innermost frame of the user's code in the exception that escaped ``tb``.

    A DataLoader worker's exception re-raised by the main process carries the worker's
    ``Original Traceback`` in its message: that stack says where the error was raised, so it
    is searched first, then the escaping exception's own frames, then those of the exceptions
    before it in its chain (:func:`chain_origin`). A traceback the log ends in before its
    exception line blames no one: what it was raising is not known (a chain it ends in is
    judged by the exceptions before the cut).
    """
    if tb.final.type == CUT_TRACEBACK and len(tb.exceptions) == 1:
        return None
    for exc in reversed(tb.exceptions):
        for frames in (embedded_frames(exc), list(exc.frames)):
            mine = [f for f in frames if f.user_code]
            if mine:
                return mine[-1]
    return None


def plural(n: int, word: str) -> str:
    """``1 rank``, ``2 ranks``, ``0 files`` (``word`` taking an ``s``)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_RULE_LINE = lazyre.compile(r"^\s*(?:[=\-]{3,}\s*)?$")
_EXCEPTION_LINE = lazyre.compile(
    r"^\s*(?:traceback\s*:\s*)?(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*?)\s*$"
)
_SUMMARY_FIELD = lazyre.compile(r"^\s*(?P<key>rank|host|exitcode)\s*:\s*(?P<value>\S+)")


def exception_text(exc: ExceptionInfo) -> str:
    """An exception as detectors read it: ``Type: message``. A traceback the log ends in has no
    type to show: its text says what is known (where the log stops)."""
    return exc.message if exc.type == CUT_TRACEBACK else f"{exc.type}: {exc.message}"


def headline(exc: ExceptionInfo) -> str:
    """An exception in one line: ``KeyError: 'input_ids'`` (the message's first line).

    A launcher's summary (torchelastic's ``ChildFailedError``, whose message opens with a
    ``=====`` rule) is headed by its root cause instead: the rank that failed first, and the
    exception it died of (else its exit code).
    """
    lines = exc.message.splitlines()
    if exc.type == CUT_TRACEBACK:
        return lines[0] if lines else ""
    if not lines or not _RULE_LINE.match(lines[0]):
        return f"{exc.type}: {lines[0] if lines else ''}"
    start = next((i for i, x in enumerate(lines) if x.startswith("Root Cause")), None)
    if start is None:
        first = next((x.strip() for x in lines if not _RULE_LINE.match(x)), "")
        return f"{exc.type}: {first}"
    root = lines[start + 1 :]
    fields: dict[str, str] = {}
    for line in root:
        m = _SUMMARY_FIELD.match(line)
        if m:
            fields.setdefault(m["key"], m["value"])
    raised = [m["exc"] for m in map(_EXCEPTION_LINE.match, root) if m]
    who = f"rank {fields['rank']}" if "rank" in fields else "a worker"
    if "host" in fields:
        who += f" on {fields['host']}"
    if raised:
        return f"{exc.type}: {who} failed first: {raised[-1]}"
    code = f" (exit code {fields['exitcode']})" if "exitcode" in fields else ""
    return f"{exc.type}: {who} failed first{code}"
