"""``crashlens repro``: list, show and run the repro scripts; ``analyze --repro`` support.

Commands (``repro_app``, registered by the main CLI as ``crashlens repro``)::

    crashlens repro list                  id, class, needs a GPU?, ranks, launcher
    crashlens repro show ID               print the script (runnable as it is)
    crashlens repro run ID [--out DIR] [--ranks N] [--timeout S] [--set key=value]...

``run`` prints the run's outcome, crashlens' diagnosis of the captured logs and
``reproduced: yes|no``. Exit codes: 0 reproduced, 1 ran but not reproduced, 2 usage error
(unknown id, bad ``--set``/``--ranks``/``--out``, torch not installed), 3 this machine cannot
run it (no CUDA GPU, no tmpfs; nothing was started).

:func:`run_for_report` is what ``crashlens analyze PATH --repro`` calls after the diagnosis: it
runs the repro of the top cause (its rule's ``repro:`` field), taking the world size and any
script option named like a field of the diagnosis from the report.
"""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Annotated

import typer

from crashlens.errors import CrashlensError
from crashlens.report import Report

from .catalog import BadParameterError, Repro, UnknownReproError, discover, for_report, get
from .run import (
    EXIT_CANNOT_RUN,
    EXIT_USAGE,
    CannotRunHereError,
    ReproResult,
    check_ranks,
    check_runnable,
    prepare_out_dir,
    run_repro,
)

repro_app = typer.Typer(
    help="Minimal torch programs that fail like a diagnosed cause: list, show, run.",
    no_args_is_help=True,
)

#: Largest world size taken from a diagnosis (a repro is minimal; 2-core CI machines).
MAX_RANKS_FROM_REPORT = 8


def _error(message: str) -> None:
    typer.echo(f"crashlens: error: {message}", err=True)


def parse_sets(values: list[str]) -> dict[str, str]:
    """``["num_workers=4"]`` -> ``{"num_workers": "4"}``.

    Raises:
        BadParameterError: for an item without ``=`` or with an empty key.
    """
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadParameterError(f"--set expects key=value, got '{item}'")
        out[key.strip()] = value
    return out


@repro_app.command("list")
def repro_list() -> None:
    """List every repro: id, class, whether it needs a GPU, ranks, launcher."""
    typer.echo(f"{'ID':28} {'CLASS':26} {'GPU':4} {'RANKS':5} LAUNCHER")
    for r in discover():
        gpu = "yes" if r.gpu else "no"
        typer.echo(f"{r.id:28} {r.cls:26} {gpu:4} {r.ranks:<5} {r.launcher}")


@repro_app.command("show")
def repro_show(
    repro_id: Annotated[str, typer.Argument(help="Repro id (see `repro list`).")],
) -> None:
    """Print a repro script (a standalone program; save it and run it)."""
    try:
        repro = get(repro_id)
    except UnknownReproError as exc:
        _error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(repro.source(), nl=False)


@repro_app.command("run")
def repro_run(
    repro_id: Annotated[str, typer.Argument(help="Repro id (see `repro list`).")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output directory (empty or new); default: a kept temp dir."),
    ] = None,
    ranks: Annotated[
        int | None, typer.Option("--ranks", help="World size for torchrun repros.")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Time limit of the run in seconds.")
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", help="Script parameter, e.g. num_workers=4 (repeatable)."),
    ] = None,
) -> None:
    """Run a repro in a sandbox, diagnose its logs, and say whether it reproduced.

    Exit codes: 0 reproduced, 1 not reproduced, 2 usage error, 3 needs a GPU (or tmpfs) that
    this machine lacks.
    """
    try:
        repro = get(repro_id)
        params = parse_sets(sets or [])
    except CrashlensError as exc:
        _error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(run_and_print(repro, out, ranks=ranks, timeout_s=timeout, params=params))


