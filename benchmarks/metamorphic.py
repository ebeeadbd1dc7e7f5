"""Does the diagnosis survive what a paste does to a log?

Users paste logs inside a list item or a quote (every line indented), from Windows (CRLF),
with trailing blanks, through a terminal that colours the exception line, or through a
launcher that prefixes every line. None of that changes what happened, so none of it may
change the diagnosis. For each corpus case crashlens diagnoses right, this rewrites its logs
with one transformation at a time and analyses them again; a case whose class changes is a
parser that reads the surface, not the meaning.

    python benchmarks/metamorphic.py                 # every transformation, tune part
    python benchmarks/metamorphic.py --part validation --transform indent2

Only counts are printed for the validation part (its logs stay unread while tuning); ``--list``
names the tune cases that change.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy

from crashlens.rulebase import RuleSet, load_rules


def _colour_exception(line: str) -> str:
    head = line.split(":", 1)[0]
    if line[:1].isalpha() and ":" in line and head.endswith(("Error", "Exception")):
        return "\x1b[31m" + line + "\x1b[0m"
    return line


#: Each rewrites one line as a paste or a launcher would.
TRANSFORMS: dict[str, Callable[[str], str]] = {
    "indent2": lambda line: "  " + line if line else line,
    "indent4": lambda line: "    " + line if line else line,
    "crlf": lambda line: line + "\r",
    "trailing_blanks": lambda line: line + "   ",
    "coloured_exception": _colour_exception,
    "rank_prefix": lambda line: "[rank0]: " + line,
    "indented_rank_prefix": lambda line: "  [rank0]: " + line,  # a torchrun console, pasted
    "srun_label": lambda line: "0: " + line,
    "mpi_tag": lambda line: "[1,0]<stderr>:" + line,
    "stamped": lambda line: "2024-05-01T03:14:00.123456789Z " + line,
    "jenkins_stamped": lambda line: "[2024-05-01T03:14:00.123Z] " + line,  # Jenkins' Timestamper
    "dedent": lambda line: line.lstrip(),
    "double_spaced": lambda line: line + "\n",
    # a combined console: another rank's chatter between every line of this one's
    "interleaved": lambda line: "[rank0]: " + line + "\n[rank1]: INFO train: step 7 loss 0.5130",
    "wrapped": lambda line: "\n".join(line[i : i + 100] for i in range(0, max(len(line), 1), 100)),
    "quoted": lambda line: "> " + line,  # a reply's or Markdown's quote
    "tabbed": lambda line: "\t" + line,  # a block an editor indented with a tab
}


def _flatten_tracebacks(lines: list[str]) -> list[str]:
    """Each traceback (its header at column 0, its indented frames and source lines, its
    exception line) on one line, its line breaks turned into blanks: a web form's paste."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("Traceback (most recent call last):"):
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j][:1].isspace():
            j += 1
        end = min(j + 1, len(lines))  # the exception line, when there is one
        out.append(" ".join(lines[i:end]))
        i = end
    return out


#: Each rewrites a whole file as a paste does.
FILE_TRANSFORMS: dict[str, Callable[[list[str]], list[str]]] = {
    "flattened": _flatten_tracebacks,
}


def rewrite(case_dir: Path, into: Path, name: str) -> Path:
    """A copy of ``case_dir``'s logs under ``into``, rewritten by the transformation ``name``
    (every line, or the whole file)."""
    into.mkdir(parents=True)
    for path in sorted(case_dir.iterdir()):
        if path.name == "case.yaml" or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        end = [""] if lines[-1] == "" else []  # the file's last newline ends a line, no more
        kept = lines[: len(lines) - len(end)]
        if name in FILE_TRANSFORMS:
            body = FILE_TRANSFORMS[name](kept)
        else:
            body = [TRANSFORMS[name](x) for x in kept]
        (into / path.name).write_text("\n".join(body + end), encoding="utf-8")
    return into


def diagnosed_right(cases: list[accuracy.Case], rules: RuleSet) -> list[accuracy.Case]:
    """The cases crashlens diagnoses right as they were posted."""
    return [c for c in cases if accuracy.evaluate(c, rules).top1]


def changed(right: list[accuracy.Case], name: str, rules: RuleSet, tmp: Path) -> list[str]:
    """The ids of the cases (diagnosed right) the transformation ``name`` makes crashlens
    diagnose wrong."""
    broke = []
    for case in right:
        copy = rewrite(case.path, tmp / name / case.id, name)
        report = accuracy.analyze_case(dataclasses.replace(case, path=copy), rules)
        labels = {case.cause, *case.acceptable}
        if case.cause == "none":
            ok = not report.failed
        else:
            ok = bool(report.causes) and report.causes[0].cls in labels
        if not ok:
            broke.append(case.id)
    return broke


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=accuracy.PARTS, default="tune")
    parser.add_argument(
        "--transform", action="append", choices=sorted({*TRANSFORMS, *FILE_TRANSFORMS})
    )
    parser.add_argument("--list", action="store_true", help="name the tune cases that change")
    args = parser.parse_args(argv)
    rules = load_rules()
    cases = accuracy.load_cases(accuracy.CORPUS, (args.part,))
    if args.part == "validation":
        cases = [c for c in cases if not c.seen]
    right = diagnosed_right(cases, rules)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.transform or [*TRANSFORMS, *FILE_TRANSFORMS]:
            broke = changed(right, name, rules, Path(tmp))
            print(f"{name}: {len(broke)} of {len(right)} cases diagnosed right change")
            if args.list and args.part == "tune":
                for case_id in broke:
                    print(f"    {case_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
