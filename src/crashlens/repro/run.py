"""Run one repro for real and diagnose what it printed: the closed loop.

:func:`run_repro` runs a repro script through :mod:`.sandbox` (own process group, timeout,
address-space limit, loopback-only networking on a free port, HOME/TMPDIR/caches inside the
output directory), then calls :func:`crashlens.analyze` on the captured logs and compares the top
cause's class with the class the script's header promises. The output directory holds::

    <out>/logs/   the logs, in the layout users have: ``train.log`` for a plain ``python``
                  run; ``console.log`` (torchrun ``--tee``) and
                  ``torchrun_logs/<run>/attempt_0/<rank>/{stdout,stderr}.log`` for torchrun
    <out>/work/   the script's working directory, with its HOME, TMPDIR and caches

Only ``<out>/logs`` is analysed (what the script writes, e.g. a JSONL file, is not a log).
Nothing is left running afterwards: the sandbox terminates the run's process group and every
process that carries the run's environment marker. Nothing is written outside ``<out>``.

Exit codes (:meth:`ReproResult.exit_code` and the CLI): 0 reproduced, 1 ran but the diagnosis
differs, 2 usage error (unknown id, bad ``--set``, torch missing), 3 this machine cannot run
the repro (no CUDA GPU, no tmpfs) -- in that case nothing was started.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from crashlens.errors import CrashlensError, ExitCode
from crashlens.report import Report

from .catalog import BadParameterError, Repro, get
from .sandbox import RunResult, SandboxUnavailable, prepared, run_script

#: Exit status when the repro reproduced the diagnosis.
EXIT_REPRODUCED = int(ExitCode.OK)
#: Exit status when the repro ran but the diagnosis differs from the repro's class.
EXIT_NOT_REPRODUCED = int(ExitCode.FAILURE_FOUND)
#: Exit status for a usage error (unknown id, bad --set, bad --ranks, torch missing).
EXIT_USAGE = int(ExitCode.USAGE)
#: Exit status when this machine cannot run the repro (no CUDA GPU, no tmpfs); nothing ran.
EXIT_CANNOT_RUN = 3

#: Address-space limit (RLIMIT_AS) of a CPU repro run unless its header says otherwise.
#: CUDA reserves huge virtual ranges, so GPU repros get none.
DEFAULT_AS_LIMIT_BYTES = 16 * 1024**3

INSTALL_HINT = "install it with: pip install 'crashlens[repro]'"
LOGS_SUBDIR = "logs"
WORK_SUBDIR = "work"


class CannotRunHereError(CrashlensError):
    """This machine lacks what the repro needs (a CUDA GPU, a mountable tmpfs)."""


class MissingDependencyError(CrashlensError):
    """torch (or another module the repro imports) is not installed."""


@dataclass(frozen=True)
class ReproResult:
    """What one repro run produced and what crashlens made of it."""

    repro: Repro
    out_dir: Path
    logs_dir: Path
    run: RunResult
    ranks: int
    params: dict[str, str]
    report: Report | None
    analysis_error: str | None = None

    @property
    def top_class(self) -> str | None:
        """The class of the top-ranked cause, or None when nothing was found."""
        top = None if self.report is None else self.report.primary
        return None if top is None else top.cls

    @property
    def verdict(self) -> str:
        """crashlens' one-sentence diagnosis of the captured logs."""
        if self.report is None:
            return f"analysis failed: {self.analysis_error}"
        return self.report.verdict

    @property
    def reproduced(self) -> bool:
        """Whether the top cause's class is the class the repro promises."""
        return self.top_class == self.repro.cls

    @property
    def exit_code(self) -> int:
        """0 when reproduced, else 1."""
        return EXIT_REPRODUCED if self.reproduced else EXIT_NOT_REPRODUCED


def cuda_device_count() -> int:
    """CUDA devices torch can use here (0 without torch or CUDA). Imports torch."""
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_dependencies(repro: Repro) -> None:
    """Raise :class:`MissingDependencyError` when torch or a module the script needs is missing."""
    for module in ("torch", *repro.requires):
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(
                f"repro '{repro.id}' needs the Python package '{module}', which is not "
                f"installed; {INSTALL_HINT}"
            )


def check_runnable(repro: Repro) -> None:
    """Raise unless this machine can run ``repro`` (its modules, and the GPUs it needs).

    Raises:
        MissingDependencyError: torch (or a required module) is not installed.
        CannotRunHereError: the repro needs CUDA GPUs this machine does not have.
    """
    check_dependencies(repro)
    if repro.gpus:
        found = cuda_device_count()
        if found == 0:
            raise CannotRunHereError(f"repro '{repro.id}' needs a CUDA GPU; none found")
        if found < repro.gpus:
            raise CannotRunHereError(
                f"repro '{repro.id}' needs {repro.gpus} CUDA GPUs (one per rank); found {found}"
            )


