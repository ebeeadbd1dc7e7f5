"""Rank stage: tell causes from symptoms, find the first failing rank, score each cause.

Scoring (documented in docs/ranking.md) multiplies the rule's severity weight by how fatal
its evidence was (escaped exception > plain line > handled traceback) and by whether it is
where the job failed first, then adds a small bonus for each symptom it explains. Symptom
rules never outrank a cause; a cause whose symptoms-list names another matched cause (an OOM
kill explaining "DataLoader worker killed") absorbs it.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable
from typing import Literal

from crashlens import facts as facts_mod
from crashlens.model import (
    CUT_TRACEBACK,
    Cause,
    Evidence,
    Explained,
    FirstFailure,
    Frame,
    Hit,
    Match,
    Timeline,
    Traceback,
    evidence_order,
    headline,
    time_order,
    user_frame,
)
from crashlens.remediation import remediation

#: A symptom may be logged slightly before its cause when clocks or inferred times differ.
CAUSALITY_SLACK_S = 5.0
#: Evidence time within this of the first failure counts as "at the first failure".
FIRST_FAILURE_SLACK_S = 2.0
HANDLED_FACTOR = 0.35
NEUTRAL_FACTOR = 0.85
LATER_FACTOR = 0.75
FALLBACK_FACTOR = 0.6
SYMPTOM_FACTOR = 0.5
EXPLAIN_BONUS = 0.05
#: A finding matched over Flight Recorder dumps that lack some ranks' (``missing_dumps``): the
#: absent ranks might have shown something else.
PARTIAL_DUMPS_FACTOR = 0.8


def rank(matches: list[Match], timeline: Timeline) -> tuple[list[Cause], FirstFailure | None]:
    """Order matches into causes (best first) and find the first failure."""
    first = first_failure(matches, timeline)
    env = facts_mod.environment_of(timeline.facts)
    # A handled exception that was logged and retried is not the crash, and explains nothing.
    causes = [
        Cause(m, "cause", environment=env)
        for m in matches
        if m.rule.kind == "cause" and not _handled_only(m)
    ]
    causes += _revived(matches, causes, env)
    symptoms = [Cause(m, "symptom", environment=env) for m in matches if m.rule.kind == "symptom"]
    causes, symptoms, carried = _demote_carriers(causes, symptoms, env)
    index = _Tracebacks(timeline)
    for c in (*causes, *symptoms):
        cited = [(h.evidence, h.traceback_id) for h in _lead_first(c.match)]
        c.user_frame = _frame_of(cited, timeline, index)
        c.remediation = remediation(c.match, env, c.user_frame)
    absorbed = attribute_symptoms(causes, symptoms)
    kept = [c for c in causes if c.rule_id not in absorbed]
    loose = [s for s in symptoms if s.rule_id not in absorbed]
    kept, cut_ids = _fold_cuts(kept, loose, index)
    for c in kept:
        c.confidence = _score(c, first)
        if first is not None and any(e.rule_id == first.rule_id for e in c.explains):
            c.confidence = _score(c, first, at_first=True)
    for s in loose:
        s.confidence = round(_score(s, first) * (SYMPTOM_FACTOR if kept else 1.0), 2)
    for carrier, inner in carried:
        # how the process died of a finding ranks below the finding
        carrier.confidence = min(carrier.confidence, round(inner.confidence - 0.01, 2))
    kept.sort(key=lambda c: (-c.confidence, _time_key(c.first_seen), c.rule_id))
    loose.sort(key=lambda c: (-c.confidence, _time_key(c.first_seen), c.rule_id))
    if first is not None and kept and first.rule_id is None:
        first = _with_rule(first, kept[0])
    if first is not None and kept and first.kind == "crash":
        first = _consistent(first, kept[0])
    elif first is not None and first.rule_id in cut_ids and (kept or loose):
        first = _own_ending(first, (kept or loose)[0])
    if first is not None and first.kind == "crash":
        at = Evidence(first.file, first.line, first.rank, first.host, first.time, False, "")
        ids = [h.traceback_id for m in matches for h in m.hits if _same_line(h.evidence, at)]
        frame = _frame_of([(at, next((i for i in ids if i is not None), None))], timeline, index)
        first = dataclasses.replace(first, frame=frame)
    return kept + loose, first


def _consistent(first: FirstFailure, primary: Cause) -> FirstFailure:
    """The first failure as the primary cause tells it.

    The earliest crash may be a finding the primary cause neither is nor explains (an error
    another rank survived for seconds, a cause that ranked lower): then the report would name
    one rank's failure and another rank's cause. The first failure is then the primary cause's
    own earliest ending. It may also be a finding the primary cause explains whose line names
    no rank (a launcher tearing the job down, stamped, after an untimed traceback): then the
    primary cause's own ending, where it names the rank.
    """
    if first.rule_id == primary.rule_id:
        return first
    if first.rule_id in {e.rule_id for e in primary.explains}:
        # a downstream finding the primary cause explains; where its line names no rank (a
        # launcher tearing the job down) and the primary cause's own ending does, that ending
        # says which rank failed
        if first.rank is None:
            own = _own_ending(first, primary)
            if own.rank is not None:
                return own
        return first
    return _own_ending(first, primary)


def _endings(m: Match) -> list[Hit]:
    """The hits of ``m`` that can be where a process ended.

    A line known to have ended its process (an uncaught traceback, a kill) is the ending when
    the finding has one: the warnings a rule needs beside it (a loss-scale cascade before the
    crash) were printed while the process still ran. Else every hit not known to be handled.
    """
    return [h for h in m.hits if h.fatal] or [h for h in m.hits if h.fatal is None]


def _own_ending(first: FirstFailure, primary: Cause) -> FirstFailure:
    """The primary cause's own earliest ending (``first`` when it has none)."""
    hits = _endings(primary.match)
    pick = _earliest(h.evidence for h in hits)
    if pick is None:
        return first
    own = _first(pick, "crash", primary.rule_id)
    return _with_rank(own, hits) if own.rank is None else own


