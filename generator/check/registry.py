"""Every lint rule, in report order, and the loop that runs them."""

from __future__ import annotations

from generator.check import (
    rules_deepspeed,
    rules_fsdp,
    rules_gpus,
    rules_memory,
    rules_model,
    rules_multinode,
    rules_parallel,
    rules_schema,
    rules_sections,
    rules_sharding,
    rules_topology,
)
from generator.check.types import SEVERITIES, CheckContext, Finding

RULES = [
    *rules_schema.RULES,
    *rules_sections.RULES,
    *rules_gpus.RULES,
    *rules_fsdp.RULES,
    *rules_deepspeed.RULES,
    *rules_multinode.RULES,
    *rules_topology.RULES,
    *rules_sharding.RULES,
    *rules_model.RULES,
    *rules_memory.RULES,
    *rules_parallel.RULES,
]


def run_rules(cfg: dict, ctx: CheckContext | None = None, rules=None) -> list[Finding]:
    """All findings for `cfg`, errors first, in rule order within a severity."""
    ctx = ctx or CheckContext()
    findings: list[Finding] = []
    for rule in rules or RULES:
        findings.extend(rule(cfg, ctx))
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
