"""Rerun the CPU repro scripts and rewrite ``fixtures/repro/<id>/`` from what they really print.

Usage::

    python -m crashlens.repro.capture [--only ID ...] [--out fixtures/repro] [--list]

Each script in ``crashlens/repro/scripts/`` carries a header line in its docstring::

    crashlens-repro: id=<id> class=<class> ranks=<n> gpu=no launcher=python|torchrun [k=v ...]

Optional keys: ``master_port=occupied`` (launch torchrun on a port another socket holds),
``tmpfs=<subdir>:<size>`` (mount a small tmpfs at ``<workdir>/<subdir>``), ``timeout=<s>``.
The capture runs each script in a fresh temporary directory through :mod:`.sandbox`, checks
that the log really shows the intended failure, then replaces the fixture directory with the
logs (unedited, in the layout the tools wrote), a ``CAPTURE.md`` and an ``expected.yaml``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import importlib.metadata
import json
import platform
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .catalog import SCRIPTS_DIR, discover, parse_header
from .catalog import Repro as ReproSpec
from .sandbox import (
    CONSOLE_LOG,
    FLIGHT_RECORDER_DIR,
    RUN_MARKER,
    SPAWN_LAYOUT,
    TORCHRUN_LAYOUTS,
    TORCHRUN_LOG_DIR,
    TRAIN_LOG,
    RunResult,
    SandboxUnavailable,
    prepared,
    run_script,
)

__all__ = ["SCRIPTS_DIR", "Expectation", "ReproSpec", "capture_one", "discover", "parse_header"]

DEFAULT_OUT = Path("fixtures/repro")


@dataclass(frozen=True)
class Expectation:
    """The diagnosis a captured fixture must get, and how to check the capture shows it.

    ``evidence`` must occur literally in the captured logs (in the root-cause line).
    ``rank_marker`` must occur in the first failing rank's own ``stderr.log`` (torchrun only),
    which is how the capture checks that ``first_failure_rank`` is really the rank that failed.
    """

    description: str
    evidence: str
    first_failure_rank: int | None = None
    symptom_classes: tuple[str, ...] = ()
    rank_marker: str | None = None
    exit_code: int = 1


EXPECTATIONS: dict[str, Expectation] = {
    "dataloader_worker_killed": Expectation(
        description="A DataLoader worker is SIGKILLed (as by the OOM killer); the main process "
        "raises 'DataLoader worker (pid N) is killed by signal: Killed.'",
        evidence="is killed by signal: Killed",
    ),
    "dataloader_worker_segfault": Expectation(
        description="A DataLoader worker segfaults in native code; torch prints 'Unexpected "
        "segmentation fault encountered in worker' and the main process raises 'killed by "
        "signal: Segmentation fault'.",
        evidence="is killed by signal: Segmentation fault",
    ),
    "host_oom": Expectation(
        description="A process under a 3 GiB RLIMIT_AS allocates an 8 GiB CPU tensor; torch's "
        "DefaultCPUAllocator cannot allocate memory.",
        evidence="DefaultCPUAllocator: can't allocate memory",
    ),
    "datasets_map_worker_died": Expectation(
        description="A Hugging Face datasets map(num_proc=2) worker is SIGKILLed; datasets "
        "raises 'One of the subprocesses has abruptly died during map operation.'",
        evidence="One of the subprocesses has abruptly died during map operation",
    ),
    "corrupt_jsonl": Expectation(
        description="2-rank torchrun (gloo): a truncated JSONL line makes rank 1's DataLoader "
        "worker raise JSONDecodeError; rank 0 then fails in gloo with 'Connection closed by "
        "peer'.",
        evidence="JSONDecodeError",
        first_failure_rank=1,
        symptom_classes=("nccl_error",),
        rank_marker="Caught JSONDecodeError in DataLoader worker process 0.",
    ),
    "rank_exception_cascade": Expectation(
        description="4-rank torchrun (gloo): rank 2 raises a ValueError in user code; ranks 0, 1 "
        "and 3 then fail in allreduce with gloo 'Connection closed by peer'.",
        evidence="ValueError: label index 11 out of range",
        first_failure_rank=2,
        symptom_classes=("nccl_error",),
        rank_marker="ValueError: label index 11 out of range",
    ),
    "gloo_hang": Expectation(
        description="3-rank torchrun (gloo, 8 s timeout): rank 1 stalls; ranks 0 and 2 time out "
        "in allreduce ('Timed out waiting 8000ms ...'); torchrun's 'Root Cause' names a timed-out "
        "rank, but the hung rank is 1 (the only one without a traceback).",
        evidence="Timed out waiting",
        first_failure_rank=1,
        rank_marker="reading next shard",
    ),
    "port_in_use": Expectation(
        description="torchrun is started with --master-port on a port another process already "
        "listens on; the static rendezvous TCPStore fails with EADDRINUSE before any rank runs.",
        evidence="address already in use",
    ),
    "user_code_error": Expectation(
        description="Plain python training run: a handled ConnectionError is logged with "
        "logger.exception (benign), then collate dies with an uncaught KeyError: 'input_ids'.",
        evidence="KeyError: 'input_ids'",
    ),
    "numerical_instability": Expectation(
        description="Plain python training run at a far too high learning rate: the loss "
        "overflows to inf and the script stops itself with 'NaN detected in loss, aborting.'",
        evidence="NaN detected in loss, aborting.",
    ),
    "file_not_found": Expectation(
        description="Plain python run resuming from a checkpoint path that was never written: "
        "torch.load raises FileNotFoundError.",
        evidence="No such file or directory",
    ),
    "permission_denied": Expectation(
        description="The training process runs unprivileged and saves a checkpoint into a "
        "directory another user owns: torch.save fails with 'Permission denied'.",
        evidence="Permission denied",
    ),
    "env_misconfig": Expectation(
        description="A DDP script started with plain python: init_process_group's env:// "
        "rendezvous finds no RANK ('environment variable RANK expected, but not set').",
        evidence="environment variable RANK expected, but not set",
    ),
    "segfault": Expectation(
        description="A native call reads a null pointer in the training process; faulthandler "
        "prints 'Fatal Python error: Segmentation fault' and the process dies of SIGSEGV.",
        evidence="Fatal Python error: Segmentation fault",
        exit_code=-11,
    ),
    "missing_dependency": Expectation(
        description="The model asks for an optional fused-attention package the environment "
        "lacks: ModuleNotFoundError: No module named 'flash_attn'.",
        evidence="No module named 'flash_attn'",
    ),
    "too_many_open_files": Expectation(
        description="DataLoader workers pass many small tensors as file descriptors under a low "
        "open-file limit: 'Too many open files' in the workers, then the DataLoader times out.",
        evidence="Too many open files",
    ),
    "collective_desync": Expectation(
        description="3-rank torchrun (gloo, TORCH_DISTRIBUTED_DEBUG=DETAIL): rank 1 broadcasts "
        "where ranks 0 and 2 all-reduce; they raise 'Detected mismatch between collectives on "
        "ranks'. Rank 1's call is the one that differs.",
        evidence="Detected mismatch between collectives on ranks",
        first_failure_rank=1,
    ),
    "collective_hang": Expectation(
        description="4-rank torchrun (gloo, 5 s timeout, Flight Recorder on): at step 3 the odd "
        "rank broadcasts, all-reduces another size, or raises, where the others all-reduce; they "
        "hang until gloo's timeout, and every live rank writes its Flight Recorder dump.",
        evidence="flight recorder dump written",
        first_failure_rank=2,
    ),
    "rank0_works_alone": Expectation(
        description="2-rank torchrun (gloo, 5 s timeout): rank 0 prepares the dataset alone for "
        "14 s while rank 1 waits in a barrier and times out; rank 0 is the one waited for.",
        evidence="Timed out waiting",
        first_failure_rank=0,
        rank_marker="rank 0: tokenizing and caching the dataset",
    ),
    "shm_exhausted": Expectation(
        description="DataLoader workers place 16 MiB batches in a private 8 MiB /dev/shm: 'unable "
        "to allocate shared memory(shm) for file </torch_...>: No space left on device (28)'.",
        evidence="No space left on device",
    ),
    "disk_full": Expectation(
        description="torch.save of a checkpoint into a full filesystem (1 MiB tmpfs) fails with "
        "'OSError: [Errno 28] No space left on device'.",
        evidence="No space left on device",
    ),
}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _read_logs(result: RunResult) -> str:
    return "\n".join(
        (result.logs_dir / rel).read_text(encoding="utf-8", errors="replace") for rel in result.logs
    )


def check_capture(spec: ReproSpec, exp: Expectation, result: RunResult) -> list[str]:
    """Return the reasons the capture does NOT show the intended failure (empty if it does)."""
    problems: list[str] = []
    if result.timed_out:
        problems.append(f"timed out after {spec.timeout_s:.0f} s")
    if result.exit_code != exp.exit_code:
        problems.append(f"exit code {result.exit_code}, expected {exp.exit_code}")
    if exp.evidence not in _read_logs(result):
        problems.append(f"evidence {exp.evidence!r} not found in the logs")
    if spec.flight_recorder and not any(
        rel.parts[0] == FLIGHT_RECORDER_DIR for rel in result.logs if rel.parts
    ):
        problems.append("no Flight Recorder dump was written")
    tree = result.logs_dir / TORCHRUN_LOG_DIR
    if exp.rank_marker is not None and exp.first_failure_rank is not None and tree.is_dir():
        rank_logs = sorted(tree.glob(f"*/attempt_0/{exp.first_failure_rank}/stderr.log"))
        if not rank_logs:
            problems.append(f"no stderr.log for rank {exp.first_failure_rank}")
        elif exp.rank_marker not in rank_logs[0].read_text(encoding="utf-8", errors="replace"):
            problems.append(
                f"{exp.rank_marker!r} not in rank {exp.first_failure_rank}'s stderr.log"
            )
    return problems


def _yaml_str(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar.
    return json.dumps(value, ensure_ascii=False)


def render_expected(spec: ReproSpec, exp: Expectation) -> str:
    """``expected.yaml`` per docs/fixtures.md."""
    rank = "null" if exp.first_failure_rank is None else str(exp.first_failure_rank)
    symptoms = ", ".join(exp.symptom_classes)
    return (
        f"description: {_yaml_str(exp.description)}\n"
        f"top_class: {spec.cls}\n"
        f"first_failure_rank: {rank}\n"
        f"evidence: {_yaml_str(exp.evidence)}\n"
        f"symptom_classes: [{symptoms}]\n"
        f"exit_code: 1\n"
    )


def render_capture_md(
    spec: ReproSpec,
    result: RunResult,
    setup: list[str],
    files: list[str],
    when: str,
    matrix: bool = False,
) -> str:
    """``CAPTURE.md``: how, with what and when the logs were produced."""
    skip = ("PATH", "LANG", "LC_ALL", "TZ", RUN_MARKER)
    env_keys = sorted(k for k in result.env if k not in skip)
    env_lines = "\n".join(f"    {k}={result.env[k]}" for k in env_keys)
    setup_lines = "\n".join(f"- {s}" for s in setup) or "- none"
    file_lines = "\n".join(f"- `{f}`" for f in files)
    sig = f" ({result.signal_name})" if result.signal_name else ""
    rel_script = f"src/crashlens/repro/scripts/{spec.script.name}"
    how = "--matrix " if matrix else ""
    return f"""# Captured fixture `{spec.id}`

