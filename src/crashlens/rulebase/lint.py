"""Checks on a rule set beyond what loading enforces (``crashlens rules lint``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crashlens.rulebase.schema import Rule, RuleSet


@dataclass(frozen=True, slots=True)
class LintIssue:
    """One problem with one rule."""

    rule_id: str
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule_id}: {self.message}"


def lint(rules: RuleSet) -> list[LintIssue]:
    """Every issue in ``rules``, in rule order."""
    issues: list[LintIssue] = []
    for rule in rules.rules:
        issues.extend(LintIssue(rule.id, rule.path, rule.line, m) for m in _problems(rule, rules))
    return issues


def _problems(rule: Rule, rules: RuleSet) -> list[str]:
    out = []
    stem = Path(rule.path).stem
    if stem != rule.id:
        out.append(f"id must equal the file name '{stem}'")
    if not rule.remediation:
        out.append("no remediation")
    if not rule.references:
        out.append("no references")
    if "\n" in rule.title:
        out.append("title must be one line")
    for det in rule.detectors:
        if det.scope == "line" and not det.literals:
            out.append(
                f"detector '{det.name}' has no literal anchor (runs on every line); add contains:"
            )
    for target in rule.explains:
        if not target.startswith("class:") and target not in rules.by_id:
            out.append(f"explains unknown rule '{target}'")
    fixtures = Path(rule.path).with_suffix("")
    if not fixtures.is_dir():
        out.append(f"no fixture directory {fixtures.name}/")
    return out