def _lead_first(m: Match) -> list[Hit]:
    """The hits in the order a cause cites them (fatal first, then oldest)."""
    return sorted(m.hits, key=evidence_order)


def _same_line(a: Evidence, b: Evidence) -> bool:
    return (a.file, a.line) == (b.file, b.line)


class _Tracebacks:
    """The timeline's tracebacks by id and, per file, by line span (built once per ranking)."""

    def __init__(self, timeline: Timeline) -> None:
        self.by_id = {tb.id: tb for tb in timeline.tracebacks}
        spans: dict[str, list[tuple[int, int, int, Traceback]]] = {}
        for order, tb in enumerate(timeline.tracebacks):
            spans.setdefault(tb.source.path, []).append((tb.start_line, tb.final.lineno, order, tb))
        for entries in spans.values():
            entries.sort(key=lambda e: e[0])
        self.spans = spans
        self.starts = {path: [e[0] for e in entries] for path, entries in spans.items()}
        self.longest = {p: max(e[1] - e[0] for e in entries) for p, entries in spans.items()}

    def at(self, file: str, line: int) -> Traceback | None:
        """The first traceback (in timeline order) of ``file`` whose lines hold ``line``."""
        entries = self.spans.get(file)
        if not entries:
            return None
        starts = self.starts[file]
        lo = bisect.bisect_left(starts, line - self.longest[file])
        hi = bisect.bisect_right(starts, line)
        holding = [e for e in entries[lo:hi] if e[1] >= line]
        return min(holding, key=lambda e: e[2])[3] if holding else None


def _frame_of(
    cited: Iterable[tuple[Evidence, int | None]],
    timeline: Timeline,
    index: _Tracebacks | None = None,
) -> Frame | None:
    """The innermost user frame of the first cited line's traceback that has one.

    A line belongs to a traceback by the hit's traceback id, else by lying within the
    traceback's lines of the same file (a line detector's hit on the exception line).
    """
    index = index or _Tracebacks(timeline)
    for ev, tb_id in cited:
        tb = index.by_id.get(tb_id) if tb_id is not None else None
        if tb is None:
            tb = index.at(ev.file, ev.line)
        frame = user_frame(tb) if tb is not None else None
        if frame is not None:
            return frame
    return None


