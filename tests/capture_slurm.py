"""Capture real SLURM jobs as fixtures: ``python tests/capture_slurm.py fixtures/slurm [CASE...]``.

Starts the one-node test cluster (tests/slurm_cluster.py; root, slurm-wlm and munge needed),
submits every job of :data:`JOBS` at once, waits for them to end (the time-limit job takes
about 80 s) and writes, per job, ``fixtures/slurm/<case>/``: the job's output files as SLURM
wrote them, ``slurmctld-job-<id>.txt`` (``scontrol show job -o``: the scheduler's record),
``CAPTURE.md`` (how it was made) and ``expected.yaml`` (the cause the job was built to have).
The jobs are the project's own CPU repros (src/crashlens/repro/scripts) under srun.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import slurm_cluster

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "src/crashlens/repro/scripts"


@dataclass(frozen=True)
class Job:
    case: str
    layout: str
    cause: str
    first_rank: int | None
    summary: str
    script: str
    cancel_after: float | None = None


ENV_FROM_SLURM = (
    "export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID "
    "MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + SLURM_JOB_ID))"
)

JOBS = (
    Job(
        "srun-label-task-fails",
        "slurm-srun-label",
        "user_code_error",
        2,
        "4 tasks of `srun --label` (ranks from SLURM_PROCID), gloo; rank 2 raises a ValueError at "
        "step 4, its peers fail in allreduce",
        f"""#SBATCH -n 4
#SBATCH -o slurm-%j.out
{ENV_FROM_SLURM}
srun --label bash -c '{ENV_FROM_SLURM}; exec {{python}} -u {SCRIPTS}/rank_exception_cascade.py'
""",
    ),
    Job(
        "torchrun-under-srun",
        "slurm-torchrun",
        "user_code_error",
        2,
        "one srun task running torchrun --nproc-per-node 4 (gloo); rank 2 raises a ValueError",
        f"""#SBATCH -n 1
#SBATCH -c 4
#SBATCH -o slurm-%j.out
srun {{torchrun}} --nproc-per-node 4 --master-port $((21000 + SLURM_JOB_ID)) \\
    {SCRIPTS}/rank_exception_cascade.py
""",
    ),
    Job(
        "time-limit-per-task-files",
        "slurm-per-task-files",
        "scheduler_kill",
        None,
        "2 tasks training (one log line a second), one output file per task (srun -o "
        "slurm-%j_%t.out), --time=1: SLURM cancels the job at its time limit",
        """#SBATCH -n 2
#SBATCH --time=1
#SBATCH -o slurm-%j.out
srun -o slurm-%j_%t.out {python} -u -c "
import logging, os, time
logging.basicConfig(format='%(asctime)s %(levelname)s %(name)s: %(message)s', level=logging.INFO)
log = logging.getLogger('train')
log.info('rank %s of %s', os.environ['SLURM_PROCID'], os.environ['SLURM_NTASKS'])
for step in range(100000):
    log.info('step %d loss %.4f', step, 2.0 / (step + 1))
    time.sleep(1.0)
"
""",
    ),
    Job(
        "scancel-running",
        "slurm-srun-label",
        "scheduler_kill",
        None,
        "2 tasks training under `srun --label`; the job is cancelled with scancel after 8 s",
        """#SBATCH -n 2
#SBATCH -o slurm-%j.out
srun --label {python} -u -c "
import logging, time
logging.basicConfig(format='%(asctime)s %(levelname)s %(name)s: %(message)s', level=logging.INFO)
for step in range(100000):
    logging.getLogger('train').info('step %d loss %.4f', step, 2.0 / (step + 1))
    time.sleep(1.0)
"
""",
        cancel_after=8.0,
    ),
    Job(
        "task-fails-others-wait",
        "slurm-srun-label",
        "file_not_found",
        1,
        "2 tasks under `srun --label`, no --kill-on-bad-exit: task 1 dies on a missing "
        "checkpoint (the file_not_found repro) while task 0 keeps training until the job ends",
        f"""#SBATCH -n 2
#SBATCH -o slurm-%j.out
srun --label bash -c 'if [ "$SLURM_PROCID" = 1 ]; then exec {{python}} -u {SCRIPTS}/file_not_found.py; \\
  else exec {{python}} -u -c "import logging, time; logging.basicConfig(format=\\"%(asctime)s %(levelname)s %(name)s: %(message)s\\", level=logging.INFO); [(logging.getLogger(\\"train\\").info(\\"step %d\\", i), time.sleep(1)) for i in range(15)]"; fi'
""",
    ),
)


def expected_yaml(job: Job, state: str) -> str:
    """The fixture's expected diagnosis: the cause the job was built to have (tests/test_fixtures.py)."""
    lines = [
        f'description: "{job.summary} (SLURM state {state})."',
        f"top_class: {job.cause}",
        f"layout: {job.layout}",
        f"slurm_state: {state}",
        "exit_code: 1",
    ]
    if job.first_rank is not None:  # the rank that failed; a cancellation has none
        lines.insert(2, f"first_failure_rank: {job.first_rank}")
    return "\n".join(lines) + "\n"


def main(out: Path, cases: list[str]) -> None:
    python = sys.executable
    torchrun = str(Path(python).with_name("torchrun"))
    work = Path(tempfile.mkdtemp(prefix="crashlens-slurm-capture-"))
    cluster = slurm_cluster.start(work / "cluster")
    try:
        version = cluster.run("sinfo", "--version").stdout.strip()
        submitted: dict[str, tuple[Job, Path]] = {}
        for job in JOBS:
            if cases and job.case not in cases:
                continue
            folder = work / job.case
            folder.mkdir()
            script = folder / "job.sh"
            body = job.script.format(python=python, torchrun=torchrun)
            script.write_text("#!/bin/bash\n" + body)
            proc = cluster.run("sbatch", "--parsable", "-J", job.case, str(script), cwd=folder)
            if proc.returncode != 0:
                raise SystemExit(f"sbatch {job.case}: {proc.stderr}")
            submitted[proc.stdout.strip().split(";")[0]] = (job, folder)
        start = time.monotonic()
        for job_id, (job, _) in submitted.items():
            if job.cancel_after is not None:
                time.sleep(max(0.0, job.cancel_after - (time.monotonic() - start)))
                cluster.run("scancel", job_id)
        for job_id, (job, folder) in submitted.items():
            state = cluster.wait_job(job_id, timeout=240)
            time.sleep(1.0)  # srun's last lines after the state changes
            record = cluster.run("scontrol", "show", "job", "-o", job_id).stdout.strip()
            target = out / job.case
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            for f in sorted(folder.glob(f"*{job_id}*")):
                shutil.copy2(f, target / f.name)
            (target / f"slurmctld-job-{job_id}.txt").write_text(record + "\n")
            (target / "job.sh").write_text((folder / "job.sh").read_text())
            (target / "CAPTURE.md").write_text(
                textwrap.dedent(
                    f"""\
                    # {job.case}

                    Captured by `python tests/capture_slurm.py fixtures/slurm` on a one-node
                    cluster ({version}, tests/slurm_cluster.py): `sbatch job.sh` (the script
                    beside this file; paths as on the capturing machine). {job.summary}.

                    Final state: `{state}`. `slurmctld-job-{job_id}.txt` is `scontrol show job
                    -o {job_id}` after the job ended; the other files are the job's output as
                    SLURM wrote it.
                    """
                )
            )
            (target / "expected.yaml").write_text(expected_yaml(job, state))
            print(f"{job.case}: job {job_id} {state}")
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fixtures/slurm", sys.argv[2:])
