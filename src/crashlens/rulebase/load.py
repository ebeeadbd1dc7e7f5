"""Load rule YAML files safely, with every error naming its file and line."""

from __future__ import annotations

import math
import os
from importlib import resources
from pathlib import Path
from typing import Any

import regex
import yaml

from crashlens.errors import RuleError
from crashlens.model import CAUSE_CLASSES
from crashlens.rulebase.literals import required_literals
from crashlens.rulebase.schema import SEVERITY_WEIGHT, Condition, Detector, Rule, RuleSet

_RULE_KEYS = {
    "id", "title", "class", "severity", "kind", "description", "detectors", "condition",
    "explains", "remediation", "references", "repro", "fallback", "tags", "sync",
}  # fmt: skip
_DETECTOR_KEYS = {"regex", "scope", "sources", "contains", "ignore_case"}
_CONDITION_KEYS = {"any", "all", "not", "within", "same"}
_SOURCES = {"worker", "launcher", "kernel", "scheduler", "errorfile"}
_ID = regex.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_RULE_FILE = 1 << 20
#: Deepest nesting of YAML collections a rule file may use (rules need about four levels).
MAX_DEPTH = 32
_NOT_RULES = {"expect.yaml", "expected.yaml", "expect.yml", "expected.yml"}


class _LineLoader(yaml.SafeLoader):
    """A safe loader that records the line of every mapping in ``__line__``."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    mapping: dict[str, Any] = dict(loader.construct_mapping(node, deep=True))  # type: ignore[arg-type]
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def default_rules_dir() -> Path:
    """The bundled rule base: inside the wheel, or the repository's ``rules/`` when editable."""
    packaged = Path(str(resources.files("crashlens"))) / "_rules"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "rules"


def rule_files(directory: Path) -> list[Path]:
    """Every rule file under ``directory`` (fixture expectation files excluded), sorted."""
    if directory.is_file():
        return [directory]
    if not directory.is_dir():
        raise RuleError("rules directory not found", path=str(directory))
    found = [
        p
        for p in directory.rglob("*")
        if p.suffix in (".yaml", ".yml") and p.name not in _NOT_RULES and p.is_file()
    ]
    return sorted(found)


def load_rules(dirs: list[Path] | None = None, *, include_default: bool = True) -> RuleSet:
    """Load the bundled rules plus every rule under ``dirs``.

    A later rule with the same id replaces an earlier one, so users can override a bundled rule.

    Raises:
        RuleError: for the first rule that cannot be loaded, naming its file and line.
    """
    sources = ([default_rules_dir()] if include_default else []) + list(dirs or [])
    rules: dict[str, Rule] = {}
    for directory in sources:
        for path in rule_files(Path(directory)):
            rule = load_rule_file(path)
            rules[rule.id] = rule
    return RuleSet(tuple(rules.values()))


def load_rule_file(path: Path) -> Rule:
    """Parse and validate one rule file.

    Raises:
        RuleError: naming the file and line of the first problem.
    """
    shown = os.fspath(path)
    try:
        size = path.stat().st_size
        if size > MAX_RULE_FILE:
            raise RuleError(f"rule file is too large ({size} bytes)", path=shown)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"cannot read rule file: {exc}", path=shown) from None
    try:
        _refuse_bombs(text, shown)
        data = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise RuleError(f"invalid YAML: {problem}", path=shown, line=line) from None
    except RecursionError:
        raise RuleError("rule file is nested too deeply", path=shown) from None
    if not isinstance(data, dict):
        raise RuleError("a rule file must hold one mapping", path=shown, line=1)
    return build_rule(data, shown)


def _refuse_bombs(text: str, shown: str) -> None:
    """Refuse what a rule never needs and an attacker would use, before anything is built.

    Aliases (``*name``) are how "billion laughs" files expand to gigabytes, and nesting deeper
    than :data:`MAX_DEPTH` is how they exhaust the stack; one pass over the parser's events
    finds both.

    Raises:
        RuleError: naming the line of the alias or of the too-deep collection.
    """
    depth = 0
    fast: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for event in yaml.parse(text, Loader=fast):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark else None
            raise RuleError(
                "YAML aliases (*name) are not allowed in rule files", path=shown, line=line
            )
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else None
                raise RuleError(f"nested deeper than {MAX_DEPTH} levels", path=shown, line=line)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def _line(node: dict[str, Any]) -> int | None:
    line = node.get("__line__")
    return line if isinstance(line, int) and not isinstance(line, bool) else None


def _fail(msg: str, path: str, node: dict[str, Any]) -> RuleError:
    return RuleError(msg, path=path, line=_line(node))


