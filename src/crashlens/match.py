"""Match stage: evaluate each rule's condition over the detector hits of the timeline."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from crashlens.model import Hit
from crashlens.rulebase.schema import Condition, Rule, RuleSet


@dataclass(frozen=True, slots=True)
class Match:
    """A rule whose condition held, with the hits that made it hold (oldest first)."""

    rule: Rule
    hits: tuple[Hit, ...]

    @property
    def first_time(self) -> float | None:
        """Time of the earliest timed hit."""
        times = [h.evidence.time for h in self.hits if h.evidence.time is not None]
        return min(times) if times else None

    @property
    def ranks(self) -> list[int]:
        """Ranks the evidence came from."""
        return sorted({h.evidence.rank for h in self.hits if h.evidence.rank is not None})

    @property
    def hosts(self) -> list[str]:
        """Hosts the evidence came from."""
        return sorted({h.evidence.host for h in self.hits if h.evidence.host})

    @property
    def fields(self) -> dict[str, str]:
        """Named-group captures, earliest hit first (later hits only fill gaps)."""
        out: dict[str, str] = {}
        for h in self.hits:
            for key, value in h.fields.items():
                out.setdefault(key, value)
        return out


def group_key(hit: Hit, same: str) -> Hashable:
    """The co-occurrence group of a hit: its rank, its host, or the whole job."""
    ev = hit.evidence
    if same == "job":
        return "job"
    if same == "host":
        return ev.host or ev.file
    return ev.rank if ev.rank is not None else ("file", ev.file)


def match(hits: Iterable[Hit], rules: RuleSet) -> list[Match]:
    """Every rule whose condition holds in at least one group; fallbacks only on unclaimed
    tracebacks, so a generic "uncaught exception" never competes with a specific rule.
    """
    by_rule: dict[str, list[Hit]] = defaultdict(list)
    for hit in hits:
        by_rule[hit.rule_id].append(hit)
    matches: list[Match] = []
    fallbacks: list[Rule] = []
    for rule in rules.rules:
        if rule.fallback:
            fallbacks.append(rule)
            continue
        found = _evaluate(rule, by_rule.get(rule.id, []))
        if found:
            matches.append(Match(rule, tuple(found)))
    claimed = {h.traceback_id for m in matches for h in m.hits if h.traceback_id is not None}
    for rule in fallbacks:
        own = [h for h in by_rule.get(rule.id, []) if h.traceback_id not in claimed]
        found = _evaluate(rule, own)
        if found:
            matches.append(Match(rule, tuple(found)))
    return matches


def _evaluate(rule: Rule, hits: list[Hit]) -> list[Hit]:
    if not hits:
        return []
    cond = rule.condition
    groups: dict[Hashable, list[Hit]] = defaultdict(list)
    for hit in hits:
        groups[group_key(hit, cond.same)].append(hit)
    evidence: list[Hit] = []
    for members in groups.values():
        evidence.extend(_evaluate_group(cond, members))
    evidence.sort(key=lambda h: (h.evidence.time is None, h.evidence.time or 0.0, h.evidence.line))
    return evidence


def _evaluate_group(cond: Condition, hits: list[Hit]) -> list[Hit]:
    by_det: dict[str, list[Hit]] = defaultdict(list)
    for hit in hits:
        by_det[hit.detector].append(hit)
    positive = [h for d in (*cond.any, *cond.all) for h in by_det.get(d, [])]
    if cond.any and not any(by_det.get(d) for d in cond.any):
        return []
    if not all(by_det.get(d) for d in cond.all):
        return []
    if cond.within is not None and len(cond.all) > 1:
        anchors = _co_occurring(cond, by_det)
        if not anchors:
            return []
        positive = [h for h in positive if _near(h, anchors, cond.within)]
    negatives = [h for d in cond.none for h in by_det.get(d, [])]
    if negatives:
        if cond.within is None:
            return []
        positive = [h for h in positive if not _near(h, negatives, cond.within)]
    return list({id(h): h for h in positive}.values())


def _co_occurring(cond: Condition, by_det: dict[str, list[Hit]]) -> list[Hit]:
    """Hits of the first ``all`` detector that have every other ``all`` detector nearby."""
    assert cond.within is not None
    first, *rest = cond.all
    return [h for h in by_det[first] if all(_near(h, by_det[d], cond.within) for d in rest)]


def _near(hit: Hit, others: list[Hit], within: float) -> bool:
    t = hit.evidence.time
    for other in others:
        u = other.evidence.time
        if t is None or u is None or abs(t - u) <= within:
            return True
    return False
