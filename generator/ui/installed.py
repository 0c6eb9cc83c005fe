"""Which optional kernel packages import where the job runs: the one probe `plan` and the wizard share.

Liger and float8 (torchao) are levers the planner may choose only if train.py can use them, and the job runs where
the planner runs (its topology is this machine's). `importlib.util.find_spec` finds a package without importing it,
so the planning path stays free of torch.
"""

from __future__ import annotations

import importlib.util


def installed_fields() -> dict[str, bool]:
    """PlanRequest's liger_installed and fp8_installed for this machine."""
    return {
        "liger_installed": importlib.util.find_spec("liger_kernel") is not None,
        "fp8_installed": importlib.util.find_spec("torchao") is not None,
    }
