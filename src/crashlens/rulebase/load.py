"""Load rule YAML files safely, with every error naming its file and line."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import regex

if TYPE_CHECKING:
    import yaml

from crashlens import lazyre
from crashlens._version import __version__
from crashlens.errors import RuleError, RuleErrors
from crashlens.model import CAUSE_CLASSES, Origin
from crashlens.rulebase.conditions import parse_spec
from crashlens.rulebase.literals import required_literals
from crashlens.ruletypes import (
    FACT_TESTS,
    FLIGHT_KINDS,
    SAME_GROUPS,
    SEVERITY_WEIGHT,
    Condition,
    Detector,
    FactTest,
    LazyPattern,
    Rule,
    RuleSet,
    VersionEntry,
    VersionSpec,
)

_RULE_KEYS = {
    "id", "title", "class", "severity", "kind", "description", "detectors", "condition",
    "explains", "remediation", "references", "repro", "fallback", "resemble", "tags", "sync",
    "when", "facts", "notes",
}  # fmt: skip
_DETECTOR_KEYS = {"regex", "scope", "sources", "contains", "ignore_case", "origin"}
#: The pattern of a ``flight:`` detector: it never matches a line.
_NEVER = r"(?!)"
#: A pattern that turns on case-insensitive matching for the whole of itself: ``(?i)...``.
_GLOBAL_IGNORECASE = lazyre.compile_regex(r"\(\?[a-zA-Z]*i[a-zA-Z]*\)")
_ORIGINS = set(get_args(Origin))
_CONDITION_KEYS = {"any", "all", "not", "within", "same", "at_least", "last_words", "ends_job"}
_SOURCES = {"worker", "launcher", "kernel", "scheduler", "errorfile"}
_ID = lazyre.compile_regex(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_FACT_KEY = lazyre.compile_regex(r"^[a-z][a-z0-9_]{0,63}$")
MAX_RULE_FILE = 1 << 20
#: Deepest nesting of YAML collections a rule file may use (rules need about four levels).
MAX_DEPTH = 32
#: The version matrix's file name: data the rules read, not a rule (see load_version_matrix).
VERSIONS_FILE = "versions.yaml"
_NOT_RULES = {"expect.yaml", "expected.yaml", "expect.yml", "expected.yml", VERSIONS_FILE}


@functools.cache
def _line_loader() -> type[yaml.SafeLoader]:
    """A safe loader (libyaml's parser when PyYAML has it: several times faster than the pure
    one, same results) that records the line of every mapping in ``__line__``. PyYAML is
    imported here: a run whose rules come from the cache never imports it."""
    import yaml

    safe: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class LineLoader(safe):  # type: ignore[valid-type, misc]
        """A safe loader that records the line of every mapping in ``__line__``."""

    LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    return LineLoader


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> dict[str, Any]:
    import yaml

    # A key given twice would silently replace the first (a second detector of the same name
    # hiding the first one): refuse it, with the line of the second.
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    mapping: dict[str, Any] = dict(loader.construct_mapping(node, deep=True))
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


def default_rules_dir() -> Path:
    """The bundled rule base: inside the wheel, or the repository's ``rules/`` when editable."""
    package = Path(__file__).parent.parent
    if not package.is_dir():  # not on disk (a zip): as importlib.resources sees it
        from importlib import resources

        package = Path(str(resources.files("crashlens")))
    packaged = package / "_rules"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "rules"


def rule_files(directory: Path) -> list[Path]:
    """Every rule file under ``directory`` (fixture expectation files excluded), sorted."""
    if directory.is_file():
        return [directory]
    if not directory.is_dir():
        raise RuleError("rules directory not found", path=str(directory))
    found: list[Path] = []
    for top, subdirs, names in os.walk(directory):
        rules = [n for n in names if n.endswith((".yaml", ".yml")) and n not in _NOT_RULES]
        # A rule's fixture folder sits beside it under its name (``<id>/`` by ``<id>.yaml``):
        # logs, not rules, so it is not walked (a few hundred folders a start-up skips).
        stems = {n.rsplit(".", 1)[0] for n in rules}
        subdirs[:] = sorted(d for d in subdirs if d not in stems)
        found.extend(Path(top, name) for name in rules)
    return sorted(found)


