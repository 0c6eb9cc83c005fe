"""Which part of an MoE's tiny host layer (`probe --compute --model`'s own rows) fails on CUDA: each variant trains the
layer at the probe's widths for three steps in its own process, with CUDA_LAUNCH_BLOCKING=1 so the traceback names
the kernel that faulted.

Why: on 2026-12-05 Qwen3-30B-A3B's own host rows hit "CUDA error: an illegal memory access" on an H100 (torch
2.11+cu130, transformers 5.17), where Mixtral's pass (tests/test_probe_host_model_gpu.py) and Qwen3's run on the CPU.
The variants change one thing each: the expert count (128 to 8), the tokens (64 to 512, fewer empty experts),
transformers' experts path (grouped_mm, batched_mm, eager), fp32 weights, and Mixtral's layer as the control.

    python bench/scripts/moe_host_debug.py --out moe-host-debug.json       # ~1-2 minutes on one GPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QWEN3 = str(REPO / "bench" / "models" / "qwen3-30b-a3b.json")
VARIANTS = (
    "after_liger",
    "after_mistral",
    "frozen",
    "frozen_experts_8",
    "frozen_tokens_512",
    "frozen_batched_mm",
    "lora",
    "probe_row",
    "grouped_mm",
    "experts_8",
    "tokens_512",
    "batched_mm",
    "eager",
    "fp32",
    "mixtral",
)
"""On an H100 on 2026-12-05 the seven from grouped_mm on all trained without error, every weight trainable, while the
probe's own host row (peft's LoRA, experts frozen) hit the illegal memory access again: the frozen variants first, a
weight-gradient-free grouped_mm backward being what LoRA adds; `lora` builds the layer as the probe does
(compute_host.train_py_model) and `probe_row` is that row itself (compute_host.hf_row, fused AdamW and clipping).
Those six passed too (a second H100 call), each in a fresh process, where host_rows.py had run the tiny Mistral's rows
(eager, then with Liger's kernels, whose patch stays in the process) before the model's own: `after_mistral` and
`after_liger` run probe_row after one such Mistral row, and both passed as well (a third call): under
CUDA_LAUNCH_BLOCKING nothing faults, which points at a race that per-kernel synchronisation hides; --no-blocking runs
the same variants without it (not yet run)."""


def run_variant(variant: str) -> str:
    """Three training steps of two tiny layers; the line printed on success."""
    sys.path.insert(0, str(REPO))
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: the plumbing alone

    from generator.probe.compute_host_model import host_config
    from generator.probe.compute_layers import hf_config_dict

    cfg = hf_config_dict("mixtral-8x7b" if variant == "mixtral" else QWEN3)
    if variant.endswith("experts_8"):
        cfg = {**cfg, "num_experts": 8}
    if variant.startswith("after_"):
        from generator.probe.clock import Clock
        from generator.probe.compute_host import hf_row

        hf_row(Clock(device), "lora", False, liger=variant == "after_liger", rounds=2)  # the tiny Mistral's
        variant = "probe_row"
    if variant == "probe_row":
        from generator.probe.clock import Clock
        from generator.probe.compute_host import hf_row
        from generator.probe.compute_host_model import _builder

        row = hf_row(Clock(device), "lora", False, rounds=2, build=_builder(cfg, moe=True))
        return f"ok: probe_row lora {row['fwdbwd_ms_per_layer']} ms a layer"
    experts = "batched_mm" if variant.endswith("batched_mm") else "eager" if variant == "eager" else "grouped_mm"
    dtype = torch.float32 if variant == "fp32" else torch.bfloat16
    model = AutoModelForCausalLM.from_config(host_config(cfg, 2), dtype=dtype, attn_implementation="sdpa",
                                             experts_implementation=experts).to(device)  # fmt: skip
    if variant.startswith("frozen"):  # what LoRA leaves: no weight gradient for the experts
        for name, p in model.named_parameters():
            p.requires_grad_("experts" not in name)
    if variant == "lora":
        from generator.probe.compute_host import train_py_model

        model = train_py_model(model, "lora", compiled=False, liger=False, moe=True)
    ids = torch.randint(0, 512, (1, 512 if variant.endswith("tokens_512") else 64), device=device)
    for _ in range(3):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    if device == "cuda":
        torch.cuda.synchronize()
    return f"ok: {variant}, experts {experts}, loss {loss.item():.3f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=VARIANTS, help="run one variant in this process (the parent's child)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", help="comma list of variants to run, in this order (default: all)")
    ap.add_argument("--no-blocking", action="store_true", help="leave CUDA_LAUNCH_BLOCKING unset: every variant, "
                    "the probe's own row after the Mistral rows included, passed with it set on an H100")  # fmt: skip
    args = ap.parse_args(argv)
    if args.variant:
        try:
            print(run_variant(args.variant))
        except Exception:
            traceback.print_exc(limit=-8)
            sys.exit(1)
        return
    env = {**os.environ, **({} if args.no_blocking else {"CUDA_LAUNCH_BLOCKING": "1"})}
    results = {}
    chosen = args.only.split(",") if args.only else VARIANTS
    if unknown := [v for v in chosen if v not in VARIANTS]:
        ap.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    for variant in chosen:
        run = subprocess.run([sys.executable, __file__, "--variant", variant], capture_output=True, text=True, env=env,
                             timeout=120)  # fmt: skip
        lines = [ln for ln in (run.stdout + run.stderr).splitlines() if "warn" not in ln.lower()]
        results[variant] = {"rc": run.returncode, "tail": lines[-14:]}
        print(f"=== {variant}: rc {run.returncode}\n" + "\n".join(lines[-14:]), flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
