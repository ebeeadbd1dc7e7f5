"""A single self-contained HTML page, meant to be attached to a ticket and opened offline.

Nothing is fetched: styles are inline, there is no script, and a restrictive
Content-Security-Policy forbids the page from loading anything even if a log line managed to
smuggle markup in. Every piece of log text goes through :func:`html.escape` (attributes and SVG
``<title>`` tooltips included). Rule remediation is Markdown, rendered by markdown-it with raw
HTML off, no images and links only to http(s) URLs (:mod:`crashlens.render.remedy`); the values
filled into it from the logs are plain text or code spans, so they can never become markup.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crashlens.model import NoteKind, headline, iso, location, plural
from crashlens.render.common import clean, rank_list, resembles
from crashlens.render.remedy import is_http_url, to_html

if TYPE_CHECKING:
    from crashlens.model import Cause, Evidence, Resemblance
    from crashlens.report import Report

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)
MAX_TEXT = 2000
MAX_TRACEBACKS = 50
SVG_WIDTH = 1120
LABEL_W = 150
UNTIMED_W = 70
PLOT_RIGHT = 24
LAUNCHER = "launcher/system"


def esc(text: object) -> str:
    """Escape any value for HTML text or a quoted attribute, control characters made visible."""
    s = clean(str(text))
    if len(s) > MAX_TEXT:
        s = s[:MAX_TEXT] + " …"
    return html.escape(s, quote=True)


def esc_path(text: object) -> str:
    """:func:`esc`, with a line-break opportunity after each ``/`` (paths wrap at a
    directory, never inside a name)."""
    return esc(text).replace("/", "/<wbr>")


def render(report: Report, *, title: str | None = None, **_: Any) -> str:
    """Render ``report`` as one HTML document (UTF-8 text, no external resources)."""
    page_title = title or "crashlens report"
    body = "\n".join(
        part
        for part in (
            _header(report, page_title),
            _first_failure(report),
            _timeline_section(report),
            _causes(report),
            _cascade(report),
            _environment(report),
            _tracebacks(report),
            _collectives(report),
            _rank_table(report),
            _inventory(report),
            _footer(report),
        )
        if part
    )
    return page(f"{page_title}: {report.verdict}", body, STYLE)


def page(title: str, body: str, style: str) -> str:
    """A self-contained HTML page: no script, nothing fetched (the CSP says so), the title
    escaped; ``body`` is HTML the caller escaped."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>{esc(title)}</title>\n"
        f"<style>{style}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


# --- header and first failure ---------------------------------------------------------------


def _status(report: Report) -> str:
    top = report.primary
    if top is None:
        return "ok"
    return "cause" if top.kind == "cause" else "symptom"


def _header(report: Report, page_title: str) -> str:
    status = _status(report)
    label = {"ok": "No failure found", "cause": "Root cause found", "symptom": "Symptom only"}
    return (
        f'<header class="verdict {status}">\n'
        f'<div class="brand">{esc(page_title)}</div>\n'
        f'<div class="status">{label[status]}</div>\n'
        f"<h1>{esc(report.verdict)}</h1>\n</header>"
    )


def _first_failure(report: Report) -> str:
    ff = report.first_failure
    if ff is None:
        return ""
    rows = [
        ("Rank", "?" if ff.rank is None else str(ff.rank)),
        ("Host", ff.host or "unknown"),
        ("Time", _ff_time(report)),
        ("Where", location(ff.file, ff.line)),
        ("Kind", ff.kind),
        ("Rule", ff.rule_id or "-"),
    ]
    if ff.frame is not None:
        rows.append(("In your code", str(ff.frame)))
    cells = "".join(f"<div><dt>{k}</dt><dd>{esc_path(v)}</dd></div>" for k, v in rows)
    return (
        '<section class="card first">\n<h2>First failure</h2>\n'
        f'<dl class="facts">{cells}</dl>\n<pre class="log hl">{esc(ff.text)}</pre>\n</section>'
    )


def _ff_time(report: Report) -> str:
    """The first failure's time, else the time the timeline inferred for the same line."""
    ff = report.first_failure
    assert ff is not None
    if ff.time is not None:
        return _when(ff.time, inferred=bool(getattr(ff, "time_inferred", False)))
    frame = report.timeline
    same = frame[(frame["source"] == ff.file) & (frame["line"] == ff.line)]
    times = [t for t in (_ts(x) for x in same["time"]) if t is not None]
    return _when(min(times), inferred=True) if times else "no timestamp"


def _when(t: float | None, *, inferred: bool) -> str:
    if t is None:
        return "no timestamp"
    stamp = (iso(t) or "").replace("T", " ")
    return stamp + (" (inferred)" if inferred else "")


# --- causes -----------------------------------------------------------------------------------


def _causes(report: Report) -> str:
    if not report.causes:
        return (
            '<section class="card"><h2>Causes</h2>'
            "<p>No failure was found in the logs.</p></section>"
        )
    items = "\n".join(_cause(i, c) for i, c in enumerate(report.causes, 1))
    return f'<section>\n<h2 class="out">Ranked causes</h2>\n{items}\n</section>'


