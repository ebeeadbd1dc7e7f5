"""Terminal output: the answer on one screen, the rest behind ``--verbose``.

The default view holds the verdict, the first failure with the frame of the user's code it
came from, the top cause's first fixes and one line of symptoms; ``verbose`` adds every cause
with its evidence, what it explains, its references, and the inputs. On a terminal the
remediation is rendered by rich's Markdown and long lines wrap with hanging indents; piped
(``terminal=False``) the output is plain text: no colour, no box characters, no hard wrap.

Log text is always handed to rich as :class:`rich.text.Text`, never as markup, and control
characters (ANSI escapes included) are made visible, so a log line cannot style or move the
terminal. The rows are built as :class:`Styled` runs and become rich objects only for a
terminal: plain output imports neither rich nor a Markdown parser for the usual remediation
(:func:`crashlens.render.remedy.to_plain`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crashlens import lazyre
from crashlens.model import iso, location, plural
from crashlens.render.common import (
    clean,
    cut_words,
    human_bytes,
    on_ranks,
    rank_list,
    resembles,
)
from crashlens.render.remedy import to_plain

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text as RichText

    from crashlens.model import Cause, Evidence, Explained, FirstFailure
    from crashlens.report import Report

#: The default view: the first failure's message up to this many characters, this many
#: steps of the top cause's remediation, this many symptoms on the symptoms line.
SHORT_MESSAGE = 240
TOP_FIXES = 3
TOP_SYMPTOMS = 2
MAX_EVIDENCE_SHOWN = 4
INFERRED_LEGEND = "~ = time inferred: the line has none, the last timestamp before it is shown"


_ITEM = lazyre.compile(r"^\s*(?:\d+[.)]|[-*•])\s")


def top_fixes(markdown: str, keep: int = TOP_FIXES) -> tuple[str, int]:
    """The remediation up to its ``keep``-th list item, and how many items were left out.

    The rank stage gives each paragraph and list item its own line.
    """
    lines = markdown.splitlines()
    items = [i for i, line in enumerate(lines) if _ITEM.match(line)]
    if len(items) <= keep:
        return markdown, 0
    return "\n".join(lines[: items[keep]]).rstrip(), len(items) - keep


# --- rows: what both the terminal and the plain text are made of ------------------------------


class Text:
    """Text in styled runs (rich style names): what a row holds. ``Text(s, style)`` then
    ``append``, as with :class:`rich.text.Text`, which :meth:`rich` builds the same way."""

    __slots__ = ("parts",)

    def __init__(self, text: str = "", style: str = "") -> None:
        self.parts = [(text, style)]

    def append(self, text: str, style: str = "") -> Text:
        self.parts.append((text, style))
        return self

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.parts)

    def rich(self) -> RichText:
        from rich.text import Text as RichText

        (text, style), *rest = self.parts
        out = RichText(text, style)
        for more, more_style in rest:
            out.append(more, more_style)
        return out


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the view: a label (continuation lines hang after it) and its text, or a
    remediation in Markdown."""

    body: Text
    label: Text | None = None
    indent: int = 0
    markdown: str | None = None


def _text(value: str, style: str = "") -> Text:
    return Text(clean(value), style)


def render(
    report: Report,
    *,
    color: bool = False,
    width: int = 100,
    verbose: bool = False,
    terminal: bool | None = None,
    **_: Any,
) -> str:
    """Render the report for a terminal (``terminal=False``, the default without colour:
    plain text, not wrapped)."""
    rows = view(report, verbose=verbose)
    if not (color if terminal is None else terminal):
        return "".join(_plain(row) for row in rows)
    from rich.console import Console

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
    for block in renderables(report, verbose=verbose):
        console.print(block)
    return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))


def renderables(report: Report, *, verbose: bool = False) -> list[RenderableType]:
    """The view as rich renderables (usable with any Console; they wrap to its width)."""
    return [_renderable(row) for row in view(report, verbose=verbose)]


