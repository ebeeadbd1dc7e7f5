"""The analyzer as a library: ``analyze(paths) -> Report`` chains every stage once.

The work is a :class:`~crashlens.session.Session`'s; this is its one-call form.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from crashlens.config import Config
from crashlens.report import Report
from crashlens.rulebase import RuleSet
from crashlens.session import (
    ForkRunner,
    Progress,
    SequentialRunner,
    Session,
    input_size,
)

if TYPE_CHECKING:
    from crashlens.resemble import KnownReports

__all__ = ["Progress", "analyze", "input_size"]


def analyze(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    rules: RuleSet | Sequence[str | os.PathLike[str]] | None = None,
    *,
    skew: dict[str, float] | None = None,
    progress: Progress | None = None,
    fast: bool = True,
    disable: Sequence[str] = (),
    strict_rules: bool = False,
    parallel: bool = True,
    known_reports: KnownReports | None = None,
) -> Report:
    """Diagnose the crashed job whose logs are under ``paths``.

    Args:
        paths: files and directories (walked recursively); ``"-"`` reads stdin.
        rules: a loaded :class:`RuleSet`, or extra rule directories added to the bundled rules.
        skew: seconds each host's clock runs ahead of the reference clock (``{"node-02": 2.5}``).
        progress: called with each file's display path and size once it has been read.
        disable: rule ids to leave out (``disable:`` in ``crashlens.yaml``).
        strict_rules: an invalid rule file in ``rules`` is an error instead of a note.
        fast: use the multi-literal fast path where a file allows it; ``False`` feeds every
            line through the parser (same diagnosis, much slower; for tests and benchmarks).
        parallel: read large inputs in forked worker processes (:class:`ForkRunner`);
            ``False`` reads every file in this process.
        known_reports: the labelled reports a finding that tells how, not why, is compared with
            (:mod:`crashlens.resemble`); ``None`` is the bundled index.

    Returns:
        The :class:`Report`; ``render(report, "json")`` etc. produce the output formats.

    Raises:
        NoInputError: when not a single input file could be read.
        RuleError: when a rule file is invalid.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    runner = ForkRunner() if parallel else SequentialRunner()
    if isinstance(rules, RuleSet):
        ruleset = Config(disable=tuple(disable)).apply(rules)
        session = Session(
            ruleset, skew=dict(skew or {}), fast=fast, runner=runner, known=known_reports
        )
    else:
        session = Session.configured(
            list(rules or []),
            skew=skew,
            disable=disable,
            strict_rules=strict_rules,
            fast=fast,
            runner=runner,
            known=known_reports,
        )
    return session.read_paths(paths, progress).finish()
