"""Match the ranks' Flight Recorder dumps: which rank the others waited for, and where.

Every rank of a process group numbers its collectives alike (``collective_seq_id``), so the
same number on two ranks is the same call. Per group, from the earliest sequence number every
dump still holds, as PyTorch's own analyzer (``torch.distributed.flight_recorder``) pairs them:

- members whose dump holds no call with that number while others do never entered it
  (``not_joined``): a straggler, a rank stuck in other work, or one whose code skipped it;
- a call whose op, sizes or dtypes differ from what most ranks called is a ``mismatch``: the
  ranks took different code paths (with two ranks, both are named);
- when every dump agrees up to its end but members left no dump, those are the only ranks the
  others can have waited for (``no_dump``).

The first problem of each group is the finding; what follows it is its consequence. gloo leaves
each call ``scheduled``, so states are not compared; sequence numbers, ops and shapes are.
Findings become hits of the rules whose detectors name their kind (``flight:``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from crashlens.model import (
    CollectiveCall,
    CollectiveFinding,
    Evidence,
    FlightDump,
    FlightRecord,
    Hit,
    Roles,
    ranks_text,
)
from crashlens.rulebase import RuleSet


def analyze(dumps: Sequence[FlightDump]) -> FlightRecord:
    """Match every group's calls across the ranks' dumps."""
    notes = [f"{d.path}: {d.note}" for d in dumps if d.note]
    by_rank: dict[int, FlightDump] = {}
    for dump in dumps:
        if dump.rank in by_rank:
            kept = by_rank[dump.rank]
            if kept.format == "json" and dump.format == "pickle":  # the pickle has the stacks
                by_rank[dump.rank] = dump
            notes.append(f"two dumps for rank {dump.rank}: {kept.path} and {dump.path}")
            continue
        by_rank[dump.rank] = dump
    members = _members(by_rank)
    findings = []
    for group, ranks in sorted(members.items()):
        found = _first_problem(group, ranks, by_rank)
        if found is not None:
            findings.append(found)
    everyone = set().union(*members.values()) if members else set(by_rank)
    missing = tuple(sorted(everyone - set(by_rank)))
    findings.sort(key=lambda f: (f.time is None, f.time or 0.0, f.group))
    return FlightRecord(
        dumps=tuple(by_rank[r] for r in sorted(by_rank)),
        findings=tuple(findings),
        missing=missing,
        notes=tuple(notes),
    )


def _members(dumps: dict[int, FlightDump]) -> dict[str, set[int]]:
    """Each group's member ranks: from ``pg_config`` by name, else (gloo records the default
    group under an empty name) by description, else the one group a dump configures, else the
    ranks whose dumps call it."""
    members: dict[str, set[int]] = defaultdict(set)
    for dump in dumps.values():
        by_name = {name: ranks for name, _, ranks in dump.groups}
        by_desc = {desc: ranks for _, desc, ranks in dump.groups if desc}
        for call in dump.calls:
            if call.p2p:
                continue
            ranks = by_name.get(call.group) or by_desc.get(call.group_desc)
            if not ranks and len(dump.groups) == 1:
                ranks = dump.groups[0][2]
            members[call.group].update(ranks or ())
            members[call.group].add(dump.rank)
    return dict(members)


def _first_problem(
    group: str, ranks: set[int], dumps: dict[int, FlightDump]
) -> CollectiveFinding | None:
    calls: dict[int, dict[int, CollectiveCall]] = {}
    for rank in sorted(ranks):
        if rank in dumps:
            calls[rank] = {c.seq: c for c in dumps[rank].calls if c.group == group and not c.p2p}
    if not calls:
        return None
    missing = tuple(sorted(ranks - set(dumps)))
    # A ring buffer drops the oldest calls: start where every dump still holds calls.
    start = max((min(seqs) for seqs in calls.values() if seqs), default=0)
    end = max((max(seqs) for seqs in calls.values() if seqs), default=-1)
    for seq in range(start, end + 1):
        present = {r: c[seq] for r, c in calls.items() if seq in c}
        absent = tuple(r for r in calls if seq not in calls[r])
        if not present:
            continue
        majority = _majority(present.values())
        if absent:
            return _finding(
                "not_joined", group, seq, present, absent, majority, calls, missing, dumps
            )
        odd = tuple(r for r, c in present.items() if _signature(c) != _signature(majority))
        if odd:
            if len(odd) * 2 == len(present):  # no majority: name both sides
                odd = tuple(present)
            return _finding("mismatch", group, seq, present, odd, majority, calls, missing, dumps)
    if missing and end >= start:
        present = {r: c[end] for r, c in calls.items() if end in c}
        return _finding("no_dump", group, end, present, missing, _majority(present.values()),
                        calls, missing, dumps)  # fmt: skip
    return None


def _signature(call: CollectiveCall) -> tuple[str, str]:
    return call.op, call.shape


def _majority(calls: Iterable[CollectiveCall]) -> CollectiveCall:
    pool = list(calls)
    counts = Counter(_signature(c) for c in pool)
    top = counts.most_common(1)[0][0]
    return next(c for c in pool if _signature(c) == top)


def _finding(
    kind: str,
    group: str,
    seq: int,
    present: dict[int, CollectiveCall],
    culprits: tuple[int, ...],
    majority: CollectiveCall,
    calls: dict[int, dict[int, CollectiveCall]],
    missing: tuple[int, ...],
    dumps: dict[int, FlightDump],
) -> CollectiveFinding:
    waiting = tuple(r for r in present if r not in culprits)
    first_own = next((present[r] for r in culprits if r in present), None)
    last_own: CollectiveCall | None = first_own
    if kind in ("not_joined", "no_dump"):
        before = [calls[r][s] for r in culprits if r in calls for s in calls[r] if s < seq]
        last_own = max(before, key=lambda c: c.seq) if before else None
    entered = [t for r in waiting if (t := present[r].time) is not None]
    cited = next((r for r in culprits if r in dumps), waiting[0] if waiting else culprits[0])
    frame = last_own.user_frame if last_own is not None else None
    return CollectiveFinding(
        kind=kind,  # type: ignore[arg-type]
        group=group,
        group_desc=majority.group_desc,
        seq=seq,
        op=majority.op,
        shape=majority.shape,
        culprits=culprits,
        waiting=waiting,
        culprit_op=first_own.op if first_own is not None else None,
        culprit_shape=first_own.shape if first_own is not None else None,
        culprit_last=(last_own.seq, last_own.op) if last_own is not None else None,
        time=min(entered) if entered else majority.time,
        timeout_ms=majority.timeout_ms,
        missing_dumps=missing,
        file=dumps[cited].path if cited in dumps else "",
        frame=frame,
    )


def flight_hits(record: FlightRecord, rules: RuleSet) -> list[Hit]:
    """One hit per finding for each rule detector that names the finding's kind."""
    detectors = [(r, d) for r in rules.rules for d in r.detectors if d.flight is not None]
    hits: list[Hit] = []
    for finding in record.findings:
        for rule, det in detectors:
            if det.flight != finding.kind:
                continue
            evidence = Evidence(
                file=finding.file,
                line=0,
                rank=finding.culprits[0],
                host=None,
                time=finding.time,
                time_inferred=False,
                text=f"Flight Recorder: {finding.text}",
            )
            # The culprit is who the hit is about; it waits for no one (its timeout is the
            # group's, for the remediation), so its roles are given, not read from the fields.
            roles = Roles(rank=finding.culprits[0])
            hits.append(Hit(rule.id, det.name, evidence, _fields(finding), fatal=True, roles=roles))
    return hits


def _fields(f: CollectiveFinding) -> dict[str, str]:
    fields = {
        "rank": str(f.culprits[0]),
        "culprits": ranks_text(f.culprits),
        "waiting": ranks_text(f.waiting),
        "op": f.op,
        "seq": str(f.seq),
        "group": f.group_label,
        "shape": f.shape,
    }
    if f.culprit_op is not None:
        fields["culprit_op"] = f.culprit_op
    if f.culprit_shape is not None:
        fields["culprit_shape"] = f.culprit_shape
    if f.culprit_last is not None:
        fields["last_seq"], fields["last_op"] = str(f.culprit_last[0]), f.culprit_last[1]
    if f.timeout_ms is not None:
        fields["timeout_ms"] = str(f.timeout_ms)
    if f.missing_dumps:
        fields["missing_dumps"] = ", ".join(map(str, f.missing_dumps))
    if f.frame is not None:
        fields["culprit_frame"] = f"{f.frame.file}:{f.frame.line} in {f.frame.function}"
    return fields
