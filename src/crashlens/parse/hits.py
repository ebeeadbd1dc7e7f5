"""Findings of one file: detector hits on lines and on assembled tracebacks, capped, frozen.

A hit is pending while its time, rank or fatal verdict can still change; :meth:`HitCollector.
freeze` turns it into a :class:`~crashlens.model.Hit` (at the end of the file, or as a snapshot
of a live parser for ``watch``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from crashlens import lazyre
from crashlens.ingest.unwrap import rejoined
from crashlens.model import (
    Evidence,
    Hit,
    Roles,
    Source,
    chain_origin,
    exception_text,
    judged_origin,
)
from crashlens.parse.clock import Clock
from crashlens.parse.matcher import LineMatcher
from crashlens.parse.state import (
    MAX_EVIDENCE_TEXT,
    DoneTraceback,
    PendingHit,
    Stream,
    spawn_child,
    stamp_setter,
)
from crashlens.parse.traceback import PartialTraceback, Printed
from crashlens.ruletypes import Detector, Rule, RuleSet

CONTEXT = 3
_LINE_RANK = lazyre.compile_regex(
    r"\[(?:PG ID 0 PG GUID 0(?:\([^)]*\))? |PG 0 (?:\([^)]*\) )?)?Rank (?P<rank>\d+)\]"
)
MAX_HITS_PER_DETECTOR = 20
#: Distinct tracebacks whose findings a collector remembers (a retried error repeats one).
MAX_DISTINCT_TRACEBACKS = 1024
_SYSLOG_HOST = lazyre.compile_regex(
    r"(?:\w{3} +\d+ [\d:.]+|\d{4}-\d\d-\d\dT\S+) (?P<host>[\w\-.]+) kernel: "
)

#: Typographic quotes an editor, a chat or a web form put in place of the ones Python printed.
_STRAIGHT = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def as_typed(text: str) -> str:
    """An exception's ``text`` as the program printed it, where a paste changed it: a hard
    wrap inside a word joined again (:func:`~crashlens.ingest.unwrap.rejoined`), typographic
    quotes straight again (``No module named ‘smdistributed’``)."""
    return rejoined(text).translate(_STRAIGHT)


#: Per traceback (by ``id``): its id in the report and its verdict for the hits inside it:
#: fatal (True), survived (False), or not known (None: other tracebacks followed it).
Verdicts = dict[int, tuple[int, bool | None]]
#: A detector's finding in a traceback: the rule, detector, fields, which exception (index),
#: the evidence text and context.
_TracebackFinding = tuple[Rule, Detector, dict[str, str], int, str, tuple[str, ...]]


class HitCollector:
    """Runs a file's detectors and keeps what they found (at most 20 per detector and stream)."""

    def __init__(self, source: Source, rules: RuleSet, matcher: LineMatcher, clock: Clock):
        self.source = source
        self.matcher = matcher
        self.clock = clock
        self.exc_detectors = rules.exception_detectors()
        self.pending: list[PendingHit] = []
        self._per_det: dict[tuple[str, str, int], int] = {}
        self._tb_found: dict[Printed, list[_TracebackFinding]] = {}
        self._roles_of: dict[tuple[tuple[str, str], ...], Roles] = {}

    # -- finding --------------------------------------------------------------------------
    def on_line(self, stream: Stream, lineno: int, text: str, in_tb: bool, timed: str) -> None:
        """Run the line detectors on one line."""
        matches = self.matcher.match(text, self.source.kind)
        for rule, det, found in matches or ():
            self._add(stream, rule, det, found, lineno, text, in_tb, timed)

    def capped(self, stream: Stream, rule_id: str, detector: str) -> bool:
        """Whether a line detector has all the findings it may have in ``stream``."""
        return self._per_det.get((rule_id, detector, id(stream)), 0) >= MAX_HITS_PER_DETECTOR

    def _add(
        self,
        stream: Stream,
        rule: Rule,
        det: Detector,
        found: Any,
        lineno: int,
        text: str,
        in_tb: bool,
        timed: str,
    ) -> None:
        key = (rule.id, det.name, id(stream))
        count = self._per_det.get(key, 0)
        if count >= MAX_HITS_PER_DETECTOR:
            return
        self._per_det[key] = count + 1
        fields = {k: v for k, v in found.groupdict().items() if v is not None}
        uptime = self.clock.uptime(text)
        if uptime is not None:
            # Seconds since boot: kept so align can put the line on the wall clock later,
            # from a pid the line shares with a timed event elsewhere.
            fields["uptime_s"] = f"{uptime:.6f}"
        pending = PendingHit(
            rule=rule,
            det=det,
            fields=fields,
            lineno=lineno,
            text=text[:MAX_EVIDENCE_TEXT],
            stamp=self.clock.hit_time(stream, lineno, timed, in_tb),
            context=tuple(t[:MAX_EVIDENCE_TEXT] for _, t in stream.ring.last(CONTEXT)),
            stream=stream,
            rank_override=stream.summary.current_rank,
        )
        if in_tb and stream.assembler.current is not None:
            pending.tb = stream.assembler.current
            pending.tb.line_hits = True
        if pending.stamp[0] is None:
            stream.untimed.append(stamp_setter(pending))
        self.pending.append(pending)

    def on_traceback(self, stream: Stream, done: DoneTraceback) -> None:
        """Run the exception and traceback detectors on a completed traceback (once per
        distinct traceback: a repeat takes the first one's findings)."""
        tb, when, inferred, key = done.tb, done.time, done.inferred, done.printed
        found = self._tb_found.get(key)
        if found is None:
            if len(self._tb_found) >= MAX_DISTINCT_TRACEBACKS:
                self._tb_found.clear()
            found = self._tb_found[key] = self._match_traceback(tb)
        for rule, det, fields, at, text, context in found:
            pending = PendingHit(
                rule=rule,
                det=det,
                fields=dict(fields),
                lineno=tb.exceptions[at].lineno,
                text=text,
                stamp=(when, inferred),
                context=context,
                stream=stream,
                tb=tb,
            )
            self.pending.append(pending)
            if when is None:
                stream.untimed.append(stamp_setter(pending))

    def _match_traceback(self, tb: PartialTraceback) -> list[_TracebackFinding]:
        """What the exception and traceback detectors find in ``tb``."""
        out: list[_TracebackFinding] = []
        last = len(tb.exceptions) - 1
        where = chain_origin(tb.exceptions)
        # A chain the log ends in: what was raised while handling the exceptions before the
        # cut is not known, so those exceptions are judged as the chain's end (the cut itself
        # stays a finding of its own).
        before = judged_origin(tb.exceptions, where)
        origin = [before] * last + [where]  # each exception's, by its place in the chain
        # Newest first: the exception that escaped is the one that killed the process.
        exceptions = [(at, exception_text(tb.exceptions[at])) for at in range(last, -1, -1)]
        # then as typed before a paste changed them (read after all of the ones as printed)
        typed = [(at, text, u) for at, text in exceptions if (u := as_typed(text)) != text]
        exceptions += [(at, u) for at, _, u in typed]
        whole: list[tuple[int, str]] = []
        for rule, det in self.exc_detectors:
            if det.sources is not None and self.source.kind not in det.sources:
                continue
            if det.scope == "traceback":
                whole = whole or [(last, "\n".join(tb.text))]
                targets = whole
                shown = exceptions[0][1].split("\n", 1)[0]
            else:
                targets = exceptions
                shown = ""
            if det.origin is not None:
                targets = [t for t in targets if origin[t[0]] in det.origin]
            for at, target in targets:
                if not _holds_literal(det, target):
                    continue  # every match holds one of the detector's literals
                found = self.matcher.search(rule, det, target)
                if found is None:
                    continue
                first_line = shown or target.split("\n", 1)[0]
                fields = {k: v for k, v in found.groupdict().items() if v is not None}
                context = tuple(t[:MAX_EVIDENCE_TEXT] for t in tb.text[-CONTEXT - 1 : -1])
                out.append((rule, det, fields, at, first_line[:MAX_EVIDENCE_TEXT], context))
                break
        if typed:
            out += self._match_as_typed(tb, typed, {id(det) for _, det, *_ in out})
        return out

    def _match_as_typed(
        self, tb: PartialTraceback, typed: list[tuple[int, str, str]], found: set[int]
    ) -> list[_TracebackFinding]:
        """What the line detectors find in the lines of ``tb``'s exceptions as typed
        (:func:`as_typed`; ``typed``: which exception, its text as printed and as typed) that
        differ from the lines as printed (a wrap had cut one in two, and each piece was read
        as a line, neither whole)."""
        out: list[_TracebackFinding] = []
        context = tuple(t[:MAX_EVIDENCE_TEXT] for t in tb.text[-CONTEXT - 1 : -1])
        for at, text, retyped in typed:
            printed = set(text.split("\n"))
            for line in retyped.split("\n"):
                if line in printed:
                    continue
                for rule, det, hit in self.matcher.match(line, self.source.kind):
                    if id(det) in found:
                        continue  # each detector once: its first line
                    fields = {k: v for k, v in hit.groupdict().items() if v is not None}
                    out.append((rule, det, fields, at, line[:MAX_EVIDENCE_TEXT], context))
                    found.add(id(det))
        return out

    # -- reading ---------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """How many findings there are so far (it only grows)."""
        return len(self.pending)

    def rules_since(self, count: int) -> set[str]:
        """Ids of the rules with a finding after the first ``count`` ones."""
        return {pending.rule.id for pending in self.pending[count:]}

    def snapshot(self, rule_ids: Collection[str] | None = None) -> list[Hit]:
        """Frozen copies of the findings so far (of ``rule_ids`` only), without verdicts."""
        return [
            self.freeze(pending, {})
            for pending in self.pending
            if rule_ids is None or pending.rule.id in rule_ids
        ]

    def _roles(self, fields: dict[str, str]) -> Roles:
        """``Roles.of(fields)``, one object for the findings of repeated tracebacks."""
        key = tuple(fields.items())
        roles = self._roles_of.get(key)
        if roles is None:
            if len(self._roles_of) >= MAX_DISTINCT_TRACEBACKS:
                self._roles_of.clear()
            roles = self._roles_of[key] = Roles.of(fields)
        return roles

    def freeze(self, hit: PendingHit, verdicts: Verdicts) -> Hit:
        """The final :class:`Hit`: rank and host settled, the traceback's verdict applied."""
        stream = hit.stream
        fields = hit.fields
        child = spawn_child(hit.tb) if hit.tb is not None else None
        if child is not None and "spawn_index" not in fields:
            fields = {**fields, "spawn_index": str(child)}  # spawn's child N
        roles = self._roles(fields)
        rank = hit.rank_override if hit.rank_override is not None else stream.rank
        if child is not None:
            # spawn's parent printed another process's traceback: the writer's rank is not its
            rank = hit.rank_override
        if rank is None:
            rank = roles.rank  # a message naming its rank ("[Rank 3]", "process rank 3")
        if rank is None:
            # A line of a combined console that names its writer's global rank the way
            # ProcessGroupNCCL prefixes its messages ("[Rank 3]", "[PG ID 0 PG GUID 0 Rank 3]":
            # the default group, whose rank is the global one), whatever rule matched it.
            m = _LINE_RANK.search(hit.text)
            rank = int(m["rank"]) if m else None
        host = stream.host or roles.host
        if host is None and self.source.kind == "kernel":
            m = _SYSLOG_HOST.match(hit.text)
            host = m["host"] if m else None
        tb_id, fatal = (
            verdicts.get(id(hit.tb), (None, None)) if hit.tb is not None else (None, None)
        )
        when, inferred = hit.stamp
        return Hit(
            rule_id=hit.rule.id,
            detector=hit.det.name,
            evidence=Evidence(
                file=self.source.path,
                line=hit.lineno,
                rank=rank,
                host=host,
                time=when,
                time_inferred=inferred,
                text=hit.text,
                context=hit.context,
            ),
            fields=fields,
            traceback_id=tb_id,
            fatal=fatal,
            roles=roles,
            last_words=hit.tb is None and hit.lineno == last_said(stream),
        )


def last_said(stream: Stream) -> int | None:
    """The number of the last line ``stream``'s writer printed that is not blank (if in view)."""
    for lineno, text in reversed(stream.ring):
        if text.strip():
            return lineno
    return None


def _holds_literal(det: Detector, text: str) -> bool:
    """Whether ``text`` holds one of the literals every match of ``det`` holds (the line
    prefilter's test, for the exception and traceback detectors; no literals: always)."""
    if not det.literals:
        return True
    if det.ignore_case:
        low = text.lower()
        return any(lit.lower() in low for lit in det.literals)
    return any(lit in text for lit in det.literals)
