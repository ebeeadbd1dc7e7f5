"""Align stage: put every file's findings on one job timeline, corrected for clock skew.

The timeline is a pandas DataFrame of *events* (signals, tracebacks, launcher reports), never
of lines: a 64-rank job with gigabytes of step logs still yields a frame of a few hundred rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from crashlens import lazyre
from crashlens.model import (
    ChildFailure,
    ClockSkew,
    Evidence,
    FileResult,
    Hit,
    RankSummary,
    SyncMark,
    Timeline,
    Traceback,
    headline,
)

TIMELINE_COLUMNS = [
    "time", "time_inferred", "rank", "host", "pid", "source", "line", "kind", "signal", "text",
]  # fmt: skip


def _shift(ev: Evidence, skew: Mapping[str, float]) -> Evidence:
    if ev.time is None or not ev.host or ev.host not in skew:
        return ev
    return dataclasses.replace(ev, time=ev.time - skew[ev.host])


def _shift_hit(hit: Hit, skew: Mapping[str, float]) -> Hit:
    """A hit on the reference clock (the same hit when its clock needs no correction)."""
    evidence = _shift(hit.evidence, skew)
    return hit if evidence is hit.evidence else dataclasses.replace(hit, evidence=evidence)


def _shift_failure(f: ChildFailure, skew: Mapping[str, float]) -> ChildFailure:
    """A launcher report on the reference clock: its time and its evidence's alike."""
    host = f.evidence.host or f.host or ""
    time = f.time - skew[host] if f.time is not None and host in skew else f.time
    return dataclasses.replace(f, time=time, evidence=_shift(f.evidence, skew))


def align(
    results: Iterable[FileResult],
    skew: Mapping[str, float] | None = None,
    sync_fields: Mapping[str, str] | None = None,
) -> Timeline:
    """Merge per-file results into a :class:`Timeline` on one clock; ``results`` are left as
    they are (the same results aligned twice give the same timeline).

    Args:
        results: what each file contributed.
        skew: seconds each host's clock runs ahead of the reference clock (user overrides;
            they win over the estimate).
        sync_fields: rule id -> field whose equal values happen at the same moment on every
            rank (the rules' ``sync:``); the basis of the clock-skew estimate.
    """
    results = fix_years(list(results))
    estimated = estimate_skew(
        [h for r in results for h in r.hits],
        sync_fields or {},
        [m for r in results for m in r.sync],
    )
    clock = dict(estimated)
    for host, offset in (skew or {}).items():
        clock[host] = ClockSkew(offset, 0.0, "given with --skew", True)
    offsets = {host: c.offset_s for host, c in clock.items() if c.applied and c.offset_s}
    hits: list[Hit] = []
    tracebacks: list[Traceback] = []
    failures: list[ChildFailure] = []
    summaries: list[RankSummary] = []
    for res in results:
        hits.extend(_shift_hit(h, offsets) for h in res.hits)
        for tb in res.tracebacks:
            if tb.time is not None and tb.host in offsets:
                tb = dataclasses.replace(tb, time=tb.time - offsets[tb.host or ""])
            tracebacks.append(tb)
        failures.extend(_shift_failure(f, offsets) for f in res.failures)
        for summary in res.ranks:
            # a copy: the file's result is the session's, and a timeline is made again from it
            delta = offsets.get(summary.host or "", 0.0)
            summaries.append(
                dataclasses.replace(
                    summary,
                    files=set(summary.files),
                    last_lines=list(summary.last_lines),
                    pids=set(summary.pids),
                    first_time=_minus(summary.first_time, delta),
                    last_time=_minus(summary.last_time, delta),
                )
            )
    hits = mark_job_ends(wall_clock_for_uptime(hits), results)
    ranks = merge_ranks(summaries, failures)
    rank_map = {key: rank for res in results for key, rank in res.rank_map.items()}
    rank_map.update(
        ((f.host, f.local_rank), f.rank)
        for f in failures
        if f.host and f.local_rank is not None and f.rank is not None
    )
    one_node = single_node(hits, tracebacks)
    hits = join_hosts(join_local_ranks(join_pids(hits, ranks), rank_map, one_node))
    tracebacks = [_traceback_rank(tb, one_node) for tb in tracebacks]
    hits.sort(key=lambda h: _order(h.evidence))
    tracebacks.sort(key=lambda t: (t.time is None, t.time or 0.0, t.source.path, t.start_line))
    return Timeline(
        hits=hits,
        tracebacks=tracebacks,
        failures=failures,
        ranks=ranks,
        clock_skew=clock,
        facts=[f for res in results for f in res.facts],
    )


