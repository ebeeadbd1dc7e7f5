"""Align stage: put every file's findings on one job timeline, corrected for clock skew.

The timeline is a pandas DataFrame of *events* (signals, tracebacks, launcher reports), never
of lines: a 64-rank job with gigabytes of step logs still yields a frame of a few hundred rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from crashlens.model import ChildFailure, Evidence, Hit, RankSummary, Traceback
from crashlens.parse.stream import FileResult

TIMELINE_COLUMNS = [
    "time", "time_inferred", "rank", "host", "pid", "source", "line", "kind", "signal", "text",
]  # fmt: skip


@dataclass(slots=True)
class Timeline:
    """Every finding of the job, on one clock, plus per-rank summaries."""

    hits: list[Hit]
    tracebacks: list[Traceback]
    failures: list[ChildFailure]
    ranks: list[RankSummary]
    frame: pd.DataFrame
    hit_counts: dict[str, int]
    skew: dict[str, float]


def _shift(ev: Evidence, skew: Mapping[str, float]) -> Evidence:
    if ev.time is None or not ev.host or ev.host not in skew:
        return ev
    return dataclasses.replace(ev, time=ev.time - skew[ev.host])


def align(results: Iterable[FileResult], skew: Mapping[str, float] | None = None) -> Timeline:
    """Merge per-file results into a :class:`Timeline`.

    Args:
        results: what each file contributed.
        skew: seconds each host's clock runs ahead of the reference clock; subtracted.
    """
    skew = dict(skew or {})
    hits: list[Hit] = []
    tracebacks: list[Traceback] = []
    failures: list[ChildFailure] = []
    summaries: list[RankSummary] = []
    counts: dict[str, int] = {}
    for res in results:
        hits.extend(dataclasses.replace(h, evidence=_shift(h.evidence, skew)) for h in res.hits)
        for tb in res.tracebacks:
            if tb.time is not None and tb.host in skew:
                tb = dataclasses.replace(tb, time=tb.time - skew[tb.host or ""])
            tracebacks.append(tb)
        failures.extend(
            dataclasses.replace(f, evidence=_shift(f.evidence, skew)) for f in res.failures
        )
        summaries.extend(res.ranks)
        for rule_id, n in res.hit_counts.items():
            counts[rule_id] = counts.get(rule_id, 0) + n
    hits.sort(key=lambda h: _order(h.evidence))
    tracebacks.sort(key=lambda t: (t.time is None, t.time or 0.0, t.source.path, t.start_line))
    return Timeline(
        hits=hits,
        tracebacks=tracebacks,
        failures=failures,
        ranks=merge_ranks(summaries, failures),
        frame=build_frame(hits, tracebacks, failures),
        hit_counts=counts,
        skew=skew,
    )


def _order(ev: Evidence) -> tuple[bool, float, str, int]:
    return (ev.time is None, ev.time or 0.0, ev.file, ev.line)


def merge_ranks(summaries: list[RankSummary], failures: list[ChildFailure]) -> list[RankSummary]:
    """One summary per known rank (streams of unknown rank are left to the input inventory)."""
    merged: dict[int, RankSummary] = {}
    for s in summaries:
        if s.rank is None:
            continue
        cur = merged.get(s.rank)
        if cur is None:
            merged[s.rank] = RankSummary(
                rank=s.rank,
                host=s.host,
                files=set(s.files),
                lines=s.lines,
                first_time=s.first_time,
                last_time=s.last_time,
                last_lines=list(s.last_lines),
                pids=set(s.pids),
            )
            continue
        cur.host = cur.host or s.host
        cur.files |= s.files
        cur.lines += s.lines
        cur.pids |= s.pids
        if s.first_time is not None and (cur.first_time is None or s.first_time < cur.first_time):
            cur.first_time = s.first_time
        if s.last_time is not None and (cur.last_time is None or s.last_time >= cur.last_time):
            cur.last_time = s.last_time
            cur.last_lines = list(s.last_lines)
    for f in failures:
        if f.rank is None:
            continue
        summary = merged.setdefault(f.rank, RankSummary(rank=f.rank, host=f.host))
        summary.host = summary.host or f.host
        if f.exitcode is not None:
            summary.exitcode = f.exitcode
        if f.pid is not None:
            summary.pids.add(f.pid)
    return [merged[r] for r in sorted(merged)]


def build_frame(
    hits: list[Hit], tracebacks: list[Traceback], failures: list[ChildFailure]
) -> pd.DataFrame:
    """The event table: one row per signal, traceback and launcher failure report."""
    rows: list[dict[str, object]] = []
    for h in hits:
        ev = h.evidence
        pid = h.fields.get("pid")
        rows.append(
            _row(ev, pid=int(pid) if pid and pid.isdigit() else None, kind="signal", signal=h.rule_id)
        )
    for tb in tracebacks:
        final = tb.final
        rows.append(
            {
                "time": tb.time,
                "time_inferred": tb.time_inferred,
                "rank": tb.rank,
                "host": tb.host,
                "pid": None,
                "source": tb.source.path,
                "line": final.lineno,
                "kind": "traceback" if tb.fatal else "handled_traceback",
                "signal": final.type,
                "text": f"{final.type}: {final.message.splitlines()[0] if final.message else ''}",
            }
        )
    for f in failures:
        rows.append(_row(f.evidence, pid=f.pid, kind="child_failure", signal=str(f.exitcode)))
    frame = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    frame["time"] = pd.to_datetime(frame["time"], unit="s", errors="coerce")
    frame["rank"] = frame["rank"].astype("Int64")
    frame["pid"] = frame["pid"].astype("Int64")
    return frame.sort_values(["time", "source", "line"], na_position="last", kind="stable").reset_index(
        drop=True
    )


def _row(ev: Evidence, *, pid: int | None, kind: str, signal: str) -> dict[str, object]:
    return {
        "time": ev.time,
        "time_inferred": ev.time_inferred,
        "rank": ev.rank,
        "host": ev.host,
        "pid": pid,
        "source": ev.file,
        "line": ev.line,
        "kind": kind,
        "signal": signal,
        "text": ev.text,
    }