def _renderable(row: Row) -> RenderableType:
    from rich.markdown import Markdown
    from rich.padding import Padding
    from rich.table import Table

    if row.markdown is not None:
        inner: RenderableType = Markdown(clean(row.markdown), hyperlinks=False)
    elif row.label is not None:
        grid = Table.grid()
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row(row.label.rich(), row.body.rich())
        inner = grid
    else:
        inner = row.body.rich()
    return Padding(inner, (0, 0, 0, row.indent)) if row.indent else inner


def _plain(row: Row) -> str:
    pad = " " * row.indent
    if row.markdown is not None:
        return "".join(
            f"{pad}{line}".rstrip() + "\n" for line in to_plain(clean(row.markdown)).splitlines()
        )
    label = row.label.plain if row.label is not None else ""
    lines = (label + row.body.plain).split("\n")
    return "".join(f"{pad}{line}\n" for line in lines)


# --- the view ---------------------------------------------------------------------------------


def view(report: Report, *, verbose: bool = False) -> list[Row]:
    """The rows of the terminal view (``verbose``: everything, else one screen)."""
    top = report.primary
    style = "bold red" if top and top.kind == "cause" else ("bold yellow" if top else "bold green")
    rows = [Row(_text(report.verdict, style), Text("crashlens: ", "bold"))]
    marks = _Marks()
    if verbose and report.first_failure is not None:
        rows.append(Row(_text(report.story)))
    hosts = {r.host for r in report.ranks if r.host}
    shifted = {
        h: c for h, c in report.clock_skew.items() if c.applied and c.offset_s and h in hosts
    }
    if verbose and shifted:
        parts = [
            f"{h} {c.offset_s:+.3f}s ±{c.uncertainty_s:.3f}" for h, c in sorted(shifted.items())
        ]
        rows.append(Row(_text(", ".join(parts), "dim"), Text("Clock skew corrected: ", "dim")))
    if report.first_failure is not None:
        rows += _first_failure(report.first_failure, marks, verbose=verbose)
        if verbose:
            rows += _user_stack(report)
    if verbose:
        for i, cause in enumerate(report.causes, 1):
            rows += _cause_block(i, cause, report.first_failure, marks)
    elif top is not None:
        rows += _summary(report, top)
    if marks.inferred:
        rows.append(Row(Text(INFERRED_LEGEND, "dim")))
    rows += _flight(report, verbose=verbose)
    rows += _inventory(report, verbose=verbose)
    return rows


def _user_stack(report: Report) -> list[Row]:
    """The first failure's traceback as the user follows it: their frames with the source
    line, each run of library frames folded into one line."""
    ff = report.first_failure
    if ff is None or ff.frame is None:
        return []
    tb = next(
        (
            t
            for t in report.tracebacks
            if t.source.path == ff.file and t.start_line <= ff.line <= t.final.lineno
        ),
        None,
    )
    if tb is None or not tb.final.frames:
        return []
    rows = [Row(Text("Stack (your frames; most recent call last):", "dim"), indent=2)]
    folded = 0
    for frame in tb.final.frames:
        if not frame.user_code:
            folded += 1
            continue
        if folded:
            rows.append(Row(_text(f"… {plural(folded, 'library frame')}", "dim"), indent=4))
            folded = 0
        rows.append(Row(_text(str(frame)), indent=4))
        if frame.code:
            rows.append(Row(_text(frame.code, "bold"), indent=6))
    if folded:
        rows.append(Row(_text(f"… {plural(folded, 'library frame')}", "dim"), indent=4))
    return rows