#: A line that says nothing: blank or punctuation, after a log record's prefix if it has one (a
#: banner's rule of asterisks, ``W1206 03:59:26.009000 2937 torch/distributed/run.py:874] ***``)
#: or a tool's stamp (``2024-05-01T03:14:00.123456789Z ***``: the ring keeps a line's stamp).
_SAYS_NOTHING = lazyre.compile(
    r"(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[\d.,]{0,10}(?:Z|[+-]\d\d:?\d\d)? )?(?:.*\]\s)?[\W_]*"
)


def mark_job_ends(hits: list[Hit], results: list[FileResult]) -> list[Hit]:
    """Flag the findings the whole job ended on (``Hit.ends_job``): each writer's last line that
    says something holds a finding of the same rule, so nothing was printed after them anywhere (a
    launcher's start-up banner and no worker output: the job stopped before its first line).

    A writer alone in its file is placed exactly (its lines are numbered one after another);
    a job with a writer that shares its file with others gets no flag.
    """
    ends: set[tuple[str, int]] = set()
    for res in results:
        writers = [s for s in res.ranks if s.lines]
        if not writers:
            continue
        if len(writers) > 1:
            return hits
        (writer,) = writers
        tail = list(reversed(writer.last_lines))
        back = next((k for k, text in enumerate(tail) if not _SAYS_NOTHING.fullmatch(text)), None)
        if back is None:
            return hits
        ends.add((writer.last_file, writer.last_lineno - back))
    if not ends:
        return hits
    at_end: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for hit in hits:
        where = (hit.evidence.file, hit.evidence.line)
        if where in ends:
            at_end[hit.rule_id].add(where)
    enders = {rule_id for rule_id, places in at_end.items() if places == ends}
    if not enders:
        return hits
    return [
        dataclasses.replace(h, ends_job=True)
        if h.rule_id in enders and (h.evidence.file, h.evidence.line) in ends
        else h
        for h in hits
    ]


def _minus(t: float | None, delta: float) -> float | None:
    return None if t is None else t - delta


def estimate_skew(
    hits: list[Hit], sync_fields: Mapping[str, str], marks: Iterable[SyncMark] = ()
) -> dict[str, ClockSkew]:
    """Estimate each host's clock offset from events that must be simultaneous.

    Hits of a rule with ``sync: <field>`` that share the field's value (e.g. every rank's
    watchdog timing out on ``SeqNum=38911``) happened at the same moment; the median gap
    between a host's and the reference host's times is its offset. The reference is the host
    seen in most such groups. An offset is applied only when it is at least half a second and
    more than twice its uncertainty (the spread within hosts, the disagreement between groups,
    and the timestamp resolution).
    """
    groups: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for h in hits:
        field_name = sync_fields.get(h.rule_id)
        ev = h.evidence
        key = h.fields.get(field_name) if field_name else None
        if key is None or ev.time is None or ev.time_inferred or not ev.host:
            continue
        groups[(h.rule_id, key)][ev.host].append(ev.time)
    for mark in marks:
        if mark.host:
            groups[("training", mark.key)][mark.host].append(mark.time)
    hosts = sorted({host for g in groups.values() for host in g})
    if len(hosts) < 2:
        return {}
    ref = max(hosts, key=lambda host: (sum(host in g for g in groups.values()), -hosts.index(host)))
    out = {ref: ClockSkew(0.0, 0.0, "reference clock", True)}
    for host in hosts:
        if host == ref:
            continue
        shared = [(k, g) for k, g in groups.items() if host in g and ref in g]
        if not shared:
            continue
        import statistics  # only logs of several hosts get here

        diffs = [statistics.median(g[host]) - statistics.median(g[ref]) for _, g in shared]
        spread = [(max(g[host]) - min(g[host]) + max(g[ref]) - min(g[ref])) / 2 for _, g in shared]
        times = [t for _, g in shared for t in (*g[host], *g[ref])]
        resolution = 0.5 if all(t == int(t) for t in times) else 0.001
        offset = statistics.median(diffs)
        mad = statistics.median(abs(d - offset) for d in diffs)
        uncertainty = max(statistics.median(spread), mad, resolution)
        (rule_id, key), _ = shared[0]
        example = key if rule_id == "training" else f"{rule_id} {sync_fields[rule_id]}={key}"
        basis = f"{len(shared)} simultaneous event group(s), e.g. {example}"
        applied = abs(offset) >= 0.5 and abs(offset) > 2 * uncertainty
        out[host] = ClockSkew(round(offset, 3), round(uncertainty, 3), basis, applied)
    return out


