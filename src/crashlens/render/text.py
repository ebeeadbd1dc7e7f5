"""Terminal output with rich: verdict, ranked causes, first failure, evidence, remediation.

Log text is always handed to rich as :class:`rich.text.Text`, never as markup, and control
characters (ANSI escapes included) are made visible, so a log line cannot style or move the
terminal.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from crashlens.model import iso

if TYPE_CHECKING:
    from crashlens.model import Cause, Evidence
    from crashlens.report import Report

_CONTROL = {c: f"\\x{c:02x}" for c in range(32) if c not in (9, 10)}
_CONTROL[127] = "\\x7f"
MAX_CAUSES = 5
MAX_EVIDENCE_SHOWN = 4


def clean(text: str) -> str:
    """Neutralise control characters but newlines (ESC sequences become visible ``\\x1b``)."""
    return text.translate(_CONTROL)


_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s")


def reflow(text: str) -> str:
    """Join hard-wrapped lines so the terminal wraps them once; keep paragraphs and list items."""
    out: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            out.append("")
        elif out and out[-1] and not _ITEM.match(line):
            out[-1] += " " + stripped
        else:
            out.append(stripped)
    return "\n".join(out).strip()


def render(report: Report, *, color: bool = False, width: int = 100, **_: Any) -> str:
    """Render the report for a terminal (``color=False`` gives plain text)."""
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        color_system="truecolor" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        emoji=False,
        markup=False,
    )
    for block in renderables(report):
        console.print(block)
    return buf.getvalue()


def renderables(report: Report) -> list[RenderableType]:
    """The report as rich renderables (usable with any Console)."""
    out: list[RenderableType] = []
    top = report.primary
    style = "bold red" if top and top.kind == "cause" else ("bold yellow" if top else "bold green")
    out.append(Text.assemble(("crashlens: ", "bold"), (clean(report.verdict), style)))
    if report.first_failure is not None:
        out.append(Text(clean(report.story)))
    shifted = {h: c for h, c in report.clock_skew.items() if c.applied and c.offset_s}
    if shifted:
        parts = [
            f"{h} {c.offset_s:+.3f}s ±{c.uncertainty_s:.3f}" for h, c in sorted(shifted.items())
        ]
        out.append(Text("Clock skew corrected: " + ", ".join(parts), "dim"))
    ff = report.first_failure
    if ff is not None:
        where = f"rank {ff.rank}" if ff.rank is not None else "the process"
        host = f" on {ff.host}" if ff.host else ""
        when = f" at {iso(ff.time)}" if ff.time is not None else ""
        if when and ff.time_inferred:
            when += " (inferred: the line has no timestamp)"
        line = Text(clean(f"First failure: {where}{host}{when} ({ff.file}:{ff.line})\n  "), "bold")
        line.append(clean(ff.text), "red")
        out.append(line)
    for i, cause in enumerate(report.causes[:MAX_CAUSES], 1):
        out.append(_cause_panel(i, cause))
    hidden = len(report.causes) - MAX_CAUSES
    if hidden > 0:
        out.append(Text(f"... and {hidden} more finding(s); use --format json for all.", "dim"))
    out.append(_inventory(report))
    return out


def _cause_panel(i: int, cause: Cause) -> Panel:
    rule = cause.match.rule
    parts: list[RenderableType] = []
    head = Text()
    head.append(f"{cause.confidence:.2f}", "bold")
    head.append(f"  {rule.cls}  ", "cyan")
    head.append(f"[{rule.id}]  severity {rule.severity}", "dim")
    ranks = cause.match.ranks
    if ranks:
        head.append(f"\nranks: {rank_list(ranks)}")
    parts.append(head)
    parts.append(Text("Evidence:", "bold"))
    for ev in cause.evidence[:MAX_EVIDENCE_SHOWN]:
        parts.append(_evidence(ev))
    more = len(cause.evidence) - MAX_EVIDENCE_SHOWN
    if more > 0:
        parts.append(Text(f"  (+{more} more)", "dim"))
    if cause.explains:
        parts.append(Text("Explains (symptoms, not causes):", "bold"))
        for e in cause.explains:
            where = f" on ranks {rank_list(list(e.ranks))}" if e.ranks else ""
            parts.append(Text(f"  - {e.title} [{e.rule_id}] x{e.count}{where}"))
    if cause.remediation:
        parts.append(Text("Remediation:", "bold"))
        parts.append(Text(clean(reflow(cause.remediation))))
    kind = "cause" if cause.kind == "cause" else "symptom (no root cause visible)"
    title = Text(f"#{i} {rule.title} — {kind}")
    color = "red" if cause.kind == "cause" and i == 1 else "yellow"
    return Panel(Group(*parts), title=title, title_align="left", border_style=color)


def _evidence(ev: Evidence) -> Text:
    who = f"rank {ev.rank}" if ev.rank is not None else "-"
    when = iso(ev.time) or "no time"
    if ev.time is not None and ev.time_inferred:
        when += "~"
    line = Text(clean(f"  {ev.file}:{ev.line}  {who}  {when}\n    "), "dim")
    line.append(clean(ev.text), "")
    return line


def rank_list(ranks: list[int]) -> str:
    """Ranks for a report line: all of up to 8, else the first 6 and how many (``-``: none)."""
    if not ranks:
        return "-"
    if len(ranks) <= 8:
        return ", ".join(map(str, ranks))
    return f"{', '.join(map(str, ranks[:6]))}, … ({len(ranks)} ranks)"


def _inventory(report: Report) -> Text:
    read = [f for f in report.inputs if f.skipped is None]
    skipped = [f for f in report.inputs if f.skipped]
    size = sum(f.bytes for f in read)
    text = Text(
        f"Read {len(read)} file(s), {size / 1e6:.1f} MB, {len(report.ranks)} rank(s); "
        f"{report.rules_loaded} rules.",
        "dim",
    )
    for f in skipped[:10]:
        text.append(f"\n  skipped {clean(f.path)}: {f.skipped}", "dim")
    return text
