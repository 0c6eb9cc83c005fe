"""The probe's host rows: interleaved rounds over four depths, fitted by least squares (compute_host.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from generator.probe import compute_host  # noqa: E402
from generator.probe.clock import Clock  # noqa: E402


def test_every_round_times_each_depth_once_and_the_order_rotates():
    """A drift in the host's speed must land on every depth alike: no depth is timed in one block."""
    calls: list[int] = []
    fns = [lambda i=i: calls.append(i) for i in range(4)]
    times = compute_host._interleaved(Clock("cpu"), fns, rounds=4, burst=2)
    assert [len(t) for t in times] == [4, 4, 4, 4]  # the first call of each visit is not kept
    timed = calls[3 * 4 :: 2]  # after three warm-up calls each; each visit runs its fn twice
    assert calls[3 * 4 :] == [i for i in calls[3 * 4 :: 2] for _ in range(2)]
    rounds = [timed[i : i + 4] for i in range(0, 16, 4)]
    assert all(sorted(r) == [0, 1, 2, 3] for r in rounds)
    assert [r[0] for r in rounds] == [0, 1, 2, 3]


def test_the_fit_recovers_a_layer_cost_from_noisy_depths():
    slope, intercept = compute_host._line((2, 4, 6, 8), [0.012, 0.0205, 0.0295, 0.038])
    assert slope == pytest.approx(0.00435, rel=1e-3)
    assert intercept == pytest.approx(0.0033, abs=2e-4)


def test_the_real_layer_row_on_cpu():
    """transformers' own tiny Mistral at four depths: a row the compute table reads, with the host's spread."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from generator.estimate.host_time import host_tables

    row = compute_host.hf_row(Clock("cpu"), "lora", compiled=False, rounds=3)
    assert row["depths"] == list(compute_host.DEPTHS) and row["rounds"] == 3
    # timings on a shared CI core are noise: the slopes' order is not asserted, only that the row is well formed
    # and that the table reads back exactly what the row says (a negative slope clips to zero, never goes below)
    for key in ("fwd_ms_per_layer", "fwdbwd_ms_per_layer", "step_ms", "min_fwdbwd_ms_per_layer", "spread_pct"):
        assert row[key] >= 0, key
    host, host_step = host_tables([row])
    fwd, bwd = host[("lora", False, False)]
    assert fwd == pytest.approx(row["fwd_ms_per_layer"] / 1e3)
    assert bwd == pytest.approx(max(row["fwdbwd_ms_per_layer"] - row["fwd_ms_per_layer"], 0.0) / 1e3)
    assert ("lora", False, False) in host_step
