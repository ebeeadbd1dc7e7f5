"""The shipped JSON Schema describes what ``--format json`` really emits."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from conftest import FIXTURES
from crashlens import analyze
from crashlens.model import CAUSE_CLASSES
from crashlens.render import render
from crashlens.render.schema import load_schema

JOBS = [
    "gpu/nccl_timeout_cascade",
    "gpu/healthy_run",
    "gpu/xid_illegal_access",
    "repro/rank_exception_cascade",
    "repro/host_oom",
    "repro/gloo_hang",
]


def _validator() -> jsonschema.Draft202012Validator:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _doc(job: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(render(analyze([FIXTURES / job]), "json"))
    return data


def test_schema_is_valid_draft_2020_12() -> None:
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_class_enum_matches_model() -> None:
    assert load_schema()["$defs"]["class"]["enum"] == list(CAUSE_CLASSES)


def test_required_cause_keys() -> None:
    cause = load_schema()["$defs"]["cause"]
    for key in ("rule", "class", "title", "confidence", "severity", "ranks", "first_seen"):
        assert key in cause["required"]
    for key in ("evidence", "explains", "remediation"):
        assert key in cause["required"]
    evidence = load_schema()["$defs"]["evidence"]["required"]
    assert evidence == ["file", "line", "rank", "host", "time", "text"]


@pytest.mark.parametrize("job", JOBS)
def test_fixture_output_validates(job: str) -> None:
    errors = sorted(_validator().iter_errors(_doc(job)), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]


def _break_class(d: dict[str, Any]) -> None:
    d["causes"][0]["class"] = "cosmic_rays"


def _break_confidence(d: dict[str, Any]) -> None:
    d["causes"][0]["confidence"] = 1.5


def _drop_evidence_line(d: dict[str, Any]) -> None:
    del d["causes"][0]["evidence"][0]["line"]


def _first_failure_string(d: dict[str, Any]) -> None:
    d["first_failure"] = "rank 5"


def _drop_inputs(d: dict[str, Any]) -> None:
    del d["inputs"]


def _bad_time(d: dict[str, Any]) -> None:
    d["causes"][0]["explains"][0]["first_seen"] = "yesterday"


@pytest.mark.parametrize(
    "breaker",
    [
        _break_class,
        _break_confidence,
        _drop_evidence_line,
        _first_failure_string,
        _drop_inputs,
        _bad_time,
    ],
)
def test_broken_document_is_rejected(breaker: Any) -> None:
    doc = copy.deepcopy(_doc("gpu/nccl_timeout_cascade"))
    assert _validator().is_valid(doc)
    breaker(doc)
    assert not _validator().is_valid(doc)


def test_schema_ships_inside_package() -> None:
    from importlib import resources

    assert resources.files("crashlens.render").joinpath("schema.json").is_file()
