"""One rank of a probe run: joins the process group, then for each subset in turn (all ranks wait between subsets,
so no two subsets share the wire) times each collective at each size and sends the slowest rank's times to the parent.

Runs in a child process started by runner.py; `plan` is a plain dict so it pickles across spawn."""

from __future__ import annotations

import time
from datetime import timedelta


def _ops(dist, collective: str, numel: int, n: int, device, dtype, group):
    import torch

    if collective == "all_reduce":
        buf = torch.ones(numel, device=device, dtype=dtype)
        return lambda: dist.all_reduce(buf, group=group)
    big = torch.ones(numel, device=device, dtype=dtype)
    small = torch.ones(numel // n, device=device, dtype=dtype)
    if collective == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(big, small, group=group)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return lambda: scatter(small, big, group=group)


def _time(op, dist, group, cuda: bool, warmup: int, repeats: int, inner: int) -> list[float]:
    """Seconds per collective for each repeat (each repeat averages `inner` back-to-back calls)."""
    import torch

    for _ in range(warmup):
        op()
    if cuda:
        torch.cuda.synchronize()
        pairs = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                op()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) / 1e3 / inner for s, e in pairs]
    times = []
    for _ in range(repeats):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(inner):
            op()
        times.append((time.perf_counter() - t0) / inner)
    return times


def run_rank(rank: int, plan: dict, queue) -> None:
    import torch
    import torch.distributed as dist

    cuda = plan["device"] == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if cuda else torch.float32
    elem = torch.empty((), dtype=dtype).element_size()
    dist.init_process_group(
        plan["backend"],
        init_method=f"tcp://127.0.0.1:{plan['port']}",
        rank=rank,
        world_size=plan["world"],
        timeout=timedelta(seconds=plan["op_timeout_s"]),
    )
    try:
        for sub in plan["subsets"]:
            ranks = sub["ranks"]
            group = dist.new_group(ranks) if len(ranks) < plan["world"] else dist.group.WORLD
            if rank in ranks:
                n = len(ranks)
                for collective in plan["collectives"]:
                    for size in plan["sizes"]:
                        numel = max(n, size // elem // n * n)
                        op = _ops(dist, collective, numel, n, device, dtype, group)
                        inner = max(1, min(plan["max_inner"], plan["inner_bytes"] // size))
                        times = torch.tensor(_time(op, dist, group, cuda, plan["warmup"], plan["repeats"], inner))
                        times = times.to(device)
                        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=group)
                        if rank == ranks[0]:
                            queue.put(("m", sub["key"], collective, numel * elem, n, times.cpu().tolist()))
                        del op
                if cuda:
                    torch.cuda.empty_cache()
            if group is not dist.group.WORLD:
                dist.destroy_process_group(group)  # free this subset's communicator before the next one
            dist.barrier(device_ids=[rank]) if cuda else dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        queue.put(("done", plan["world"]))
