"""A Slack Block Kit payload (``curl -d @- $WEBHOOK``) and a stdlib poster for it.

Slack parses ``<...>`` as links and mentions and turns ``@here``-style words into pings, so log
text is escaped per Slack's formatting rules (``&``, ``<``, ``>`` to entities) and broadcast
words get a zero-width space after the ``@``; a log line can then neither ping a channel nor
forge a link. Text is cut to Slack's limits (3000 characters per section, 50 blocks) so the
webhook never rejects the message for size.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from crashlens import lazyre
from crashlens.errors import CrashlensError
from crashlens.model import iso, location, plural
from crashlens.render.common import clean, cut_words, on_ranks
from crashlens.render.remedy import to_mrkdwn

if TYPE_CHECKING:
    from crashlens.report import Report

ZWSP = "\u200b"
MAX_SECTION = 3000
MAX_BLOCKS = 50
MAX_FIELD = 2000
MAX_EVIDENCE = 3
MAX_EVIDENCE_LINE = 400
MAX_EXPLAINED = 8
_BROADCAST = lazyre.compile(r"@(here|channel|everyone)\b", re.IGNORECASE)
_BACKTICKS = lazyre.compile(r"`{3,}")
_PARTIAL_ENTITY = lazyre.compile(r"&[a-z]{0,3}$")


def slack_escape(text: str) -> str:
    """Log text made inert for Slack mrkdwn: entities for ``&<>``, broadcasts defused."""
    s = clean(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _BROADCAST.sub(lambda m: "@" + ZWSP + m.group(1), s)


def truncate(text: str, limit: int) -> str:
    """Cut escaped text to ``limit`` characters without splitting an ``&amp;``-style entity."""
    if len(text) <= limit:
        return text
    cut = _PARTIAL_ENTITY.sub("", text[: limit - 1])
    return cut + "…"


def remediation(markdown: str) -> str:
    """The remediation in mrkdwn: numbered lines, code spans, links only to http(s) URLs."""
    return to_mrkdwn(clean(markdown), slack_escape)


def _code(lines: list[str], limit: int) -> str:
    """A code block whose body cannot close the fence early, cut to fit ``limit``."""
    body = "\n".join(
        _BACKTICKS.sub(
            lambda m: ZWSP.join(m.group(0)), slack_escape(cut_words(x, MAX_EVIDENCE_LINE))
        )
        for x in lines
    )
    return "```" + truncate(body, limit - 6) + "```"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, MAX_SECTION)}}


def render(
    report: Report, *, job: str | None = None, report_url: str | None = None, **_: Any
) -> str:
    """Render ``report`` as a Block Kit JSON payload (``job``: its name in the header;
    ``report_url``: a link to the full report)."""
    return json.dumps(payload(report, job, report_url), indent=2, ensure_ascii=False) + "\n"


#: A URL Slack's ``<url|text>`` link syntax can carry as it is.
_LINKABLE = lazyre.compile(r"https?://[^\s|<>]+")
#: Slack's limit on a header's text.
MAX_HEADER = 150


def payload(
    report: Report, job: str | None = None, report_url: str | None = None
) -> dict[str, Any]:
    """The Block Kit message as a dict (``render`` serialises it)."""
    top = report.primary
    status = "no failure found" if top is None else "job failed"
    icon = ":white_check_mark:" if top is None else ":rotating_light:"
    title = f"crashlens: {job}: {status}" if job else f"crashlens: {status}"
    blocks: list[dict[str, Any]] = [
        # plain_text: a job name is shown as written, never read as markup
        {"type": "header", "text": {"type": "plain_text", "text": truncate(title, MAX_HEADER)}},
        _section(f"{icon} *{slack_escape(report.verdict)}*"),
    ]
    if report_url and _LINKABLE.fullmatch(report_url):
        blocks.append(_section(f"<{slack_escape(report_url)}|Full report>"))
    if top is not None:
        rule = top.match.rule
        fields = [
            f"*Top cause*\n{slack_escape(rule.title)}",
            f"*Confidence*\n{top.confidence:.2f}",
            f"*Class*\n`{slack_escape(top.class_label)}`",
            f"*Rule*\n`{slack_escape(rule.id)}`",
        ]
        blocks.append(
            {
                "type": "section",
                "fields": [{"type": "mrkdwn", "text": truncate(f, MAX_FIELD)} for f in fields],
            }
        )
    blocks += _first_failure(report)
    if top is not None:
        evidence = [ev.text for ev in top.evidence[:MAX_EVIDENCE]]
        if evidence:
            blocks.append(_section("*Evidence*\n" + _code(evidence, MAX_SECTION - 20)))
        if top.explains:
            explained = [
                f"• {slack_escape(e.title)} (`{slack_escape(e.cls)}`) ×{e.count}{on_ranks(e.ranks)}"
                for e in top.explains[:MAX_EXPLAINED]
            ]
            blocks.append(_section("*Explains* (symptoms of this cause)\n" + "\n".join(explained)))
        if top.user_frame is not None:
            frame = slack_escape(str(top.user_frame)).replace("`", "'")
            blocks.append(_section(f"*In your code:* `{frame}`"))
        if top.remediation:
            blocks.append(_section("*Remediation*\n" + remediation(top.remediation)))
    blocks.append(_context(report))
    fallback = truncate(f"crashlens: {slack_escape(report.verdict)}", MAX_SECTION)
    return {"text": fallback, "blocks": blocks[:MAX_BLOCKS]}


def _first_failure(report: Report) -> list[dict[str, Any]]:
    ff = report.first_failure
    if ff is None:
        return []
    when = f" at {iso(ff.time)}" if ff.time is not None else ""
    where = slack_escape(location(ff.file, ff.line)).replace("`", "'")
    return [
        _section(f"*First failure:* {ff.subject(slack_escape)}{ff.kind_note}{when} (`{where}`)")
    ]


def _context(report: Report) -> dict[str, Any]:
    read = [f for f in report.inputs if f.skipped is None]
    more = len(report.causes) - 1
    extra = f" · {plural(more, 'more finding')}" if more > 0 else ""
    version = f" {report.tool_version}" if report.tool_version else ""
    ranked = sum(1 for r in report.ranks if r.rank is not None)
    text = f"crashlens{slack_escape(version)} · {plural(len(read), 'file')}"
    text += (f" · {plural(ranked, 'rank')}" if ranked else "") + extra
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def post_slack(url: str, payload: str, timeout: float = 10) -> None:
    """POST ``payload`` (JSON text) to a Slack incoming webhook.

    Error messages name only the webhook's host: the URL path is the secret.

    Raises:
        CrashlensError: on a non-http(s) URL, an HTTP error, a body other than ``ok``, or when
            the server cannot be reached.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CrashlensError("Slack webhook URL must be an http(s) URL")
    host = parts.hostname or "?"
    request = urllib.request.Request(
        url,
        data=payload.encode("utf-8"),
        headers={"Content-Type": "application/json; charset=utf-8"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(2048).decode("utf-8", "replace").strip()
    except urllib.error.HTTPError as err:
        detail = err.read(300).decode("utf-8", "replace").strip().splitlines()
        why = f": {detail[0]}" if detail else ""
        raise CrashlensError(f"Slack webhook at {host} returned HTTP {err.code}{why}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise CrashlensError(f"could not reach Slack webhook at {host}: {reason}") from None
    if body != "ok":
        first = body.splitlines()[0][:200] if body else "(empty)"
        raise CrashlensError(f"Slack webhook at {host} did not accept the message: {first}")
