"""What is alive at a training step's peak, by the Python line that allocated it: torch's CUDA memory history over one
optimizer step of any script, run unchanged, reduced on the GPU machine to a small JSON (the raw snapshot is too large
to bring back). For the bench's open memory misses (REPORT.md): the dense float8 rows' peak holds about 45 KB a token
and layer that no count of saved tensors finds.

Installed by `bench/scripts/profile_hook` when BENCH_MEMHIST=<dir> is set; BENCH_MEMHIST_STEP=A (default 2) records
from after optimizer step A to after step A+1, so compiled layers have been compiled and the optimizer's states exist.
Rank 0 writes <dir>/memhist.json:
    window        bytes allocated when recording began (weights, optimizer states, grads kept across steps), the peak
                  inside the window, torch's own max_memory_allocated, and the bytes freed in the window that were
                  allocated before it
    at_peak       the blocks allocated inside the window and alive at its peak, grouped three ways: by the innermost
                  frame (file:line function), by the innermost frame in model or library code (transformers, peft,
                  torchao, liger, training/, inductor's generated graphs) and by file; the largest groups first
    segments      the caching allocator's segments at the window's end (what `reserved` counts): by size class, the
                  bytes allocated and the holes (inactive blocks) inside them, the largest segments with their largest
                  hole, and the segments cudaMalloc'd inside the window grouped by the library frame whose request
                  grew the pool (for the QLoRA rows whose reserved memory does not follow the loss's blocks)
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

LIBRARY_MARKERS = ("transformers/", "peft/", "torchao/", "liger_kernel/", "/training/", "train.py",
                   "torchinductor", "torch/_inductor", "torch/nn/functional", "torch/utils/checkpoint")  # fmt: skip
TOP = 40


def _frame(f: dict) -> str:
    name = f.get("filename", "?")
    short = "/".join(name.split("/")[-3:])
    return f"{short}:{f.get('line', 0)} {f.get('name', '?')}"


def _keys(frames: list[dict]) -> tuple[str, str, str]:
    inner = _frame(frames[0]) if frames else "(no python frame)"
    lib = next((f for f in frames if any(m in f.get("filename", "") for m in LIBRARY_MARKERS)), None)
    lib_key = _frame(lib) if lib else inner
    file_key = "/".join(lib["filename"].split("/")[-3:]) if lib else inner.split(":")[0]
    return inner, lib_key, file_key


def replay(trace: list[dict], base: int) -> dict:
    """Replays one device's allocator trace: the peak of (base + allocated in the window), and the window's own blocks
    alive at it. A free of a block the window never saw allocated lowers the base (it was allocated before)."""
    alive: dict[int, dict] = {}
    current, freed_before = base, 0
    peak, peak_alive = base, {}
    for ev in trace:
        action, addr, size = ev.get("action"), ev.get("addr"), int(ev.get("size", 0))
        if action == "alloc":
            alive[addr] = ev
            current += size
            if current > peak:
                peak, peak_alive = current, dict(alive)
        elif action in ("free_requested", "free_completed"):
            if addr in alive:
                current -= int(alive.pop(addr).get("size", 0))
            elif action == "free_requested":
                current -= size
                freed_before += size
    groups: list[dict[str, list[int]]] = [defaultdict(lambda: [0, 0]) for _ in range(3)]
    for ev in peak_alive.values():
        for g, key in zip(groups, _keys(ev.get("frames") or []), strict=True):
            g[key][0] += int(ev.get("size", 0))
            g[key][1] += 1

    def top(g: dict[str, list[int]]) -> list[dict]:
        rows = sorted(g.items(), key=lambda kv: -kv[1][0])[:TOP]
        return [{"where": k, "mb": round(b / 2**20, 1), "blocks": n} for k, (b, n) in rows]

    at_peak = sum(int(e.get("size", 0)) for e in peak_alive.values())
    window = {"base_mb": base, "peak_mb": peak, "freed_allocated_before_mb": freed_before,
              "window_blocks_at_peak_mb": at_peak}  # fmt: skip
    return {
        "window": {k: round(v / 2**20, 1) for k, v in window.items()},
        "at_peak": {"by_frame": top(groups[0]), "by_library_frame": top(groups[1]), "by_file": top(groups[2])},
    }


SIZE_CLASSES = ((2 << 20, "<=2 MB (small pool)"), (20 << 20, "2-20 MB"), (200 << 20, "20-200 MB"),
                (2 << 30, "200 MB-2 GB"), (1 << 62, ">2 GB"))  # fmt: skip


def _mb(b: int) -> float:
    return round(b / 2**20, 1)


def segments(segs: list[dict], trace: list[dict]) -> dict:
    """The reserved pool at the window's end by size class (bytes, allocated, holes), its largest segments, and which
    requests cudaMalloc'd new segments inside the window (the trace's segment_alloc events)."""
    classes = {name: [0, 0, 0, 0, 0] for _, name in SIZE_CLASSES}  # segments, total, allocated, holes, largest hole
    largest = []
    for seg in segs:
        total, alloc = int(seg.get("total_size", 0)), int(seg.get("allocated_size", 0))
        holes = [int(b.get("size", 0)) for b in seg.get("blocks", []) if b.get("state") == "inactive"]
        name = next(n for limit, n in SIZE_CLASSES if total <= limit)
        c = classes[name]
        c[0], c[1], c[2], c[3] = c[0] + 1, c[1] + total, c[2] + alloc, c[3] + sum(holes)
        c[4] = max(c[4], max(holes, default=0))
        largest.append((total, alloc, max(holes, default=0), _keys(seg.get("frames") or [])[1]))
    grown: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    released = [0, 0]
    for ev in trace:
        if ev.get("action") == "segment_alloc":
            g = grown[_keys(ev.get("frames") or [])[1]]
            g[0], g[1] = g[0] + int(ev.get("size", 0)), g[1] + 1
        elif ev.get("action") == "segment_free":
            released[0], released[1] = released[0] + int(ev.get("size", 0)), released[1] + 1
    return {
        "by_size": [
            {
                "class": n,
                "segments": c[0],
                "mb": _mb(c[1]),
                "allocated_mb": _mb(c[2]),
                "holes_mb": _mb(c[3]),
                "largest_hole_mb": _mb(c[4]),
            }
            for n, c in classes.items()
            if c[0]
        ],
        "largest": [
            {"mb": _mb(t), "allocated_mb": _mb(a), "largest_hole_mb": _mb(h), "created_by": w}
            for t, a, h, w in sorted(largest, key=lambda x: -x[0])[:TOP]
        ],
        "grown_in_window": [
            {"where": k, "mb": _mb(b), "segments": n}
            for k, (b, n) in sorted(grown.items(), key=lambda kv: -kv[1][0])[:TOP]
        ],
        "released_in_window": {"mb": _mb(released[0]), "segments": released[1]},
    }


def install() -> None:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    if not torch.cuda.is_available():
        return
    out = Path(os.environ["BENCH_MEMHIST"])
    first = int(os.environ.get("BENCH_MEMHIST_STEP", "2"))
    rank0 = int(os.environ.get("RANK", "0")) == 0
    state = {"n": 0, "base": 0}

    def hook(optimizer, args, kwargs) -> None:
        state["n"] += 1
        if state["n"] == first:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            state["base"] = torch.cuda.memory_allocated()
            torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
        elif state["n"] == first + 1:
            torch.cuda.synchronize()
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            if rank0:
                dev = torch.cuda.current_device()
                result = replay(snap["device_traces"][dev], state["base"])
                result["window"]["torch_max_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
                result["window"]["events"] = len(snap["device_traces"][dev])
                result["window"]["torch_max_reserved_mb"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
                result["window"]["reserved_mb"] = round(torch.cuda.memory_reserved() / 2**20, 1)
                segs = [s for s in snap["segments"] if s.get("device") == dev]
                result["segments"] = segments(segs, snap["device_traces"][dev])
                out.mkdir(parents=True, exist_ok=True)
                (out / "memhist.json").write_text(json.dumps(result, indent=1))

    register_optimizer_step_post_hook(hook)
