"""A probe of a training script's teardown, loaded into every Python process of a launch through PYTHONPATH
(sitecustomize). In the workers of the named script it records two things:
- when the process group is about to be destroyed (Accelerator.end_training), how many DDP wrappers are still alive.
  One alive there is the group's last owner and destroys it holding the GIL while a gloo worker waits for the GIL: a
  rank hung at exit under CPU load in CI (pytorch/pytorch#56297). The scripts drop the wrapper first;
- once end_training has returned, how many of gloo's threads are still running. Any is a group that outlived
  destroy_process_group (training/process_group.py says what held it) and ends in interpreter teardown, where a rank
  aborted after a complete run in CI."""

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
        out = end_training(self)
        gc.collect()
        tasks = Path("/proc/self/task")
        names = [(t / "comm").read_text().strip() for t in tasks.iterdir()] if tasks.is_dir() else []
        gloo = sum(name.startswith(("pt_gloo", "gloo_")) for name in names)
        Path(os.environ["TEARDOWN_PROBE_DIR"], "rank" + os.environ["RANK"]).write_text(f"{alive} {gloo}")
        return out

    accelerate.Accelerator.end_training = probed
"""


def probe_env(directory: Path, script: str) -> dict[str, str]:
    """Environment variables that load the probe into a launch of `script` (a path suffix), writing under
    `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "TEARDOWN_PROBE_DIR": str(directory), "TEARDOWN_PROBE_SCRIPT": script}


def alive_at_end_training(directory: Path) -> dict[str, dict[str, int]]:
    """{"rank0": {"ddp": 0, "gloo_threads": 0}, ...}: per rank, the DDP wrappers alive when its process group was
    about to be destroyed, and gloo's threads still running once it was."""
    out = {}
    for f in directory.glob("rank*"):
        ddp, gloo = f.read_text().split()
        out[f.name] = {"ddp": int(ddp), "gloo_threads": int(gloo)}
    return out


CLEAN = {"ddp": 0, "gloo_threads": 0}