def _cause(i: int, cause: Cause) -> str:
    rule = cause.match.rule
    pct = max(0.0, min(1.0, cause.confidence)) * 100
    kind = "cause" if cause.kind == "cause" else "symptom"
    kind_label = "root cause" if kind == "cause" else "symptom (no root cause visible)"
    ranks = cause.match.ranks
    meta = [
        f'<span class="badge cls">{esc(cause.class_label)}</span>',
        f'<span class="badge">rule <code>{esc(rule.id)}</code></span>',
        f'<span class="badge sev-{esc(rule.severity)}">severity {esc(rule.severity)}</span>',
        f'<span class="badge">{esc(kind_label)}</span>',
    ]
    if ranks:
        meta.append(f'<span class="badge">ranks {esc(rank_list(ranks))}</span>')
    if cause.match.hosts:
        meta.append(f'<span class="badge">hosts {esc(", ".join(cause.match.hosts[:8]))}</span>')
    evidence = "\n".join(_evidence(ev) for ev in cause.evidence)
    parts = [
        f'<article class="card cause {kind}" id="cause-{i}">',
        f'<div class="cause-head"><span class="num">#{i}</span><h3>{esc(rule.title)}</h3>'
        f'<div class="conf" title="confidence {cause.confidence:.2f}">'
        f'<div class="bar"><span style="width:{pct:.0f}%"></span></div>'
        f"<b>{cause.confidence:.2f}</b></div></div>",
        f'<div class="meta">{"".join(meta)}</div>',
    ]
    if rule.description:
        parts.append(f'<p class="desc">{esc(rule.description)}</p>')
    if cause.resemblance is not None and cause.resemblance.reports:
        parts.append(_resemblance(cause.resemblance))
    parts.append(f"<h4>Evidence</h4>\n{evidence}")
    if cause.explains:
        parts.append(_explains_table(cause))
    if cause.user_frame is not None:
        parts.append(
            f'<p class="frame">In your code: <code>{esc_path(cause.user_frame)}</code></p>'
        )
    if cause.remediation:
        body = to_html(clean(cause.remediation))
        parts.append(f'<h4>Remediation</h4>\n<div class="remedy">{body}</div>')
    if rule.references:
        refs = "".join(f"<li>{_reference(r)}</li>" for r in rule.references)
        parts.append(f'<h4>References</h4><ul class="refs">{refs}</ul>')
    parts.append("</article>")
    return "\n".join(parts)


def _resemblance(r: Resemblance) -> str:
    """What a finding that tells how, not why, resembles: its class, record and nearest reports."""
    items = "".join(
        f"<li>{_reference(k.source)}: <code>{esc(k.exception)}</code></li>" for k in r.reports
    )
    return (
        f"<h4>Resembles known reports of {esc(r.cls)}</h4>"
        f'<p class="desc">No rule names its cause; it resembles {esc(resembles(r))}. '
        "Nearest first:</p>"
        f'<ul class="refs">{items}</ul>'
    )


def _reference(ref: str) -> str:
    """Rule references are links when they are http(s) URLs (never fetched, only navigable);
    anything else is text."""
    if is_http_url(ref):
        return f'<a href="{esc(ref)}" rel="noopener noreferrer">{esc(ref)}</a>'
    return esc(ref)


def _evidence(ev: Evidence) -> str:
    who = "rank ?" if ev.rank is None else f"rank {ev.rank}"
    host = f" · {ev.host}" if ev.host else ""
    where = location(ev.file, ev.line)
    context = "".join(f'<span class="ctx">{esc(line)}</span>\n' for line in ev.context)
    return (
        '<div class="evidence">'
        f'<div class="evhead"><code>{esc_path(where)}</code><span>{esc(who + host)}</span>'
        f"<span>{esc(_when(ev.time, inferred=ev.time_inferred))}</span></div>"
        f'<pre class="log">{context}<span class="hl">{esc(ev.text)}</span></pre></div>'
    )


def _explains_table(cause: Cause) -> str:
    rows = "".join(
        f"<tr><td>{esc(e.title)}</td><td><code>{esc(e.rule_id)}</code></td>"
        f"<td>{esc(e.cls)}</td><td class='n'>{e.count}</td><td>{esc(rank_list(list(e.ranks)))}</td>"
        f"<td>{esc(_when(e.first_seen, inferred=False))}</td></tr>"
        for e in cause.explains
    )
    return (
        "<h4>Explains these downstream symptoms</h4>"
        '<table class="grid"><thead><tr><th>Symptom</th><th>Rule</th><th>Class</th>'
        f"<th>Count</th><th>Ranks</th><th>First seen</th></tr></thead><tbody>{rows}</tbody></table>"
    )


# --- cascade summary --------------------------------------------------------------------------


