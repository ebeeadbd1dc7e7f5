"""The user's configuration: ``crashlens.yaml``, or ``[tool.crashlens]`` in ``pyproject.toml``.

Found like ruff's and pytest's: ``--config FILE`` if given; else, walking up from the working
directory (to the filesystem root, or the directory holding ``.git``), the nearest directory
with a ``crashlens.yaml`` or a ``pyproject.toml`` that has a ``[tool.crashlens]`` table (the
YAML file first when a directory has both); else ``$XDG_CONFIG_HOME/crashlens/crashlens.yaml``
(default ``~/.config/crashlens/``). The first file found is used, alone. Format::

    rules: [./team-rules, /shared/crashlens-rules]   # extra rule directories (added, by id)
    disable: [user-code-error]                       # rule ids not to use
    skew: {node-02: 2.5, node-03: -1}                # seconds a host's clock runs ahead

The same keys make the ``[tool.crashlens]`` table of ``pyproject.toml``. Relative rule
directories are relative to the file's own directory. The YAML file is parsed with the same
safe loader as rules (no aliases, no tags, size and depth limits); every error is one line
naming the file (and, for YAML, the line).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from crashlens.errors import CrashlensError
from crashlens.rulebase import default_rules_dir
from crashlens.rulebase.load import _load_yaml, _strings
from crashlens.ruletypes import RuleSet

CONFIG_NAME = "crashlens.yaml"
PYPROJECT = "pyproject.toml"
#: Larger pyproject.toml files are not read for a ``[tool.crashlens]`` table.
MAX_PYPROJECT_BYTES = 1 << 20
_KEYS = {"rules", "disable", "skew"}


class ConfigError(CrashlensError):
    """An invalid ``crashlens.yaml``; names the file and line."""


@dataclass(frozen=True, slots=True)
class Config:
    """What ``crashlens.yaml`` says; empty when there is no file."""

    rules: tuple[Path, ...] = ()
    disable: tuple[str, ...] = ()
    skew: dict[str, float] = field(default_factory=dict)
    path: Path | None = None

    def apply(self, rules: RuleSet) -> RuleSet:
        """``rules`` without the disabled ids (unknown ids are ignored)."""
        if not self.disable:
            return rules
        off = set(self.disable)
        kept = tuple(r for r in rules.rules if r.id not in off)
        return replace(rules, rules=kept)

    def unknown_disabled(self, rule_dirs: Sequence[Path] = ()) -> list[str]:
        """The ``disable:`` ids that name no rule (bundled, in the config's or ``rule_dirs``):
        a typo or a renamed rule. A rule's id is its file's name."""
        if not self.disable:
            return []
        known: set[str] = set()
        for d in (default_rules_dir(), *self.rules, *rule_dirs):
            if Path(d).is_dir():
                known.update(p.stem for p in Path(d).rglob("*.yaml"))
        return [rule_id for rule_id in self.disable if rule_id not in known]


def user_config_path() -> Path:
    """The user-level config file (``$XDG_CONFIG_HOME/crashlens/crashlens.yaml``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "crashlens" / CONFIG_NAME


def config_paths(cwd: Path | None = None) -> list[Path]:
    """Where a config file is looked for, in order: ``crashlens.yaml`` and ``pyproject.toml``
    of the working directory and each parent up to the root or the one holding ``.git``,
    then the user-level file (a ``pyproject.toml`` counts only with a ``[tool.crashlens]``)."""
    here = (cwd or Path.cwd()).resolve()
    out: list[Path] = []
    for directory in (here, *here.parents):
        out += [directory / CONFIG_NAME, directory / PYPROJECT]
        if (directory / ".git").exists():
            break
    return [*out, user_config_path()]


def load_config(cwd: Path | None = None, path: Path | None = None) -> Config:
    """``path`` (``--config``) if given, else the first config found (see
    :func:`config_paths`), else an empty config.

    Raises:
        ConfigError: for an unreadable or invalid file (or a missing ``path``), naming the
            file and line.
    """
    if path is not None:
        if not path.is_file():
            raise ConfigError("config file not found", path=os.fspath(path))
        return read_config(path)
    for candidate in config_paths(cwd):
        if candidate.name == PYPROJECT:
            if candidate.is_file() and _tool_table(candidate) is not None:
                return read_config(candidate)
        elif candidate.is_file():
            return read_config(candidate)
    return Config()


def _tool_table(path: Path) -> dict[str, Any] | None:
    """The ``[tool.crashlens]`` table of a ``pyproject.toml`` (``None``: it has none).

    Raises:
        ConfigError: for a file that is not valid TOML or too large.
    """
    import tomllib  # only a pyproject.toml found walking up is read

    shown = os.fspath(path)
    try:
        if path.stat().st_size > MAX_PYPROJECT_BYTES:
            raise ConfigError("pyproject.toml is too large to read", path=shown)
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the file: {exc}", path=shown) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=shown) from None
    tool = data.get("tool")
    table = tool.get("crashlens") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError("[tool.crashlens] must be a table", path=shown)
    return table


def read_config(path: Path) -> Config:
    """Parse one config file: a ``crashlens.yaml``, or a ``pyproject.toml``'s
    ``[tool.crashlens]`` table.

    Raises:
        ConfigError: naming the file and line of the first problem.
    """
    shown = os.fspath(path)
    if path.name == PYPROJECT:
        data: Any = _tool_table(path)
        if data is None:
            raise ConfigError("no [tool.crashlens] table", path=shown)
        shown += " [tool.crashlens]"
    else:
        try:
            data = _load_yaml(path, "config file")
        except CrashlensError as exc:
            raise ConfigError(exc.message, path=exc.path, line=exc.line) from None
    if data is None:
        return Config(path=path)
    if not isinstance(data, dict):
        raise ConfigError("the config file must hold one mapping", path=shown, line=1)
    line = _line(data)
    unknown = set(data) - _KEYS - {"__line__"}
    if unknown:
        keys = ", ".join(sorted(map(str, unknown)))
        raise ConfigError(
            f"unknown key(s): {keys} (known: rules, disable, skew)", path=shown, line=line
        )
    try:
        dirs = _strings(data.get("rules"), "rules", shown, data)
        disable = _strings(data.get("disable"), "disable", shown, data)
    except CrashlensError as exc:
        raise ConfigError(exc.message, path=shown, line=exc.line) from None
    rule_dirs = []
    for d in dirs:
        p = Path(d).expanduser()
        p = p if p.is_absolute() else path.parent / p
        if not p.exists():
            raise ConfigError(f"rules directory not found: {d}", path=shown, line=line)
        rule_dirs.append(p)
    return Config(tuple(rule_dirs), disable, _skew(data.get("skew"), shown, data), path)


def _line(node: dict[str, Any]) -> int | None:
    value = node.get("__line__")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _skew(value: Any, shown: str, node: dict[str, Any]) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("'skew' must map host names to seconds", path=shown, line=_line(node))
    out: dict[str, float] = {}
    for host, seconds in value.items():
        if host == "__line__":
            continue
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
        ):
            raise ConfigError(
                f"skew: '{host}' must be a number of seconds", path=shown, line=_line(value)
            )
        out[str(host)] = float(seconds)
    return out