def build_rule(data: dict[str, Any], path: str) -> Rule:
    """Turn one parsed YAML mapping into a :class:`Rule`, checking every field."""
    unknown = set(data) - _RULE_KEYS - {"__line__"}
    if unknown:
        raise _fail(f"unknown key(s): {', '.join(sorted(map(str, unknown)))}", path, data)
    for key in ("id", "title", "class", "severity", "detectors"):
        if key not in data:
            raise _fail(f"missing required key '{key}'", path, data)
    for key in ("id", "title", "class", "severity", "kind", "description", "remediation", "repro"):
        if isinstance(data.get(key), (dict, list)):
            raise _fail(f"'{key}' must be a single value, not a list or mapping", path, data)
    rule_id = str(data["id"])
    if not _ID.match(rule_id):
        raise _fail(f"id '{rule_id}' must be kebab-case", path, data)
    cls = str(data["class"])
    if cls not in CAUSE_CLASSES:
        raise _fail(f"class '{cls}' is not one of the root-cause classes", path, data)
    severity = str(data["severity"])
    if severity not in SEVERITY_WEIGHT:
        raise _fail(f"severity must be one of {', '.join(SEVERITY_WEIGHT)}", path, data)
    kind = str(data.get("kind", "cause"))
    if kind not in ("cause", "symptom"):
        raise _fail("kind must be 'cause' or 'symptom'", path, data)
    detectors = _detectors(data["detectors"], path, data)
    condition = _condition(data.get("condition"), {d.name for d in detectors}, path, data)
    return Rule(
        id=rule_id,
        title=str(data["title"]),
        cls=cls,
        severity=severity,
        kind=kind,  # type: ignore[arg-type]
        detectors=detectors,
        condition=condition,
        path=path,
        line=_line(data) or 1,
        description=str(data.get("description", "")).strip(),
        explains=_strings(data.get("explains"), "explains", path, data),
        remediation=str(data.get("remediation", "")).strip(),
        references=_strings(data.get("references"), "references", path, data),
        repro=str(data["repro"]) if data.get("repro") else None,
        fallback=bool(data.get("fallback", False)),
        tags=_strings(data.get("tags"), "tags", path, data),
        sync=str(data["sync"]) if data.get("sync") else None,
    )


def _strings(value: Any, key: str, path: str, node: dict[str, Any]) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(f"'{key}' must be a list of strings", path, node)
    return tuple(value)


def _detectors(value: Any, path: str, node: dict[str, Any]) -> tuple[Detector, ...]:
    if not isinstance(value, dict) or not set(value) - {"__line__"}:
        raise _fail("'detectors' must map names to detectors", path, node)
    out = []
    for name, spec in value.items():
        if name == "__line__":
            continue
        if isinstance(spec, str):
            spec = {"regex": spec, "__line__": _line(value)}
        if not isinstance(spec, dict) or "regex" not in spec:
            raise _fail(f"detector '{name}' needs a 'regex'", path, value)
        unknown = set(spec) - _DETECTOR_KEYS - {"__line__"}
        if unknown:
            keys = sorted(map(str, unknown))
            raise _fail(f"detector '{name}': unknown key(s) {keys}", path, spec)
        out.append(_detector(str(name), spec, path))
    return tuple(out)


def _detector(name: str, spec: dict[str, Any], path: str) -> Detector:
    if not isinstance(spec["regex"], str):
        raise _fail(f"detector '{name}': 'regex' must be a string", path, spec)
    pattern_text = spec["regex"]
    ignore_case = bool(spec.get("ignore_case", False))
    try:
        pattern = regex.compile(pattern_text, regex.IGNORECASE if ignore_case else 0)
    except (regex.error, ValueError, OverflowError, TypeError) as exc:
        raise _fail(f"detector '{name}': invalid regex: {exc}", path, spec) from None
    except (RecursionError, MemoryError):
        raise _fail(f"detector '{name}': regex is too complex to compile", path, spec) from None
    scope = spec.get("scope", "line")
    if scope not in ("line", "exception", "traceback"):
        raise _fail(f"detector '{name}': scope must be line, exception or traceback", path, spec)
    sources = spec.get("sources")
    if sources is not None:
        sources = frozenset(_strings(sources, "sources", path, spec))
        if not sources <= _SOURCES:
            raise _fail(f"detector '{name}': sources must be among {sorted(_SOURCES)}", path, spec)
    literals: tuple[str, ...] | None
    if "contains" in spec:
        literals = _strings(spec["contains"], "contains", path, spec)
    else:
        literals = required_literals(pattern_text)
    return Detector(
        name=name,
        pattern=pattern,
        scope=scope,
        sources=sources,
        literals=literals,
        ignore_case=ignore_case,
    )


def _condition(value: Any, names: set[str], path: str, node: dict[str, Any]) -> Condition:
    if value is None or value == "any":
        return Condition(any=tuple(sorted(names)))
    if isinstance(value, str):
        value = {"any": [value], "__line__": node.get("__line__")}
    if not isinstance(value, dict):
        raise _fail("'condition' must be a detector name or a mapping", path, node)
    unknown = set(value) - _CONDITION_KEYS - {"__line__"}
    if unknown:
        raise _fail(f"condition: unknown key(s) {sorted(map(str, unknown))}", path, value)
    parts = {k: _strings(value.get(k), k, path, value) for k in ("any", "all", "not")}
    for refs in parts.values():
        for ref in refs:
            if ref not in names:
                raise _fail(f"condition names unknown detector '{ref}'", path, value)
    if not parts["any"] and not parts["all"]:
        raise _fail("condition needs 'any' or 'all'", path, value)
    same = value.get("same", "rank")
    if same not in ("rank", "host", "job"):
        raise _fail("condition 'same' must be rank, host or job", path, value)
    within = value.get("within")
    if within is not None and (
        isinstance(within, bool)
        or not isinstance(within, (int, float))
        or not math.isfinite(within)
        or within < 0
    ):
        raise _fail("condition 'within' must be a number of seconds", path, value)
    return Condition(
        any=parts["any"],
        all=parts["all"],
        none=parts["not"],
        within=float(within) if within is not None else None,
        same=same,
    )
