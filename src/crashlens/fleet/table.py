"""The fleet table on disk: a directory of Parquet part files, appended to atomically.

Layout of ``fleet.parquet/`` (documented in docs/fleet.md, versioned by
:data:`FLEET_SCHEMA_VERSION`)::

    _fleet.json                         {"fleet_schema_version": 2}
    _fleet.lock                         while a run writes: {"pid": ..., "host": ..., "since": ...}
    jobs/part-000001-<id>.parquet       one row per job analysed in that batch
    evidence/part-000001-<id>.parquet   the evidence rows of those jobs
    commits/000001-<id>.json            the commit record: which two parts make batch 1

A batch is written as its evidence part, then its jobs part, then its commit record (the commit
point); each file is written under a dot-name first (readers skip those), flushed, and
``os.replace``d. Readers see only the parts a commit record names, so a run killed between two
of those steps leaves parts nobody reads (orphans), which the next writer removes. Batch numbers
count every part ever written, so an orphan's number is never reused. One writer at a time: a
run holds ``_fleet.lock`` (created exclusively) from reading what the table knows to its last
commit; a second run refuses with the holder's pid, and a lock whose process is gone (same host)
is taken over. Rows are never rewritten: a job analysed again (changed, ``--force``, an error
retried) gets a newer row, and readers take each job's row from its latest batch.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashlens.errors import CrashlensError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

FLEET_SCHEMA_VERSION = 2


class JobStatus(StrEnum):
    """What became of a job's analysis: the ``status`` column."""

    ANALYSED = "analysed"  #: read and diagnosed (a failure, or none found)
    EMPTY = "empty"  #: no log at all (only files that are no logs, or none)
    DAMAGED = "damaged"  #: no log read whole and nothing failed: the output is damaged
    ERROR = "error"  #: the job could not be analysed (its ``error`` says why)


MARKER = "_fleet.json"
LOCK = "_fleet.lock"
_PART = re.compile(r"^part-(\d{6})-([0-9a-f]{12})\.parquet$")
_COMMIT = re.compile(r"^(\d{6})-([0-9a-f]{12})\.json$")

#: (column, Arrow type name, nullable): the jobs table, in order.
JOB_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "string"),
    ("path", "string"),
    ("status", "string"),
    ("cause_class", "string"),
    ("rule", "string"),
    ("title", "string"),
    ("signature", "string"),
    ("signature_text", "string"),
    ("kind", "string"),
    ("confidence", "float64"),
    ("severity", "string"),
    ("verdict", "string"),
    ("first_rank", "int64"),
    ("first_host", "string"),
    ("first_time", "timestamp"),
    ("n_ranks", "int64"),
    ("hosts", "string"),
    ("n_files", "int64"),
    ("bytes", "int64"),
    ("n_causes", "int64"),
    ("symptoms", "string"),
    ("notes", "string"),
    ("skipped_files", "string"),
    ("torch", "string"),
    ("cuda", "string"),
    ("nccl", "string"),
    ("driver", "string"),
    ("gpu", "string"),
    ("environment", "string"),
    ("submitted_at", "timestamp"),
    ("user", "string"),
    ("queue", "string"),
    ("scheduler_state", "string"),
    ("nodelist", "string"),
    ("last_modified", "timestamp"),
    ("fingerprint", "string"),
    ("analysis_seconds", "float64"),
    ("analysed_at", "timestamp"),
    ("crashlens_version", "string"),
    ("rules_hash", "string"),
    ("error", "string"),
    ("report", "string"),
    ("batch", "int64"),
    ("schema_version", "int32"),
)
EVIDENCE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "string"),
    ("position", "int64"),
    ("rule", "string"),
    ("cause_class", "string"),
    ("signature", "string"),
    ("file", "string"),
    ("line", "int64"),
    ("rank", "int64"),
    ("host", "string"),
    ("time", "timestamp"),
    ("text", "string"),
    ("batch", "int64"),
)
#: String columns added to the jobs table after schema 2 was first written: a part without
#: them reads them as nulls (:func:`_conformed`, the summary's view).
ADDED_COLUMNS = ("scheduler_state", "nodelist")
#: Columns that depend on where and when a job was read, not on what its logs say.
RUN_COLUMNS = frozenset(
    {"path", "fingerprint", "last_modified", "analysis_seconds", "analysed_at", "batch", "report"}
)


