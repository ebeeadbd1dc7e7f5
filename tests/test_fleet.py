"""Fleet triage (docs/fleet.md): engines, Parquet table, incremental runs, faults, summary.

Job trees are copies of the project's fixtures; every expected value comes from analysing the
fixture itself with ``crashlens.analyze`` (tests/fleet_support.py). The Ray tests run a real
local Ray (``ray.init(num_cpus=2)``, once for this module) and read 200 jobs through s3fs from
an S3-compatible endpoint (moto's server) on 127.0.0.1. They are last in this file so that the
local engine never forks a process that holds a Ray connection.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from crashlens.fleet.table import FLEET_SCHEMA_VERSION
from fleet_support import FIXTURE_JOBS, ROOT, Expected, expected_of, make_jobs

FLEET_MODULES = ("ray", "pyarrow", "fsspec", "s3fs", "duckdb", "moto")
MISSING = [m for m in FLEET_MODULES if importlib.util.find_spec(m) is None]
needs_fleet = pytest.mark.skipif(
    bool(MISSING),
    reason=f"the fleet extra is not installed (no {', '.join(MISSING)}): "
    "pip install -e '.[dev,fleet]'",
)
#: Columns that say what the logs say (the rest depend on where and when a job was read).
ANALYSIS_COLUMNS = [
    "job_id", "status", "cause_class", "rule", "title", "kind", "confidence", "severity",
    "verdict", "first_rank", "first_host", "first_time", "n_ranks", "n_files", "bytes",
    "n_causes", "symptoms", "torch", "cuda", "nccl", "driver", "gpu", "environment",
    "crashlens_version", "rules_hash", "error", "signature", "signature_text", "notes",
    "skipped_files", "hosts",
]  # fmt: skip
EXTRA_MESSAGE = "crashlens triage needs the fleet extra: pip install 'crashlens[fleet]'"


@pytest.fixture(scope="module")
def expected() -> dict[Path, Expected]:
    from crashlens.rulebase import load_rules

    rules = load_rules()
    return {fixture: expected_of(fixture, rules) for fixture in FIXTURE_JOBS}


def _none(value: object) -> object:
    return None if pd.isna(value) else value


def _check_rows(frame: pd.DataFrame, jobs: dict[str, Path], expected: dict[Path, Expected]):
    assert sorted(frame["job_id"]) == sorted(jobs)
    for row in frame.itertuples(index=False):
        want = expected[jobs[row.job_id]]
        got = (
            row.status,
            _none(row.cause_class),
            _none(row.rule),
            _none(row.first_rank),
            _none(row.first_host),
            row.n_files,
            row.n_ranks,
            _none(row.nccl),
            _none(row.signature),
        )
        assert got == (
            "analysed",
            want.cause_class,
            want.rule,
            want.first_rank,
            want.first_host,
            want.n_files,
            want.n_ranks,
            want.nccl,
            want.signature,
        ), row.job_id


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            out[str(p)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


# --- local engine ------------------------------------------------------------------------------


@needs_fleet
def test_local_engine_rows_and_evidence_match_each_fixtures_analysis(tmp_path, expected):
    import crashlens
    from crashlens.fleet import load

    root = tmp_path / "jobs"
    jobs = make_jobs(root, 2 * len(FIXTURE_JOBS))
    before = _snapshot(root)
    frame = crashlens.triage(root, tmp_path / "fleet.parquet", workers=2)
    _check_rows(frame, jobs, expected)
    assert set(frame["crashlens_version"]) == {crashlens.__version__}
    assert frame["rules_hash"].nunique() == 1 and len(frame["rules_hash"].iloc[0]) == 16
    assert set(frame["schema_version"]) == {FLEET_SCHEMA_VERSION}
    assert (frame["path"] == [str(root / j) for j in frame["job_id"]]).all()
    jobs_table, evidence = load(tmp_path / "fleet.parquet")
    pd.testing.assert_frame_equal(jobs_table, frame)
    for job_id, fixture in jobs.items():
        top = evidence[(evidence["job_id"] == job_id) & (evidence["position"] == 0)]
        assert tuple(top["text"]) == expected[fixture].evidence, job_id
        # Evidence names files relative to the job directory.
        assert all((root / job_id / f).is_file() for f in top["file"]), job_id
    assert _snapshot(root) == before  # inputs untouched


def test_a_worker_compiles_the_rules_once_and_each_job_gets_fresh_state(tmp_path, expected):
    from crashlens.fleet.jobs import discover_jobs
    from crashlens.fleet.worker import WorkerContext, analyze_job, rules_hash, session_factory
    from crashlens.rulebase import load_rules

    pytest.importorskip("fsspec", reason="the fleet extra is not installed")
    rules = load_rules()
    ctx = WorkerContext(rules, rules_hash(rules))
    factory = session_factory(ctx)
    one, two = factory.session(), factory.session()
    # the compiled rules are shared; each job's timeout state is its own
    assert one.pack is two.pack is factory.pack
    assert one.matcher.index is two.matcher.index is factory.pack.index
    assert one.scanner is two.scanner is factory.pack.scanner
    assert one.matcher is not two.matcher and one.matcher.disabled is not two.matcher.disabled
    assert one.inputs is not two.inputs and one.notes is not two.notes
    # The same worker analyses different jobs one after the other: each as if alone.
    root = tmp_path / "jobs"
    jobs = make_jobs(root, len(FIXTURE_JOBS))
    rows = [analyze_job(job, ctx).row for job in discover_jobs([str(root)])]
    assert session_factory(ctx) is factory
    _check_rows(pd.DataFrame(rows).convert_dtypes(), jobs, expected)


@needs_fleet
def test_incremental_rerun_analyses_only_new_and_changed_jobs(tmp_path, expected):
    from crashlens.fleet import run_triage
    from crashlens.fleet.table import FleetTable

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    jobs = make_jobs(root, 20)
    first = run_triage([root], out, workers=2)
    assert (first.found, first.analysed, first.unchanged) == (20, 20, 0)
    again = run_triage([root], out, workers=2)
    assert (again.analysed, again.unchanged) == (0, 20)
    assert len(FleetTable(out).commits()) == 1  # nothing appended
    # One job's file changes (mtime), two jobs are new.
    log = next(p for p in sorted((root / "job-0003").rglob("*.log")))
    os.utime(log, (log.stat().st_atime + 3600, log.stat().st_mtime + 3600))
    jobs.update(make_jobs(root, 2, start=20))
    third = run_triage([root], out, workers=2)
    assert (third.found, third.analysed, third.unchanged) == (22, 3, 19)
    table = FleetTable(out).read_jobs()
    _check_rows(table, jobs, expected)
    latest = int(table["batch"].max())
    assert sorted(table.loc[table["batch"] == latest, "job_id"]) == [
        "job-0003",
        "job-0020",
        "job-0021",
    ]
    forced = run_triage([root], out, workers=2, force=True)
    assert (forced.analysed, forced.unchanged) == (22, 0)
    _check_rows(FleetTable(out).read_jobs(), jobs, expected)


@needs_fleet
def test_bad_jobs_become_rows_and_the_run_goes_on(tmp_path, expected, capsys):
    from crashlens.cli import main
    from crashlens.fleet.table import FleetTable

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    good = make_jobs(root, 3)
    (root / "broken").mkdir()
    (root / "broken" / "rank_0.log").symlink_to(tmp_path / "gone.log")
    (root / "binary").mkdir()
    (root / "binary" / "train.log").write_bytes(b"\x7fELF\x00\x01\x02" * 200)
    (root / "docs").mkdir()
    (root / "docs" / "README.md").write_text("# notes\n")
    (root / "nothing").mkdir()
    before = _snapshot(root)
    assert main(["triage", str(root), "-o", str(out), "--workers", "2"]) == 0
    captured = capsys.readouterr()
    assert "7 job(s): 7 analysed now (3 ok, 2 empty, 2 damaged, 0 error)" in captured.out
    table = FleetTable(out).read_jobs().set_index("job_id")
    # logs that exist but cannot be read are damage, with the reason kept per file
    assert table.loc["broken", "status"] == "damaged"
    skipped = json.loads(table.loc["broken", "skipped_files"])
    assert skipped == [{"path": "rank_0.log", "reason": skipped[0]["reason"]}]
    assert "broken symlink" in skipped[0]["reason"]
    assert any("nothing readable" in n for n in json.loads(table.loc["broken", "notes"]))
    assert table.loc["binary", "status"] == "damaged"
    assert "binary file" in json.loads(table.loc["binary", "skipped_files"])[0]["reason"]
    assert list(table.loc[["docs", "nothing"], "status"]) == ["empty", "empty"]
    assert captured.err == ""
    _check_rows(table.loc[sorted(good)].reset_index(), good, expected)
    assert _snapshot(root) == before
    # Damage is a finding, not a failure of the run: an unchanged rerun appends nothing...
    assert main(["triage", str(root), "-o", str(out), "-q"]) == 0
    assert capsys.readouterr().out == ""
    assert len(FleetTable(out).commits()) == 1
    # ...and once the job's log is there, the job is analysed again, whole.
    (root / "broken" / "rank_0.log").unlink()
    (root / "broken" / "rank_0.log").write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.23 GiB is free.\n"
    )
    assert main(["triage", str(root), "-o", str(out), "-q"]) == 0
    newest = FleetTable(out).read_jobs().set_index("job_id")
    assert len(FleetTable(out).commits()) == 2
    assert newest.loc["broken", "batch"] == 2 and newest.loc["broken", "status"] == "analysed"
    assert newest.loc["broken", "cause_class"] == "cuda_oom"


@needs_fleet
def test_worker_killed_mid_run_is_retried(tmp_path, expected):
    from crashlens.fleet import run_triage

    root = tmp_path / "jobs"
    jobs = make_jobs(root, 30)
    killed: list[int] = []

    def kill_first_worker(done, total, outcome):
        if not killed:
            os.kill(outcome.worker_pid, signal.SIGKILL)
            killed.append(outcome.worker_pid)

    result = run_triage([root], None, workers=2, progress=kill_first_worker)
    assert killed and killed[0] != os.getpid()
    assert result.analysed == 30 and result.statuses == Counter({"analysed": 30})
    _check_rows(result.jobs, jobs, expected)


@needs_fleet
def test_a_job_that_kills_its_worker_becomes_an_error_row(tmp_path, expected, monkeypatch):
    from crashlens.fleet import run_triage, worker

    root = tmp_path / "jobs"
    jobs = make_jobs(root, 12)
    real = worker.analyze_job

    def dies_on_job_4(job, ctx):  # inherited by the forked workers
        if job.job_id == "job-0004":
            os._exit(3)
        return real(job, ctx)

    monkeypatch.setattr(worker, "analyze_job", dies_on_job_4)
    result = run_triage([root], None, workers=2)
    table = result.jobs.set_index("job_id")
    assert table.loc["job-0004", "status"] == "error"
    assert table.loc["job-0004", "error"] == (
        "the worker process analysing this job died (3 attempt(s))"
    )
    del jobs["job-0004"]
    _check_rows(table.drop(index="job-0004").reset_index(), jobs, expected)


KILLED_RUN = """
import os, sys
from crashlens.fleet import run_triage

