"""The ATen ops one decoder layer runs as the probe's layer row times it (bf16 weights, frozen, no autocast, no
adapters: generator/probe/compute_layers.py) against train.py's LoRA layer (peft's q/v adapters, rank 4 here, under
CUDA's bf16 autocast policy, generator/model/cuda_autocast.py) and each of the two alone, counted on the CPU on a
tiny Qwen2-MoE, per layer (a 2-layer model's count less a 1-layer one's). For the lead in bench/README's
twenty-sixth session: the ops a LoRA step runs that a row-priced MoE's layer rows do not hold.

    python bench/scripts/lora_layer_ops.py --out bench/results/cpu-lora-layer-ops-qwen2moe-2026-12-07.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.model.cuda_autocast import cuda_autocast  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=128,
            num_experts=8, num_experts_per_tok=2, num_attention_heads=4, num_key_value_heads=4, vocab_size=256,
            max_position_embeddings=512, decoder_sparse_step=1, mlp_only_layers=[])  # fmt: skip


def op_counts(layers: int, lora: bool, autocast: bool) -> collections.Counter:
    from peft import LoraConfig, get_peft_model
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM, Qwen2MoeConfig

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen2MoeConfig(num_hidden_layers=layers, **TINY), dtype=torch.bfloat16,
                                             attn_implementation="sdpa")  # fmt: skip
    model.requires_grad_(False)
    if lora:
        adapters = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
        model = get_peft_model(model, adapters).base_model.model
    body = model.get_decoder().train()
    x = torch.randn(2, 128, TINY["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn_like(x)

    def step():
        with cuda_autocast(torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False):
            y = body(inputs_embeds=x).last_hidden_state
        y.to(grad.dtype).backward(grad)

    step()  # warm: first-call work (caches, lazy init) is not a layer's
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))


def per_layer(lora: bool, autocast: bool) -> dict[str, int]:
    two, one = op_counts(2, lora, autocast), op_counts(1, lora, autocast)
    return {name: two[name] - one[name] for name in sorted(two) if two[name] - one[name]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    row = per_layer(False, False)
    variants = {"autocast": (False, True), "lora": (True, False), "lora_autocast": (True, True)}
    more = {}
    for name, (lora, autocast) in variants.items():
        ops = per_layer(lora, autocast)
        diff = {k: ops.get(k, 0) - row.get(k, 0) for k in sorted(set(row) | set(ops))}
        more[name] = {k: v for k, v in diff.items() if v}
    doc = {"what": " ".join(__doc__.split("\n\n")[0].split()), "torch": torch.__version__, "tiny_config": TINY,
           "row_ops_per_layer": row, "more_than_the_row_per_layer": more}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(more, indent=1))


if __name__ == "__main__":
    main()
