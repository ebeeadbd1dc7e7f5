"""Run the rules' line detectors on a line, behind a one-pass literal prefilter."""

from __future__ import annotations

import re
from typing import Any

from crashlens.parse.scan import TriggerScanner
from crashlens.ruletypes import Detector, Rule, RuleSet

#: Per-pattern regex time limit (seconds): a catastrophic user regex cannot hang a run.
REGEX_TIMEOUT = 0.25


class LineIndex:
    """All line-scope detectors of a rule set, indexed by their required literals: compiled
    once, never changed after, shared by every analysis that uses the rule set."""

    __slots__ = ("always", "by_literal", "by_literal_ci", "prefilter", "prefilter_text")

    def __init__(self, rules: RuleSet) -> None:
        self.always: list[tuple[Rule, Detector]] = []
        self.by_literal: dict[str, list[tuple[Rule, Detector]]] = {}
        self.by_literal_ci: dict[str, list[tuple[Rule, Detector]]] = {}
        for rule, det in rules.line_detectors():
            if not det.literals:
                self.always.append((rule, det))
                continue
            index = self.by_literal_ci if det.ignore_case else self.by_literal
            for lit in det.literals:
                key = lit.lower() if det.ignore_case else lit
                index.setdefault(key, []).append((rule, det))
        # The prefilter is pure literals: the fast path's multi-literal engine runs it on the
        # line's bytes; a case-insensitive literal that is not ASCII needs Unicode case
        # folding, which only the stdlib engine on text does. Detectors run on the `regex`
        # engine with a time limit.
        self.prefilter: TriggerScanner | None = None
        self.prefilter_text: re.Pattern[str] | None = None
        if all(lit.isascii() for lit in self.by_literal_ci):
            if self.by_literal or self.by_literal_ci:
                self.prefilter = TriggerScanner(self.by_literal, self.by_literal_ci)
        else:
            parts = [re.escape(lit) for lit in sorted(self.by_literal, key=len, reverse=True)]
            parts += [f"(?i:{re.escape(lit)})" for lit in sorted(self.by_literal_ci)]
            self.prefilter_text = re.compile("|".join(parts))


class LineMatcher:
    """One analysis's use of a :class:`LineIndex`: the detectors run under a time limit, and
    what this analysis learnt (a detector that ran out of time is counted and not run again)
    is its own, never the index's."""

    def __init__(self, index: LineIndex | RuleSet) -> None:
        self.index = index if isinstance(index, LineIndex) else LineIndex(index)
        self.always = self.index.always
        self.by_literal = self.index.by_literal
        self.by_literal_ci = self.index.by_literal_ci
        self.prefilter = self.index.prefilter
        self.prefilter_text = self.index.prefilter_text
        self.timeouts: dict[str, int] = {}
        self.disabled: set[int] = set()

    def fresh(self) -> LineMatcher:
        """A matcher on the same compiled index with a state of its own (no timeouts, nothing
        disabled): one analysis's slow detector is not skipped in the next one's."""
        return LineMatcher(self.index)

    def match(self, text: str, kind: str) -> list[tuple[Rule, Detector, Any]]:
        """Every (rule, detector, match) for ``text`` from a source of ``kind``."""
        candidates: list[tuple[Rule, Detector]] = list(self.always)
        if self._may_match(text):
            seen: set[int] = set()
            for lit, dets in self.by_literal.items():
                if lit in text:
                    candidates.extend(d for d in dets if id(d[1]) not in seen)
                    seen.update(id(d[1]) for d in dets)
            if self.by_literal_ci:
                lowered = text.lower()
                for lit, dets in self.by_literal_ci.items():
                    if lit in lowered:
                        candidates.extend(d for d in dets if id(d[1]) not in seen)
                        seen.update(id(d[1]) for d in dets)
        out = []
        for rule, det in candidates:
            if det.sources is not None and kind not in det.sources:
                continue
            found = self.search(rule, det, text)
            if found is not None:
                out.append((rule, det, found))
        return out

    def _may_match(self, text: str) -> bool:
        """Whether ``text`` holds any detector's literal (the one-pass prefilter)."""
        if self.prefilter is not None:
            return bool(self.prefilter.line_starts(text.encode("utf-8", "surrogatepass")))
        return self.prefilter_text is not None and self.prefilter_text.search(text) is not None

    def search(self, rule: Rule, det: Detector, text: str) -> Any:
        """Run one detector under the time limit; a detector that times out is disabled.

        A pattern that backtracks catastrophically on one line will do so on the next similar
        one, so it is reported once (``timeouts``) and not run again in this analysis.
        """
        if id(det) in self.disabled:
            return None
        try:
            return det.pattern.search(text, timeout=REGEX_TIMEOUT)
        except TimeoutError:
            self.record_timeout(rule, det)
            self.disabled.add(id(det))
            return None

    def record_timeout(self, rule: Rule, det: Detector) -> None:
        """Count a detector that ran out of time (reported, then treated as no match)."""
        key = f"{rule.id}.{det.name}"
        self.timeouts[key] = self.timeouts.get(key, 0) + 1
