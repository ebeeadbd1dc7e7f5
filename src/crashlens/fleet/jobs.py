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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from crashlens import slurm
from crashlens.errors import CrashlensError
from crashlens.ingest.discover import NOT_LOG_SUFFIXES
from crashlens.slurm import Runner, SlurmJob

LOCAL_PROTOCOLS = frozenset({"file", "local"})
MANIFEST_COLUMNS = ("job_id", "path", "submitted_at", "user", "queue")
#: What ``--path-fields`` can name: columns of the table (``date`` fills ``submitted_at``),
#: and ``job``/``*`` for segments that only belong to the job id.
PATH_FIELDS = ("user", "queue", "date", "job")
_FIELD = re.compile(r"^\{(\w+)\}$")


@dataclass(frozen=True, slots=True)
class PathFields:
    """A layout of job directories under a root: ``{user}/{date}/{job}``, one name or glob
    per segment; the named segments become the job's fields."""

    segments: tuple[str, ...]

    @classmethod
    def parse(cls, template: str) -> PathFields:
        """Raises: CrashlensError for an unknown field or an empty template."""
        parts = tuple(p for p in template.strip("/").split("/") if p)
        if not parts:
            raise CrashlensError("--path-fields: give one segment per directory level")
        for part in parts:
            m = _FIELD.match(part)
            if m and m[1] not in PATH_FIELDS:
                raise CrashlensError(
                    f"--path-fields: unknown field {{{m[1]}}} (known: "
                    + ", ".join(f"{{{f}}}" for f in PATH_FIELDS)
                    + ")"
                )
            if not m and ("{" in part or "}" in part):
                raise CrashlensError(f"--path-fields: '{part}' is neither a name nor a {{field}}")
        return cls(parts)

    @property
    def glob(self) -> str:
        """The ``--jobs`` glob of the layout: a field matches any one segment."""
        return "/".join("*" if _FIELD.match(p) else p for p in self.segments)

    def fields(self, key: str) -> dict[str, str]:
        """The named segments' values for a job key that matched :attr:`glob`."""
        out = {}
        for part, value in zip(self.segments, key.split("/"), strict=False):
            m = _FIELD.match(part)
            if m and m[1] != "job":
                out[m[1]] = value
        return out


#: A "job" whose logs lie in more directories than this probably holds many jobs (a nested
#: layout read one level deep): the run says so.
SPREAD_WARNING_DIRS = 64


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
    #: The scheduler's record when the job came from SLURM (``--slurm-since``): its files are
    #: the ones the record names, not a directory's.
    slurm: SlurmJob | None = None

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
        # a job whose state or record changed is read again, its files unchanged or not
        fingerprint=fingerprint(
            job.path + (f"\0{job.slurm.record}" if job.slurm else ""), job.files
        ),
        slurm=job.slurm,
    )


def slurm_jobs(
    since: str,
    *,
    now: dt.datetime | None = None,
    run: Runner | None = None,
    env: dict[str, str] | None = None,
) -> list[Job]:
    """The scheduler's failed jobs since ``since`` (``1d``, ``12h``, a date), each with the
    output files its record names (``triage --slurm-since``).

    Raises:
        SlurmUnavailable: without the SLURM commands.
        CrashlensError: a window that does not parse, a scheduler that keeps no history.
    """
    when = slurm.parse_window(since, now or dt.datetime.now())
    found = slurm.failed_since(when, env=env, **({"run": run} if run is not None else {}))
    out = []
    for record in found:
        paths = [os.path.abspath(c.path) for c in slurm.job_files(record)]
        if paths:
            base = os.path.commonpath([os.path.dirname(p) for p in paths])
        else:
            base = record.work_dir or ""
        files = []
        for path in paths:
            info = os.stat(path)
            rel = os.path.relpath(path, base)
            files.append(JobFile(rel, info.st_size, repr(info.st_mtime), info.st_mtime))
        job = Job(
            job_id=record.job_id,
            path=base,
            protocol="file",
            files=tuple(files),
            submitted_at=_local_time(record.submit_time),
            user=record.user or None,
            queue=record.partition,
            slurm=record,
        )
        out.append(_with_fingerprint(job))
    return out


def _local_time(text: str | None) -> dt.datetime | None:
    """A SLURM time (local, ``2026-12-02T07:13:49``) as naive UTC, like the table's times."""
    try:
        return dt.datetime.fromisoformat(text or "").astimezone(dt.UTC).replace(tzinfo=None)
    except ValueError:
        return None


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


