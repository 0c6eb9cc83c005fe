"""probe --compute --gemm-timing interleaved on a GPU: each GEMM timed right after a device copy as long as itself.
A large GEMM's interleaved time is within 0.7-1.5x its burst time (bench/results/gemm-in-step-h200-2026-12-04.json saw
the interleaved rate 1.0-1.2x the burst one over Mistral-7B's shapes: the burst's power-capped clock), and the file
says how its GEMMs were timed, which plan --compute-file reads without a launch-gap correction."""

from __future__ import annotations

import pytest

from tests.cuda_mark import needs_cuda

pytestmark = [pytest.mark.slow, needs_cuda]


def test_interleaved_gemm_rows_are_timed_between_copies_and_say_so():
    import torch

    from generator.probe.clock import Clock, gemm_time
    from generator.probe.compute import measure
    from generator.probe.compute_effort import QUICK

    a = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 14336, device="cuda", dtype=torch.bfloat16)
    burst, inter = Clock.for_device("cuda"), Clock.for_device("cuda")
    inter.gemm_timing = "interleaved"
    t_burst = gemm_time(burst, lambda: torch.mm(a, b))
    t_inter = gemm_time(inter, lambda: torch.mm(a, b))
    assert 0.7 < t_burst / t_inter < 1.5
    doc = measure("cuda", None, QUICK, gemm_timing="interleaved")
    assert doc["method"]["gemm_timing"] == "interleaved" and doc["gemm"]["bf16"]
