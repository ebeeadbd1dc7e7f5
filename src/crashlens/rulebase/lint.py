"""Checks on a rule set beyond what loading enforces (``crashlens rules lint``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashlens.rulebase.literals import class_end
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
    """Every issue in ``rules``, in rule order, then ids defined twice in one directory."""
    issues: list[LintIssue] = []
    for rule in rules.rules:
        issues.extend(LintIssue(rule.id, rule.path, rule.line, m) for m in _problems(rule, rules))
    for replaced, replacement in rules.duplicates:
        issues.append(
            LintIssue(
                replacement.id,
                replacement.path,
                replacement.line,
                f"duplicate id: also defined at {replaced.path}:{replaced.line} "
                "(only the later file is used)",
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
        risky = backtracking_risk(det.pattern.pattern)
        if risky is not None:
            out.append(
                f"detector '{det.name}' can backtrack catastrophically: {risky!r} repeats a "
                "group that itself has an unbounded quantifier; make the repetitions "
                "unambiguous (start the group with a literal) or bound them"
            )
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
