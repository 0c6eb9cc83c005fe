"""A torch.profiler window around a few optimizer steps of any training script, for the bench's open tokens/s misses
(REPORT.md): where a step's time goes (GPU kernels by name, the host's gaps between them, allocator and sync calls).

Installed by `bench/scripts/profile_hook` (train.py, a plain loop) or the trainer hook (TRL's script) when
BENCH_PROFILE=<dir> is set; BENCH_PROFILE_STEPS=A:B (default 2:5) starts
after optimizer step A, warms up for one step and records the steps after it up to B.
Steps are counted by a global optimizer step hook, so the script itself is unchanged. Rank 0 writes:
    <dir>/steps.json      per profiled step: wall (ms), GPU busy (union of kernel intervals, ms), kernel count,
                          and the host-side calls that stall or allocate (cudaMalloc/cudaFree/synchronize/memcpy)
    <dir>/cuda.txt        key_averages by device time (top 60)
    <dir>/cpu.txt         key_averages by host self time (top 40)
    <dir>/trace.json.gz   the Chrome trace (kept only under 60 MB)

    python bench/scripts/profiler.py DIR/trace.json.gz > DIR/gaps.json
prints, per profiled step of a saved trace, where the GPU sat idle: the gaps between its kernels by size (a
launch-bound step idles in thousands of gaps under 100 us, a step that waits on the host or a sync in a few long
ones) and the host op running in the middle of each of the longest gaps.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path

HOST_CALLS = ("cudaMalloc", "cudaFree", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync",
              "cudaEventSynchronize", "cudaLaunchKernel", "cuLaunchKernel", "aten::item", "aten::nonzero")  # fmt: skip


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total / 1e3


def _is_step(e) -> bool:
    return e.name.startswith("ProfilerStep")


def _is_device(e) -> bool:
    return "cuda" in str(getattr(e, "device_type", "")).lower()


def summarise(prof, out: Path) -> None:
    events = list(prof.events())
    steps = sorted((e for e in events if _is_step(e) and not _is_device(e)), key=lambda e: e.time_range.start)
    # the GPU-side copy of each ProfilerStep annotation spans its whole step: not a kernel
    kernels = [(e.time_range.start, e.time_range.end) for e in events if _is_device(e) and not _is_step(e)]
    rows = []
    for s in steps:
        a, b = s.time_range.start, s.time_range.end
        inside = [(max(x, a), min(y, b)) for x, y in kernels if y > a and x < b]
        host = {}
        for e in events:
            if not _is_device(e) and e.name in HOST_CALLS and a <= e.time_range.start < b:
                n, ms = host.get(e.name, (0, 0.0))
                host[e.name] = (n + 1, ms + (e.time_range.end - e.time_range.start) / 1e3)
        calls = {k: [n, round(ms, 2)] for k, (n, ms) in host.items()}
        rows.append(dict(step=s.name, wall_ms=round((b - a) / 1e3, 2), gpu_busy_ms=round(_union_ms(inside), 2),
                         kernels=len(inside), host_calls=calls))  # fmt: skip
    (out / "steps.json").write_text(json.dumps(rows, indent=1))
    avg = prof.key_averages()
    (out / "cuda.txt").write_text(avg.table(sort_by="self_cuda_time_total", row_limit=60, max_name_column_width=90))
    (out / "cpu.txt").write_text(avg.table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=90))
    raw = out / "trace.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(out / "trace.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    if (out / "trace.json.gz").stat().st_size > 60e6:
        (out / "trace.json.gz").unlink()


def _sync(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def install() -> None:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    out = Path(os.environ["BENCH_PROFILE"])
    first, last = (int(x) for x in os.environ.get("BENCH_PROFILE_STEPS", "2:5").split(":"))
    rank0 = int(os.environ.get("RANK", "0")) == 0
    state = {"n": 0, "prof": None}
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    def hook(optimizer, args, kwargs) -> None:
        state["n"] += 1
        n, prof = state["n"], state["prof"]
        if n == first:
            _sync(torch)
            sched = torch.profiler.schedule(wait=0, warmup=1, active=last - first - 1, repeat=1)
            state["prof"] = torch.profiler.profile(activities=activities, schedule=sched, record_shapes=False)
            state["prof"].__enter__()
        elif prof is not None and first < n <= last:
            _sync(torch)
            prof.step()
            if n == last:
                prof.__exit__(None, None, None)
                state["prof"] = None
                if rank0:
                    out.mkdir(parents=True, exist_ok=True)
                    summarise(prof, out)

    register_optimizer_step_post_hook(hook)


GAP_BINS_US = (10, 50, 100, 1000, 10_000)
"""Upper edges of the idle-gap size classes (microseconds); the last class holds everything longer."""


def idle_gaps(kernels: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The intervals of [start, end) that no kernel covers (times in the trace's microseconds)."""
    gaps, edge = [], start
    for a, b in sorted(kernels):
        if a > edge:
            gaps.append((edge, min(a, end)))
        edge = max(edge, b)
        if edge >= end:
            break
    if edge < end:
        gaps.append((edge, end))
    return [(a, b) for a, b in gaps if b > a]


def gap_summary(trace: dict, longest: int = 8) -> list[dict]:
    """Per ProfilerStep of a Chrome trace: wall, GPU-busy and idle ms, the idle split by gap size, and the host ops
    under the longest gaps."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    device = ("kernel", "gpu_memcpy", "gpu_memset")
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in device]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep") and e.get("cat") not in device
             and e.get("cat") != "gpu_user_annotation"]  # fmt: skip
    out = []
    for step in sorted(steps, key=lambda e: e["ts"]):
        a, b = step["ts"], step["ts"] + step["dur"]
        gaps = idle_gaps([k for k in kernels if k[1] > a and k[0] < b], a, b)
        classes: dict[str, list] = {}
        for x, y in gaps:
            edge = next((f"<{u}us" for u in GAP_BINS_US if y - x < u), f">={GAP_BINS_US[-1]}us")
            n, ms = classes.get(edge, (0, 0.0))
            classes[edge] = (n + 1, ms + (y - x) / 1e3)
        worst = sorted(gaps, key=lambda g: g[0] - g[1])[:longest]
        under = [
            dict(at_ms=round((x - a) / 1e3, 1), idle_ms=round((y - x) / 1e3, 2),
                 host=[o["name"] for o in ops if o["ts"] <= (x + y) / 2 <= o["ts"] + o["dur"]][:3])
            for x, y in sorted(worst)
        ]  # fmt: skip
        idle = sum(y - x for x, y in gaps) / 1e3
        out.append(dict(step=step["name"], wall_ms=round(step["dur"] / 1e3, 2), idle_ms=round(idle, 2),
                        gpu_busy_ms=round(step["dur"] / 1e3 - idle, 2),
                        gaps={k: [n, round(ms, 2)] for k, (n, ms) in classes.items()}, longest=under))  # fmt: skip
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python bench/scripts/profiler.py TRACE.json[.gz]")
    opener = gzip.open if sys.argv[1].endswith(".gz") else open
    with opener(sys.argv[1], "rt") as f:
        print(json.dumps(gap_summary(json.load(f)), indent=1))
