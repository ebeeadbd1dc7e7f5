"""Command-line interface: the entry point and its error policy.

The typer application (:mod:`crashlens.cli.commands`: every sub-command) is imported only when
a command line needs it. A plain ``crashlens analyze PATH... [options]``, what CI runs once per
failed job, is read by :func:`crashlens.cli.analysis.parse_argv` and runs the same code as the
typer command without importing typer or the other sub-commands; anything that reader does not
take (help, an unknown or malformed option) goes to typer. ``crashlens.cli.app`` and the other
names of :mod:`crashlens.cli.commands` are still reachable here.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from typing import IO, Any, TextIO, cast

from crashlens.errors import CrashlensError, ExitCode

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    """``crashlens.cli.app`` and the rest of :mod:`crashlens.cli.commands`, imported on first
    use."""
    if name.startswith("__"):
        raise AttributeError(name)
    commands = importlib.import_module("crashlens.cli.commands")
    try:
        return getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module 'crashlens.cli' has no attribute '{name}'") from None


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: runs one command and owns the error policy.

    Every way out is an :class:`ExitCode`: the command's own, 2 for a usage or input error
    (one line, no traceback), 130 for Ctrl-C, and 2 with a one-line "internal error" (the
    traceback only with ``--traceback``) for a bug.
    """
    from crashlens.cli.analysis import CommandExit, echo_err

    args = sys.argv[1:] if argv is None else argv
    try:
        code = _run(args)
    except CommandExit as exc:
        return exc.code
    except KeyboardInterrupt:
        echo_err("crashlens: interrupted")
        return int(ExitCode.INTERRUPTED)
    except CrashlensError as exc:
        for line in str(exc).splitlines() or [""]:
            echo_err(f"crashlens: error: {line}")
        return int(ExitCode.USAGE)
    except Exception as exc:  # the error policy lives here: report, never a raw traceback
        handled = _unexpected(exc, args)
        if handled is None:
            raise
        return handled
    return int(code) if isinstance(code, int) else int(ExitCode.OK)


def _unexpected(exc: Exception, args: list[str]) -> int | None:
    """typer's exits and aborts (typer is imported only if a command used it), click's usage
    errors, and bugs (None: re-raise it, for ``--traceback``)."""
    from crashlens.cli.analysis import echo_err

    typer: Any = sys.modules.get("typer")
    if typer is not None and isinstance(exc, typer.Exit):
        return int(exc.exit_code)
    if typer is not None and isinstance(exc, typer.Abort):
        echo_err("crashlens: interrupted")
        return int(ExitCode.INTERRUPTED)
    show = getattr(exc, "show", None)
    if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
        show()  # a usage error (bad option, unknown command): click's message
        return int(ExitCode.USAGE)
    if "--traceback" in args:
        return None
    echo_err(
        f"crashlens: error: internal error ({type(exc).__name__}: {exc}); "
        "rerun with --traceback and report it"
    )
    return int(ExitCode.USAGE)


def _run(args: list[str]) -> Any:
    """Run the command line: ``analyze`` on the fast path when its reader takes the
    arguments, else through the typer application (what it returns)."""
    if args and args[0] == "analyze" and not any(k.endswith("_COMPLETE") for k in os.environ):
        from crashlens.cli.analysis import parse_argv

        params = parse_argv(args[1:])
        if params is not None:
            return _analyze(params)
    from crashlens.cli.commands import app

    return app(args=args, standalone_mode=False)


def _analyze(params: dict[str, Any]) -> int:
    """``analyze`` without typer, ending as typer's command would (Ctrl-C: 130 quietly; end of
    input: a newline, then "interrupted"; a closed stdout: exit 1, no error)."""
    from crashlens.cli.analysis import CommandExit, analyze_job

    try:
        _, code = analyze_job(**params)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except EOFError:
        sys.stderr.write("\n")
        raise KeyboardInterrupt from None
    except CommandExit as exc:
        return exc.code
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        sys.stdout = cast(TextIO, _QuietFlush(sys.stdout))
        sys.stderr = cast(TextIO, _QuietFlush(sys.stderr))
        sys.exit(1)
    return code


class _QuietFlush:
    """A stream whose flush ignores a broken pipe (the interpreter flushes stdout at exit),
    as click's ``PacifyFlushWrapper``."""

    def __init__(self, wrapped: IO[Any]) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.wrapped, attr)
