"""Which jobs a triage run covers: one subdirectory per job under each root, or a manifest.

A root is a local directory or anything fsspec opens (``s3://bucket/prefix``, ``gs://...``).
Listing happens once per root, on the driver, and reads metadata only (names, sizes, mtimes or
ETags); the logs themselves are read by the workers. Each :class:`Job` carries its file list
and a fingerprint of it (path, size, mtime/ETag of every log file), which is what an
incremental rerun compares.
"""

from __future__ import annotations

import csv
import datetime as dt
import fnmatch
import hashlib
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from crashlens.errors import CrashlensError
from crashlens.ingest.discover import NOT_LOG_SUFFIXES

LOCAL_PROTOCOLS = frozenset({"file", "local"})
MANIFEST_COLUMNS = ("job_id", "path", "submitted_at", "user", "queue")


@dataclass(frozen=True, slots=True)
class JobFile:
    """One log file of a job: its path relative to the job, size and version (mtime or ETag)."""

    rel: str
    size: int
    version: str
    mtime: float | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """One job to analyse: where its files are, what they are, and the manifest's fields."""

    job_id: str
    path: str
    protocol: str
    files: tuple[JobFile, ...] = ()
    submitted_at: dt.datetime | None = None
    user: str | None = None
    queue: str | None = None
    listing_error: str | None = None
    fingerprint: str = field(default="")

    @property
    def local(self) -> bool:
        """Whether the files are on this machine's file system (read in place)."""
        return self.protocol in LOCAL_PROTOCOLS

    @property
    def bytes(self) -> int:
        """Total size of the job's log files."""
        return sum(f.size for f in self.files)

    @property
    def last_modified(self) -> float | None:
        """The newest file's modification time (POSIX seconds), when the store gives one."""
        times = [f.mtime for f in self.files if f.mtime is not None]
        return max(times) if times else None


def fingerprint(path: str, files: Sequence[JobFile]) -> str:
    """A digest of the job's path and of each log file's relative path, size and version."""
    digest = hashlib.sha256(path.encode())
    for f in sorted(files, key=lambda f: f.rel):
        digest.update(f"\0{f.rel}\0{f.size}\0{f.version}".encode())
    return digest.hexdigest()[:32]


def _with_fingerprint(job: Job) -> Job:
    return Job(
        job_id=job.job_id,
        path=job.path,
        protocol=job.protocol,
        files=job.files,
        submitted_at=job.submitted_at,
        user=job.user,
        queue=job.queue,
        listing_error=job.listing_error,
        fingerprint=fingerprint(job.path, job.files),
    )


