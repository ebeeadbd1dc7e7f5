"""SLURM's record of a job: where its output went and how it ended (``analyze --slurm JOBID``).

The scheduler knows what the logs often do not say: the job's final state (TIMEOUT,
OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, CANCELLED, FAILED), its exit code, its nodes and where its
output went. :func:`resolve` asks ``scontrol show job -o`` (jobs slurmctld still remembers:
``MinJobAge`` seconds after they end) and falls back to ``sacct --parsable2`` where accounting
exists. :func:`job_files` expands the job's ``StdOut``/``StdErr`` patterns (scontrol leaves
``%t``, ``%N`` and ``%n`` for the steps to fill) over its tasks and nodes, and adds the files
in its working directory named after the job (``srun -o slurm-%j_%t.out`` inside a batch
script is invisible to the scheduler). :func:`record_candidate` turns the scheduler's own
record into an input, so the rules in ``rules/scheduler/`` read its verdict like any log line.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crashlens.errors import CannotRunError, CrashlensError
from crashlens.ingest.discover import NOT_LOG_SUFFIXES, Candidate
from crashlens.model import Source

#: ``sacct`` fields asked for, in this order (``--parsable2``: ``|``-separated, no trailing ``|``).
SACCT_FIELDS = (
    "JobID", "JobName", "User", "State", "ExitCode", "NodeList", "WorkDir", "NTasks",
    "Partition", "Submit", "End",
)  # fmt: skip
#: The states of a job that did not succeed (sacct(1) "JOB STATE CODES").
FAILED_STATES = (
    "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "CANCELLED",
    "DEADLINE",
)  # fmt: skip
#: The pattern letters ``scontrol`` leaves unexpanded in StdOut/StdErr (filled per step/task).
_TASK_LETTERS = re.compile(r"%(\d*)([tNn])")
_LETTER = re.compile(r"%(\d*)([%AaJjNnstux])")
_KEY = re.compile(r"^([A-Za-z][\w:/]*)=(.*)$")
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
TIMEOUT_S = 30.0

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class SlurmUnavailable(CannotRunError):
    """The SLURM commands are not on this machine."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """What the scheduler says about one job."""

    job_id: str
    name: str
    user: str
    state: str
    reason: str
    exit_code: str
    nodes: tuple[str, ...]
    batch_host: str | None
    num_tasks: int
    work_dir: str | None
    stdout: str | None
    stderr: str | None
    array_job_id: str | None
    array_task_id: str | None
    #: The scheduler's own text about the job (one line), as the rules read it.
    record: str
    #: Which command said it: ``scontrol``, ``sacct`` or ``jobcomp`` (the job completion log).
    source: str
    partition: str | None = None
    #: The node list as the scheduler wrote it (``node[01-04]``).
    nodelist: str | None = None
    #: Times as the scheduler prints them: local time, ``2026-12-02T07:13:49``.
    submit_time: str | None = None
    end_time: str | None = None


def parse_scontrol(text: str) -> list[SlurmJob]:
    """Every job record of ``scontrol show job`` output, one-line (``-o``) or multi-line."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("JobId="):
            records.append([line])
        elif line.strip() and records:
            records[-1].append(line)
    return [_scontrol_job(" ".join(x.strip() for x in lines)) for lines in records]


def _fields(record: str) -> dict[str, str]:
    """``Key=value`` pairs of a record; a value holding spaces keeps them; first key wins."""
    out: dict[str, str] = {}
    key: str | None = None
    for token in record.split():
        m = _KEY.match(token)
        if m:
            key = m[1]
            if key in out:
                key = None  # a repeated key (per-node detail lines): keep the first
                continue
            out[key] = m[2]
        elif key is not None:
            out[key] += " " + token
    return out


def _scontrol_job(record: str, source: str = "scontrol") -> SlurmJob:
    f = _fields(record)
    return SlurmJob(
        job_id=f.get("JobId", ""),
        name=f.get("JobName", f.get("Name", "")),
        user=f.get("UserId", "").split("(", 1)[0],
        state=f.get("JobState", ""),
        reason=f.get("Reason", ""),
        exit_code=f.get("ExitCode", ""),
        nodes=tuple(expand_nodelist(f.get("NodeList", ""))),
        batch_host=_value(f.get("BatchHost")),
        num_tasks=_int(f.get("NumTasks"), 1),
        work_dir=_value(f.get("WorkDir")),
        stdout=_value(f.get("StdOut")),
        stderr=_value(f.get("StdErr")),
        array_job_id=_value(f.get("ArrayJobId")),
        array_task_id=_value(f.get("ArrayTaskId")),
        record=record,
        source=source,
        partition=_value(f.get("Partition")),
        nodelist=_value(f.get("NodeList")),
        submit_time=_value(f.get("SubmitTime")),
        end_time=_value(f.get("EndTime")),
    )


