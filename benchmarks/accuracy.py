"""Score crashlens on the real-world corpus: top-1, top-3, first rank, silent crashes, false alarms.

Each case under ``corpus/<part>/<id>/`` holds the logs a user posted in a public issue thread and a
``case.yaml`` whose label comes from the thread's resolution (see ``corpus/README.md``). This script
analyses every case exactly as ``crashlens analyze <case>`` would (bundled rules, default config)
and compares with the label:

- top-1: the primary cause's class is the label (or one of ``acceptable``); for a healthy run
  (``cause: none``), top-1 means no failure was reported;
- top-3: the label is among the first three causes' classes (healthy runs: as top-1);
- first rank: on cases whose ``first_rank`` is known, the report's first failure names that rank;
- silent crash: a crashed case on which ``analyze`` would exit 0;
- false alarm: a healthy case on which ``analyze`` would exit 1.

    python benchmarks/accuracy.py                 # table for both parts
    python benchmarks/accuracy.py --markdown      # the tables BENCHMARKS.md quotes
    python benchmarks/accuracy.py --json          # every case's outcome
    python benchmarks/accuracy.py --write-baseline  # raise the ratchet in corpus/baseline.json
                                                    # (refused when it would record a loss)

``tests/test_corpus.py`` fails when a part's figures fall below ``corpus/baseline.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from crashlens import analyze, resemble
from crashlens.model import CAUSE_CLASSES
from crashlens.report import Report
from crashlens.resemble import KnownReports
from crashlens.rulebase import RuleSet, load_rules

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "corpus"
BASELINE = CORPUS / "baseline.json"
PARTS = ("tune", "validation")
LABELS = (*CAUSE_CLASSES, "none")


#: A public thread named in a rule file or fixture: "owner/repo#123" or its GitHub URL.
THREAD = re.compile(
    r"(?<![\w.-])([A-Za-z0-9][\w.-]*)/([\w.-]+)#(\d+)"
    r"|github\.com/([\w.-]+)/([\w.-]+)/(?:issues|pull|discussions)/(\d+)"
)


def threads_named(text: str) -> set[str]:
    """The threads ``text`` names, spelled as a corpus case's id spells its thread
    (``owner-repo-number``, lower case)."""
    named = set()
    for m in THREAD.finditer(text):
        owner, repo, number = (g for g in m.groups() if g is not None)
        named.add(f"{owner}-{repo}-{number}".lower())
    return named


def part_of(case_id: str) -> str:
    """The part a case belongs to, fixed by its id before any tuning: a third is validation."""
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    return "validation" if digest[0] % 3 == 0 else "tune"


@dataclass(frozen=True)
class Case:
    """One labelled corpus case."""

    id: str
    part: str
    path: Path
    cause: str
    acceptable: tuple[str, ...]
    first_rank: int | None
    multi_rank: bool
    tags: tuple[str, ...]
    source: str
    #: A validation case that was read while rules were written, or copied into a fixture or
    #: test: it no longer measures generalisation, so it is reported apart.
    seen: bool = False


@dataclass(frozen=True)
class Outcome:
    """What crashlens said about one case, and how that compares with the label."""

    id: str
    part: str
    cause: str
    predicted: tuple[str, ...]
    rule: str | None
    exit_code: int
    top1: bool
    top3: bool
    first_rank: int | None
    predicted_rank: int | None
    rank_ok: bool | None
    silent: bool
    false_alarm: bool
    seen: bool = False


def load_cases(corpus: Path = CORPUS, parts: tuple[str, ...] = PARTS) -> list[Case]:
    """Every case of the given parts, validated (an invalid case.yaml is an error, not a skip)."""
    cases = []
    for part in parts:
        for case_yaml in sorted((corpus / part).glob("*/case.yaml")):
            data = yaml.safe_load(case_yaml.read_text(encoding="utf-8"))
            cause = data["cause"]
            if cause not in LABELS:
                raise ValueError(f"{case_yaml}: cause {cause!r} is not in the vocabulary")
            acceptable = tuple(data.get("acceptable") or ())
            bad = [a for a in acceptable if a not in LABELS]
            if bad:
                raise ValueError(f"{case_yaml}: acceptable {bad} not in the vocabulary")
            first_rank = data.get("first_rank")
            if first_rank is not None and not isinstance(first_rank, int):
                raise ValueError(f"{case_yaml}: first_rank must be an integer or null")
            cases.append(
                Case(
                    id=case_yaml.parent.name,
                    part=part,
                    path=case_yaml.parent,
                    cause=cause,
                    acceptable=acceptable,
                    first_rank=first_rank,
                    multi_rank=bool(data.get("multi_rank")),
                    tags=tuple(data.get("tags") or ()),
                    source=str(data["source"]),
                    seen=bool(data.get("seen")),
                )
            )
    return cases


def analyze_case(case: Case, rules: RuleSet, known: KnownReports | None = None) -> Report:
    """Analyse one case as the CLI would, except that a tune case is compared with the known
    reports less its own thread (the bundled index is built from the tune part: a report
    found by resembling itself says nothing of the ones nobody labelled)."""
    known = resemble.bundled() if known is None else known
    if case.part == "tune":
        known = known.without({case.source})
    return analyze([case.path], rules, known_reports=known)


def evaluate(case: Case, rules: RuleSet) -> Outcome:
    """Analyse one case (:func:`analyze_case`) and score it against its label."""
    return score(case, analyze_case(case, rules))


def score(case: Case, report: Report) -> Outcome:
    """Score one case's report (``analyze`` of its folder) against its label."""
    exit_code = 1 if report.failed else 0  # the CLI's default (--fail-on info)
    predicted = tuple(c.cls for c in report.causes)
    right = {case.cause, *case.acceptable}
    healthy = case.cause == "none"
    if healthy:
        top1 = top3 = not report.failed
    else:
        top1 = bool(predicted) and predicted[0] in right
        top3 = any(p in right for p in predicted[:3])
    ff = report.first_failure
    predicted_rank = ff.rank if ff is not None else None
    rank_ok = None if case.first_rank is None else predicted_rank == case.first_rank
    return Outcome(
        id=case.id,
        part=case.part,
        cause=case.cause,
        predicted=predicted[:3],
        rule=report.primary.rule_id if report.primary else None,
        exit_code=exit_code,
        top1=top1,
        top3=top3,
        first_rank=case.first_rank,
        predicted_rank=predicted_rank,
        rank_ok=rank_ok,
        silent=not healthy and exit_code == 0,
        false_alarm=healthy and exit_code == 1,
        seen=case.seen,
    )


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    """Aggregate figures of a set of outcomes (fractions rounded to 3 places)."""
    n = len(outcomes)
    ranked = [o for o in outcomes if o.rank_ok is not None]
    crashed = [o for o in outcomes if o.cause != "none"]
    healthy = [o for o in outcomes if o.cause == "none"]
    return {
        "cases": n,
        "top1": _frac(sum(o.top1 for o in outcomes), n),
        "top3": _frac(sum(o.top3 for o in outcomes), n),
        "first_rank": _frac(sum(bool(o.rank_ok) for o in ranked), len(ranked)),
        "first_rank_cases": len(ranked),
        "crashed": len(crashed),
        "healthy": len(healthy),
        "silent_crashes": sum(o.silent for o in outcomes),
        "false_alarms": sum(o.false_alarm for o in outcomes),
    }