def check_ranks(repro: Repro, ranks: int | None, params: Mapping[str, str]) -> int:
    """The world size to run with; ``ranks`` None means the header's default.

    Raises:
        BadParameterError: for a world size the repro cannot use.
    """
    if ranks is None:
        ranks = repro.ranks
    if repro.launcher == "python" and ranks != 1:
        raise BadParameterError(f"repro '{repro.id}' runs a single process; --ranks must be 1")
    if ranks < 1:
        raise BadParameterError("--ranks must be at least 1")
    # A parameter naming a rank (bad-rank, hang-rank) must exist in the world.
    for param in repro.params.values():
        if not param.name.endswith("-rank") or param.type != "int":
            continue
        value = params.get(param.name, param.default)
        if value is not None and int(value) >= ranks:
            raise BadParameterError(
                f"--ranks {ranks} has no rank {value} for {param.name}; use more ranks or "
                f"--set {param.name}=<0..{ranks - 1}>"
            )
    return ranks


def _as_limit(repro: Repro) -> int | None:
    value = repro.options.get("as_limit")
    if value is None:
        return None if repro.gpu else DEFAULT_AS_LIMIT_BYTES
    if value == "none":
        return None
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    unit = units.get(value[-1].lower(), 1)
    number = value[:-1] if value[-1].lower() in units else value
    return int(float(number) * unit)


def prepare_out_dir(out_dir: Path | None, repro_id: str) -> Path:
    """Create the output directory (a new kept temp dir when None); it must be empty.

    Raises:
        BadParameterError: when ``out_dir`` exists and is not an empty directory.
    """
    if out_dir is None:
        return Path(tempfile.mkdtemp(prefix=f"crashlens-repro-{repro_id}-")).resolve()
    out_dir = out_dir.resolve()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise BadParameterError(f"--out {out_dir} exists and is not an empty directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def run_repro(
    repro_id: str | Repro,
    out_dir: Path | None = None,
    ranks: int | None = None,
    timeout_s: float | None = None,
    params: Mapping[str, str] | None = None,
) -> ReproResult:
    """Run a repro in the sandbox, diagnose its logs, and say whether the diagnosis matches.

    Args:
        repro_id: a repro id (see ``crashlens repro list``) or a :class:`Repro`.
        out_dir: where the logs and the working directory go; must be empty or absent. None
            creates a new temporary directory, which is kept.
        ranks: world size for torchrun repros (default: the script header's ``ranks``).
        timeout_s: time limit of the run (default: the header's ``timeout``, else 90 s).
        params: script options, ``{"num_workers": "4"}`` is passed as ``--num-workers 4``.

    Raises:
        UnknownReproError, BadParameterError, MissingDependencyError: usage errors (exit 2).
        CannotRunHereError: this machine cannot run it (exit 3); nothing was started.
    """
    repro = repro_id if isinstance(repro_id, Repro) else get(repro_id)
    script_params = repro.resolve_params(dict(params or {}))
    world = check_ranks(repro, ranks, script_params)
    timeout = repro.timeout_s if timeout_s is None else timeout_s
    if timeout <= 0:
        raise BadParameterError("--timeout must be positive")
    check_runnable(repro)
    out = prepare_out_dir(out_dir, repro.id)
    logs_dir = out / LOGS_SUBDIR
    workdir = out / WORK_SUBDIR

    try:
        with prepared(repro.options, workdir, script_params) as ready:
            result = run_script(
                repro.script,
                workdir=workdir,
                log_root=logs_dir,
                launcher=repro.launcher,
                ranks=world,
                timeout_s=timeout,
                params=script_params,
                as_limit_bytes=_as_limit(repro),
                master_port=ready.master_port,
                torchrun_args=repro.torchrun_args,
                # The port the repro must find taken is held out here, in this network namespace.
                isolate_network=repro.options.get("master_port") != "occupied",
                shm_size=repro.options.get("shm"),
                flight_recorder=repro.flight_recorder,
            )
    except SandboxUnavailable as exc:  # no tmpfs, no private /dev/shm here: nothing ran
        shutil.rmtree(workdir, ignore_errors=True)  # leave ``out`` empty
        raise CannotRunHereError(f"repro '{repro.id}' cannot run here: {exc}") from exc

    from crashlens.api import analyze

    report: Report | None = None
    error: str | None = None
    try:
        report = analyze([logs_dir])
    except CrashlensError as exc:
        error = str(exc)
    return ReproResult(
        repro=repro,
        out_dir=out,
        logs_dir=logs_dir,
        run=result,
        ranks=world,
        params=script_params,
        report=report,
        analysis_error=error,
    )