def die(done, total, outcome):
    if done == 12:
        os._exit(9)

run_triage([sys.argv[1]], sys.argv[2], workers=2, commit_every=5, progress=die)
"""


@needs_fleet
def test_killed_run_resumes_from_the_committed_parts(tmp_path, expected):
    from crashlens.fleet import run_triage
    from crashlens.fleet.table import FleetTable

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    jobs = make_jobs(root, 25)
    log = tmp_path / "run.log"
    with log.open("wb") as sink:  # a file, not a pipe: nothing waits on the workers' stdio
        proc = subprocess.run(
            [sys.executable, "-c", KILLED_RUN, str(root), str(out)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    assert proc.returncode == 9, log.read_text()
    table = FleetTable(out)
    assert len(table.commits()) == 2 and len(table.read_jobs()) == 10
    # What a kill during a commit leaves: a dot-named part being written; the next batch's
    # evidence part (killed before its jobs part); its jobs part too (killed before the commit
    # record). They carry the number the next batch would get, and rows of committed jobs.
    (out / "jobs" / ".part-000003-0123456789ab.parquet.tmp").write_bytes(b"PAR1 torn")
    for table_dir, ident in (("evidence", "0123456789ab"), ("jobs", "ba9876543210")):
        committed = next((out / table_dir).glob("part-000002-*.parquet"))
        shutil.copy(committed, out / table_dir / f"part-000003-{ident}.parquet")
    assert len(table.orphans()) == 3
    assert len(table.read_jobs()) == 10
    evidence = table.read_evidence()
    assert set(evidence["job_id"]) <= set(table.read_jobs()["job_id"])
    assert set(evidence["batch"]) == {1, 2}
    assert not evidence.duplicated(["job_id", "position", "file", "line"]).any()
    resumed = run_triage([root], out, workers=2)
    assert (resumed.analysed, resumed.unchanged) == (15, 10)
    assert resumed.orphans_removed == 3 and FleetTable(out).orphans() == []
    # the resumed run numbered its batch past the orphans', and no evidence row is doubled
    assert [c.batch for c in FleetTable(out).commits()] == [1, 2, 4]
    final = FleetTable(out)
    evidence = final.read_evidence()
    assert not evidence.duplicated(["job_id", "position", "file", "line"]).any()
    batches = final.read_jobs().set_index("job_id")["batch"]
    assert all(batches[row.job_id] == row.batch for row in evidence.itertuples())
    _check_rows(final.read_jobs(), jobs, expected)


# --- summary -----------------------------------------------------------------------------------


def _cause(e: Expected) -> str:
    return e.cause_class or "(no failure)"


def _monday(when: dt.datetime) -> str:
    return (when - dt.timedelta(days=when.weekday())).strftime("%Y-%m-%d")


@needs_fleet
def test_summary_counts_equal_a_hand_count(tmp_path, expected, capsys):
    from crashlens.cli import main

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    jobs = make_jobs(root, 40)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    submitted = {
        job_id: now - dt.timedelta(days=2 if i < 20 else 20, hours=i % 5)
        for i, job_id in enumerate(sorted(jobs))
    }
    manifest = tmp_path / "manifest.csv"
    lines = ["job_id,path,submitted_at,user,queue"]
    for i, job_id in enumerate(sorted(jobs)):
        path = f"jobs/{job_id}" if i % 2 else str(root / job_id)  # relative to the manifest
        lines.append(f"{job_id},{path},{submitted[job_id].isoformat()},user{i % 3},gpu")
    manifest.write_text("\n".join(lines) + "\n")
    assert main(["triage", "--manifest", str(manifest), "-o", str(out), "--workers", "2"]) == 0
    capsys.readouterr()

    def summary(*args: str) -> dict:
        assert main(["triage", "summary", str(out), "-f", "json", *args]) == 0
        return json.loads(capsys.readouterr().out)

    want = {job_id: expected[fixture] for job_id, fixture in jobs.items()}
    s = summary()
    assert s["totals"] == {
        "jobs": 40,
        "analysed": 40,
        "error": 0,
        "empty": 0,
        "damaged": 0,
        "failed": sum(1 for e in want.values() if e.cause_class),
        "healthy": sum(1 for e in want.values() if not e.cause_class),
    }
    assert {c["cause"]: c["jobs"] for c in s["causes"]} == Counter(map(_cause, want.values()))
    weeks = Counter((_monday(submitted[j]), _cause(e)) for j, e in want.items())
    assert {(w["week"], w["cause"]): w["jobs"] for w in s["weeks"]} == weeks
    hardware = Counter(
        (e.cause_class, e.first_host or "(unknown)")
        for e in want.values()
        if e.cause_class == "gpu_hardware"
    )
    assert hardware  # the fixtures include an Xid failure
    assert {(h["cause_class"], h["host"]): h["jobs"] for h in s["hardware_hosts"]} == hardware
    # node blame: failures that began on a host, out of every job that ran there
    ran = Counter(h for e in want.values() for h in {*e.hosts, *filter(None, [e.first_host])})
    blamed = Counter(
        e.first_host
        for e in want.values()
        if e.cause_class in ("gpu_hardware", "nccl_error", "host_oom") and e.first_host
    )
    assert blamed
    assert {n["host"]: (n["failed"], n["jobs"]) for n in s["node_blame"]} == {
        h: (n, ran[h]) for h, n in blamed.items()
    }
    assert all(n["jobs"] >= n["failed"] for n in s["node_blame"])
    nccl = Counter((e.nccl, _cause(e)) for e in want.values() if e.nccl)
    got_nccl = {(v["version"], v["cause"]): v["jobs"] for v in s["versions"] if v["fact"] == "nccl"}
    assert got_nccl == nccl
    recent = summary("--since", "7d")
    recent_want = [want[j] for j in want if submitted[j] >= now - dt.timedelta(days=7)]
    assert recent["totals"]["jobs"] == len(recent_want) == 20
    assert {c["cause"]: c["jobs"] for c in recent["causes"]} == Counter(map(_cause, recent_want))
    by_host = summary("--by", "host")
    hosts = Counter(e.first_host or "(unknown)" for e in want.values() if e.cause_class)
    assert {g["key"]: g["jobs"] for g in by_host["groups"]} == hosts
    by_rule = summary("--by", "rule")
    assert {g["key"]: g["jobs"] for g in by_rule["groups"]} == Counter(
        e.rule for e in want.values() if e.rule
    )
    by_user = summary("--by", "user")
    users = {job_id: f"user{i % 3}" for i, job_id in enumerate(sorted(jobs))}
    assert {g["key"]: g["jobs"] for g in by_user["groups"]} == Counter(
        users[j] for j, e in want.items() if e.cause_class
    )
    # signatures: one group per distinct failure, with its jobs, first and last seen
    by_signature = summary("--by", "signature")
    signatures = Counter(e.signature for e in want.values() if e.signature)
    assert {g["key"]: g["jobs"] for g in by_signature["groups"]} == signatures
    for g in by_signature["signatures"]:
        times = [submitted[j] for j, e in want.items() if e.signature == g["signature"]]
        assert (g["first_seen"], g["last_seen"]) == (
            min(times).strftime("%Y-%m-%dT%H:%M:%S"),
            max(times).strftime("%Y-%m-%dT%H:%M:%S"),
        )
        assert set(g["examples"]) <= {j for j, e in want.items() if e.signature == g["signature"]}
        assert g["new"] is False  # no --since: nothing is new
    by_week = summary("--by", "week")
    assert {g["key"]: g["jobs"] for g in by_week["groups"]} == Counter(
        _monday(t) for t in submitted.values()
    )
    # The manifest's fields are columns.
    from crashlens.fleet import load

    table, _ = load(out)
    assert set(table["user"]) == {"user0", "user1", "user2"} and set(table["queue"]) == {"gpu"}
    # Text and Markdown carry the same counts.
    top = s["causes"][0]
    assert main(["triage", "summary", str(out)]) == 0
    text = capsys.readouterr().out
    assert "40 job(s):" in text and top["cause"] in text
    assert main(["triage", "summary", str(out), "-f", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# crashlens fleet summary") and f"| {top['jobs']} |" in md


@needs_fleet
def test_html_fleet_report_is_self_contained_and_escapes_log_text(tmp_path, capsys):
    from crashlens.cli import main

    root, out, page = tmp_path / "jobs", tmp_path / "fleet.parquet", tmp_path / "fleet.html"
    make_jobs(root, 18)
    bad = root / "<img src=x onerror=alert(1)>"
    bad.mkdir()
    (bad / "rank_0.log").symlink_to(tmp_path / "missing.log")
    assert main(["triage", str(root), "-o", str(out), "-q"]) == 0
    assert main(["triage", "summary", str(out), "-f", "html", "-o", str(page)]) == 0
    html = page.read_text()
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'' in html
    assert html.count("<svg") == 2  # causes and weekly trend
    assert "<script" not in html and "src=" not in html.replace("src=x", "")
    assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    # No external resources: the only URL is the SVG namespace.
    assert set(re.findall(r"https?://[^\s\"'<]+", html)) == {"http://www.w3.org/2000/svg"}


# --- without the extra, and the lazy API ------------------------------------------------------

BLOCKED = """
import sys
for name in ("pyarrow", "fsspec", "ray", "duckdb"):
    sys.modules[name] = None  # an import of it now fails, as if it were not installed
