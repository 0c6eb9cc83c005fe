"""`check`: lint an existing Accelerate config against the installed accelerate, this machine and the model.

Each rule is a pure function `(cfg, ctx) -> list[Finding]`; `run_rules` runs them all. Nothing here imports torch.
"""

from generator.check.loader import load_config, parse_config
from generator.check.registry import RULES, run_rules
from generator.check.types import CheckContext, Finding, exit_code

__all__ = ["RULES", "CheckContext", "Finding", "exit_code", "load_config", "parse_config", "run_rules"]
