"""Checks on a rule set beyond what loading enforces (``crashlens rules lint``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from crashlens.model import PRODUCED_SOURCE_KINDS
from crashlens.rulebase.literals import class_end
from crashlens.ruletypes import Rule, RuleSet

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class LintIssue:
    """One problem with one rule, found by the validator ``code``."""

    rule_id: str
    path: str
    line: int
    message: str
    code: str = ""
    severity: Severity = "error"

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.code} {self.severity}: {self.rule_id}: {self.message}"
        )


class Validator:
    """A check of one rule (pySigma's rule validators): a code, a severity, messages."""

    code = ""
    severity: Severity = "error"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        """The problems of ``rule`` in ``rules``, one message each."""
        raise NotImplementedError


class IdIsFileName(Validator):
    code = "CL001"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        stem = Path(rule.path).stem
        if stem != rule.id:
            yield f"id must equal the file name '{stem}'"


class OneLineTitle(Validator):
    code = "CL002"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        if "\n" in rule.title:
            yield "title must be one line"


class NoBacktracking(Validator):
    code = "CL003"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        for det in rule.detectors:
            risky = backtracking_risk(det.pattern.pattern)
            if risky is not None:
                yield (
                    f"detector '{det.name}' can backtrack catastrophically: {risky!r} repeats a "
                    "group that itself has an unbounded quantifier; make the repetitions "
                    "unambiguous (start the group with a literal) or bound them"
                )


class KnownExplains(Validator):
    code = "CL004"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        for target in rule.explains:
            if not target.startswith("class:") and target not in rules.by_id:
                yield f"explains unknown rule '{target}'"


class KnownRepro(Validator):
    code = "CL005"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        if rule.repro is not None and not (REPRO_SCRIPTS / f"{rule.repro}.py").is_file():
            yield f"repro '{rule.repro}' names no script in crashlens/repro/scripts/"


class SourcesThatOccur(Validator):
    code = "CL006"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        for det in rule.detectors:
            never = sorted((det.sources or frozenset()) - set(PRODUCED_SOURCE_KINDS))
            if never:
                yield (
                    f"detector '{det.name}': no input is ever read as {', '.join(never)} "
                    f"(sources are {', '.join(PRODUCED_SOURCE_KINDS)}): it can never fire"
                )


class LiteralAnchor(Validator):
    code = "CL101"
    severity: Severity = "warning"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        for det in rule.detectors:
            if det.scope == "line" and not det.literals:
                yield (
                    f"detector '{det.name}' has no literal anchor (runs on every line); "
                    "add contains:"
                )


class HasRemediation(Validator):
    code = "CL102"
    severity: Severity = "warning"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        if not rule.remediation:
            yield "no remediation"
        if not rule.references:
            yield "no references"


class HasFixtures(Validator):
    code = "CL103"
    severity: Severity = "warning"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        fixtures = Path(rule.path).with_suffix("")
        if not fixtures.is_dir():
            yield f"no fixture directory {fixtures.name}/"


VALIDATORS: tuple[Validator, ...] = (
    IdIsFileName(),
    OneLineTitle(),
    NoBacktracking(),
    KnownExplains(),
    KnownRepro(),
    SourcesThatOccur(),
    LiteralAnchor(),
    HasRemediation(),
    HasFixtures(),
)
#: Where the repro scripts live (rules name them by ``repro:``).
REPRO_SCRIPTS = Path(__file__).resolve().parents[1] / "repro" / "scripts"


def lint(rules: RuleSet, validators: Iterable[Validator] = VALIDATORS) -> list[LintIssue]:
    """Every issue in ``rules``, in rule order, then ids defined twice in one directory."""
    checks = list(validators)
    issues = [
        LintIssue(rule.id, rule.path, rule.line, message, v.code, v.severity)
        for rule in rules.rules
        for v in checks
        for message in v.check(rule, rules)
    ]
    for replaced, replacement in rules.duplicates:
        issues.append(
            LintIssue(
                replacement.id,
                replacement.path,
                replacement.line,
                f"duplicate id: also defined at {replaced.path}:{replaced.line} "
                "(only the later file is used)",
                "CL007",
            )
        )
    return issues


_UNBOUNDED = ("*", "+")


def backtracking_risk(pattern: str) -> str | None:
    r"""A static check for the shapes that make a backtracking engine take exponential time.

    Flags a group that contains an unbounded quantifier (``*``, ``+``, ``{n,}``) and is itself
    repeated (``*``, ``+``, ``{n,}``, ``{n}`` / ``{n,m}`` with more than one repetition), unless
    the group starts with a plain literal character, which makes each repetition's start
    unambiguous (``(?:\.\d+)*`` is fine; ``(a+)+``, ``(\w*)*``, ``(.*a){3}`` are not).
    Atomic groups ``(?>...)`` and possessive quantifiers never backtrack and are not flagged.

    Returns the offending group's text, or None.
    """
    # stack of [start index, contains-unbounded, starts-with-literal, atomic]
    stack: list[list[Any]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            quant, i = _quantifier(pattern, i)
            _note(stack, quant)
            continue
        if c == "[":
            i = class_end(pattern, i)
            quant, i = _quantifier(pattern, i)
            _note(stack, quant)
            continue
        if c == "(":
            body = i + 1
            atomic = pattern.startswith("?>", body)
            if pattern.startswith("?", body):
                j = body + 1
                if pattern.startswith("P<", j) or (
                    pattern.startswith("<", j)
                    and not (pattern.startswith("<=", j) or pattern.startswith("<!", j))
                ):
                    body = pattern.find(">", j) + 1
                elif pattern[j : j + 1] in (":", ">", "=", "!") or pattern.startswith("<", j):
                    body = j + (2 if pattern.startswith("<", j) else 1)
                else:  # inline flags (?i) or (?i:...)
                    k = j
                    while k < n and pattern[k].isalpha():
                        k += 1
                    body = k + 1
            stack.append([i, False, _literal_start(pattern, body), atomic])
            i = body
            continue
        if c == ")" and stack:
            start, unbounded, literal_start, atomic = stack.pop()
            quant, end = _quantifier(pattern, i + 1)
            if unbounded and not atomic and not literal_start and _repeats(quant):
                return pattern[start:end]
            if unbounded or _unbounded(quant):
                _note(stack, "*")
            i = end
            continue
        i += 1
        quant, i = _quantifier(pattern, i)
        _note(stack, quant)
    return None


def _note(stack: list[list[Any]], quant: str) -> None:
    if stack and _unbounded(quant):
        stack[-1][1] = True


def _unbounded(quant: str) -> bool:
    if not quant or (quant.endswith("+") and len(quant) > 1 and quant[-2] in "*+}?"):
        return False  # none, or possessive
    if quant[0] in _UNBOUNDED:
        return True
    return quant.startswith("{") and quant.rstrip("?").endswith(",}")


def _repeats(quant: str) -> bool:
    if not quant or quant[0] == "?":
        return False
    if _unbounded(quant):
        return True
    if quant.startswith("{"):
        parts = quant.strip("{}?").split(",")
        try:
            return max(int(p) for p in parts if p) > 1
        except ValueError:
            return False
    return False


def _quantifier(pattern: str, i: int) -> tuple[str, int]:
    """The quantifier starting at ``i`` (``""`` if none) and the index after it."""
    if i >= len(pattern):
        return "", i
    c = pattern[i]
    if c in "*+?":
        j = i + 1
    elif c == "{":
        close = pattern.find("}", i)
        inner = pattern[i + 1 : close] if close > 0 else ""
        if not inner or not all(ch.isdigit() or ch == "," for ch in inner):
            return "", i
        j = close + 1
    else:
        return "", i
    if j < len(pattern) and pattern[j] in "?+":
        j += 1
    return pattern[i:j], j


def _literal_start(pattern: str, i: int) -> bool:
    """Whether the group body at ``i`` starts with one plain (unquantified) literal character."""
    if i >= len(pattern):
        return False
    c = pattern[i]
    if c == "\\":
        esc = pattern[i + 1 : i + 2]
        if not esc or esc.isalnum():  # \d, \w, \s, \b, backrefs: not a fixed character
            return False
        nxt = i + 2
    elif c in ".^$*+?{}[]()|":
        return False
    else:
        nxt = i + 1
    quant, _ = _quantifier(pattern, nxt)
    return quant == ""