def filesystem(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec file system and the protocol-less path for ``url``.

    Raises:
        CrashlensError: for a URL fsspec cannot open (unknown protocol, missing backend).
    """
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise CrashlensError(f"cannot open {url}: {exc}") from None
    return fs, str(path)


def protocol_of(fs: Any) -> str:
    """The file system's main protocol name (``file``, ``s3``, ``gs``...)."""
    proto = fs.protocol
    return str(proto if isinstance(proto, str) else proto[0])


def _url(fs: Any, path: str) -> str:
    if protocol_of(fs) in LOCAL_PROTOCOLS:
        return path
    return str(fs.unstrip_protocol(path))


def _is_log_name(rel: str) -> bool:
    return PurePosixPath(rel).suffix.lower() not in NOT_LOG_SUFFIXES


def _mtime(info: Mapping[str, Any]) -> float | None:
    for key in ("mtime", "LastModified", "updated", "last_modified"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, dt.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def _version(info: Mapping[str, Any]) -> str:
    for key in ("ETag", "etag", "md5Hash", "generation"):
        if info.get(key):
            return str(info[key]).strip('"')
    mtime = _mtime(info)
    return repr(mtime) if mtime is not None else ""


def _file_of(rel: str, info: Mapping[str, Any]) -> JobFile:
    return JobFile(rel, int(info.get("size") or 0), _version(info), _mtime(info))


def _listing(fs: Any, base: str) -> dict[str, dict[str, Any]]:
    if protocol_of(fs) in LOCAL_PROTOCOLS:
        return _local_listing(base)
    found = fs.find(base, detail=True, withdirs=False)
    return {str(k): dict(v) for k, v in found.items() if v.get("type", "file") == "file"}


def _local_listing(base: str) -> dict[str, dict[str, Any]]:
    """Regular files (and links to them) under a local directory: ``os.walk``, one stat each
    (fsspec's local ``find`` costs ~1 ms per directory more)."""
    out: dict[str, dict[str, Any]] = {}
    for dirpath, _, filenames in os.walk(base):
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:  # a broken link: the job's analysis reports it
                out[path] = {"size": 0, "mtime": None, "type": "file"}
                continue
            out[path] = {"size": st.st_size, "mtime": st.st_mtime, "type": "file"}
    return out


def list_job_files(fs: Any, base: str) -> tuple[JobFile, ...]:
    """The log files under one job directory, sorted by relative path."""
    base = base.rstrip("/")
    out = []
    for path, info in _listing(fs, base).items():
        rel = path[len(base) :].lstrip("/") if path.startswith(base) else path
        if rel and _is_log_name(rel):
            out.append(_file_of(rel, info))
    return tuple(sorted(out, key=lambda f: f.rel))


def discover_jobs(
    roots: Sequence[str],
    *,
    jobs_glob: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[Job]:
    """One job per subdirectory of each root (``jobs_glob`` picks them, ``*/*`` two levels down).

    Files directly in a root, outside any job directory, belong to no job. A root that does not
    exist or cannot be listed is an error; a job directory without log files is still a job.

    Raises:
        CrashlensError: for a root that cannot be opened or listed, or two roots giving the same
            job id.
    """
    pattern = (jobs_glob or "*").strip("/")
    depth = pattern.count("/") + 1
    jobs: dict[str, Job] = {}
    for root in roots:
        fs, base = filesystem(root, storage_options)
        base = base.rstrip("/") or "/"
        try:
            if not fs.isdir(base):
                raise CrashlensError(f"{root}: not a directory (or not found)")
            listing = _listing(fs, base)
        except OSError as exc:
            raise CrashlensError(f"cannot list {root}: {exc}") from None
        grouped: dict[str, list[JobFile]] = {}
        prefix = base.rstrip("/") + "/"
        for path, info in listing.items():
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            if len(parts) <= depth:
                continue  # a file at or above the job level
            key = "/".join(parts[:depth])
            if not fnmatch.fnmatchcase(key, pattern):
                continue
            rel = "/".join(parts[depth:])
            files = grouped.setdefault(key, [])
            if _is_log_name(rel):
                files.append(_file_of(rel, info))
        # Job directories holding no file at all still count (an empty job is a finding).
        for key in _empty_dirs(fs, base, depth, pattern, grouped):
            grouped.setdefault(key, [])
        protocol = protocol_of(fs)
        for key in sorted(grouped):
            job_id = key
            if job_id in jobs:
                raise CrashlensError(f"job id '{job_id}' found under two roots ({root})")
            job = Job(
                job_id=job_id,
                path=_url(fs, f"{prefix}{key}"),
                protocol=protocol,
                files=tuple(sorted(grouped[key], key=lambda f: f.rel)),
            )
            jobs[job_id] = _with_fingerprint(job)
    return list(jobs.values())


def _empty_dirs(
    fs: Any, base: str, depth: int, pattern: str, known: Mapping[str, object]
) -> list[str]:
    """Job-level directories with nothing inside (object stores have none; local disks may)."""
    if protocol_of(fs) not in LOCAL_PROTOCOLS:
        return []
    out = []
    level = [base]
    for _ in range(depth):
        nxt = []
        for d in level:
            try:
                nxt += [os.path.join(d, e.name) for e in os.scandir(d) if e.is_dir()]
            except OSError:
                continue
        level = nxt
    for d in level:
        key = os.path.relpath(d, base).replace(os.sep, "/")
        if key not in known and fnmatch.fnmatchcase(key, pattern):
            out.append(key)
    return out


def read_manifest(
    manifest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> list[Job]:
    """Jobs named by a CSV or Parquet manifest: ``job_id,path[,submitted_at,user,queue]``.

    A relative ``path`` is taken relative to the manifest's own directory. Each job's files are
    listed here (metadata only); a path that cannot be listed gives a job whose analysis is an
    error row, not a failed run.

    Raises:
        CrashlensError: for a manifest that cannot be read or lacks the ``job_id`` and ``path``
            columns, or repeats a job id.
    """
    records = _manifest_records(manifest, storage_options)
    here = manifest.rsplit("/", 1)[0] if "/" in manifest else "."
    jobs: dict[str, Job] = {}
    for lineno, rec in enumerate(records, 2):
        job_id = (rec.get("job_id") or "").strip()
        path = (rec.get("path") or "").strip()
        if not job_id or not path:
            raise CrashlensError(f"{manifest}:{lineno}: a row needs both job_id and path")
        if job_id in jobs:
            raise CrashlensError(f"{manifest}:{lineno}: job id '{job_id}' repeated")
        if "://" not in path and not os.path.isabs(path):
            path = f"{here.rstrip('/')}/{path}"
        fs, base = filesystem(path, storage_options)
        listing_error = None
        files: tuple[JobFile, ...] = ()
        try:
            if fs.isdir(base):
                files = list_job_files(fs, base)
            else:
                listing_error = f"{path}: not a directory (or not found)"
        except OSError as exc:
            listing_error = f"cannot list {path}: {exc}"
        job = Job(
            job_id=job_id,
            path=_url(fs, base.rstrip("/")),
            protocol=protocol_of(fs),
            files=files,
            submitted_at=_when(rec.get("submitted_at"), manifest, lineno),
            user=(rec.get("user") or None),
            queue=(rec.get("queue") or None),
            listing_error=listing_error,
        )
        jobs[job_id] = _with_fingerprint(job)
    return list(jobs.values())


def _manifest_records(
    manifest: str, storage_options: Mapping[str, Any] | None
) -> list[dict[str, str | None]]:
    fs, path = filesystem(manifest, storage_options)
    try:
        with fs.open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise CrashlensError(f"cannot read manifest {manifest}: {exc}") from None
    if manifest.lower().endswith((".parquet", ".pq")):
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(io.BytesIO(data))
        except Exception as exc:  # pyarrow raises its own ArrowInvalid for a damaged file
            raise CrashlensError(f"cannot read manifest {manifest}: {exc}") from None
        rows: list[dict[str, Any]] = table.to_pylist()
        out = [{k: None if v is None else str(v) for k, v in r.items()} for r in rows]
        columns = set(table.column_names)
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise CrashlensError(f"manifest {manifest} is not UTF-8 text") from None
        reader = csv.DictReader(io.StringIO(text))
        columns = set(reader.fieldnames or [])
        out = [dict(r) for r in reader]
    missing = [c for c in ("job_id", "path") if c not in columns]
    if missing:
        raise CrashlensError(f"manifest {manifest} lacks column(s): {', '.join(missing)}")
    return out


def iso_utc(value: str) -> dt.datetime:
    """An ISO 8601 time (``Z`` or an offset allowed) as a naive UTC datetime.

    Raises:
        ValueError: when ``value`` is not one.
    """
    when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    return when


def _when(value: str | None, manifest: str, lineno: int) -> dt.datetime | None:
    if value is None or not value.strip():
        return None
    try:
        return iso_utc(value)
    except ValueError:
        raise CrashlensError(
            f"{manifest}:{lineno}: submitted_at '{value}' is not an ISO 8601 time"
        ) from None