def _cascade(report: Report) -> str:
    """Symptoms grouped by class: what the reader can stop worrying about, and why."""
    by_cls: dict[str, list[tuple[str, str, int, tuple[int, ...]]]] = defaultdict(list)
    for cause in report.causes:
        for e in cause.explains:
            by_cls[e.cls].append((e.title, cause.match.rule.title, e.count, e.ranks))
    if not by_cls:
        return ""
    rows = []
    for cls in sorted(by_cls, key=lambda k: -sum(x[2] for x in by_cls[k])):
        entries = by_cls[cls]
        total = sum(x[2] for x in entries)
        ranks = sorted({r for x in entries for r in x[3]})
        what = "; ".join(f"{t} (×{n}), caused by {c}" for t, c, n, _ in entries)
        rows.append(
            f"<tr><td><span class='badge cls'>{esc(cls)}</span></td><td class='n'>{total}</td>"
            f"<td>{esc(rank_list(ranks))}</td><td>{esc(what)}</td></tr>"
        )
    return (
        '<section class="card">\n<h2>Cascade: symptoms explained</h2>\n'
        "<p class='muted'>These messages are consequences of the cause above, "
        "not independent failures.</p>"
        '<table class="grid"><thead><tr><th>Class</th><th>Count</th><th>Ranks</th>'
        f"<th>Explained as</th></tr></thead><tbody>{''.join(rows)}</tbody></table>\n</section>"
    )


# --- environment ------------------------------------------------------------------------------


def _environment(report: Report) -> str:
    """Environment facts, when a future Report carries them (``environment``: a mapping)."""
    env = getattr(report, "environment", None)
    if not env or not isinstance(env, dict):
        return ""
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td><code>{esc(v)}</code></td></tr>" for k, v in sorted(env.items())
    )
    return f'<section class="card"><h2>Environment</h2><table class="kv">{rows}</table></section>'


# --- tracebacks -------------------------------------------------------------------------------


def _tracebacks(report: Report) -> str:
    """Each fatal traceback collapsed, in full (as assembled, up to its cap)."""
    tbs = [tb for tb in report.tracebacks if tb.fatal]
    if not tbs:
        return ""
    items = []
    for tb in tbs[:MAX_TRACEBACKS]:
        who = (
            f"rank {tb.rank}"
            if tb.rank is not None
            else (f"{tb.host} launcher" if tb.host else LAUNCHER)
        )
        final = tb.final
        title = headline(final)
        when = _when(tb.time, inferred=tb.time_inferred)
        lines = tb.text.splitlines()
        body = "".join(f"{esc(line)}\n" for line in lines[:-1])
        body += f'<span class="hl">{esc(lines[-1])}</span>\n' if lines else ""
        items.append(
            f"<details><summary><b>{esc(title[:200])}</b> · {esc(who)} · {esc(when)} · "
            f"<code>{esc_path(f'{tb.source.path}:{tb.start_line}')}</code></summary>"
            f'<pre class="log">{body}</pre></details>'
        )
    more = len(tbs) - MAX_TRACEBACKS
    note = f"<p class='muted'>… and {more} more.</p>" if more > 0 else ""
    return (
        f'<section class="card">\n<h2>Tracebacks ({len(tbs)})</h2>\n'
        + "\n".join(items)
        + note
        + "\n</section>"
    )


# --- ranks and inventory ----------------------------------------------------------------------