def _flight(report: Report, *, verbose: bool) -> list[Row]:
    """What the Flight Recorder dumps say: how many were read, whose are missing, and (verbose)
    each finding and where each rank was."""
    record = report.flight
    if record is None:
        return []
    versions = sorted({d.version for d in record.dumps})
    said = f"{plural(len(record.dumps), 'dump')} (format {', '.join(versions) or '?'})"
    if record.missing:
        said += f"; no dump from rank {rank_list(list(record.missing))}"
    rows = [Row(_text(said), Text("Flight Recorder: ", "bold"))]
    if verbose:
        rows += [Row(_text(f.text), indent=2) for f in record.findings]
        for dump in record.dumps:
            last = ", ".join(f"{c.op} #{c.seq} ({c.group})" for c in dump.last_calls())
            rows.append(
                Row(_text(f"rank {dump.rank} last called {last or 'nothing'}", "dim"), indent=2)
            )
    return rows


class _Marks:
    """Which marks the view used (each one gets a legend line)."""

    def __init__(self) -> None:
        self.inferred = False

    def when(self, t: float | None, inferred: bool) -> str:
        stamp = (iso(t) or "").replace("T", " ")
        if stamp and inferred:
            self.inferred = True
            return stamp + "~"
        return stamp


def _first_failure(ff: FirstFailure, marks: _Marks, *, verbose: bool) -> list[Row]:
    subject = ff.subject()
    when = marks.when(ff.time, ff.time_inferred)
    at = f" at {when}" if when else ""
    head = f"{subject[0].upper()}{subject[1:]} {ff.verb}"
    rows = [Row(_text(f"{at} ({location(ff.file, ff.line)})"), Text(head, "bold"))]
    if ff.frame is not None:
        rows.append(Row(_text(str(ff.frame)), Text("in your code: ", "dim"), indent=2))
        if ff.frame.code:
            rows.append(Row(_text(ff.frame.code, "bold"), indent=4))
    text = ff.text if verbose else cut_words(ff.text, SHORT_MESSAGE)
    rows.append(Row(_text(text, "red"), indent=2))
    return rows


def _summary(report: Report, top: Cause) -> list[Row]:
    """The default view's cause, fixes and symptoms."""
    rule = top.match.rule
    label = "Cause: " if top.kind == "cause" else "Symptom (no root cause visible): "
    head = _text(rule.title, "bold")
    head.append(f"  {top.class_label} · confidence {top.confidence:.2f} · ", "cyan")
    head.append(f"[{rule.id}]", "dim")
    rows = [Row(head, Text(label, "bold"))]
    rows += _resemblance(top, verbose=False)
    if top.remediation:
        fixes, more = top_fixes(top.remediation)
        rows.append(Row(Text("Fix:", "bold")))
        rows.append(Row(Text(""), markdown=fixes, indent=2))
        if more:
            rows.append(Row(Text(f"(+{plural(more, 'more step')}: --verbose)", "dim"), indent=2))
    if top.explains:
        rows.append(Row(_text(_symptom_line(top.explains)), Text("Symptoms: ", "bold")))
    others = len(report.causes) - 1
    if others > 0:
        titles = ", ".join(c.match.rule.title for c in report.causes[1:3])
        tail = f" (+{others - 2})" if others > 2 else ""
        rows.append(Row(_text(f"{titles}{tail}", "dim"), Text("Also found: ", "dim")))
    return rows


def _resemblance(cause: Cause, *, verbose: bool, indent: int = 0) -> list[Row]:
    """What a finding that tells how, not why, resembles: its class, record and nearest reports."""
    r = cause.resemblance
    if r is None or not r.reports:
        return []
    head = f"{resembles(r)}, nearest first:"
    rows = [Row(_text(head), Text("Resembles: ", "bold"), indent=indent)]
    for known in r.reports if verbose else r.reports[:1]:
        line = f"{known.source}: {cut_words(known.exception, SHORT_MESSAGE)}"
        rows.append(Row(_text(line, "dim"), Text("- "), indent=indent + 2))
    return rows


def _symptom_line(explains: list[Explained]) -> str:
    ordered = sorted(explains, key=lambda e: -e.count)
    parts = [f"{e.title} ×{e.count}{on_ranks(e.ranks)}" for e in ordered[:TOP_SYMPTOMS]]
    more = len(explains) - TOP_SYMPTOMS
    tail = f"; +{more} more" if more > 0 else ""
    return "; ".join(parts) + tail + " (explained by the cause)"


