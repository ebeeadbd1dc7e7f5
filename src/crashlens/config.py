"""The user's configuration file, ``crashlens.yaml``.

Looked up in the working directory first, then in ``$XDG_CONFIG_HOME/crashlens/`` (default
``~/.config/crashlens/``); the first file found is used, alone. Format::

    rules: [./team-rules, /shared/crashlens-rules]   # extra rule directories (added, by id)
    disable: [user-code-error]                       # rule ids not to use
    skew: {node-02: 2.5, node-03: -1}                # seconds a host's clock runs ahead

Relative rule directories are relative to the file's own directory. The file is parsed with
the same safe loader as rules (no aliases, no tags, size and depth limits); every error is one
line naming the file and line.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from crashlens.errors import CrashlensError
from crashlens.rulebase.load import _load_yaml, _strings
from crashlens.rulebase.schema import RuleSet

CONFIG_NAME = "crashlens.yaml"
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


def config_paths(cwd: Path | None = None) -> list[Path]:
    """Where a config file is looked for, in order."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [(cwd or Path.cwd()) / CONFIG_NAME, Path(base) / "crashlens" / CONFIG_NAME]


def load_config(cwd: Path | None = None) -> Config:
    """The first ``crashlens.yaml`` found (see :func:`config_paths`), or an empty config.

    Raises:
        ConfigError: for an unreadable or invalid file, naming the file and line.
    """
    for path in config_paths(cwd):
        if path.is_file():
            return read_config(path)
    return Config()


def read_config(path: Path) -> Config:
    """Parse one config file.

    Raises:
        ConfigError: naming the file and line of the first problem.
    """
    shown = os.fspath(path)
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