def load_rules(
    dirs: list[Path] | None = None, *, include_default: bool = True, strict: bool = False
) -> RuleSet:
    """Load the bundled rules plus every rule under ``dirs``.

    A later rule with the same id replaces an earlier one, so users can override a bundled rule.
    Every file is tried. An invalid user rule (under ``dirs``) is left out and named in
    ``RuleSet.skipped``, so a teammate's typo does not stop an analysis; with ``strict`` (and
    always for the bundled rules, whose errors are bugs) every problem is raised at once.

    Raises:
        RuleError: a rule directory that does not exist, or (``RuleErrors``) the invalid files.
    """
    bundled = [default_rules_dir()] if include_default else []
    rules: dict[str, Rule] = {}
    duplicates: list[tuple[Rule, Rule]] = []
    fatal: list[RuleError] = []
    skipped: list[str] = []
    cached: dict[str, Any] = {}  # the bundle's files, parsed (from the cache when it has them)
    literals: dict[str, tuple[str, ...] | None] = {}  # regex -> its required literals
    for directory in [*bundled, *(dirs or [])]:
        here: dict[str, Rule] = {}
        user = not any(directory is b for b in bundled)
        files = rule_files(Path(directory))
        if not user:
            cached, literals = _cached_bundle(Path(directory), files) or ({}, {})
        for path in files:
            try:
                # The bundled rules' regexes are compiled by the test suite, and here only
                # when a line needs them; a user's are checked as they load.
                if not user and os.fspath(path) in cached:
                    data = cached[os.fspath(path)]
                    rule = build_rule(data, os.fspath(path), compile_now=False, literals=literals)
                else:
                    rule = load_rule_file(path, compile_now=user)
            except RuleError as exc:
                if user and not strict:
                    skipped.append(str(exc))
                else:
                    fatal.append(exc)
                continue
            if rule.id in here:
                duplicates.append((here[rule.id], rule))
            here[rule.id] = rule
            rules[rule.id] = rule
    if fatal:
        raise fatal[0] if len(fatal) == 1 else RuleErrors(fatal)
    versions = _version_matrix(list(dirs or []), include_default, cached)
    return RuleSet(
        tuple(rules.values()),
        versions=versions,
        duplicates=tuple(duplicates),
        skipped=tuple(skipped),
    )


def load_version_matrix(
    dirs: list[Path] | None = None, *, include_default: bool = True
) -> dict[str, VersionEntry]:
    """The version matrix: ``versions.yaml`` at the top of the bundled rules, then of each dir.

    A later file's row for a fact replaces an earlier one. Format (see docs/rules.md)::

        torch:
          recommended: ">=2.0.0,<=2.1.2"
          known_problem: "==1.13.*"
          note: why the known-problem range is a problem
          references: [https://...]

    Raises:
        RuleError: naming the file and line of the first invalid entry.
    """
    return _version_matrix(list(dirs or []), include_default, {})


def _version_matrix(
    dirs: list[Path], include_default: bool, cached: Mapping[str, Any]
) -> dict[str, VersionEntry]:
    """:func:`load_version_matrix`, taking a file's parse from ``cached`` (path -> data) when
    it is there."""
    sources = ([default_rules_dir()] if include_default else []) + dirs
    out: dict[str, VersionEntry] = {}
    for directory in sources:
        path = Path(directory) / VERSIONS_FILE
        if Path(directory).is_dir() and path.is_file():
            out.update(_version_file(path, cached.get(os.fspath(path))))
    return out


