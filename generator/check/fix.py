"""`--fix`: apply the findings' patches to a copy of the config until no patchable finding is left."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Change:
    """One key --fix changed, with the finding that changed it last."""

    key: str
    """Dotted key path, e.g. "fsdp_config.fsdp_reshard_after_forward"."""
    old: Any
    """The value before, or DELETE when the key was added."""
    new: Any
    """The value after, or DELETE when the key was removed."""
    why: str
    """The fix of the finding that made the change, as its line printed it."""

    def line(self) -> str:
        if self.new is DELETE:
            what = f"removed (was {self.old!r})"
        elif self.old is DELETE:
            what = f"added {self.new!r}"
        else:
            what = f"{self.old!r} -> {self.new!r}"
        return f"{self.key}: {what}; {self.why}"


def _flat(cfg: dict, prefix: tuple = ()) -> dict[tuple, Any]:
    out: dict[tuple, Any] = {}
    for k, v in cfg.items():
        if isinstance(v, dict) and v:
            out |= _flat(v, (*prefix, k))
        else:
            out[(*prefix, k)] = v
    return out


def changes(before: dict, after: dict, applied: list[Finding]) -> list[Change]:
    """Every key whose value differs between `before` and `after`, in file order, each with the last finding whose
    patch touched it (a rename is two lines: the old key removed and the new one added, both for the same reason)."""
    old, new = _flat(before), _flat(after)
    out = []
    for path in [*old, *(p for p in new if p not in old)]:
        a, b = old.get(path, DELETE), new.get(path, DELETE)
        if a is not DELETE and b is not DELETE and a == b and type(a) is type(b):
            continue
        touched = [f for f in applied if any(path[: len(p)] == p or p[: len(path)] == path for p, _ in f.patch)]
        last = touched[-1] if touched else None
        # a bare "remove it." says what, not why: the problem says why
        why = "no finding named it" if last is None else last.problem if last.fix == "remove it." else last.fix
        out.append(Change(".".join(map(str, path)), a, b, why))
    return out


def dump_config(cfg: dict) -> str:
    """YAML text; safe_dump quotes 'NO', 'no' and digit strings, which is what accelerate needs."""
    return yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False, allow_unicode=True)
