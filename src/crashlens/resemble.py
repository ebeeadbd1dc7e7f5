"""Resemble stage: what a failure no rule names most resembles among known, labelled reports.

A finding with ``resemble: true`` (a generic fallback: an uncaught exception no rule's words
name, a log cut inside a traceback, an error the user's code led to, a traceback whose callers the
log does not show; a launcher's verdict on a worker, an exception whose type is all its rule reads)
knows that a process died and where, not why. Crash reports that did get a diagnosis say a
great deal about the ones that did not: an ``AttributeError`` raised in ``transformers/`` with
no frame of the user's was, in the threads where a maintainer answered, far more often two
releases that do not fit together than a bug of the script. This stage compares the words of the
finding's traceback (the exception's type and message, the packages, files and functions of its
frames and the source lines they print, or the lines it cites where it has no traceback) with
those of the labelled reports of the corpus' tune part, bundled as ``known_reports.json`` (built
by ``benchmarks/known_reports.py``; the validation part is never in it). A multinomial naive
Bayes over those words (each class's likelihoods smoothed toward all the reports' words) gives
the most likely class and its share of the likelihood; the reports of that class with the
most words in common (weighted by how rare each word is) are cited, so the reader checks the
guess against threads whose resolution is known, beside how often the same
rule's guess was right on held-out reports (the index's ``records``). It refines the class
only: the rule, its evidence and its remediation stay the finding's, and a failure that shares
no word with any known report is left as it was.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from crashlens.model import (
    CUT_COMPILE_MESSAGE,
    CUT_TRACEBACK,
    Cause,
    KnownReport,
    Resemblance,
    Timeline,
    Traceback,
    judged_origin,
)
from crashlens.provenance import module_parts

#: The bundled index, next to this module.
BUNDLED = Path(__file__).with_name("known_reports.json")
#: Classes a known report never teaches: a healthy run, and a cause its thread left open.
UNTAUGHT = frozenset({"none", "unknown"})
#: How much of a word's likelihood in a class is its share of all known reports' words
#: (Jelinek-Mercer smoothing): a word a class's reports never had is as unlikely there as it is
#: rare overall, not equally unlikely whatever it is, as adding a constant to every count
#: (Laplace) makes it. On the tune part (1,039 cases then), leave-case-out, weights of 0.05 to
#: 0.2 scored 867-872, Laplace (a constant of 0.02 or 0.05) 865.
BACKGROUND = 0.1
#: Known reports cited beside the class.
CITED = 3

_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
#: A class's dotted name, without what follows it (Ray's ``RayTaskError(PermissionError)``).
_DOTTED = re.compile(r"[\w.]+")


def features(tracebacks: Sequence[Traceback], lines: Iterable[str] = ()) -> frozenset[str]:
    """The words a failure is compared by: for each exception of ``tracebacks``, its type
    (``T:``), the words of its message (``w:``; none for the stand-in of an exception line a
    cut log does not show), the modules its frames are in (``p:``, by
    package identity: :func:`~crashlens.provenance.module_parts`), their functions (``fn:``)
    and the words of the source lines they print (``c:``: what the program was doing,
    ``torch.save(...)``, ``dataset.map(...)``, all a log cut before its exception line still
    tells); with no traceback, the words of ``lines`` (``l:``)."""
    out: set[str] = set()
    for tb in tracebacks:
        for exc in tb.exceptions:
            if exc.type == CUT_TRACEBACK:
                # the log shows no exception line: its stand-in's words are crashlens's own,
                # the same in every cut log (only a class IPython's header named is the log's)
                named = _DOTTED.match(exc.named)
                if named:
                    out.add("T:" + named[0].rsplit(".", 1)[-1])
            else:
                out.add("T:" + exc.type.rsplit(".", 1)[-1])
                if exc.message != CUT_COMPILE_MESSAGE:  # crashlens's words, as above
                    out.update("w:" + w for w in _WORD.findall(exc.message.lower()))
            for frame in exc.frames:
                out.update("p:" + part for part in module_parts(frame.file))
                if frame.function:
                    out.add("fn:" + frame.function)
                out.update("c:" + w for w in _WORD.findall(frame.code.lower()))
    if not tracebacks:
        for line in lines:
            out.update("l:" + w for w in _WORD.findall(line.lower()))
    return frozenset(out)


def cause_tracebacks(cause: Cause, timeline_tracebacks: Sequence[Traceback]) -> list[Traceback]:
    """The tracebacks the hits of ``cause`` name, in log order."""
    ids = {h.traceback_id for h in cause.match.hits if h.traceback_id is not None}
    return [tb for tb in timeline_tracebacks if tb.id in ids]


def cause_features(cause: Cause, timeline_tracebacks: Sequence[Traceback]) -> frozenset[str]:
    """The words of ``cause``: the tracebacks its hits name, else the lines it cites."""
    return features(cause_tracebacks(cause, timeline_tracebacks), _cited(cause))


def _cited(cause: Cause) -> Iterator[str]:
    """The lines the hits of ``cause`` cite."""
    return (h.evidence.text for h in cause.match.hits)


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    report: KnownReport
    words: frozenset[str]


class KnownReports:
    """The labelled reports a failure is compared with, and the counts the comparison needs."""

    def __init__(
        self,
        entries: Sequence[tuple[KnownReport, frozenset[str]]],
        records: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        #: Per rule, how often its resembled class was right on held-out reports.
        self.records = dict(records or {})
        self.entries = tuple(_Entry(r, w) for r, w in entries if r.cls not in UNTAUGHT and w)
        self.per_class: Counter[str] = Counter(e.report.cls for e in self.entries)
        self.word_counts: dict[str, Counter[str]] = {c: Counter() for c in self.per_class}
        self.doc_freq: Counter[str] = Counter()
        for e in self.entries:
            self.word_counts[e.report.cls].update(e.words)
            self.doc_freq.update(e.words)
        self.class_words = {c: sum(n.values()) for c, n in self.word_counts.items()}
        #: All known reports' words, for each word's share of them.
        self.all_words = sum(self.doc_freq.values())

    def __len__(self) -> int:
        return len(self.entries)

    @classmethod
    def load(cls, path: Path) -> KnownReports:
        """An index written by :meth:`dump` (``benchmarks/known_reports.py``)."""
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            [
                (
                    KnownReport(r["source"], r["class"], r["exception"]),
                    frozenset(r["features"]),
                )
                for r in data["reports"]
            ],
            {rule: (right, of) for rule, (right, of) in data.get("records", {}).items()},
        )

    @staticmethod
    def dump(
        entries: Iterable[tuple[KnownReport, frozenset[str]]],
        records: Mapping[str, tuple[int, int]] | None = None,
    ) -> str:
        """The JSON of an index: its records, then one report per line, sorted, so a rebuild
        diffs cleanly."""
        rows = sorted(
            (
                {
                    "source": r.source,
                    "class": r.cls,
                    "exception": r.exception,
                    "features": sorted(words),
                }
                for r, words in entries
                if r.cls not in UNTAUGHT and words
            ),
            key=lambda row: (row["source"], row["exception"]),
        )
        body = ",\n".join("  " + json.dumps(row, ensure_ascii=False) for row in rows)
        head = json.dumps({k: list(v) for k, v in sorted((records or {}).items())})
        return '{"records": ' + head + ',\n"reports": [\n' + body + "\n]}\n"

    def without(self, sources: Collection[str]) -> KnownReports:
        """The index less the reports of ``sources`` (to score a report it holds fairly)."""
        return KnownReports(
            [(e.report, e.words) for e in self.entries if e.report.source not in sources],
            self.records,
        )

    def resemble(self, words: frozenset[str], rule_id: str = "") -> Resemblance | None:
        """The most likely class of a failure with ``words``, and the reports it is nearest;
        ``None`` when it shares no word with any known report or no class is likelier than
        every other.

        A class is named however small its share: a report states it as ``possibly`` beside
        how often the same guess was right on held-out reports, which tells a reader more than
        a bare ``unknown`` (on the tune part, requiring more than half the likelihood cost 1
        case, and 3 of leave-case-out's; its ``unknown`` was right for none of them)."""
        scores = self.likelihoods(words)
        if not scores:
            return None
        best = max(scores, key=lambda c: (scores[c], c))
        if sum(s == scores[best] for s in scores.values()) > 1:
            return None  # a tie: no class is the likeliest
        share = 1.0 / sum(math.exp(s - scores[best]) for s in scores.values())
        return Resemblance(
            best, round(share, 2), self.nearest(words, best), self.records.get(rule_id)
        )

    def likelihoods(self, words: Collection[str]) -> dict[str, float]:
        """Each class's log-likelihood of a failure with ``words`` (its prior and the words the
        index knows; an empty dict when it knows none of them)."""
        known = [w for w in words if w in self.doc_freq]
        if not known:
            return {}
        total = len(self.entries)
        # math.fsum: correctly rounded whatever order the words come in (a set's order varies
        # with the interpreter's string hashing), so the likeliest class, and whether two tie,
        # is the same on every run
        return {
            c: math.log(n / total)
            + math.fsum(
                math.log(
                    (1 - BACKGROUND) * self.word_counts[c][w] / self.class_words[c]
                    + BACKGROUND * self.doc_freq[w] / self.all_words
                )
                for w in known
            )
            for c, n in self.per_class.items()
        }

    def nearest(self, words: frozenset[str], cls: str) -> tuple[KnownReport, ...]:
        """The reports of ``cls`` whose words are most like ``words`` (rare words weigh more)."""
        total = len(self.entries)

        def weight(w: str) -> float:
            return math.log(total / (1 + self.doc_freq[w])) ** 2

        norm = math.sqrt(math.fsum(weight(w) for w in words if w in self.doc_freq)) or 1.0
        scored = []
        for e in self.entries:
            if e.report.cls != cls:
                continue
            shared = words & e.words
            if shared:
                own = math.sqrt(math.fsum(weight(w) for w in e.words)) or 1.0
                score = math.fsum(weight(w) for w in shared) / norm / own
                scored.append((score, e.report.source, e))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return tuple(e.report for _, _, e in scored[:CITED])


@functools.cache
def bundled() -> KnownReports:
    """The index shipped with crashlens (empty when the file is missing)."""
    return KnownReports.load(BUNDLED) if BUNDLED.is_file() else KnownReports([])


def resemble(
    causes: list[Cause], timeline: Timeline, known: KnownReports | None = None
) -> list[Cause]:
    """Give each ``resemble: true`` finding among ``causes`` what it resembles (in place).

    An exception raised in the user's own code is left to say so: its frame is where the fix
    goes whatever other reports it resembles (on the tune part, every such finding the known
    reports changed had been right)."""
    index: KnownReports | None = known
    for cause in causes:
        if not cause.match.rule.resemble:
            continue
        tbs = cause_tracebacks(cause, timeline.tracebacks)
        if any(judged_origin(tb.exceptions) == "user" for tb in tbs):
            continue
        if index is None:
            index = bundled()
        cause.resemblance = index.resemble(features(tbs, _cited(cause)), cause.rule_id)
    return causes
