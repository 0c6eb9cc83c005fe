"""Start one process per GPU (torch.multiprocessing spawn), feed progress to the caller, bound the total time.

Workers see CUDA_VISIBLE_DEVICES = the probed GPUs in PCI order, so rank r is GPU gpus[r]. NVLink SHARP / multicast
stay off: this only ever sets them to their disabled values, and only when the user has not set them."""

from __future__ import annotations

import os
import queue as queue_mod
import socket
import time
from contextlib import contextmanager

from generator.errors import UserError
from generator.probe.collectives import Measurement
from generator.probe.subsets import Subset

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def worker_env(gpus: list[int], device: str, extra: dict[str, str] | None = None):
    """Environment the spawned workers inherit; restored afterwards."""
    saved = dict(os.environ)
    try:
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        for key, value in SAFE_ENV.items():
            os.environ.setdefault(key, value)
        if device == "cuda":
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        os.environ.update(extra or {})
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_probe(
    gpus: list[int],
    subsets: list[Subset],
    sizes: list[int],
    collectives: tuple[str, ...],
    *,
    backend: str,
    device: str,
    warmup: int,
    repeats: int,
    timeout_s: float,
    extra_env: dict[str, str] | None = None,
    on_measurement=None,
) -> dict[str, list[Measurement]]:
    """Measurements per subset key. `on_measurement(key, m)` is called as each arrives (for a progress bar)."""
    import torch.multiprocessing as mp

    from generator.probe.worker import run_rank

    rank_of = {g: r for r, g in enumerate(gpus)}
    plan = {
        "world": len(gpus),
        "port": _free_port(),
        "backend": backend,
        "device": device,
        "subsets": [{"key": s.key, "ranks": [rank_of[g] for g in s.gpu_ids]} for s in subsets],
        "sizes": sizes,
        "collectives": list(collectives),
        "warmup": warmup,
        "repeats": repeats,
        "inner_bytes": 64 * 1024**2,  # small messages: average several calls per timed repeat
        "max_inner": 20,
        "op_timeout_s": max(30, int(timeout_s)),
    }
    ctx = mp.get_context("spawn")
    results: dict[str, list[Measurement]] = {s.key: [] for s in subsets}
    q = ctx.Queue()
    deadline = time.monotonic() + timeout_s
    with worker_env(gpus, device, extra_env):
        procs = mp.start_processes(run_rank, args=(plan, q), nprocs=len(gpus), join=False, start_method="spawn")
    done, finished = False, False
    try:
        while True:
            try:
                msg = q.get(timeout=0.5 if finished else 0.2)
            except queue_mod.Empty:
                msg = None
            if msg is None and finished:
                break  # workers have exited and the queue is drained
            if msg and msg[0] == "m":
                _, key, collective, size, n, times = msg
                m = Measurement(collective, size, n, tuple(times))
                results[key].append(m)
                if on_measurement:
                    on_measurement(key, m)
            elif msg and msg[0] == "done":
                done = True
            if msg is None and not finished:
                finished = procs.join(timeout=0.01)
            if time.monotonic() > deadline:
                raise UserError(f"probe did not finish within {timeout_s:.0f} s; use --quick or fewer --sizes")
    except Exception as exc:
        for p in procs.processes:
            if p.is_alive():
                p.kill()
        if isinstance(exc, UserError):
            raise
        raise UserError(f"a probe worker failed: {str(exc).strip().splitlines()[-1][:300]}") from None
    if not done:
        raise UserError("probe workers exited before finishing; see their output above")
    return results