def fix_years(results: list[FileResult]) -> list[FileResult]:
    """Give year-less files (syslog, glog, c10d) the job's year instead of their mtime's.

    A kern.log copied off a node a year later must still line up with the ranks' logs.
    """
    years: Counter[int] = Counter()
    for res in results:
        if res.assumed_year is None:
            years.update(time.gmtime(r.first_time).tm_year for r in res.ranks if r.first_time)
    if not years:
        return results
    job_year = years.most_common(1)[0][0]
    out = []
    for res in results:
        if res.assumed_year is None or res.assumed_year == job_year:
            out.append(res)
            continue
        delta = job_year - res.assumed_year
        out.append(_reyear(res, delta))
    return out


def _move(t: float | None, years: int) -> float | None:
    if t is None:
        return None
    d = dt.datetime.fromtimestamp(t, dt.UTC)
    try:
        return d.replace(year=d.year + years).timestamp()
    except ValueError:  # 29 February
        return (d.replace(day=28, year=d.year + years)).timestamp()


def _reyear(res: FileResult, years: int) -> FileResult:
    def ev(e: Evidence) -> Evidence:
        return dataclasses.replace(e, time=_move(e.time, years))

    hits = [dataclasses.replace(h, evidence=ev(h.evidence)) for h in res.hits]
    tbs = [dataclasses.replace(t, time=_move(t.time, years)) for t in res.tracebacks]
    for r in res.ranks:
        r.first_time, r.last_time = _move(r.first_time, years), _move(r.last_time, years)
    return dataclasses.replace(res, hits=hits, tracebacks=tbs, assumed_year=None)


def join_pids(hits: list[Hit], ranks: list[RankSummary]) -> list[Hit]:
    """Attribute rank-less evidence that names a pid (kernel OOM kills, Xid lines) to its rank.

    Pids come from NCCL line prefixes, launcher reports and logging; a pid is only trusted
    when it maps to exactly one rank (on the evidence's host, when the host is known).
    """
    by_host: dict[tuple[str | None, int], set[int]] = defaultdict(set)
    by_pid: dict[int, set[int]] = defaultdict(set)
    for r in ranks:
        if r.rank is None:
            continue
        for pid in r.pids:
            by_host[(r.host, pid)].add(r.rank)
            by_pid[pid].add(r.rank)
    out = []
    for h in hits:
        named = h.roles.pid
        if h.evidence.rank is None and named is not None:
            found = by_host.get((h.evidence.host, named)) or by_pid.get(named, set())
            if len(found) == 1:
                rank = next(iter(found))
                h = dataclasses.replace(h, evidence=dataclasses.replace(h.evidence, rank=rank))
        out.append(h)
    return out


def wall_clock_for_uptime(hits: list[Hit]) -> list[Hit]:
    """Put plain-``dmesg`` lines (seconds since boot) on the wall clock through a pid join.

    A kernel line naming a pid (``Killed process 4971``) and a timed line elsewhere naming the
    same pid (``DataLoader worker (pid 4971) is killed by signal``) describe one moment, which
    fixes that kernel file's boot time; every line of the file then gets a wall time (marked
    inferred). Without such a pair the lines keep no time and say so.
    """
    timed_pids: dict[int, float] = {}
    for h in hits:
        pid = h.roles.pid
        if pid is not None and h.roles.uptime_s is None and h.evidence.time is not None:
            timed_pids.setdefault(pid, h.evidence.time)
    boot: dict[str, float] = {}
    for h in hits:
        kernel_pid, up = h.roles.pid, h.roles.uptime_s
        if up is not None and kernel_pid in timed_pids and h.evidence.file not in boot:
            boot[h.evidence.file] = timed_pids[kernel_pid] - up
    if not boot:
        return hits
    out = []
    for h in hits:
        uptime = h.roles.uptime_s
        base = boot.get(h.evidence.file)
        if uptime is not None and base is not None and h.evidence.time is None:
            ev = dataclasses.replace(h.evidence, time=base + uptime, time_inferred=True)
            h = dataclasses.replace(h, evidence=ev)
        out.append(h)
    return out


def single_node(hits: list[Hit], tracebacks: list[Traceback]) -> bool:
    """Whether the job ran on one node as far as its logs tell: they name at most one host,
    and the torch.multiprocessing.spawn children all were reported in one file (one parent)."""
    hosts = {h.evidence.host for h in hits if h.evidence.host}
    hosts.update(tb.host for tb in tracebacks if tb.host)
    files = {h.evidence.file for h in hits if h.roles.spawn_index is not None}
    files.update(tb.source.path for tb in tracebacks if tb.spawn_index is not None)
    return len(hosts) <= 1 and len(files) <= 1


