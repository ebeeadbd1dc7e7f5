"""CI outputs: GitHub Actions annotations and JUnit XML, one entry per cause.

GitHub parses every stdout line starting with ``::`` as a workflow command, so each annotation
is exactly one line: ``%``, CR and LF are percent-encoded in the message (and ``:`` and ``,``
too in properties) as the runner expects, which also keeps a log line such as
``%0A::error::x`` from starting a command of its own. The JUnit document is built with
ElementTree, which escapes markup; characters XML 1.0 forbids are removed first.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashlens import lazyre
from crashlens.model import iso, location, plural
from crashlens.render.common import clean, on_ranks
from crashlens.render.remedy import to_plain

if TYPE_CHECKING:
    from crashlens.model import Cause, Evidence
    from crashlens.report import Report

#: Confidence below which a cause is annotated as a warning rather than an error.
WARN_BELOW = 0.5
MAX_MESSAGE = 4000
_XML_ILLEGAL = lazyre.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# --- GitHub Actions ---------------------------------------------------------------------------


def gh_data(text: str) -> str:
    """Escape a workflow-command message (the part after ``::``)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def gh_property(text: str) -> str:
    """Escape a workflow-command property value (``file=``, ``title=``)."""
    return gh_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(report: Report, *, repo_root: Path | None = None, **_: Any) -> str:
    """One ``::error``/``::warning`` line per cause (``::notice`` when nothing failed). The job
    failed, so its primary finding is an ``::error`` whatever its kind (a hang's unexplained
    timeout too); ``file=`` is relative to ``repo_root`` when the file lies inside it, so the
    annotation attaches to the diff."""
    if not report.causes:
        return f"::notice title={gh_property('crashlens')}::{gh_data(report.verdict)}\n"
    return "".join(
        _annotation(c, primary=i == 0, root=repo_root) + "\n" for i, c in enumerate(report.causes)
    )


def repo_relative(path: str, root: Path | None) -> str:
    """``path`` relative to ``root`` when it is an absolute path inside it, else as given."""
    if root is None or not path.startswith("/"):
        return path
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return path


def _annotation(cause: Cause, *, primary: bool = False, root: Path | None = None) -> str:
    rule = cause.match.rule
    confident = cause.kind == "cause" and cause.confidence >= WARN_BELOW
    level = "error" if primary or confident else "warning"
    props = []
    ev = _cited(cause)
    frame = cause.user_frame
    if frame is not None:
        # Where the user's code failed: the line a reviewer can fix, not the log line.
        props += [f"file={gh_property(repo_relative(frame.file, root))}", f"line={frame.line}"]
    elif ev is not None:
        props.append(f"file={gh_property(repo_relative(ev.file, root))}")
        if ev.line > 0:
            props.append(f"line={ev.line}")
    title = f"crashlens: {rule.title} ({cause.class_label})"
    props.append(f"title={gh_property(clean(title))}")
    return f"::{level} {','.join(props)}::{gh_data(_message(cause, ev))}"


def _cited(cause: Cause) -> Evidence | None:
    """The evidence to point at: the first line that was fatal, else the earliest."""
    return cause.lead


def _message(cause: Cause, ev: Evidence | None) -> str:
    rule = cause.match.rule
    kind = "root cause" if cause.kind == "cause" else "symptom (no root cause visible)"
    ranks = cause.match.ranks
    lines = [
        f"{rule.title} [{rule.id}], {kind}, confidence {cause.confidence:.2f}"
        + (f",{on_ranks(ranks)}" if ranks else "")
    ]
    if ev is not None:
        who = "" if ev.rank is None else f"rank {ev.rank}: "
        lines.append(f"{who}{ev.text} ({location(ev.file, ev.line)})")
    if cause.user_frame is not None:
        lines.append(f"In your code: {cause.user_frame}")
    if cause.explains:
        n = sum(e.count for e in cause.explains)
        lines.append(f"Explains {plural(n, 'downstream symptom')}.")
    if cause.remediation:
        lines.append(to_plain(cause.remediation))
    text = clean("\n".join(lines))
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " …"


# --- JUnit XML --------------------------------------------------------------------------------


def xml_safe(text: str) -> str:
    """Text XML 1.0 can carry: control characters shown as ``\\xNN``, the rest dropped."""
    return _XML_ILLEGAL.sub("", clean(text))


def render_junit(report: Report, **_: Any) -> str:
    """A JUnit XML document: one failing testcase per cause, or one passing testcase."""
    failures = len(report.causes)
    tests = max(1, failures)
    counts = {"tests": str(tests), "failures": str(failures), "errors": "0", "skipped": "0"}
    root = ET.Element("testsuites", {"name": "crashlens", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": "crashlens", **counts})
    if not report.causes:
        ET.SubElement(
            suite, "testcase", {"classname": "crashlens", "name": "no-failure-found", "time": "0"}
        )
    for cause in report.causes:
        _testcase(suite, cause)
    if report.first_failure is not None:
        ff = report.first_failure
        out = ET.SubElement(suite, "system-out")
        out.text = xml_safe(
            f"{report.verdict}\nFirst failure: {ff.subject()}{ff.kind_note} "
            f"({location(ff.file, ff.line)}): {ff.text}"
        )
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _testcase(suite: ET.Element, cause: Cause) -> None:
    rule = cause.match.rule
    case = ET.SubElement(
        suite,
        "testcase",
        {"classname": f"crashlens.{cause.cls}", "name": rule.id, "time": "0"},
    )
    kind = "root cause" if cause.kind == "cause" else "symptom"
    message = f"{rule.title} ({kind}, confidence {cause.confidence:.2f})"
    failure = ET.SubElement(case, "failure", {"message": xml_safe(message), "type": cause.cls})
    failure.text = xml_safe(_details(cause))


def _details(cause: Cause) -> str:
    lines = []
    for ev in cause.evidence:
        who = "rank ?" if ev.rank is None else f"rank {ev.rank}"
        when = iso(ev.time) or "no time"
        lines.append(f"{location(ev.file, ev.line)} {who} {when}\n    {ev.text}")
    if cause.user_frame is not None:
        lines.append(f"In your code: {cause.user_frame}")
    if cause.explains:
        lines.append("Explains:")
        lines += [f"  - {e.title} [{e.rule_id}] x{e.count}" for e in cause.explains]
    if cause.remediation:
        lines.append("Remediation:\n" + to_plain(cause.remediation))
    return "\n".join(lines)
