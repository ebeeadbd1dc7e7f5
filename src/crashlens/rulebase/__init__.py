"""The rule base: YAML rules that map log evidence onto root-cause classes."""

from crashlens.rulebase.load import default_rules_dir, load_rules, load_version_matrix
from crashlens.ruletypes import (
    Condition,
    Detector,
    FactTest,
    Rule,
    RuleSet,
    VersionEntry,
    VersionSpec,
)

__all__ = [
    "Condition",
    "Detector",
    "FactTest",
    "Rule",
    "RuleSet",
    "VersionEntry",
    "VersionSpec",
    "default_rules_dir",
    "load_rules",
    "load_version_matrix",
]
