"""`crashlens rules list|show|lint|test` on the bundled rules and on a small user rule dir."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from crashlens.cli import app
from crashlens.rulebase import load_rules
from crashlens.rulebase.lint import lint
from crashlens.ruletest import LINT_VALIDATORS

runner = CliRunner()

RULE = """\
id: my-rule
title: My rule
class: user_code_error
severity: high
detectors:
  a: 'MYFW-FATAL code=(?P<code>\\d+)'
  b:
    regex: '\\d+\\s+\\w+'
remediation: fix it
references: [https://example.invalid/doc]
"""


def test_list_and_show() -> None:
    listed = runner.invoke(app, ["rules", "list"])
    assert listed.exit_code == 0
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "CLASS", "KIND", "SEVERITY", "TITLE"]
    assert len(rows) == len(load_rules().rules) >= 40
    shown = runner.invoke(app, ["rules", "show", "cuda-oom"])
    assert shown.exit_code == 0 and "id: cuda-oom" in shown.stdout
    assert runner.invoke(app, ["rules", "show", "no-such-rule"]).exit_code == 2
    typo = runner.invoke(app, ["rules", "show", "cuda-om"])
    assert typo.exit_code == 2 and "did you mean 'cuda-oom'?" in typo.stderr


def test_config_help_keeps_its_brackets() -> None:
    shown = runner.invoke(app, ["analyze", "--help"], env={"COLUMNS": "200"})
    assert "pyproject.toml with [tool.crashlens])" in shown.stdout


def test_bundled_rules_lint_clean_and_pass_their_fixtures() -> None:
    assert lint(load_rules(), LINT_VALIDATORS) == []
    result = runner.invoke(app, ["rules", "test"])
    assert result.exit_code == 0, result.output


def test_lint_and_test_catch_problems(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    (rules / "my-rule").mkdir(parents=True)
    (rules / "my-rule.yaml").write_text(RULE)
    (rules / "my-rule" / "positive.log").write_text(
        "#! ruleid: my-rule\n2024-05-01 03:14:00,000 ERROR MYFW-FATAL code=42\n"
        "#! ok: my-rule\nMYFW-FATAL code=7\n"
    )
    linted = runner.invoke(app, ["rules", "lint", "--rules", str(rules)])
    assert linted.exit_code == 1
    assert "detector 'b' has no literal anchor" in linted.stdout
    tested = runner.invoke(app, ["rules", "test", str(rules)])
    assert tested.exit_code == 1
    assert "unexpected match on line(s) [2]" in tested.stdout


def test_lint_cli_reports_duplicate_ids_and_backtracking(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    for sub in ("a", "b"):
        (rules / sub / "my-rule").mkdir(parents=True)
        text = RULE.replace(r"'\d+\s+\w+'", r"'MYFW (\w+\s?)+ end'")
        (rules / sub / "my-rule.yaml").write_text(text)
    linted = runner.invoke(app, ["rules", "lint", "--rules", str(rules)])
    assert linted.exit_code == 1
    where = f"{rules / 'b' / 'my-rule.yaml'}:1: CL007 error: my-rule: duplicate id: also defined at"
    assert where in linted.stdout
    assert "CL003 error: my-rule: detector 'b' can backtrack catastrophically" in linted.stdout


def test_lint_names_a_repro_and_sources_that_cannot_be(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    (rules / "my-rule").mkdir(parents=True)
    text = RULE.replace("references:", "repro: no-such-repro\nreferences:")
    text = text.replace(
        "    regex: '\\d+\\s+\\w+'", "    regex: 'MYFW-ABORT'\n    sources: [launcher]"
    )
    (rules / "my-rule.yaml").write_text(text)
    linted = runner.invoke(app, ["rules", "lint", "--rules", str(rules)])
    assert linted.exit_code == 1
    assert "CL005 error: my-rule: repro 'no-such-repro' names no script" in linted.stdout
    assert "CL006 error: my-rule: detector 'b': no input is ever read as launcher" in linted.stdout


def test_rules_test_runs_fact_only_rules() -> None:
    shown = runner.invoke(app, ["rules", "show", "nccl-version-differs"])
    assert shown.exit_code == 0 and "test: differs" in shown.stdout
    assert "nccl-version-differs" in runner.invoke(app, ["rules", "list"]).stdout


GOOD_RULE = """\
id: myfw-fatal
title: MYFW fatal
class: user_code_error
severity: high
detectors:
  fatal: 'MYFW-FATAL code=(?P<code>\\d+)'
remediation: fix code {code}
"""


def _user_rules(tmp_path: Path) -> Path:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "myfw-fatal.yaml").write_text(GOOD_RULE)
    # A second detector with the first one's name would silently replace it.
    (rules / "dup-key.yaml").write_text(
        GOOD_RULE.replace("myfw-fatal", "dup-key") + "detectors: {}\n"
    )
    (rules / "bad-regex.yaml").write_text(
        GOOD_RULE.replace("myfw-fatal", "bad-regex").replace("(?P<code>", "(?P<code")
    )
    return rules


def test_a_duplicate_key_is_an_error_with_its_line(tmp_path: Path) -> None:
    rules = _user_rules(tmp_path)
    result = runner.invoke(app, ["rules", "lint", "--rules", str(rules)])
    assert result.exit_code == 2
    assert f"{rules / 'dup-key.yaml'}:8: invalid YAML: duplicate key 'detectors'" in result.stderr


def test_invalid_user_rules_are_left_out_with_a_note(tmp_path: Path) -> None:
    rules = _user_rules(tmp_path)
    log = tmp_path / "train.log"
    log.write_text("2024-05-01 03:14:00,000 ERROR MYFW-FATAL code=42\n")
    result = runner.invoke(app, ["analyze", str(log), "--rules", str(rules), "-f", "json"])
    assert result.exit_code == 1  # the valid user rule still found the failure
    assert '"rule": "myfw-fatal"' in result.stdout
    notes = [line for line in result.stderr.splitlines() if "rule file left out" in line]
    assert len(notes) == 2
    assert any("bad-regex.yaml:" in n for n in notes) and any("dup-key.yaml:8:" in n for n in notes)


def test_strict_rules_refuses_every_invalid_file_at_once(tmp_path: Path) -> None:
    rules = _user_rules(tmp_path)
    log = tmp_path / "train.log"
    log.write_text("MYFW-FATAL code=42\n")
    result = runner.invoke(app, ["analyze", str(log), "--rules", str(rules), "--strict-rules"])
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("crashlens: error:")]
    assert len(errors) == 2
    assert "bad-regex.yaml" in errors[0] and "dup-key.yaml" in errors[1]


def test_repro_of_a_rule_naming_an_unknown_repro_is_a_usage_error(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "myfw-fatal.yaml").write_text(GOOD_RULE + "repro: no-such-repro\n")
    log = tmp_path / "train.log"
    log.write_text("MYFW-FATAL code=42\n")
    result = runner.invoke(app, ["analyze", str(log), "--rules", str(rules), "--repro", "-q"])
    assert result.exit_code == 2
    assert "no-such-repro" in result.stderr and "Traceback" not in result.output
