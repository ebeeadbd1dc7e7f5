"""The terminal the CLI talks to: TTYs, colour and width, decided once (httpie's Environment).

``NO_COLOR`` (any value) turns colour off, ``FORCE_COLOR`` (any value but ``0``) turns it on
even when not a TTY, ``--no-color`` wins over both. Width follows the terminal, within 60-160
columns; output that is not a terminal gets 100 columns and no colour.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

PIPE_WIDTH = 100


@dataclass(frozen=True, slots=True)
class Environment:
    """What the CLI knows about where its output goes."""

    stdout_isatty: bool
    stderr_isatty: bool
    no_color: bool = False
    force_color: bool = False
    columns: int = PIPE_WIDTH
    #: The repository the command runs in (the nearest directory holding ``.git``), for
    #: paths a code host can attach to its files (GitHub annotations).
    repo_root: Path | None = None
    #: ``$GITHUB_STEP_SUMMARY``: the file a GitHub Actions job's summary is appended to.
    step_summary: Path | None = None

    @classmethod
    def from_process(cls, environ: Mapping[str, str] | None = None) -> Environment:
        """The environment of this process (``environ`` defaults to ``os.environ``)."""
        env = os.environ if environ is None else environ
        return cls(
            stdout_isatty=sys.stdout.isatty(),
            stderr_isatty=sys.stderr.isatty(),
            no_color="NO_COLOR" in env,
            force_color=env.get("FORCE_COLOR", "0") not in ("", "0"),
            columns=shutil.get_terminal_size((PIPE_WIDTH, 24)).columns,
            repo_root=_repo_root(Path.cwd()),
            step_summary=Path(env["GITHUB_STEP_SUMMARY"])
            if env.get("GITHUB_STEP_SUMMARY")
            else None,
        )

    def without_color(self) -> Environment:
        """The same environment after ``--no-color``."""
        return replace(self, no_color=True, force_color=False)

    def color(self, *, stderr: bool = False) -> bool:
        """Whether output to stdout (or stderr) gets colour."""
        if self.no_color:
            return False
        return self.force_color or (self.stderr_isatty if stderr else self.stdout_isatty)

    def width(self, *, stderr: bool = False) -> int:
        """Columns for output to stdout (or stderr)."""
        tty = self.stderr_isatty if stderr else self.stdout_isatty
        return min(max(self.columns, 60), 160) if tty else PIPE_WIDTH


def _repo_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds ``.git``."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None
