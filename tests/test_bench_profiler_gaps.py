"""bench/scripts/profiler.py's idle-gap summary on a hand-built Chrome trace: what it says about where a step's GPU
sat idle must follow from the kernels' intervals, overlaps and stragglers included."""

from bench.scripts.profiler import gap_summary, idle_gaps


def test_idle_gaps_merge_overlapping_kernels_and_clip_to_the_step():
    kernels = [(15.0, 30.0), (10.0, 20.0), (50.0, 55.0), (95.0, 120.0)]
    assert idle_gaps(kernels, 0.0, 100.0) == [(0.0, 10.0), (30.0, 50.0), (55.0, 95.0)]
    assert idle_gaps([], 0.0, 5.0) == [(0.0, 5.0)]
    assert idle_gaps([(0.0, 5.0)], 0.0, 5.0) == []


def _x(name, cat, ts, dur):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur}


def test_gap_summary_splits_idle_time_by_gap_size_and_names_the_host_op_under_the_longest():
    trace = {
        "traceEvents": [
            _x("ProfilerStep#3", "user_annotation", 0, 20_000),
            _x("ProfilerStep#3", "gpu_user_annotation", 0, 20_000),  # the GPU-side copy of the step: not a kernel
            _x("k1", "kernel", 0, 1_000),
            _x("k2", "kernel", 1_005, 995),  # 5 us gap
            _x("k3", "kernel", 2_080, 920),  # 80 us gap
            _x("k4", "kernel", 15_000, 5_000),  # 12 ms gap, under the sync below
            _x("cudaStreamSynchronize", "cpu_op", 2_900, 12_000),
            _x("aten::nonzero", "cpu_op", 2_800, 12_500),
        ]
    }
    (step,) = gap_summary(trace, longest=1)
    assert step["wall_ms"] == 20.0
    assert step["idle_ms"] == round((5 + 80 + 12_000) / 1e3, 2)
    assert step["gpu_busy_ms"] == round(20.0 - step["idle_ms"], 2)
    assert step["gaps"] == {"<10us": [1, 0.01], "<100us": [1, 0.08], ">=10000us": [1, 12.0]}
    assert step["longest"] == [{"at_ms": 3.0, "idle_ms": 12.0, "host": ["cudaStreamSynchronize", "aten::nonzero"]}]
