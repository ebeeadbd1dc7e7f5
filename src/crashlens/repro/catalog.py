"""The catalog of repro scripts: what each one reproduces, and which rule points at it.

Every script in ``crashlens/repro/scripts/`` is a standalone program (no crashlens import) whose
module docstring carries one header line::

    crashlens-repro: id=<id> class=<class> ranks=<n> gpu=yes|no launcher=python|torchrun [k=v ...]

``class`` is the root-cause class ``crashlens analyze`` must give the logs the script produces;
``ranks`` the default world size (1 for ``launcher=python``). Optional keys:

- ``timeout=<s>``: how long a run may take before it is killed (default 90 s);
- ``gpus=<n>``: CUDA devices a ``gpu=yes`` repro needs (default: ``ranks``);
- ``requires=<mod>[,<mod>]``: importable modules besides torch (e.g. ``datasets``);
- ``master_port=occupied``: launch torchrun on a port another socket already holds;
- ``tmpfs=<subdir>:<size>``: mount a small tmpfs at ``<workdir>/<subdir>`` (needs root);
- ``as_limit=<n>g|none``: address-space limit (RLIMIT_AS) of the run;
- ``shm=<size>``: the run gets a private /dev/shm of that size (a mount namespace; needs root);
- ``torchrun_args=<a>[,<b>]``: extra torchrun options (e.g. ``--monitor-interval=5``);
- ``fr=yes``: the run records collectives in the Flight Recorder (``TORCH_FR_BUFFER_SIZE``)
  and the script writes each rank's dump under ``<logs>/flight_recorder/``
  (``TORCH_FR_DUMP_TEMP_FILE``) with ``_flight_recorder.py``, copied beside it.

A script's parameters are its ``parser.add_argument("--name", ...)`` calls, read from the source
(nothing is imported or run), so ``repro run --set name=value`` can be checked before a process
starts. Rules name their repro with a ``repro: <id>`` field; :func:`for_rule` and
:func:`for_report` follow it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from crashlens.errors import CrashlensError

if TYPE_CHECKING:
    from crashlens.report import Report
    from crashlens.rulebase import Rule, RuleSet

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
DEFAULT_TIMEOUT_S = 90.0
_HEADER_RE = re.compile(r"^crashlens-repro:\s*(?P<body>.+)$", re.MULTILINE)
_CORE_KEYS = ("id", "class", "ranks", "gpu", "launcher")
_LAUNCHERS = ("python", "torchrun")


class UnknownReproError(CrashlensError):
    """No repro script has this id."""


class BadParameterError(CrashlensError):
    """A ``--set key=value`` that the repro script does not accept."""


@dataclass(frozen=True)
class Param:
    """One ``--name`` option of a repro script, as its argparse call declares it."""

    name: str
    default: str | None = None
    type: str = "str"
    choices: tuple[str, ...] | None = None
    help: str = ""

    def check(self, value: str) -> str | None:
        """Return why ``value`` is not acceptable for this option, or None when it is."""
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        converter = {"int": int, "float": float}.get(self.type)
        if converter is not None:
            try:
                converter(value)
            except ValueError:
                return f"must be {'an integer' if self.type == 'int' else 'a number'}"
        return None


@dataclass(frozen=True)
class Repro:
    """One repro script and what its header declares about it."""

    id: str
    cls: str
    ranks: int
    gpu: bool
    launcher: str
    script: Path
    summary: str
    options: dict[str, str] = field(default_factory=dict)
    params: dict[str, Param] = field(default_factory=dict)

    @property
    def timeout_s(self) -> float:
        """Default time limit of one run, in seconds."""
        return float(self.options.get("timeout", DEFAULT_TIMEOUT_S))

    @property
    def gpus(self) -> int:
        """CUDA devices the repro needs (0 for a CPU repro)."""
        if not self.gpu:
            return 0
        return int(self.options.get("gpus", self.ranks))

    @property
    def requires(self) -> tuple[str, ...]:
        """Modules the script imports besides torch."""
        value = self.options.get("requires", "")
        return tuple(m for m in value.split(",") if m)

    @property
    def flight_recorder(self) -> bool:
        """Whether the run records collectives and keeps each rank's Flight Recorder dump."""
        return self.options.get("fr") == "yes"

    @property
    def torchrun_args(self) -> tuple[str, ...]:
        """Extra torchrun options from the header."""
        value = self.options.get("torchrun_args", "")
        return tuple(a for a in value.split(",") if a)

    def source(self) -> str:
        """The script's text."""
        return self.script.read_text(encoding="utf-8")

    def param(self, key: str) -> Param | None:
        """The option ``key`` (``num_workers`` and ``num-workers`` are the same)."""
        return self.params.get(key.strip().lstrip("-").replace("_", "-"))

    def resolve_params(self, values: dict[str, str]) -> dict[str, str]:
        """Check ``values`` against the script's options; return them under their CLI names.

        Raises:
            BadParameterError: for an option the script does not have or a value it rejects.
        """
        out: dict[str, str] = {}
        for key, value in values.items():
            param = self.param(key)
            if param is None:
                known = ", ".join(sorted(self.params)) or "none"
                raise BadParameterError(
                    f"repro '{self.id}' has no parameter '{key}' (parameters: {known})"
                )
            problem = param.check(value)
            if problem is not None:
                raise BadParameterError(f"--set {key}={value}: {param.name} {problem}")
            out[param.name] = value
        return out