def _fold_cuts(
    kept: list[Cause], loose: list[Cause], index: _Tracebacks
) -> tuple[list[Cause], set[str]]:
    """Fall back to the evidence before a cut: a traceback the log ends inside is explained by
    any finding printed before it.

    What was being raised at the cut is unknown, so a finding the lines before it do show (the
    watchdog's timeout whose traceback was being printed, another rank's NCCL error) tells more
    about the failure than "the log ends inside a traceback"; so does an exception no rule
    recognised that ended its process before the cut (a worker's uncaught error, then its
    launcher's report cut off). A cut with nothing before it stays.
    """
    cuts = [c for c in kept if _cut_only(c.match, index)]
    if not cuts:
        return kept, set()
    others = [c for c in (*kept, *loose) if not _cut_only(c.match, index)]
    folded: list[Cause] = []
    for cut in cuts:
        earlier = [
            o
            for o in others
            if any(
                _precedes(h, cut.match)
                for h in o.match.hits
                if (h.fatal is True if o.match.rule.fallback else h.fatal is not False)
            )
        ]
        if earlier:
            root = min(earlier, key=lambda o: _time_key(o.first_seen))
            root.explains.append(_explained(cut.match))
            folded.append(cut)
    return [c for c in kept if all(c is not f for f in folded)], {f.rule_id for f in folded}


def _cut_only(m: Match, index: _Tracebacks) -> bool:
    """Whether every hit of ``m`` is a traceback the log ends inside, read by the fallback or
    by a rule that refines it (one reading where the cut came: inside a file reader, inside
    the rendezvous)."""
    if not (m.rule.fallback or "traceback-cut-off" in m.rule.explains) or not m.hits:
        return False
    tbs = [index.by_id.get(h.traceback_id) if h.traceback_id is not None else None for h in m.hits]
    return all(tb is not None and tb.final.type == CUT_TRACEBACK for tb in tbs)


def _precedes(hit: Hit, cut: Match) -> bool:
    """Whether ``hit`` was printed before some hit of ``cut``: earlier in the same file, or
    earlier in time."""
    a = hit.evidence
    for other in cut.hits:
        b = other.evidence
        if a.file == b.file:
            if a.line < b.line:
                return True
        elif a.time is not None and b.time is not None and a.time <= b.time:
            return True
    return False


def _revived(matches: list[Match], causes: list[Cause], env: dict[str, str]) -> list[Cause]:
    """Handled findings that explain a cause that ended a process.

    An error a writer logged and outlived is not its crash, except when what did end it is a
    consequence that error's rule names: workers failing with "Too many open files", then the
    DataLoader timing out waiting for them. Only a rule's own ``explains`` counts here (not the
    generic "explains any fallback"), so a logged-and-retried upload error never takes the
    blame for a later KeyError.
    """
    out = []
    for m in matches:
        if m.rule.kind != "cause" or m.rule.fallback or not _handled_only(m):
            continue
        first = m.first_time
        for c in causes:
            if c.match.rule.fallback or not m.rule.explains_target(c.rule_id, c.match.rule.cls):
                continue
            if first is None or c.first_seen is None or c.first_seen >= first - CAUSALITY_SLACK_S:
                out.append(Cause(m, "cause", environment=env))
                break
    return out


