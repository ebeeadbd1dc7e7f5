"""``crashlens analyze``'s work, without typer: what the command does once its options are read.

The typer command (:mod:`crashlens.cli.commands`) and the start-up fast path
(:func:`parse_argv`, used by :func:`crashlens.cli.main` for a plain ``crashlens analyze ...``)
both call :func:`analyze_job`, so a small job never imports typer, its sub-commands or their
packages. Errors and the exit status leave as :class:`CommandExit`; the typer command turns it
into ``typer.Exit``. The fast path reads only the options it knows in their simple spellings;
anything else (``--help``, an unknown or malformed option, ``--repro``) goes to typer, so usage
errors and help read exactly as they always did.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from crashlens import lazyre
from crashlens.errors import CannotRunError, CrashlensError, ExitCode

if TYPE_CHECKING:
    from crashlens.api import Progress
    from crashlens.config import Config
    from crashlens.report import Report
    from crashlens.session import Session

_SKEW = lazyre.compile_regex(
    r"^(?P<host>[^=]+)=(?P<sign>[+-]?)(?P<num>\d+(?:\.\d+)?)(?P<unit>ms|s)?$"
)


class CommandExit(Exception):
    """A command ends with this exit status (its messages are printed already)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = int(code)


def echo_err(message: str) -> None:
    """One line on stderr (what ``typer.echo(..., err=True)`` does for plain text)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def fail(message: str, code: int = int(ExitCode.USAGE)) -> NoReturn:
    """Each line of ``message`` as ``crashlens: error: ...`` on stderr, then exit ``code``
    (the same lines as :func:`crashlens.live_cli.fail`)."""
    for line in message.splitlines() or [""]:
        echo_err(f"crashlens: error: {line}")
    raise CommandExit(int(code))


def parse_skew(values: list[str]) -> dict[str, float]:
    """Parse ``HOST=+2.5s`` overrides into seconds per host.

    Raises:
        typer.BadParameter: for a malformed value.
    """
    out: dict[str, float] = {}
    for value in values:
        m = _SKEW.match(value.strip())
        if not m:
            import typer  # a usage error: click prints it (the fast path never gets here)

            raise typer.BadParameter(f"expected HOST=+SECONDS[s|ms], got '{value}'")
        seconds = float(m["num"]) / (1000.0 if m["unit"] == "ms" else 1.0)
        out[m["host"]] = -seconds if m["sign"] == "-" else seconds
    return out


def load_cli_config(path: Path | None, rule_dirs: list[Path], *, warn: bool = True) -> Config:
    """The config (``--config``, else discovered); a ``disable:`` of no rule gets a warning."""
    from crashlens.config import load_config

    try:
        config = load_config(path=path)
    except CrashlensError as exc:
        fail(str(exc))
    if warn:
        for rule_id in config.unknown_disabled(rule_dirs):
            where = f"{config.path}: " if config.path else ""
            echo_err(
                f"crashlens: warning: {where}disable: no rule '{rule_id}' "
                "(see crashlens rules list)"
            )
    return config


# --- the fast path's argument reader ----------------------------------------------------------

#: ``analyze``'s options as the fast path reads them: flag -> (parameter, kind). Kinds:
#: ``flag``, ``str``, ``path``, ``strs`` and ``paths`` (repeatable). tests/test_startup.py
#: checks this table against the typer command's parameters.
OPTIONS: dict[str, tuple[str, str]] = {
    "--format": ("fmts", "strs"),
    "-f": ("fmts", "strs"),
    "--output": ("outputs", "paths"),
    "-o": ("outputs", "paths"),
    "--rules": ("rules", "paths"),
    "--skew": ("skew", "strs"),
    "--post-slack": ("post_slack_url", "str"),
    "--job-name": ("job_name", "str"),
    "--report-url": ("report_url", "str"),
    "--fail-on": ("fail_on", "str"),
    "--exit-zero": ("exit_zero", "flag"),
    "--quiet": ("quiet", "flag"),
    "-q": ("quiet", "flag"),
    "--verbose": ("verbose", "flag"),
    "-v": ("verbose", "flag"),
    "--no-color": ("no_color", "flag"),
    "--traceback": ("show_traceback", "flag"),
    "--strict-rules": ("strict_rules", "flag"),
    "--slurm": ("slurm_jobs", "str"),
    "--fleet": ("fleet_table", "path"),
    "--config": ("config_file", "path"),
}
#: Options the fast path leaves to typer (their work needs the full command line).
TYPER_ONLY = frozenset({"--repro", "--repro-out", "--help", "-h"})


def parse_argv(args: list[str]) -> dict[str, Any] | None:
    """``analyze``'s parameters from its arguments, or None when typer should read them (an
    option it does not know, a value that looks like an option, a repeated single option,
    ``--repro``, help, a malformed ``--skew``)."""
    params: dict[str, Any] = {"paths": []}
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            params["paths"].extend(rest)
            break
        if not arg.startswith("-") or arg == "-":
            params["paths"].append(arg)
            continue
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        spec = OPTIONS.get(flag)
        if spec is None or flag in TYPER_ONLY:
            return None
        name, kind = spec
        if kind == "flag":
            if eq or name in params:
                return None
            params[name] = True
            continue
        if not eq:
            following = next(rest, None)
            if following is None or (following.startswith("-") and following != "-"):
                return None
            value = following
        if not _take(params, name, kind, value):
            return None
    if any(_SKEW.match(v.strip()) is None for v in params.get("skew", [])):
        return None
    return params


def _take(params: dict[str, Any], name: str, kind: str, value: str) -> bool:
    """Store an option's value; False for a single option given twice."""
    converted: Any = Path(value) if kind in ("path", "paths") else value
    if kind in ("strs", "paths"):
        params.setdefault(name, []).append(converted)
        return True
    if name in params:
        return False
    params[name] = converted
    return True


