"""Match stage: evaluate each rule's condition over the detector hits of the timeline.

Environment facts enter in two ways (docs/rules.md, "Rules on facts"): a rule's ``when:``
must hold for the facts or the rule does not match, and a fact-only rule (``facts:``, no
detectors) matches on the facts themselves, with synthetic hits that cite each fact's line.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping

from crashlens.facts import VERSION_KEYS, version_tuple
from crashlens.model import Evidence, Fact, Hit, Match
from crashlens.rulebase.conditions import satisfies, when_holds
from crashlens.ruletypes import Condition, Rule, RuleSet, VersionSpec

#: What ``match(..., facts=...)`` accepts: the parsed facts (with their lines), or a plain
#: ``key -> value`` mapping such as ``Report.environment`` (enough for ``when:``, not for
#: fact-only rules, which need a line to cite).
Facts = Iterable[Fact] | Mapping[str, str]


def group_key(hit: Hit, same: str) -> Hashable:
    """The co-occurrence group of a hit: its writer's rank, the rank its line states (its
    ``rank`` field: a process announcing who it is, whatever prefix its writer's launcher put
    before it), its host, or the whole job."""
    ev = hit.evidence
    if same == "job":
        return "job"
    if same == "host":
        return ev.host or ev.file
    if same == "stated" and hit.roles.rank is not None:
        return ("stated", hit.roles.rank)
    return ev.rank if ev.rank is not None else ("file", ev.file)


def match(hits: Iterable[Hit], rules: RuleSet, facts: Facts | None = None) -> list[Match]:
    """Every rule whose condition holds in at least one group; fallbacks only on unclaimed
    tracebacks, so a generic "uncaught exception" never competes with a specific rule.

    ``facts`` (optional) are the environment facts: rules with ``when:`` only match when the
    facts satisfy it (no facts: they never match), and fact-only rules match on them. Fact-only
    findings are context for a failure, so they are only produced when some detector-based rule
    matched too: a healthy run never "fails" because of its versions.
    """
    fact_list, values = _split_facts(facts)
    by_rule: dict[str, list[Hit]] = defaultdict(list)
    for hit in hits:
        by_rule[hit.rule_id].append(hit)
    matches: list[Match] = []
    fallbacks: list[Rule] = []
    fact_rules: list[Rule] = []
    for rule in rules.rules:
        if rule.when and not when_holds(rule.when, values, rules.versions):
            continue
        if rule.fact_only:
            fact_rules.append(rule)
            continue
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
            if _about_cut(rule):
                # The log ending mid-traceback is said beside what its chain showed before
                # the cut, never instead of it.
                continue
            # Fallbacks are tried in order: a traceback the first one took is not the next's.
            claimed.update(h.traceback_id for h in found if h.traceback_id is not None)
    if matches and fact_list:
        for rule in fact_rules:
            found = fact_hits(rule, fact_list, rules)
            if found:
                matches.append(Match(rule, tuple(found)))
    return matches


def _about_cut(rule: Rule) -> bool:
    """Whether every detector of ``rule`` reads only tracebacks the log ends in."""
    return bool(rule.detectors) and all(d.origin == frozenset({"cut"}) for d in rule.detectors)


def _split_facts(facts: Facts | None) -> tuple[list[Fact], dict[str, list[str]]]:
    """The facts as a list (empty for a mapping) and as key -> every distinct stated value."""
    values: dict[str, list[str]] = defaultdict(list)
    if facts is None:
        return [], values
    if isinstance(facts, Mapping):
        for key, joined in facts.items():
            for value in str(joined).split(" | "):
                if value and value not in values[key]:
                    values[key].append(value)
        return [], values
    fact_list = list(facts)
    for f in fact_list:
        if f.value not in values[f.key]:
            values[f.key].append(f.value)
    return fact_list, values


def _same_value(key: str, value: str) -> Hashable:
    """Values that name the same version compare equal (``2.18.1+cuda12.1`` == ``2.18.1``)."""
    if key in VERSION_KEYS:
        parsed = version_tuple(value)
        if parsed is not None:
            return parsed
    return value.strip().lower()


def _fact_hit(rule: Rule, fact: Fact, fields: dict[str, str]) -> Hit:
    where = f" on {fact.host}" if fact.host else ""
    evidence = Evidence(
        file=fact.file,
        line=fact.line,
        rank=fact.rank,
        host=fact.host,
        time=None,
        time_inferred=False,
        text=f"{fact.key} {fact.value}{where} (environment fact)",
    )
    return Hit(rule.id, f"fact:{fact.key}", evidence, {"fact": fact.key, **fields})


def fact_hits(rule: Rule, facts: list[Fact], rules: RuleSet) -> list[Hit]:
    """The synthetic hits of a fact-only rule: one per offending (fact, value, host)."""
    assert rule.facts is not None
    test = rule.facts.test
    out: list[Hit] = []
    for key in rule.facts.keys:
        stated = [f for f in facts if f.key == key]
        if not stated:
            continue
        if test == "differs":
            out.extend(_differs(rule, key, stated))
            continue
        entry = rules.versions.get(key)
        if entry is None:
            continue
        spec = VersionSpec(test, matrix=test)
        seen: set[tuple[Hashable, str | None]] = set()
        for f in stated:
            ident = (_same_value(key, f.value), f.host)
            if ident in seen or not satisfies(f.value, spec, key, rules.versions):
                continue
            seen.add(ident)
            fields = {
                "value": f.value,
                "recommended": entry.recommended.text if entry.recommended else "(none)",
                "known_problem": entry.known_problem.text if entry.known_problem else "(none)",
                "note": entry.note or "see the version matrix",
            }
            out.append(_fact_hit(rule, f, fields))
    return out


def _differs(rule: Rule, key: str, stated: list[Fact]) -> list[Hit]:
    """One hit per distinct value when at least two nodes (hosts, else files) disagree."""
    first: dict[Hashable, Fact] = {}
    nodes: dict[Hashable, set[str]] = defaultdict(set)
    for f in stated:
        value = _same_value(key, f.value)
        first.setdefault(value, f)
        nodes[value].add(f.host or f.file)
    if len(first) < 2 or len(set().union(*nodes.values())) < 2:
        return []
    summary = ", ".join(f"{f.value} on {', '.join(sorted(nodes[v]))}" for v, f in first.items())
    return [_fact_hit(rule, f, {"value": f.value, "values": summary}) for f in first.values()]


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
    if cond.ends_job:
        positive = [h for h in positive if h.ends_job]
        if not positive:
            return []
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
    unique = list({id(h): h for h in positive}.values())
    if len(unique) >= cond.at_least or (cond.last_words and any(h.last_words for h in unique)):
        return unique
    return []


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
