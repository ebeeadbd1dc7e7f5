"""Analysing one job inside a worker: read its files, run the analyzer, make its table rows.

A worker holds one :class:`WorkerContext` (the rules, already loaded and configured, and how to
reach the object store), set once when the worker starts (the local pool's initializer, or the
first task a Ray worker runs). Each job gets its own :class:`~crashlens.session.Session` from
those rules, so nothing is reloaded or recompiled per job. A job on the local file system is
read in place; a job in object storage is downloaded by the worker itself into a temporary
directory that is removed afterwards. Inputs are never written to.

Every failure of one job (unreadable, a listing error, a bug) becomes that job's ``error`` row.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from crashlens import resemble, slurm
from crashlens._version import __version__
from crashlens.errors import CrashlensError, NoInputError
from crashlens.fleet.jobs import Job, filesystem
from crashlens.fleet.table import JobStatus
from crashlens.ingest.discover import Candidate, discover
from crashlens.model import InputFile, SkipKind
from crashlens.report import Report
from crashlens.rulebase import RuleSet
from crashlens.session import RulePack, SequentialRunner, Session

#: Environment facts that get their own column (fact key -> column).
ENV_COLUMNS: dict[str, str] = {
    "torch": "torch",
    "cuda": "cuda",
    "nccl": "nccl",
    "driver": "driver",
    "gpu_model": "gpu",
}
MAX_ERROR = 500


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """What every worker needs, the same for all jobs of a run."""

    rules: RuleSet
    rules_hash: str
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    #: Render each analysed job's HTML report (``triage --reports``) into its outcome.
    reports: bool = False


class SessionFactory:
    """Sessions for one job each, sharing one compiled :class:`~crashlens.session.RulePack`.

    Compiling the rules (the literal index, the fast-path scanner's database) costs far more
    than analysing a small job, so it happens once per worker; each job's session is new, with
    its own analysis state (inputs, notes, a detector's time-outs), on the shared pack.
    """

    def __init__(self, rules: RuleSet) -> None:
        self.pack = RulePack.compile(rules)

    @property
    def rules(self) -> RuleSet:
        return self.pack.rules

    def session(self) -> Session:
        """A new session for one job."""
        return Session(self.pack.rules, runner=SequentialRunner(), pack=self.pack)


_FACTORIES: dict[int, SessionFactory] = {}


def session_factory(ctx: WorkerContext) -> SessionFactory:
    """This process's session factory for ``ctx``'s rules (built on first use)."""
    factory = _FACTORIES.get(id(ctx.rules))
    if factory is None or factory.rules is not ctx.rules:
        _FACTORIES.clear()
        factory = _FACTORIES[id(ctx.rules)] = SessionFactory(ctx.rules)
    return factory


@dataclass(slots=True)
class JobOutcome:
    """One job's row for the jobs table and its evidence rows (plain values, no Arrow)."""

    row: dict[str, Any]
    evidence: list[dict[str, Any]]
    worker_pid: int = 0
    #: The job's HTML report, when the run asked for reports (written by the driver).
    html: str | None = None


def rules_hash(rules: RuleSet) -> str:
    """A digest of the rule base a run used: each rule's id and its source file's contents."""
    digest = hashlib.sha256()
    sources: dict[str, bytes] = {}
    for rule in sorted(rules.rules, key=lambda r: r.id):
        digest.update(f"{rule.id}\0{rule.cls}\0{rule.severity}\0".encode())
        if rule.path and rule.path not in sources:
            try:
                sources[rule.path] = Path(rule.path).read_bytes()
            except OSError:
                sources[rule.path] = rule.path.encode()
    for path in sorted(sources):
        digest.update(hashlib.sha256(sources[path]).digest())
    # The known reports refine a fallback's class (crashlens.resemble): a new index is a new
    # diagnosis as much as a new rule is.
    if resemble.BUNDLED.is_file():
        digest.update(hashlib.sha256(resemble.BUNDLED.read_bytes()).digest())
    return digest.hexdigest()[:16]


def analyze_job(job: Job, ctx: WorkerContext) -> JobOutcome:
    """The job's rows; never raises for a problem with the job itself."""
    start = time.perf_counter()
    try:
        if job.listing_error:
            raise CrashlensError(job.listing_error)
        with _inputs(job, ctx) as candidates:
            session = session_factory(ctx).session()
            session.read_candidates(candidates)
            try:
                report = session.finish()
            except NoInputError as exc:
                if _only_non_logs(session):
                    return _outcome(job, ctx, JobStatus.EMPTY, None, start)
                # every log was empty or could not be read: the job's output is damaged
                status = JobStatus.DAMAGED
                return _outcome(job, ctx, status, None, start, session=session, note=str(exc))
        whole = report.failed or not _all_damaged(report.inputs)
        status = JobStatus.ANALYSED if whole else JobStatus.DAMAGED
        return _outcome(job, ctx, status, report, start)
    except Exception as exc:  # one job's failure is its row, never the run's
        return _outcome(job, ctx, JobStatus.ERROR, None, start, error=_reason(exc))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, CrashlensError):
        text = str(exc)
    elif isinstance(exc, OSError):
        text = f"cannot read: {exc.strerror or exc}" + (
            f" ({exc.filename})" if exc.filename else ""
        )
    else:
        text = f"internal error ({type(exc).__name__}: {exc})"
    text = " ".join(text.split())
    return text[:MAX_ERROR]


def _not_a_log(f: InputFile) -> bool:
    return f.skipped is not None and f.skipped.kind is SkipKind.NOT_A_LOG


def _all_damaged(inputs: list[InputFile]) -> bool:
    """Whether no log of the job was read whole: each was empty, cut short or unreadable."""
    logs = [f for f in inputs if not _not_a_log(f)]
    return bool(logs) and all(f.skipped is not None or f.note is not None for f in logs)


def _only_non_logs(session: Session) -> bool:
    """No input at all, or only files discover leaves out as not logs."""
    return all(
        f.skipped is not None and f.skipped.kind is SkipKind.NOT_A_LOG for f in session.inputs
    )


class _LocalCopy:
    """The job's directory on this machine: the job itself if local, else a downloaded copy."""

    def __init__(self, job: Job, ctx: WorkerContext) -> None:
        self.job = job
        self.ctx = ctx
        self.tmp: str | None = None

    def __enter__(self) -> Path:
        if self.job.local:
            root = Path(self.job.path)
            if not root.is_dir():
                raise CrashlensError(f"{self.job.path}: not a directory (or not found)")
            return root
        self.tmp = tempfile.mkdtemp(prefix="crashlens-fleet-")
        try:
            return self._download(Path(self.tmp))
        except BaseException:
            self.__exit__()
            raise

    def _download(self, root: Path) -> Path:
        fs, base = filesystem(self.job.path, self.ctx.storage_options)
        base = base.rstrip("/")
        remote, local = [], []
        for f in self.job.files:
            rel = PurePosixPath(f.rel)
            if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                continue  # an object name that would escape the job directory
            target = root.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            remote.append(f"{base}/{f.rel}")
            local.append(str(target))
        if remote:
            fs.get(remote, local)
        for f in self.job.files:
            target = root.joinpath(*PurePosixPath(f.rel).parts)
            if f.mtime is not None and target.is_file():
                os.utime(target, (f.mtime, f.mtime))  # year-less timestamps take the file's year
        return root

    def __exit__(self, *_: object) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


@contextlib.contextmanager
def _inputs(job: Job, ctx: WorkerContext) -> Iterator[list[Candidate]]:
    """What the job's session reads: its directory's files, or for a SLURM job the files its
    record names and the record itself (written to a temporary file for the length of it)."""
    if job.slurm is None:
        with _LocalCopy(job, ctx) as root:
            yield _candidates(root)
        return
    with tempfile.TemporaryDirectory(prefix="crashlens-slurm-") as tmp:
        yield [*slurm.job_files(job.slurm), slurm.record_candidate(job.slurm, Path(tmp))]


def _candidates(root: Path) -> list[Candidate]:
    """The job's files, shown by their path relative to the job directory."""
    shown = str(root)
    out = []
    for cand in discover([root]):
        display = cand.display
        if display.startswith(shown.rstrip("/") + "/"):
            display = display[len(shown.rstrip("/")) + 1 :]
        out.append(Candidate(cand.path, display, cand.skipped))
    return out


def when(t: float | None) -> dt.datetime | None:
    """A report time (POSIX seconds, UTC where the log said so) as a naive datetime."""
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.UTC).replace(tzinfo=None)