def _version_file(path: Path, data: Any = None) -> dict[str, VersionEntry]:
    if data is None:
        data = _load_yaml(path, "version matrix")
    shown = os.fspath(path)
    if not isinstance(data, dict):
        raise RuleError("the version matrix must be one mapping", path=shown, line=1)
    out: dict[str, VersionEntry] = {}
    for key, row in data.items():
        if key == "__line__":
            continue
        if not isinstance(row, dict):
            raise _fail(f"'{key}' must map to recommended / known_problem", shown, data)
        unknown = set(row) - {"recommended", "known_problem", "note", "references", "__line__"}
        if unknown:
            raise _fail(f"'{key}': unknown key(s) {sorted(map(str, unknown))}", shown, row)
        specs: dict[str, VersionSpec | None] = {}
        for name in ("recommended", "known_problem"):
            value = row.get(name)
            if value is None:
                specs[name] = None
                continue
            spec = _spec(value, f"{key}.{name}", shown, row)
            if spec.clauses == ():
                raise _fail(f"'{key}.{name}' must be a version range like '>=2.0'", shown, row)
            specs[name] = spec
        out[str(key)] = VersionEntry(
            key=str(key),
            recommended=specs["recommended"],
            known_problem=specs["known_problem"],
            note=str(row.get("note", "")).strip(),
            references=_strings(row.get("references"), "references", shown, row),
        )
    return out


def _spec(value: Any, what: str, path: str, node: dict[str, Any]) -> VersionSpec:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _fail(f"'{what}' must be a string such as '>=2.0,<2.2'", path, node)
    try:
        return parse_spec(str(value))
    except ValueError as exc:
        raise _fail(f"'{what}': {exc}", path, node) from None


def cache_dir() -> Path | None:
    """Where parsed bundled rules are cached: ``$CRASHLENS_CACHE_DIR`` (empty or ``off``: no
    cache), else ``$XDG_CACHE_HOME/crashlens``, else ``~/.cache/crashlens``."""
    given = os.environ.get("CRASHLENS_CACHE_DIR")
    if given is not None:
        return None if given.strip() in ("", "off") else Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "crashlens"


#: The cache's format, part of its key (a cache of another format is a miss).
_CACHE_FORMAT = b"rules-cache-2"


def _cached_bundle(
    directory: Path, files: list[Path]
) -> tuple[dict[str, Any], dict[str, tuple[str, ...] | None]] | None:
    """The bundled rule files and version matrix parsed (path -> mapping), and the literals
    each detector regex requires (regex -> literals, the prefilter's), from the cache when it
    holds exactly these files' contents for this crashlens version, else parsed now and cached.

    The cache is plain JSON of the YAML documents and the literal lists (never pickled
    objects), keyed by a digest of the version and every file's name and bytes, so a changed,
    added or removed rule file is a miss; a cache that cannot be read or written is ignored
    (the files are parsed as always). None: no cache directory, or a file the cache cannot hold.
    """
    where = cache_dir()
    if where is None:
        return None
    digest = hashlib.sha256(__version__.encode() + b"\0" + _CACHE_FORMAT)
    names: dict[str, str] = {}  # the file's name in the bundle -> its path here
    versions = directory / VERSIONS_FILE
    try:
        for path in [*files, *([versions] if versions.is_file() else [])]:
            rel = path.relative_to(directory).as_posix()
            names[rel] = os.fspath(path)
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    except (OSError, ValueError):
        return None
    cache = where / f"rules-{digest.hexdigest()[:24]}.json"
    try:
        held = json.loads(cache.read_text(encoding="utf-8"))
        docs, literals = held["files"], held["literals"]
        if isinstance(docs, dict) and set(docs) == set(names) and isinstance(literals, dict):
            known = {k: None if v is None else tuple(v) for k, v in literals.items()}
            return {names[rel]: data for rel, data in docs.items()}, known
    except (OSError, ValueError, TypeError, KeyError):
        pass
    parsed = _parse_bundle(names)
    if parsed is None:
        return None
    learned = _required_literals(parsed.values())
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"files": parsed, "literals": learned}), encoding="utf-8")
        os.replace(tmp, cache)
    except (OSError, TypeError, ValueError):
        pass  # a read-only home: parse every time
    else:
        _prune_cache(where)
    return {names[rel]: data for rel, data in parsed.items()}, learned


#: How many rule caches a cache directory keeps (one per rule base and crashlens version
#: in use: several virtual environments may share it); the least recently written go.
KEEP_CACHES = 8


