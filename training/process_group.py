"""What a script does before its process group starts, so that destroying the group at the end really ends it.

Two libraries bind the default group into function signatures when imported while a group exists:
torch.distributed.nn.functional (ten collectives with `group=group.WORLD`, imported by torch._dynamo, which DDP's
constructor imports) and deepspeed.comm.torch (`barrier`, `monitored_barrier`; Accelerate and transformers import
deepspeed during a run whenever it is installed). destroy_process_group cannot drop a default argument, so the group
outlives it, and with a gloo group its worker threads run on into interpreter teardown. There a rank can abort
("terminate called without an active exception", exit -6) after a complete run: seen in CI on a 2-process CPU launch
of the TRL bench script. Imported first, those signatures hold None and the group dies at destroy_process_group,
threads joined. tests/teardown_probe.py checks that no gloo thread is left after end_training.
"""

from __future__ import annotations

import importlib
import importlib.util


def import_group_binders() -> None:
    """Import the modules that would otherwise capture the default process group; call before the Accelerator (or
    anything else) starts the group. deepspeed only where installed: where it is not, nothing imports it later."""
    importlib.import_module("torch.distributed.nn.functional")
    if importlib.util.find_spec("deepspeed") is not None:
        importlib.import_module("deepspeed")