def _demote_carriers(
    causes: list[Cause], symptoms: list[Cause], env: dict[str, str]
) -> tuple[list[Cause], list[Cause], list[tuple[Cause, Cause]]]:
    """A failure of class unknown whose own message carries a recognised symptom ("terminate
    called after throwing ..." whose what(): is the NCCL watchdog's timeout) is how the process
    died of that symptom: it becomes a symptom too, ranked below the one it carries. So does
    what such a failure brings about by its rule (the SIGABRT exit a terminate causes)."""
    kept = list(causes)
    carried: list[tuple[Cause, Cause]] = []

    def inner_of(c: Cause) -> Cause | None:
        if c.match.rule.cls != "unknown":
            return None
        own = (s for s in symptoms if s.match.rule.cls != "unknown" and _carries(c, s))
        brought = (
            inner
            for d, inner in carried
            if d.match.rule.explains_target(c.rule_id, c.match.rule.cls)
        )
        return next(own, None) or next(brought, None)

    changed = True
    while changed:
        changed = False
        for c in list(kept):
            inner = inner_of(c)
            if inner is not None:
                kept.remove(c)
                demoted = Cause(c.match, "symptom", environment=env)
                symptoms = [*symptoms, demoted]
                carried.append((demoted, inner))
                changed = True
    return kept, symptoms, carried


def _handled_only(m: Match) -> bool:
    return all(h.fatal is False for h in m.hits)


def _with_rule(first: FirstFailure, cause: Cause) -> FirstFailure:
    return dataclasses.replace(first, rule_id=cause.rule_id)


def _time_key(t: float | None) -> float:
    return t if t is not None else math.inf


def attribute_symptoms(causes: list[Cause], symptoms: list[Cause]) -> set[str]:
    """Attach every finding some cause explains to its root cause; return the absorbed ids.

    Explanation is transitive (an OOM kill explains "worker killed", which explains "worker
    exited"), so each root collects everything reachable from it. When causes explain each
    other and no other cause explains any of them, the earliest of them is a root too
    (whatever else the job shows).
    """
    everything = [*causes, *symptoms]
    edges = {id(c): [o for o in everything if o is not c and _explains(c, o)] for c in causes}
    explained_by = {id(o) for c in causes for o in edges[id(c)]}
    ordered = sorted(causes, key=lambda c: (_time_key(c.first_seen), -c.match.rule.weight))
    roots = [c for c in ordered if id(c) not in explained_by]
    reached = _reachable(roots, edges)
    for c in ordered:
        if id(c) not in reached:  # the earliest of causes that only explain each other
            roots.append(c)
            reached |= _reachable([c], edges)
    absorbed: set[str] = set()
    for root in roots:
        queue = list(edges[id(root)])
        while queue:
            other = queue.pop(0)
            if other.rule_id in absorbed or other is root or other in roots:
                continue
            absorbed.add(other.rule_id)
            root.explains.append(_explained(other.match))
            queue.extend(edges.get(id(other), []))
    return absorbed


def _reachable(starts: list[Cause], edges: dict[int, list[Cause]]) -> set[int]:
    """The findings (by id) that ``starts`` explain, directly or through others, and ``starts``."""
    seen = {id(c) for c in starts}
    queue = list(starts)
    while queue:
        for other in edges.get(id(queue.pop()), []):
            if id(other) not in seen:
                seen.add(id(other))
                queue.append(other)
    return seen


def _explains(cause: Cause, other: Cause) -> bool:
    rule = cause.match.rule
    if rule.fallback and other.kind == "cause":
        # "An exception nobody recognised" never hides a cause a rule did recognise.
        return False
    # A failure of class unknown that carries a recognised one in its own message ("terminate
    # called after throwing ..." and its what(): NCCL error ..., on the same lines) is how the
    # process died of it, not what caused it: the carried finding explains its carrier.
    if rule.cls == "unknown" and other.match.rule.cls != "unknown" and _carries(cause, other):
        return False
    if other.match.rule.cls == "unknown" and rule.cls != "unknown" and _carries(other, cause):
        return True
    # A symptom of class unknown only says that a process failed ("exited with code 1", a
    # native backtrace), and a fallback only that an exception escaped: a cause a specific
    # rule recognised explains them.
    generic = (other.kind == "symptom" and other.match.rule.cls == "unknown") or (
        other.match.rule.fallback and not rule.fallback
    )
    if not generic and not rule.explains_target(other.rule_id, other.match.rule.cls):
        return False
    mine, theirs = cause.first_seen, other.first_seen
    if mine is None or theirs is None or _inferred_first(other.match):
        # An inferred time is only a lower bound (the last timestamp printed before the line).
        return True
    return theirs >= mine - CAUSALITY_SLACK_S


