"""Leave-case-out on the tune part: each case analysed without the rules written from it.

A rule names where its formats and fixtures come from: a thread (``owner/repo#N`` or its URL)
or a corpus case (``tune/<id>``), in its ``notes:``, its fixtures or a fixture folder's
``SOURCE.md`` (threads read as ``tests/test_corpus.py`` reads them to mark validation cases
seen: :func:`accuracy.threads_named`). Analysing a tune case with the rules that cite it
switched off tells whether the rest of the rule base would have found it: the share of tune
that rests on rules written from the very case, and the misses that only a more general
mechanism fixes. It is a tune-only
estimate of how a change carries to logs nobody tuned on, to read before the validation part
(which it never opens).

    python benchmarks/leave_case_out.py              # the figure, misses by (label, rule)
    python benchmarks/leave_case_out.py --misses     # every case it gets wrong
    python benchmarks/leave_case_out.py --json F     # each case's outcome, to compare runs
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import CORPUS, Case, Outcome, load_cases, score, threads_named

from crashlens import analyze
from crashlens.report import Report
from crashlens.resemble import KnownReports, bundled
from crashlens.rulebase import RuleSet, load_rules

#: Files of a rule's fixture folder that can name a source.
_SOURCE_SUFFIXES = (".log", ".txt", ".out", ".err", ".md", ".yaml")
#: A corpus case named by its part and id ("corpus case tune/ostris-ai-toolkit-266").
_CASE_REF = re.compile(r"\b(?:tune|validation)/([\w.-]+)")


def cited_in(text: str) -> set[str]:
    """The corpus cases ``text`` names, by id: its threads, spelled as ids, and ``tune/<id>``."""
    return threads_named(text) | {m[1].lower() for m in _CASE_REF.finditer(text)}


def rule_citations(rules: RuleSet) -> dict[str, set[str]]:
    """The cases each rule cites, from its file and its fixture folder."""
    out: dict[str, set[str]] = {}
    for rule in rules.rules:
        path = Path(rule.path)
        parts = [path.read_text(encoding="utf-8", errors="replace")]
        folder = path.with_suffix("")
        if folder.is_dir():
            parts += [
                f.read_text(encoding="utf-8", errors="replace")
                for f in sorted(folder.rglob("*"))
                if f.is_file() and f.suffix in _SOURCE_SUFFIXES
            ]
        out[rule.id] = cited_in("\n".join(parts))
    return out


def case_keys(case: Case) -> set[str]:
    """How a rule would cite ``case``: its id, and its thread spelled as an id (the two differ
    where the thread's repository moved since)."""
    return {case.id.lower(), *threads_named(case.source)}


def citing(case: Case, citations: dict[str, set[str]]) -> list[str]:
    """The rules that cite ``case`` (written from it, or holding it as a fixture)."""
    keys = case_keys(case)
    return sorted(rule_id for rule_id, cited in citations.items() if cited & keys)


def reports(
    cases: Iterable[Case], rules: RuleSet, known: KnownReports | None = None
) -> Iterator[tuple[Case, Report, list[str]]]:
    """Each case analysed with the rules that cite it switched off (and those rules), and
    compared with the known reports (``known``, else the bundled ones) less its own thread."""
    citations = rule_citations(rules)
    known = bundled() if known is None else known
    for case in cases:
        off = citing(case, citations)
        report = analyze(
            [case.path], rules, disable=off, known_reports=known.without({case.source})
        )
        yield case, report, off


def run(cases: Iterable[Case], rules: RuleSet) -> list[tuple[Outcome, list[str]]]:
    """Each case scored with the rules that cite it switched off, and those rules."""
    return [(score(case, report), off) for case, report, off in reports(cases, rules)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--misses", action="store_true", help="list the cases scored wrong")
    parser.add_argument("--json", type=Path, help="write each case's outcome here")
    args = parser.parse_args(argv)
    results = run(load_cases(args.corpus, ("tune",)), load_rules())
    right = sum(o.top1 for o, _ in results)
    cited = [(o, off) for o, off in results if off]
    print(
        f"tune, leave-case-out: {right}/{len(results)} top-1 ({right / len(results):.1%}); "
        f"{len(cited)} cases cited by a rule, {sum(o.top1 for o, _ in cited)} of them still right"
    )
    missed = Counter((o.cause, o.rule) for o, _ in results if not o.top1)
    for (label, rule), n in missed.most_common():
        print(f"  {n:3d}  {label} <- {rule}")
    if args.misses:
        for o, off in results:
            if not o.top1:
                print(f"tune/{o.id}: label {o.cause} -> {list(o.predicted)} ({o.rule}); off: {off}")
    if args.json:
        rows = {o.id: {"top1": o.top1, "rule": o.rule, "off": off} for o, off in results}
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