{spec.summary}

Captured from a real run on CPU by
`python -m crashlens.repro.capture {how}--only {spec.id}` (script: `{rel_script}`).
The log files are exactly what the run printed: nothing was edited or scrubbed, paths and
timestamps included.

- date (UTC): {when}
- host: {platform.platform()}
- python: {platform.python_version()}
- torch: {_version("torch")}
- datasets: {_version("datasets")}
- launcher: {spec.launcher}, ranks: {spec.ranks}
- exit code: {result.exit_code}{sig}{" (timed out)" if result.timed_out else ""}
- duration: {result.duration_s:.1f} s
- working directory: `{result.workdir}` (temporary, deleted after the capture)

Setup done by the capture before the run:

{setup_lines}

Command (run in the working directory):

    {shlex.join(result.command)}

Environment (besides PATH and locale):

{env_lines}

Files:

{file_lines}
"""


@dataclass(frozen=True)
class Variant:
    """One cell of the capture matrix: a launch layout and the script parameters of the run;
    ``first_rank`` is the rank those parameters break (the expected first failing rank);
    ``evidence``, when given, replaces the repro's: what the root-cause line of this run says
    (for a diagnosis from Flight Recorder dumps, words of the finding that the logs hold too)."""

    layout: str
    params: tuple[tuple[str, str], ...] = ()
    first_rank: int | None = None
    evidence: str | None = None

    @property
    def name(self) -> str:
        return "-".join([self.layout, *(f"{k}{v}" for k, v in self.params)])


def capture_one(
    spec: ReproSpec,
    out_root: Path,
    keep_workdir: bool = False,
    *,
    variant: Variant | None = None,
) -> tuple[str, str]:
    """Capture one repro; return (status, one-line report), status is ok, skip or failed.

    Without ``variant`` the capture goes to ``<out_root>/<id>/`` in the repro's default layout;
    with one, to ``<out_root>/<id>/<variant>/`` in that layout, with the variant's parameter,
    and its ``expected.yaml`` records the layout, the command and the torch version. A failed
    or skipped capture leaves the existing fixture directory untouched.
    """
    exp = _expectation(spec, variant)
    if exp is None:
        return "failed", f"{spec.id}: no expectation registered in capture.EXPECTATIONS"
    if spec.gpu:
        return "skip", f"{spec.id}: SKIP needs a GPU"
    keep = keep_workdir
    workdir = Path(tempfile.mkdtemp(prefix=f"crashlens-repro-{spec.id}-"))
    try:
        setup: list[str] = []
        try:
            result = _run_prepared(spec, workdir, variant, setup)
        except SandboxUnavailable as exc:
            return "skip", f"{spec.id}: SKIP {exc}"
        problems = check_capture(spec, exp, result)
        if problems:
            keep = True
            return "failed", f"{spec.id}: FAILED ({'; '.join(problems)}); workdir kept: {workdir}"
        dest = out_root / spec.id / variant.name if variant is not None else out_root / spec.id
        files = _write_fixture(dest, spec, exp, result, setup, variant)
        main_log = CONSOLE_LOG if spec.launcher == "torchrun" else TRAIN_LOG
        return "ok", (
            f"{spec.id}: ok exit={result.exit_code} {result.duration_s:.1f}s "
            f"{len(files)} log file(s), main log {main_log}"
        )
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _expectation(spec: ReproSpec, variant: Variant | None) -> Expectation | None:
    """What the capture must show: the repro's registered expectation, as the variant has it."""
    exp = EXPECTATIONS.get(spec.id)
    if exp is None:
        return None
    if variant is not None and variant.params:
        exp = dataclasses.replace(exp, first_failure_rank=variant.first_rank)
    if variant is not None and variant.evidence is not None:
        exp = dataclasses.replace(exp, evidence=variant.evidence)
    if variant is not None and variant.layout == SPAWN_LAYOUT:
        # spawn's parent prints the first failing child's error alone: the others' errors,
        # the symptoms, are never in the log
        exp = dataclasses.replace(exp, symptom_classes=(), **SPAWNED.get(spec.id, {}))
    return exp


