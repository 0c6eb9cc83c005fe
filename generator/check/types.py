"""What a lint rule sees (CheckContext) and what it reports (Finding)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from generator.estimate.types import Workload
from generator.model.types import ModelSpec
from generator.topology.types import Topology

SEVERITIES = ("error", "warning", "info")
DELETE = object()
"""Patch value meaning "remove this key"."""


@dataclass(frozen=True)
class Finding:
    severity: str
    """error (launch fails or the job is wrong), warning (works, but not as the user thinks), info (a note)."""
    key: str
    """Dotted key path the finding is about, e.g. "fsdp_config.fsdp_version"."""
    problem: str
    """What is wrong, one sentence."""
    fix: str
    """What to do about it, one sentence."""
    rule: str
    """Name of the rule that produced it."""
    patch: tuple[tuple[tuple[str, ...], Any], ...] = ()
    """Edits `--fix` applies: (key path, new value or DELETE). Empty when the fix needs a human."""

    def line(self) -> str:
        return f"{self.severity:<7} {self.key}: {self.problem} Fix: {self.fix}"

    def as_dict(self) -> dict:
        return {
            "severity": self.severity,
            "key": self.key,
            "problem": self.problem,
            "fix": self.fix,
            "rule": self.rule,
            "fixable": bool(self.patch),
        }


@dataclass(frozen=True)
class CheckContext:
    topo: Topology | None = None
    """This machine's wiring; None skips the topology rules."""
    model: ModelSpec | None = None
    """The model to train; None skips the memory rule."""
    workload: Workload = field(default_factory=Workload)
    """Sequence length, micro-batch and method used for the memory estimate."""
    duplicate_keys: tuple[str, ...] = ()
    """Keys the YAML file held twice (YAML keeps the last silently)."""
    exclude: tuple[int, ...] = ()
    """GPU ids (--exclude) a suggested gpu_ids list must avoid, e.g. busy ones."""
    # -- the training script (issue 18) --
    written_for: Workload | None = None
    """The workload and script the generator planned this config for (read from its header); None for other configs.
    `workload` is the same job under the script being checked (--script, default custom)."""
    # -- end script --


def exit_code(findings: list[Finding]) -> int:
    """0 clean (info only), 1 warnings only, 2 any error."""
    severities = {f.severity for f in findings}
    return 2 if "error" in severities else 1 if "warning" in severities else 0
