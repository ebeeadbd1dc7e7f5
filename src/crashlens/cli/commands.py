"""The typer application: every command, wired to the library; no analysis happens here.

:func:`crashlens.cli.main` imports it for any command line but a plain ``analyze`` one
(see :mod:`crashlens.cli.analysis`)."""

from __future__ import annotations

import contextlib
import difflib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core

from crashlens._version import __version__
from crashlens.cli.analysis import (
    CommandExit,
    _scheduler_job,
    analyze_job,
    load_cli_config,
    parse_skew,
)
from crashlens.config import Config
from crashlens.errors import CrashlensError
from crashlens.live_cli import RUN_CONTEXT, run_command, watch_command
from crashlens.live_cli import fail as _fail
from crashlens.render import FORMATS
from crashlens.render.schema import load_schema
from crashlens.repro.catalog import for_report
from crashlens.repro.cli import repro_app, run_for_report
from crashlens.rulebase import RuleSet, default_rules_dir
from crashlens.rulebase.lint import lint
from crashlens.ruletest import LINT_VALIDATORS, fixture_files, run_fixture
from crashlens.ruletypes import SEVERITY_WEIGHT
from crashlens.session import Session

__all__ = ["_scheduler_job", "app", "parse_skew"]


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
    with _exits():
        return load_cli_config(path, rule_dirs, warn=warn)


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show version.")
    ] = False,
) -> None:
    """crashlens: ranked root-cause diagnosis for crashed training jobs."""


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
    with _exits():
        report, code = analyze_job(
            paths=paths, fmts=fmts, outputs=outputs, rules=rules, skew=skew,
            post_slack_url=post_slack_url, job_name=job_name, report_url=report_url,
            fail_on=fail_on, exit_zero=exit_zero, quiet=quiet, verbose=verbose,
            no_color=no_color, show_traceback=show_traceback, strict_rules=strict_rules,
            slurm_jobs=slurm_jobs, fleet_table=fleet_table, config_file=config_file,
        )  # fmt: skip
    if repro:
        repro_code = run_for_report(report, repro_out, err=not quiet)
        try:
            has_repro = for_report(report) is not None
        except CrashlensError:  # a rule naming an unknown repro: reported, exit 2
            has_repro = True
        if has_repro:
            raise typer.Exit(repro_code)
    raise typer.Exit(code)


@contextlib.contextmanager
def _exits() -> Iterator[None]:
    """The typer-free command code's exit (:class:`CommandExit`) as typer's."""
    try:
        yield
    except CommandExit as exc:
        raise typer.Exit(exc.code) from None


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
