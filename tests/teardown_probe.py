"""A probe for the order of a training script's teardown, loaded into every Python process of a launch through
PYTHONPATH (sitecustomize). In the workers of the named script it records, when the process group is about to be
destroyed (Accelerator.end_training), how many DDP wrappers are still alive. One alive there is the group's last
owner and destroys it holding the GIL while a gloo worker waits for the GIL: a rank hung at exit under CPU load in CI
(pytorch/pytorch#56297). train.py and bench/scripts/plain_loop.py drop the wrapper first."""

from __future__ import annotations

import os
from pathlib import Path

SITECUSTOMIZE = """
import os, sys
if sys.argv and sys.argv[0].endswith(os.environ.get("TEARDOWN_PROBE_SCRIPT", "?")):
    import gc
    from pathlib import Path

    import accelerate, torch

    end_training = accelerate.Accelerator.end_training

    def probed(self):
        gc.collect()
        alive = sum(isinstance(o, torch.nn.parallel.DistributedDataParallel) for o in gc.get_objects())
        Path(os.environ["TEARDOWN_PROBE_DIR"], "rank" + os.environ["RANK"]).write_text(str(alive))
        return end_training(self)

    accelerate.Accelerator.end_training = probed
"""


def probe_env(directory: Path, script: str) -> dict[str, str]:
    """Environment variables that load the probe into a launch of `script` (a path suffix), writing under
    `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "TEARDOWN_PROBE_DIR": str(directory), "TEARDOWN_PROBE_SCRIPT": script}


def alive_at_end_training(directory: Path) -> dict[str, str]:
    """{"rank0": "0", ...}: DDP wrappers alive in each rank when its process group was about to be destroyed."""
    return {f.name: f.read_text() for f in directory.glob("rank*")}