def arrow_schema(columns: Iterable[tuple[str, str]]) -> pa.Schema:
    """The Arrow schema of a table described by ``(name, type)`` pairs."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "float64": pa.float64(),
        "int64": pa.int64(),
        "int32": pa.int32(),
        "timestamp": pa.timestamp("us"),
    }
    fields = [pa.field(name, types[kind]) for name, kind in columns]
    meta = {b"crashlens_fleet_schema_version": str(FLEET_SCHEMA_VERSION).encode()}
    return pa.schema(fields, metadata=meta)


@dataclass(frozen=True, slots=True)
class Commit:
    """One committed batch: its number and the part files it is made of."""

    batch: int
    jobs: str
    evidence: str


@dataclass(frozen=True, slots=True)
class Known:
    """What the table already says about a job (for incremental runs)."""

    fingerprint: str
    status: str
    rules_hash: str


class FleetTable:
    """A fleet table directory (created on the first write)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise CrashlensError(f"{self.path}: exists and is not a fleet table directory")
        if self.path.is_dir() and any(e.name != LOCK for e in self.path.iterdir()):
            marker = self.path / MARKER
            if not marker.is_file():
                raise CrashlensError(
                    f"{self.path}: a non-empty directory that is not a fleet table "
                    f"(no {MARKER}); refusing to write into it"
                )
            try:
                version = json.loads(marker.read_text())["fleet_schema_version"]
            except (OSError, ValueError, KeyError, TypeError):
                raise CrashlensError(f"{marker}: unreadable fleet table marker") from None
            if version != FLEET_SCHEMA_VERSION:
                raise CrashlensError(
                    f"{self.path}: fleet schema version {version}, this crashlens writes "
                    f"{FLEET_SCHEMA_VERSION}; write to a new table"
                )

    # -- parts and commits -------------------------------------------------------------------
    def _parts(self, table: str) -> list[tuple[int, str, Path]]:
        folder = self.path / table
        if not folder.is_dir():
            return []
        out = []
        for entry in folder.iterdir():
            m = _PART.match(entry.name)
            if m:
                out.append((int(m.group(1)), m.group(2), entry))
        return sorted(out)

    def commits(self) -> list[Commit]:
        """The committed batches, oldest first: every readable commit record that no
        compaction's record replaces."""
        return [c for _, c in self._live_records()]

    def _records(self) -> list[tuple[Path, Commit, list[str]]]:
        folder = self.path / "commits"
        if not folder.is_dir():
            return []
        out = []
        for entry in sorted(folder.iterdir()):
            if not _COMMIT.match(entry.name):
                continue
            try:
                data = json.loads(entry.read_text(encoding="utf-8"))
                commit = Commit(int(data["batch"]), str(data["jobs"]), str(data["evidence"]))
                replaces = [str(x) for x in data.get("replaces", [])]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            out.append((entry, commit, replaces))
        return out

    def _live_records(self) -> list[tuple[Path, Commit]]:
        records = self._records()
        replaced = {name for _, _, names in records for name in names}
        live = [(path, c) for path, c, _ in records if path.name not in replaced]
        return sorted(live, key=lambda pc: pc[1].batch)

    def orphans(self) -> list[Path]:
        """Part files no commit record names: what a run killed mid-commit left."""
        named = {(c.jobs, c.evidence) for c in self.commits()}
        jobs = {c for c, _ in named}
        evidence = {e for _, e in named}
        out = [p for _, _, p in self._parts("jobs") if p.name not in jobs]
        out += [p for _, _, p in self._parts("evidence") if p.name not in evidence]
        for table in ("jobs", "evidence", "commits"):
            folder = self.path / table
            if folder.is_dir():
                out += [p for p in folder.iterdir() if p.name.startswith(".")]
        live = {path for path, _ in self._live_records()}
        out += [path for path, _, _ in self._records() if path not in live]  # replaced
        return sorted(out)

    def remove_orphans(self) -> int:
        """Delete the orphaned parts (only while holding the lock); how many there were."""
        removed = 0
        for path in self.orphans():
            try:
                path.unlink()
                removed += 1
            except OSError:
                pass
        return removed

    def next_batch(self) -> int:
        """The number the next batch gets: past every batch, committed or orphaned."""
        numbers = [c.batch for _, c, _ in self._records()]
        numbers += [b for t in ("jobs", "evidence") for b, _, _ in self._parts(t)]
        return max(numbers, default=0) + 1

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the table's writer lock; refuse when another live run holds it.

        Raises:
            TableLockedError: another process (alive, or on another host) holds the lock.
        """
        created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        lock = self.path / LOCK
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = _read_lock(lock)
                if holder is not None and _alive(holder):
                    raise TableLockedError(
                        f"{self.path}: another crashlens triage is writing this table (pid "
                        f"{holder.get('pid')} on {holder.get('host')}, since "
                        f"{holder.get('since')}); wait for it to finish, or delete {lock} if "
                        "that run is gone"
                    ) from None
                lock.unlink(missing_ok=True)  # a stale lock: its process is gone
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(me, fh)
            break
        else:
            raise TableLockedError(f"{self.path}: cannot take the writer lock {lock}")
        try:
            yield
        finally:
            holder = _read_lock(lock)
            if holder is not None and holder.get("pid") == me["pid"]:
                lock.unlink(missing_ok=True)
            if created and not any(self.path.iterdir()):
                self.path.rmdir()  # a run that wrote nothing leaves no table behind

    def write_batch(
        self, batch: int, rows: list[dict[str, Any]], evidence: list[dict[str, Any]]
    ) -> None:
        """Commit one batch: its evidence part, its jobs part, then the commit record."""
        import pyarrow as pa

        if not rows:
            return
        stamp = {"batch": batch, "schema_version": FLEET_SCHEMA_VERSION}
        self._commit(
            batch,
            pa.Table.from_pylist([{**r, **stamp} for r in rows], schema=arrow_schema(JOB_COLUMNS)),
            pa.Table.from_pylist(
                [{**r, **stamp} for r in evidence], schema=arrow_schema(EVIDENCE_COLUMNS)
            ),
        )

    def compact(self) -> tuple[int, int, int]:
        """Merge every committed part into one pair, keeping each job's latest row and its
        evidence; call it holding :meth:`lock`. Returns (parts merged, job rows kept, rows
        dropped). Crash-safe: the new commit record names the records it replaces, so readers
        see either the old parts or the new ones, never both; the old ones are removed after.
        """
        import pyarrow as pa

        records = self._live_records()
        if len(records) < 2:
            return len(records), len(self.read_jobs(["job_id"])), 0
        everything = self._read("jobs", JOB_COLUMNS, None)
        jobs = _latest(everything, ("job_id",))
        evidence = self.read_evidence()
        batch = self.next_batch()
        self._commit(
            batch,
            pa.Table.from_pandas(jobs, schema=arrow_schema(JOB_COLUMNS), preserve_index=False),
            pa.Table.from_pandas(
                evidence, schema=arrow_schema(EVIDENCE_COLUMNS), preserve_index=False
            ),
            replaces=[path.name for path, _ in records],
        )
        self.remove_orphans()
        return len(records), len(jobs), len(everything) - len(jobs)

    def _commit(
        self, batch: int, jobs: pa.Table, evidence: pa.Table, replaces: list[str] | None = None
    ) -> None:
        import pyarrow.parquet as pq

        self.path.mkdir(parents=True, exist_ok=True)
        marker = self.path / MARKER
        if not marker.exists():
            _atomic_text(marker, json.dumps({"fleet_schema_version": FLEET_SCHEMA_VERSION}))
        ident = uuid.uuid4().hex[:12]
        part = f"part-{batch:06d}-{ident}.parquet"
        for table, arrow in (("evidence", evidence), ("jobs", jobs)):
            folder = self.path / table
            folder.mkdir(exist_ok=True)
            tmp = folder / f".{part}.tmp"
            pq.write_table(arrow, tmp, compression="zstd")
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, folder / part)
            _fsync_dir(folder)
        commits = self.path / "commits"
        commits.mkdir(exist_ok=True)
        record: dict[str, Any] = {
            "batch": batch,
            "jobs": part,
            "evidence": part,
            "rows": jobs.num_rows,
            "evidence_rows": evidence.num_rows,
            "committed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        if replaces:
            record["replaces"] = sorted(replaces)
        _atomic_text(commits / f"{batch:06d}-{ident}.json", json.dumps(record), sync=True)
        _fsync_dir(commits)

    # -- reading ----------------------------------------------------------------------------
    def known(self) -> dict[str, Known]:
        """Each job's latest fingerprint, status and rules hash."""
        jobs = self.read_jobs(columns=["job_id", "fingerprint", "status", "rules_hash"])
        return {
            str(r.job_id): Known(str(r.fingerprint), str(r.status), str(r.rules_hash))
            for r in jobs.itertuples(index=False)
        }

    def read_jobs(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The jobs table: each job's latest row, sorted by job id."""
        wanted = None if columns is None else list(dict.fromkeys([*columns, "batch"]))
        frame = _latest(self._read("jobs", JOB_COLUMNS, wanted), ("job_id",))
        return frame if columns is None else frame[columns]

    def read_evidence(self) -> pd.DataFrame:
        """The evidence rows of each job's latest analysis."""
        import pandas as pd

        latest = self._read("jobs", JOB_COLUMNS, ["job_id", "batch"])
        latest = _latest(latest, ("job_id",))
        evidence = self._read("evidence", EVIDENCE_COLUMNS, None)
        if evidence.empty:
            return evidence
        merged = evidence.merge(latest[["job_id", "batch"]], on=["job_id", "batch"])
        merged = merged.sort_values(["job_id", "position"], kind="stable")  # report order within
        return pd.DataFrame(merged.reset_index(drop=True))

    def _read(
        self, table: str, columns: tuple[tuple[str, str], ...], wanted: list[str] | None
    ) -> pd.DataFrame:
        import pyarrow as pa

        schema = arrow_schema(columns)
        named = {c.jobs if table == "jobs" else c.evidence for c in self.commits()}
        parts = [p for _, _, p in self._parts(table) if p.name in named]
        if wanted is not None:
            schema = pa.schema([schema.field(c) for c in wanted])
        if not parts:
            return to_frame(schema.empty_table())
        tables = [_conformed(p, schema) for p in parts]
        return to_frame(pa.concat_tables(tables))


def _conformed(part: Path, schema: pa.Schema) -> pa.Table:
    """A part read as ``schema``: a column added to the schema after the part was written
    (``scheduler_state``, ``nodelist``) reads as nulls; columns in the schema's order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    present = set(pq.read_schema(part).names)
    table = pq.read_table(part, columns=[n for n in schema.names if n in present])
    for name in schema.names:
        if name not in present:
            table = table.append_column(
                schema.field(name), pa.nulls(len(table), schema.field(name).type)
            )
    return table.select(schema.names).cast(schema)


def rows_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows of this run, without a table directory: the same columns and types."""
    import pyarrow as pa

    stamped = [{**r, "batch": 0, "schema_version": FLEET_SCHEMA_VERSION} for r in rows]
    frame = to_frame(pa.Table.from_pylist(stamped, schema=arrow_schema(JOB_COLUMNS)))
    return _latest(frame, ("job_id",))


def to_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as pandas, integer columns nullable (``Int64``), not float."""
    import pandas as pd
    import pyarrow as pa

    mapping = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype()}
    frame: pd.DataFrame = table.to_pandas(types_mapper=mapping.get)
    return frame


def _latest(frame: pd.DataFrame, keys: tuple[str, ...]) -> pd.DataFrame:
    import pandas as pd

    if frame.empty or "batch" not in frame.columns:
        out = frame.sort_values(list(keys), kind="stable") if not frame.empty else frame
        return pd.DataFrame(out.reset_index(drop=True))
    ordered = frame.sort_values([*keys, "batch"], kind="stable")
    last = ordered.drop_duplicates(subset=list(keys), keep="last")
    return pd.DataFrame(last.reset_index(drop=True))


class TableLockedError(CrashlensError):
    """Another run holds the table's writer lock."""


def _read_lock(lock: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(lock.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being written right now, or damaged: treated as held
    return data if isinstance(data, dict) else {}


def _alive(holder: dict[str, Any]) -> bool:
    """Whether the lock's process may still run (another host's cannot be checked: yes)."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _atomic_text(path: Path, text: str, *, sync: bool = False) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