def join_local_ranks(
    hits: list[Hit], rank_map: Mapping[tuple[str, int], int], one_node: bool = False
) -> list[Hit]:
    """Attribute lines that name only a local rank: launcher lines (``--local_rank=1`` on a
    host, through the launcher's own mapping), and, on a job of one node, a
    torch.multiprocessing.spawn child's (its process index is the rank there: spawn's scripts
    take it for one, and a single node's local and global ranks coincide)."""
    out = []
    for h in hits:
        ev = h.evidence
        rank = None
        if ev.rank is None and ev.host and h.roles.local_rank is not None:
            rank = rank_map.get((ev.host, h.roles.local_rank))
        if ev.rank is None and rank is None and one_node:
            rank = h.roles.spawn_index
        if rank is not None:
            h = dataclasses.replace(h, evidence=dataclasses.replace(ev, rank=rank))
        out.append(h)
    return out


def _traceback_rank(tb: Traceback, one_node: bool) -> Traceback:
    if tb.rank is not None or tb.spawn_index is None or not one_node:
        return tb
    return dataclasses.replace(tb, rank=tb.spawn_index)


#: A rank-less hit joins a ranked hit of the same rule on its host only this close in time.
HOST_JOIN_WINDOW_S = 300.0


def join_hosts(hits: list[Hit]) -> list[Hit]:
    """Give a rank-less hit the rank of the same rule's evidence on the same host.

    A faulthandler dump printed straight to a node's console names no rank, but the launcher
    line for the same crash does ("exits with return code = -11" for local rank 1); when
    exactly one rank of that host has the same finding nearby, it is the same event.
    """
    ranked: dict[tuple[str, str], list[Hit]] = defaultdict(list)
    for h in hits:
        if h.evidence.rank is not None and h.evidence.host:
            ranked[(h.rule_id, h.evidence.host)].append(h)
    out = []
    for h in hits:
        ev = h.evidence
        if ev.rank is None and ev.host:
            near = {
                o.evidence.rank
                for o in ranked.get((h.rule_id, ev.host), [])
                if ev.time is None
                or o.evidence.time is None
                or abs(o.evidence.time - ev.time) <= HOST_JOIN_WINDOW_S
            }
            if len(near) == 1:
                rank = next(iter(near))
                h = dataclasses.replace(h, evidence=dataclasses.replace(ev, rank=rank))
        out.append(h)
    return out


def _order(ev: Evidence) -> tuple[bool, float, str, int]:
    return (ev.time is None, ev.time or 0.0, ev.file, ev.line)


def merge_ranks(summaries: list[RankSummary], failures: list[ChildFailure]) -> list[RankSummary]:
    """One summary per known rank (streams of unknown rank are left to the input inventory).

    A single-process job (one stream, of no rank, and no launcher report) keeps its one
    summary, ``rank`` None: it is the process the report is about.
    """
    if len(summaries) == 1 and summaries[0].rank is None and not failures:
        return [summaries[0]]
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
                last_file=s.last_file,
                last_lineno=s.last_lineno,
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
            cur.last_file, cur.last_lineno = s.last_file, s.last_lineno
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


def frame_of(timeline: Timeline, held: Collection[str] | None = None) -> pd.DataFrame:
    """The timeline's events as a pandas DataFrame (built on demand, for the report).

    ``held``: the rules whose conditions held. On a line where one of them has a hit, the hits
    of rules that did not hold are left out: an exception type a rule reads only with a
    reader's frame on the stack is not what that line says. A line no held rule hit keeps its
    hits (a launcher's exit report that a teardown explained away is still an event).
    """
    hits = timeline.hits
    if held is not None:
        said = {(h.evidence.file, h.evidence.line) for h in hits if h.rule_id in held}
        hits = [
            h for h in hits if h.rule_id in held or (h.evidence.file, h.evidence.line) not in said
        ]
    return build_frame(hits, timeline.tracebacks, timeline.failures)


def build_frame(
    hits: list[Hit], tracebacks: list[Traceback], failures: list[ChildFailure]
) -> pd.DataFrame:
    """The event table: one row per signal, traceback and launcher failure report.

    pandas is imported here, not at module load: it costs half a second of start-up that
    the terminal and JSON outputs never need.
    """
    import pandas as pd

    rows: list[dict[str, object]] = []
    for h in hits:
        ev = h.evidence
        rows.append(_row(ev, pid=h.roles.pid, kind="signal", signal=h.rule_id))
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
                "text": headline(final)
                + (f" (printed {tb.repeats} more times)" if tb.repeats else ""),
            }
        )
    for f in failures:
        rows.append(_row(f.evidence, pid=f.pid, kind="child_failure", signal=str(f.exitcode)))
    frame = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    frame["time"] = pd.to_datetime(frame["time"], unit="s", errors="coerce")
    frame["rank"] = frame["rank"].astype("Int64")
    frame["pid"] = frame["pid"].astype("Int64")
    return frame.sort_values(
        ["time", "source", "line"], na_position="last", kind="stable"
    ).reset_index(drop=True)


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