def _outcome(
    job: Job,
    ctx: WorkerContext,
    status: JobStatus,
    report: Report | None,
    start: float,
    *,
    error: str | None = None,
    session: Session | None = None,
    note: str | None = None,
) -> JobOutcome:
    row = base_row(job, ctx, status, error=error)
    evidence: list[dict[str, Any]] = []
    if report is not None:
        row.update(report_columns(report))
        evidence = list(_evidence(job.job_id, report))
    elif session is not None:
        row.update(read_columns(session.inputs, [*session.notes, *([note] if note else [])]))
    page = None
    if report is not None and ctx is not None and ctx.reports:
        from crashlens.render import render

        page = render(report, "html")
    row["analysis_seconds"] = time.perf_counter() - start
    row["analysed_at"] = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return JobOutcome(row, evidence, os.getpid(), page)


def base_row(
    job: Job, ctx: WorkerContext | None, status: JobStatus, *, error: str | None
) -> dict[str, Any]:
    """The columns every row has, whatever became of the analysis."""
    return {
        "job_id": job.job_id,
        "path": job.path,
        "status": status,
        "cause_class": None,
        "rule": None,
        "title": None,
        "signature": None,
        "signature_text": None,
        "kind": None,
        "confidence": None,
        "severity": None,
        "verdict": None,
        "first_rank": None,
        "first_host": None,
        "first_time": None,
        "n_ranks": 0,
        "hosts": "[]",
        "n_files": 0,
        "bytes": 0,
        "n_causes": 0,
        "symptoms": "{}",
        "notes": "[]",
        "skipped_files": "[]",
        **{col: None for col in ENV_COLUMNS.values()},
        "environment": "{}",
        "submitted_at": job.submitted_at,
        "user": job.user,
        "queue": job.queue,
        "scheduler_state": job.slurm.state if job.slurm else None,
        "nodelist": job.slurm.nodelist if job.slurm else None,
        "last_modified": when(job.last_modified),
        "fingerprint": job.fingerprint,
        "analysis_seconds": 0.0,
        "analysed_at": None,
        "crashlens_version": __version__,
        "rules_hash": ctx.rules_hash if ctx is not None else "",
        "error": error,
        "report": None,
    }


