"""The rule base: YAML rules that map log evidence onto root-cause classes."""

from crashlens.rulebase.load import default_rules_dir, load_rules
from crashlens.rulebase.schema import Condition, Detector, Rule, RuleSet

__all__ = ["Condition", "Detector", "Rule", "RuleSet", "default_rules_dir", "load_rules"]
