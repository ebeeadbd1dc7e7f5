"""Fleet triage: analyse many crashed jobs into one Parquet table (docs/fleet.md).

``triage(roots, output)`` finds the jobs (one subdirectory per job under each root, local or any
fsspec URL, or a manifest), analyses the new and changed ones on an engine (``local`` process
pool or ``ray``), appends their rows to the table at ``output`` and returns the table (each
job's latest row) as a pandas DataFrame. Needs the ``fleet`` extra (pyarrow, fsspec; ray for
the ray engine; duckdb for summaries); this module imports none of it until it is used.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashlens.config import load_config
from crashlens.errors import CrashlensError
from crashlens.fleet.table import FLEET_SCHEMA_VERSION, MARKER, FleetTable, JobStatus, rows_frame
from crashlens.session import Session

if TYPE_CHECKING:
    import pandas as pd

    from crashlens.fleet.jobs import Job
    from crashlens.fleet.worker import JobOutcome

__all__ = [
    "FLEET_SCHEMA_VERSION",
    "FleetExtraMissingError",
    "TriageInterrupted",
    "TriageRun",
    "history",
    "load",
    "run_triage",
    "triage",
]

EXTRA_HINT = "pip install 'crashlens[fleet]'"
#: Jobs per committed part file: what a killed run can lose at most.
COMMIT_EVERY = 256

#: Called after each job: (jobs done, jobs to do, the job's outcome: row, evidence, worker pid).
Progress = Callable[[int, int, "JobOutcome"], None]


class FleetExtraMissingError(CrashlensError):
    """A package of the ``fleet`` extra is not installed."""


def require(*modules: str, what: str = "crashlens triage") -> None:
    """Import ``modules`` or say, in one line, to install the fleet extra.

    Raises:
        FleetExtraMissingError: when one of them cannot be imported.
    """
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            raise FleetExtraMissingError(f"{what} needs the fleet extra: {EXTRA_HINT}") from None


@dataclass(slots=True)
class TriageRun:
    """What one triage run did; ``jobs`` is the table after it."""

    found: int
    analysed: int
    unchanged: int
    statuses: Counter[str]
    errors: list[tuple[str, str]]
    seconds: float
    jobs: pd.DataFrame = field(repr=False)
    #: Part files a killed earlier run left uncommitted, removed before this run wrote.
    orphans_removed: int = 0
    #: Things about the job list worth a line on stderr (a "job" that looks like many).
    warnings: list[str] = field(default_factory=list)


class TriageInterrupted(CrashlensError):
    """The run was interrupted (Ctrl-C); the jobs finished before it are committed."""

    def __init__(self, done: int, todo: int) -> None:
        super().__init__(
            f"interrupted: {done} of {todo} job(s) finished and committed; rerun the same "
            "command to analyse the rest"
        )
        self.done = done
        self.todo = todo


@dataclass(slots=True)
class _Run:
    """The outcomes of a run as they arrive, committed every ``commit_every`` jobs."""

    table: FleetTable | None
    commit_every: int
    reports: Path | None = None
    done: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    errors: list[tuple[str, str]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    all_rows: list[dict[str, Any]] = field(default_factory=list)
    batch: int = 0

    def __post_init__(self) -> None:
        self.batch = self.table.next_batch() if self.table is not None else 0

    def add(self, outcome: JobOutcome) -> None:
        row = outcome.row
        if self.reports is not None and outcome.html is not None:
            row["report"] = str(self._write_report(row["job_id"], outcome.html))
        self.statuses[row["status"]] += 1
        if row["status"] == JobStatus.ERROR:
            self.errors.append((row["job_id"], row["error"] or ""))
        self.done += 1
        if self.table is None:
            self.all_rows.append(row)
            return
        self.rows.append(row)
        self.evidence.extend(outcome.evidence)
        if len(self.rows) >= max(1, self.commit_every):
            self.flush()

    def _write_report(self, job_id: str, html: str) -> Path:
        from crashlens.fleet.worker import report_name

        assert self.reports is not None
        target = self.reports / report_name(job_id)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, target)
        return target

    def flush(self) -> None:
        if self.table is not None and self.rows:
            self.table.write_batch(self.batch, self.rows, self.evidence)
            self.batch += 1
            self.rows, self.evidence = [], []


def _stale(job: Job, known: Mapping[str, Any], rules_hash: str) -> bool:
    prev = known.get(job.job_id)
    return (
        prev is None
        or prev.fingerprint != job.fingerprint
        or prev.status == JobStatus.ERROR
        or prev.rules_hash != rules_hash
    )


def run_triage(
    roots: Sequence[str | os.PathLike[str]] = (),
    output: str | os.PathLike[str] | None = None,
    *,
    engine: str = "local",
    address: str | None = None,
    jobs: str | None = None,
    manifest: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    force: bool = False,
    rules: Sequence[str | os.PathLike[str]] = (),
    storage_options: Mapping[str, Any] | None = None,
    commit_every: int = COMMIT_EVERY,
    progress: Progress | None = None,
    reports: str | os.PathLike[str] | None = None,
    path_fields: str | None = None,
    quiet: bool = False,
    slurm_since: str | None = None,
) -> TriageRun:
    """Triage every job under ``roots`` (or in ``manifest``, or the scheduler's failed jobs
    since ``slurm_since``) into the table at ``output``.

    Raises:
        FleetExtraMissingError: without the fleet extra.
        CrashlensError: no jobs found, a root or manifest that cannot be read, a table
            directory that is not a fleet table, invalid rules.
        ValueError: an unknown engine.
    """
    from crashlens.fleet.engine import make_engine
    from crashlens.fleet.worker import WorkerContext, rules_hash

    require("pyarrow", "fsspec", *(["ray"] if engine == "ray" else []))
    runner = make_engine(engine, workers=workers, address=address, quiet=quiet)
    start = time.perf_counter()
    opts = dict(storage_options or {})
    warnings: list[str] = []
    found = _job_list(roots, jobs, manifest, slurm_since, path_fields, opts, warnings)
    session = Session.configured(list(rules), config=load_config())
    ctx = WorkerContext(session.rules, rules_hash(session.rules), opts, reports=reports is not None)
    report_dir = _report_dir(reports)
    table = FleetTable(output) if output is not None else None
    with table.lock() if table is not None else contextlib.nullcontext():
        batches = _Run(table, commit_every, report_dir)  # numbered past every part, orphans too
        removed = table.remove_orphans() if table is not None else 0
        known = table.known() if table is not None and not force else {}
        todo = [job for job in found if force or _stale(job, known, ctx.rules_hash)]
        try:
            for outcome in runner.run(todo, ctx):
                batches.add(outcome)
                if progress is not None:
                    progress(batches.done, len(todo), outcome)
        except KeyboardInterrupt:
            batches.flush()  # what is finished is kept; the rest is for the next run
            raise TriageInterrupted(batches.done, len(todo)) from None
        batches.flush()
    frame = table.read_jobs() if table is not None else rows_frame(batches.all_rows)
    return TriageRun(
        found=len(found),
        analysed=batches.done,
        unchanged=len(found) - len(todo),
        statuses=batches.statuses,
        errors=sorted(batches.errors),
        orphans_removed=removed,
        warnings=warnings,
        seconds=time.perf_counter() - start,
        jobs=frame,
    )


def _job_list(
    roots: Sequence[str | os.PathLike[str]],
    jobs: str | None,
    manifest: str | os.PathLike[str] | None,
    slurm_since: str | None,
    path_fields: str | None,
    opts: dict[str, Any],
    warnings: list[str],
) -> list[Job]:
    """The jobs a run covers: the scheduler's failed ones, a manifest's, or the roots'.

    Raises:
        CrashlensError: nothing to list, or no job in a manifest or the roots.
    """
    from crashlens.fleet.jobs import PathFields, discover_jobs, read_manifest, slurm_jobs

    if slurm_since is not None:
        return slurm_jobs(slurm_since)  # no failed job in the window is an answer
    if manifest is not None:
        found = read_manifest(os.fspath(manifest), storage_options=opts)
    else:
        if not roots:
            raise CrashlensError("give at least one ROOT directory or URL, or --manifest")
        layout = PathFields.parse(path_fields) if path_fields is not None else None
        found = discover_jobs(
            [os.fspath(r) for r in roots],
            jobs_glob=jobs,
            storage_options=opts,
            path_fields=layout,
            warnings=warnings,
        )
    if not found:
        where = os.fspath(manifest) if manifest is not None else ", ".join(map(str, roots))
        raise CrashlensError(f"no jobs found in {where} (each job is one subdirectory)")
    return found


def _report_dir(reports: str | os.PathLike[str] | None) -> Path | None:
    """Where each job's HTML report goes (created), or None.

    Raises:
        CrashlensError: a directory that cannot be created.
    """
    if reports is None:
        return None
    report_dir = Path(reports)
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CrashlensError(f"cannot create {report_dir}: {exc.strerror or exc}") from None
    return report_dir


def triage(
    roots: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] = (),
    output: str | os.PathLike[str] | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Triage the jobs under ``roots`` into ``output``; the jobs table as a DataFrame.

    ``options`` are :func:`run_triage`'s: ``engine`` ("local" or "ray"), ``address``, ``jobs``
    (a glob of job directories), ``manifest``, ``workers``, ``force``, ``rules``,
    ``storage_options`` (fsspec options, e.g. an S3 ``endpoint_url``), ``commit_every``,
    ``progress``, ``reports`` (a directory for each analysed job's HTML report),
    ``path_fields`` (the layout of job directories: ``"{user}/{date}/{job}"``),
    ``slurm_since`` (the scheduler's failed jobs since ``"1d"``, ``"12h"``, a date). Without
    ``output`` nothing is written and every job is analysed.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    return run_triage(roots, output, **options).jobs


def history(table: str | os.PathLike[str], signature: str) -> str | None:
    """One line on the jobs of a fleet table with ``signature``: how many, since when, the
    latest; None when none has it.

    Raises:
        FleetExtraMissingError: without pyarrow.
        CrashlensError: for a path that is not a fleet table.
    """
    require("pyarrow", what="crashlens analyze --fleet")
    if not (Path(table) / MARKER).is_file():
        raise CrashlensError(f"{os.fspath(table)}: not a fleet table (no {MARKER})")
    columns = ["job_id", "signature", "submitted_at", "first_time", "last_modified"]
    jobs = FleetTable(table).read_jobs(columns=columns)
    same = jobs[jobs["signature"] == signature]
    if same.empty:
        return None
    when = same["submitted_at"].fillna(same["first_time"]).fillna(same["last_modified"])
    order = when.sort_values(kind="stable")
    first = order.dropna().iloc[0] if order.notna().any() else None
    latest = same.loc[order.index[-1], "job_id"] if order.notna().any() else same["job_id"].iloc[0]
    since = f" since {first:%Y-%m-%d}" if first is not None else ""
    return (
        f"same failure signature ({signature}) in {len(same)} job(s) of {os.fspath(table)}"
        f"{since}, the latest {latest}"
    )


def load(output: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A fleet table's jobs (latest row per job) and their evidence rows."""
    require("pyarrow")
    table = FleetTable(output)
    return table.read_jobs(), table.read_evidence()