def _prune_cache(where: Path) -> None:
    """Remove all but the :data:`KEEP_CACHES` newest rule caches of ``where`` (each edit of a
    rule file writes a new one): the directory stays small however often rules change. Only
    the cache's own files are touched; one that cannot be removed stays."""
    held: list[tuple[float, Path]] = []
    for path in where.glob("rules-*.json"):
        with contextlib.suppress(OSError):
            held.append((path.stat().st_mtime, path))
    held.sort(reverse=True)
    for _, path in held[KEEP_CACHES:]:
        with contextlib.suppress(OSError):
            path.unlink()


def _parse_bundle(names: dict[str, str]) -> dict[str, Any] | None:
    """Every file of ``names`` (name -> path) parsed; None if one is not a valid mapping
    (loading reports it, with its line)."""
    parsed: dict[str, Any] = {}
    for rel, shown in names.items():
        try:
            data = _load_yaml(Path(shown), "rule file")
        except RuleError:
            return None
        if not isinstance(data, dict):
            return None
        parsed[rel] = data
    return parsed


def _required_literals(docs: Iterable[Any]) -> dict[str, tuple[str, ...] | None]:
    """The literals each detector regex of the rule documents ``docs`` requires, for those
    without ``contains`` (what :func:`_detector` would compute; a regex left out is computed
    as the rule is built)."""
    out: dict[str, tuple[str, ...] | None] = {}
    for data in docs:
        detectors = data.get("detectors") if isinstance(data, dict) else None
        for spec in detectors.values() if isinstance(detectors, dict) else ():
            spec = {"regex": spec} if isinstance(spec, str) else spec
            if not isinstance(spec, dict) or not isinstance(spec.get("regex"), str):
                continue
            if "contains" not in spec and "flight" not in spec:
                with contextlib.suppress(Exception):  # the rule's load reports it
                    out[spec["regex"]] = required_literals(spec["regex"])
    return out


def load_rule_file(path: Path, *, compile_now: bool = True) -> Rule:
    """Parse and validate one rule file (``compile_now``: its regexes too; else each is
    compiled when first used, see :class:`~crashlens.ruletypes.LazyPattern`).

    Raises:
        RuleError: naming the file and line of the first problem.
    """
    shown = os.fspath(path)
    data = _load_yaml(path, "rule file")
    if not isinstance(data, dict):
        raise RuleError("a rule file must hold one mapping", path=shown, line=1)
    return build_rule(data, shown, compile_now=compile_now)


def _load_yaml(path: Path, what: str) -> Any:
    """Read and safely parse one YAML file (size-capped, no aliases, bounded depth).

    Raises:
        RuleError: naming the file (and line) of the problem.
    """
    import yaml

    shown = os.fspath(path)
    try:
        size = path.stat().st_size
        if size > MAX_RULE_FILE:
            raise RuleError(f"{what} is too large ({size} bytes)", path=shown)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"cannot read {what}: {exc}", path=shown) from None
    try:
        _refuse_bombs(text, shown)
        return yaml.load(text, Loader=_line_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise RuleError(f"invalid YAML: {problem}", path=shown, line=line) from None
    except RecursionError:
        raise RuleError(f"{what} is nested too deeply", path=shown) from None


def _refuse_bombs(text: str, shown: str) -> None:
    """Refuse what a rule never needs and an attacker would use, before anything is built.

    Aliases (``*name``) are how "billion laughs" files expand to gigabytes, and nesting deeper
    than :data:`MAX_DEPTH` is how they exhaust the stack; one pass over the parser's events
    finds both.

    Raises:
        RuleError: naming the line of the alias or of the too-deep collection.
    """
    import yaml

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


def build_rule(
    data: dict[str, Any],
    path: str,
    *,
    compile_now: bool = True,
    literals: Mapping[str, tuple[str, ...] | None] | None = None,
) -> Rule:
    """Turn one parsed YAML mapping into a :class:`Rule`, checking every field (``literals``:
    the required literals of detector regexes, known already)."""
    unknown = set(data) - _RULE_KEYS - {"__line__"}
    if unknown:
        raise _fail(f"unknown key(s): {', '.join(sorted(map(str, unknown)))}", path, data)
    fact_test = _fact_test(data.get("facts"), path, data) if "facts" in data else None
    required = ("id", "title", "class", "severity") + (() if fact_test else ("detectors",))
    for key in required:
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
    for flag in ("fallback", "resemble"):
        if not isinstance(data.get(flag, False), bool):
            raise _fail(f"'{flag}' must be true or false", path, data)
    if fact_test is not None:
        if data.get("detectors") or "condition" in data:
            raise _fail("a rule with 'facts' has no 'detectors' or 'condition'", path, data)
        if data.get("fallback"):
            raise _fail("a rule with 'facts' cannot be a fallback", path, data)
        detectors: tuple[Detector, ...] = ()
        condition = Condition()
    else:
        detectors = _detectors(data["detectors"], path, data, compile_now, literals or {})
        condition = _condition(data.get("condition"), {d.name for d in detectors}, path, data)
    when = _when(data.get("when"), path, data)
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
        resemble=bool(data.get("resemble", False)),
        tags=_strings(data.get("tags"), "tags", path, data),
        sync=str(data["sync"]) if data.get("sync") else None,
        when=when,
        facts=fact_test,
    )


