"""Errors crashlens reports to users, and the process exit codes."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit status of ``crashlens analyze`` (documented in the README)."""

    OK = 0  #: analysed, no failure found
    FAILURE_FOUND = 1  #: analysed, at least one root cause (or failure) found
    USAGE = 2  #: usage or input error: bad options, invalid rules, nothing readable
    CANNOT_RUN = 3  #: the machine cannot run what was asked (a GPU repro without a GPU)
    INTERRUPTED = 130  #: stopped by Ctrl-C (128 + SIGINT)


class CrashlensError(Exception):
    """A problem with the user's input or configuration, shown as one clean line."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line

    def __str__(self) -> str:
        if self.path is None:
            return self.message
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


class CannotRunError(CrashlensError):
    """This machine cannot do what was asked (a command or an extra is missing): exit 3."""


class RuleError(CrashlensError):
    """A rule file that cannot be loaded; names the file and the line."""


class RuleErrors(RuleError):
    """Several rule files that cannot be loaded: every one of them, one per line."""

    def __init__(self, errors: list[RuleError]):
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


class NoInputError(CrashlensError):
    """Nothing readable was found in the given paths."""