#: Lines after a failure's first line that still belong to its message (C++ ``what():`` text,
#: NCCL's "Last error:" line).
CARRIED_LINES = 4


def _carries(carrier: Cause, carried: Cause) -> bool:
    """Whether a hit of ``carried`` lies in a message of ``carrier``: the same file, on a line
    of ``carrier`` or within :data:`CARRIED_LINES` after one (``what():`` naming the watchdog
    timeout the other ranks' lines show too)."""
    spans = [(h.evidence.file, h.evidence.line) for h in carrier.match.hits]
    return bool(carried.match.hits) and any(
        any(
            f == h.evidence.file and line <= h.evidence.line <= line + CARRIED_LINES
            for f, line in spans
        )
        for h in carried.match.hits
    )


def _inferred_first(m: Match) -> bool:
    timed = [h.evidence for h in m.hits if h.evidence.time is not None]
    return bool(timed) and min(timed, key=lambda e: e.time or 0.0).time_inferred


def _explained(m: Match) -> Explained:
    return Explained(
        rule_id=m.rule.id,
        cls=m.rule.cls,
        title=m.rule.title,
        ranks=tuple(m.ranks),
        count=len(m.hits),
        first_seen=m.first_time,
    )


def _score(cause: Cause, first: FirstFailure | None, *, at_first: bool = False) -> float:
    m = cause.match
    fatal_values = [h.fatal for h in m.hits]
    if any(v is True for v in fatal_values):
        fatal_factor = 1.0
    elif fatal_values and all(v is False for v in fatal_values):
        fatal_factor = HANDLED_FACTOR
    else:
        fatal_factor = NEUTRAL_FACTOR
    at_first = at_first or first is None or _at_first_failure(m, first)
    score = m.rule.weight * fatal_factor * (1.0 if at_first else LATER_FACTOR)
    if m.rule.fallback:
        score *= FALLBACK_FACTOR
    if any("missing_dumps" in h.fields for h in m.hits):
        score *= PARTIAL_DUMPS_FACTOR
    score += min(2, len(cause.explains)) * EXPLAIN_BONUS
    return round(min(1.0, score), 2)


def _at_first_failure(m: Match, first: FirstFailure) -> bool:
    for h in m.hits:
        ev = h.evidence
        if (ev.file, ev.line) == (first.file, first.line):
            return True
        if first.rank is not None and ev.rank == first.rank:
            if ev.time is None or first.time is None:
                return True
            if ev.time <= first.time + FIRST_FAILURE_SLACK_S:
                return True
    return False


def first_failure(matches: list[Match], timeline: Timeline) -> FirstFailure | None:
    """The earliest fatal event: a cause's evidence, else a fatal traceback, else a symptom.

    Handled tracebacks never count. Launcher reports (``ChildFailedError``) are the last
    resort: their "first observed failure" is only what one node's agent noticed first.
    """
    cause_hits = [h for m in matches if m.rule.kind == "cause" for h in _endings(m)]
    pick = _earliest(h.evidence for h in cause_hits)
    odd = desync_culprit(cause_hits)
    if odd is not None:
        pick = odd
    if pick is not None:
        rule_id = next(h.rule_id for h in cause_hits if h.evidence is pick)
        first = _first(pick, "crash", rule_id)
        if first.rank is None:
            first = _with_rank(first, [h for h in cause_hits if h.rule_id == rule_id])
        if first.rank is None:
            first = _line_rank(first, [h for m in matches for h in m.hits])
        return first
    symptom_tbs = {h.traceback_id for m in matches if m.rule.kind == "symptom" for h in m.hits}
    fatal_tbs = [tb for tb in timeline.tracebacks if tb.fatal and tb.id not in symptom_tbs]
    if fatal_tbs:
        tb = fatal_tbs[0]
        text = headline(tb.final)
        return FirstFailure(
            tb.rank, tb.host, tb.time, tb.source.path, tb.final.lineno, text, "crash", None,
            tb.time_inferred,
        )  # fmt: skip
    culprit = hang_culprit(matches, timeline)
    if culprit is not None:
        return culprit
    named = launcher_named(timeline)
    if named is not None:
        # A launcher saw this rank exit with an error: that outranks whoever merely logged a
        # symptom first (the others were waiting for it, or torn down after it).
        return named
    symptom_hits = [h for m in matches for h in m.hits if h.fatal is not False]
    pick = _earliest(h.evidence for h in symptom_hits)
    if pick is not None:
        rule_id = next(h.rule_id for h in symptom_hits if h.evidence is pick)
        return _first(pick, "unknown", rule_id)
    roots = [f for f in timeline.failures if f.root_cause]
    pick = _earliest(f.evidence for f in roots)
    return _first(pick, "crash", None) if pick is not None else None


