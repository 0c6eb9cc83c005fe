"""Host rows of train.py's QLoRA layer (variant `qlora`), timed as `probe --compute` times its host rows
(generator/probe/compute_host.py hf_row: four depths, interleaved rounds, train.py's step of forward, backward,
clipping and fused AdamW) on the model's own layer at the probe's tiny widths (compute_host_model.host_config: its
structure and expert count kept), built as train.py builds a QLoRA random init: the Linears in NF4, an MoE's
experts split into per-expert NF4 Linears sorted by expert (training/qlora.py, training/moe.py),
prepare_model_for_kbit_training, then peft's LoRA on train.py's default targets.

Why: Mixtral-8x7B QLoRA at micro-batch 1 ran 18.6% slower than predicted on one H200 (2,944 tokens/s against 3,491;
bench/REPORT.md cause 3). Profiled, its GPU was busy 1.06 s of a 1.39 s step and idle in thousands of gaps under
100 us: an NF4 expert layer issues about 1,040 kernels (eight experts' dequantisation, 4-bit GEMMs and adapters,
forward, recompute and backward) and the one host read a layer keeps the host from running ahead, so the host sets
that step. The estimator's host rows time a LoRA Mistral layer (about a sixth of those kernels), and its layer rows
time the NF4 layer at widths where the GPU's work hides the host's. These rows time the host alone; the estimator
reads them for that model's QLoRA steps (generator/estimate/host_time.py) once a results file carries them
(`bench/sweep.py --host-from` this file) or the shipped table does.

The probe (generator/) cannot build this layer itself: the NF4 split is train.py's (training/), which the installed
planner does not ship.

    python bench/scripts/qlora_host.py --model mixtral-8x7b --out qlora-host.json     # ~1 minute on one H200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.scripts.qlora_layer import document_header  # noqa: E402
from generator.model import load_model  # noqa: E402
from generator.probe.clock import Clock  # noqa: E402
from generator.probe.compute_host import ROUNDS, hf_row  # noqa: E402
from generator.probe.compute_host_model import host_config  # noqa: E402
from generator.probe.compute_layers import hf_config_dict  # noqa: E402


def _builder(cfg: dict):
    """hf_row's model at each depth: train.py's QLoRA random init of `depth` tiny layers of the model."""

    def build(clock: Clock, variant: str, layers: int, compiled: bool, liger: bool = False):
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        from training.args import DEFAULT_LORA_TARGETS
        from training.model import linear_targets
        from training.qlora import quantised_random_model, quantization_config

        model = quantised_random_model(host_config(cfg, layers), clock.device, quantization_config(),
                                       attn_implementation="sdpa")  # fmt: skip
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        model.config.use_cache = False
        targets = linear_targets(model, DEFAULT_LORA_TARGETS.split(","))
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets))
        return model.train()

    return build


def qlora_host_rows(name: str, clock: Clock, rounds: int) -> list[dict]:
    """One eager `qlora` host row of the model's own layer, tagged with the key the estimator reads it by."""
    cfg = hf_config_dict(name)
    if cfg is None:
        raise SystemExit(f"--model {name!r}: not a preset or a local model directory with config.json")
    model = load_model(name)
    row = hf_row(clock, "qlora", compiled=False, rounds=rounds, build=_builder(cfg))
    return [{**row, "layer": "train.py QLoRA, own", "model": model.name, "model_type": model.model_type,
             "experts": model.num_experts, "top_k": model.experts_per_token}]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="a preset or a local model directory (repeatable)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per depth (the full probe's)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    clock = Clock(device)
    rows: list[dict] = []
    for name in args.model:
        rows += qlora_host_rows(name, clock, args.rounds)
        args.out.write_text(json.dumps(_document(device, rows), indent=1) + "\n")  # kept if a later model fails
    print(json.dumps(rows, indent=1))


def _document(device: str, rows: list) -> dict:
    return {**document_header("qlora-host", "bench/scripts/qlora_host.py", device), "host": rows}


if __name__ == "__main__":
    main()
