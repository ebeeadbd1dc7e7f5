"""Command-line interface: wires typer commands to the library; no analysis happens here."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import regex
import typer
import typer.core
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichProgress

from crashlens._version import __version__
from crashlens.api import Progress, input_size
from crashlens.config import Config, load_config
from crashlens.errors import CannotRunError, CrashlensError, ExitCode
from crashlens.live_cli import RUN_CONTEXT, run_command, watch_command
from crashlens.live_cli import fail as _fail
from crashlens.model import Note
from crashlens.render import FORMATS, render
from crashlens.render.schema import load_schema
from crashlens.report import Report
from crashlens.repro.catalog import for_report
from crashlens.repro.cli import repro_app, run_for_report
from crashlens.rulebase import RuleSet, default_rules_dir
from crashlens.rulebase.lint import lint
from crashlens.ruletest import LINT_VALIDATORS, fixture_files, run_fixture
from crashlens.ruletypes import SEVERITY_WEIGHT
from crashlens.session import Session
from crashlens.termenv import PIPE_WIDTH, Environment


def _help_shows_metavars() -> None:
    """typer prints Python types in help: ``<list[str]>`` and ``<bool>`` beside parameters,
    ``{paths}...`` in the usage line. The help shows metavars instead (``PATH...``, ``FILE``;
    an option's ``metavar=``, else its type's name in capitals) and nothing beside a flag."""
    core = typer.core

    def plain_type(param: typer.core.TyperArgument | typer.core.TyperOption, ctx: Any) -> str:
        label = typer.core._TyperParameter.display_type(param, ctx).strip("<>")
        if label.startswith("list[") and label.endswith("]"):
            label = label[5:-1]
        return {"str": "TEXT", "path": "PATH"}.get(label, label).upper()

    def argument_type(self: typer.core.TyperArgument, ctx: Any) -> str | None:
        return None

    def argument_usage(self: typer.core.TyperArgument, ctx: Any) -> list[str]:
        name = self.metavar or (self.name or "ARG").upper()
        if self.metavar is None and self.nargs != 1:
            name += "..."
        return [name if self.required else f"[{name}]"]

    def option_type(self: typer.core.TyperOption, ctx: Any) -> str | None:
        if self.metavar is not None:
            return self.metavar or None
        if self.is_flag or self.count:
            return None
        return plain_type(self, ctx) + ("..." if self.nargs != 1 else "")

    core.TyperArgument.display_type_rich = argument_type  # type: ignore[method-assign,assignment]
    core.TyperArgument.get_usage_pieces = argument_usage  # type: ignore[method-assign]
    core.TyperOption.display_type_rich = option_type  # type: ignore[method-assign]


_help_shows_metavars()

app = typer.Typer(
    name="crashlens",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Find the root cause of a crashed distributed training job from its logs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_SKEW = regex.compile(r"^(?P<host>[^=]+)=(?P<sign>[+-]?)(?P<num>\d+(?:\.\d+)?)(?P<unit>ms|s)?$")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"crashlens {__version__}")
        raise typer.Exit()


#: ``--config FILE``: the config to use instead of the one found walking up.
ConfigOption = typer.Option(
    "--config",
    metavar="FILE",
    help="Config file (crashlens.yaml, or a pyproject.toml with \\[tool.crashlens]) instead of "
    "the nearest one walking up from here.",
)


def _config(path: Path | None, rule_dirs: list[Path], *, warn: bool = True) -> Config:
    """The config (``--config``, else discovered); a ``disable:`` of no rule gets a warning."""
    try:
        config = load_config(path=path)
    except CrashlensError as exc:
        _fail(str(exc))
    if warn:
        for rule_id in config.unknown_disabled(rule_dirs):
            where = f"{config.path}: " if config.path else ""
            typer.echo(
                f"crashlens: warning: {where}disable: no rule '{rule_id}' "
                "(see crashlens rules list)",
                err=True,
            )
    return config


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show version.")
    ] = False,
) -> None:
    """crashlens: ranked root-cause diagnosis for crashed training jobs."""


def parse_skew(values: list[str]) -> dict[str, float]:
    """Parse ``HOST=+2.5s`` overrides into seconds per host.

    Raises:
        typer.BadParameter: for a malformed value.
    """
    out: dict[str, float] = {}
    for value in values:
        m = _SKEW.match(value.strip())
        if not m:
            raise typer.BadParameter(f"expected HOST=+SECONDS[s|ms], got '{value}'")
        seconds = float(m["num"]) / (1000.0 if m["unit"] == "ms" else 1.0)
        out[m["host"]] = -seconds if m["sign"] == "-" else seconds
    return out


def _read_slurm(session: Session, value: str) -> None:
    """Read what SLURM knows of the jobs in ``value``: their output files and its verdict."""
    from crashlens import slurm  # only a --slurm run pays for it

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

    if report.primary is None:
        return
    try:
        line = history(table, report.signature(report.primary).key)
    except FleetExtraMissingError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(int(ExitCode.CANNOT_RUN)) from None
    except CrashlensError as exc:
        _fail(str(exc))
        return
    report.notes.append(Note(line or f"no job of {table} failed with this signature before"))


@app.command()
def analyze(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PATH...",
            help="Log files or directories (walked recursively); - is stdin. Optional with "
            "--slurm.",
            show_default=False,
        ),
    ] = None,
    fmts: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help=f"Output format (repeatable): {', '.join(FORMATS)}.",
        ),
    ] = None,
    outputs: Annotated[
        list[Path] | None,
        typer.Option(
            "--output", "-o", metavar="FILE", help="File for the format in the same position."
        ),
    ] = None,
    rules: Annotated[
        list[Path] | None,
        typer.Option("--rules", metavar="DIR", help="Extra rule directory (repeatable)."),
    ] = None,
    skew: Annotated[
        list[str] | None,
        typer.Option(
            "--skew",
            metavar="HOST=OFFSET",
            help="Clock offset of a host, e.g. node-02=+2.5s (repeatable).",
        ),
    ] = None,
    post_slack_url: Annotated[
        str | None,
        typer.Option("--post-slack", metavar="URL", help="Post the Slack message to this webhook."),
    ] = None,
    job_name: Annotated[
        str | None,
        typer.Option(
            "--job-name",
            metavar="NAME",
            help="The job's name in the Slack message (default: $SLURM_JOB_NAME $SLURM_JOB_ID).",
        ),
    ] = None,
    report_url: Annotated[
        str | None,
        typer.Option("--report-url", metavar="URL", help="Link the full report from Slack."),
    ] = None,
    fail_on: Annotated[
        str,
        typer.Option(
            "--fail-on",
            metavar="SEVERITY",
            help="Exit 1 only for a cause of this severity or worse: "
            f"{', '.join(SEVERITY_WEIGHT)}.",
        ),
    ] = "info",
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Exit 0 even when a failure is found.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No report on stdout.")] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Text format: every cause with its evidence, and the inputs (default: one "
            "screen).",
        ),
    ] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="Never use colour.")] = False,
    show_traceback: Annotated[  # read by main(), which owns the error policy
        bool, typer.Option("--traceback", help="Show internal errors in full.")
    ] = False,
    repro: Annotated[
        bool,
        typer.Option(
            "--repro",
            help="Then run the top cause's minimal repro; the exit code becomes the repro's "
            "(0 reproduced, 1 not, 3 cannot run here) when there is one.",
        ),
    ] = False,
    repro_out: Annotated[
        Path | None,
        typer.Option("--repro-out", metavar="DIR", help="Output directory of the --repro run."),
    ] = None,
    strict_rules: Annotated[
        bool,
        typer.Option(
            "--strict-rules", help="Exit 2 on an invalid rule file instead of leaving it out."
        ),
    ] = False,
    slurm_jobs: Annotated[
        str | None,
        typer.Option(
            "--slurm",
            metavar="JOBID",
            help="Ask SLURM about the job(s) (1234 or 1234,1235; auto: $SLURM_JOB_ID): read "
            "their output files and add the scheduler's verdict (TIMEOUT, OUT_OF_MEMORY, ...).",
        ),
    ] = None,
    fleet_table: Annotated[
        Path | None,
        typer.Option(
            "--fleet",
            metavar="TABLE",
            help="A fleet table (crashlens triage): say how many of its jobs failed the same "
            "way (same signature) and since when.",
        ),
    ] = None,
    config_file: Annotated[Path | None, ConfigOption] = None,
) -> None:
    """Analyse the logs of a crashed job and print a ranked diagnosis.

    Several formats in one run: `-f html -o r.html -f json -o r.json` (the logs are parsed once).
    Exit codes: 0 no failure found, 1 failure found, 2 usage or input error.
    """
    files = list(outputs or [])
    formats = fmts or [_format_of(f) for f in files] or ["text"]
    for fmt in formats:
        if fmt not in FORMATS:
            _fail(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})")
    if len(files) > len(formats):
        _fail("more --output files than --format options")
    if sum(1 for i in range(len(formats)) if i >= len(files)) > 1:
        _fail("only one format can go to stdout; give the others an --output file")
    if fail_on not in SEVERITY_WEIGHT:
        _fail(f"--fail-on must be one of {', '.join(SEVERITY_WEIGHT)}")
    paths = list(paths or [])
    if not paths and slurm_jobs is None:
        _fail("give at least one PATH (or --slurm JOBID)")
    _refuse_overwriting_inputs(files, paths)
    # A bug is main()'s to report (one line; the traceback with --traceback).
    overrides = parse_skew(skew or [])
    try:
        show = not quiet and sys.stderr.isatty()
        config = _config(config_file, rules or [], warn=not quiet)
        with progress_bar(enabled=show, paths=paths, no_color=no_color) as advance:
            session = Session.configured(
                rules or [], config=config, skew=overrides, strict_rules=strict_rules
            )
            if paths:
                session.read_paths(paths, advance)
            if slurm_jobs is not None:
                _read_slurm(session, slurm_jobs)
            report = session.finish()
    except CannotRunError as exc:
        _fail(str(exc), ExitCode.CANNOT_RUN)
    except CrashlensError as exc:
        _fail(str(exc))
    if fleet_table is not None:
        _fleet_history(report, fleet_table)
    if not quiet:
        hosts = {r.host for r in report.ranks if r.host}
        for host in sorted(set(overrides) - hosts):
            typer.echo(f"crashlens: warning: --skew names host '{host}', not in the logs", err=True)
        for note in report.notes:
            typer.echo(f"crashlens: {note}", err=True)
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
            typer.echo(f"crashlens: warning: {exc}", err=True)
    if repro:
        code = run_for_report(report, repro_out, err=not quiet)
        try:
            has_repro = for_report(report) is not None
        except CrashlensError:  # a rule naming an unknown repro: reported, exit 2
            has_repro = True
        if has_repro:
            raise typer.Exit(code)
    raise typer.Exit(int(_exit_code(report, fail_on, exit_zero)))


@contextlib.contextmanager
def progress_bar(
    *, enabled: bool, paths: list[str], no_color: bool = False
) -> Iterator[Progress | None]:
    """A rich progress bar on stderr (TTY only) advanced by bytes as files are read."""
    if not enabled:
        yield None
        return
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
            typer.echo(
                f"crashlens: warning: cannot write the job summary: {exc.strerror}", err=True
            )
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            _fail(f"cannot write {output}: {exc.strerror}")
        if not quiet:
            typer.echo(f"crashlens: wrote the {fmt} report to {output}", err=True)
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
        _fail(
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
                _fail(f"--output {out} is one of the inputs; write the report elsewhere")


def _exit_code(report: Report, fail_on: str, exit_zero: bool) -> ExitCode:
    if exit_zero or not report.failed:
        return ExitCode.OK
    threshold = SEVERITY_WEIGHT[fail_on]
    worst = max(SEVERITY_WEIGHT[c.match.rule.severity] for c in report.causes)
    return ExitCode.FAILURE_FOUND if worst >= threshold else ExitCode.OK


@app.command()
def schema() -> None:
    """Print the JSON Schema of `analyze --format json`."""
    typer.echo(json.dumps(load_schema(), indent=2))


rules_app = typer.Typer(help="List, show, lint and test rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")
app.add_typer(repro_app, name="repro")
from crashlens.fleet.cli import triage_app  # noqa: E402 - the fleet sub-app, next to repro's

app.add_typer(triage_app, name="triage")
app.command("run", context_settings=RUN_CONTEXT)(run_command)
app.command("watch")(watch_command)

RulesOption = Annotated[
    list[Path] | None,
    typer.Option("--rules", metavar="DIR", help="Extra rule directory (repeatable)."),
]


def _load(
    rules: list[Path] | None, *, strict: bool = False, config_file: Path | None = None
) -> RuleSet:
    config = _config(config_file, rules or [])
    try:
        ruleset = Session.configured(rules or [], config=config, strict_rules=strict).rules
    except CrashlensError as exc:
        _fail(str(exc))
    for problem in ruleset.skipped:
        typer.echo(f"crashlens: rule file left out: {problem}", err=True)
    return ruleset


@rules_app.command("list")
def rules_list(
    rules: RulesOption = None,
    fmt: Annotated[
        str, typer.Option("--format", "-f", metavar="FORMAT", help="text or json.")
    ] = "text",
    config_file: Annotated[Path | None, ConfigOption] = None,
) -> None:
    """List every rule: id, class, kind, severity, title (and, as json, its file)."""
    if fmt not in ("text", "json"):
        _fail("--format must be text or json")
    listed = sorted(_load(rules, config_file=config_file).rules, key=lambda r: (r.cls, r.id))
    if fmt == "json":
        keys = ("id", "cls", "kind", "severity", "title", "path")
        rows = [{("class" if k == "cls" else k): getattr(r, k) for k in keys} for r in listed]
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo(f"{'ID':32} {'CLASS':26} {'KIND':8} {'SEVERITY':9} TITLE")
    for rule in listed:
        typer.echo(f"{rule.id:32} {rule.cls:26} {rule.kind:8} {rule.severity:9} {rule.title}")


@rules_app.command("show")
def rules_show(
    rule_id: Annotated[str, typer.Argument(metavar="RULE_ID", help="A rule id.")],
    rules: RulesOption = None,
    config_file: Annotated[Path | None, ConfigOption] = None,
) -> None:
    """Print a rule's YAML file."""
    ruleset = _load(rules, config_file=config_file)
    rule = ruleset.by_id.get(rule_id)
    if rule is None:
        close = difflib.get_close_matches(rule_id, list(ruleset.by_id), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        _fail(f"no rule '{rule_id}' ({hint}see `crashlens rules list`)")
    typer.echo(f"# {rule.path}")
    typer.echo(Path(rule.path).read_text(encoding="utf-8"), nl=False)


@rules_app.command("lint")
def rules_lint(
    rules: RulesOption = None, config_file: Annotated[Path | None, ConfigOption] = None
) -> None:
    """Check rules; exit 2 if a file is invalid, 1 for problems loading does not catch."""
    issues = lint(_load(rules, strict=True, config_file=config_file), LINT_VALIDATORS)
    for issue in issues:
        typer.echo(str(issue))
    typer.echo(f"{len(issues)} issue(s)", err=True)
    raise typer.Exit(1 if issues else 0)


@rules_app.command("test")
def rules_test(
    directory: Annotated[
        Path | None,
        typer.Argument(metavar="DIR", help="Rule directory with fixtures (default: bundled)."),
    ] = None,
) -> None:
    """Run every rule's annotated fixtures (#! ruleid / #! ok markers); exit 1 on failure."""
    root = directory or default_rules_dir()
    ruleset = _load([root] if directory else [])
    failed = 0
    files = fixture_files(root)
    for path in files:
        try:
            problems = run_fixture(path, ruleset).problems()
        except CrashlensError as exc:
            problems = [str(exc)]
        for problem in problems:
            typer.echo(f"FAIL {path}: {problem}")
        failed += bool(problems)
    typer.echo(f"{len(files) - failed} passed, {failed} failed", err=True)
    if not files:
        _fail(f"no rule fixtures under {root} (rules/<area>/<id>/*.log beside <id>.yaml)")
    raise typer.Exit(1 if failed else 0)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: runs one command and owns the error policy.

    Every way out is an :class:`ExitCode`: the command's own, 2 for a usage or input error
    (one line, no traceback), 130 for Ctrl-C, and 2 with a one-line "internal error" (the
    traceback only with ``--traceback``) for a bug.
    """
    args = sys.argv[1:] if argv is None else argv
    try:
        code = app(args=args, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("crashlens: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except CrashlensError as exc:
        for line in str(exc).splitlines() or [""]:
            typer.echo(f"crashlens: error: {line}", err=True)
        return int(ExitCode.USAGE)
    except Exception as exc:  # the error policy lives here: report, never a raw traceback
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
            show()  # a usage error (bad option, unknown command): click's message
            return int(ExitCode.USAGE)
        if "--traceback" in args:
            raise
        typer.echo(
            f"crashlens: error: internal error ({type(exc).__name__}: {exc}); "
            "rerun with --traceback and report it",
            err=True,
        )
        return int(ExitCode.USAGE)
    return int(code) if isinstance(code, int) else int(ExitCode.OK)


def _scheduler_job(environ: Mapping[str, str]) -> str | None:
    """The job as its scheduler names it (``train-llama 123456`` under SLURM), if it does."""
    parts = [environ.get("SLURM_JOB_NAME", ""), environ.get("SLURM_JOB_ID", "")]
    return " ".join(p for p in parts if p) or None


def _post_slack(url: str, payload: str) -> None:
    """Post to a Slack webhook (the Slack renderer is imported only when one is given)."""
    from crashlens.render.slack import post_slack

    post_slack(url, payload)