def storage_error(root: str, exc: BaseException, options: Mapping[str, Any] | None) -> str:
    """One line saying why ``root`` could not be listed, and what to do about it."""
    name = type(exc).__name__
    text = " ".join(str(exc).split())[:300]
    endpoint = (options or {}).get("endpoint_url") or (options or {}).get("client_kwargs", {}).get(
        "endpoint_url"
    )
    if "Credentials" in name or "credentials" in text.lower():
        return (
            f"cannot list {root}: no credentials for the store ({name}); set them the store's "
            "usual way (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance "
            "role), or --storage-option anon=true for a public bucket"
        )
    if "EndpointConnection" in name or "ConnectTimeout" in name or isinstance(exc, ConnectionError):
        where = f" {endpoint}" if endpoint else ""
        return (
            f"cannot list {root}: the store's endpoint{where} does not answer ({text}); check "
            "--storage-option endpoint_url=... and the network"
        )
    if isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return f"cannot list {root}: access denied ({text}); check the credentials' permissions"
    if isinstance(exc, OSError):
        return f"cannot list {root}: {exc.strerror or text}"
    return f"cannot list {root}: {name}: {text}"


def _listing(fs: Any, base: str) -> dict[str, dict[str, Any]]:
    if protocol_of(fs) in LOCAL_PROTOCOLS:
        return _local_listing(base)
    found = fs.find(base, detail=True, withdirs=False)
    return {str(k): dict(v) for k, v in found.items() if v.get("type", "file") == "file"}


def _local_listing(base: str) -> dict[str, dict[str, Any]]:
    """Regular files (and links to them) under a local directory: ``os.walk``, one stat each
    (fsspec's local ``find`` costs ~1 ms per directory more).

    Links to directories are followed (a job directory is often a link into the scheduler's
    output tree), safely: a directory that is one of its own ancestors (a link loop) is not
    entered again.
    """
    out: dict[str, dict[str, Any]] = {}
    ancestors: dict[str, frozenset[tuple[int, int]]] = {}
    for dirpath, dirnames, filenames in os.walk(base, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        ident = (st.st_dev, st.st_ino)
        above = ancestors.get(os.path.dirname(dirpath), frozenset())
        if ident in above:
            dirnames[:] = []  # a link back up the tree
            continue
        ancestors[dirpath] = above | {ident}
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
    path_fields: PathFields | None = None,
    warnings: list[str] | None = None,
) -> list[Job]:
    """One job per subdirectory of each root (``jobs_glob`` picks them, ``*/*`` two levels down).

    ``path_fields`` gives the layout instead (``{user}/{date}/{job}``): its glob picks the jobs,
    its named segments fill the jobs' ``user``, ``queue`` and ``submitted_at`` (an ISO date).
    A job whose logs lie in very many directories gets a line in ``warnings`` (it may be a
    whole level of a nested layout).

    Files directly in a root, outside any job directory, belong to no job. A root that does not
    exist or cannot be listed is an error; a job directory without log files is still a job.

    Raises:
        CrashlensError: for a root that cannot be opened or listed, or two roots giving the same
            job id.
    """
    if path_fields is not None and jobs_glob is not None:
        raise CrashlensError("give --jobs or --path-fields, not both")
    pattern = (path_fields.glob if path_fields is not None else jobs_glob or "*").strip("/")
    depth = pattern.count("/") + 1
    jobs: dict[str, Job] = {}
    for root in roots:
        fs, base = filesystem(root, storage_options)
        base = base.rstrip("/") or "/"
        try:
            if not fs.isdir(base):
                raise CrashlensError(f"{root}: not a directory (or not found)")
            listing = _listing(fs, base)
        except CrashlensError:
            raise
        except Exception as exc:  # the store's own errors (botocore, gcsfs...) are not OSError
            raise CrashlensError(storage_error(root, exc, storage_options)) from None
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
            listed = tuple(sorted(grouped[key], key=lambda f: f.rel))
            extra = _fields_of(path_fields, key) if path_fields is not None else {}
            job = Job(
                job_id=job_id,
                path=_url(fs, f"{prefix}{key}"),
                protocol=protocol,
                files=listed,
                **extra,
            )
            jobs[job_id] = _with_fingerprint(job)
            spread = len({f.rel.rpartition("/")[0] for f in listed})
            if warnings is not None and spread > SPREAD_WARNING_DIRS:
                warnings.append(
                    f"job {job_id} holds logs in {spread} directories: if those are jobs of "
                    "their own, say how deep they are (--jobs '*/*', or --path-fields "
                    "'{user}/{date}/{job}')"
                )
    return list(jobs.values())


def _fields_of(layout: PathFields, key: str) -> dict[str, Any]:
    values = layout.fields(key)
    out: dict[str, Any] = {k: values[k] for k in ("user", "queue") if k in values}
    if "date" in values:
        try:
            out["submitted_at"] = iso_utc(values["date"])
        except ValueError:
            out["submitted_at"] = None  # not a date: the job's time falls back to its logs
    return out


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
