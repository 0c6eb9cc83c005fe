"""Regenerate accelerate_configs/: the planner's configs for every bundled reference machine with Mistral-7B full
fine-tune (plus LoRA on the consumer machine), and a README that says what was chosen and why. A test regenerates them
and fails on any byte of difference, so the committed files are always what the tool writes today.

    .venv/bin/python -m docsgen.reference_configs [OUT_DIR]      (or `python -m docsgen` for every generated document)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from generator.emit import render
from generator.errors import UserError
from generator.fileio import atomic_write
from generator.model import load_model
from generator.plan.planner import make_plan
from generator.plan.reasons import format_ids
from generator.plan.types import PlanRequest
from generator.topology import REFERENCE_MACHINES, load_topology

CONFIG_DIR = "accelerate_configs"
MODEL = "mistral-7b"
GLOBAL_BATCH = 64
"""Sequences per optimizer step in every reference config, so they train the same recipe at any GPU count."""
PRECISION = "bf16"
"""Pinned: the reference configs stand for measured bf16 runs (--precision auto may take fp8 with torchao)."""


@dataclass(frozen=True)
class Scenario:
    name: str
    machine: str
    request: PlanRequest


def scenarios() -> list[Scenario]:
    out = [
        Scenario(f"{machine}-{MODEL}-full", machine, PlanRequest(global_batch=GLOBAL_BATCH, precision=PRECISION))
        for machine in sorted(REFERENCE_MACHINES)
    ]
    out.append(
        Scenario(
            f"rtx4090-2-{MODEL}-lora",
            "rtx4090-2",
            PlanRequest(method="lora", global_batch=GLOBAL_BATCH, precision=PRECISION),
        )
    )
    return out


def regenerate(out_dir: str | Path = CONFIG_DIR) -> list[Path]:
    """Write every reference config (and README.md) into out_dir; return the paths written, sorted."""
    out_dir = Path(out_dir)
    model = load_model(MODEL)
    texts: dict[str, str] = {}
    rows, rejected = [], []
    for s in scenarios():
        try:
            plan = make_plan(load_topology(machine=s.machine), model, s.request)
        except UserError as exc:
            rejected.append((s, str(exc)))
            continue
        emitted = render(plan, f"{CONFIG_DIR}/{s.name}.yaml")
        for path, text in emitted.files.items():
            texts[Path(path).name] = text
        rows.append((s, plan, emitted.launch_command))
    texts["README.md"] = readme(rows, rejected, REFERENCE_MACHINES)
    return sorted(atomic_write(out_dir / name, text, force=True) for name, text in texts.items())


def readme(rows, rejected, machines: dict[str, str]) -> str:
    lines = [
        "# Reference Accelerate configs (generated)",
        "",
        f"Written by `python -m docsgen.reference_configs` for {MODEL} (global batch {GLOBAL_BATCH}, sequence "
        "length 4096, weights loaded in fp32, bf16 mixed precision). Do not edit by hand: "
        "`tests/test_plan_reference_configs.py` regenerates them and fails on any difference.",
        "Memory and throughput below are predicted by the estimator, not measured.",
        "",
        "| config | machine | method | strategy | GPUs | micro x accum | ckpt | peak GB/GPU (predicted) "
        "| tokens/s/GPU (predicted) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s, plan, _ in rows:
        w, e = plan.workload, plan.estimate
        lines.append(
            f"| `{s.name}.yaml` | {s.machine} | {w.method} | {plan.strategy} | {format_ids(plan.gpu_ids)} "
            f"| {w.micro_batch} x {w.grad_accum} | {'on' if w.grad_checkpointing else 'off'} | {e.peak_gb:.1f} "
            f"| {e.tokens_per_s_per_gpu:,.0f} |"
        )
    for s, plan, command in rows:
        lines += ["", f"## {s.name}", "", f"{s.machine}: {machines.get(s.machine, '')}", ""]
        lines += [f"- {r}" for r in plan.reasons]
        lines += ["", "```sh", command, "```"]
    for s, message in rejected:
        lines += ["", f"## {s.name}: not generated", "", message]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    for p in regenerate(sys.argv[1] if len(sys.argv) > 1 else CONFIG_DIR):
        print(p)