# --- the command ------------------------------------------------------------------------------


def analyze_job(
    paths: list[str] | None = None,
    fmts: list[str] | None = None,
    outputs: list[Path] | None = None,
    rules: list[Path] | None = None,
    skew: list[str] | None = None,
    post_slack_url: str | None = None,
    job_name: str | None = None,
    report_url: str | None = None,
    fail_on: str = "info",
    exit_zero: bool = False,
    quiet: bool = False,
    verbose: bool = False,
    no_color: bool = False,
    show_traceback: bool = False,
    strict_rules: bool = False,
    slurm_jobs: str | None = None,
    fleet_table: Path | None = None,
    config_file: Path | None = None,
) -> tuple[Report, int]:
    """Analyse the logs, print the report(s) and notes; the report and the exit status (before
    any ``--repro``). ``show_traceback`` is read by main(), which owns the error policy."""
    from crashlens.render import FORMATS, render
    from crashlens.ruletypes import SEVERITY_WEIGHT

    files = list(outputs or [])
    formats = fmts or [_format_of(f) for f in files] or ["text"]
    for fmt in formats:
        if fmt not in FORMATS:
            fail(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})")
    if len(files) > len(formats):
        fail("more --output files than --format options")
    if sum(1 for i in range(len(formats)) if i >= len(files)) > 1:
        fail("only one format can go to stdout; give the others an --output file")
    if fail_on not in SEVERITY_WEIGHT:
        fail(f"--fail-on must be one of {', '.join(SEVERITY_WEIGHT)}")
    paths = list(paths or [])
    if not paths and slurm_jobs is None:
        fail("give at least one PATH (or --slurm JOBID)")
    _refuse_overwriting_inputs(files, paths)
    # A bug is main()'s to report (one line; the traceback with --traceback).
    overrides = parse_skew(skew or [])
    report = _read(paths, rules or [], overrides, config_file, quiet=quiet, no_color=no_color,
                   strict_rules=strict_rules, slurm_jobs=slurm_jobs)  # fmt: skip
    if fleet_table is not None:
        _fleet_history(report, fleet_table)
    if not quiet:
        hosts = {r.host for r in report.ranks if r.host}
        for host in sorted(set(overrides) - hosts):
            echo_err(f"crashlens: warning: --skew names host '{host}', not in the logs")
        for note in report.notes:
            echo_err(f"crashlens: {note}")
    slack_options = {"job": job_name or _scheduler_job(os.environ), "report_url": report_url}
    for i, fmt in enumerate(formats):
        output = files[i] if i < len(files) else None
        _emit(report, fmt, output, quiet=quiet, no_color=no_color, verbose=verbose,
              options=slack_options)  # fmt: skip
    if post_slack_url:
        try:
            _post_slack(post_slack_url, render(report, "slack", **slack_options))
        except CrashlensError as exc:
            # The diagnosis stands: its exit status is the job's verdict, the post a side effect.
            echo_err(f"crashlens: warning: {exc}")
    return report, int(_exit_code(report, fail_on, exit_zero))


def _read(
    paths: list[str],
    rules: list[Path],
    overrides: dict[str, float],
    config_file: Path | None,
    *,
    quiet: bool,
    no_color: bool,
    strict_rules: bool,
    slurm_jobs: str | None,
) -> Report:
    """Read the logs (and what SLURM knows) into a report."""
    from crashlens.session import Session

    try:
        show = not quiet and sys.stderr.isatty()
        config = load_cli_config(config_file, rules, warn=not quiet)
        with progress_bar(enabled=show, paths=paths, no_color=no_color) as advance:
            session = Session.configured(
                rules, config=config, skew=overrides, strict_rules=strict_rules
            )
            if paths:
                session.read_paths(paths, advance)
            if slurm_jobs is not None:
                _read_slurm(session, slurm_jobs)
            return session.finish()
    except CannotRunError as exc:
        fail(str(exc), ExitCode.CANNOT_RUN)
    except CrashlensError as exc:
        fail(str(exc))


