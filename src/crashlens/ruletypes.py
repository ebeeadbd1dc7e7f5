"""Rule objects built from the YAML rule files (see docs/rules.md for the schema)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import regex

Scope = Literal["line", "exception", "traceback", "flight"]
#: What matching Flight Recorder dumps can find (``flight:`` detectors; crashlens.collectives).
FLIGHT_KINDS = ("not_joined", "mismatch", "no_dump")
Same = Literal["rank", "stated", "host", "job"]
#: The values of :data:`Same`, as the rule loader checks them.
SAME_GROUPS: tuple[str, ...] = get_args(Same)

SEVERITY_WEIGHT: dict[str, float] = {
    "critical": 1.0,
    "high": 0.85,
    "medium": 0.7,
    "low": 0.5,
    "info": 0.3,
}


class LazyPattern:
    """A detector's regex, compiled when first used.

    The prefilter hands a line only to the detectors whose literal it holds, so most detectors
    of a run never see one, and compiling all of them (the ``regex`` module parses patterns in
    Python) costs more than analysing a small job. User rules are compiled as they load, so a
    bad pattern is reported with its file and line; the bundled rules are compiled by the test
    suite (``tests/test_rule_schema.py``).
    """

    __slots__ = ("_compiled", "flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: Any = None

    def compile(self) -> Any:
        """The compiled pattern (compiled once)."""
        if self._compiled is None:
            self._compiled = regex.compile(self.pattern, self.flags)
        return self._compiled

    def search(self, string: str, *args: Any, **kwargs: Any) -> Any:
        """``regex.Pattern.search`` on the compiled pattern."""
        return self.compile().search(string, *args, **kwargs)

    def __getstate__(self) -> tuple[str, int]:
        return self.pattern, self.flags

    def __setstate__(self, state: tuple[str, int]) -> None:
        self.pattern, self.flags = state
        self._compiled = None


@dataclass(frozen=True, slots=True)
class Detector:
    """A named regex; its named groups become typed fields of the signal it detects."""

    name: str
    pattern: LazyPattern
    scope: Scope = "line"
    sources: frozenset[str] | None = None
    literals: tuple[str, ...] | None = None
    ignore_case: bool = False
    #: Exception detectors only: where the exception was raised, by its innermost frame
    #: (``user`` code, a ``library``, or ``none`` when the traceback shows no frame).
    origin: frozenset[str] | None = None
    #: Flight Recorder detectors only (scope ``flight``): the kind of finding they stand for;
    #: their ``pattern`` never matches a line.
    flight: str | None = None


@dataclass(frozen=True, slots=True)
class Condition:
    """When a rule fires: ``any``/``all``/``not`` over detector names, per ``same`` group.

    ``within`` bounds, in seconds, how far apart the co-occurring signals may be; ``at_least``
    is how many hits a group needs (a line that only means failure when it repeats: a retry
    loop that never gets through); with ``last_words``, one hit that is the last line its
    writer printed is enough (the process stopped right after saying it). With ``ends_job``,
    only findings the whole job ended on count (every writer's last line with words).
    """

    any: tuple[str, ...] = ()
    all: tuple[str, ...] = ()
    none: tuple[str, ...] = ()
    within: float | None = None
    same: Same = "rank"
    at_least: int = 1
    last_words: bool = False
    ends_job: bool = False


#: ``facts.test`` values of a fact-only rule (see docs/rules.md, "Rules on facts").
FACT_TESTS = ("known-problem", "outside-recommended", "differs")


@dataclass(frozen=True, slots=True)
class VersionSpec:
    """A parsed version condition: ``>=2.0,<2.2``, ``==1.13.*``, a matrix word, or a string.

    ``clauses`` are ``(operator, version tuple, wildcard)``; ``matrix`` names a version-matrix
    range (``known-problem``, ``recommended``, ``outside-recommended``); ``equals`` is a plain
    value compared case-insensitively (``precision: fp16``).
    """

    text: str
    clauses: tuple[tuple[str, tuple[int, ...], bool], ...] = ()
    matrix: str | None = None
    equals: str | None = None


@dataclass(frozen=True, slots=True)
class VersionEntry:
    """One row of the version matrix: the recommended and the known-problem range of a fact."""

    key: str
    recommended: VersionSpec | None = None
    known_problem: VersionSpec | None = None
    note: str = ""
    references: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FactTest:
    """What a fact-only rule looks for: ``test`` applied to each fact named in ``keys``."""

    test: str
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rule:
    """One root cause (or symptom) the analyzer knows, loaded from ``rules/**/<id>.yaml``."""

    id: str
    title: str
    cls: str
    severity: str
    kind: Literal["cause", "symptom"]
    detectors: tuple[Detector, ...]
    condition: Condition
    path: str
    line: int
    description: str = ""
    explains: tuple[str, ...] = ()
    remediation: str = ""
    references: tuple[str, ...] = ()
    repro: str | None = None
    fallback: bool = False
    #: A finding that tells how a process died, not why, whose class is refined by the known
    #: reports it resembles (:mod:`crashlens.resemble`): a fallback, a launcher's verdict.
    resemble: bool = False
    tags: tuple[str, ...] = ()
    #: A field whose equal values mark the same moment on every rank (clock-skew basis).
    sync: str | None = None
    #: ``when:`` conditions on environment facts; all must hold (a missing fact fails).
    when: tuple[tuple[str, VersionSpec], ...] = ()
    #: ``facts:`` of a fact-only rule (no detectors): its evidence is the facts' lines.
    facts: FactTest | None = None

    @property
    def fact_only(self) -> bool:
        """Whether the rule fires on environment facts alone (it has no detectors)."""
        return self.facts is not None

    @property
    def weight(self) -> float:
        """Severity as a number in (0, 1]."""
        return SEVERITY_WEIGHT[self.severity]

    def detector(self, name: str) -> Detector:
        """The detector called ``name``."""
        for det in self.detectors:
            if det.name == name:
                return det
        raise KeyError(name)

    def explains_target(self, rule_id: str, cls: str) -> bool:
        """Whether this rule names ``rule_id`` (or its class) as a downstream symptom."""
        return rule_id in self.explains or f"class:{cls}" in self.explains


@dataclass(slots=True)
class RuleSet:
    """All loaded rules, with per-scope detector indexes built once."""

    rules: tuple[Rule, ...]
    by_id: dict[str, Rule] = field(default_factory=dict)
    #: The version matrix (``rules/versions.yaml``): fact key -> range name -> spec.
    versions: dict[str, VersionEntry] = field(default_factory=dict)
    #: ``(replaced, replacement)`` for rules whose id was defined twice in one directory.
    duplicates: tuple[tuple[Rule, Rule], ...] = ()
    #: User rule files that could not be loaded and were left out ("file:line: problem").
    skipped: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.by_id = {rule.id: rule for rule in self.rules}

    def line_detectors(self) -> list[tuple[Rule, Detector]]:
        """Detectors run on every (prefiltered) line."""
        return [(r, d) for r in self.rules for d in r.detectors if d.scope == "line"]

    def exception_detectors(self) -> list[tuple[Rule, Detector]]:
        """Detectors run on assembled tracebacks (exception text or whole traceback)."""
        return [
            (r, d) for r in self.rules for d in r.detectors if d.scope in ("exception", "traceback")
        ]
