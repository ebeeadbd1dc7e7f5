"""``crashlens triage summary``: DuckDB queries over a fleet table, rendered for people.

:func:`summarize` reads the committed part files of a table (each job's latest row) with DuckDB
and computes: totals per status, jobs per cause, the weekly trend of causes, the hosts that
keep producing hardware failures, and causes per torch / CUDA / NCCL / driver version. A job's
time is ``submitted_at`` (manifest), else the time its failure began, else its newest log
file's modification time. :func:`render` turns the result into text, Markdown, JSON or one
self-contained HTML page (inline SVG charts, no script, nothing fetched, every value escaped).
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crashlens.errors import CrashlensError
from crashlens.fleet.jobs import iso_utc
from crashlens.fleet.table import (
    ADDED_COLUMNS,
    FLEET_SCHEMA_VERSION,
    MARKER,
    FleetTable,
    JobStatus,
)
from crashlens.render.html import page

FORMATS = ("text", "markdown", "json", "html")
GROUPINGS = ("cause", "signature", "host", "rule", "user", "queue", "state", "week")
#: What ``--fail-on`` can make the summary exit 1 for.
FAIL_ON = ("new-signature", "hardware-host")
#: Signatures listed (most jobs first); example job ids per signature.
TOP_SIGNATURES = 25
EXAMPLE_JOBS = 5
#: Causes a machine, not the job, is usually to blame for: their hosts are listed.
HARDWARE_CLASSES = ("gpu_hardware",)
#: Causes a node can be to blame for (its GPUs, its network, its memory): per host, the jobs
#: that failed first there of these classes, out of every job that ran there.
NODE_CLASSES = ("gpu_hardware", "nccl_error", "host_oom")
TOP_NODES = 15
VERSION_FACTS = ("torch", "cuda", "nccl", "driver")
NO_FAILURE = "(no failure)"
TOP_HOSTS = 10
_SINCE = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(value: str, now: dt.datetime | None = None) -> dt.datetime:
    """``7d``, ``12h``, ``2w``, ``30m`` before ``now``, or an ISO date/time (UTC).

    Raises:
        CrashlensError: for anything else.
    """
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    m = _SINCE.match(value.strip().lower())
    if m:
        return now - dt.timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        return iso_utc(value)
    except ValueError:
        raise CrashlensError(
            f"--since '{value}': expected a span like 7d, 12h, 2w or an ISO date"
        ) from None


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


#: ``count(*) ... AS analysed`` and so on, one per status (the ``totals`` row's columns).
_status_counts = [f"count(*) FILTER (WHERE status = {_sql_str(s)}) AS {s.value}" for s in JobStatus]
#: The jobs a summary lists as not analysed whole.
_NOT_ANALYSED = f"status IN ({_sql_str(JobStatus.ERROR)}, {_sql_str(JobStatus.DAMAGED)})"


def _connect(table: Path) -> Any:
    import duckdb

    if not (table / MARKER).is_file():
        raise CrashlensError(f"{table}: not a fleet table (no {MARKER})")
    # only committed parts: a run killed mid-commit leaves parts no commit record names
    parts = [table / "jobs" / c.jobs for c in FleetTable(table).commits()]
    parts = [p for p in parts if p.is_file()]
    if not parts:
        raise CrashlensError(f"{table}: the table has no committed rows yet")
    con = duckdb.connect(":memory:")
    source = "[" + ", ".join(_sql_str(str(p)) for p in parts) + "]"
    con.execute(
        f"""
        CREATE TABLE latest AS
        SELECT * FROM read_parquet({source}, union_by_name = true)
        QUALIFY row_number() OVER (PARTITION BY job_id ORDER BY batch DESC) = 1
        """
    )
    # a table written before a column was added (scheduler_state, nodelist) reads it as nulls
    for name in ADDED_COLUMNS:
        con.execute(f'ALTER TABLE latest ADD COLUMN IF NOT EXISTS "{name}" VARCHAR')
    con.execute(
        f"""
        CREATE VIEW jobs AS
        SELECT *,
            coalesce(submitted_at, first_time, last_modified) AS job_time,
            coalesce(cause_class,
                     CASE WHEN status = {_sql_str(JobStatus.ANALYSED)} THEN {_sql_str(NO_FAILURE)}
                          ELSE '(' || status || ')' END) AS cause
        FROM latest
        """
    )
    return con


def _rows(con: Any, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _top(con: Any, key: str, value: str, where: str, params: Sequence[Any]) -> dict[Any, Any]:
    """Per ``key``, its most frequent non-null ``value`` (ties: the smallest value)."""
    rows = _rows(
        con,
        f"""SELECT {key} AS k, {value} AS v, count(*) AS n FROM jobs {where}
            GROUP BY k, v ORDER BY k, n DESC, v""",
        params,
    )
    out: dict[Any, Any] = {}
    for r in rows:
        if r["v"] is not None and r["k"] not in out:
            out[r["k"]] = r["v"]
    return out


def summarize(
    table: str | Path,
    *,
    since: str | None = None,
    by: str = "cause",
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The fleet summary as plain data (the ``json`` format).

    Raises:
        CrashlensError: for a path that is not a fleet table, or a bad ``since``/``by``.
    """
    if by not in GROUPINGS:
        raise CrashlensError(f"--by must be one of {', '.join(GROUPINGS)}")
    path = Path(table)
    cutoff = parse_since(since, now) if since else None
    q = _Query(_connect(path), cutoff)
    try:
        total = q.totals()
        causes = q.causes(max(1, int(total["jobs"])))
        signatures = _signatures(q.con, q.where, q.params, cutoff, limit=None)
        return {
            "fleet_schema_version": FLEET_SCHEMA_VERSION,
            "table": str(path),
            "since": cutoff.isoformat(timespec="seconds") if cutoff else None,
            "span": q.span(),
            "totals": {k: int(v) for k, v in total.items()},
            "by": by,
            "groups": q.groups(by, causes, signatures),
            "causes": causes,
            "weeks": q.weeks(),
            "signatures": signatures[:TOP_SIGNATURES],
            "hardware_hosts": q.hardware(),
            "node_blame": _node_blame(q.con, q.where, q.params),
            "versions": q.versions(),
            "errors": q.errors(),
        }
    finally:
        q.con.close()