def _collectives(report: Report) -> str:
    """Where each rank was in its collectives when it dumped its Flight Recorder record: the
    finding's culprits and waiting ranks marked, and ranks that left no dump listed."""
    record = report.flight
    if record is None:
        return ""
    role: dict[int, str] = {}
    for f in record.findings:
        role.update({r: "waiting" for r in f.waiting})
        role.update({r: "culprit" for r in f.culprits})
    findings = "".join(f"<p class='finding'>{esc(f.text)}</p>" for f in record.findings)
    rows = "".join(
        f"<tr class='{role.get(d.rank, '')}'><td class='n'>{d.rank}</td>"
        f"<td><code>{esc(c.op)}</code> #{c.seq}</td><td>{esc(c.group)}</td>"
        f"<td>{esc(c.shape)}</td><td>{esc(_when(c.time, inferred=False))}</td>"
        f"<td>{esc(role.get(d.rank, '-'))}</td></tr>"
        for d in record.dumps
        for c in d.last_calls()
    )
    rows += "".join(
        f"<tr class='culprit'><td class='n'>{r}</td><td colspan='4'>no dump</td>"
        f"<td>{esc(role.get(r, '-'))}</td></tr>"
        for r in record.missing
    )
    versions = ", ".join(sorted({d.version for d in record.dumps}))
    return (
        '<section class="card collectives">\n<h2>Collectives (Flight Recorder)</h2>\n'
        f"{findings}<p class='muted'>{plural(len(record.dumps), 'dump')}, format "
        f"{esc(versions)}; each rank's last collective per process group</p>"
        '<table class="grid"><thead><tr><th>Rank</th><th>Last collective</th><th>Group</th>'
        "<th>Shape</th><th>Called</th><th>Role</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def _rank_table(report: Report) -> str:
    if not report.ranks:
        return ""
    rows = "".join(
        f"<tr><td class='n'>{'process' if r.rank is None else r.rank}</td>"
        f"<td>{esc(r.host or '-')}</td>"
        f"<td class='n'>{r.lines}</td><td>{esc(_when(r.first_time, inferred=False))}</td>"
        f"<td>{esc(_when(r.last_time, inferred=False))}</td>"
        f"<td class='n'>{'-' if r.exitcode is None else r.exitcode}</td>"
        f"<td><code>{esc(_last(r.last_lines))}</code></td></tr>"
        for r in report.ranks
    )
    return (
        f'<section class="card"><details><summary><h2>Ranks ({len(report.ranks)})</h2>'
        "</summary>"
        '<table class="grid"><thead><tr><th>Rank</th><th>Host</th><th>Lines</th>'
        "<th>First line</th><th>Last line</th><th>Exit</th><th>Last words</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></details></section>"
    )


def _last(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.strip():
            return line if len(line) <= 160 else line[:160] + " …"
    return ""


def _inventory(report: Report) -> str:
    read = [f for f in report.inputs if f.skipped is None]
    skipped = [f for f in report.inputs if f.skipped]
    start, end = _span(report)
    span = "unknown"
    if start is not None and end is not None:
        span = (
            f"{_when(start, inferred=False)} → {_when(end, inferred=False)} ({_dur(end - start)})"
        )
    facts = [
        ("Files read", str(len(read))),
        ("Bytes", f"{sum(f.bytes for f in read):,}"),
        ("Ranks", str(sum(1 for r in report.ranks if r.rank is not None))),
        ("Time span", span),
        ("Rules loaded", str(report.rules_loaded)),
    ]
    cells = "".join(f"<div><dt>{k}</dt><dd>{esc(v)}</dd></div>" for k, v in facts)
    rows = "".join(
        f"<tr><td><code>{esc_path(f.path)}</code></td><td>{esc(f.kind)}</td>"
        f"<td class='n'>{f.bytes:,}</td><td class='n'>{f.lines:,}</td></tr>"
        for f in read
    )
    skip_rows = "".join(
        f"<li><code>{esc_path(f.path)}</code>: {esc(f.skipped)}</li>" for f in skipped
    )
    notes = "".join(
        f"<li>{esc(n)}</li>" for n in report.notes if n.kind is not NoteKind.SKIPPED_FILE
    )
    return (
        '<section class="card">\n<h2>Inputs</h2>\n'
        f'<dl class="facts">{cells}</dl>\n'
        '<table class="grid"><thead><tr><th>File</th><th>Kind</th><th>Bytes</th><th>Lines</th>'
        f"</tr></thead><tbody>{rows}</tbody></table>\n"
        + (f"<h4>Skipped</h4><ul>{skip_rows}</ul>" if skip_rows else "")
        + (f"<h4>Notes</h4><ul>{notes}</ul>" if notes else "")
        + "\n</section>"
    )


def _footer(report: Report) -> str:
    version = f" {report.tool_version}" if report.tool_version else ""
    return (
        f"<footer>Generated by crashlens{esc(version)} · {report.rules_loaded} rules · "
        "times are UTC where the logs gave a zone, else as printed · "
        "this file is self-contained and loads nothing</footer>"
    )


def _span(report: Report) -> tuple[float | None, float | None]:
    times = [t for r in report.ranks for t in (r.first_time, r.last_time) if t is not None]
    times += [t for t in (_ts(x) for x in report.timeline["time"]) if t is not None]
    if not times:
        return None, None
    return min(times), max(times)


def _dur(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# --- value helpers (pandas missing values are NA, NaT or NaN depending on the dtype) ----------


def _missing(value: Any) -> bool:
    import pandas as pd  # only the HTML report reads the timeline frame

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _opt_int(value: Any) -> int | None:
    return None if value is None or _missing(value) else int(value)


def _int(value: Any) -> int:
    return int(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None or _missing(value) or value == "" else str(value)


def _ts(value: Any) -> float | None:
    """A frame time (naive UTC ``Timestamp``) as POSIX seconds."""
    if value is None or _missing(value):
        return None
    import pandas as pd

    stamp = pd.Timestamp(value)
    return float(stamp.value) / 1e9


# --- timeline SVG -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mark:
    """One drawn event: a log line (several timeline rows may share it)."""

    lane: int
    time: float | None
    category: str  # fatal | symptom | exit | other
    label: str
    first: bool


def _timeline_section(report: Report) -> str:
    if _span(report) == (None, None):
        return ""  # no line had a time: a time axis would only show the epoch
    svg = timeline_svg(report)
    if not svg:
        return ""
    untimed = "no time</text>" in svg
    hint = " Marks right of the dashed rule carry no timestamp." if untimed else ""
    legend = (
        '<div class="legend">'
        '<span><i class="lg fatal"></i>fatal (traceback / cause evidence)</span>'
        '<span><i class="lg symptom"></i>symptom (explained downstream)</span>'
        '<span><i class="lg exit"></i>process exit reported by launcher</span>'
        '<span><i class="lg other"></i>other signal</span>'
        '<span><i class="lg first"></i>first failure</span>'
        '<span><i class="lg span"></i>rank logging active</span></div>'
    )
    return (
        '<section class="card">\n<h2>Timeline</h2>\n'
        f"<p class='muted'>One lane per rank (or the process); hover a mark for the log line."
        f"{hint}</p>\n"
        f'<div class="svgwrap">{svg}</div>\n{legend}\n</section>'
    )


def _lanes(report: Report) -> tuple[list[str], dict[int, int], dict[str, int]]:
    """Lane labels; ranks first (numerically), then one lane per host for rank-less rows."""
    ranks = {r.rank for r in report.ranks if r.rank is not None}
    frame = report.timeline
    ranks |= {v for v in (_opt_int(x) for x in frame["rank"]) if v is not None}
    labels = [f"rank {r}" for r in sorted(ranks)]
    rank_lane = {r: i for i, r in enumerate(sorted(ranks))}
    host_by_rank = {r.rank: r.host for r in report.ranks if r.rank is not None and r.host}
    labels = [
        f"rank {r}" + (f" · {host_by_rank[r]}" if r in host_by_rank else "") for r in sorted(ranks)
    ]
    other_lane: dict[str, int] = {}
    # A single-process job: its one rank-less summary is the process, whose lane it is.
    alone = [r for r in report.ranks if r.rank is None] if not ranks else []
    for r in alone:
        key = r.host or LAUNCHER
        other_lane[key] = len(labels)
        labels.append("process" + (f" · {r.host}" if r.host else ""))
    for row in frame.itertuples(index=False):
        if _opt_int(row.rank) is None:
            key = _opt_str(row.host) or LAUNCHER
            if key not in other_lane:
                other_lane[key] = len(labels)
                labels.append(LAUNCHER if key == LAUNCHER else f"launcher · {key}")
    return labels, rank_lane, other_lane


def _marks(report: Report, rank_lane: dict[int, int], other_lane: dict[str, int]) -> list[Mark]:
    cause_ids = {c.rule_id for c in report.causes if c.kind == "cause"}
    symptom_ids = {c.rule_id for c in report.causes if c.kind == "symptom"}
    symptom_ids |= {e.rule_id for c in report.causes for e in c.explains}
    fatal_lines = {
        (ev.file, ev.line) for c in report.causes if c.kind == "cause" for ev in c.evidence
    }
    ff = report.first_failure
    alone = not rank_lane and any(r.rank is None for r in report.ranks)
    grouped: dict[tuple[str, int, int], list[Any]] = defaultdict(list)
    for row in report.timeline.itertuples(index=False):
        rank = _opt_int(row.rank)
        lane = rank_lane[rank] if rank is not None else other_lane[_opt_str(row.host) or LAUNCHER]
        grouped[(str(row.source), _int(row.line), lane)].append(row)
    marks = []
    for (source, line, lane), rows in grouped.items():
        signals = {str(r.signal) for r in rows}
        kinds = {str(r.kind) for r in rows}
        if "traceback" in kinds or (source, line) in fatal_lines or signals & cause_ids:
            cat = "fatal"
        elif signals & symptom_ids:
            cat = "symptom"
        elif "child_failure" in kinds:
            cat = "exit"
        else:
            cat = "other"
        times = [t for t in (_ts(r.time) for r in rows) if t is not None]
        first = ff is not None and (ff.file, ff.line) == (source, line)
        tip = _tooltip(rows, process=alone)
        marks.append(Mark(lane, min(times) if times else None, cat, tip, first))
    marks += _collective_marks(report, rank_lane)
    # Nothing fatal happened before the first failure: an earlier line of a cause (a handled
    # exception, a warning) is drawn as an ordinary signal.
    start = next((m.time for m in marks if m.first and m.time is not None), None)
    if ff is not None and ff.time is not None:
        start = ff.time if start is None else min(start, ff.time)
    if start is not None:
        marks = [
            dataclasses.replace(m, category="other")
            if m.category == "fatal" and not m.first and m.time is not None and m.time < start
            else m
            for m in marks
        ]
    return marks


def _collective_marks(report: Report, rank_lane: dict[int, int]) -> list[Mark]:
    """Each dumped rank's last collective in a finding's group, on its lane: the stuck call the
    others waited in, and where a culprit was instead."""
    record = report.flight
    if record is None:
        return []
    marks = []
    for f in record.findings:
        for dump in record.dumps:
            lane = rank_lane.get(dump.rank)
            call = next((c for c in dump.last_calls() if c.group == f.group), None)
            if lane is None or call is None or call.time is None:
                continue
            culprit = dump.rank in f.culprits
            tip = (
                f"rank {dump.rank} · {iso(call.time)}\nFlight Recorder: "
                f"{'last entered' if culprit else 'waiting in'} {call.op} #{call.seq} "
                f"of group {f.group_label}"
            )
            marks.append(Mark(lane, call.time, "fatal" if culprit else "symptom", tip, False))
    return marks


def _tooltip(rows: list[Any], *, process: bool = False) -> str:
    row = rows[0]
    rank = _opt_int(row.rank)
    who = f"rank {rank}" if rank is not None else (_opt_str(row.host) or LAUNCHER)
    if rank is None and process:
        who = "the process"
    t = _ts(row.time)
    sigs = ", ".join(sorted({str(r.signal) for r in rows}))
    when = _when(t, inferred=bool(row.time_inferred))
    text = str(row.text)
    text = text if len(text) <= 300 else text[:300] + " …"
    return f"{who} · {when}\n{row.source}:{row.line}\n[{sigs}]\n{text}"


def _nice_step(span: float, target: int = 8) -> float:
    steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120]
    steps += [300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800]
    for s in steps:
        if span / s <= target:
            return float(s)
    return float(steps[-1])


def _tick_label(t: float, step: float, first: bool) -> str:
    d = dt.datetime.fromtimestamp(t, dt.UTC)
    fmt = "%H:%M:%S" if step >= 1 else "%H:%M:%S.%f"
    text = d.strftime(fmt)
    if step < 1:
        text = text[:-3]
    if first or step >= 86400:
        text = d.strftime("%Y-%m-%d ") + text
    return text


def timeline_svg(report: Report) -> str:
    """The timeline picture: lanes per rank, real time on x, fatal and symptom marks.

    Lane height shrinks with the number of lanes and labels thin out so 64+ ranks stay
    readable; the first failure is ringed and its time drawn as a vertical rule.
    """
    labels, rank_lane, other_lane = _lanes(report)
    if not labels:
        return ""
    marks = _marks(report, rank_lane, other_lane)
    n = len(labels)
    lane_h = 24.0 if n <= 12 else max(6.0, min(24.0, 640.0 / n))
    label_every = max(1, math.ceil(12.0 / lane_h))
    top, axis_h = 28.0, 34.0
    height = top + n * lane_h + axis_h
    has_untimed = any(m.time is None for m in marks)
    x0 = float(LABEL_W)
    x1 = SVG_WIDTH - PLOT_RIGHT - (UNTIMED_W if has_untimed else 0)
    start, end = _span(report)
    if start is None or end is None:
        start, end = 0.0, 1.0
    if end - start < 1e-3:
        start, end = start - 0.5, end + 0.5
    pad = (end - start) * 0.02
    start, end = start - pad, end + pad

    def x_of(t: float) -> float:
        return x0 + (t - start) / (end - start) * (x1 - x0)

    def y_of(lane: int) -> float:
        return top + lane * lane_h + lane_h / 2

    ff_lane = _first_lane(report, rank_lane, other_lane)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SVG_WIDTH} {height:.0f}" '
        f'width="100%" role="img" aria-label="timeline of {n} lanes" class="timeline">',
        f"<title>Timeline: {plural(n, 'lane')}, {plural(len(marks), 'event line')}</title>",
    ]
    out += _lane_rows(labels, lane_h, top, label_every, ff_lane, x1, has_untimed)
    out += _axis(start, end, x_of, top, n * lane_h)
    out += _activity(report, rank_lane, other_lane, x_of, y_of, lane_h)
    if has_untimed:
        ux = x1 + 8
        out.append(
            f'<line x1="{ux:.1f}" y1="{top}" x2="{ux:.1f}" y2="{top + n * lane_h:.1f}" '
            'class="untimed-rule"/>'
            f'<text x="{ux + UNTIMED_W / 2:.1f}" y="{top - 8}" class="tick" '
            'text-anchor="middle">no time</text>'
        )
    out += _first_rule(report, marks, x_of, top, n * lane_h)
    r = max(2.0, min(6.0, lane_h * 0.3))
    order = {"other": 0, "exit": 1, "symptom": 2, "fatal": 3}
    for m in sorted(marks, key=lambda m: (order[m.category], m.first)):
        x = x_of(m.time) if m.time is not None else x1 + 8 + UNTIMED_W / 2
        out.append(_mark_svg(m, x, y_of(m.lane), r))
    out.append("</svg>")
    return "\n".join(out)


def _first_lane(report: Report, rank_lane: dict[int, int], other_lane: dict[str, int]) -> int:
    ff = report.first_failure
    if ff is None:
        return -1
    if ff.rank is not None and ff.rank in rank_lane:
        return rank_lane[ff.rank]
    return other_lane.get(ff.host or LAUNCHER, -1)


def _lane_rows(
    labels: list[str],
    lane_h: float,
    top: float,
    every: int,
    ff_lane: int,
    x1: float,
    has_untimed: bool,
) -> list[str]:
    out = []
    right = x1 + (UNTIMED_W + 8 if has_untimed else 0)
    font = max(8.0, min(12.0, lane_h * 0.6)) if lane_h >= 10 else 9.0
    for i, label in enumerate(labels):
        y = top + i * lane_h
        cls = "lane-a" if i % 2 == 0 else "lane-b"
        if i == ff_lane:
            cls = "lane-ff"
        out.append(
            f'<rect x="0" y="{y:.1f}" width="{right:.1f}" height="{lane_h:.2f}" class="{cls}"/>'
        )
        near_ff = ff_lane >= 0 and i != ff_lane and abs(i - ff_lane) < every
        if (i % every == 0 and not near_ff) or i == ff_lane or label.startswith("launcher"):
            weight = ' font-weight="700"' if i == ff_lane else ""
            out.append(
                f'<text x="{LABEL_W - 8}" y="{y + lane_h / 2:.1f}" class="lane-label" '
                f'font-size="{font:.1f}" text-anchor="end" dominant-baseline="middle"{weight}>'
                f"{esc(label)}</text>"
            )
    return out


def _axis(start: float, end: float, x_of: Any, top: float, plot_h: float) -> list[str]:
    step = _nice_step(end - start)
    t = math.ceil(start / step) * step
    out = []
    bottom = top + plot_h
    first = True
    while t <= end:
        x = x_of(t)
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom + 4:.1f}" class="grid"/>'
            f'<text x="{x:.1f}" y="{bottom + 18:.1f}" class="tick" text-anchor="middle">'
            f"{esc(_tick_label(t, step, first))}</text>"
        )
        first = False
        t += step
    return out


