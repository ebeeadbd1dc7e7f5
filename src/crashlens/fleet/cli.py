"""``crashlens triage``: the fleet commands (registered by the main CLI as ``crashlens triage``).

::

    crashlens triage ROOT... -o fleet.parquet [--engine local|ray] [--address ADDR]
                     [--jobs GLOB] [--manifest FILE] [--workers N] [--force]
    crashlens triage summary fleet.parquet [-f text|html|markdown|json] [--since 7d]
                     [--by cause|host|rule|week] [-o FILE]

The first form is the group's default command (any first argument that is not ``summary`` is a
ROOT). Exit codes: 0 the run completed (jobs that could not be analysed are ``error`` rows,
listed on stderr), 2 usage or input error, 3 the ``fleet`` extra is not installed. Nothing of
the extra (pyarrow, fsspec, ray, duckdb) is imported before a command runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from crashlens.errors import CannotRunError, CrashlensError, ExitCode
from crashlens.fleet import (
    FleetExtraMissingError,
    TriageInterrupted,
    TriageRun,
    require,
    run_triage,
)
from crashlens.fleet.table import JobStatus
from crashlens.live_cli import fail as _fail


class _DefaultRun(TyperGroup):
    """``crashlens triage ROOT...`` runs ``run``; ``crashlens triage summary ...`` the summary."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