#: The SQL of a grouping (``--by``) over the ``jobs`` view.
_GROUP_KEYS = {
    "cause": "cause",
    "host": "coalesce(first_host, '(unknown)')",
    "rule": "rule",
    "signature": "signature",
    "user": "coalesce(\"user\", '(unknown)')",
    "queue": "coalesce(queue, '(unknown)')",
    "state": "coalesce(scheduler_state, '(not from SLURM)')",
    "week": "coalesce(strftime(date_trunc('week', job_time), '%Y-%m-%d'), '(unknown)')",
}


class _Query:
    """The summary's queries over one table, all restricted to the same ``--since`` window."""

    def __init__(self, con: Any, cutoff: dt.datetime | None) -> None:
        self.con = con
        self.where, self.params = ("WHERE job_time >= ?", [cutoff]) if cutoff else ("", [])

    def _and(self, condition: str) -> str:
        return f"{self.where} {'AND' if self.where else 'WHERE'} {condition}"

    @property
    def failed(self) -> str:
        return self._and("cause_class IS NOT NULL")

    def rows(self, sql: str) -> list[dict[str, Any]]:
        return _rows(self.con, sql, self.params)

    def totals(self) -> dict[str, Any]:
        return self.rows(
            f"""SELECT count(*) AS jobs,
                       {", ".join(_status_counts)},
                       count(*) FILTER (WHERE cause_class IS NOT NULL) AS failed,
                       count(*) FILTER (WHERE status = {_sql_str(JobStatus.ANALYSED)}
                                        AND cause_class IS NULL) AS healthy
                FROM jobs {self.where}"""
        )[0]

    def causes(self, jobs: int) -> list[dict[str, Any]]:
        causes = self.rows(
            f"""SELECT cause, count(*) AS jobs, count(DISTINCT first_host) AS hosts
                FROM jobs {self.where} GROUP BY cause ORDER BY jobs DESC, cause"""
        )
        top_rules = _top(self.con, "cause", "rule", self.where, self.params)
        for c in causes:
            c["share"] = round(c["jobs"] / jobs, 4)
            c["top_rule"] = top_rules.get(c["cause"])
        return causes

    def weeks(self) -> list[dict[str, Any]]:
        return self.rows(
            f"""SELECT strftime(date_trunc('week', job_time), '%Y-%m-%d') AS week, cause,
                       count(*) AS jobs
                FROM jobs {self._and("job_time IS NOT NULL")}
                GROUP BY week, cause ORDER BY week, jobs DESC, cause"""
        )

    def hardware(self) -> list[dict[str, Any]]:
        hw = ", ".join(_sql_str(c) for c in HARDWARE_CLASSES)
        return self.rows(
            f"""SELECT cause_class, coalesce(first_host, '(unknown)') AS host, count(*) AS jobs,
                       strftime(max(job_time), '%Y-%m-%dT%H:%M:%S') AS last_seen
                FROM jobs {self.failed} AND cause_class IN ({hw})
                GROUP BY cause_class, host
                QUALIFY row_number() OVER (PARTITION BY cause_class ORDER BY count(*) DESC, host)
                    <= {TOP_HOSTS}
                ORDER BY cause_class, jobs DESC, host"""
        )

    def versions(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for fact in VERSION_FACTS:
            out += self.rows(
                f"""SELECT '{fact}' AS fact, {fact} AS version, cause, count(*) AS jobs
                    FROM jobs {self._and(f"{fact} IS NOT NULL")}
                    GROUP BY version, cause ORDER BY version, jobs DESC, cause"""
            )
        return out

    def groups(
        self, by: str, causes: list[dict[str, Any]], signatures: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The ``--by`` table: failed jobs per key and their top cause (all jobs per week)."""
        if by == "cause":
            return [
                {"key": c["cause"], "jobs": c["jobs"], "top_rule": c["top_rule"]} for c in causes
            ]
        if by == "signature":
            return [
                {
                    "key": g["signature"],
                    "jobs": g["jobs"],
                    "top_cause": g["cause"],
                    "text": g["text"],
                }
                for g in signatures
            ]
        key = _GROUP_KEYS[by]
        if by == "week":
            groups = self.rows(
                f"""SELECT {key} AS "key", count(*) AS jobs, count(cause_class) AS failed
                    FROM jobs {self.where} GROUP BY "key" ORDER BY "key" """
            )
        else:
            groups = self.rows(
                f"""SELECT {key} AS "key", count(*) AS jobs
                    FROM jobs {self.failed} GROUP BY "key" ORDER BY jobs DESC, "key" """
            )
        tops = _top(self.con, key, "cause_class", self.failed, self.params)
        for g in groups:
            g["top_cause"] = tops.get(g["key"])
        return groups

    def errors(self) -> list[dict[str, Any]]:
        return [
            {"job_id": r["job_id"], "status": r["status"], "error": _why(r)}
            for r in self.rows(
                f"""SELECT job_id, status, error, notes, skipped_files FROM jobs
                    {self._and(_NOT_ANALYSED)} ORDER BY job_id LIMIT 50"""
            )
        ]

    def span(self) -> dict[str, Any]:
        return self.rows(
            f"""SELECT strftime(min(job_time), '%Y-%m-%dT%H:%M:%S') AS first,
                       strftime(max(job_time), '%Y-%m-%dT%H:%M:%S') AS last
                FROM jobs {self.where}"""
        )[0]


def _signatures(
    con: Any, where: str, params: Sequence[Any], cutoff: dt.datetime | None, limit: int | None
) -> list[dict[str, Any]]:
    """Failed jobs per signature (most first): class, text, first and last seen, examples,
    and whether it is new (no job before ``cutoff`` had it)."""
    fail = f"{where} {'AND' if where else 'WHERE'} signature IS NOT NULL"
    rows = _rows(
        con,
        f"""SELECT signature, any_value(cause_class) AS cause, any_value(signature_text) AS text,
                   count(*) AS jobs,
                   strftime(min(job_time), '%Y-%m-%dT%H:%M:%S') AS first_seen,
                   strftime(max(job_time), '%Y-%m-%dT%H:%M:%S') AS last_seen,
                   list(job_id ORDER BY job_time DESC NULLS LAST, job_id)[1:{EXAMPLE_JOBS}]
                       AS examples,
                   list(coalesce(report, '') ORDER BY job_time DESC NULLS LAST, job_id)
                       [1:{EXAMPLE_JOBS}] AS example_reports
            FROM jobs {fail} GROUP BY signature ORDER BY jobs DESC, signature
            {f"LIMIT {int(limit)}" if limit is not None else ""}""",
        params,
    )
    before: set[str] = set()
    if cutoff is not None:
        before = {
            r["signature"]
            for r in _rows(
                con,
                "SELECT DISTINCT signature FROM jobs WHERE signature IS NOT NULL AND job_time < ?",
                [cutoff],
            )
        }
    for r in rows:
        r["examples"] = list(r["examples"] or [])
        r["example_reports"] = [x or None for x in r["example_reports"] or []]
        r["new"] = cutoff is not None and r["signature"] not in before
    return rows


def _node_blame(con: Any, where: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    """Per host with node-class failures: how many jobs ran there (failed or healthy: the
    hosts every job's logs name), how many failed first there of each node class, and the
    share. A host that runs many jobs is not blamed for its count alone."""
    rows = _rows(con, f"SELECT hosts, cause_class, first_host FROM jobs {where}", params)
    ran: dict[str, int] = defaultdict(int)
    failed: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        try:
            hosts = set(json.loads(r["hosts"] or "[]"))
        except ValueError:
            hosts = set()
        if r["first_host"]:
            hosts.add(r["first_host"])
        for host in hosts:
            ran[host] += 1
        if r["cause_class"] in NODE_CLASSES and r["first_host"]:
            failed[r["first_host"]][r["cause_class"]] += 1
    ranked = sorted(
        failed.items(),
        key=lambda kv: (-sum(kv[1].values()), -sum(kv[1].values()) / ran[kv[0]], kv[0]),
    )
    return [
        {
            "host": host,
            "jobs": ran[host],
            "failed": sum(by_class.values()),
            "share": round(sum(by_class.values()) / ran[host], 4),
            "classes": dict(sorted(by_class.items())),
        }
        for host, by_class in ranked[:TOP_NODES]
    ]


def _why(row: dict[str, Any]) -> str:
    """Why a job was not analysed whole: its error, else its first skipped file or note."""
    if row["error"]:
        return str(row["error"])
    try:
        skipped = json.loads(row["skipped_files"] or "[]")
        notes = json.loads(row["notes"] or "[]")
    except ValueError:
        return ""
    if skipped:
        return f"{skipped[0]['path']}: {skipped[0]['reason']}"
    return str(notes[-1]) if notes else ""


def failing(summary: dict[str, Any], conditions: Sequence[str]) -> list[str]:
    """Why a cron job should fail on this summary: one line per ``--fail-on`` condition met.

    Raises:
        CrashlensError: for an unknown condition, or ``new-signature`` without ``--since``.
    """
    out = []
    for cond in conditions:
        if cond not in FAIL_ON:
            raise CrashlensError(f"--fail-on must be one of {', '.join(FAIL_ON)}")
        if cond == "new-signature":
            if summary["since"] is None:
                raise CrashlensError("--fail-on new-signature needs --since (new since when?)")
            new = [s for s in summary["signatures"] if s["new"]]
            if new:
                out.append(
                    f"{len(new)} new failure signature(s) since {summary['since']}: "
                    + "; ".join(f"{s['text']} ({s['jobs']} job(s))" for s in new[:5])
                )
        elif summary["hardware_hosts"]:
            hosts = sorted({h["host"] for h in summary["hardware_hosts"]})
            out.append(f"hardware failures on {len(hosts)} host(s): {', '.join(hosts[:10])}")
    return out


# --- rendering ---------------------------------------------------------------------------------


def render(summary: dict[str, Any], fmt: str) -> str:
    """The summary as ``fmt`` (text, markdown, json, html).

    Raises:
        CrashlensError: for an unknown format.
    """
    renderers: dict[str, Callable[[dict[str, Any]], str]] = {
        "text": _text,
        "markdown": _markdown,
        "json": lambda s: json.dumps(s, indent=2, ensure_ascii=False, default=str) + "\n",
        "html": _html,
    }
    if fmt not in renderers:
        raise CrashlensError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})")
    return renderers[fmt](summary)


def _sections(s: dict[str, Any]) -> list[tuple[str, list[str], list[list[Any]]]]:
    """Every table of the summary as (title, header, rows), shared by text and Markdown."""
    by = s["by"]
    group_cols = {
        "cause": ["cause", "jobs", "top rule"],
        "signature": ["signature", "failed jobs", "cause"],
        "host": ["host", "failed jobs", "top cause"],
        "rule": ["rule", "failed jobs", "top cause"],
        "user": ["user", "failed jobs", "top cause"],
        "queue": ["queue", "failed jobs", "top cause"],
        "state": ["SLURM state", "failed jobs", "top cause"],
        "week": ["week", "jobs", "failed", "top cause"],
    }[by]
    group_rows = [
        [g["key"], g["jobs"], *([g["failed"]] if by == "week" else []), g.get("top_rule")]
        if by == "cause"
        else [g["key"], g["jobs"], *([g["failed"]] if by == "week" else []), g.get("top_cause")]
        for g in s["groups"]
    ]
    sections = [
        (f"Jobs by {by}", group_cols, group_rows if by not in ("cause", "signature") else []),
        (
            "Causes",
            ["cause", "jobs", "share", "top rule", "hosts"],
            [
                [c["cause"], c["jobs"], f"{100 * c['share']:.1f}%", c["top_rule"], c["hosts"]]
                for c in s["causes"]
            ],
        ),
        (
            "Failure signatures",
            ["signature", "cause", "jobs", "first seen", "last seen", "failure", "e.g. jobs"],
            [
                [
                    g["signature"] + (" (new)" if g["new"] else ""),
                    g["cause"],
                    g["jobs"],
                    g["first_seen"],
                    g["last_seen"],
                    g["text"],
                    ", ".join(g["examples"]),
                ]
                for g in s["signatures"]
            ],
        ),
        (
            "Jobs per week and cause",
            ["week", "cause", "jobs"],
            [[w["week"], w["cause"], w["jobs"]] for w in s["weeks"]],
        ),
        (
            "Hosts with hardware failures",
            ["cause", "host", "jobs", "last seen"],
            [[h["cause_class"], h["host"], h["jobs"], h["last_seen"]] for h in s["hardware_hosts"]],
        ),
        (
            "Nodes to look at (GPU, network, memory failures)",
            ["host", "failed first there", "jobs that ran there", "share", "classes"],
            [
                [
                    n["host"],
                    n["failed"],
                    n["jobs"],
                    f"{100 * n['share']:.0f}%",
                    ", ".join(f"{k} {v}" for k, v in n["classes"].items()),
                ]
                for n in s["node_blame"]
            ],
        ),
        (
            "Causes per version",
            ["fact", "version", "cause", "jobs"],
            [[v["fact"], v["version"], v["cause"], v["jobs"]] for v in s["versions"]],
        ),
        (
            "Jobs not analysed whole",
            ["job", "status", "why"],
            [[e["job_id"], e["status"], e["error"]] for e in s["errors"]],
        ),
    ]
    return sections


def _headline(s: dict[str, Any]) -> str:
    t = s["totals"]
    since = f" since {s['since']}" if s["since"] else ""
    return (
        f"{t['jobs']} job(s){since}: {t['failed']} failed, {t['healthy']} without failure, "
        f"{t['error']} could not be analysed, {t['empty']} empty, {t['damaged']} damaged"
    )


def _cell(value: Any) -> str:
    return "" if value is None else " ".join(str(value).split())


def _text(s: dict[str, Any]) -> str:
    out = [f"crashlens fleet summary: {s['table']}", _headline(s), ""]
    for title, header, rows in _sections(s):
        if not rows:
            continue
        cells = [[_cell(v) for v in row] for row in rows]
        widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
        out.append(title)
        out.append("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        for r in cells:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        out.append("")
    return "\n".join(line.rstrip() for line in out).rstrip() + "\n"


def _md(value: Any) -> str:
    text = _cell(value)
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", text)


def _markdown(s: dict[str, Any]) -> str:
    out = ["# crashlens fleet summary", "", _md(_headline(s)) + ".", ""]
    for title, header, rows in _sections(s):
        if not rows:
            continue
        out += [f"## {title}", ""]
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join("---" for _ in header) + "|")
        out += ["| " + " | ".join(_md(v) for v in row) + " |" for row in rows]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# --- HTML --------------------------------------------------------------------------------------

#: Distinct colours for causes (Tableau 20 without its greys, which mean "no failure" here);
#: past 18 causes the rest share one grey rather than repeat a cause's colour.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a",
    "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5",
)  # fmt: skip
QUIET = "#c7c7c7"
OTHER = "#7f7f7f"
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#fafafa;color:#222}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.lead{color:#555}svg{background:#fff;border:1px solid #ddd}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
"""


def esc(value: object) -> str:
    """Any value as HTML text or a quoted attribute value."""
    return html.escape(_cell(value), quote=True)


def _colors(names: Sequence[str]) -> dict[str, str]:
    """One colour per cause, never shared; jobs without a failure (and statuses) in grey."""
    out: dict[str, str] = {}
    causes = [n for n in names if not n.startswith("(")]
    for i, name in enumerate(causes):
        out[name] = PALETTE[i] if i < len(PALETTE) else OTHER
    for name in names:
        out.setdefault(name, QUIET)
    return out


def _bar_chart(causes: list[dict[str, Any]], colors: dict[str, str]) -> str:
    if not causes:
        return ""
    width, label_w, bar_h = 900, 230, 22
    top = max(c["jobs"] for c in causes) or 1
    height = bar_h * len(causes) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="jobs per cause">'
    ]
    for i, c in enumerate(causes):
        y = 5 + i * bar_h
        w = max(1.0, (width - label_w - 60) * c["jobs"] / top)
        name = esc(c["cause"])
        fill = colors.get(c["cause"], "#999")
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" font-size="12">{name}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{bar_h - 6}" '
            f'fill="{fill}"><title>{name}: {int(c["jobs"])}</title></rect>'
            f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" font-size="12">{int(c["jobs"])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _trend_chart(weeks: list[dict[str, Any]], colors: dict[str, str]) -> str:
    per_week: dict[str, dict[str, int]] = defaultdict(dict)
    for w in weeks:
        per_week[w["week"]][w["cause"]] = int(w["jobs"])
    if not per_week:
        return ""
    order = sorted(per_week)
    width, height, left, bottom = 900, 260, 40, 40
    top = max(sum(v.values()) for v in per_week.values()) or 1
    step = (width - left - 10) / len(order)
    bar_w = max(2.0, min(60.0, step * 0.7))
    scale = (height - bottom - 10) / top
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="jobs per week and cause">',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - 5}" y2="{height - bottom}" '
        'stroke="#999"/>',
        f'<text x="{left - 4}" y="14" text-anchor="end" font-size="11">{top}</text>',
    ]
    for i, week in enumerate(order):
        x = left + i * step + (step - bar_w) / 2
        y = float(height - bottom)
        for cause, count in sorted(per_week[week].items(), key=lambda kv: -kv[1]):
            h = count * scale
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{colors.get(cause, "#999")}"><title>{esc(week)} {esc(cause)}: '
                f"{count}</title></rect>"
            )
        if len(order) <= 20 or i % max(1, len(order) // 20) == 0:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle" '
                f'font-size="10">{esc(week)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _html_table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{esc(v)}</td>' if isinstance(v, (int, float)) else f"<td>{esc(v)}</td>"
            for v in row
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _job_link(job_id: str, report: str | None) -> str:
    """A job id, linked to its HTML report when ``triage --reports`` wrote one."""
    if not report:
        return esc(job_id)
    href = Path(report).resolve().as_uri()
    return f'<a href="{esc(href)}">{esc(job_id)}</a>'


def _signature_table(signatures: list[dict[str, Any]], colors: dict[str, str]) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "signature",
            "cause",
            "jobs",
            "first seen",
            "last seen",
            "failure",
            "jobs, latest first",
        )
    )
    rows = []
    for g in signatures:
        jobs = ", ".join(
            _job_link(j, r) for j, r in zip(g["examples"], g["example_reports"], strict=False)
        )
        new = " <strong>new</strong>" if g["new"] else ""
        dot = f'<i style="background:{colors.get(g["cause"], OTHER)}"></i>'
        rows.append(
            f"<tr><td><code>{esc(g['signature'])}</code>{new}</td>"
            f'<td class="legend">{dot}{esc(g["cause"])}</td><td class="n">{esc(g["jobs"])}</td>'
            f"<td>{esc(g['first_seen'])}</td><td>{esc(g['last_seen'])}</td>"
            f"<td>{esc(g['text'])}</td><td>{jobs}</td></tr>"
        )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _html(s: dict[str, Any]) -> str:
    colors = _colors([c["cause"] for c in s["causes"]])
    legend = "".join(
        f'<span><i style="background:{color}"></i>{esc(name)}</span>'
        for name, color in colors.items()
    )
    body = [
        "<h1>crashlens fleet summary</h1>",
        f'<p class="lead">{esc(_headline(s))}. Table: <code>{esc(s["table"])}</code>'
        + (
            f"; jobs from {esc(s['span']['first'])} to {esc(s['span']['last'])}"
            if s["span"]["first"]
            else ""
        )
        + ".</p>",
        "<h2>Jobs per cause</h2>",
        _bar_chart(s["causes"], colors),
    ]
    if s["weeks"]:
        body += ["<h2>Trend per week</h2>", _trend_chart(s["weeks"], colors)]
        body.append(f'<p class="legend">{legend}</p>')
    for title, header, rows in _sections(s):
        if title == "Failure signatures" and rows:
            body += [f"<h2>{esc(title)}</h2>", _signature_table(s["signatures"], colors)]
        elif rows:
            body += [f"<h2>{esc(title)}</h2>", _html_table(header, rows)]
    body_html = "\n".join(part for part in body if part)
    return page(f"crashlens fleet summary: {_headline(s)}", body_html, STYLE)