def _run_prepared(
    spec: ReproSpec, workdir: Path, variant: Variant | None, setup: list[str]
) -> RunResult:
    """Run the repro in ``workdir`` with what its options ask to prepare (a port held open, a
    small tmpfs, a private /dev/shm), each described in ``setup`` for CAPTURE.md.

    Raises:
        SandboxUnavailable: this machine cannot prepare it.
    """
    params: dict[str, str] = dict(variant.params) if variant is not None else {}
    layout = variant.layout if variant is not None and spec.launcher == "torchrun" else "tee"
    with prepared(spec.options, workdir, params) as ready:
        setup.extend(ready.setup)
        return run_script(
            spec.script,
            workdir=workdir,
            launcher=spec.launcher,
            ranks=spec.ranks,
            timeout_s=spec.timeout_s,
            params=params,
            master_port=ready.master_port,
            torchrun_args=spec.torchrun_args,
            shm_size=spec.options.get("shm"),
            layout=layout,
            flight_recorder=spec.flight_recorder,
            # the occupied port is held in this network namespace, so the run shares it
            isolate_network=spec.options.get("master_port") != "occupied",
        )


def _write_fixture(
    dest: Path,
    spec: ReproSpec,
    exp: Expectation,
    result: RunResult,
    setup: list[str],
    variant: Variant | None,
) -> list[str]:
    """Replace ``dest`` with the run's logs, CAPTURE.md and expected.yaml; the logs' paths."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    files: list[str] = []
    for rel in result.logs:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(result.logs_dir / rel, target)
        files.append(rel.as_posix())
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    (dest / "CAPTURE.md").write_text(
        render_capture_md(spec, result, setup, files, when, matrix=variant is not None),
        encoding="utf-8",
    )
    expected = render_expected(spec, exp)
    if variant is not None:
        expected += (
            f"layout: {variant.layout if spec.launcher == 'torchrun' else 'python'}\n"
            f"torch: {_yaml_str(_version('torch'))}\n"
            f"command: {_yaml_str(shlex.join(result.command[1:]))}\n"
        )
    (dest / "expected.yaml").write_text(expected, encoding="utf-8")
    return files


#: Which rank each multi-rank repro can be told to break (script parameter, values), and
#: other parameters a capture varies (each combination is one run).
RANK_PARAMS: dict[str, tuple[str, tuple[int, ...]]] = {
    "rank_exception_cascade": ("bad-rank", (0, 1, 2, 3)),
    "gloo_hang": ("hang-rank", (0, 1, 2)),
    "collective_desync": ("odd-rank", (0, 1, 2)),
}
OTHER_PARAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    # the failing step: before any step completed everywhere, mid-run, late
    "rank_exception_cascade": ("bad-step", ("1", "4", "7")),
}
#: What a repro's capture shows differently in the ``spawn`` layout.
SPAWNED: dict[str, dict[str, Any]] = {
    # no launcher binds the port first: rank 0's process creates the store, and fails
    "port_in_use": {"first_failure_rank": 0},
    # the ranks' Flight Recorder dumps are the evidence (as in FLIGHT_CELLS): the only error
    # spawn prints is the waiting rank's timeout
    "rank0_works_alone": {"evidence": "barrier"},
}
#: Repros the ``spawn`` layout cannot start as they are meant to run, and why.
NOT_SPAWNED: dict[str, str] = {
    # it turns on TORCH_DISTRIBUTED_DEBUG when the script starts, which c10d reads when it is
    # imported: under spawn's launcher torch is imported first, and the check never runs
    "collective_desync": "sets TORCH_DISTRIBUTED_DEBUG after torch.distributed is imported",
}
DEFAULT_MATRIX_OUT = Path(__file__).resolve().parents[3] / "fixtures" / "captured"
DEFAULT_FLIGHT_OUT = Path(__file__).resolve().parents[3] / "fixtures" / "flight"
#: The runs whose Flight Recorder dumps are fixtures (``--flight``): each way a rank leaves the
#: others' collectives, with the rank it breaks.
FLIGHT_CELLS: dict[str, tuple[Variant, ...]] = {
    "collective_hang": (
        Variant("tee", (("fault", "desync"), ("odd-rank", "2")), 2, "broadcast"),
        Variant("tee", (("fault", "desync"), ("odd-rank", "1")), 1, "broadcast"),
        Variant("tee-console", (("fault", "desync"), ("odd-rank", "3")), 3, "broadcast"),
        Variant("tee", (("fault", "size"), ("odd-rank", "2")), 2, "all_reduce"),
        Variant("tee", (("fault", "raise"), ("odd-rank", "3")), 3, "KeyError: 'eval_loss'"),
    ),
    "gloo_hang": (
        Variant("tee", (("hang-rank", "1"),), 1, "all_reduce"),
        # torchrun's teardown may kill the stalled rank before its dump is written (it was in
        # the committed capture): the logs' timeout is then the root-cause line.
        Variant("tee", (("hang-rank", "2"),), 2, "Timed out waiting"),
    ),
    "rank0_works_alone": (Variant("tee", (), 0, "barrier"),),
}


def matrix_of(spec: ReproSpec) -> list[Variant]:
    """The capture matrix of one repro: every torchrun layout times every rank it can be told
    to break (times its other varied parameters), or the one plain-python layout."""
    if spec.launcher != "torchrun":
        return [Variant("python")]
    ranks = RANK_PARAMS.get(spec.id)
    others = OTHER_PARAMS.get(spec.id)
    out = []
    spawned = () if spec.id in NOT_SPAWNED else (SPAWN_LAYOUT,)
    for layout in (*TORCHRUN_LAYOUTS, *spawned):
        if ranks is None:
            out.append(Variant(layout))
            continue
        for r in ranks[1]:
            for extra in others[1] if others else (None,):
                params: tuple[tuple[str, str], ...] = ((ranks[0], str(r)),)
                if others is not None and extra is not None:
                    params += ((others[0], extra),)
                out.append(Variant(layout, params, r))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m crashlens.repro.capture",
        description="Rerun the CPU repro scripts and rewrite fixtures/repro/<id>/.",
    )
    parser.add_argument("--only", nargs="+", metavar="ID", help="capture only these ids")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixtures root")
    parser.add_argument("--list", action="store_true", help="list the repro scripts and exit")
    parser.add_argument(
        "--matrix",
        action="store_true",
        help="capture every layout (and every rank a repro can break) into fixtures/captured/",
    )
    parser.add_argument(
        "--flight",
        action="store_true",
        help="capture the runs that write Flight Recorder dumps into fixtures/flight/",
    )
    parser.add_argument(
        "--layout",
        nargs="+",
        metavar="LAYOUT",
        help="with --matrix: capture only these layouts (e.g. spawn)",
    )
    parser.add_argument(
        "--keep-workdir", action="store_true", help="do not delete the temporary working dirs"
    )
    args = parser.parse_args(argv)

    specs = discover()
    if args.list:
        for s in specs:
            print(f"{s.id:28} {s.cls:26} ranks={s.ranks} launcher={s.launcher}")
        return 0
    if args.only:
        known = {s.id for s in specs}
        unknown = sorted(set(args.only) - known)
        if unknown:
            parser.error(f"unknown repro id(s): {', '.join(unknown)}")
        specs = [s for s in specs if s.id in set(args.only)]

    failed = 0
    for spec in specs:
        cells: list[Variant | None] = list(matrix_of(spec)) if args.matrix else [None]
        if args.matrix and args.layout:
            cells = [c for c in cells if c is not None and c.layout in args.layout]
        out = DEFAULT_MATRIX_OUT if args.matrix and args.out == DEFAULT_OUT else args.out
        if args.flight:
            cells = list(FLIGHT_CELLS.get(spec.id, ()))
            out = DEFAULT_FLIGHT_OUT if args.out == DEFAULT_OUT else args.out
        for cell in cells:
            label = spec.id if cell is None else f"{spec.id}/{cell.name}"
            print(f"capturing {label} ...", flush=True)
            status, report = capture_one(spec, out, keep_workdir=args.keep_workdir, variant=cell)
            print("  " + report, flush=True)
            if status == "failed":
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
