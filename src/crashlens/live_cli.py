"""Typer commands for ``crashlens run`` and ``crashlens watch`` (registered by ``cli.py``).

Kept out of ``cli.py`` so the live features stay one import and two registrations there::

    from crashlens.live_cli import RUN_CONTEXT, run_command, watch_command
    app.command("run", context_settings=RUN_CONTEXT)(run_command)
    app.command("watch")(watch_command)

No analysis happens here either: ``run`` analyses what it captured with a
:class:`~crashlens.session.Session` (``crashlens.yaml`` applied, as for ``analyze``),
``watch`` drives :class:`crashlens.watch.Watcher`.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn

import typer

from crashlens.config import load_config
from crashlens.errors import CrashlensError, ExitCode
from crashlens.render import FORMATS, render
from crashlens.session import Session
from crashlens.termenv import Environment
from crashlens.watch import READ_CAP, Alert, HookRunner, Watcher, follow
from crashlens.wrap import WrapResult, default_log_dir, run_and_tee

#: ``context_settings`` for the ``run`` command: everything after the first word of the command
#: (or after ``--``) belongs to the command, so its own ``-o``/``--format`` are never taken.
RUN_CONTEXT: dict[str, Any] = {
    "allow_extra_args": True,
    "ignore_unknown_options": True,
    "allow_interspersed_args": False,
}


def fail(message: str, code: int = int(ExitCode.USAGE)) -> NoReturn:
    """The one error printer of every command: each line of ``message`` as ``crashlens: error:
    ...`` on stderr, then the exit status ``code`` (main() turns it into the process's)."""
    for line in message.splitlines() or [""]:
        typer.echo(f"crashlens: error: {line}", err=True)
    raise typer.Exit(int(code))


def _warn(message: str) -> None:
    typer.echo(f"crashlens: {message}", err=True)


def run_command(
    command: Annotated[
        list[str] | None, typer.Argument(help="The command to run, after --.", show_default=False)
    ] = None,
    log_dir: Annotated[
        Path | None,
        typer.Option("--log-dir", help="Capture directory (default ./crashlens-run-<time>/)."),
    ] = None,
    fmts: Annotated[
        list[str] | None,
        typer.Option("--format", "-f", help=f"Report format on failure: {', '.join(FORMATS)}."),
    ] = None,
    outputs: Annotated[
        list[Path] | None,
        typer.Option("--output", "-o", help="File for the --format in the same position."),
    ] = None,
    also: Annotated[
        list[Path] | None,
        typer.Option("--also", help="More logs the job writes, analysed with the capture."),
    ] = None,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra rule directory (repeatable).")
    ] = None,
    post_slack_url: Annotated[
        str | None, typer.Option("--post-slack", help="Post the diagnosis to this webhook.")
    ] = None,
    no_color: Annotated[bool, typer.Option("--no-color", help="Never use colour.")] = False,
) -> None:
    """Run a training command unchanged; if it fails, diagnose what it printed.

    Usage: `crashlens run [OPTIONS] -- torchrun ... train.py ...`. Output is streamed through
    live and captured, timestamped, in LOG_DIR/console.log. The exit status is the command's
    (128+N when signal N killed it); 127/126 when it cannot be started, 2 for bad options.
    """
    argv = list(command or [])
    if not argv:
        fail("no command given (usage: crashlens run [OPTIONS] -- COMMAND [ARGS]...)")
    formats = list(fmts or [])
    files = list(outputs or [])
    for fmt in formats:
        if fmt not in FORMATS:
            fail(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})")
    if len(files) != len(formats):
        fail("give each --format an --output file (the text diagnosis always goes to stderr)")
    target = log_dir or default_log_dir()
    try:
        result = run_and_tee(argv, target)
    except (FileNotFoundError, PermissionError) as exc:
        if log_dir is None:
            # Nothing ran: the capture directory crashlens chose holds nothing worth keeping.
            shutil.rmtree(target, ignore_errors=True)
        if isinstance(exc, FileNotFoundError):
            fail(f"command not found: {argv[0]}", 127)
        fail(f"cannot run {argv[0]}: {exc.strerror}", 126)
    except OSError as exc:
        fail(f"cannot start {argv[0]} or write {target}: {exc.strerror or exc}")
    if result.failed:
        try:
            _diagnose(
                result,
                target,
                [*(also or [])],
                [*(rules or [])],
                formats,
                files,
                post_slack_url,
                color=not no_color,
            )
        except KeyboardInterrupt:
            _warn("diagnosis interrupted")
    raise typer.Exit(result.exit_code)


#: Last lines shown for a failed command whose output names no known cause.
RUN_LAST_LINES = 5