def desync_culprit(hits: list[Hit]) -> Evidence | None:
    """When ranks report a collective mismatch (``op`` they ran, ``peer`` and ``peer_op``), the
    rank whose collective differs from what the majority ran: its own report, else the first
    report naming it. With two ranks the mismatch has no majority and names no one."""
    ran: dict[int, str] = {}
    for h in hits:
        r = h.roles
        if h.evidence.rank is not None and r.op is not None:
            ran.setdefault(h.evidence.rank, r.op)
        if r.peer is not None and r.peer_op is not None:
            ran.setdefault(r.peer, r.peer_op)
    if len(ran) < 3:
        return None
    counts: dict[str, int] = {}
    for op in ran.values():
        counts[op] = counts.get(op, 0) + 1
    odd = [rank for rank, op in ran.items() if counts[op] == 1]
    if len(odd) != 1 or max(counts.values()) < 2:
        return None
    culprit = odd[0]
    own = [h.evidence for h in hits if h.evidence.rank == culprit and h.roles.op is not None]
    if own:
        return min(own, key=time_order)
    named = [h.evidence for h in hits if h.roles.peer == culprit]
    if not named:
        return None
    return dataclasses.replace(min(named, key=time_order), rank=culprit, host=None)


def _with_rank(first: FirstFailure, same_rule: list[Hit]) -> FirstFailure:
    """A rank-less first failure takes the rank of the same finding reported with one.

    slurmstepd's "Detected 1 oom-kill event" names no task; srun's "task 0: Out Of Memory"
    right after it is the same event, and says who.
    """
    for h in sorted(same_rule, key=lambda h: time_order(h.evidence)):
        ev = h.evidence
        if ev.rank is None:
            continue
        if (
            ev.time is None
            or first.time is None
            or abs(ev.time - first.time) <= FIRST_FAILURE_SLACK_S
        ):
            return dataclasses.replace(first, rank=ev.rank, host=first.host or ev.host)
    return first


def _line_rank(first: FirstFailure, hits: list[Hit]) -> FirstFailure:
    """A rank-less first failure takes the rank another finding on the same line knows:
    spawn's "process 1 terminated with signal SIGKILL" is a child's local rank to the
    launcher rule, a kill to the signal rule."""
    ranks = {
        h.evidence.rank
        for h in hits
        if h.evidence.rank is not None
        and h.evidence.file == first.file
        and h.evidence.line == first.line
    }
    if len(ranks) != 1:
        return first
    return dataclasses.replace(first, rank=ranks.pop())


#: Exit codes of a worker torn down by its launcher or watchdog, not failing on its own:
#: SIGTERM (-15) from the agent, SIGABRT (-6) from ProcessGroupNCCL's teardown.
_TEARDOWN_EXITS = (-15, -6)


def launcher_named(timeline: Timeline) -> FirstFailure | None:
    """The failed rank a launcher's report names (torchrun's summary, error.json), if any.

    Its "Root Cause (first observed failure)" entry wins, else the earliest entry; entries
    of ranks the launcher itself tore down do not count.
    """
    named = [
        f
        for f in timeline.failures
        if f.rank is not None and f.exitcode is not None and f.exitcode not in _TEARDOWN_EXITS
    ]
    if not named:
        return None
    pick = min(named, key=lambda f: (not f.root_cause, time_order(f.evidence)))
    return _first(pick.evidence, "crash", None)