def parse_sacct(text: str, fields: Sequence[str] = SACCT_FIELDS) -> list[SlurmJob]:
    """The job lines (not the ``.batch``/``.0`` step lines) of ``sacct --parsable2 --noheader
    --format=<fields>`` output."""
    out = []
    for line in text.splitlines():
        values = line.split("|")
        if len(values) != len(fields):
            continue
        f = dict(zip(fields, values, strict=True))
        job_id = f.get("JobID", "")
        if not job_id or "." in job_id:
            continue
        state, _, by = f.get("State", "").partition(" ")  # "CANCELLED by 1000"
        array_job, _, array_task = job_id.partition("_")
        out.append(
            SlurmJob(
                job_id=job_id,
                name=f.get("JobName", ""),
                user=f.get("User", ""),
                state=state,
                reason=by,
                exit_code=f.get("ExitCode", ""),
                nodes=tuple(expand_nodelist(f.get("NodeList", ""))),
                batch_host=None,
                num_tasks=_int(f.get("NTasks"), 1),
                work_dir=_value(f.get("WorkDir")),
                stdout=None,
                stderr=None,
                array_job_id=array_job if array_task else None,
                array_task_id=array_task or None,
                record=line,
                source="sacct",
                partition=_value(f.get("Partition")),
                nodelist=_value(f.get("NodeList")),
                submit_time=_value(f.get("Submit")),
                end_time=_value(f.get("End")),
            )
        )
    return out


def _value(text: str | None) -> str | None:
    return None if text in (None, "", "(null)", "N/A", "None") else text


def _int(text: str | None, default: int) -> int:
    try:
        return int(text or "")
    except ValueError:
        return default


def expand_nodelist(text: str) -> list[str]:
    """``node[01-04,07],gpu3`` -> ``node01 node02 node03 node04 node07 gpu3`` (zero padding
    kept, several bracket groups multiplied out)."""
    text = text.strip()
    if not text or text in ("(null)", "None assigned"):
        return []
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    out: list[str] = []
    for item in items:
        out.extend(_expand_item(item))
    return out