def _diagnose(
    result: WrapResult,
    log_dir: Path,
    also: list[Path],
    rules: list[Path],
    formats: list[str],
    files: list[Path],
    slack_url: str | None,
    *,
    color: bool,
) -> None:
    """Analyse the capture (and ``--also`` logs); never changes the exit status."""
    how = (
        f"was killed by {_signal_name(result.signal)}"
        if result.signal is not None
        else f"exited with status {result.exit_code}"
    )
    _warn(f"the command {how}; diagnosing {log_dir}" + "".join(f" {p}" for p in also))
    try:
        session = Session.configured(rules, config=load_config())
        report = session.read_paths([log_dir, *also]).finish()
    except CrashlensError as exc:
        _warn(f"error: no diagnosis: {exc}")
        return
    except Exception as exc:  # the wrapped job's status matters more than our own failure
        _warn(f"error: internal error in the diagnosis ({type(exc).__name__}: {exc})")
        return
    env = Environment.from_process()
    color = color and env.color(stderr=True)
    width = env.width(stderr=True)
    if report.failed:
        sys.stderr.write(render(report, "text", color=color, width=width))
    else:
        # The command failed: "No failure found" would be a lie. Say what is known.
        last = [line for r in report.ranks for line in r.last_lines][-RUN_LAST_LINES:]
        _warn(f"the command {how}; no known cause in its output" + (":" if last else ""))
        for line in last:
            sys.stderr.write(f"  {line}\n")
    sys.stderr.flush()
    for fmt, path in zip(formats, files, strict=True):
        try:
            path.write_text(render(report, fmt), encoding="utf-8")
        except OSError as exc:
            _warn(f"error: cannot write {path}: {exc.strerror}")
    if slack_url:
        try:
            _post_slack(slack_url, render(report, "slack"))
        except CrashlensError as exc:
            _warn(f"error: {exc}")


def _signal_name(signum: int | None) -> str:
    if signum is None:
        return "a signal"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def watch_command(
    directory: Annotated[Path, typer.Argument(help="Log tree of the running job.")],
    interval: Annotated[
        float, typer.Option("--interval", min=0.05, help="Seconds between passes.")
    ] = 2.0,
    post_slack_url: Annotated[
        str | None, typer.Option("--post-slack", help="Post each alert to this webhook.")
    ] = None,
    on_cause: Annotated[
        str | None,
        typer.Option("--on-cause", help="Shell command run once per cause, with CRASHLENS_* env."),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Read what exists now, report, and exit.")
    ] = False,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra rule directory (repeatable).")
    ] = None,
) -> None:
    """Follow a live log tree and alert as soon as a root cause appears on any rank.

    Each cause (rule and class) alerts once: one line on stdout, optionally a Slack post and the
    --on-cause hook (e.g. 'scancel $SLURM_JOB_ID'), which gets CRASHLENS_RULE, CRASHLENS_CLASS,
    CRASHLENS_RANK, CRASHLENS_FILE and CRASHLENS_LINE. Exit status: 1 if any cause alerted,
    else 0 (also after Ctrl-C); 2 for bad options.
    """
    if not directory.is_dir():
        fail(f"{directory} is not a directory")
    try:
        session = Session.configured(list(rules or []), config=load_config())
    except CrashlensError as exc:
        fail(str(exc))
    hooks = HookRunner(on_cause, _warn) if on_cause else None

    def on_alert(alert: Alert) -> None:
        line = alert.line()
        typer.echo(line)
        if post_slack_url:
            try:
                _post_slack(post_slack_url, json.dumps({"text": line}))
            except CrashlensError as exc:
                _warn(f"error: {exc}")
        if hooks is not None:
            hooks.start(alert)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    # Ctrl-C and SIGTERM are how a watch ends: a mask or an "ignore" inherited from whatever
    # started it (a supervisor, a test runner) must not swallow them.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        watcher = Watcher(directory, session, read_cap=None if once else READ_CAP)
        count = follow(
            watcher,
            interval=interval,
            once=once,
            on_alert=on_alert,
            warn=_warn,
            on_ready=lambda: _warn(
                f"watching {directory} ({len(watcher.tails)} file(s), every {interval:g} s);"
                " Ctrl-C to stop"
            ),
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    if hooks is not None:
        hooks.wait(60.0 if once else 10.0)
    raise typer.Exit(1 if count else 0)


def _post_slack(url: str, payload: str) -> None:
    """Post to a Slack webhook (the Slack renderer is imported only when one is given)."""
    from crashlens.render.slack import post_slack

    post_slack(url, payload)