def per_class(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Per labelled class: cases, top-1 and top-3 counts."""
    table: dict[str, dict[str, Any]] = defaultdict(lambda: {"cases": 0, "top1": 0, "top3": 0})
    for o in outcomes:
        row = table[o.cause]
        row["cases"] += 1
        row["top1"] += o.top1
        row["top3"] += o.top3
    return {k: table[k] for k in LABELS if k in table}


def _frac(k: int, n: int) -> float:
    return round(k / n, 3) if n else 0.0


#: Rows of the summary: the parts, the validation cases never looked at, everything.
ROWS = (*PARTS, "validation (unseen)", "all")


def run(corpus: Path = CORPUS, report_of: Callable[[Case], Report] | None = None) -> dict[str, Any]:
    """Evaluate every part; the result has ``outcomes``, ``summary`` and ``classes`` per part,
    and the summaries of the unseen validation cases and of everything. ``report_of``: each
    case's report when the caller has them already (else each case is analysed here)."""
    if report_of is None:
        rules = load_rules()

        def report_of(case: Case) -> Report:
            return analyze_case(case, rules)

    out: dict[str, Any] = {}
    for part in PARTS:
        outcomes = [score(c, report_of(c)) for c in load_cases(corpus, (part,))]
        out[part] = {
            "summary": summarize(outcomes),
            "classes": per_class(outcomes),
            "outcomes": outcomes,
        }
    unseen = [o for o in out["validation"]["outcomes"] if not o.seen]
    out["validation (unseen)"] = {"summary": summarize(unseen), "classes": per_class(unseen)}
    everything = [o for part in PARTS for o in out[part]["outcomes"]]
    out["all"] = {"summary": summarize(everything), "classes": per_class(everything)}
    return out


def regressions(
    results: dict[str, Any], baseline: dict[str, Any], accepted: frozenset[str] = frozenset()
) -> list[str]:
    """What the run lost against the ratchet.

    Per case: a case of the baseline that is gone (a case may not disappear to lift a score),
    a case the baseline diagnosed right that is now wrong. Per part: more silent crashes or
    false alarms among the baseline's cases than the baseline has; and, when the part holds
    exactly the baseline's cases, a figure below it. New cases may be wrong, silent crashes
    included: they lower a part's figure, never fail the ratchet, until ``--write-baseline``
    records them (a validation case is only read after that). ``accepted``: cases
    (``part/id``) a change knowingly trades away, named one by one (``--accept-loss``); a
    part's figure still may not fall.
    """
    problems = []
    outcomes = {o.id: o for part in PARTS for o in results[part]["outcomes"]}
    for case_id in baseline.get("cases", []):
        if case_id not in outcomes:
            problems.append(f"case {case_id} is in the baseline but no longer in the corpus")
    for case_id in baseline.get("right", []):
        o = outcomes.get(case_id)
        if o is not None and not o.top1 and f"{o.part}/{case_id}" not in accepted:
            problems.append(f"{o.part}/{case_id}: was diagnosed right, now {list(o.predicted)}")
    known = set(baseline.get("cases", []))
    for part in PARTS:
        floor = baseline.get(part)
        if floor is None:
            continue
        got = results[part]["summary"]
        recorded = [o for o in results[part]["outcomes"] if not known or o.id in known]
        for key, failed in (("silent_crashes", "silent"), ("false_alarms", "false_alarm")):
            count = sum(getattr(o, failed) for o in recorded)
            if count > floor[key]:
                problems.append(f"{part}: {key} {count} > baseline {floor[key]}")
        ids = {o.id for o in results[part]["outcomes"]}
        if known and ids <= known and got["cases"] == floor["cases"]:
            for key in ("top1", "top3", "first_rank"):
                if got[key] + 1e-9 < floor[key]:
                    problems.append(f"{part}: {key} {got[key]} < baseline {floor[key]}")
    return problems


def baseline_of(results: dict[str, Any]) -> dict[str, Any]:
    """The ratchet of a run (what ``--write-baseline`` stores): each row's figures, every case
    id, and the ids diagnosed right."""
    keys = ("cases", "top1", "top3", "first_rank", "silent_crashes", "false_alarms")
    out: dict[str, Any] = {row: {k: results[row]["summary"][k] for k in keys} for row in ROWS}
    outcomes = [o for part in PARTS for o in results[part]["outcomes"]]
    out["cases"] = sorted(o.id for o in outcomes)
    out["right"] = sorted(o.id for o in outcomes if o.top1)
    return out


def markdown(results: dict[str, Any]) -> str:
    """The summary and per-class tables as Markdown."""
    lines = [
        "| part | cases | top-1 | top-3 | first rank | silent crashes | false alarms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for part in ROWS:
        s = results[part]["summary"]
        lines.append(
            f"| {part} | {s['cases']} | {s['top1']:.1%} | {s['top3']:.1%} | "
            f"{s['first_rank']:.1%} ({s['first_rank_cases']}) | "
            f"{s['silent_crashes']} / {s['crashed']} | {s['false_alarms']} / {s['healthy']} |"
        )
    lines += ["", "| class | tune: cases | top-1 | top-3 | validation: cases | top-1 | top-3 |"]
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    classes = [k for k in LABELS if k in results["all"]["classes"]]
    for k in classes:
        cells = []
        for part in PARTS:
            row = results[part]["classes"].get(k)
            cells.append(f"{row['cases']} | {row['top1']} | {row['top3']}" if row else "0 | - | -")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--json", action="store_true", help="every case's outcome as JSON")
    parser.add_argument("--markdown", action="store_true", help="tables for BENCHMARKS.md")
    parser.add_argument("--misses", action="store_true", help="list the cases scored wrong")
    parser.add_argument("--part", choices=PARTS, help="with --misses: only this part")
    parser.add_argument(
        "--write-baseline", action="store_true", help="store these figures as the ratchet"
    )
    parser.add_argument(
        "--accept-loss",
        action="append",
        default=[],
        metavar="PART/ID",
        help="with --write-baseline: a case this change knowingly gets wrong (repeatable; "
        "recorded in the baseline; no part's figure may fall)",
    )
    args = parser.parse_args(argv)
    results = run(args.corpus)
    if args.json:
        outcomes = [asdict(o) for part in PARTS for o in results[part]["outcomes"]]
        json.dump({"summary": baseline_of(results), "outcomes": outcomes}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(markdown(results))
    if args.misses:
        for part in PARTS:
            if args.part and part != args.part:
                continue
            for o in results[part]["outcomes"]:
                if not o.top1 or o.rank_ok is False:
                    sys.stdout.write(
                        f"{part}/{o.id}: label {o.cause} rank {o.first_rank} -> "
                        f"{list(o.predicted)} ({o.rule}) rank {o.predicted_rank} "
                        f"exit {o.exit_code}\n"
                    )
    problems: list[str] = []
    accepted = frozenset(args.accept_loss if args.write_baseline else ())
    previous: dict[str, Any] = {}
    if BASELINE.exists():
        previous = json.loads(BASELINE.read_text(encoding="utf-8"))
        problems = regressions(results, previous, accepted)
        lost = set(regressions(results, previous)) - set(problems)
        problems += [
            f"--accept-loss {case}: not a case the baseline had right and this run gets wrong"
            for case in sorted(accepted)
            if not any(p.startswith(f"{case}: ") for p in lost)
        ]
    for p in problems:
        sys.stderr.write(f"below the ratchet: {p}\n")
    if args.write_baseline:
        if problems:
            # The ratchet only moves up: a lost case or a regression is fixed, not recorded.
            sys.stderr.write("not writing the baseline: it would record a regression\n")
            return 1
        ratchet = baseline_of(results)
        ratchet["accepted_losses"] = sorted({*previous.get("accepted_losses", []), *accepted})
        BASELINE.write_text(json.dumps(ratchet, indent=2) + "\n", encoding="utf-8")
        return 0
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