import crashlens
assert callable(crashlens.triage)
from crashlens.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_triage_without_the_fleet_extra_exits_3_and_analyze_still_works(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", BLOCKED, *args], capture_output=True, text=True, timeout=120
        )

    proc = run("triage", str(tmp_path), "-o", str(tmp_path / "fleet.parquet"))
    assert proc.returncode == 3 and proc.stderr.strip() == EXTRA_MESSAGE
    proc = run("triage", "summary", str(tmp_path / "fleet.parquet"))
    assert proc.returncode == 3 and proc.stderr.strip() == EXTRA_MESSAGE
    fixture = ROOT / "fixtures" / "gpu" / "cuda_oom_single"
    proc = run("analyze", str(fixture), "-f", "json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["causes"][0]["class"] == "cuda_oom"
    assert not (tmp_path / "fleet.parquet").exists()


def test_import_crashlens_loads_no_fleet_packages():
    code = (
        "import sys, crashlens\n"
        "heavy = [m for m in ('pyarrow', 'ray', 'duckdb', 'fsspec', 'pandas') if m in sys.modules]\n"
        "print(heavy)\n"
        "print(crashlens.triage.__module__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split("\n")[:2] == ["[]", "crashlens.fleet"], proc.stderr


@needs_fleet
def test_jobs_glob_and_parquet_manifest_choose_the_jobs(tmp_path, expected):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import crashlens

    root = tmp_path / "jobs"
    jobs = make_jobs(root, 24)
    chosen = crashlens.triage(root, None, jobs="job-000[0-4]", workers=2)
    _check_rows(chosen, {j: jobs[j] for j in sorted(jobs)[:5]}, expected)
    # Two levels: <week>/<job>; the job id is the relative path.
    nested = tmp_path / "nested"
    for week, ids in (("w1", ["job-0000", "job-0001"]), ("w2", ["job-0002"])):
        for job_id in ids:
            shutil.copytree(root / job_id, nested / week / job_id)
    deep = crashlens.triage(nested, None, jobs="w*/*", workers=2)
    assert list(deep["job_id"]) == ["w1/job-0000", "w1/job-0001", "w2/job-0002"]
    # (a healthy job's class is missing: NaN in a frame, as _check_rows reads it)
    assert [_none(c) for c in deep["cause_class"]] == [
        expected[jobs[j]].cause_class for j in ("job-0000", "job-0001", "job-0002")
    ]
    manifest = tmp_path / "jobs.parquet"
    picked = ["job-0007", "job-0011", "job-0023"]
    pq.write_table(
        pa.table({"job_id": [f"m-{j}" for j in picked], "path": [str(root / j) for j in picked]}),
        manifest,
    )
    from_manifest = crashlens.triage((), None, manifest=manifest, workers=2)
    assert list(from_manifest["job_id"]) == [f"m-{j}" for j in picked]
    _check_rows(
        from_manifest.assign(job_id=from_manifest["job_id"].str[2:]),
        {j: jobs[j] for j in picked},
        expected,
    )


@needs_fleet
def test_cli_errors_are_one_line(tmp_path, capsys):
    from crashlens.cli import main

    root = tmp_path / "jobs"
    make_jobs(root, 1)
    assert main(["triage", str(tmp_path / "nope"), "-o", str(tmp_path / "t")]) == 2
    assert capsys.readouterr().err.strip().endswith("nope: not a directory (or not found)")
    assert main(["triage", str(root), "-o", str(root / "fleet.parquet")]) == 2
    assert "would be written inside the input" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    assert main(["triage", str(root), "-o", str(tmp_path / "other")]) == 2
    assert "not a fleet table" in capsys.readouterr().err
    assert (tmp_path / "other" / "keep.txt").read_text() == "x"
    assert main(["triage", "summary", str(tmp_path / "other")]) == 2
    assert "not a fleet table" in capsys.readouterr().err


# --- Ray and object storage (last: see the module docstring) -----------------------------------


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 holding 200 jobs generated from the fixtures."""
    if MISSING:
        pytest.skip(f"the fleet extra is not installed (no {', '.join(MISSING)})")
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    options = {"endpoint_url": url, "key": "testing", "secret": "testing"}
    boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket="fleet")
    root = tmp_path_factory.mktemp("s3jobs") / "jobs"
    jobs = make_jobs(root, 200)
    fs = s3fs.S3FileSystem(**options)
    fs.put(f"{root}/", "fleet/jobs/", recursive=True)
    fs.invalidate_cache()
    yield {"options": options, "root": root, "jobs": jobs}
    server.stop()


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray for this module (started once, stopped after the Ray tests)."""
    if MISSING:
        pytest.skip(f"the fleet extra is not installed (no {', '.join(MISSING)})")
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    yield ray
    ray.shutdown()


@needs_fleet
def test_200_jobs_from_s3_equal_the_local_disk_run_on_both_engines(s3, tmp_path, expected, request):
    import crashlens
    from crashlens.fleet import load

    local = crashlens.triage(s3["root"], tmp_path / "disk.parquet", workers=2)
    _check_rows(local, s3["jobs"], expected)
    from_s3 = crashlens.triage(
        "s3://fleet/jobs", tmp_path / "s3-local.parquet", storage_options=s3["options"], workers=2
    )
    # The CLI over the same store, with its options on the command line and a glob.
    from crashlens.cli import main

    opts = [f"--storage-option={k}={v}" for k, v in s3["options"].items()]
    out = tmp_path / "cli.parquet"
    assert main(["triage", "s3://fleet/jobs", "-o", str(out), "--jobs", "job-001*", *opts]) == 0
    cli_jobs = load(out)[0]
    want = local[local["job_id"].str.startswith("job-001")].reset_index(drop=True)
    pd.testing.assert_frame_equal(cli_jobs[ANALYSIS_COLUMNS], want[ANALYSIS_COLUMNS])
    request.getfixturevalue("ray_cluster")  # only now: the local engine has forked already
    from_ray = crashlens.triage(
        "s3://fleet/jobs", tmp_path / "s3-ray.parquet", engine="ray", storage_options=s3["options"]
    )
    for frame in (from_s3, from_ray):
        assert list(frame["path"]) == [f"s3://fleet/jobs/{j}" for j in frame["job_id"]]
        pd.testing.assert_frame_equal(frame[ANALYSIS_COLUMNS], local[ANALYSIS_COLUMNS])
    evidence = [
        load(tmp_path / name)[1].drop(columns=["batch"])
        for name in ("disk.parquet", "s3-local.parquet", "s3-ray.parquet")
    ]
    assert len(evidence[0]) > 200
    pd.testing.assert_frame_equal(evidence[1], evidence[0])
    pd.testing.assert_frame_equal(evidence[2], evidence[0])


@needs_fleet
def test_ray_worker_killed_mid_run_is_retried(ray_cluster, tmp_path, expected):
    from crashlens.fleet import run_triage

    root = tmp_path / "jobs"
    jobs = make_jobs(root, 40)
    killed: list[int] = []

    def kill_first_worker(done, total, outcome):
        if not killed:
            assert outcome.worker_pid != os.getpid()
            os.kill(outcome.worker_pid, signal.SIGKILL)
            killed.append(outcome.worker_pid)

    result = run_triage(
        [root], tmp_path / "fleet.parquet", engine="ray", progress=kill_first_worker
    )
    assert killed
    assert result.statuses == Counter({"analysed": 40})
    _check_rows(result.jobs, jobs, expected)
    again = run_triage([root], tmp_path / "fleet.parquet", engine="ray")
    assert (again.analysed, again.unchanged) == (0, 40)
