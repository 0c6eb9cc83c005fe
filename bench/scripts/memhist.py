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
                out.mkdir(parents=True, exist_ok=True)
                (out / "memhist.json").write_text(json.dumps(result, indent=1))

    register_optimizer_step_post_hook(hook)
