"""Plain data handed from one pipeline stage to the next (no I/O, no pandas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SourceKind = Literal["worker", "launcher", "kernel", "scheduler", "errorfile"]

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


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a Python traceback."""

    file: str
    line: int
    function: str
    user_code: bool


@dataclass(frozen=True, slots=True)
class ExceptionInfo:
    """One exception of a (possibly chained) traceback."""

    type: str
    message: str
    frames: tuple[Frame, ...]
    lineno: int


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

    @property
    def final(self) -> ExceptionInfo:
        """The exception that escaped (printed last)."""
        return self.exceptions[-1]


@dataclass(frozen=True, slots=True)
class Hit:
    """A rule detector matched a line (or a traceback) of the logs."""

    rule_id: str
    detector: str
    evidence: Evidence
    fields: dict[str, str]
    traceback_id: int | None = None
    fatal: bool | None = None


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


@dataclass(frozen=True, slots=True)
class InputFile:
    """A file (or stdin) offered to the analyzer and what became of it."""

    path: str
    bytes: int
    kind: str
    lines: int = 0
    skipped: str | None = None
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