def _activity(
    report: Report,
    rank_lane: dict[int, int],
    other_lane: dict[str, int],
    x_of: Any,
    y_of: Any,
    lane_h: float,
) -> list[str]:
    """A faint bar per rank (or the one process) from its first to its last timestamped line
    (silence shows)."""
    out = []
    h = max(2.0, lane_h * 0.35)
    for r in report.ranks:
        if r.first_time is None or r.last_time is None:
            continue
        lane = rank_lane.get(r.rank) if r.rank is not None else other_lane.get(r.host or LAUNCHER)
        if lane is None:
            continue
        xa, xb = x_of(r.first_time), x_of(r.last_time)
        who = f"rank {r.rank}" if r.rank is not None else "the process"
        tip = f"{who}: logged {_when(r.first_time, inferred=False)}"
        tip += f" → {_when(r.last_time, inferred=False)}"
        out.append(
            f'<rect x="{xa:.1f}" y="{y_of(lane) - h / 2:.1f}" '
            f'width="{max(2.0, xb - xa):.1f}" height="{h:.1f}" rx="{h / 2:.1f}" class="span">'
            f"<title>{esc(tip)}</title></rect>"
        )
    return out


def _first_rule(
    report: Report, marks: list[Mark], x_of: Any, top: float, plot_h: float
) -> list[str]:
    ff = report.first_failure
    if ff is None:
        return []
    t = ff.time
    if t is None:
        t = next((m.time for m in marks if m.first and m.time is not None), None)
    if t is None:
        return []
    x = x_of(t)
    return [
        f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{top + plot_h:.1f}" class="ff-rule"/>'
        f'<text x="{x + 4:.1f}" y="{top - 8}" class="ff-label">first failure</text>'
    ]


