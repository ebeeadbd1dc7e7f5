"""A ticket body for GitHub, GitLab or Jira: verdict, causes table, evidence, remediation.

Log text is untrusted. Outside code blocks it is entity-escaped (``&``, ``<``, ``>``) and
markdown punctuation is backslash-escaped, so it can neither open an HTML tag nor become a link
or emphasis. Inside fenced code blocks runs of backticks are broken with a zero-width space so
a log line cannot close the fence and continue as live markdown. The remediation is the rule's
Markdown, passed through (its numbered lists and code spans stay): the values the rank stage
filled into it from the logs are already plain text or code spans.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from crashlens import lazyre
from crashlens.model import iso, location, plural
from crashlens.render.common import clean, on_ranks, rank_list, resembles

if TYPE_CHECKING:
    from crashlens.model import Cause, Evidence
    from crashlens.report import Report

ZWSP = "\u200b"
MAX_EVIDENCE = 3
MAX_LINE = 500
_MD_PUNCT = lazyre.compile(r"([\\`*_\[\]|~])")
_BACKTICKS = lazyre.compile(r"`{2,}")


def md_text(text: str) -> str:
    """Inline-safe text: no HTML, no markdown, one line."""
    s = clean(text).replace("\n", " ")
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCT.sub(r"\\\1", s)


def code_text(text: str) -> str:
    """Text for a fenced block: control characters visible, backtick runs broken up."""
    s = clean(text)
    return _BACKTICKS.sub(lambda m: ZWSP.join(m.group(0)), s)


def inline_code(text: str) -> str:
    """A short value (a path, a rule id) as inline code that cannot escape its backticks."""
    s = clean(text).replace("\n", " ").replace("`", "'")
    return f"`{s}`"


def fence(lines: list[str], lang: str = "text") -> str:
    """A fenced code block of already-cleaned lines."""
    body = "\n".join(code_text(x if len(x) <= MAX_LINE else x[:MAX_LINE] + " …") for x in lines)
    return f"```{lang}\n{body}\n```"


def render(report: Report, **_: Any) -> str:
    """Render ``report`` as a markdown ticket body."""
    parts = [_heading(report)]
    parts += _first_failure(report)
    if report.causes:
        parts.append(_table(report))
        for i, cause in enumerate(report.causes, 1):
            parts += _cause(i, cause)
    parts += _details(report)
    return "\n\n".join(parts).rstrip() + "\n"


def _heading(report: Report) -> str:
    top = report.primary
    icon = "✅" if top is None else ("🔴" if top.kind == "cause" else "🟡")
    return f"## {icon} crashlens: {md_text(report.verdict)}"


def _first_failure(report: Report) -> list[str]:
    ff = report.first_failure
    if ff is None:
        return []
    when = f" at {iso(ff.time)}" if ff.time is not None else ""
    frame = f" (in your code: {inline_code(str(ff.frame))})" if ff.frame is not None else ""
    where = inline_code(location(ff.file, ff.line))
    return [
        f"**First failure:** {ff.subject(md_text)}{ff.kind_note}{when} — {where}{frame}",
        fence([ff.text]),
    ]


def _table(report: Report) -> str:
    rows = [
        "| # | Cause | Class | Confidence | Rule | Ranks |",
        "|---:|---|---|---:|---|---|",
    ]
    for i, c in enumerate(report.causes, 1):
        rule = c.match.rule
        kind = "" if c.kind == "cause" else " _(symptom)_"
        rows.append(
            f"| {i} | {md_text(rule.title)}{kind} | {inline_code(c.class_label)} | "
            f"{c.confidence:.2f} | {inline_code(rule.id)} | {rank_list(c.match.ranks)} |"
        )
    return "\n".join(rows)


def _cause(i: int, cause: Cause) -> list[str]:
    rule = cause.match.rule
    label = inline_code(cause.class_label)
    out = [f"### {i}. {md_text(rule.title)} ({label}, {cause.confidence:.2f})"]
    if cause.resemblance is not None and cause.resemblance.reports:
        r = cause.resemblance
        items = [f"- {_link(k.source)}: {inline_code(k.exception)}" for k in r.reports]
        out.append(f"**Resembles** {md_text(resembles(r))}, nearest first:\n" + "\n".join(items))
    for ev in cause.evidence[:MAX_EVIDENCE]:
        out.append(_evidence_head(ev))
        out.append(fence([*ev.context, ev.text]))
    more = len(cause.evidence) - MAX_EVIDENCE
    if more > 0:
        out.append(f"_… and {more} more evidence line(s)._")
    if cause.explains:
        items = [
            f"- {md_text(e.title)} ({inline_code(e.rule_id)}) ×{e.count}{on_ranks(e.ranks)}"
            for e in cause.explains
        ]
        out.append("**Explains (symptoms, not causes):**\n" + "\n".join(items))
    if cause.user_frame is not None:
        out.append(f"**In your code:** {inline_code(str(cause.user_frame))}")
    if cause.remediation:
        out.append("**Remediation:**\n\n" + remediation(cause.remediation))
    if cause.match.rule.references:
        out.append("**References:** " + ", ".join(_link(r) for r in cause.match.rule.references))
    return out


def remediation(text: str) -> str:
    """The filled remediation as Markdown: control characters made visible, the rest as the
    rule wrote it (its values from the logs are already plain text or code spans)."""
    return clean(text).strip()


def _link(ref: str) -> str:
    """A reference: an autolink when it is an http(s) URL, else inline code."""
    if re.match(r"https?://[^\s<>\"'`]+\Z", ref, re.IGNORECASE):
        return f"<{ref}>"
    return inline_code(ref)


def _evidence_head(ev: Evidence) -> str:
    who = "rank ?" if ev.rank is None else f"rank {ev.rank}"
    host = f" ({md_text(ev.host)})" if ev.host else ""
    when = iso(ev.time)
    stamp = f", {when}{'~' if ev.time_inferred else ''}" if when else ""
    return f"{inline_code(location(ev.file, ev.line))} — {who}{host}{stamp}"


def _details(report: Report) -> list[str]:
    read = [f for f in report.inputs if f.skipped is None]
    skipped = [f for f in report.inputs if f.skipped]
    size = sum(f.bytes for f in read)
    ranked = sum(1 for r in report.ranks if r.rank is not None)
    lines = [
        f"- {plural(len(read), 'file')}, {plural(size, 'byte').replace(str(size), f'{size:,}', 1)}"
        + (f", {plural(ranked, 'rank')}" if ranked else "")
        + f", {plural(report.rules_loaded, 'rule')}",
    ]
    lines += [f"- {inline_code(f.path)}: {f.bytes:,} bytes, {f.lines:,} lines" for f in read[:50]]
    lines += [f"- skipped {inline_code(f.path)}: {md_text(f.skipped or '')}" for f in skipped]
    out = ["<details><summary>Inputs</summary>\n\n" + "\n".join(lines) + "\n\n</details>"]
    ranks = [r for r in report.ranks if r.last_lines]
    if ranks:
        blocks = []
        for r in ranks[:64]:
            head = "the process" if r.rank is None else f"rank {r.rank}"
            if r.host:
                head += f" ({md_text(r.host)})"
            if r.exitcode is not None:
                head += f", exit code {r.exitcode}"
            blocks.append(f"**{head}**\n\n{fence([x for x in r.last_lines if x.strip()][-5:])}")
        out.append(
            "<details><summary>Last lines per rank</summary>\n\n"
            + "\n\n".join(blocks)
            + "\n\n</details>"
        )
    version = f" {report.tool_version}" if report.tool_version else ""
    out.append(f"<sub>Generated by crashlens{md_text(version)}.</sub>")
    return out
