"""`--fix`: apply the findings' patches to a copy of the config until no patchable finding is left."""

from __future__ import annotations

import copy

import yaml

from generator.check.registry import run_rules
from generator.check.types import DELETE, CheckContext, Finding

MAX_ROUNDS = 5  # a fix can expose another (fsdp_version: 2 -> FSDP1 keys now flagged); bounded, never loops


def apply_patch(cfg: dict, patch) -> dict:
    out = copy.deepcopy(cfg)
    for path, value in patch:
        node = out
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        if value is DELETE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return out


def fix_config(cfg: dict, ctx: CheckContext) -> tuple[dict, list[Finding]]:
    """Returns (fixed config, findings that were fixed, in the order fixed)."""
    fixed: list[Finding] = []
    current = cfg
    for _ in range(MAX_ROUNDS):
        todo = [f for f in run_rules(current, ctx) if f.patch]
        if not todo:
            break
        nxt = current
        for finding in todo:
            nxt = apply_patch(nxt, finding.patch)
        if nxt == current:
            break
        fixed.extend(todo)
        current = nxt
    return current, fixed


def dump_config(cfg: dict) -> str:
    """YAML text; safe_dump quotes 'NO', 'no' and digit strings, which is what accelerate needs."""
    return yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False, allow_unicode=True)
