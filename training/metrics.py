"""What a run reports: the per-step JSONL log, the progress bar, per-rank peak memory, and the end-of-run summary
(docs/train.md, "Metrics")."""

from __future__ import annotations

import json
import math
from pathlib import Path


class JsonLog:
    """Rank 0 appends one JSON object per line; a resumed run appends too, so for a repeated step the last line wins."""

    def __init__(self, path: str, enabled: bool):
        self.fh = None
        if enabled:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(path, "a", buffering=1)  # noqa: SIM115 - held for the whole run, closed at exit

    def write(self, **record) -> None:
        if self.fh:
            self.fh.write(json.dumps(record) + "\n")
            self.fh.flush()


def mfu(flops_per_token: float | None, tokens_per_s: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation; None when the GPU's peak or the model's FLOPs per token is unknown."""
    if not (flops_per_token and peak_tflops):
        return None
    return flops_per_token * tokens_per_s / (peak_tflops * 1e12)


def make_progress(main: bool, start: int, total: int):
    if not main:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc="train", unit="step", dynamic_ncols=True)


def step_record(step, loss, scheduler, grad_norm, elapsed, tokens, flops, peak_tflops) -> dict:
    tps = tokens / elapsed if elapsed > 0 else 0.0
    gn = float(grad_norm) if grad_norm is not None else None
    return {
        "step": step,
        "loss": loss,
        "lr": scheduler.get_last_lr()[0],
        "grad_norm": gn if gn is None or math.isfinite(gn) else None,
        "step_time_s": round(elapsed, 4),
        "tokens_per_s_per_gpu": tps,
        "mfu": mfu(flops, tps, peak_tflops),
    }


def memory_record(accelerator, use_cuda: bool) -> dict:
    if not use_cuda:
        return {"max_mem_allocated_gb": None, "max_mem_reserved_gb": None}
    import torch

    mine = (
        torch.tensor(
            [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()],
            device=accelerator.device,
            dtype=torch.float64,
        )
        / 1e9
    )
    every = accelerator.gather(mine.unsqueeze(0)).view(-1, 2).tolist()
    return {
        "max_mem_allocated_gb": [round(a, 3) for a, _ in every],
        "max_mem_reserved_gb": [round(r, 3) for _, r in every],
    }


def summarize(accelerator, stats, step, flops, peak_tflops, predicted, predicted_src, use_cuda) -> dict:
    tps = stats["tokens"] / stats["seconds"] if stats["seconds"] else 0.0
    mem = memory_record(accelerator, use_cuda)
    return {
        "steps": step,
        "steps_this_run": len(stats["losses"]),
        "first_loss": stats["losses"][0] if stats["losses"] else None,
        "final_loss": stats["losses"][-1] if stats["losses"] else None,
        "tokens_per_s_per_gpu": tps,  # steady state: steps after this run's first
        "mfu": mfu(flops, tps, peak_tflops),
        "peak_mem_allocated_gb": max(mem["max_mem_allocated_gb"]) if use_cuda else None,
        "peak_mem_reserved_gb": max(mem["max_mem_reserved_gb"]) if use_cuda else None,
        "per_rank_mem_allocated_gb": mem["max_mem_allocated_gb"],
        "per_rank_mem_reserved_gb": mem["max_mem_reserved_gb"],
        "predicted_peak_gb": predicted,
        "predicted_source": predicted_src,
    }


def print_summary(s: dict, strategy: str) -> None:
    def fmt(v, spec):
        return "n/a" if v is None else format(v, spec)

    print(
        f"train.py summary ({strategy}): steps {s['steps']} ({s['steps_this_run']} this run), loss "
        f"{fmt(s['first_loss'], '.4f')} -> {fmt(s['final_loss'], '.4f')}, {s['tokens_per_s_per_gpu']:.0f} tokens/s "
        f"per GPU, MFU {fmt(s['mfu'], '.1%')}"
        + (f", compile {s['compile_s']:.1f} s (steps left out of tokens/s)" if s.get("compile_s") is not None else ""),
        flush=True,
    )
    print(
        f"train.py memory: measured peak allocated {fmt(s['peak_mem_allocated_gb'], '.2f')} GB (reserved "
        f"{fmt(s['peak_mem_reserved_gb'], '.2f')} GB); predicted peak {fmt(s['predicted_peak_gb'], '.2f')} GB "
        f"[{s['predicted_source']}]",
        flush=True,
    )