def report_columns(report: Report) -> dict[str, Any]:
    """The analysis columns of a job's row, from its report."""
    files = [f for f in report.inputs if f.skipped is None]
    env = report.environment
    out: dict[str, Any] = {
        "verdict": report.verdict,
        "n_ranks": len(report.ranks),
        "hosts": json.dumps(sorted({r.host for r in report.ranks if r.host})),
        "n_files": len(files),
        "bytes": sum(f.bytes for f in files),
        "n_causes": len(report.causes),
        "symptoms": json.dumps(symptom_counts(report), sort_keys=True),
        "environment": json.dumps(env, sort_keys=True, ensure_ascii=False),
        **read_columns(report.inputs, report.notes),
    }
    for key, col in ENV_COLUMNS.items():
        out[col] = env.get(key)
    top = report.primary
    if top is not None:
        rule = top.match.rule
        sig = report.signature(top)
        out.update(
            cause_class=top.cls,
            rule=rule.id,
            title=rule.title,
            signature=sig.key,
            signature_text=sig.text,
            kind=top.kind,
            confidence=float(top.confidence),
            severity=rule.severity,
        )
    ff = report.first_failure
    if ff is not None:
        out.update(first_rank=ff.rank, first_host=ff.host, first_time=when(ff.time))
    return out


def read_columns(inputs: list[InputFile], notes: Sequence[str]) -> dict[str, str]:
    """``notes`` (the analysis's notes, then each damaged file's) and ``skipped_files`` (the
    logs that could not be read, not the files that are no logs), as JSON lists: what a reader
    of the table needs to know was not read whole."""
    file_notes = [f"{f.path}: {f.note}" for f in inputs if f.skipped is None and f.note]
    skipped = [
        {"path": f.path, "reason": f.skipped}
        for f in inputs
        if f.skipped is not None and not _not_a_log(f)  # those are never listed for a job
    ]
    return {
        "notes": json.dumps([*notes, *file_notes], ensure_ascii=False),
        "skipped_files": json.dumps(skipped, ensure_ascii=False),
    }


def symptom_counts(report: Report) -> dict[str, int]:
    """Events per class besides the top cause: what it explains, and the other findings."""
    counts: Counter[str] = Counter()
    for i, cause in enumerate(report.causes):
        if i > 0:
            counts[cause.cls] += len(cause.match.hits)
        for e in cause.explains:
            counts[e.cls] += e.count
    return dict(sorted(counts.items()))


def _evidence(job_id: str, report: Report) -> Iterator[dict[str, Any]]:
    for position, cause in enumerate(report.causes):
        sig = report.signature(cause).key
        for ev in cause.evidence:
            yield {
                "job_id": job_id,
                "position": position,
                "rule": cause.match.rule.id,
                "cause_class": cause.cls,
                "signature": sig,
                "file": ev.file,
                "line": ev.line,
                "rank": ev.rank,
                "host": ev.host,
                "time": when(ev.time),
                "text": ev.text,
            }


def report_name(job_id: str) -> str:
    """The file name of a job's HTML report: its id made safe, plus a digest of the id (two
    ids that differ only in unsafe characters never share a file)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", job_id).strip("._")[:100] or "job"
    return f"{safe}-{hashlib.sha256(job_id.encode()).hexdigest()[:8]}.html"


def failed_outcome(job: Job, ctx: WorkerContext | None, reason: str) -> JobOutcome:
    """The error row for a job whose worker never returned (killed, lost)."""
    return JobOutcome(base_row(job, ctx, JobStatus.ERROR, error=reason[:MAX_ERROR]), [])


# -- one context per worker process ----------------------------------------------------------
_CONTEXT: dict[str, WorkerContext] = {}


def init_worker(ctx: WorkerContext) -> None:
    """Pool initializer: keep the run's context; compile the rules once, now."""
    _CONTEXT.clear()
    _CONTEXT[ctx.rules_hash] = ctx
    session_factory(ctx)


def worker_analyze(job: Job) -> JobOutcome:
    """A local pool task: the job, analysed with the context this worker was started with."""
    return analyze_job(job, next(iter(_CONTEXT.values())))


def cached_context(key: str, load: Any) -> WorkerContext:
    """The context for ``key`` in this process, loading it (``load()``) only the first time."""
    ctx = _CONTEXT.get(key)
    if ctx is None:
        ctx = load()
        assert isinstance(ctx, WorkerContext)
        _CONTEXT.clear()
        _CONTEXT[key] = ctx
        session_factory(ctx)
    return ctx