def _expand_item(item: str) -> list[str]:
    m = _BRACKETS.search(item)
    if m is None:
        return [item] if item else []
    head, tail = item[: m.start()], item[m.end() :]
    values = []
    for part in m[1].split(","):
        lo, _, hi = part.partition("-")
        if hi and lo.isdigit() and hi.isdigit():
            width = len(lo)
            values += [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
        elif part:
            values.append(part)
    return [x for v in values for x in _expand_item(f"{head}{v}{tail}")]


def expand_pattern(
    pattern: str,
    job: SlurmJob,
    *,
    task: int | None = None,
    node: str | None = None,
    node_index: int | None = None,
    step: str | None = None,
) -> str | None:
    """A StdOut/StdErr filename pattern (sbatch(1), "filename pattern") filled for one task
    on one node; None when it needs a value that is not known."""
    values: dict[str, str | int | None] = {
        "%": "%",
        "A": job.array_job_id or job.job_id,
        "a": job.array_task_id,
        "J": f"{job.job_id}.{step}" if step is not None else job.job_id,
        "j": job.job_id,
        "N": node,
        "n": node_index,
        "s": step,
        "t": task,
        "u": job.user,
        "x": job.name,
    }
    missing = False

    def fill(m: re.Match[str]) -> str:
        nonlocal missing
        value = values[m[2]]
        if value is None:
            missing = True
            return m[0]
        text = str(value)
        return text.zfill(int(m[1])) if m[1] and text.isdigit() else text

    out = _LETTER.sub(fill, pattern)
    return None if missing else out


def job_files(job: SlurmJob) -> list[Candidate]:
    """The job's output files: its StdOut/StdErr patterns over its tasks and nodes, then the
    files of its working directory named after it; each once, existing ones only."""
    seen: set[str] = set()
    out: list[Candidate] = []

    def add(path: str, source: Source | None) -> None:
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(path):
            return
        seen.add(real)
        out.append(Candidate(Path(path), path, source=source))

    nodes = list(job.nodes) or ([job.batch_host] if job.batch_host else [])
    for pattern in dict.fromkeys(p for p in (job.stdout, job.stderr) if p):
        if not _TASK_LETTERS.search(pattern):
            path = expand_pattern(pattern, job)
            if path is not None:
                add(path, None)
            continue
        # the batch script's own output is task 0 on the batch host; srun steps fill the rest
        for task in range(max(1, job.num_tasks)):
            for index, node in enumerate(nodes or [None]):
                path = expand_pattern(pattern, job, task=task, node=node, node_index=index)
                if path is not None:
                    add(path, Source(path=path, rank=task, host=node))
    if job.work_dir and os.path.isdir(job.work_dir):
        named = re.compile(rf"(?<![0-9]){re.escape(job.job_id)}(?![0-9])")
        for entry in sorted(os.scandir(job.work_dir), key=lambda e: e.name):
            suffix = os.path.splitext(entry.name)[1].lower()
            if entry.is_file() and named.search(entry.name) and suffix not in NOT_LOG_SUFFIXES:
                add(entry.path, None)
    return out


def record_candidate(job: SlurmJob, folder: Path) -> Candidate:
    """The scheduler's record of ``job`` as an input of kind ``scheduler``, written into
    ``folder`` (the caller's temporary directory) and shown as the command that said it."""
    path = folder / f"{job.source}-{job.job_id}.txt"
    path.write_text(job.record + "\n", encoding="utf-8")
    shown = f"{job.source} job {job.job_id}"
    return Candidate(path, shown, source=Source(path=shown, kind="scheduler", host=job.batch_host))


def resolve(
    job_ids: Sequence[str], *, run: Runner = subprocess.run, env: dict[str, str] | None = None
) -> list[SlurmJob]:
    """What the scheduler says about each job id (``scontrol``, else ``sacct``).

    Raises:
        SlurmUnavailable: neither ``scontrol`` nor ``sacct`` is on PATH.
        CrashlensError: a job the scheduler does not know (any more).
    """
    scontrol, sacct = shutil.which("scontrol"), shutil.which("sacct")
    if scontrol is None and sacct is None:
        raise SlurmUnavailable(
            "--slurm needs the SLURM commands (scontrol or sacct) on PATH; run it on a login "
            "node of the cluster, or pass the job's output files instead"
        )
    out: list[SlurmJob] = []
    for job_id in job_ids:
        found: list[SlurmJob] = []
        why = ""
        if scontrol is not None:
            proc = _run(run, [scontrol, "show", "job", "-o", job_id], env)
            found = parse_scontrol(proc.stdout) if proc.returncode == 0 else []
            why = " ".join((proc.stderr or "").split())
        if not found and sacct is not None:
            command = [sacct, "-j", job_id, "--parsable2", "--noheader"]
            proc = _run(run, [*command, "--format=" + ",".join(SACCT_FIELDS)], env)
            found = parse_sacct(proc.stdout) if proc.returncode == 0 else []
            accounting = " ".join(((proc.stderr or "") + " " + (proc.stdout or "")).split())
            why = "; ".join(x for x in (why, accounting) if x)
        if not found and _unreachable(why):
            raise CrashlensError(
                f"SLURM job {job_id}: cannot ask the scheduler ({why}); run this where the "
                "SLURM commands work (a login node), or set SLURM_CONF"
            )
        if not found:
            raise CrashlensError(
                f"SLURM job {job_id}: the scheduler does not know it"
                + (f" ({why})" if why else "")
                + "; slurmctld forgets a job MinJobAge seconds after it ends, and only sacct "
                "(with accounting) remembers it longer"
            )
        out.extend(found)
    return out


def parse_window(value: str, now: dt.datetime) -> dt.datetime:
    """``--slurm-since`` values: a span back from ``now`` (``90m``, ``12h``, ``1d``, ``2w``) or
    a local date/time (``2026-12-01``, ``2026-12-01T06:00``), as naive local time.

    Raises:
        CrashlensError: anything else.
    """
    text = value.strip()
    m = re.fullmatch(r"(\d{1,6})\s*([mhdw])", text)
    if m:
        unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[m[2]]
        return now - dt.timedelta(**{unit: int(m[1])})
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise CrashlensError(
            f"--slurm-since '{value}': expected a span like 12h, 1d, 2w or a date like 2026-12-01"
        ) from None


def failed_since(
    since: dt.datetime, *, run: Runner = subprocess.run, env: dict[str, str] | None = None
) -> list[SlurmJob]:
    """The jobs that ended in a failed state (:data:`FAILED_STATES`) since ``since`` (naive
    local time, as SLURM prints it), oldest first.

    Asked of ``sacct`` (every user's allocations) where accounting exists, else read from the
    job completion log (``JobCompType=jobcomp/filetxt``; its path from ``scontrol show
    config``). A job slurmctld still remembers is taken from ``scontrol show job``, whose record
    names the job's output files.

    Raises:
        SlurmUnavailable: neither ``scontrol`` nor ``sacct`` is on PATH.
        CrashlensError: neither accounting nor a job completion log to read.
    """
    scontrol, sacct = shutil.which("scontrol"), shutil.which("sacct")
    if scontrol is None and sacct is None:
        raise SlurmUnavailable(
            "--slurm-since needs the SLURM commands (sacct, or scontrol with a job completion "
            "log) on PATH; run it on a login node of the cluster"
        )
    start = since.replace(microsecond=0).isoformat()
    why = ""
    jobs: list[SlurmJob] | None = None
    if sacct is not None:
        command = [sacct, "-a", "-X", "--parsable2", "--noheader", "-S", start, "-E", "now"]
        command += ["--state=" + ",".join(FAILED_STATES), "--format=" + ",".join(SACCT_FIELDS)]
        proc = _run(run, command, env)
        if proc.returncode == 0:
            jobs = parse_sacct(proc.stdout)
        why = " ".join(((proc.stderr or "") + " " + (proc.stdout or "")).split())
    if jobs is None and scontrol is not None:
        jobs, more = _from_jobcomp(scontrol, since, run, env)
        why = "; ".join(x for x in (why, more) if x)
    if jobs is None:
        raise CrashlensError(
            f"--slurm-since: the scheduler keeps no history to ask ({why or 'no sacct'}); it "
            "needs accounting (slurmdbd, for sacct) or JobCompType=jobcomp/filetxt"
        )
    jobs = [j for j in jobs if j.state in FAILED_STATES]
    if scontrol is not None:
        jobs = [_known(scontrol, j, run, env) for j in jobs]
    return sorted(jobs, key=lambda j: (j.end_time or "", j.job_id))


def parse_jobcomp(text: str) -> list[SlurmJob]:
    """The records of a ``jobcomp/filetxt`` job completion log (one ``Key=value`` line per
    ended job; ``Name=`` for the job name, no output paths)."""
    return [
        _scontrol_job(line.strip(), source="jobcomp")
        for line in text.splitlines()
        if line.startswith("JobId=")
    ]


def _from_jobcomp(
    scontrol: str, since: dt.datetime, run: Runner, env: dict[str, str] | None
) -> tuple[list[SlurmJob] | None, str]:
    proc = _run(run, [scontrol, "show", "config"], env)
    config: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip()
    if config.get("JobCompType") != "jobcomp/filetxt" or not config.get("JobCompLoc"):
        kind = config.get("JobCompType") or "unknown"
        return None, f"JobCompType is {kind}" if proc.returncode == 0 else proc.stderr.strip()
    path = config["JobCompLoc"]
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        return None, f"cannot read the job completion log {path}: {exc.strerror or exc}"
    first = since.replace(microsecond=0).isoformat()
    return [j for j in parse_jobcomp(text) if (j.end_time or "") >= first], ""


def _known(scontrol: str, job: SlurmJob, run: Runner, env: dict[str, str] | None) -> SlurmJob:
    """``job`` as ``scontrol show job`` tells it while slurmctld remembers it (its record names
    the output files), else as given."""
    if job.source == "scontrol":
        return job
    proc = _run(run, [scontrol, "show", "job", "-o", job.job_id], env)
    found = parse_scontrol(proc.stdout) if proc.returncode == 0 else []
    return found[0] if len(found) == 1 and found[0].job_id == job.job_id else job


def _unreachable(why: str) -> bool:
    """Whether the commands failed to reach slurmctld at all (no configuration, no controller),
    rather than answering that the job is unknown."""
    lowered = why.lower()
    return "invalid job id" not in lowered and (
        "fatal:" in lowered or "unable to contact slurm controller" in lowered
    )


def _run(
    run: Runner, command: list[str], env: dict[str, str] | None
) -> subprocess.CompletedProcess[str]:
    try:
        return run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(command, 1, "", str(exc))


def job_ids(value: str, environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """``--slurm`` values: ``123,124``, or ``auto`` for the job this runs in (``$SLURM_JOB_ID``,
    as in an epilog).

    Raises:
        CrashlensError: ``auto`` outside a job, or no id.
    """
    if value.strip() == "auto":
        job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
        if not job:
            raise CrashlensError("--slurm auto: $SLURM_JOB_ID is not set (not inside a job)")
        return [job]
    ids = [x.strip() for x in value.split(",") if x.strip()]
    if not ids or not all(re.fullmatch(r"\d+(?:_\d+)?(?:\.\w+)?", x) for x in ids):
        raise CrashlensError(f"--slurm '{value}': expected job ids like 1234 or 1234,1235, or auto")
    return ids
