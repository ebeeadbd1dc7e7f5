"""A real one-node SLURM cluster for the tests: munged, slurmctld and slurmd from Debian's
``slurm-wlm`` packages, configured in a temporary directory and stopped by their PIDs.

``start(dir)`` returns a :class:`Cluster` (or raises :class:`Unavailable` with the reason, for a
skip): it needs root, the SLURM and munge binaries, and a munge key. Every daemon writes its
state, spool, logs and pid under ``dir``; the configuration is ``dir/slurm.conf``, reached by the
commands through ``SLURM_CONF`` (see :meth:`Cluster.env`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "sinfo")
#: CPUs the node offers (more than the machine has: the tests' jobs mostly sleep or wait, and
#: several must run at once; SlurmdParameters=config_overrides lets slurmd accept it).
CPUS = 16


class Unavailable(RuntimeError):
    """The cluster cannot run here (the reason is the message)."""


@dataclass
class Cluster:
    root: Path
    node: str
    pids: list[int] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self) -> dict[str, str]:
        """The environment the SLURM commands need to find this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(
        self, *args: str, timeout: float = 60, **kw: object
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args),
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            **kw,  # type: ignore[call-overload]
        )

    def wait_job(self, job_id: str, timeout: float = 180) -> str:
        """Wait until the job has ended; its final JobState."""
        end = time.monotonic() + timeout
        state = ""
        while time.monotonic() < end:
            out = self.run("scontrol", "show", "job", "-o", job_id).stdout
            state = next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")
            if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                return state
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} still {state or 'unknown'} after {timeout} s")

    def stop(self) -> None:
        """Cancel what still runs (its tasks would outlive the daemons), then stop them."""
        if len(self.pids) == 3:
            self.run("scancel", "--user", str(os.getuid()), timeout=30)
            end = time.monotonic() + 20
            while time.monotonic() < end and self.run("squeue", "-h").stdout.strip():
                time.sleep(0.3)
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for pid in reversed(self.pids):
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_pid(path: Path, timeout: float = 20) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            text = path.read_text().strip()
            if text:
                return int(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise Unavailable(f"{path.name} never appeared")


def start(root: Path) -> Cluster:
    """Start a one-node cluster under ``root``.

    Raises:
        Unavailable: not root, a binary or the munge key missing, or a daemon that did not come up.
    """
    if os.geteuid() != 0:
        raise Unavailable("the test cluster's daemons run as root")
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        raise Unavailable(
            f"SLURM is not installed (no {', '.join(missing)}; apt install slurmctld slurmd slurm-client munge)"
        )
    if not Path("/etc/munge/munge.key").is_file():
        raise Unavailable("no munge key (/etc/munge/munge.key)")
    node = socket.gethostname().split(".")[0]
    cluster = Cluster(root, node)
    for sub in ("state", "spool", "run", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    socket_path = root / "run" / "munge.socket"
    conf = f"""
ClusterName=crashlens
SlurmctldHost={node}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MinJobAge=3600
KillWait=5
InactiveLimit=0
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
NodeName={node} CPUs={CPUS} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    cluster.conf.write_text(conf.lstrip())
    env = cluster.env()
    munged = subprocess.Popen(
        ["munged", "--force", "--foreground", f"--socket={socket_path}",
         f"--pid-file={root}/run/munged.pid", f"--log-file={root}/log/munged.log",
         f"--seed-file={root}/run/munged.seed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    cluster.pids.append(munged.pid)
    try:
        end = time.monotonic() + 10
        while not socket_path.exists():
            if munged.poll() is not None or time.monotonic() > end:
                raise Unavailable("munged did not start")
            time.sleep(0.1)
        for daemon, pid_file in (("slurmctld", "slurmctld.pid"), ("slurmd", "slurmd.pid")):
            proc = subprocess.run(
                [daemon, "-f", str(cluster.conf)],
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            if proc.returncode != 0:
                raise Unavailable(f"{daemon} did not start: {proc.stderr.strip()[:300]}")
            cluster.pids.append(_read_pid(root / "run" / pid_file))
        end = time.monotonic() + 60
        while time.monotonic() < end:
            state = cluster.run("sinfo", "-h", "-N", "-o", "%t").stdout.strip()
            if state in ("idle", "mix", "alloc"):
                return cluster
            time.sleep(0.3)
        log = (root / "log" / "slurmctld.log").read_text()[-500:]
        raise Unavailable(f"the node never became idle ({state!r}): {log}")
    except BaseException:
        cluster.stop()
        raise