def _cause_block(i: int, cause: Cause, ff: FirstFailure | None, marks: _Marks) -> list[Row]:
    rule = cause.match.rule
    kind = "cause" if cause.kind == "cause" else "symptom (no root cause visible)"
    color = "bold red" if cause.kind == "cause" and i == 1 else "bold yellow"
    head = _text(f"#{i} {rule.title} — {kind}", color)
    meta = f"{cause.class_label} · confidence {cause.confidence:.2f} · severity {rule.severity}"
    meta += f" · [{rule.id}]" + on_ranks(cause.match.ranks).replace(" on ", " · ", 1)
    rows = [Row(Text("")), Row(head), Row(_text(meta, "dim"), indent=2)]
    if cause.user_frame is not None:
        rows.append(Row(_text(str(cause.user_frame)), Text("In your code: ", "bold"), indent=2))
    rows += _resemblance(cause, verbose=True, indent=2)
    rows.append(Row(Text("Evidence:", "bold"), indent=2))
    for ev in cause.evidence[:MAX_EVIDENCE_SHOWN]:
        rows += _evidence(ev, ff, marks)
    more = len(cause.evidence) - MAX_EVIDENCE_SHOWN
    if more > 0:
        rows.append(Row(Text(f"(+{more} more; --format json lists all)", "dim"), indent=4))
    if cause.explains:
        rows.append(Row(Text("Explains (symptoms, not causes):", "bold"), indent=2))
        for e in cause.explains:
            line = f"{e.title} [{e.rule_id}] ×{e.count}{on_ranks(e.ranks)}"
            rows.append(Row(_text(line), Text("- "), indent=4))
    if cause.remediation:
        rows.append(Row(Text("Fix:", "bold"), indent=2))
        rows.append(Row(Text(""), markdown=cause.remediation, indent=4))
    if rule.references:
        rows.append(Row(_text(" ".join(rule.references), "dim"), Text("See: ", "dim"), indent=2))
    return rows


def _evidence(ev: Evidence, ff: FirstFailure | None, marks: _Marks) -> list[Row]:
    parts = [location(ev.file, ev.line)]
    if ev.rank is not None:
        parts.append(f"rank {ev.rank}")
    if ev.host:
        parts.append(ev.host)
    when = marks.when(ev.time, ev.time_inferred)
    parts.append(when or "no time")
    rows = [Row(_text("  ".join(parts), "dim"), indent=4)]
    if ff is not None and (ff.file, ff.line) == (ev.file, ev.line):
        rows.append(Row(Text("(the first failure, above)", "dim"), indent=6))
    else:
        rows.append(Row(_text(ev.text), indent=6))
    return rows


def _inventory(report: Report, *, verbose: bool) -> list[Row]:
    read = [f for f in report.inputs if f.skipped is None]
    skipped = [f for f in report.inputs if f.skipped]
    parts = [f"{plural(len(read), 'file')} ({human_bytes(sum(f.bytes for f in read))})"]
    if report.ranks and any(r.rank is not None for r in report.ranks):
        parts.append(plural(sum(1 for r in report.ranks if r.rank is not None), "rank"))
    parts.append(plural(report.rules_loaded, "rule"))
    if skipped and not verbose:
        parts.append(f"{len(skipped)} skipped")
    if not verbose:
        parts.append("more: --verbose")
    rows = [Row(Text("Read " + " · ".join(parts) + ".", "dim"))]
    if verbose:
        for f in read:
            rows.append(Row(_text(f"{f.path} ({human_bytes(f.bytes)}, {f.kind})", "dim"), indent=2))
        for f in skipped:
            rows.append(Row(_text(f"skipped {f.path}: {f.skipped}", "dim"), indent=2))
    return rows
