"""Fleet triage: analyse many crashed jobs into one Parquet table (docs/fleet.md).

``triage(roots, output)`` finds the jobs (one subdirectory per job under each root, local or any
fsspec URL, or a manifest), analyses the new and changed ones on an engine (``local`` process
pool or ``ray``), appends their rows to the table at ``output`` and returns the table (each
job's latest row) as a pandas DataFrame. Needs the ``fleet`` extra (pyarrow, fsspec; ray for
the ray engine; duckdb for summaries); this module imports none of it until it is used.
"""

from __future__ import annotations

import importlib
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crashlens.config import load_config
from crashlens.errors import CrashlensError
from crashlens.fleet.table import FLEET_SCHEMA_VERSION, FleetTable, rows_frame
from crashlens.session import Session

if TYPE_CHECKING:
    import pandas as pd

    from crashlens.fleet.jobs import Job
    from crashlens.fleet.worker import JobOutcome

__all__ = [
    "FLEET_SCHEMA_VERSION",
    "FleetExtraMissingError",
    "TriageRun",
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


def _stale(job: Job, known: Mapping[str, Any], rules_hash: str) -> bool:
    prev = known.get(job.job_id)
    return (
        prev is None
        or prev.fingerprint != job.fingerprint
        or prev.status == "error"
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
) -> TriageRun:
    """Triage every job under ``roots`` (or in ``manifest``) into the table at ``output``.

    Raises:
        FleetExtraMissingError: without the fleet extra.
        CrashlensError: no jobs found, a root or manifest that cannot be read, a table
            directory that is not a fleet table, invalid rules.
        ValueError: an unknown engine.
    """
    from crashlens.fleet.engine import make_engine
    from crashlens.fleet.jobs import discover_jobs, read_manifest
    from crashlens.fleet.worker import WorkerContext, rules_hash

    require("pyarrow", "fsspec", *(["ray"] if engine == "ray" else []))
    runner = make_engine(engine, workers=workers, address=address)
    start = time.perf_counter()
    opts = dict(storage_options or {})
    if manifest is not None:
        found = read_manifest(os.fspath(manifest), storage_options=opts)
    else:
        if not roots:
            raise CrashlensError("give at least one ROOT directory or URL, or --manifest")
        found = discover_jobs([os.fspath(r) for r in roots], jobs_glob=jobs, storage_options=opts)
    if not found:
        where = os.fspath(manifest) if manifest is not None else ", ".join(map(str, roots))
        raise CrashlensError(f"no jobs found in {where} (each job is one subdirectory)")
    session = Session.configured(list(rules), config=load_config())
    ctx = WorkerContext(session.rules, rules_hash(session.rules), opts)
    table = FleetTable(output) if output is not None else None
    known = table.known() if table is not None and not force else {}
    todo = [job for job in found if force or _stale(job, known, ctx.rules_hash)]
    statuses: Counter[str] = Counter()
    errors: list[tuple[str, str]] = []
    rows: list[dict[str, Any]] = []
    evidence: list[dict[str, Any]] = []
    all_rows: list[dict[str, Any]] = []
    batch = table.next_batch() if table is not None else 0
    done = 0
    for outcome in runner.run(todo, ctx):
        row = outcome.row
        statuses[row["status"]] += 1
        if row["status"] == "error":
            errors.append((row["job_id"], row["error"] or ""))
        rows.append(row)
        evidence.extend(outcome.evidence)
        done += 1
        if table is not None and len(rows) >= max(1, commit_every):
            table.write_batch(batch, rows, evidence)
            batch += 1
            rows, evidence = [], []
        elif table is None:
            all_rows.append(row)
            rows, evidence = [], []
        if progress is not None:
            progress(done, len(todo), outcome)
    if table is not None:
        table.write_batch(batch, rows, evidence)
        frame = table.read_jobs()
    else:
        frame = rows_frame(all_rows)
    return TriageRun(
        found=len(found),
        analysed=done,
        unchanged=len(found) - len(todo),
        statuses=statuses,
        errors=sorted(errors),
        seconds=time.perf_counter() - start,
        jobs=frame,
    )


def triage(
    roots: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] = (),
    output: str | os.PathLike[str] | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Triage the jobs under ``roots`` into ``output``; the jobs table as a DataFrame.

    ``options`` are :func:`run_triage`'s: ``engine`` ("local" or "ray"), ``address``, ``jobs``
    (a glob of job directories), ``manifest``, ``workers``, ``force``, ``rules``,
    ``storage_options`` (fsspec options, e.g. an S3 ``endpoint_url``), ``commit_every``,
    ``progress``. Without ``output`` nothing is written and every job is analysed.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    return run_triage(roots, output, **options).jobs


def load(output: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A fleet table's jobs (latest row per job) and their evidence rows."""
    require("pyarrow")
    table = FleetTable(output)
    return table.read_jobs(), table.read_evidence()
