"""The library API and the command line, end to end on real fixtures and small inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from conftest import FIXTURES
from crashlens import analyze
from crashlens.cli import app, parse_skew
from crashlens.errors import CrashlensError, ExitCode
from crashlens.render import render

runner = CliRunner()
OOM_TB = (
    "2024-05-01 03:14:00,000 INFO train: step 7 loss 1.2\n"
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 40, in <module>\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.15 GiB of which 1.00 GiB is free.\n"
)


def test_api_returns_a_report_that_renders(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(OOM_TB)
    report = analyze(tmp_path)
    assert report.primary is not None
    assert report.primary.match.rule.cls == "cuda_oom"
    data = json.loads(render(report, "json"))
    assert data["causes"][0]["evidence"][0]["line"] == 5
    assert "CUDA out of memory" in render(report, "text")
    assert set(report.timeline.columns) >= {
        "time", "time_inferred", "rank", "host", "pid", "source", "line", "kind", "signal", "text",
    }  # fmt: skip


def test_json_contract_keys() -> None:
    result = runner.invoke(
        app, ["analyze", str(FIXTURES / "gpu/nccl_timeout_cascade"), "-f", "json"]
    )
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert {"schema_version", "causes", "first_failure", "ranks", "inputs"} <= set(data)
    top = data["causes"][0]
    assert {"rule", "class", "title", "confidence", "severity", "ranks", "first_seen",
            "evidence", "explains", "remediation"} <= set(top)  # fmt: skip
    assert {"file", "line", "rank", "host", "time", "text"} <= set(top["evidence"][0])
    assert {"rank", "host", "time", "file", "line"} <= set(data["first_failure"])
    assert len(data["ranks"]) == 8


def test_exit_codes(tmp_path: Path) -> None:
    healthy = runner.invoke(app, ["analyze", str(FIXTURES / "gpu/healthy_run")])
    assert healthy.exit_code == 0, healthy.output
    assert "No failure found" in healthy.stdout
    failed = runner.invoke(app, ["analyze", str(FIXTURES / "repro/host_oom")])
    assert failed.exit_code == 1
    missing = runner.invoke(app, ["analyze", str(tmp_path / "nothing-here")])
    assert missing.exit_code == 2
    assert "nothing readable" in missing.output
    badfmt = runner.invoke(app, ["analyze", str(tmp_path), "-f", "yaml"])
    assert badfmt.exit_code == 2


def test_output_file_and_several_paths(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    a, b = FIXTURES / "repro/host_oom", FIXTURES / "gpu/cuda_oom_single"
    result = runner.invoke(app, ["analyze", str(a), str(b), "-f", "json", "-o", str(out)])
    assert result.exit_code == 1
    data = json.loads(out.read_text())
    assert len(data["inputs"]["files"]) == 2
    assert {c["class"] for c in data["causes"]} >= {"cuda_oom", "host_oom"}


def test_stdin_is_read(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "crashlens", "analyze", "-", "-f", "json"],
        input=OOM_TB,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["causes"][0]["class"] == "cuda_oom"


def test_bad_rule_file_is_one_clean_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "broken.yaml").write_text("id: broken\ntitle: x\nclass: not_a_class\nseverity: high\n"
                                       "detectors:\n  a: 'x+'\n")  # fmt: skip
    (tmp_path / "t.log").write_text("hello\n")
    args = ["analyze", str(tmp_path / "t.log"), "--rules", str(rules)]
    left_out = runner.invoke(app, args)  # a teammate's typo does not stop the analysis
    assert left_out.exit_code == 0
    [note] = [line for line in left_out.stderr.splitlines() if "broken.yaml" in line]
    assert "broken.yaml:1" in note and "not_a_class" in note
    strict = runner.invoke(app, [*args, "--strict-rules"])
    assert strict.exit_code == 2
    assert "broken.yaml:1" in strict.output and "not_a_class" in strict.output
    assert "Traceback" not in strict.output


def test_user_rule_dir_adds_a_rule(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "my-error.yaml").write_text(
        "id: my-error\ntitle: My framework's fatal error\nclass: user_code_error\n"
        "severity: critical\ndetectors:\n  fatal: 'MYFW-FATAL code=(?P<code>\\d+)'\n"
        "remediation: 'code {code}'\n"
    )
    (tmp_path / "t.log").write_text("2024-05-01 03:14:00,000 ERROR MYFW-FATAL code=42\n")
    report = analyze([tmp_path / "t.log"], rules=[rules])
    assert report.primary is not None and report.primary.rule_id == "my-error"
    assert report.primary.remediation == "code 42"


def test_skew_option_parsing() -> None:
    assert parse_skew(["node-02=+2.5s", "node-03=-300ms"]) == {"node-02": 2.5, "node-03": -0.3}
    with pytest.raises(typer.BadParameter):
        parse_skew(["nonsense"])


def test_skew_reorders_first_failure(tmp_path: Path) -> None:
    # node-2 clock runs 10 s ahead: its OOM at 03:14:05 really happened at 03:13:55.
    a, b = tmp_path / "node-1", tmp_path / "node-2"
    a.mkdir(), b.mkdir()
    (a / "rank_0.log").write_text(OOM_TB.replace("03:14:00", "03:14:00"))
    (b / "rank_1.log").write_text(OOM_TB.replace("03:14:00", "03:14:05"))
    plain = analyze([tmp_path])
    assert plain.first_failure is not None and plain.first_failure.rank == 0
    skewed = analyze([tmp_path], skew={"node-2": 10.0})
    assert skewed.first_failure is not None and skewed.first_failure.rank == 1


def test_several_formats_in_one_run_and_ci_switches(tmp_path: Path) -> None:
    job = str(FIXTURES / "repro/rank_exception_cascade")
    html_out, json_out = tmp_path / "r.html", tmp_path / "r.json"
    result = runner.invoke(
        app, ["analyze", job, "-f", "html", "-o", str(html_out), "-f", "json", "-o", str(json_out)]
    )
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert html_out.read_text().startswith("<!DOCTYPE html>")
    assert json.loads(json_out.read_text())["causes"][0]["class"] == "user_code_error"
    assert runner.invoke(app, ["analyze", job, "-q", "--exit-zero"]).exit_code == 0
    # user_code_error is severity high: --fail-on critical lets the job pass, --fail-on high not.
    assert runner.invoke(app, ["analyze", job, "-q", "--fail-on", "critical"]).exit_code == 0
    assert runner.invoke(app, ["analyze", job, "-q", "--fail-on", "high"]).exit_code == 1
    two_stdout = runner.invoke(app, ["analyze", job, "-f", "json", "-f", "text"])
    assert two_stdout.exit_code == 2


def test_a_failed_slack_post_keeps_the_diagnosis_exit_status() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    job = str(FIXTURES / "repro/host_oom")
    result = runner.invoke(
        app, ["analyze", job, "-q", "--post-slack", f"http://127.0.0.1:{port}/x"]
    )
    assert result.exit_code == 1, result.output  # the job's verdict, not 2
    assert "warning:" in result.stderr and "127.0.0.1" in result.stderr


def test_schema_command_prints_the_shipped_schema() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["properties"]["causes"]["type"] == "array"


def test_post_slack_from_the_command_line() -> None:
    import http.server
    import threading

    received: list[bytes] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/services/T/B/secret"
        job = str(FIXTURES / "repro/host_oom")
        result = runner.invoke(app, ["analyze", job, "-q", "--post-slack", url])
        assert result.exit_code == 1, result.output
        payload = json.loads(received[0])
        assert "blocks" in payload and "host_oom" in json.dumps(payload)
    finally:
        server.shutdown()
    refused = runner.invoke(app, ["analyze", job, "-q", "--post-slack", url])
    assert refused.exit_code == 1  # the diagnosis' status; the failed post is a warning
    assert "warning:" in refused.output and "secret" not in refused.output


def test_traceback_in_a_stamped_console_is_diagnosed(tmp_path: Path) -> None:
    lines = [
        "2024-05-01 03:14:00,001 2024-05-01 03:14:00,000 INFO train: step 7 loss 1.2",
        "2024-05-01 03:14:01,500 Traceback (most recent call last):",
        '2024-05-01 03:14:01,500   File "/home/u/train.py", line 40, in <module>',
        "2024-05-01 03:14:01,500     main()",
        "2024-05-01 03:14:01,501 ValueError: label index 11 out of range for 10 classes",
        "2024-05-01 03:14:01,900 crashlens run: python failed (exitcode: 1)",
    ]
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    report = analyze([tmp_path])
    assert report.primary is not None and report.primary.match.rule.cls == "user_code_error"
    ev = report.primary.evidence[0]
    assert ev.line == 5 and ev.text.startswith("ValueError: label index 11")
    assert report.first_failure is not None and report.first_failure.time is not None


def test_run_wraps_a_failing_command_and_diagnoses_it(tmp_path: Path) -> None:
    script = "import sys; print('step 1', flush=True); raise KeyError('input_ids')"
    proc = subprocess.run(
        [sys.executable, "-m", "crashlens", "run", "--log-dir", str(tmp_path / "logs"), "--",
         sys.executable, "-c", script],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "step 1" in proc.stdout
    assert "KeyError" in proc.stderr and "user_code_error" in proc.stderr
    assert (tmp_path / "logs" / "console.log").is_file()


def test_analyze_repro_runs_the_top_causes_repro(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["analyze", str(FIXTURES / "repro/host_oom"), "-q", "--repro", "--repro-out",
         str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "reproduced" in result.output.lower()
    assert (tmp_path / "out" / "logs").is_dir()


def test_progress_is_reported_per_file_read(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(OOM_TB)
    (tmp_path / "b.log").write_text("2024-05-01 03:14:00,000 INFO ok\n")
    (tmp_path / "notes.md").write_text("# not a log\n")
    seen: list[tuple[str, int]] = []
    analyze([tmp_path], progress=lambda path, size: seen.append((Path(path).name, size)))
    assert sorted(seen) == [("a.log", len(OOM_TB)), ("b.log", 32)]
    from crashlens.api import input_size

    assert input_size([tmp_path]) == len(OOM_TB) + 32


def test_no_progress_bar_when_stderr_is_not_a_terminal() -> None:
    result = runner.invoke(app, ["analyze", str(FIXTURES / "repro/host_oom")])
    assert "reading logs" not in result.output


def test_config_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.log").write_text(OOM_TB)
    (tmp_path / "crashlens.yaml").write_text("disable: [cuda-oom]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    data = json.loads(runner.invoke(app, ["analyze", str(job), "-f", "json"]).stdout)
    assert "cuda-oom" not in [c["rule"] for c in data["causes"]]
    (tmp_path / "crashlens.yaml").write_text("disable: cuda-oom\nbogus: 1\n")
    bad = runner.invoke(app, ["analyze", str(job)])
    assert bad.exit_code == 2 and "crashlens.yaml" in bad.output and "Traceback" not in bad.output


def test_remediation_uses_environment_facts(tmp_path: Path) -> None:
    text = (
        "2024-05-01 03:00:00,000 INFO train:   Instantaneous batch size per device = 8\n"
        "2024-05-01 03:00:00,000 INFO train:   Gradient Accumulation steps = 4\n"
    )
    (tmp_path / "train.log").write_text(text + OOM_TB)
    report = analyze([tmp_path])
    assert report.environment.get("per_device_train_batch_size") == "8"
    assert report.primary is not None
    assert "from 8 to 4" in report.primary.remediation


def test_main_owns_the_error_policy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from crashlens import session
    from crashlens.cli import main

    job = str(FIXTURES / "gpu" / "cuda_oom_single")
    assert main(["analyze", job, "-q"]) == ExitCode.FAILURE_FOUND
    assert main(["analyze", "--skew", "node-01=soon", job]) == ExitCode.USAGE
    assert "expected HOST=+SECONDS" in capsys.readouterr().err
    assert main(["no-such-command"]) == ExitCode.USAGE
    assert "No such command" in capsys.readouterr().err

    def broken(self: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(session.Session, "finish", broken)
    assert main(["analyze", job]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error (RuntimeError: a bug)" in err
    with pytest.raises(RuntimeError):
        main(["analyze", job, "--traceback"])

    def interrupted(self: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(session.Session, "finish", interrupted)
    assert main(["analyze", job]) == ExitCode.INTERRUPTED == 130


def test_the_environment_decides_colour_and_width_once() -> None:
    from crashlens.termenv import Environment

    tty = Environment(stdout_isatty=True, stderr_isatty=False, columns=300)
    assert tty.color() and not tty.color(stderr=True)
    assert (tty.width(), tty.width(stderr=True)) == (160, 100)
    assert not tty.without_color().color()
    piped = Environment(stdout_isatty=False, stderr_isatty=False, force_color=True)
    assert piped.color()
    env = Environment.from_process({"NO_COLOR": "", "FORCE_COLOR": "1"})
    assert env.no_color and not env.color()
    assert not Environment.from_process({"FORCE_COLOR": "0"}).force_color


def test_output_format_from_the_extension_and_never_onto_an_input(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "gpu" / "cuda_oom_single", job)
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["analyze", str(job), "-o", str(out)])
    assert result.exit_code == 1 and json.loads(out.read_text())["schema_version"] == 1
    assert f"wrote the json report to {out}" in result.stderr  # -o says where it wrote
    txt = runner.invoke(app, ["analyze", str(job), "-o", str(tmp_path / "report.txt")])
    assert txt.exit_code == 1 and "wrote the text report" in txt.stderr
    assert (tmp_path / "report.txt").read_text().startswith("crashlens: CUDA out of memory")
    odd = runner.invoke(app, ["analyze", str(job), "-o", str(tmp_path / "report.pdf")])
    assert odd.exit_code == 2 and "give -f FORMAT" in odd.stderr
    log = job / "train.log"
    before = log.read_bytes()
    onto = runner.invoke(app, ["analyze", str(job), "-f", "json", "-o", str(log)])
    assert onto.exit_code == 2 and "is one of the inputs" in onto.stderr
    assert log.read_bytes() == before


def test_help_and_option_values_and_skew_warnings(tmp_path: Path) -> None:
    assert runner.invoke(app, ["analyze", "-h"]).exit_code == 0
    shown = runner.invoke(app, ["analyze", "--help"], env={"COLUMNS": "200"}).stdout
    assert "critical, high, medium, low, info" in shown
    job = str(FIXTURES / "gpu" / "cuda_oom_single")
    result = runner.invoke(app, ["analyze", job, "--skew", "node-99=+2s"])
    assert "--skew names host 'node-99', not in the logs" in result.stderr


def test_rules_test_on_a_directory_without_fixtures_fails(tmp_path: Path) -> None:
    result = runner.invoke(app, ["rules", "test", str(tmp_path)])
    assert result.exit_code == 2 and "no rule fixtures" in result.stderr


def test_nothing_readable_says_why_and_rules_list_as_json(tmp_path: Path) -> None:
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text("# notes\n")
    (tmp_path / "c.log").write_bytes(b"\x00\x01\x02binary")
    result = runner.invoke(app, ["analyze", str(tmp_path)])
    assert result.exit_code == 2
    assert "2 file(s) skipped: not a log (.md file)" in result.stderr
    assert "1 file(s) skipped: binary file" in result.stderr
    listed = json.loads(runner.invoke(app, ["rules", "list", "--format", "json"]).stdout)
    assert {"id": "cuda-oom", "class": "cuda_oom"}.items() <= next(
        r for r in listed if r["id"] == "cuda-oom"
    ).items()


def test_reports_crashlens_wrote_are_not_read_back_as_logs(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "gpu" / "cuda_oom_single", job)
    first = analyze([job])
    for fmt in ("json", "junit", "markdown", "text", "html"):
        (job / f"report.{fmt}").write_text(render(first, fmt), encoding="utf-8")
    again = analyze([job])
    read = {Path(f.path).name for f in again.inputs if f.skipped is None}
    assert not any(name.startswith("report.") for name in read)
    notes = [n for n in again.notes if "report crashlens wrote" in n]
    assert len(notes) == 4  # report.html is skipped by its extension already
    cited = {Path(ev.file).name for c in again.causes for ev in c.evidence}
    assert cited == {Path(ev.file).name for c in first.causes for ev in c.evidence}


COMMANDS = [
    [], ["analyze"], ["schema"], ["rules"], ["rules", "list"], ["rules", "show"],
    ["rules", "lint"], ["rules", "test"], ["repro"], ["run"], ["watch"],
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "crashlens")
def test_help_shows_no_python_type_placeholders(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    shown = result.stdout
    assert "Usage: " in shown
    for placeholder in ("list[", "<bool>", "<str>", "<path>", "<int>", "<float>", "{"):
        assert placeholder not in shown, placeholder
    if command == ["analyze"]:
        assert "Usage: crashlens analyze [OPTIONS] [PATH...]" in shown  # optional with --slurm
        for metavar in ("FORMAT", "FILE", "HOST=OFFSET", "SEVERITY", "URL", "JOBID", "TABLE"):
            assert metavar in shown, metavar


def test_verbose_option_shows_the_evidence() -> None:
    job = str(FIXTURES / "gpu" / "cuda_oom_single")
    short = runner.invoke(app, ["analyze", job]).stdout
    long = runner.invoke(app, ["analyze", job, "-v"]).stdout
    assert "Evidence:" not in short and "Evidence:" in long
    assert "train.log:60" in long and "(the first failure, above)" in long


def test_config_is_found_walking_up_or_given_and_pyproject_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.log").write_text(OOM_TB)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src" / "deep").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.crashlens]\ndisable = ["cuda-oom", "no-such-rule"]\n'
    )
    monkeypatch.chdir(project / "src" / "deep")

    def rules_of(*extra: str) -> tuple[list[str], str]:
        result = runner.invoke(app, ["analyze", str(job), "-f", "json", *extra])
        return [c["rule"] for c in json.loads(result.stdout)["causes"]], result.stderr

    found, stderr = rules_of()
    assert "cuda-oom" not in found, "the pyproject.toml two levels up is the config"
    warnings = [x for x in stderr.splitlines() if "no-such-rule" in x]
    assert warnings == [
        f"crashlens: warning: {project / 'pyproject.toml'}: disable: no rule 'no-such-rule' "
        "(see crashlens rules list)"
    ]
    # A crashlens.yaml nearer the working directory wins.
    (project / "src" / "crashlens.yaml").write_text("disable: []\n")
    found, stderr = rules_of()
    assert "cuda-oom" in found and "no-such-rule" not in stderr
    # --config beats discovery.
    other = tmp_path / "other.yaml"
    other.write_text("disable: [cuda-oom]\n")
    assert "cuda-oom" not in rules_of("--config", str(other))[0]
    missing = runner.invoke(app, ["analyze", str(job), "--config", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "config file not found" in missing.stderr
    listed = runner.invoke(app, ["rules", "list", "--config", str(other)]).stdout
    assert "cuda-oom " not in listed and "nccl-watchdog-timeout" in listed


def test_discovery_stops_at_the_repository_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashlens.config import Config, load_config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "crashlens.yaml").write_text("disable: [cuda-oom]\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    inner = repo / "a" / "b"
    inner.mkdir(parents=True)
    assert load_config(tmp_path / "elsewhere").disable == ("cuda-oom",), "found walking up"
    assert load_config(inner) == Config(), "a file above the repository is not used"
    (repo / "pyproject.toml").write_text('[project]\nname = "no-table"\n')
    assert load_config(inner) == Config(), "a pyproject.toml without [tool.crashlens] is skipped"
    (repo / "pyproject.toml").write_text("[tool.crashlens]\nskew = {node-02 = 2.5}\n")
    assert load_config(inner).skew == {"node-02": 2.5}
    (repo / "pyproject.toml").write_text("[tool.crashlens]\ncolour = 1\n")
    with pytest.raises(CrashlensError, match=r"pyproject.toml \[tool.crashlens\]: unknown key"):
        load_config(inner)