def _read_slurm(session: Session, value: str) -> None:
    """Read what SLURM knows of the jobs in ``value``: their output files and its verdict."""
    import tempfile

    from crashlens import slurm  # only a --slurm run pays for it
    from crashlens.model import Note

    jobs = slurm.resolve(slurm.job_ids(value, os.environ))
    with tempfile.TemporaryDirectory(prefix="crashlens-slurm-") as tmp:
        candidates = [slurm.record_candidate(job, Path(tmp)) for job in jobs]
        for job in jobs:
            files = slurm.job_files(job)
            if not files:
                session.notes.append(
                    Note(
                        f"SLURM job {job.job_id}: no output file found (StdOut={job.stdout}, "
                        f"WorkDir={job.work_dir})"
                    )
                )
            candidates += files
        session.read_candidates(candidates)


def _fleet_history(report: Report, table: Path) -> None:
    """Add to the report's notes how many jobs of ``table`` share its primary's signature."""
    from crashlens.fleet import FleetExtraMissingError, history
    from crashlens.model import Note

    if report.primary is None:
        return
    try:
        line = history(table, report.signature(report.primary).key)
    except FleetExtraMissingError as exc:
        echo_err(str(exc))
        raise CommandExit(int(ExitCode.CANNOT_RUN)) from None
    except CrashlensError as exc:
        fail(str(exc))
    report.notes.append(Note(line or f"no job of {table} failed with this signature before"))


@contextlib.contextmanager
def progress_bar(
    *, enabled: bool, paths: list[str], no_color: bool = False
) -> Iterator[Progress | None]:
    """A rich progress bar on stderr (TTY only) advanced by bytes as files are read."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import Progress as RichProgress

    from crashlens.api import input_size

    total = input_size(paths)
    bar = RichProgress(
        TextColumn("reading logs"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True, no_color=no_color or "NO_COLOR" in os.environ),
        transient=True,
    )
    task = bar.add_task("read", total=total or None)

    def advance(_path: str, size: int) -> None:
        bar.advance(task, size)

    with bar:
        yield advance


def _emit(
    report: Report,
    fmt: str,
    output: Path | None,
    *,
    quiet: bool,
    no_color: bool,
    verbose: bool = False,
    options: dict[str, str | None] | None = None,
) -> None:
    from crashlens.render import render
    from crashlens.termenv import PIPE_WIDTH, Environment

    env = Environment.from_process()
    env = env.without_color() if no_color else env
    to_stdout = output is None
    color = to_stdout and env.color()
    width = env.width() if to_stdout else PIPE_WIDTH
    # A terminal gets wrapped lines with hanging indents; a pipe or a file, plain lines.
    terminal = to_stdout and (env.stdout_isatty or color)
    text = render(
        report, fmt, color=color, width=width, verbose=verbose, terminal=terminal,
        repo_root=env.repo_root, **(options or {}),
    )  # fmt: skip
    if fmt == "github" and env.step_summary is not None:
        # A GitHub Actions job's summary page: the Markdown report, appended.
        try:
            with env.step_summary.open("a", encoding="utf-8") as summary:
                summary.write(render(report, "markdown") + "\n")
        except OSError as exc:
            echo_err(f"crashlens: warning: cannot write the job summary: {exc.strerror}")
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {output}: {exc.strerror}")
        if not quiet:
            echo_err(f"crashlens: wrote the {fmt} report to {output}")
    elif not quiet:
        sys.stdout.write(text)


#: ``-o FILE`` without ``-f``: the format its extension names.
_EXTENSIONS = {
    ".json": "json",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".xml": "junit",
    ".txt": "text",
}


def _format_of(output: Path) -> str:
    fmt = _EXTENSIONS.get(output.suffix.lower())
    if fmt is None:
        fail(
            f"cannot tell the format of {output} from its extension "
            f"({', '.join(_EXTENSIONS)}); give -f FORMAT"
        )
    return fmt


def _refuse_overwriting_inputs(files: list[Path], paths: list[str]) -> None:
    """A report never replaces a log it is about (crashlens never modifies its inputs)."""
    inputs = [Path(p).resolve() for p in paths if p != "-"]
    for out in files:
        target = out.resolve()
        for src in inputs:
            if target == src or (src.is_dir() and target.exists() and src in target.parents):
                fail(f"--output {out} is one of the inputs; write the report elsewhere")


def _exit_code(report: Report, fail_on: str, exit_zero: bool) -> ExitCode:
    from crashlens.ruletypes import SEVERITY_WEIGHT

    if exit_zero or not report.failed:
        return ExitCode.OK
    threshold = SEVERITY_WEIGHT[fail_on]
    worst = max(SEVERITY_WEIGHT[c.match.rule.severity] for c in report.causes)
    return ExitCode.FAILURE_FOUND if worst >= threshold else ExitCode.OK


def _scheduler_job(environ: Mapping[str, str]) -> str | None:
    """The job as its scheduler names it (``train-llama 123456`` under SLURM), if it does."""
    parts = [environ.get("SLURM_JOB_NAME", ""), environ.get("SLURM_JOB_ID", "")]
    return " ".join(p for p in parts if p) or None


def _post_slack(url: str, payload: str) -> None:
    """Post to a Slack webhook (the Slack renderer is imported only when one is given)."""
    from crashlens.render.slack import post_slack

    post_slack(url, payload)
