"""What one decoder layer keeps for backward, eager against compiled (train.py --compile-layers, which fp8 implies):
the bytes of every tensor the autograd graph holds after the forward, each storage once, parameters left out.

Why: Mixtral-8x7B cut to 8 layers, LoRA in float8, allocated 11.7 GB less than its eager twin (56.6 against 68.3 GB,
bench/results/h200-x1-families-2026-12-02.json); the dense layers' compiled rows match the eager count. The count
runs the model's real widths at a few layers, random weights, on the GPU where inductor's partitioner decides what
to recompute (on CPU it decides differently: dense layers there keep less compiled than the GPU rows show).

    python bench/scripts/saved_by_layer.py --model mixtral --layers 2 --seq 4096 --out saved.json
    python bench/scripts/saved_by_layer.py --modes fp8 --out saved-fp8.json   # train.py --precision fp8's layers

`fp8` converts the Linears train.py's float8 path takes (training/precision.py fp8_filter, torchao's tensorwise
recipe, train.py's default) before compiling each layer, all under the same bf16 autocast train.py runs in.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # train.py's default
MODELS = {  # real widths of the two families in question
    "mixtral": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                    num_local_experts=8, num_experts_per_tok=2, vocab_size=32000),
    "mistral": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                    vocab_size=32000),
}  # fmt: skip


def build(name: str, layers: int, method: str, device: str):
    from transformers import MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM

    moe = name == "mixtral"
    cfg_cls, model_cls = (MixtralConfig, MixtralForCausalLM) if moe else (MistralConfig, MistralForCausalLM)
    cfg = cfg_cls(**MODELS[name], num_hidden_layers=layers, sliding_window=None)
    torch.manual_seed(0)
    with torch.device(device):
        model = model_cls._from_config(cfg, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    return model


def graph_saved_bytes(loss, params: set[int]) -> int:
    """Unique storages saved by the nodes reachable from loss.grad_fn (built-in nodes' _saved_* and custom Functions'
    saved_tensors, which is where a compiled region keeps its)."""
    seen, total, todo, visited = set(), 0, [loss.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        tensors = []
        for attr in dir(node):
            if attr.startswith("_saved_"):
                try:
                    v = getattr(node, attr)
                except Exception:  # a saved value already freed, or not a tensor
                    continue
                values = [v] if isinstance(v, torch.Tensor) else list(v) if isinstance(v, tuple | list) else []
                tensors += [x for x in values if isinstance(x, torch.Tensor)]
        with contextlib.suppress(Exception):  # built-in nodes have no saved_tensors
            tensors += [t for t in node.saved_tensors if isinstance(t, torch.Tensor)]
        for t in tensors:
            key = t.untyped_storage().data_ptr()
            if key not in params and key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
        todo += [n for n, _ in node.next_functions]
    return total


def measure(name: str, layers: int, method: str, seq: int, mb: int, mode: str, device: str) -> dict:
    from training.precision import compile_layers, fp8_config, fp8_filter

    model = build(name, layers, method, device)
    compiled = mode != "eager"
    if mode == "fp8":
        from torchao.float8 import convert_to_float8_training

        convert_to_float8_training(model, config=fp8_config("tensorwise", False), module_filter_fn=fp8_filter)
    if compiled:
        compile_layers(model)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(0, 32000, (mb, seq), device=device)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    for _ in range(2 if compiled else 1):  # the first compiled call compiles; count the second
        with torch.autocast(kind, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        saved = graph_saved_bytes(loss, params)
        del loss
    return dict(model=name, layers=layers, method=method, seq=seq, micro_batch=mb, compiled=compiled, mode=mode,
                saved_bytes=saved,
                allocated_after=torch.cuda.memory_allocated() if kind == "cuda" else None)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", nargs="+", default=["mixtral", "mistral"])
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--method", default="lora")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled", "fp8"])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rows = []
    for name in a.model:
        for layers in a.layers:
            for mode in a.modes:
                rows.append(measure(name, layers, a.method, a.seq, a.micro_batch, mode, a.device))
                print(json.dumps(rows[-1]), flush=True)
                torch._dynamo.reset()
                if a.device.startswith("cuda"):
                    torch.cuda.empty_cache()
    a.out.write_text(json.dumps(dict(versions=dict(torch=torch.__version__), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
