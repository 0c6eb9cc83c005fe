"""The mark of a test that needs a CUDA GPU: skipped on CI's CPU machine, run by bench/gpu_tests.sh on the device
(which finds such files by the name `needs_cuda`)."""

from __future__ import annotations

import pytest


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