def _mark_svg(m: Mark, x: float, y: float, r: float) -> str:
    tip = f"<title>{esc(m.label)}</title>"
    ring = ""
    if m.first:
        ring = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r * 2.1:.1f}" class="ff-ring"/>'
    if m.category == "fatal":
        pts = f"{x:.1f},{y - r * 1.4:.1f} {x + r * 1.4:.1f},{y:.1f} {x:.1f},{y + r * 1.4:.1f} "
        pts += f"{x - r * 1.4:.1f},{y:.1f}"
        shape = f'<polygon points="{pts}" class="m-fatal">{tip}</polygon>'
    elif m.category == "symptom":
        pts = f"{x:.1f},{y - r:.1f} {x + r:.1f},{y + r * 0.8:.1f} {x - r:.1f},{y + r * 0.8:.1f}"
        shape = f'<polygon points="{pts}" class="m-symptom">{tip}</polygon>'
    elif m.category == "exit":
        shape = (
            f'<rect x="{x - r * 0.8:.1f}" y="{y - r * 0.8:.1f}" width="{r * 1.6:.1f}" '
            f'height="{r * 1.6:.1f}" class="m-exit">{tip}</rect>'
        )
    else:
        shape = (
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r * 0.7:.1f}" class="m-other">{tip}</circle>'
        )
    return ring + shape


