"""The result of an analysis: ranked causes, first failure, ranks, inputs; renders to any format."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crashlens.facts import environment_of
from crashlens.model import (
    Cause,
    ClockSkew,
    Evidence,
    Fact,
    FirstFailure,
    FlightRecord,
    Frame,
    InputFile,
    Note,
    RankSummary,
    Resemblance,
    Traceback,
    iso,
    plural,
)
from crashlens.signature import Signature, signature

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1


@dataclass(slots=True)
class Report:
    """Everything ``crashlens analyze`` found; ``render(fmt)`` produces each output format."""

    causes: list[Cause]
    first_failure: FirstFailure | None
    ranks: list[RankSummary]
    inputs: list[InputFile]
    notes: list[Note]
    timeline_builder: Callable[[], pd.DataFrame] = field(repr=False)
    tracebacks: list[Traceback] = field(default_factory=list, repr=False)
    clock_skew: dict[str, ClockSkew] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)
    rules_loaded: int = 0
    tool_version: str = ""
    #: The Flight Recorder dumps read and what matching them across ranks found.
    flight: FlightRecord | None = None
    _timeline: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def timeline(self) -> pd.DataFrame:
        """One row per event (signal, traceback, launcher report), time-ordered; built once."""
        if self._timeline is None:
            self._timeline = self.timeline_builder()
        return self._timeline

    @property
    def primary(self) -> Cause | None:
        """The top-ranked cause, if any."""
        return self.causes[0] if self.causes else None

    def signature(self, cause: Cause) -> Signature:
        """The failure signature of one of this report's causes (crashlens.signature)."""
        return signature(cause, self.tracebacks)

    @property
    def failed(self) -> bool:
        """Whether any failure (cause or unexplained symptom) was found."""
        return bool(self.causes)

    @property
    def verdict(self) -> str:
        """One sentence for humans and chat messages."""
        top = self.primary
        if top is None:
            return "No failure found."
        rule = top.match.rule
        where = ""
        ff = self.first_failure
        if ff is not None and ff.rank is not None:
            where = f" — {ff.subject()} {ff.verb}"
        elif top.match.ranks:
            where = f" — rank {top.match.ranks[0]}"
        symptoms = sum(e.count for e in top.explains)
        tail = f"; {plural(symptoms, 'downstream symptom')} explained" if symptoms else ""
        return f"{rule.title} ({top.class_label}){where}{tail}."

    @property
    def environment(self) -> dict[str, str]:
        """One value per fact (the most common; differing values are joined with " | ")."""
        return environment_of(self.facts)

    def cascade(self) -> list[dict[str, Any]]:
        """Per class, how many ranks and events the primary cause's symptoms account for."""
        top = self.primary
        if top is None:
            return []
        per_class: dict[str, dict[str, Any]] = {}
        for e in top.explains:
            entry = per_class.setdefault(e.cls, {"class": e.cls, "ranks": set(), "events": 0})
            entry["ranks"].update(e.ranks)
            entry["events"] += e.count
        return [
            {"class": c["class"], "ranks": sorted(c["ranks"]), "events": c["events"]}
            for c in sorted(per_class.values(), key=lambda c: -c["events"])
        ]

    @property
    def story(self) -> str:
        """The first failure and its cascade in one sentence."""
        ff, top = self.first_failure, self.primary
        if ff is None or top is None:
            return self.verdict
        when = f" at {iso(ff.time)}" if ff.time is not None else ""
        text = f"{ff.subject()} {ff.verb} ({top.match.rule.title}{when})"
        parts = [
            f"{plural(len(c['ranks']), 'rank')} then showed {c['class']} "
            f"({plural(c['events'], 'event')})"
            for c in self.cascade()
            if c["ranks"] and c["class"] != "unknown"
        ]
        if parts:
            text += "; " + "; ".join(parts) + " — symptoms"
        return text[0].upper() + text[1:] + "."

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (docs/json.md); keys are stable across minor versions."""
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "crashlens", "version": self.tool_version},
            "verdict": self.verdict,
            "story": self.story,
            "causes": [_cause(c, self.signature(c)) for c in self.causes],
            "first_failure": _first(self.first_failure),
            "ranks": [_rank(r) for r in self.ranks],
            "clock_skew": {
                host: {
                    "offset_s": c.offset_s,
                    "uncertainty_s": c.uncertainty_s,
                    "basis": c.basis,
                    "applied": c.applied,
                }
                for host, c in sorted(self.clock_skew.items())
            },
            "cascade": self.cascade(),
            "environment": self.environment,
            "inputs": {
                "files": [
                    {"path": f.path, "bytes": f.bytes, "kind": f.kind, "lines": f.lines}
                    for f in self.inputs
                    if f.skipped is None
                ],
                "skipped": [
                    {"path": f.path, "reason": f.skipped} for f in self.inputs if f.skipped
                ],
                "total_bytes": sum(f.bytes for f in self.inputs if f.skipped is None),
                "rules_loaded": self.rules_loaded,
            },
            "notes": list(self.notes),
            "flight_recorder": _flight(self.flight),
        }


def _flight(record: FlightRecord | None) -> dict[str, Any] | None:
    """The Flight Recorder dumps read and the findings of matching them (docs/json.md)."""
    if record is None:
        return None
    return {
        "dumps": [
            {
                "path": d.path,
                "rank": d.rank,
                "version": d.version,
                "format": d.format,
                "calls": len(d.calls),
            }
            for d in record.dumps
        ],
        "missing_ranks": list(record.missing),
        "findings": [
            {
                "kind": f.kind,
                "text": f.text,
                "group": f.group,
                "group_desc": f.group_desc,
                "seq": f.seq,
                "op": f.op,
                "shape": f.shape,
                "culprits": list(f.culprits),
                "waiting": list(f.waiting),
                "culprit_op": f.culprit_op,
                "culprit_shape": f.culprit_shape,
                "culprit_last": (
                    {"seq": f.culprit_last[0], "op": f.culprit_last[1]} if f.culprit_last else None
                ),
                "time": iso(f.time),
                "timeout_ms": f.timeout_ms,
                "missing_dumps": list(f.missing_dumps),
                "file": f.file,
                "frame": _frame(f.frame),
            }
            for f in record.findings
        ],
        "last_calls": [
            {"rank": d.rank, "group": c.group, "seq": c.seq, "op": c.op, "time": iso(c.time)}
            for d in record.dumps
            for c in d.last_calls()
        ],
        "notes": list(record.notes),
    }


def evidence_dict(ev: Evidence) -> dict[str, Any]:
    """One evidence line as JSON."""
    return {
        "file": ev.file,
        "line": ev.line,
        "rank": ev.rank,
        "host": ev.host,
        "time": iso(ev.time),
        "time_inferred": ev.time_inferred,
        "text": ev.text,
    }


def _cause(c: Cause, sig: Signature) -> dict[str, Any]:
    rule = c.match.rule
    return {
        "rule": rule.id,
        "class": c.cls,
        "title": rule.title,
        "kind": c.kind,
        "confidence": c.confidence,
        "severity": rule.severity,
        "ranks": c.match.ranks,
        "hosts": c.match.hosts,
        "first_seen": iso(c.first_seen),
        "evidence": [evidence_dict(e) for e in c.evidence],
        "explains": [
            {
                "rule": e.rule_id,
                "class": e.cls,
                "title": e.title,
                "ranks": list(e.ranks),
                "count": e.count,
                "first_seen": iso(e.first_seen),
            }
            for e in c.explains
        ],
        "remediation": c.remediation,
        "user_frame": _frame(c.user_frame),
        "resemblance": _resemblance(c.resemblance),
        "signature": {"key": sig.key, "text": sig.text},
        "references": list(rule.references),
        "repro": rule.repro,
    }


def _resemblance(r: Resemblance | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "class": r.cls,
        "share": r.share,
        "record": None if r.record is None else {"right": r.record[0], "of": r.record[1]},
        "reports": [
            {"source": k.source, "class": k.cls, "exception": k.exception} for k in r.reports
        ],
    }


def _first(ff: FirstFailure | None) -> dict[str, Any] | None:
    if ff is None:
        return None
    return {
        "rank": ff.rank,
        "host": ff.host,
        "time": iso(ff.time),
        "time_inferred": ff.time_inferred,
        "file": ff.file,
        "line": ff.line,
        "kind": ff.kind,
        "rule": ff.rule_id,
        "text": ff.text,
        "frame": _frame(ff.frame),
    }


def _frame(frame: Frame | None) -> dict[str, Any] | None:
    if frame is None:
        return None
    return {"file": frame.file, "line": frame.line, "function": frame.function, "code": frame.code}


def _rank(r: RankSummary) -> dict[str, Any]:
    return {
        "rank": r.rank,
        "host": r.host,
        "files": sorted(r.files),
        "lines": r.lines,
        "first_time": iso(r.first_time),
        "last_time": iso(r.last_time),
        "exitcode": r.exitcode,
        "pids": sorted(r.pids),
        "last_lines": r.last_lines,
    }
