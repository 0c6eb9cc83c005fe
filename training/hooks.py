"""The test-only environment hooks, read in this one place. Real runs never set them; tests/test_train_*.py do.

TRAIN_TEST_STEP_DELAY=S       sleep S seconds after every step (makes signal timing deterministic)
TRAIN_TEST_SLOW_SAVE=STEP:S   sleep S seconds inside the temporary checkpoint directory of STEP (kill-during-save)
TRAIN_TEST_FREE_BYTES=N       pretend the output filesystem has N bytes free
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


def free_bytes() -> int | None:
    """The pretended free space, or None to ask the filesystem."""
    return int(os.environ.get("TRAIN_TEST_FREE_BYTES", 0)) or None