STYLE = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#f6f8fa;--card:#fff;--red:#cf222e;
--amber:#bf8700;--green:#1a7f37;--blue:#0969da;--mono:ui-monospace,SFMono-Regular,Menlo,
Consolas,"Liberation Mono",monospace}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.5 -apple-system,"Segoe UI",
Helvetica,Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:20px;margin:6px 0 0;line-height:1.35}
h2{font-size:16px;margin:0 0 12px}
h2.out{margin:24px 0 12px}
h3{font-size:16px;margin:0;flex:1}
h4{font-size:13px;margin:16px 0 6px;color:var(--muted);text-transform:uppercase;
letter-spacing:.04em}
code,pre{font-family:var(--mono);font-size:12px}
.verdict{border-radius:10px;padding:18px 22px;color:#fff;margin-bottom:16px}
.verdict.cause{background:linear-gradient(135deg,#a40e26,#cf222e)}
.verdict.symptom{background:linear-gradient(135deg,#9a6700,#bf8700)}
.verdict.ok{background:linear-gradient(135deg,#116329,#1a7f37)}
.brand{font-size:12px;opacity:.85;letter-spacing:.06em;text-transform:uppercase}
.status{font-weight:600;margin-top:2px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 20px;
margin-bottom:16px}
.card.first{border-left:5px solid var(--red)}
.cause.cause{border-left:5px solid var(--red)}
.cause.symptom{border-left:5px solid var(--amber)}
.cause-head{display:flex;align-items:center;gap:12px}
.num{font-weight:700;color:var(--muted)}
.conf{display:flex;align-items:center;gap:8px}
.bar{width:120px;height:8px;background:#eaeef2;border-radius:4px;overflow:hidden}
.bar span{display:block;height:100%;background:var(--blue)}
.meta{margin:8px 0 0;display:flex;flex-wrap:wrap;gap:6px}
.badge{display:inline-block;border:1px solid var(--line);border-radius:12px;padding:1px 9px;
font-size:12px;background:#f6f8fa;color:var(--fg)}
.badge.cls{background:#ddf4ff;border-color:#b6e3ff;color:#0550ae;font-weight:600}
.sev-critical{background:#ffebe9;border-color:#ffcecb;color:#a40e26}
.sev-high{background:#fff1e5;border-color:#ffd8b5;color:#953800}
.desc{color:var(--muted);margin:10px 0 0}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:8px 16px;
margin:0 0 10px}
.facts dt{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.facts dd{margin:0;font-weight:600;overflow-wrap:break-word;word-break:normal}
pre{white-space:pre-wrap;overflow-wrap:break-word;word-break:normal;margin:0}
pre.log{background:#0d1117;color:#c9d1d9;border-radius:6px;padding:10px 12px;overflow:auto}
pre.log .ctx{color:#8b949e}
pre.log .hl,pre.log.hl{color:#ffa198;font-weight:600}
.remedy{background:#f0fff4;border:1px solid #aceebb;border-radius:6px;padding:10px 12px;
font-size:13px;overflow-wrap:break-word}
.remedy p{margin:0 0 6px}.remedy ol,.remedy ul{margin:0 0 6px;padding-left:22px}
.remedy li{margin:2px 0}.remedy>:last-child{margin-bottom:0}
.remedy code,.frame code{background:#eaeef2;border-radius:4px;padding:0 4px}
.frame{margin:8px 0 0}
.evidence{margin:8px 0}
.evhead{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;color:var(--muted);margin-bottom:3px}
.evhead code{color:var(--fg)}
table{border-collapse:collapse;width:100%}
.grid th,.grid td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;
vertical-align:top;font-size:13px}
.grid th{background:#f6f8fa;font-size:12px;color:var(--muted)}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.kv th{text-align:left;padding:3px 12px 3px 0;color:var(--muted);font-weight:500}
.muted{color:var(--muted);margin:0 0 10px}
.collectives tr.culprit td{background:rgba(220,38,38,.12);font-weight:600}
.collectives tr.waiting td{color:var(--muted)}
.finding{font-weight:600}
details{border:1px solid var(--line);border-radius:6px;margin:6px 0;padding:0 10px}
details>summary{cursor:pointer;padding:6px 0}
details>summary h2{display:inline;font-size:16px}
details[open]>summary{border-bottom:1px solid var(--line);margin-bottom:8px}
details pre.log{margin-bottom:10px}
.card>details{border:0;padding:0;margin:0}
.svgwrap{overflow-x:auto}
svg.timeline{display:block;min-width:760px;font-family:-apple-system,"Segoe UI",Helvetica,Arial,
sans-serif}
.lane-a{fill:#ffffff}.lane-b{fill:#f6f8fa}.lane-ff{fill:#ffebe9}
.lane-label{fill:#1f2328}
.tick{fill:#59636e;font-size:11px}
.grid{stroke:#d1d9e0;stroke-width:1}
line.grid{stroke-dasharray:2 3}
.span{fill:#0969da;opacity:.16}
.untimed-rule{stroke:#8c959f;stroke-dasharray:4 3}
.ff-rule{stroke:#cf222e;stroke-width:1.5;stroke-dasharray:5 3}
.ff-label{fill:#cf222e;font-size:11px;font-weight:700}
.ff-ring{fill:none;stroke:#cf222e;stroke-width:2}
.m-fatal{fill:#cf222e;stroke:#fff;stroke-width:.8}
.m-symptom{fill:#d4a72c;stroke:#7d4e00;stroke-width:.6}
.m-exit{fill:#57606a;stroke:#fff;stroke-width:.6}
.m-other{fill:#8c959f}
.legend{display:flex;flex-wrap:wrap;gap:16px;font-size:12px;color:var(--muted);margin-top:8px}
.lg{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px}
.lg.fatal{background:#cf222e;transform:rotate(45deg)}
.lg.symptom{background:#d4a72c;clip-path:polygon(50% 0,100% 100%,0 100%)}
.lg.exit{background:#57606a}
.lg.other{background:#8c959f;border-radius:50%}
.lg.first{border:2px solid #cf222e;border-radius:50%}
.lg.span{background:#0969da;opacity:.3;border-radius:5px;width:22px}
.refs{margin:0;padding-left:18px}
footer{color:var(--muted);font-size:12px;text-align:center;margin:24px 0}
"""
