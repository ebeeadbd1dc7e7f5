"""``crashlens analyze --slurm JOBID``: the scheduler's record of a job, parsed, its output files
found, its verdict diagnosed; on captured records and on a real one-node cluster."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, SLURM
from crashlens import slurm
from crashlens.cli import main
from crashlens.errors import CrashlensError

CAPTURED = FIXTURES / "slurm"


def _record(case: str) -> str:
    return next((CAPTURED / case).glob("slurmctld-job-*.txt")).read_text()


# --- parsing what the scheduler prints ----------------------------------------------------------


def test_a_captured_scontrol_record_is_read_field_by_field() -> None:
    (job,) = slurm.parse_scontrol(_record("time-limit-per-task-files"))
    assert (job.state, job.reason, job.exit_code) == ("TIMEOUT", "TimeLimit", "0:15")
    assert job.user == "root" and job.num_tasks == 2 and job.nodes == ("vm",)
    assert job.stdout is not None and job.stdout.endswith("/slurm-3.out")
    assert job.work_dir is not None and job.record.startswith("JobId=3 ")
    (cancelled,) = slurm.parse_scontrol(_record("scancel-running"))
    assert cancelled.state == "CANCELLED"


def test_the_multi_line_form_reads_like_the_one_line_form() -> None:
    one = _record("srun-label-task-fails").strip()
    fields = one.split(" ")
    multi = "\n   ".join(" ".join(fields[i : i + 4]) for i in range(0, len(fields), 4))
    assert slurm.parse_scontrol(multi + "\n\n") == slurm.parse_scontrol(one)
    # scontrol's per-node detail lines repeat keys: the first value is the job's
    (job,) = slurm.parse_scontrol(one.replace(" Power=", " Nodes=vm CPU_IDs=0-3 Mem=0 Power="))
    assert job.nodes == ("vm",)


def test_sacct_parsable2_job_lines_not_step_lines() -> None:
    # sacct -j 48213 --parsable2 --noheader --format=JobID,JobName,User,State,ExitCode,NodeList,
    # WorkDir,NTasks,Partition,Submit,End (sacct(1): "|"-delimited without a trailing "|")
    text = (
        "48213|pretrain|alice|CANCELLED by 1000|0:0|node[01-02]|/scratch/alice||gpu|"
        "2026-12-01T22:00:05|2026-12-02T06:00:09\n"
        "48213.batch|batch||CANCELLED|0:15|node01||1|||2026-12-02T06:00:09\n"
        "48213.0|python|alice|CANCELLED|0:15|node[01-02]||16|||2026-12-02T06:00:09\n"
    )
    (job,) = slurm.parse_sacct(text)
    assert (job.job_id, job.state, job.reason, job.nodes) == (
        "48213", "CANCELLED", "by 1000", ("node01", "node02"),
    )  # fmt: skip
    assert job.source == "sacct" and job.record.startswith("48213|")


@pytest.mark.parametrize(
    ("nodelist", "nodes"),
    [
        ("vm", ["vm"]),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("gpu[1-2],cpu3", ["gpu1", "gpu2", "cpu3"]),
        ("rack[1-2]-n[8-9]", ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]),
        ("(null)", []),
    ],
)
def test_node_lists_expand(nodelist: str, nodes: list[str]) -> None:
    assert slurm.expand_nodelist(nodelist) == nodes


def test_output_patterns_fill_like_sbatch() -> None:
    (job,) = slurm.parse_scontrol(_record("time-limit-per-task-files"))
    fill = slurm.expand_pattern
    assert fill("out-%x-%j-%u-%N-%t.log", job, task=1, node="vm") == (
        f"out-{job.name}-3-root-vm-1.log"
    )
    assert fill("slurm-%j_%3t.out", job, task=7) == "slurm-3_007.out"
    assert fill("slurm-%A_%a.out", job) is None  # not an array job: %a is not known
    assert fill("log-%%j-%j", job) == "log-%j-3"


# --- resolving a job, finding its files ---------------------------------------------------------


def _fake_commands(tmp_path: Path, case: str, *, sacct: str | None = None) -> dict[str, str]:
    """A PATH with an ``scontrol`` that prints the captured record (its paths moved to a copy
    of the fixture), and an ``sacct`` that says accounting is disabled (as without slurmdbd)."""
    copy = tmp_path / case
    shutil.copytree(CAPTURED / case, copy)
    record = _record(case)
    old = next(f.split("=", 1)[1] for f in record.split() if f.startswith("WorkDir="))
    (tmp_path / "record.txt").write_text(record.replace(old, str(copy)))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "scontrol": f'cat "{tmp_path}/record.txt"\n',
        "sacct": sacct or 'echo "Slurm accounting storage is disabled" >&2; exit 1\n',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def test_per_task_files_are_found_from_the_record(tmp_path: Path, monkeypatch) -> None:
    env = _fake_commands(tmp_path, "time-limit-per-task-files")
    monkeypatch.setenv("PATH", env["PATH"])
    (job,) = slurm.resolve(["3"])
    found = {Path(c.display).name: c for c in slurm.job_files(job)}
    assert {"slurm-3.out", "slurm-3_0.out", "slurm-3_1.out"} <= set(found)


def test_analyze_slurm_gives_the_schedulers_verdict_in_every_format(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("PATH", _fake_commands(tmp_path, "scancel-running")["PATH"])
    for fmt in ("text", "json", "markdown", "html", "slack", "github", "junit"):
        out = tmp_path / f"report.{fmt}"
        assert main(["analyze", "--slurm", "4", "-f", fmt, "-o", str(out), "-q"]) == 1, fmt
        text = out.read_text()
        assert "scancel" in text or "cancelled" in text.lower(), fmt
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["causes"][0]["class"] == "scheduler_kill"
    rules = {data["causes"][0]["rule"], *(e["rule"] for e in data["causes"][0]["explains"])}
    assert "slurm-state-cancelled" in rules  # the scheduler's own record is evidence
    shown = {f["path"] for f in data["inputs"]["files"]}
    assert "scontrol job 4" in shown


def test_a_job_the_scheduler_forgot_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    env = _fake_commands(tmp_path, "scancel-running")
    (tmp_path / "record.txt").write_text("")
    (tmp_path / "bin" / "scontrol").write_text(
        "#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n"
    )
    monkeypatch.setenv("PATH", env["PATH"])
    assert main(["analyze", "--slurm", "77"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "SLURM job 77" in err[0] and "Invalid job id" in err[0]
    assert "accounting storage is disabled" in err[0]


def test_a_scheduler_that_cannot_be_reached_is_not_an_unknown_job(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    env = _fake_commands(tmp_path, "scancel-running")
    # what scontrol 22.05 prints on a machine with no slurm.conf and no DNS SRV record
    failure = (
        "#!/bin/sh\necho 'scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown"
        " host' >&2\necho 'scontrol: fatal: Could not establish a configuration source' >&2\n"
        "exit 1\n"
    )
    (tmp_path / "bin" / "scontrol").write_text(failure)
    (tmp_path / "bin" / "sacct").write_text(failure.replace("scontrol", "sacct"))
    monkeypatch.setenv("PATH", env["PATH"])
    assert main(["analyze", "--slurm", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot ask the scheduler" in err[0] and "SLURM_CONF" in err[0]
    assert "does not know it" not in err[0]


def test_without_the_slurm_commands_it_cannot_run(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["analyze", "--slurm", "4"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs the SLURM commands" in err[0]


def test_auto_takes_the_job_it_runs_in(monkeypatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert slurm.job_ids("auto", os.environ) == ["4242"]
    assert slurm.job_ids("12,13", os.environ) == ["12", "13"]
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.delenv("SLURM_JOBID", raising=False)
    with pytest.raises(CrashlensError, match="not inside a job"):
        slurm.job_ids("auto", os.environ)
    with pytest.raises(CrashlensError, match="expected job ids"):
        slurm.job_ids("12;rm", os.environ)


# --- on the real cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    if "cluster" not in SLURM:
        reason = SLURM.get("unavailable", "the SLURM tests' cluster was not started")
        if os.environ.get("CRASHLENS_REQUIRE_SLURM"):
            pytest.fail(f"CRASHLENS_REQUIRE_SLURM is set but the cluster cannot run: {reason}")
        pytest.skip(str(reason))
    return SLURM["cluster"]


def _analyze(cluster, job_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "crashlens", "analyze", "--slurm", job_id, *args]
    return subprocess.run(command, env=cluster.env(), capture_output=True, text=True, timeout=120)


def _submit(cluster, tmp_path: Path, body: str) -> str:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + body.format(python=sys.executable))
    proc = cluster.run("sbatch", "--parsable", str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_failed_task_on_the_real_cluster(cluster, tmp_path: Path) -> None:
    job = _submit(
        cluster,
        tmp_path,
        "#SBATCH -n 2\n#SBATCH -o slurm-%j.out\n"
        "srun --label bash -c 'if [ $SLURM_PROCID = 1 ]; then exec {python} -c "
        '"import json; json.loads(open(\\"/nonexistent/train.jsonl\\").read())"; fi\'\n',
    )
    assert cluster.wait_job(job) == "FAILED"
    proc = _analyze(cluster, job, "-f", "json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["causes"][0]["class"] == "file_not_found"
    assert data["first_failure"]["rank"] == 1
    explained = {e["rule"] for e in data["causes"][0]["explains"]}
    assert "slurm-state-failed" in explained
    # the record parses the same from scontrol's multi-line form
    multi = cluster.run("scontrol", "show", "job", job).stdout
    one = cluster.run("scontrol", "show", "job", "-o", job).stdout
    assert slurm.parse_scontrol(multi) == slurm.parse_scontrol(one)


def test_scancel_on_the_real_cluster(cluster, tmp_path: Path) -> None:
    job = _submit(
        cluster,
        tmp_path,
        "#SBATCH -n 1\n#SBATCH -o slurm-%j.out\nsrun --label {python} -u -c "
        "\"import time\nfor i in range(600): print('step', i, flush=True); time.sleep(1)\"\n",
    )
    for _ in range(100):
        if (tmp_path / f"slurm-{job}.out").is_file() and "step 2" in (
            tmp_path / f"slurm-{job}.out"
        ).read_text():
            break
        subprocess.run(["sleep", "0.2"], check=True)
    cluster.run("scancel", job)
    assert cluster.wait_job(job) == "CANCELLED"
    for fmt in ("text", "json", "markdown", "html", "slack", "github", "junit"):
        proc = _analyze(cluster, job, "-f", fmt)
        assert proc.returncode == 1, (fmt, proc.stderr)
        assert "scheduler_kill" in proc.stdout and "cancel" in proc.stdout.lower(), fmt


def test_the_time_limit_job_that_ran_beside_the_suite(cluster) -> None:
    started = SLURM.get("time_limit")
    assert isinstance(started, tuple), f"the time-limit job was not submitted: {started}"
    job, work = started
    assert cluster.wait_job(job, timeout=240) == "TIMEOUT"
    for fmt in ("text", "json", "markdown", "html", "slack", "github", "junit"):
        proc = _analyze(cluster, job, "-f", fmt)
        assert proc.returncode == 1, (fmt, proc.stderr)
        assert "TIME LIMIT" in proc.stdout or "time limit" in proc.stdout.lower(), fmt
    data = json.loads(_analyze(cluster, job, "-f", "json").stdout)
    top = data["causes"][0]
    assert top["class"] == "scheduler_kill"
    rules = {top["rule"], *(e["rule"] for e in top["explains"])}
    assert {"slurm-time-limit", "slurm-state-timeout"} <= rules
    files = {Path(f["path"]).name for f in data["inputs"]["files"]}
    assert {f"slurm-{job}_0.out", f"slurm-{job}_1.out"} <= files
    assert Path(work).is_dir()


# --- the scheduler's failed jobs as the job list (triage --slurm-since) --------------------------


def test_the_job_completion_log_is_read_record_by_record() -> None:
    # a parser's input, not a job to diagnose: kept with the other raw captures
    text = (Path(__file__).parent / "captures/slurm-jobcomp/jobcomp.txt").read_text()
    jobs = {j.job_id: j for j in slurm.parse_jobcomp(text)}
    assert sorted(jobs) == ["1", "2", "3"]
    failed = jobs["1"]
    assert (failed.name, failed.state, failed.exit_code, failed.user) == (
        "fail.sh", "FAILED", "1:0", "root",
    )  # fmt: skip
    assert (failed.partition, failed.nodelist, failed.nodes) == ("debug", "vm", ("vm",))
    assert failed.end_time == "2026-12-02T07:13:51" and failed.source == "jobcomp"
    assert failed.work_dir == "/tmp/crashlens-slurm-capture/jobcomp" and failed.stdout is None
    assert jobs["3"].state == "CANCELLED"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1d", "2026-12-01T12:00:00"),
        ("12h", "2026-12-02T00:00:00"),
        ("90m", "2026-12-02T10:30:00"),
        ("2w", "2026-11-18T12:00:00"),
        ("2026-11-30", "2026-11-30T00:00:00"),
        ("2026-11-30T06:15", "2026-11-30T06:15:00"),
    ],
)
def test_since_windows(value: str, expected: str) -> None:
    import datetime as dt

    now = dt.datetime(2026, 12, 2, 12, 0, 0)
    assert slurm.parse_window(value, now).isoformat() == expected


def test_a_window_that_does_not_parse_is_one_line() -> None:
    import datetime as dt

    with pytest.raises(CrashlensError, match="expected a span like 12h"):
        slurm.parse_window("yesterday", dt.datetime(2026, 12, 2))


def _sacct_runner(stdout: str, calls: list[list[str]]):
    def run(command, **_):
        calls.append(command)
        if Path(command[0]).name == "sacct":
            return subprocess.CompletedProcess(command, 0, stdout, "")
        return subprocess.CompletedProcess(
            command, 1, "", "slurm_load_jobs error: Invalid job id specified"
        )

    return run


def test_sacct_is_asked_for_every_users_failed_allocations(tmp_path: Path, monkeypatch) -> None:
    # sacct(1) --parsable2 with the fields crashlens asks for; the step lines are left out and
    # a state sacct was not asked for (a filter it ignores) is dropped again
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sacct", "scontrol"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "work"
    work.mkdir()
    (work / "slurm-48213.out").write_text(
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    text = (
        f"48213|pretrain|alice|TIMEOUT|0:0|node[01-02]|{work}|2|gpu|2026-12-01T22:00:05|2026-12-02T06:00:09\n"
        f"48213.batch|batch||CANCELLED|0:15|node01||1|||2026-12-02T06:00:09\n"
        f"48214|eval|bob|COMPLETED|0:0|node03|{work}|1|gpu|2026-12-01T23:00:00|2026-12-02T01:00:00\n"
    )
    calls: list[list[str]] = []
    import datetime as dt

    jobs = slurm.failed_since(dt.datetime(2026, 12, 1, 12), run=_sacct_runner(text, calls))
    assert [j.job_id for j in jobs] == ["48213"]
    (job,) = jobs
    assert (job.state, job.user, job.partition, job.nodelist) == (
        "TIMEOUT",
        "alice",
        "gpu",
        "node[01-02]",
    )
    sacct = calls[0]
    assert (
        sacct[1:3] == ["-a", "-X"]
        and "-S" in sacct
        and sacct[sacct.index("-S") + 1] == "2026-12-01T12:00:00"
    )
    assert any(a.startswith("--state=") and "OUT_OF_MEMORY" in a for a in sacct)
    assert [Path(c.path).name for c in slurm.job_files(job)] == ["slurm-48213.out"]


def test_a_scheduler_without_history_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    # sacct says what it says without slurmdbd; scontrol's configuration has no completion log
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text(
        "#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\nexit 1\n"
    )
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'JobCompType             = jobcomp/none'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code = main(["triage", "--slurm-since", "1d", "-o", str(tmp_path / "t"), "-q"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "accounting storage is disabled" in lines[0]
    assert "jobcomp/filetxt" in lines[0] and "JobCompType is jobcomp/none" in lines[0]


def test_triage_since_on_the_real_cluster(cluster, tmp_path: Path) -> None:
    # no accounting here: the failed jobs come from the job completion log, their files from
    # scontrol's record while slurmctld remembers them
    failed = _submit(
        cluster,
        tmp_path,
        "#SBATCH -n 1\n#SBATCH -o slurm-%j.out\n"
        "srun --label {python} -c 'import json; json.loads(open(\"/nonexistent/train.jsonl\").read())'\n",
    )
    ok_dir = tmp_path / "ok"
    ok_dir.mkdir()
    ok = _submit(cluster, ok_dir, "#SBATCH -o slurm-%j.out\necho fine\n")
    assert cluster.wait_job(failed) == "FAILED" and cluster.wait_job(ok) == "COMPLETED"
    table = tmp_path / "fleet"
    command = [sys.executable, "-m", "crashlens", "triage", "--slurm-since", "1d", "-o", str(table)]
    proc = subprocess.run(command, env=cluster.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    from crashlens.fleet import load

    jobs, evidence = load(table)
    rows = {r["job_id"]: r for r in jobs.to_dict("records")}
    assert failed in rows and ok not in rows
    row = rows[failed]
    assert row["status"] == "analysed" and row["cause_class"] == "file_not_found"
    assert (row["scheduler_state"], row["user"], row["queue"]) == ("FAILED", "root", "debug")
    assert row["nodelist"] == cluster.node
    assert row["n_files"] == 2  # the task's output and the scheduler's record
    cited = set(evidence[evidence["job_id"] == failed]["file"])
    assert any(f.endswith(f"slurm-{failed}.out") for f in cited)
    # the time-limit job that ran beside the suite is there too, with the scheduler's verdict
    started = SLURM.get("time_limit")
    if isinstance(started, tuple) and started[0] in rows:
        assert rows[started[0]]["scheduler_state"] == "TIMEOUT"
        assert rows[started[0]]["cause_class"] == "scheduler_kill"
    from crashlens.fleet.summary import summarize

    by_state = {g["key"]: g for g in summarize(table, by="state")["groups"]}
    assert by_state["FAILED"]["jobs"] >= 1 and by_state["FAILED"]["top_cause"] == "file_not_found"
    # a second run finds nothing changed
    again = subprocess.run(command, env=cluster.env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and " 0 analysed now" in again.stdout, again.stdout
