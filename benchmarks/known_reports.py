"""Build the known reports a finding with no cause is compared with (``known_reports.json``).

Each labelled case of the corpus' **tune** part (never validation: that part measures how the
analyzer does on reports it was not built from) is analysed, and the words of its primary
finding (:func:`crashlens.resemble.cause_features`) are kept with its thread and the class its
thread's resolution gives. Healthy runs and causes the thread left open teach nothing and are
left out. Its ``records`` say, per rule, how often the class it was given this way was right
on the tune part, leave-case-out (:func:`records`): what a report tells its reader the guess
is worth. ``tests/test_known_reports.py`` rebuilds the index and fails when the bundled one is
stale.

    python benchmarks/known_reports.py           # rewrite the bundled index
    python benchmarks/known_reports.py --check   # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import leave_case_out
from accuracy import CORPUS, Case, load_cases

from crashlens import analyze
from crashlens.model import KnownReport, headline
from crashlens.resemble import (
    BUNDLED,
    UNTAUGHT,
    KnownReports,
    cause_features,
    cause_tracebacks,
)
from crashlens.rulebase import RuleSet, load_rules

#: The longest exception line kept to show beside a cited report.
EXCEPTION_CHARS = 200


def entry(case: Case, rules: RuleSet) -> tuple[KnownReport, frozenset[str]] | None:
    """``case`` as a known report: its thread, its label, its primary finding's words."""
    report = analyze([case.path], rules, known_reports=KnownReports([]), parallel=False)
    if not report.causes:
        return None
    primary = report.causes[0]
    tbs = cause_tracebacks(primary, report.tracebacks)
    if tbs and tbs[-1].exceptions:
        line = headline(tbs[-1].exceptions[-1])
    else:
        line = primary.lead.text if primary.lead else ""
    words = cause_features(primary, report.tracebacks)
    return KnownReport(case.source, case.cause, line.strip()[:EXCEPTION_CHARS]), words


def records(cases: list[Case], rules: RuleSet, index: KnownReports) -> dict[str, tuple[int, int]]:
    """Per rule, how often the class it was given by resemblance was right on the
    tune part, leave-case-out (each case without the rules written from it and without its
    own thread among the known reports): what a reader is told the guess is worth."""
    counts: dict[str, list[int]] = {}
    for case, report, _ in leave_case_out.reports(cases, rules, index):
        top = report.primary
        if top is None or top.resemblance is None:
            continue
        tally = counts.setdefault(top.rule_id, [0, 0])
        tally[0] += top.cls in {case.cause, *case.acceptable}
        tally[1] += 1
    return {rule: (right, of) for rule, (right, of) in counts.items()}


def build(corpus: Path = CORPUS) -> str:
    """The index's JSON, from the tune part of ``corpus``."""
    rules = load_rules()
    tune = load_cases(corpus, ("tune",))
    cases = [c for c in tune if c.cause not in UNTAUGHT]
    entries = [e for e in (entry(c, rules) for c in cases) if e is not None]
    return KnownReports.dump(entries, records(tune, rules, KnownReports(entries)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--check", action="store_true", help="exit 1 when the index is stale")
    args = parser.parse_args(argv)
    text = build(args.corpus)
    if args.check:
        stale = not BUNDLED.is_file() or BUNDLED.read_text(encoding="utf-8") != text
        print(f"{BUNDLED.name}: {'stale' if stale else 'up to date'}")
        return 1 if stale else 0
    BUNDLED.write_text(text, encoding="utf-8")
    print(f"{BUNDLED}: {len(KnownReports.load(BUNDLED))} reports, records {text.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
