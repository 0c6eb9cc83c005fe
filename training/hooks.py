"""The test-only environment hooks, read in this one place. Real runs never set them; tests/test_train_*.py do.

TRAIN_TEST_STEP_DELAY=S       sleep S seconds after every step (makes signal timing deterministic)
TRAIN_TEST_SLOW_SAVE=STEP:S   sleep S seconds inside the temporary checkpoint directory of STEP (kill-during-save)
TRAIN_TEST_FREE_BYTES=N       pretend the output filesystem has N bytes free
TRAIN_TEST_OOM=PHASE[:STEP]   raise torch.OutOfMemoryError on entering PHASE ("model load", "forward/backward",
                              "optimizer step", "checkpoint save", "export") at STEP (any step if omitted); the
                              checkpoint save raises after the save wrote its temporary directory
TRAIN_TEST_GPU=NAME:GB        pretend the fit check and the OOM message see this GPU (the run itself stays on CPU)
"""

from __future__ import annotations

import os
import time


def after_step() -> None:
    delay = os.environ.get("TRAIN_TEST_STEP_DELAY")
    if delay:
        time.sleep(float(delay))


def inside_save(step: int) -> None:
    hook = os.environ.get("TRAIN_TEST_SLOW_SAVE", "")
    if hook and int(hook.split(":")[0]) == step:
        time.sleep(float(hook.split(":")[1]))
    simulated_oom("checkpoint save", step)


def free_bytes() -> int | None:
    """The pretended free space, or None to ask the filesystem."""
    return int(os.environ.get("TRAIN_TEST_FREE_BYTES", 0)) or None


def simulated_oom(phase: str, step: int | None) -> None:
    """Raise the error a real CUDA out-of-memory raises, where TRAIN_TEST_OOM says."""
    hook = os.environ.get("TRAIN_TEST_OOM", "")
    if not hook:
        return
    name, _, at = hook.partition(":")
    if name == phase and (not at or step == int(at)):
        import torch

        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 1.00 GiB (TRAIN_TEST_OOM={hook})")


def pretend_gpu() -> tuple[str, float] | None:
    """(name, GB) of the GPU TRAIN_TEST_GPU pretends, or None."""
    hook = os.environ.get("TRAIN_TEST_GPU", "")
    if not hook:
        return None
    name, _, gb = hook.rpartition(":")
    return name, float(gb)
