"""rules/schema.json is the rule format's contract: bundled rules follow it, and the loader
refuses what it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from crashlens.errors import RuleError
from crashlens.rulebase.load import build_rule, default_rules_dir, rule_files

SCHEMA = json.loads((default_rules_dir() / "schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

VALID: dict[str, Any] = {
    "id": "my-rule",
    "title": "My rule",
    "class": "user_code_error",
    "severity": "high",
    "detectors": {"a": "MYFW-FATAL code=(?P<code>\\d+)"},
    "remediation": "fix it",
}


def test_the_schema_is_a_valid_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", rule_files(default_rules_dir()), ids=lambda p: p.stem)
def test_every_bundled_rule_validates(path: Path) -> None:
    errors = [e.message for e in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


@pytest.mark.parametrize(
    "change",
    [
        {"class": "gpu_on_fire"},
        {"severity": "urgent"},
        {"kind": "maybe"},
        {"id": "My_Rule"},
        {"colour": "red"},
        {"detectors": {"a": {"regex": "x", "scope": "paragraph"}}},
        {"detectors": {"a": {"regex": "x", "origin": ["somewhere"]}}},
        {"detectors": {"a": {"pattern": "x"}}},
        {"condition": {"within": 5}},
        {"facts": {"test": "known-problem", "keys": ["torch"]}},
        {"resemble": "yes"},
        {"fallback": 1},
    ],
    ids=lambda c: next(iter(c)),
)
def test_the_loader_and_the_schema_refuse_the_same(change: dict[str, Any]) -> None:
    data = {**VALID, **change}
    assert list(VALIDATOR.iter_errors(data)), "the schema accepts it"
    with pytest.raises(RuleError):
        build_rule(dict(data), "my-rule.yaml")


def test_a_minimal_rule_is_valid_for_both() -> None:
    assert list(VALIDATOR.iter_errors(VALID)) == []
    assert build_rule(dict(VALID), "my-rule.yaml").id == "my-rule"


def test_every_bundled_detector_compiles_and_its_case_rule_is_the_compiled_one() -> None:
    """Bundled regexes compile when first used (a run pays only for what a line needs); this
    test is where every one of them is compiled, and the prefilter's case-insensitivity read
    from the pattern text is the one the compiled pattern has."""
    import regex

    from crashlens.rulebase import load_rules

    rules = load_rules()
    detectors = [d for r in rules.rules for d in r.detectors]
    assert all(d.pattern._compiled is None for d in detectors if d.scope != "flight")
    for det in detectors:
        compiled = det.pattern.compile()
        if compiled.flags & regex.IGNORECASE:
            assert det.ignore_case, det.name


def test_a_user_rule_with_a_bad_regex_is_refused_as_it_loads(tmp_path: Path) -> None:
    from crashlens.rulebase import load_rules

    (tmp_path / "bad.yaml").write_text(
        "id: bad\ntitle: Bad\nclass: unknown\nseverity: low\ndetectors:\n  d: 'unclosed (group'\n"
    )
    rules = load_rules([tmp_path])
    assert any("invalid regex" in s and "bad.yaml" in s for s in rules.skipped)


def test_maintainers_notes_stay_out_of_what_users_read() -> None:
    """Where a message format or a fixture line comes from is for maintainers (``notes:``);
    descriptions are shown in reports."""
    from crashlens.rulebase import load_rules

    phrases = ("re-read in source", "Fixture lines", "as posted in", "seen in real logs")
    leaked = [r.id for r in load_rules().rules if any(p in (r.description or "") for p in phrases)]
    assert leaked == []


def _enum(node: dict[str, Any]) -> set[str]:
    return set(node["oneOf"][0]["enum"])


def test_the_loader_knows_exactly_the_schemas_fields_and_values() -> None:
    # one format: the loader's own key sets and value sets are the schema's
    from crashlens.model import Origin
    from crashlens.rulebase import load

    detector = SCHEMA["$defs"]["detector"]["oneOf"][1]["properties"]
    assert set(SCHEMA["properties"]) == load._RULE_KEYS
    assert set(detector) == load._DETECTOR_KEYS
    assert set(SCHEMA["$defs"]["condition"]["properties"]) == load._CONDITION_KEYS
    assert load._ORIGINS == _enum(detector["origin"]) == set(Origin.__args__)
    assert _enum(detector["sources"]) == load._SOURCES


def test_the_docs_show_every_field_of_the_format() -> None:
    # docs/rules.md's annotated example names each field the schema has, and no other
    import re

    docs = (Path(__file__).parents[1] / "docs/rules.md").read_text(encoding="utf-8")
    example = docs.split("```yaml", 1)[1].split("```", 1)[0]
    top = set(re.findall(r"^([a-z_]+):", example, re.M))
    nested = set(re.findall(r"^ {2,4}([a-z_]+):", example, re.M))
    assert top == set(SCHEMA["properties"]) - {"facts"}, top ^ set(SCHEMA["properties"])
    detector = set(SCHEMA["$defs"]["detector"]["oneOf"][1]["properties"])
    condition = set(SCHEMA["$defs"]["condition"]["properties"])
    assert detector | condition <= nested, (detector | condition) - nested
    assert "facts:" in docs  # fact-only rules have their own section


def test_rule_files_are_the_yaml_files_beside_fixture_folders(tmp_path: Path) -> None:
    # rules/<area>/<id>.yaml with its fixtures in rules/<area>/<id>/: a YAML file in a rule's
    # fixture folder is a fixture, not a rule; a folder of rules nested deeper still counts
    (tmp_path / "env" / "my-rule").mkdir(parents=True)
    (tmp_path / "env" / "my-rule.yaml").write_text("id: my-rule\n")
    (tmp_path / "env" / "my-rule" / "config-as-posted.yaml").write_text("lr: 1\n")
    (tmp_path / "env" / "extra").mkdir()
    (tmp_path / "env" / "extra" / "other-rule.yml").write_text("id: other-rule\n")
    found = [p.relative_to(tmp_path).as_posix() for p in rule_files(tmp_path)]
    assert found == ["env/extra/other-rule.yml", "env/my-rule.yaml"]