def _when(value: Any, path: str, node: dict[str, Any]) -> tuple[tuple[str, VersionSpec], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not set(value) - {"__line__"}:
        raise _fail("'when' must map fact names to conditions, e.g. {torch: '>=2.0'}", path, node)
    out = []
    for key, spec in value.items():
        if key == "__line__":
            continue
        if not isinstance(key, str) or not _FACT_KEY.match(key):
            raise _fail(f"when: '{key}' is not a fact name (lower_snake_case)", path, value)
        out.append((key, _spec(spec, f"when.{key}", path, value)))
    return tuple(out)


def _fact_test(value: Any, path: str, node: dict[str, Any]) -> FactTest:
    if not isinstance(value, dict):
        raise _fail("'facts' must be a mapping with 'test' and 'keys'", path, node)
    unknown = set(value) - {"test", "keys", "__line__"}
    if unknown:
        raise _fail(f"facts: unknown key(s) {sorted(map(str, unknown))}", path, value)
    test = value.get("test")
    if test not in FACT_TESTS:
        raise _fail(f"facts: 'test' must be one of {', '.join(FACT_TESTS)}", path, value)
    keys = _strings(value.get("keys"), "keys", path, value)
    if not keys:
        raise _fail("facts: 'keys' must name at least one fact", path, value)
    for key in keys:
        if not _FACT_KEY.match(key):
            raise _fail(f"facts: '{key}' is not a fact name (lower_snake_case)", path, value)
    return FactTest(test=str(test), keys=keys)


def _strings(value: Any, key: str, path: str, node: dict[str, Any]) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(f"'{key}' must be a list of strings", path, node)
    return tuple(value)


def _detectors(
    value: Any,
    path: str,
    node: dict[str, Any],
    compile_now: bool = True,
    literals: Mapping[str, tuple[str, ...] | None] | None = None,
) -> tuple[Detector, ...]:
    if not isinstance(value, dict) or not set(value) - {"__line__"}:
        raise _fail("'detectors' must map names to detectors", path, node)
    out = []
    for name, spec in value.items():
        if name == "__line__":
            continue
        if isinstance(spec, str):
            spec = {"regex": spec, "__line__": _line(value)}
        if isinstance(spec, dict) and "flight" in spec:
            out.append(_flight_detector(str(name), spec, path))
            continue
        if not isinstance(spec, dict) or "regex" not in spec:
            raise _fail(f"detector '{name}' needs a 'regex'", path, value)
        unknown = set(spec) - _DETECTOR_KEYS - {"__line__"}
        if unknown:
            keys = sorted(map(str, unknown))
            raise _fail(f"detector '{name}': unknown key(s) {keys}", path, spec)
        out.append(_detector(str(name), spec, path, compile_now, literals or {}))
    return tuple(out)


def _flight_detector(name: str, spec: dict[str, Any], path: str) -> Detector:
    """A detector of Flight Recorder findings: ``{flight: not_joined}`` and nothing else."""
    unknown = set(spec) - {"flight", "__line__"}
    if unknown:
        keys = sorted(map(str, unknown))
        raise _fail(f"detector '{name}': a flight detector takes no other key {keys}", path, spec)
    kind = spec["flight"]
    if kind not in FLIGHT_KINDS:
        raise _fail(f"detector '{name}': flight must be one of {list(FLIGHT_KINDS)}", path, spec)
    return Detector(
        name=name, pattern=LazyPattern(_NEVER), scope="flight", literals=(), flight=str(kind)
    )


def _detector(
    name: str,
    spec: dict[str, Any],
    path: str,
    compile_now: bool = True,
    known: Mapping[str, tuple[str, ...] | None] | None = None,
) -> Detector:
    if not isinstance(spec["regex"], str):
        raise _fail(f"detector '{name}': 'regex' must be a string", path, spec)
    pattern_text = spec["regex"]
    ignore_case = bool(spec.get("ignore_case", False))
    pattern = LazyPattern(pattern_text, regex.IGNORECASE if ignore_case else 0)
    if compile_now:
        try:
            pattern.compile()
        except (regex.error, ValueError, OverflowError, TypeError) as exc:
            raise _fail(f"detector '{name}': invalid regex: {exc}", path, spec) from None
        except (RecursionError, MemoryError):
            raise _fail(f"detector '{name}': regex is too complex to compile", path, spec) from None
    # An inline (?i) makes the prefilter case-insensitive too, or it would miss "CUDA ERROR".
    ignore_case = ignore_case or bool(_GLOBAL_IGNORECASE.match(pattern_text))
    scope = spec.get("scope", "line")
    if scope not in ("line", "exception", "traceback"):
        raise _fail(f"detector '{name}': scope must be line, exception or traceback", path, spec)
    sources = spec.get("sources")
    if sources is not None:
        sources = frozenset(_strings(sources, "sources", path, spec))
        if not sources <= _SOURCES:
            raise _fail(f"detector '{name}': sources must be among {sorted(_SOURCES)}", path, spec)
    origin = spec.get("origin")
    if origin is not None:
        origin = frozenset(_strings(origin, "origin", path, spec))
        if not origin <= _ORIGINS:
            raise _fail(f"detector '{name}': origin must be among {sorted(_ORIGINS)}", path, spec)
        if scope == "line":
            raise _fail(f"detector '{name}': origin needs scope exception or traceback", path, spec)
    literals: tuple[str, ...] | None
    if "contains" in spec:
        literals = _strings(spec["contains"], "contains", path, spec)
    elif known is not None and pattern_text in known:
        literals = known[pattern_text]
    else:
        literals = required_literals(pattern_text)
    return Detector(
        name=name,
        pattern=pattern,
        scope=scope,
        sources=sources,
        literals=literals,
        ignore_case=ignore_case,
        origin=origin,
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
    if same not in SAME_GROUPS:
        raise _fail(f"condition 'same' must be one of {', '.join(SAME_GROUPS)}", path, value)
    within = value.get("within")
    if within is not None and (
        isinstance(within, bool)
        or not isinstance(within, (int, float))
        or not math.isfinite(within)
        or within < 0
    ):
        raise _fail("condition 'within' must be a number of seconds", path, value)
    at_least = value.get("at_least", 1)
    if isinstance(at_least, bool) or not isinstance(at_least, int) or not 1 <= at_least <= 20:
        raise _fail("condition 'at_least' must be a whole number from 1 to 20", path, value)
    last_words = value.get("last_words", False)
    if not isinstance(last_words, bool):
        raise _fail("condition 'last_words' must be true or false", path, value)
    ends_job = value.get("ends_job", False)
    if not isinstance(ends_job, bool):
        raise _fail("condition 'ends_job' must be true or false", path, value)
    return Condition(
        any=parts["any"],
        all=parts["all"],
        none=parts["not"],
        within=float(within) if within is not None else None,
        same=same,
        at_least=at_least,
        last_words=last_words,
        ends_job=ends_job,
    )
