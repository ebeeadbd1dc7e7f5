"""Repro catalog, `repro list/show/run`, analyze --repro support, and the closed loop for real.

The live runs start real torch processes (CPU, gloo) through the sandbox; together they take
about 40 s on a 2-core machine.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import FIXTURES
from crashlens import analyze
from crashlens.repro import catalog
from crashlens.repro import run as repro_run
from crashlens.repro.cli import params_from_report, parse_sets, repro_app, run_for_report
from crashlens.repro.sandbox import RunResult, marked_processes
from crashlens.rulebase import load_rules

runner = CliRunner()
GPU_IDS = {"cuda_oom", "nccl_watchdog_timeout", "nccl_error"}
HAS_CUDA = repro_run.cuda_device_count() > 0
HAS_TORCH = importlib.util.find_spec("torch") is not None


# --- catalog -----------------------------------------------------------------------------------


def test_catalog_lists_every_script() -> None:
    scripts = {p.stem for p in catalog.SCRIPTS_DIR.glob("*.py") if not p.name.startswith("_")}
    repros = catalog.discover()
    assert {r.id for r in repros} == scripts
    assert scripts >= GPU_IDS
    classes = {r.cls for r in load_rules().rules}
    for r in repros:
        assert r.script.stem == r.id
        assert r.cls in classes, f"{r.id}: class {r.cls} is no rule's class"
        assert r.gpu == (r.id in GPU_IDS)
        assert r.launcher in ("python", "torchrun")
        assert r.ranks >= 1 and r.timeout_s > 0
        assert "import crashlens" not in r.source() and "from crashlens" not in r.source()
    assert catalog.get("nccl_error").gpus == 2
    assert catalog.get("dataloader_worker_killed").param("num_workers") is not None


def test_every_rule_repro_names_an_existing_script() -> None:
    mapping = catalog.rule_repros()
    assert mapping, "no rule names a repro"
    for rule_id, repro_id in mapping.items():
        assert catalog.get(repro_id).id == repro_id, rule_id
        rule = load_rules().by_id[rule_id]
        assert catalog.for_rule(rule) is not None


def test_unknown_id_and_bad_params() -> None:
    with pytest.raises(catalog.UnknownReproError):
        catalog.get("no_such_repro")
    repro = catalog.get("dataloader_worker_killed")
    assert repro.resolve_params({"num_workers": "3", "batch-size": "4"}) == {
        "num-workers": "3",
        "batch-size": "4",
    }
    with pytest.raises(catalog.BadParameterError, match="no parameter"):
        repro.resolve_params({"nope": "1"})
    with pytest.raises(catalog.BadParameterError, match="integer"):
        repro.resolve_params({"num_workers": "many"})
    with pytest.raises(catalog.BadParameterError):
        parse_sets(["num_workers"])


# --- list / show ----------------------------------------------------------------------------


def test_list_shows_every_repro() -> None:
    result = runner.invoke(repro_app, ["list"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for r in catalog.discover():
        (line,) = [ln for ln in lines if ln.split()[0] == r.id]
        assert line.split()[1:4] == [r.cls, "yes" if r.gpu else "no", str(r.ranks)]


@pytest.mark.parametrize("repro_id", ["host_oom", "nccl_watchdog_timeout"])
def test_show_prints_the_script(repro_id: str) -> None:
    result = runner.invoke(repro_app, ["show", repro_id])
    assert result.exit_code == 0, result.output
    assert result.output == catalog.get(repro_id).source()
    assert f"crashlens-repro: id={repro_id} " in result.output


def test_show_unknown_id_is_a_usage_error() -> None:
    result = runner.invoke(repro_app, ["show", "no_such_repro"])
    assert result.exit_code == 2
    assert "no repro 'no_such_repro'" in result.output


# --- usage errors and what this machine cannot run (nothing starts) ------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "no_such_repro"], "no repro 'no_such_repro'"),
        (["run", "host_oom", "--set", "novalue"], "--set expects key=value"),
        (["run", "host_oom", "--set", "no_such=1"], "has no parameter 'no_such'"),
        (["run", "dataloader_worker_killed", "--set", "num_workers=x"], "integer"),
        (["run", "host_oom", "--ranks", "2"], "single process"),
        (["run", "rank_exception_cascade", "--ranks", "2"], "no rank 2 for bad-rank"),
        (["run", "host_oom", "--timeout", "0"], "--timeout must be positive"),
    ],
)
def test_run_usage_errors_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(repro_app, [*args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()


def test_run_into_non_empty_out_dir_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    result = runner.invoke(repro_app, ["run", "host_oom", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "not an empty directory" in result.output


def test_run_without_torch_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = repro_run.importlib.util.find_spec
    monkeypatch.setattr(
        repro_run.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else real(name, *a),
    )
    result = runner.invoke(repro_app, ["run", "host_oom", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "pip install 'crashlens[repro]'" in result.output


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("repro_id", sorted(GPU_IDS))
def test_gpu_repro_without_cuda_exits_3(repro_id: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(repro_app, ["run", repro_id, "--out", str(out)])
    assert result.exit_code == 3, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert "needs a CUDA GPU; none found" in lines[0]
    assert not out.exists(), "nothing may be started or written"


# --- live runs ----------------------------------------------------------------------------


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture()
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A fake HOME and TMPDIR that must stay untouched; records every sandboxed run."""
    if not HAS_TORCH:
        pytest.skip("the live repro runs need the repro extra: pip install 'crashlens[repro]'")
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    for d in (home, tmp):
        d.mkdir()
        (d / "sentinel").write_text("x")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    runs: list[RunResult] = []
    real = repro_run.run_script

    def recording(*args, **kwargs) -> RunResult:
        result = real(*args, **kwargs)
        runs.append(result)
        return result

    monkeypatch.setattr(repro_run, "run_script", recording)
    before = {home: _tree(home), tmp: _tree(tmp)}
    yield runs
    for d, tree in before.items():
        assert _tree(d) == tree, f"the run wrote outside its output directory, into {d}"