def run_and_print(
    repro: Repro,
    out: Path | None,
    *,
    ranks: int | None = None,
    timeout_s: float | None = None,
    params: dict[str, str] | None = None,
    err: bool = False,
) -> int:
    """Run ``repro``, print the outcome lines, and return the exit code (0/1/2/3).

    The outcome lines go to stdout, or to stderr with ``err`` (when stdout holds a report).
    """

    def echo(line: str) -> None:
        typer.echo(line, err=err)

    try:
        # Validate everything that needs no process before creating the output directory.
        resolved = repro.resolve_params(dict(params or {}))
        world = check_ranks(repro, ranks, resolved)
        if timeout_s is not None and timeout_s <= 0:
            raise BadParameterError("--timeout must be positive")
        check_runnable(repro)
        out_dir = prepare_out_dir(out, repro.id)
    except CannotRunHereError as exc:
        typer.echo(f"crashlens: {exc} (nothing was run)", err=True)
        return EXIT_CANNOT_RUN
    except CrashlensError as exc:  # unknown parameter, bad --ranks/--out, torch missing
        _error(str(exc))
        return EXIT_USAGE
    timeout = repro.timeout_s if timeout_s is None else timeout_s
    shown = " ".join(f"--{k} {shlex.quote(v)}" for k, v in resolved.items())
    echo(f"repro: {repro.id} (expects {repro.cls}) - {repro.summary}")
    echo(
        f"running: {repro.launcher}, {world} rank(s), timeout {timeout:g} s"
        + (f", {shown}" if shown else "")
    )
    echo(f"output: {out_dir}")
    try:
        result = run_repro(repro, out_dir, ranks=world, timeout_s=timeout, params=params)
    except CannotRunHereError as exc:
        if out is None:  # the temporary directory made for this run is empty: remove it
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        typer.echo(f"crashlens: {exc} (nothing was run)", err=True)
        return EXIT_CANNOT_RUN
    except CrashlensError as exc:
        _error(str(exc))
        return EXIT_USAGE
    print_result(result, err=err)
    return result.exit_code


def print_result(result: ReproResult, *, err: bool = False) -> None:
    """The lines ``repro run`` prints after the run (to stderr with ``err``)."""
    run = result.run
    how = f"exit code {run.exit_code}"
    if run.signal_name:
        how += f" ({run.signal_name})"
    if run.timed_out:
        how = f"timed out, killed ({how})"
    typer.echo(f"run: {how} after {run.duration_s:.1f} s; logs in {result.logs_dir}", err=err)
    typer.echo(f"diagnosis: {result.verdict}", err=err)
    typer.echo(
        f"top cause: {result.top_class or 'none'} (repro class: {result.repro.cls})", err=err
    )
    typer.echo(f"reproduced: {'yes' if result.reproduced else 'no'}", err=err)


def params_from_report(repro: Repro, report: Report) -> tuple[int | None, dict[str, str]]:
    """World size and script options taken from the diagnosis (what the repro can use).

    The world size is the job's (highest rank + 1, at most :data:`MAX_RANKS_FROM_REPORT`) for a
    torchrun repro when it has ranks for every rank parameter; a script option whose name equals
    a field the top cause's rule captured (``num_workers``, ``num_proc``, ``batch_size`` ...)
    gets that value when it is valid for the option.
    """
    ranks: int | None = None
    seen = [r.rank for r in report.ranks if r.rank is not None]
    if repro.launcher == "torchrun" and seen:
        world = min(max(seen) + 1, MAX_RANKS_FROM_REPORT)
        needed = max(
            (
                int(p.default) + 1
                for p in repro.params.values()
                if p.name.endswith("-rank") and p.type == "int" and p.default is not None
            ),
            default=2,
        )
        if world >= max(needed, 2):
            ranks = world
    params: dict[str, str] = {}
    top = report.primary
    if top is not None:
        for key, value in top.match.fields.items():
            param = repro.param(key)
            if param is not None and param.check(value) is None:
                params[param.name] = value
    return ranks, params


def run_for_report(report: Report, out: Path | None, *, err: bool = False) -> int:
    """Run the repro of the report's top cause (``analyze --repro``); return the exit code.

    Prints the same lines as ``repro run`` (to stderr with ``err``, e.g. when the report went
    to stdout) and returns the same codes (0 reproduced, 1 not, 2 usage, 3 cannot run here).
    When there is no failure, or the top cause's rule names no repro, prints a one-line note
    (stderr) and returns 0.
    """
    top = report.primary
    if top is None:
        typer.echo("crashlens: no failure found, nothing to reproduce", err=True)
        return 0
    rule = top.match.rule
    try:
        repro = for_report(report)
    except UnknownReproError as exc:
        _error(f"rule {rule.id}: {exc}")
        return EXIT_USAGE
    if repro is None:
        typer.echo(
            f"crashlens: no repro for the top cause ({rule.cls}, rule {rule.id}); "
            "see `crashlens repro list`",
            err=True,
        )
        return 0
    ranks, params = params_from_report(repro, report)
    taken = [f"--ranks {ranks}"] if ranks is not None else []
    taken += [f"--set {k}={v}" for k, v in params.items()]
    if taken:
        typer.echo(f"from the diagnosis: {' '.join(taken)}", err=err)
    return run_and_print(repro, out, ranks=ranks, params=params, err=err)