def parse_header(script: Path) -> Repro:
    """Read the ``crashlens-repro:`` header and the options of one script.

    Raises:
        ValueError: when the header is missing or malformed.
    """
    text = script.read_text(encoding="utf-8")
    match = _HEADER_RE.search(text)
    if match is None:
        raise ValueError(f"{script}: no 'crashlens-repro:' header line")
    fields: dict[str, str] = {}
    for token in match.group("body").split():
        key, sep, value = token.partition("=")
        if not sep:
            raise ValueError(f"{script}: bad header token {token!r} (expected key=value)")
        fields[key] = value
    missing = set(_CORE_KEYS) - fields.keys()
    if missing:
        raise ValueError(f"{script}: header lacks {sorted(missing)}")
    if fields["launcher"] not in _LAUNCHERS:
        raise ValueError(f"{script}: launcher must be one of {', '.join(_LAUNCHERS)}")
    if fields["gpu"] not in ("yes", "no"):
        raise ValueError(f"{script}: gpu must be yes or no")
    summary = text.split('"""', 2)[1].strip().splitlines()[0] if '"""' in text else ""
    return Repro(
        id=fields["id"],
        cls=fields["class"],
        ranks=int(fields["ranks"]),
        gpu=fields["gpu"] == "yes",
        launcher=fields["launcher"],
        script=script,
        summary=summary,
        options={k: v for k, v in fields.items() if k not in _CORE_KEYS},
        params=script_params(text),
    )


def _const(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and node.value is not None:
        return str(node.value)
    return None


def script_params(source: str) -> dict[str, Param]:
    """The ``--name`` options a script's argparse calls declare, keyed by name without dashes."""
    params: dict[str, Param] = {}
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
        ):
            continue
        flag = _const(node.args[0])
        if flag is None or not flag.startswith("--"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        type_node = kw.get("type")
        type_name = type_node.id if isinstance(type_node, ast.Name) else "str"
        choices: tuple[str, ...] | None = None
        choice_node = kw.get("choices")
        if isinstance(choice_node, (ast.List, ast.Tuple)):
            choices = tuple(c for c in (_const(e) for e in choice_node.elts) if c is not None)
        name = flag[2:]
        params[name] = Param(
            name=name,
            default=_const(kw.get("default")),
            type=type_name,
            choices=choices,
            help=_const(kw.get("help")) or "",
        )
    return params


def discover(scripts_dir: Path = SCRIPTS_DIR) -> list[Repro]:
    """Every repro script with a header, sorted by id (``_name.py`` files are helpers the
    sandbox copies beside a script that imports them, not repros)."""
    repros = [
        parse_header(p) for p in sorted(scripts_dir.glob("*.py")) if not p.name.startswith("_")
    ]
    return sorted(repros, key=lambda r: r.id)


def get(repro_id: str, scripts_dir: Path = SCRIPTS_DIR) -> Repro:
    """The repro called ``repro_id``.

    Raises:
        UnknownReproError: when there is none.
    """
    repros = {r.id: r for r in discover(scripts_dir)}
    if repro_id not in repros:
        raise UnknownReproError(
            f"no repro '{repro_id}' (known: {', '.join(sorted(repros))}; "
            "see `crashlens repro list`)"
        )
    return repros[repro_id]


def rule_repros(rules: RuleSet | None = None) -> dict[str, str]:
    """``{rule id: repro id}`` for every rule with a ``repro:`` field."""
    if rules is None:
        from crashlens.rulebase import load_rules

        rules = load_rules()
    return {r.id: r.repro for r in rules.rules if r.repro}


def for_rule(rule: Rule) -> Repro | None:
    """The repro a rule names in its ``repro:`` field (None when it names none).

    Raises:
        UnknownReproError: when the rule names a repro that does not exist.
    """
    return get(rule.repro) if rule.repro else None


def for_report(report: Report) -> Repro | None:
    """The repro of the report's top cause, or None (no cause, or its rule names no repro)."""
    top = report.primary
    return None if top is None else for_rule(top.match.rule)