def _earliest(evidence: Iterable[Evidence]) -> Evidence | None:
    return min(evidence, key=time_order, default=None)


def _first(
    ev: Evidence, kind: Literal["crash", "hang", "unknown"], rule_id: str | None
) -> FirstFailure:
    return FirstFailure(
        ev.rank, ev.host, ev.time, ev.file, ev.line, ev.text, kind, rule_id, ev.time_inferred
    )


def _last_completed(matches: list[Match]) -> dict[int, int]:
    """Per rank, the lowest "last completed NCCL work" its watchdog reported."""
    out: dict[int, int] = {}
    for m in matches:
        for h in m.hits:
            value = h.roles.last_completed
            rank = h.evidence.rank
            if rank is not None and value is not None:
                out[rank] = min(out.get(rank, value), value)
    return out


def _awaited(timeouts: list[Hit], waiting: set[int | None]) -> FirstFailure | None:
    """The rank the waiting ranks name as the one they wait for (``waits_on``), if one does.

    "[3] ... retrieving ncclUniqueId from [0] ... got error": only rank 0 can publish that
    key, so rank 0 is the culprit whoever timed out first.
    """
    named = [h for h in timeouts if h.roles.waits_on is not None]
    for h in sorted(named, key=lambda h: time_order(h.evidence)):
        culprit = h.roles.waits_on
        if culprit is not None and culprit not in waiting:
            ev = h.evidence
            who = "another rank" if ev.rank is None else f"rank {ev.rank}"
            return FirstFailure(
                rank=culprit,
                host=None,
                time=ev.time,
                file=ev.file,
                line=ev.line,
                text=f"{who} waited for rank {culprit}: {ev.text}",
                kind="hang",
                rule_id=h.rule_id,
                time_inferred=ev.time_inferred,
            )
    return None


def hang_culprit(matches: list[Match], timeline: Timeline) -> FirstFailure | None:
    """For a hang (timeouts, no crash), the rank that stopped first instead of waiting.

    Ranks that report a collective timeout were waiting for someone; a known rank that did
    not time out is that someone. Among candidates, the one whose log went silent first wins.
    """
    # Keyed on what the hits say (a declared role), not on a rule's class.
    timeouts = [h for m in matches if m.rule.kind == "symptom" for h in m.hits if h.roles.waiting]
    waiting = {h.evidence.rank for h in timeouts}
    awaited = _awaited(timeouts, waiting)
    if awaited is not None:
        return awaited
    known = [r for r in timeline.ranks if r.rank is not None]
    if not waiting or not known:
        return None
    silent = [r for r in known if r.rank not in waiting]
    completed = _last_completed(matches)
    if silent:
        pool = silent
    elif completed:
        # Everyone timed out: the straggler is the rank that completed the least work.
        lowest = min(completed.values())
        pool = [r for r in known if r.rank is not None and completed.get(r.rank) == lowest] or known
    else:
        pool = known
    culprit = min(pool, key=lambda r: (r.last_time is None, r.last_time or 0.0, r.rank))
    last = culprit.last_lines[-1] if culprit.last_lines else ""
    if culprit.rank in completed:
        last = f"{last} (last completed collective: {completed[culprit.rank or 0]})"
    file = culprit.last_file or (sorted(culprit.files)[0] if culprit.files else "")
    if not file or not last:
        # Nothing of the culprit's own is in view (its lines are unattributed, or only a
        # launcher named it): cite what the waiting ranks logged about waiting for it.
        ev = min((h.evidence for h in timeouts), key=time_order)
        text = f"rank {culprit.rank} did not time out while the others waited: {ev.text}"
        cited = _first(ev, "hang", None)
        return dataclasses.replace(cited, rank=culprit.rank, host=culprit.host, text=text)
    return FirstFailure(
        rank=culprit.rank,
        host=culprit.host,
        time=culprit.last_time,
        file=file,
        line=culprit.last_lineno,
        text=f"last line before the hang: {last}",
        kind="hang",
    )
