"""Rule fixtures: annotated logs next to each rule, checked like semgrep's ``--test``.

A fixture file ``rules/<area>/<rule-id>/<name>.log`` holds real log text plus directive lines
starting with ``#! ``, which are removed before parsing (reported line numbers refer to the file
without them):

- ``#! ruleid: <id>[, <id>]`` — the rule must have evidence on the next line;
- ``#! ok: <id>`` — the rule must *not* have evidence on the next line (a near miss);
- ``#! source: rank=3 host=node-02 kind=kernel`` — how to attribute the file (first lines only).

For a multi-line event the marked line is its anchor: the ``ExcType: message`` line of a
traceback, or the line the detector's regex matches.

A fixture can also be a directory ``rules/<area>/<rule-id>/<name>/``: a job's tree as it was
captured (logs and Flight Recorder dumps), read as ``crashlens analyze`` reads one, with a
``FIXTURE`` file (YAML) naming the rules that must match (``ruleid: [...]``) and must not
(``ok: [...]``) anywhere in it.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from crashlens.errors import RuleError
from crashlens.ingest.discover import attribute
from crashlens.model import Source
from crashlens.remediation import fill
from crashlens.rulebase.lint import VALIDATORS, Validator
from crashlens.ruletypes import Rule, RuleSet
from crashlens.session import SequentialRunner, Session

DIRECTIVE = "#! "
FIXTURE_SUFFIXES = (".log", ".txt", ".out", ".err")
#: The file that makes a directory a fixture (a job tree); its findings have no line (0).
TREE_FIXTURE = "FIXTURE"


@dataclass(slots=True)
class FixtureResult:
    """Expected and actual evidence lines per rule for one fixture file."""

    path: Path
    expected: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    ok: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    actual: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    #: Every ``(rule id, detector)`` that matched something in it, whether or not its rule
    #: then matched (a ``not:`` detector's hit keeps its rule quiet): what the fixture tests.
    fired: set[tuple[str, str]] = field(default_factory=set)

    def problems(self) -> list[str]:
        """Human-readable failures, empty when the fixture passes."""
        out = []
        for rule_id, lines in sorted(self.expected.items()):
            missed = sorted(lines - self.actual.get(rule_id, set()))
            if missed:
                out.append(f"{rule_id}: missed line(s) {missed}")
        for rule_id, lines in sorted(self.ok.items()):
            unexpected = sorted(lines & self.actual.get(rule_id, set()))
            if unexpected:
                out.append(f"{rule_id}: unexpected match on line(s) {unexpected}")
        return out


def fixture_files(rules_dir: Path) -> list[Path]:
    """Every rule fixture under ``rules_dir``: files inside directories named like a rule, and
    directories there that hold a ``FIXTURE`` file (job trees)."""
    trees = [t.parent for t in rules_dir.rglob(TREE_FIXTURE) if _names_rule(t.parent.parent)]
    files = [
        p
        for p in rules_dir.rglob("*")
        if p.is_file()
        and p.suffix in FIXTURE_SUFFIXES
        and _names_rule(p.parent)
        and not any(t in p.parents for t in trees)
    ]
    return sorted([*files, *trees])


def _names_rule(directory: Path) -> bool:
    """Whether ``directory`` sits beside a rule file of its name (``<id>/`` by ``<id>.yaml``)."""
    return any((directory.parent / f"{directory.name}{ext}").is_file() for ext in (".yaml", ".yml"))


def _source(path: Path, header: dict[str, str]) -> Source:
    base = attribute(path.name)
    rank = header.get("rank")
    return Source(
        path=str(path),
        kind=header.get("kind", base.kind),  # type: ignore[arg-type]
        rank=int(rank) if rank is not None else base.rank,
        local_rank=base.local_rank,
        host=header.get("host", base.host),
    )


def run_fixture(path: Path, rules: RuleSet) -> FixtureResult:
    """Parse one annotated fixture with ``rules`` and compare evidence lines with markers.

    Raises:
        RuleError: when a marker names a rule that does not exist.
    """
    if path.is_dir():
        return _run_tree(path, rules)
    result = FixtureResult(path)
    header: dict[str, str] = {}
    lines: list[tuple[int, str]] = []
    pending: list[tuple[str, str]] = []
    raw = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for text in raw:
        if text.startswith(DIRECTIVE):
            key, _, value = text[len(DIRECTIVE) :].partition(":")
            key = key.strip()
            if key == "source":
                for part in value.split():
                    name, eq, val = part.partition("=")
                    if eq:
                        header[name] = val
            elif key in ("ruleid", "ok"):
                for rule_id in (v.strip() for v in value.split(",") if v.strip()):
                    if rule_id not in rules.by_id:
                        raise RuleError(f"marker names unknown rule '{rule_id}'", path=str(path))
                    pending.append((key, rule_id))
            continue
        lineno = len(lines) + 1
        for key, rule_id in pending:
            target = result.expected if key == "ruleid" else result.ok
            target[rule_id].add(lineno)
        pending = []
        lines.append((lineno, text))
    session = Session(rules, runner=SequentialRunner())
    timeline = session.timeline([session.parse_lines(_source(path, header), lines, year=2024)])
    result.fired.update((h.rule_id, h.detector) for h in timeline.hits)
    for m in session.match(timeline.hits, timeline.facts):
        for hit in m.hits:
            result.actual[m.rule.id].add(hit.evidence.line)
    return result


def _run_tree(path: Path, rules: RuleSet) -> FixtureResult:
    """Analyse a job-tree fixture and compare the rules that matched with its ``FIXTURE``."""
    result = FixtureResult(path)
    try:
        spec = yaml.safe_load((path / TREE_FIXTURE).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise RuleError(f"unreadable {TREE_FIXTURE}: {exc}", path=str(path)) from None
    for key, target in (("ruleid", result.expected), ("ok", result.ok)):
        for rule_id in spec.get(key) or ():
            if rule_id not in rules.by_id:
                raise RuleError(f"{TREE_FIXTURE} names unknown rule '{rule_id}'", path=str(path))
            target[rule_id].add(0)
    session = Session(rules, runner=SequentialRunner()).read_paths([path])
    timeline = session.timeline()
    hits, _ = session.hits(timeline)
    result.fired.update((h.rule_id, h.detector) for h in hits)
    for m in session.match(hits, timeline.facts):
        result.actual[m.rule.id].add(0)
    return result


_PLACEHOLDER = re.compile(r"(?<!\{)\{([a-z_][a-z0-9_]*)\}(?!\})")
_ITEM_MARK = re.compile(r"^\s*(?:\d+\.|[-*])\s+")
#: Joiners a paragraph must not start with (the clause they joined was dropped).
_JOINERS = ("or", "and", "but", "then")


def remediation_fragments(rule: Rule) -> Iterator[str]:
    """How ``rule``'s remediation reads when values are unknown: rendered with every subset of
    its placeholders missing, a result that is empty or has a paragraph starting mid-sentence
    (a lower-case word, a joiner) that the fully known rendering does not have."""
    template = rule.remediation or ""
    names = sorted(set(_PLACEHOLDER.findall(template)))
    if not names:
        return

    def starts(out: str) -> set[str]:
        blocks = (_ITEM_MARK.sub("", b.strip()) for b in out.split("\n"))
        return {b.split(" ", 1)[0] for b in blocks if b}

    full = starts(fill(template, dict.fromkeys(names, "X")))
    for k in range(len(names)):
        for known in itertools.combinations(names, k):
            missing = ", ".join(n for n in names if n not in known)
            out = fill(template, dict.fromkeys(known, "X"))
            if not out.strip():
                yield f"remediation is empty without {missing}"
                continue
            for word in sorted(starts(out) - full):
                if (word[:1].islower() and word[:1] != "`") or word.lower() in _JOINERS:
                    yield f"remediation without {missing} has a paragraph starting {word!r}"


class WholeSentences(Validator):
    """Advice that reads as sentences whatever the log did not say (``rules lint``)."""

    code = "CL103"

    def check(self, rule: Rule, rules: RuleSet) -> Iterator[str]:
        seen: set[str] = set()
        for problem in remediation_fragments(rule):
            if problem not in seen:
                seen.add(problem)
                yield problem


#: What ``crashlens rules lint`` runs: the rule base's validators and the remediation check
#: (which renders templates, a later stage than the rule base).
LINT_VALIDATORS: tuple[Validator, ...] = (*VALIDATORS, WholeSentences())