def _assert_nothing_left(runs: list[RunResult]) -> None:
    assert len(runs) == 1
    run = runs[0]
    assert run.pid is not None and run.marker
    with pytest.raises(ProcessLookupError):
        os.killpg(run.pid, 0)  # the run's process group is gone
    assert marked_processes(run.marker) == []


def test_run_dataloader_worker_killed_with_set(isolated: list[RunResult], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        repro_app, ["run", "dataloader_worker_killed", "--out", str(out), "--set", "num_workers=1"]
    )
    assert result.exit_code == 0, result.output
    assert "reproduced: yes" in result.output
    assert "--num-workers 1" in result.output
    log = (out / "logs" / "train.log").read_text()
    assert "num_workers=1" in log  # the parameter reached the script
    # torch reports the SIGKILL, or (a race) the batch in flight from the dead worker fails
    assert "is killed by signal: Killed" in log or "in rebuild_storage_fd" in log
    _assert_nothing_left(isolated)


def test_run_host_oom(isolated: list[RunResult], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(repro_app, ["run", "host_oom", "--out", str(out), "--timeout", "60"])
    assert result.exit_code == 0, result.output
    assert "reproduced: yes" in result.output
    assert "top cause: host_oom (repro class: host_oom)" in result.output
    assert (out / "logs" / "train.log").is_file()
    assert (out / "work" / "home").is_dir()
    _assert_nothing_left(isolated)


def test_run_torchrun_corrupt_jsonl(isolated: list[RunResult], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(repro_app, ["run", "corrupt_jsonl", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "reproduced: yes" in result.output
    logs = out / "logs"
    assert (logs / "console.log").is_file()
    for rank in (0, 1):
        (stderr,) = logs.glob(f"torchrun_logs/*/attempt_0/{rank}/stderr.log")
        assert stderr.stat().st_size > 0
    assert (out / "work" / "train.jsonl").is_file()  # the script's data stays out of logs/
    _assert_nothing_left(isolated)


def test_rerun_matches_committed_fixture(isolated: list[RunResult], tmp_path: Path) -> None:
    """The committed fixtures are still what the current script produces, in kind."""
    repro_id = "rank_exception_cascade"
    fixture = FIXTURES / "repro" / repro_id
    expected = yaml.safe_load((fixture / "expected.yaml").read_text())
    result = repro_run.run_repro(repro_id, tmp_path / "out")
    assert result.reproduced, result.verdict
    assert result.top_class == expected["top_class"]
    assert result.report is not None and result.report.first_failure is not None
    assert result.report.first_failure.rank == expected["first_failure_rank"]

    def layout(root: Path) -> set[str]:  # the torchrun run id differs from run to run
        return {
            "/".join(
                "<run>" if i == 1 and p.parts[0] == "torchrun_logs" else s
                for i, s in enumerate(p.parts)
            )
            for p in (q.relative_to(root) for q in root.rglob("*") if q.is_file())
        }

    made = layout(result.logs_dir)
    committed = layout(fixture) - {"CAPTURE.md", "expected.yaml"}
    assert made == committed
    _assert_nothing_left(isolated)


# --- analyze --repro ------------------------------------------------------------------------


def test_run_for_report_runs_the_top_causes_repro(
    isolated: list[RunResult], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = analyze([FIXTURES / "repro" / "host_oom"])
    assert report.primary is not None and report.primary.match.rule.repro == "host_oom"
    assert run_for_report(report, tmp_path / "out") == 0
    assert "reproduced: yes" in capsys.readouterr().out
    _assert_nothing_left(isolated)


def test_run_for_report_without_repro_is_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    report = analyze([FIXTURES / "gpu" / "xid_illegal_access"])
    assert report.primary is not None and report.primary.match.rule.repro is None
    assert run_for_report(report, None) == 0
    err = capsys.readouterr().err
    assert "no repro for the top cause" in err and len(err.strip().splitlines()) == 1


def test_run_for_report_no_failure(capsys: pytest.CaptureFixture[str]) -> None:
    report = analyze([FIXTURES / "gpu" / "healthy_run"])
    assert run_for_report(report, None) == 0
    assert "nothing to reproduce" in capsys.readouterr().err


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a CUDA GPU")
def test_run_for_report_gpu_cause_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = analyze([FIXTURES / "gpu" / "cuda_oom_single"])
    assert run_for_report(report, tmp_path / "out") == 3
    assert "needs a CUDA GPU; none found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_params_from_report_takes_the_world_size() -> None:
    report = analyze([FIXTURES / "repro" / "corrupt_jsonl"])
    ranks, _ = params_from_report(catalog.get("corrupt_jsonl"), report)
    assert ranks == 2
    # A single-process repro never gets --ranks.
    assert params_from_report(catalog.get("host_oom"), report)[0] is None


def test_sandbox_kills_escaped_children_on_timeout(tmp_path: Path) -> None:
    """A child in a session of its own (as torchrun starts ranks) is killed too."""
    from crashlens.repro.sandbox import run_script

    script = tmp_path / "escape.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
        " start_new_session=True)\n"
        "print('spawned', flush=True)\n"
        "time.sleep(120)\n"
    )
    result = run_script(script, workdir=tmp_path / "w", launcher="python", ranks=1, timeout_s=2.0)
    assert result.timed_out
    assert "spawned" in (result.logs_dir / "train.log").read_text()
    assert marked_processes(result.marker) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(result.pid or 0, 0)


def test_tmpfs_unavailable_exits_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from crashlens.repro import sandbox
    from crashlens.repro.sandbox import SandboxUnavailable

    def refuse(path: Path, size: str):
        raise SandboxUnavailable("mounting a tmpfs needs root (euid is not 0)")

    monkeypatch.setattr(sandbox, "mounted_tmpfs", refuse)
    out = tmp_path / "out"
    result = runner.invoke(repro_app, ["run", "disk_full", "--out", str(out)])
    assert result.exit_code == 3, result.output
    assert "cannot run here: mounting a tmpfs needs root" in result.output
    assert list(out.iterdir()) == []


#: CPU repros the tests above already run live through the CLI or against a committed fixture.
_RUN_ABOVE = {"dataloader_worker_killed", "host_oom", "corrupt_jsonl", "rank_exception_cascade"}
_OTHER_CPU = sorted(r.id for r in catalog.discover() if not r.gpu and r.id not in _RUN_ABOVE)


@pytest.mark.skipif(
    os.environ.get("CRASHLENS_WHEEL_TEST") == "1",
    reason="tests/test_wheel.py runs every CPU repro's closed loop from the installed wheel "
    "(the runs above still check the sandbox's confinement from this checkout)",
)
@pytest.mark.parametrize("repro_id", _OTHER_CPU)
def test_every_other_cpu_repro_closes_the_loop(
    repro_id: str, isolated: list[RunResult], tmp_path: Path
) -> None:
    """Each CPU repro fails for real and crashlens diagnoses its class (the closed loop)."""
    try:
        result = repro_run.run_repro(repro_id, tmp_path / "out")
    except repro_run.CannotRunHereError as exc:  # e.g. no tmpfs for disk_full in a container
        pytest.skip(str(exc))
    assert result.reproduced, (result.top_class, result.repro.cls, result.analysis_error)
    _assert_nothing_left(isolated)


def test_the_sandbox_reaches_loopback_only(tmp_path: Path) -> None:
    """A repro may use 127.0.0.1 (rendezvous, gloo) but cannot reach any other address."""
    from crashlens.repro.sandbox import run_script

    script = tmp_path / "net.py"
    script.write_text(
        "import socket\n"
        "srv = socket.create_server(('127.0.0.1', 0))\n"
        "socket.create_connection(srv.getsockname(), timeout=2).close()\n"
        "print('loopback ok', flush=True)\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
        "    print('outside reachable')\n"
        "except OSError as exc:\n"
        "    print('outside blocked:', exc.errno)\n"
    )
    result = run_script(script, workdir=tmp_path / "work", launcher="python", ranks=1,
                        timeout_s=30, params={})  # fmt: skip
    if not result.network_isolated:
        pytest.skip("this machine does not allow network namespaces")
    out = (result.logs_dir / result.logs[0]).read_text()
    assert "loopback ok" in out
    assert "outside blocked" in out and "outside reachable" not in out


def test_a_deep_run_directory_gets_a_short_tmpdir_for_worker_sockets(tmp_path: Path) -> None:
    # DataLoader workers bind AF_UNIX sockets under TMPDIR; a deep --out would exceed the
    # 108-byte limit ("OSError: AF_UNIX path too long") and hang the run.
    from crashlens.repro.sandbox import MAX_SOCKET_TMPDIR, short_tmpdir

    deep = tmp_path / ("d" * 80) / "tmp"
    deep.mkdir(parents=True)
    with short_tmpdir(deep, "0123456789abcdef") as tmp:
        assert len(str(tmp)) <= MAX_SOCKET_TMPDIR
        (tmp / "probe").write_text("x")  # writes land in the run's own directory
        assert (deep / "probe").read_text() == "x"
    assert not tmp.exists() and (deep / "probe").exists()
    short = Path("/tmp")
    with short_tmpdir(short, "0123456789abcdef") as same:
        assert same == short


def test_the_spawn_layout_starts_a_torchrun_repro_with_mp_spawn(tmp_path: Path) -> None:
    """The capture matrix's ``spawn`` cell, run for real: the user's launch.py spawns the
    ranks, spawn's parent reports the failing child, and the diagnosis is the repro's."""
    if not HAS_TORCH:
        pytest.skip("the live repro runs need the repro extra: pip install 'crashlens[repro]'")
    from crashlens.repro.capture import Variant, capture_one, discover

    (spec,) = [s for s in discover() if s.id == "port_in_use"]
    status, message = capture_one(spec, tmp_path, variant=Variant("spawn"))
    assert status == "ok", message
    cell = tmp_path / "port_in_use" / "spawn"
    expected = yaml.safe_load((cell / "expected.yaml").read_text())
    assert expected["layout"] == "spawn"
    assert "launch.py --nprocs 2" in expected["command"]
    console = (cell / "console.log").read_text()
    assert "ProcessRaisedException" in console
    assert "-- Process 0 terminated with the following error:" in console
    report = analyze([cell])
    assert report.primary is not None
    assert report.primary.match.rule.cls == expected["top_class"] == "rendezvous_failure"
