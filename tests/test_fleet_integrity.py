"""The fleet table under the accidents of real use: a second writer, Ctrl-C, damaged and
linked job directories, a slow detector in one job; and the failure signatures it groups by."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import EVIL_RULE
from fleet_support import FIXTURE_JOBS, make_jobs

MISSING = [m for m in ("pyarrow", "fsspec", "duckdb") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"the fleet extra is not installed (no {', '.join(MISSING)})"
)

#: A CUDA OOM job's log (fixtures/gpu/cuda_oom_single, in torch's exact format).
OOM = (Path(__file__).parents[1] / "fixtures/gpu/cuda_oom_single/train.log").read_text()

SLOW_RUN = """
import signal, sys, time
from crashlens.fleet import run_triage

# a terminal's Ctrl-C: Python leaves SIGINT ignored when it inherits it so (a shell's
# background job), which is not what a user at a prompt has
signal.signal(signal.SIGINT, signal.default_int_handler)

def slow(done, total, outcome):
    print(done, flush=True)
    time.sleep(0.5)

run_triage([sys.argv[1]], sys.argv[2], workers=1, commit_every=1000, progress=slow)
"""


def _start_slow(root: Path, out: Path, log: Path) -> subprocess.Popen[bytes]:
    sink = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_RUN, str(root), str(out)], stdout=sink, stderr=subprocess.STDOUT
    )
    sink.close()
    return proc


def _wait_for(log: Path, done: int, proc: subprocess.Popen[bytes], limit: float = 60) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        lines = log.read_text().split()
        if lines and lines[-1].isdigit() and int(lines[-1]) >= done:
            return
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError(f"the run did not reach {done} jobs: {log.read_text()}")


def test_a_second_writer_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    from crashlens.fleet import run_triage
    from crashlens.fleet.table import FleetTable, TableLockedError

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    make_jobs(root, 12)
    proc = _start_slow(root, out, tmp_path / "first.log")
    try:
        _wait_for(tmp_path / "first.log", 1, proc)
        with pytest.raises(TableLockedError, match=rf"pid {proc.pid} on .*wait for it"):
            run_triage([root], out, workers=1)
    finally:
        proc.kill()
        proc.wait()
    # the first run was killed: its lock is stale (the pid is gone) and the next run takes it
    assert (out / "_fleet.lock").is_file()
    run = run_triage([root], out, workers=2)
    assert run.analysed == 12 and not (out / "_fleet.lock").exists()
    jobs = FleetTable(out).read_jobs()
    assert len(jobs) == 12 and not jobs["job_id"].duplicated().any()


def test_the_cli_says_who_holds_the_table_in_one_line(tmp_path: Path, capsys) -> None:
    from crashlens.cli import main

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    make_jobs(root, 2)
    out.mkdir()
    holder = {"pid": 1, "host": "gpu-login-07", "since": "2026-12-01T03:00:00+00:00"}
    (out / "_fleet.lock").write_text(json.dumps(holder))
    assert main(["triage", str(root), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pid 1 on gpu-login-07" in err[0]
    assert json.loads((out / "_fleet.lock").read_text()) == holder  # not ours: left alone


def test_ctrl_c_commits_the_finished_jobs(tmp_path: Path) -> None:
    from crashlens.fleet import run_triage
    from crashlens.fleet.table import FleetTable

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    make_jobs(root, 12)
    proc = _start_slow(root, out, tmp_path / "run.log")
    _wait_for(tmp_path / "run.log", 3, proc)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    text = (tmp_path / "run.log").read_text()
    assert "TriageInterrupted" in text and "rerun the same command" in text
    done = int(re.search(r"interrupted: (\d+) of 12 job", text)[1])
    table = FleetTable(out)
    assert len(table.commits()) == 1 and len(table.read_jobs()) >= done >= 3
    assert not (out / "_fleet.lock").exists()
    committed = len(table.read_jobs())
    rest = run_triage([root], out, workers=2)
    assert rest.analysed == 12 - committed
    assert len(FleetTable(out).read_jobs()) == 12


def test_damaged_and_empty_logs_are_damaged_jobs_not_healthy_ones(tmp_path: Path) -> None:
    from crashlens.fleet import run_triage

    root = tmp_path / "jobs"
    lines = "".join(
        f"2026-11-30 10:00:{i % 60:02d},000 INFO step {i} loss 1.25\n" for i in range(4000)
    )
    packed = gzip.compress(lines.encode())
    (root / "cut-gz").mkdir(parents=True)
    (root / "cut-gz" / "rank0.log.gz").write_bytes(packed[: len(packed) // 2])
    (root / "zero").mkdir()
    (root / "zero" / "rank0.log").write_bytes(b"")
    (root / "cut-with-oom").mkdir()
    packed = gzip.compress((lines + OOM).encode())
    # cut inside the last deflate block: the OOM's last bytes are lost, its lines are not
    (root / "cut-with-oom" / "rank0.log.gz").write_bytes(packed[:-12])
    (root / "whole").mkdir()
    (root / "whole" / "rank0.log").write_text(lines)
    rows = run_triage([root], None, workers=1).jobs.set_index("job_id")
    assert rows.loc["cut-gz", "status"] == "damaged"
    assert any("read stopped early" in n for n in json.loads(rows.loc["cut-gz", "notes"]))
    assert rows.loc["zero", "status"] == "damaged"
    assert any("empty" in n for n in json.loads(rows.loc["zero", "notes"]))
    # what was read before the damage still counts
    assert rows.loc["cut-with-oom", "status"] == "analysed"
    assert rows.loc["cut-with-oom", "cause_class"] == "cuda_oom"
    assert any("read stopped early" in n for n in json.loads(rows.loc["cut-with-oom", "notes"]))
    assert (
        rows.loc["whole", "status"] == "analysed" and json.loads(rows.loc["whole", "notes"]) == []
    )


def test_linked_job_directories_are_followed_and_loops_are_not(tmp_path: Path) -> None:
    from crashlens.fleet import run_triage
    from crashlens.fleet.jobs import discover_jobs

    real, root = tmp_path / "scheduler-output" / "job-77", tmp_path / "jobs"
    real.mkdir(parents=True)
    (real / "rank0.log").write_text(OOM)
    root.mkdir()
    (root / "job-77").symlink_to(real, target_is_directory=True)
    (root / "looping").mkdir()
    (root / "looping" / "rank0.log").write_text("step 1\n")
    (root / "looping" / "again").symlink_to(root, target_is_directory=True)
    found = {j.job_id: j for j in discover_jobs([str(root)])}
    assert [f.rel for f in found["job-77"].files] == ["rank0.log"]
    assert [f.rel for f in found["looping"].files] == ["rank0.log"]
    out = tmp_path / "fleet.parquet"
    first = run_triage([root], out, workers=1).jobs.set_index("job_id")
    assert first.loc["job-77", "cause_class"] == "cuda_oom"
    # a change behind the link is a change of the job
    time.sleep(0.01)
    (real / "rank0.log").write_text("step 1\nstep 2\n")
    os.utime(real / "rank0.log", (time.time() + 5, time.time() + 5))
    again = run_triage([root], out, workers=1)
    assert again.analysed == 1 and pd.isna(
        again.jobs.set_index("job_id").loc["job-77", "cause_class"]
    )


def test_a_detector_that_times_out_in_one_job_still_runs_in_the_next(tmp_path: Path) -> None:
    from crashlens.fleet import run_triage

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "evil.yaml").write_text(EVIL_RULE)
    root = tmp_path / "jobs"
    for name in ("job-a", "job-b"):
        (root / name).mkdir(parents=True)
        (root / name / "rank0.log").write_text(("a" * 3000 + "b\n") * 2 + OOM)
    rows = run_triage([root], None, workers=1, rules=[rules]).jobs.set_index("job_id")
    for name in ("job-a", "job-b"):
        notes = json.loads(rows.loc[name, "notes"])
        assert any("evil-backtrack.evil" in n and "timed out" in n for n in notes), (name, notes)
        assert rows.loc[name, "cause_class"] == "cuda_oom"


def test_the_same_failure_on_other_nodes_and_sizes_is_one_signature(tmp_path: Path) -> None:
    from crashlens.fleet import run_triage

    root = tmp_path / "jobs"
    variants = {
        "a": OOM,
        # the same failure with other sizes and another process id
        "b": OOM.replace("2.00 GiB", "1.50 GiB").replace("79.15 GiB", "39.39 GiB"),
        # the same exception raised from another function of the user's model
        "c": OOM.replace('model.py", line 84, in forward', 'model.py", line 97, in moe_forward'),
    }
    for name, text in variants.items():
        (root / name).mkdir(parents=True)
        (root / name / "train.log").write_text(text)
    rows = run_triage([root], None, workers=1).jobs.set_index("job_id")
    assert set(rows["cause_class"]) == {"cuda_oom"}
    assert rows.loc["a", "signature"] == rows.loc["b", "signature"]
    assert len(rows.loc["a", "signature"]) == 16
    assert "Tried to allocate <n> GiB" in rows.loc["a", "signature_text"]
    assert rows.loc["a", "signature_text"].endswith("at model.py:forward")
    assert rows.loc["c", "signature"] != rows.loc["a", "signature"]
    assert rows.loc["c", "signature_text"].endswith("at model.py:moe_forward")


def test_fail_on_new_signature_for_cron(tmp_path: Path, capsys) -> None:
    import datetime as dt

    from crashlens.cli import main

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    made = make_jobs(root, len(FIXTURE_JOBS))
    manifest = tmp_path / "jobs.csv"
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    old, new = sorted(made)[:-3], sorted(made)[-3:]
    rows = ["job_id,path,submitted_at"]
    rows += [f"{j},{root / j},{(now - dt.timedelta(days=10)).isoformat()}" for j in old]
    rows += [f"{j},{root / j},{(now - dt.timedelta(hours=1)).isoformat()}" for j in new]
    manifest.write_text("\n".join(rows) + "\n")
    assert main(["triage", "--manifest", str(manifest), "-o", str(out), "-q"]) == 0
    assert main(["triage", "summary", str(out), "-f", "json", "--since", "1d"]) == 0
    summary = json.loads(capsys.readouterr().out)
    new_sigs = [s for s in summary["signatures"] if s["new"]]
    code = main(["triage", "summary", str(out), "--since", "1d", "--fail-on", "new-signature"])
    err = capsys.readouterr().err
    if new_sigs:
        assert code == 1 and f"{len(new_sigs)} new failure signature(s)" in err
    else:
        assert code == 0 and err == ""
    # over the whole history nothing can be new before its first job
    assert main(["triage", "summary", str(out), "--fail-on", "new-signature"]) == 2
    assert "needs --since" in capsys.readouterr().err


def _no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_store_and_cluster_problems_are_one_line_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    pytest.importorskip("s3fs")
    from crashlens.cli import main

    out = tmp_path / "fleet.parquet"
    _no_aws(monkeypatch, tmp_path)
    dead = "endpoint_url=http://127.0.0.1:9"  # nothing listens on the discard port
    assert main(["triage", "s3://ml-logs/failed", "--storage-option", dead, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no credentials" in err[0] and "anon=true" in err[0]
    assert "internal error" not in err[0]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # fsspec keeps a store per options in a process
    assert main(["triage", "s3://ml-logs/failed", "--storage-option", dead, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "http://127.0.0.1:9 does not answer" in err[0]
    assert "endpoint_url" in err[0]
    # a Ray address where nothing listens: at once, not after minutes of retries
    root = tmp_path / "jobs"
    make_jobs(root, 1)
    start = time.monotonic()
    code = main(
        ["triage", str(root), "--engine", "ray", "--address", "127.0.0.1:9", "-o", str(out)]
    )
    assert code == 2 and time.monotonic() - start < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the Ray cluster at 127.0.0.1:9" in err[0]
    assert not out.exists()  # a run that wrote nothing leaves no table behind


def test_analyze_says_how_many_fleet_jobs_failed_the_same_way(tmp_path: Path, capsys) -> None:
    from crashlens.cli import main
    from crashlens.fleet import run_triage

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    made = make_jobs(root, 2 * len(FIXTURE_JOBS))
    run_triage([root], out, workers=2)
    oom = Path(__file__).parents[1] / "fixtures/gpu/cuda_oom_single"
    same = sorted(j for j, fixture in made.items() if fixture == oom)
    assert len(same) == 2
    assert (
        main(
            ["analyze", str(oom), "--fleet", str(out), "-f", "json", "-o", str(tmp_path / "r.json")]
        )
        == 1
    )
    notes = json.loads((tmp_path / "r.json").read_text())["notes"]
    line = next(n for n in notes if "same failure signature" in n)
    assert f"in 2 job(s) of {out}" in line and line.endswith(f"the latest {same[-1]}")
    assert line in capsys.readouterr().err
    # a failure no job of the table had
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.log").write_text(OOM.replace("in forward\n", "in forward_chunked\n"))
    assert (
        main(
            [
                "analyze",
                str(other),
                "--fleet",
                str(out),
                "-q",
                "-f",
                "json",
                "-o",
                str(tmp_path / "o.json"),
            ]
        )
        == 1
    )
    notes = json.loads((tmp_path / "o.json").read_text())["notes"]
    assert f"no job of {out} failed with this signature before" in notes
    assert main(["analyze", str(oom), "--fleet", str(tmp_path)]) == 2


def test_reports_are_written_per_job_and_linked_from_the_fleet_page(tmp_path: Path) -> None:
    from crashlens.cli import main
    from crashlens.fleet import load

    root, out, reports = tmp_path / "jobs", tmp_path / "fleet.parquet", tmp_path / "reports"
    made = make_jobs(root, len(FIXTURE_JOBS))
    (root / "run 7").mkdir()  # an id with a space
    (root / "run 7" / "train.log").write_text(OOM)
    code = main(["triage", str(root), "-o", str(out), "--reports", str(reports), "-q"])
    assert code == 0
    jobs, _ = load(out)
    jobs = jobs.set_index("job_id")
    failed = jobs[jobs["cause_class"].notna()]
    assert len(failed) > 1
    for _, row in failed.iterrows():
        page = Path(row["report"])
        assert page.parent == reports and page.suffix == ".html" and " " not in page.name
        assert row["verdict"] in page.read_text().replace("&#x27;", "'").replace("&quot;", '"')
    assert len(made) + 1 == len(jobs)
    html_out = tmp_path / "fleet.html"
    assert main(["triage", "summary", str(out), "-f", "html", "-o", str(html_out)]) == 0
    html = html_out.read_text()
    link = Path(jobs.loc["run 7", "report"]).resolve().as_uri()
    assert f'<a href="{link}">run 7</a>' in html
    assert jobs.loc["run 7", "signature"] in html


def test_path_fields_read_user_and_date_from_a_nested_layout(tmp_path: Path, capsys) -> None:
    import datetime as dt

    from crashlens.cli import main
    from crashlens.fleet import load

    runs, out = tmp_path / "runs", tmp_path / "fleet.parquet"
    layout = {"alice": "2026-11-28", "bob": "2026-11-30"}
    made = {}
    for user, date in layout.items():
        for job_id, fixture in make_jobs(runs / user / date, 3).items():
            made[f"{user}/{date}/{job_id}"] = fixture
    code = main(["triage", str(runs), "-o", str(out), "--path-fields", "{user}/{date}/{job}", "-q"])
    assert code == 0
    jobs, _ = load(out)
    jobs = jobs.set_index("job_id")
    assert sorted(jobs.index) == sorted(made)
    for job_id in made:
        user, date, _ = job_id.split("/")
        assert jobs.loc[job_id, "user"] == user
        assert jobs.loc[job_id, "submitted_at"] == dt.datetime.fromisoformat(date)
    assert main(["triage", "summary", str(out), "--by", "user", "-f", "json"]) == 0
    groups = {g["key"]: g["jobs"] for g in json.loads(capsys.readouterr().out)["groups"]}
    failed = jobs[jobs["cause_class"].notna()]
    assert groups == failed["user"].value_counts().to_dict()
    assert (
        main(["triage", str(runs), "-o", str(tmp_path / "t2"), "--path-fields", "{who}/{job}"]) == 2
    )
    assert "unknown field {who}" in capsys.readouterr().err


def test_a_job_that_looks_like_many_is_pointed_out(tmp_path: Path, capsys) -> None:
    from crashlens.cli import main

    root = tmp_path / "runs"
    for i in range(70):  # runs/alice/<job>/rank0.log read one level deep: one "job", 70 dirs
        job = root / "alice" / f"job-{i:03d}"
        job.mkdir(parents=True)
        (job / "rank0.log").write_text("2026-11-30 10:00:00,000 INFO train: step 1 loss 1.25\n")
    assert main(["triage", str(root), "-o", str(tmp_path / "fleet.parquet"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "warning: job alice holds logs in 70 directories" in err and "--path-fields" in err


def test_compact_merges_parts_and_survives_a_kill_before_its_cleanup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from crashlens.cli import main
    from crashlens.fleet import run_triage
    from crashlens.fleet.table import FleetTable

    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    make_jobs(root, 12)
    run_triage([root], out, workers=2, commit_every=4)
    run_triage([root], out, workers=2, commit_every=5, force=True)  # 12 superseded rows
    table = FleetTable(out)
    assert len(table.commits()) == 6
    jobs_before, evidence_before = table.read_jobs(), table.read_evidence()
    # killed after the compaction's commit record, before the old parts were removed
    monkeypatch.setattr(FleetTable, "remove_orphans", lambda self: 0)
    with table.lock():
        assert table.compact() == (6, 12, 12)
    monkeypatch.undo()
    assert len(table.commits()) == 1 and len(table.orphans()) == 18  # 6 records, their 12 parts
    pd.testing.assert_frame_equal(table.read_jobs(), jobs_before)
    pd.testing.assert_frame_equal(table.read_evidence(), evidence_before)
    # the CLI's compaction of a compacted table has nothing to merge; it cleans up
    assert main(["triage", "compact", str(out)]) == 0
    assert "nothing to merge" in capsys.readouterr().out
    rerun = run_triage([root], out, workers=2)  # the next writer removes what was replaced
    assert rerun.analysed == 0 and table.orphans() == []
    assert len(list((out / "jobs").glob("part-*.parquet"))) == 1
    pd.testing.assert_frame_equal(table.read_jobs(), jobs_before)


def test_the_fleet_page_names_each_section_once_and_keeps_causes_apart(tmp_path: Path) -> None:
    import re as regex

    from crashlens.cli import main

    root, out, page = tmp_path / "jobs", tmp_path / "fleet.parquet", tmp_path / "fleet.html"
    make_jobs(root, 2 * len(FIXTURE_JOBS))
    assert main(["triage", str(root), "-o", str(out), "-q"]) == 0
    assert main(["triage", "summary", str(out), "-f", "html", "-o", str(page)]) == 0
    html = page.read_text()
    headings = regex.findall(r"<h2>([^<]*)</h2>", html)
    assert len(headings) == len(set(headings)), headings
    legend = regex.findall(r'<span><i style="background:(#[0-9a-f]{6})"></i>([^<]+)</span>', html)
    colours = [c for c, name in legend if not name.startswith("(")]
    assert len(colours) > 3 and len(set(colours)) == len(colours)  # no two causes share one
    no_failure = next(c for c, name in legend if name == "(no failure)")
    assert no_failure == "#c7c7c7"  # grey, not the alarm colour
    weeks = regex.findall(r'font-size="10">(\d{4}-\d{2}-\d{2})</text>', html)
    assert weeks  # the trend's ticks carry the year


def test_quiet_means_quiet_on_ray_too(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    root, out = tmp_path / "jobs", tmp_path / "fleet.parquet"
    make_jobs(root, 2)
    command = ["triage", str(root), "-o", str(out), "-q", "--engine", "ray", "--workers", "1"]
    proc = subprocess.run(
        [sys.executable, "-m", "crashlens", *command],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""  # Ray's own warnings too (token auth)


def test_a_table_written_before_the_scheduler_columns_reads_them_as_nulls(tmp_path: Path) -> None:
    # a part as an earlier crashlens wrote it (no scheduler_state, no nodelist) beside new ones
    import pyarrow.parquet as pq

    from crashlens.fleet import load, run_triage

    root, table = tmp_path / "jobs", tmp_path / "fleet"
    make_jobs(root, 2)
    run_triage([root], table, workers=1)
    (part,) = sorted((table / "jobs").glob("part-*.parquet"))
    old = pq.read_table(part)
    pq.write_table(old.drop_columns(["scheduler_state", "nodelist"]), part)
    make_jobs(root, 1, start=2)
    run_triage([root], table, workers=1)
    jobs, _ = load(table)
    assert len(jobs) == 3 and list(jobs.columns).index("nodelist") > list(jobs.columns).index(
        "queue"
    )
    assert jobs["scheduler_state"].isna().all() and jobs["nodelist"].isna().all()
    # the summary groups by the new column too, when no part has it
    for part in sorted((table / "jobs").glob("part-*.parquet")):
        written = pq.read_table(part)
        if "nodelist" in written.column_names:
            pq.write_table(written.drop_columns(["scheduler_state", "nodelist"]), part)
    from crashlens.fleet.summary import summarize

    failed = int(jobs["cause_class"].notna().sum())
    groups = summarize(table, by="state")["groups"]
    assert failed > 0 and [(g["key"], g["jobs"]) for g in groups] == [("(not from SLURM)", failed)]