triage_app = typer.Typer(
    cls=_DefaultRun,
    help="Analyse many crashed jobs (local dirs or object storage) into one Parquet table: "
    "crashlens triage ROOT... -o fleet.parquet; then crashlens triage summary fleet.parquet.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _need(*modules: str) -> None:
    try:
        require(*modules)
    except FleetExtraMissingError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(int(ExitCode.CANNOT_RUN)) from None


def parse_options(values: list[str]) -> dict[str, Any]:
    """``["endpoint_url=http://127.0.0.1:9000", "anon=true"]`` -> fsspec storage options.

    Values that read as JSON (``true``, ``3``, ``{"a": 1}``) are taken as such.

    Raises:
        typer.BadParameter: for an item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got '{item}'")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _inside(output: Path, roots: list[str]) -> str | None:
    target = output.resolve()
    for root in roots:
        if "://" in root:
            continue
        base = Path(root).resolve()
        if target == base or base in target.parents:
            return root
    return None


@triage_app.command("run")
def run_command(
    roots: Annotated[
        list[str] | None,
        typer.Argument(help="Directories or URLs (s3://bucket/prefix); one job per subdirectory."),
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The fleet table (a directory of Parquet parts).")
    ] = Path("fleet.parquet"),
    engine: Annotated[str, typer.Option("--engine", help="local (process pool) or ray.")] = "local",
    address: Annotated[
        str | None, typer.Option("--address", help="Ray cluster address (auto: the running one).")
    ] = None,
    jobs: Annotated[
        str | None, typer.Option("--jobs", help="Glob of job directories under ROOT (default *).")
    ] = None,
    manifest: Annotated[
        str | None,
        typer.Option("--manifest", help="CSV or Parquet of job_id,path[,submitted_at,user,queue]."),
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", min=1, help="Worker processes (default: CPUs).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Analyse every job again, changed or not.")
    ] = False,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra rule directory (repeatable).")
    ] = None,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option",
            help="fsspec option KEY=VALUE for ROOT's store, e.g. endpoint_url=... (repeatable).",
        ),
    ] = None,
    commit_every: Annotated[
        int, typer.Option("--commit-every", min=1, help="Jobs per committed part file.")
    ] = 256,
    path_fields: Annotated[
        str | None,
        typer.Option(
            "--path-fields",
            metavar="LAYOUT",
            help="The layout of job directories under ROOT, e.g. '{user}/{date}/{job}': "
            "picks the jobs at that depth and fills user, queue and submitted_at (date).",
        ),
    ] = None,
    reports: Annotated[
        Path | None,
        typer.Option(
            "--reports",
            metavar="DIR",
            help="Write each analysed job's HTML report here; the table's report column and "
            "the HTML summary link them.",
        ),
    ] = None,
    slurm_since: Annotated[
        str | None,
        typer.Option(
            "--slurm-since",
            metavar="WINDOW",
            help="The SLURM jobs that failed since WINDOW (12h, 1d, 2w or a date) instead of "
            "ROOT: from sacct, or the job completion log without accounting.",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only errors on stderr.")] = False,
) -> None:
    """(Default) analyse every new or changed job under ROOT... into the table at -o."""
    _need("pyarrow", "fsspec", *(["ray"] if engine == "ray" else []))
    roots = list(roots or [])
    if engine not in ("local", "ray"):
        _fail(f"--engine must be local or ray, not '{engine}'")
    if not roots and manifest is None and slurm_since is None:
        _fail("give at least one ROOT directory or URL, --manifest, or --slurm-since")
    inside = _inside(output, roots)
    if inside is not None:
        _fail(f"the table {output} would be written inside the input {inside}; choose another -o")
    opts = parse_options(storage_option or [])
    live = not quiet and sys.stderr.isatty()

    def show(done: int, total: int, _: object) -> None:
        if live and (done == total or done % 25 == 0):
            end = "\n" if done == total else ""
            typer.echo(f"\rcrashlens triage: {done}/{total} job(s)", err=True, nl=False)
            typer.echo(end, err=True, nl=False)

    try:
        result = run_triage(
            roots,
            output,
            engine=engine,
            address=address,
            jobs=jobs,
            manifest=manifest,
            workers=workers,
            force=force,
            rules=list(rules or []),
            storage_options=opts,
            commit_every=commit_every,
            progress=show,
            reports=reports,
            path_fields=path_fields,
            quiet=quiet,
            slurm_since=slurm_since,
        )
    except (FleetExtraMissingError, CannotRunError) as exc:
        typer.echo(f"crashlens: {exc}" if isinstance(exc, CannotRunError) else str(exc), err=True)
        raise typer.Exit(int(ExitCode.CANNOT_RUN)) from None
    except TriageInterrupted as exc:
        if live:
            typer.echo("", err=True)
        typer.echo(f"crashlens triage: {exc}", err=True)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    except CrashlensError as exc:
        _fail(str(exc))
        return
    for warning in result.warnings:
        typer.echo(f"crashlens: warning: {warning}", err=True)
    for job_id, reason in result.errors:
        typer.echo(f"crashlens: job {job_id}: error: {reason}", err=True)
    if not quiet:
        typer.echo(_run_line(result, output))


def _run_line(result: TriageRun, output: Path) -> str:
    s = result.statuses
    rate = result.analysed / result.seconds if result.seconds > 0 else 0.0
    return (
        f"crashlens triage: {result.found} job(s): {result.analysed} analysed now "
        f"({s.get(JobStatus.ANALYSED, 0)} ok, {s.get(JobStatus.EMPTY, 0)} empty, "
        f"{s.get(JobStatus.DAMAGED, 0)} damaged, {s.get(JobStatus.ERROR, 0)} error), "
        f"{result.unchanged} unchanged"
        + (f", {result.orphans_removed} orphaned part(s) removed" if result.orphans_removed else "")
        + f"; {result.seconds:.1f} s ({rate:.1f} jobs/s) -> {output}"
    )


@triage_app.command("compact")
def compact_command(
    table: Annotated[Path, typer.Argument(help="A fleet table written by crashlens triage.")],
) -> None:
    """Merge the table's part files into one, keeping each job's latest row and its evidence."""
    _need("pyarrow")
    from crashlens.fleet.table import MARKER, FleetTable

    if not (table / MARKER).is_file():
        _fail(f"{table}: not a fleet table (no {MARKER})")
    store = FleetTable(table)
    try:
        with store.lock():
            parts, kept, dropped = store.compact()
    except CrashlensError as exc:
        _fail(str(exc))
        return
    typer.echo(
        f"crashlens triage compact: {parts} part(s) -> 1: {kept} job row(s) kept, "
        f"{dropped} superseded row(s) dropped"
        if parts > 1
        else f"crashlens triage compact: {table} has {parts} part(s); nothing to merge"
    )


@triage_app.command("summary")
def summary_command(
    table: Annotated[Path, typer.Argument(help="A fleet table written by crashlens triage.")],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="text, html, markdown or json.")
    ] = "text",
    since: Annotated[
        str | None, typer.Option("--since", help="Only jobs since: 7d, 12h, 2w or a date.")
    ] = None,
    by: Annotated[
        str,
        typer.Option(
            "--by", help="Group by cause, signature, host, rule, user, queue, state or week."
        ),
    ] = "cause",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 (for cron) when: new-signature (a signature no job before --since "
            "had) or hardware-host (a host with hardware failures). Repeatable.",
        ),
    ] = None,
) -> None:
    """Counts per cause and signature, trend per week, hardware hosts, causes per version."""
    _need("duckdb")
    from crashlens.fleet.summary import failing, render, summarize

    try:
        summary = summarize(table, since=since, by=by)
        reasons = failing(summary, fail_on or [])
        text = render(summary, fmt)
    except CrashlensError as exc:
        _fail(str(exc))
        return
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            tmp = output.with_name(f".{output.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, output)
        except OSError as exc:
            _fail(f"cannot write {output}: {exc.strerror or exc}")
    for reason in reasons:
        typer.echo(f"crashlens triage summary: {reason}", err=True)
    if reasons:
        raise typer.Exit(int(ExitCode.FAILURE_FOUND))
