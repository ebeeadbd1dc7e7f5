"""`when:` conditions on facts, fact-only rules, the version matrix, lint additions, config."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashlens.config import Config, ConfigError, load_config
from crashlens.errors import RuleError
from crashlens.match import match
from crashlens.model import Evidence, Fact, Hit
from crashlens.rulebase import load_rules, load_version_matrix
from crashlens.rulebase.conditions import parse_spec, satisfies
from crashlens.rulebase.lint import backtracking_risk, lint

RULE = """\
id: {id}
title: A test rule
class: nccl_error
severity: high
detectors:
  err: 'MYFW-NCCL failure'
{extra}
remediation: fix it
references: [https://example.invalid/doc]
"""


def _rules(tmp_path: Path, **extra: str) -> Path:
    root = tmp_path / "rules"
    root.mkdir(exist_ok=True)
    for rule_id, text in extra.items():
        (root / f"{rule_id}.yaml").write_text(RULE.format(id=rule_id, extra=text))
    return root


def _hit(rule_id: str, host: str = "node-01") -> Hit:
    ev = Evidence("log.txt", 5, 0, host, 100.0, False, "MYFW-NCCL failure")
    return Hit(rule_id, "err", ev, {})


def _fact(key: str, value: str, host: str | None = "node-01", line: int = 1) -> Fact:
    return Fact(key, value, f"{host}.log", line, host, None)


@pytest.mark.parametrize(
    "spec,value,want",
    [
        (">=2.0,<2.2", "2.1.2+cu121", True),
        (">=2.0,<2.2", "2.2.0", False),
        (">=2.0,<2.2", "1.13.1", False),
        ("<2.18", "2.17.1", True),
        ("<2.18", "2.18.1", False),
        ("==1.13.*", "1.13.1+cu117", True),
        ("==1.13.*", "1.14.0", False),
        ("!=1.13.*", "2.0.1", True),
        ("==2.1", "2.1.0", True),
        ("<=2.1.2", "2.1.2+cu121", True),
        (">4.30", "4.30.0", False),
        ("fp16", "FP16", True),
        ("fp16", "bf16", False),
        (">=2.0", "N/A", False),
    ],
)
def test_version_specs(spec: str, value: str, want: bool) -> None:
    assert satisfies(value, parse_spec(spec), "torch") is want


@pytest.mark.parametrize("bad", [">=abc", ">2.*", ">=2.0,", "=>2.0"])
def test_bad_specs_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_spec(bad)


def test_matrix_words_and_the_bundled_matrix() -> None:
    matrix = load_version_matrix()
    assert {"torch", "cuda", "transformers"} <= set(matrix)
    known, rec, out = (
        parse_spec(w) for w in ("known-problem", "recommended", "outside-recommended")
    )
    assert satisfies("1.13.1+cu117", known, "torch", matrix)
    assert not satisfies("2.1.2", known, "torch", matrix)
    assert satisfies("2.1.2+cu121", rec, "torch", matrix)
    assert satisfies("2.3.0", out, "torch", matrix)
    assert satisfies("11.6", known, "cuda", matrix)
    assert satisfies("12.1", rec, "cuda", matrix)
    assert satisfies("4.28.1", known, "transformers", matrix)
    assert satisfies("4.36.2", rec, "transformers", matrix)
    assert not satisfies("1.0", known, "no_such_fact", matrix)
    # the matrix is data, not a rule
    assert "versions" not in load_rules().by_id


def test_when_gates_a_rule_on_facts(tmp_path: Path) -> None:
    root = _rules(tmp_path, **{"old-nccl": "when: {nccl: '<2.18', torch: '>=2.0,<2.2'}"})
    rules = load_rules([root], include_default=False)
    hits = [_hit("old-nccl")]
    assert match(hits, rules) == []  # no facts: a rule with `when:` never matches
    assert match(hits, rules, facts={"nccl": "2.17.1", "torch": "2.1.2+cu121"})
    assert not match(hits, rules, facts={"nccl": "2.18.1", "torch": "2.1.2"})
    assert not match(hits, rules, facts={"nccl": "2.17.1"})  # torch absent
    # differing values: the condition holds when one node's value meets it
    assert match(hits, rules, facts={"nccl": "2.18.1 | 2.17.1", "torch": "2.1.0"})
    facts = [_fact("nccl", "2.17.1+cuda12.1"), _fact("torch", "2.1.2")]
    assert match(hits, rules, facts=facts)


def test_rules_without_when_ignore_facts(tmp_path: Path) -> None:
    rules = load_rules([_rules(tmp_path, plain="")], include_default=False)
    assert match([_hit("plain")], rules)
    assert match([_hit("plain")], rules, facts={"torch": "1.0"})


def test_fact_only_rules_cite_the_fact_lines() -> None:
    rules = load_rules()
    real = [Hit("cuda-oom", "allocator", Evidence("a.log", 9, 1, "node-02", 5.0, False, "OOM"), {})]
    facts = [
        _fact("torch", "1.13.1+cu116", "node-01", 3),
        _fact("torch", "1.13.1+cu116", "node-02", 3),
        _fact("transformers", "4.36.2", "node-01", 4),
        _fact("nccl", "2.18.1+cuda12.1", "node-01", 7),
        _fact("nccl", "2.19.3", "node-02", 8),
    ]
    found = {m.rule.id: m for m in match(real, rules, facts=facts)}
    known = found["known-problem-version"]
    assert [(h.evidence.file, h.evidence.line) for h in known.hits] == [
        ("node-01.log", 3),
        ("node-02.log", 3),
    ]
    assert known.fields["fact"] == "torch" and known.fields["value"] == "1.13.1+cu116"
    assert known.fields["recommended"] == ">=2.0.0,<=2.1.2"
    assert known.hits[0].fatal is None and known.hits[0].evidence.time is None
    differs = found["nccl-version-differs"]
    assert {h.evidence.host for h in differs.hits} == {"node-01", "node-02"}
    assert "2.18.1+cuda12.1 on node-01" in differs.fields["values"]
    # a healthy run (no detector match) never gets fact-only findings
    assert match([], rules, facts=facts) == []
    # a plain mapping cannot cite lines: fact-only rules need Fact objects
    assert "known-problem-version" not in {
        m.rule.id for m in match(real, rules, facts={"torch": "1.13.1"})
    }


def test_differs_needs_two_nodes_and_compares_versions() -> None:
    rules = load_rules()
    real = [Hit("cuda-oom", "allocator", Evidence("a.log", 9, 1, "node-02", 5.0, False, "OOM"), {})]
    same = [_fact("nccl", "2.21.5+cuda12.4", "node-01"), _fact("nccl", "2.21.5", "node-02")]
    one_node = [_fact("nccl", "2.18.1", "node-01", 1), _fact("nccl", "2.19.3", "node-01", 2)]
    for facts in (same, one_node):
        assert "nccl-version-differs" not in {m.rule.id for m in match(real, rules, facts=facts)}


def test_loader_validates_when_and_facts(tmp_path: Path) -> None:
    bad = {
        "bad-spec": "when: {torch: '>=two'}",
        "bad-key": "when: {Torch-Version: '>=2.0'}",
    }
    for rule_id, extra in bad.items():
        root = tmp_path / rule_id
        root.mkdir()
        (root / f"{rule_id}.yaml").write_text(RULE.format(id=rule_id, extra=extra))
        with pytest.raises(RuleError) as err:
            load_rules([root], include_default=False, strict=True)
        assert f"{rule_id}.yaml:" in str(err.value)
        [skipped] = load_rules([root], include_default=False).skipped  # left out, with a note
        assert f"{rule_id}.yaml:" in skipped
    root = tmp_path / "both"
    root.mkdir()
    (root / "both.yaml").write_text(
        RULE.format(id="both", extra="facts: {test: differs, keys: [nccl]}")
    )
    with pytest.raises(RuleError, match="has no 'detectors'"):
        load_rules([root], include_default=False, strict=True)
    (root / "both.yaml").write_text(
        "id: both\ntitle: t\nclass: version_mismatch\nseverity: low\n"
        "facts: {test: newest, keys: [nccl]}\n"
    )
    with pytest.raises(RuleError, match="'test' must be one of"):
        load_rules([root], include_default=False, strict=True)


def test_version_matrix_errors_name_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "versions.yaml").write_text(
        "torch:\n  recommended: '>=2.0'\nnccl:\n  known_problem: 'new'\n"
    )
    with pytest.raises(RuleError) as err:
        load_version_matrix([tmp_path], include_default=False)
    assert "versions.yaml:4" in str(err.value)
    (tmp_path / "versions.yaml").write_text("torch:\n  known_problem: '==2.3.*'\n")
    matrix = load_version_matrix([tmp_path])
    assert matrix["torch"].known_problem is not None
    assert matrix["torch"].known_problem.text == "==2.3.*"
    assert matrix["cuda"].recommended is not None  # other rows of the bundled matrix stay


def test_lint_reports_duplicates_and_backtracking(tmp_path: Path) -> None:
    root = tmp_path / "rules"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "a" / "dup.yaml").write_text(RULE.format(id="dup", extra=""))
    (root / "b" / "dup.yaml").write_text(RULE.format(id="dup", extra=""))
    (root / "slow.yaml").write_text(
        RULE.format(id="slow", extra="").replace("'MYFW-NCCL failure'", "'MYFW (\\w+\\s?)+ end'")
    )
    issues = [str(i) for i in lint(load_rules([root], include_default=False))]
    assert any("b/dup.yaml:1: CL007 error: dup: duplicate id: also defined at" in i for i in issues)
    assert any("slow.yaml:1: CL003 error: slow: detector 'err' can backtrack" in i for i in issues)
    # overriding a bundled rule from another directory is not a duplicate
    (tmp_path / "override").mkdir()
    (tmp_path / "override" / "cuda-oom.yaml").write_text(RULE.format(id="cuda-oom", extra=""))
    issues = [str(i) for i in lint(load_rules([tmp_path / "override"]))]
    assert not any("duplicate id" in i for i in issues)


@pytest.mark.parametrize(
    "pattern,risky",
    [
        (r"(a+)+", True),
        (r"(\w*)*", True),
        (r"(.*a){3}", True),
        (r"(?:x+y?)*z", True),
        (r"(?:\.\d+)*", False),
        (r"(?:, \d+){0,8}", False),
        (r"(?>a+)+", False),
        (r"(a+)?", False),
        (r"[(a+)+]", False),
        (r"\(a+\)+", False),
    ],
)
def test_backtracking_check(pattern: str, risky: bool) -> None:
    assert (backtracking_risk(pattern) is not None) is risky


def test_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert load_config(tmp_path) == Config()
    (tmp_path / "team-rules").mkdir()
    (tmp_path / "crashlens.yaml").write_text(
        "rules: [team-rules]\ndisable: [user-code-error]\nskew: {node-02: 2.5, node-03: -1}\n"
    )
    cfg = load_config(tmp_path)
    assert cfg.rules == (tmp_path / "team-rules",)
    assert cfg.skew == {"node-02": 2.5, "node-03": -1.0}
    assert "user-code-error" not in cfg.apply(load_rules()).by_id
    assert cfg.apply(load_rules()).versions  # the matrix survives
    # found from a subdirectory too, walking up
    assert load_config(tmp_path / "team-rules").disable == ("user-code-error",)
    # the user-level file is used when no directory up to the repository root has one
    home = tmp_path / "xdg" / "crashlens"
    home.mkdir(parents=True)
    (home / "crashlens.yaml").write_text("disable: [cuda-oom]\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    assert load_config(repo).disable == ("cuda-oom",)


@pytest.mark.parametrize(
    "text,where,message",
    [
        ("rules: [nowhere]\n", ":1", "rules directory not found"),
        ("colour: red\n", ":1", "unknown key"),
        ("skew:\n  node-02: soon\n", ":2", "must be a number"),
        ("disable: cuda-oom\nrules: {a: 1}\n", ":1", "must be a list"),
        ("a: &x [1]\nb: *x\n", ":2", "aliases"),
        ("rules: [\n", "", "invalid YAML"),
    ],
)
def test_config_errors_are_one_line_with_file_and_line(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    (tmp_path / "crashlens.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    shown = str(err.value)
    assert "\n" not in shown and message in shown
    assert f"crashlens.yaml{where}" in shown


def test_at_least_needs_that_many_hits_in_a_group(tmp_path: Path) -> None:
    root = _rules(tmp_path, repeated="condition:\n  any: [err]\n  at_least: 3\n")
    rules = load_rules([root], include_default=False)
    twice = [_hit("repeated"), _hit("repeated")]
    assert match(twice, rules) == []
    thrice = [*twice, _hit("repeated")]
    (found,) = match(thrice, rules)
    assert len(found.hits) == 3


@pytest.mark.parametrize("bad", ["0", "21", "true", "2.5"])
def test_at_least_must_be_a_small_whole_number(tmp_path: Path, bad: str) -> None:
    root = _rules(tmp_path, repeated=f"condition:\n  any: [err]\n  at_least: {bad}\n")
    with pytest.raises(RuleError, match="at_least"):
        load_rules([root], include_default=False, strict=True)


def test_last_words_lets_one_final_finding_meet_at_least(tmp_path: Path) -> None:
    (tmp_path / "stuck.yaml").write_text(
        RULE.format(id="stuck", extra="condition: {any: [err], at_least: 3, last_words: true}")
    )
    rules = load_rules([tmp_path], include_default=False, strict=True)
    ev = Evidence("a.log", 1, 0, None, 1.0, False, "MYFW-NCCL failure")
    once = Hit("stuck", "err", ev, {})
    last = Hit("stuck", "err", ev, {}, last_words=True)
    assert match([once], rules) == []
    assert [m.rule.id for m in match([last], rules)] == ["stuck"]
    (tmp_path / "stuck.yaml").write_text(
        RULE.format(id="stuck", extra="condition: {any: [err], last_words: 'yes'}")
    )
    with pytest.raises(RuleError, match="'last_words' must be true or false"):
        load_rules([tmp_path], include_default=False, strict=True)


def test_ends_job_counts_only_findings_the_job_ended_on(tmp_path: Path) -> None:
    (tmp_path / "stuck.yaml").write_text(
        RULE.format(id="stuck", extra="condition: {any: [err], same: job, ends_job: true}")
    )
    rules = load_rules([tmp_path], include_default=False, strict=True)
    ev = Evidence("a.log", 1, 0, None, 1.0, False, "MYFW-NCCL failure")
    early = Hit("stuck", "err", ev, {})
    final = Hit("stuck", "err", ev, {}, ends_job=True)
    assert match([early], rules) == []
    (found,) = match([early, final], rules)
    assert found.hits == (final,)
    (tmp_path / "stuck.yaml").write_text(
        RULE.format(id="stuck", extra="condition: {any: [err], ends_job: 1}")
    )
    with pytest.raises(RuleError, match="'ends_job' must be true or false"):
        load_rules([tmp_path], include_default=False, strict=True)
