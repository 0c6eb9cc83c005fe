"""Tensor / context parallel launches (accelerate `parallelism_config` with tp_size or cp_size > 1).

train.py does not run them yet: its data loader gives every rank its own sequences and its loss scaling multiplies
by the world size, both wrong when a TP or CP group shares one sequence; and under CP the labels must be shifted
before the sequence is split. Until that is built and tested on GPUs it stops before loading anything, in one line,
instead of training something else than the plan priced. The sizes come from the launcher's environment
(accelerate utils/launch.py exports PARALLELISM_CONFIG_TP_SIZE / _CP_SIZE / _SP_SIZE).
"""

from __future__ import annotations

import os


def model_parallel_sizes(env: dict[str, str] | None = None) -> dict[str, int]:
    """tp, cp and sp sizes of this launch (1 each when the config has no parallelism_config)."""
    env = os.environ if env is None else env
    if env.get("ACCELERATE_USE_PARALLELISM_CONFIG", "").lower() != "true":
        return {"tp": 1, "cp": 1, "sp": 1}
    return {k: int(env.get(f"PARALLELISM_CONFIG_{k.upper()}_SIZE", "1") or 1) for k in ("tp", "cp", "sp")}


def unsupported_reason(env: dict[str, str] | None = None) -> str | None:
    """Why train.py cannot run this launch's layout (None when it is data parallel only)."""
    sizes = {k: v for k, v in model_parallel_sizes(env).items() if v > 1}
    if not sizes:
        return None
    what = ", ".join(f"{k}_size {v}" for k, v in sizes.items())
    return (
        f"the config asks for {what}: train.py does not run tensor/context/sequence parallel yet (a TP or CP group "
        "shares one sequence, which its data split and loss scaling do not handle); launch your own script "
        "(tp_plan='auto' at load, accelerator.maybe_context_parallel around forward and backward) or plan without it"
    )
