"""What each decoder layer keeps for backward, counted, against what the estimator prices, for the dense causal-LM
families transformers builds: one forward and loss of a tiny model of each (4 layers, hidden 256, 8 heads, 640 tokens,
bf16, SDPA where the class has it, dropout off: the GPU's flash kernels keep their dropout as a seed, not as a mask),
every saved tensor recorded through saved_tensors_hooks and counted once per storage while the graph holds it
(parameters left out), per layer, against estimate.activations' full fine-tune bytes per layer at the same widths.
CPU only, under a minute. The activation formula is the llama layer's (two RMSNorms, a SwiGLU MLP); a model sized on
the meta device carries its own layer's count from there (model.saved_count), and this checks that count, taken on
meta tensors at 128, 256 and 512 tokens, against real ones at 640, as the estimate prices it. `--method lora`: peft's
all-linear adapters, as train.py runs LoRA on these architectures. Hybrids (HYBRIDS) run six layers and read blocks
1-5, their attention and other blocks weighed by their shares of the model's layers, as the count does.

    python bench/scripts/saved_audit.py --out bench/results/cpu-saved-audit-<date>.json [--method lora] [TYPE ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.model.saved_count import COUNTED_LAYERS  # noqa: E402

SEQ, LAYERS = 640, 4  # a length the meta count (model.saved_count.TOKENS) does not run, and no weight's width
WIDTHS = dict(vocab_size=1000, hidden_size=256, num_hidden_layers=LAYERS, num_attention_heads=8,
              max_position_embeddings=SEQ, tie_word_embeddings=False, use_cache=False, pad_token_id=0,
              bos_token_id=1, eos_token_id=2)  # fmt: skip
FAMILIES = {
    "llama": {"intermediate_size": 896, "num_key_value_heads": 2},
    "mistral": {"intermediate_size": 896, "num_key_value_heads": 2},
    "qwen2": {"intermediate_size": 896, "num_key_value_heads": 2},
    "qwen3": {"intermediate_size": 896, "num_key_value_heads": 2, "head_dim": 32},
    "granite": {"intermediate_size": 896, "num_key_value_heads": 2},
    "smollm3": {"intermediate_size": 896, "num_key_value_heads": 2},
    "exaone4": {"intermediate_size": 896, "num_key_value_heads": 2},
    "cohere": {"intermediate_size": 896, "num_key_value_heads": 2},
    "phi3": {"intermediate_size": 896, "num_key_value_heads": 2},
    "olmo2": {"intermediate_size": 896, "num_key_value_heads": 2},
    "stablelm": {"intermediate_size": 896, "num_key_value_heads": 2},
    "gemma": {"intermediate_size": 896, "num_key_value_heads": 2, "head_dim": 32},
    "gemma2": {"intermediate_size": 896, "num_key_value_heads": 2, "head_dim": 32},
    "gemma3_text": {"intermediate_size": 896, "num_key_value_heads": 2, "head_dim": 32},
    "phi": {"intermediate_size": 896},
    "gptj": {"rotary_dim": 16},
    "gpt_neox": {"intermediate_size": 1024},
    "falcon": {"new_decoder_architecture": True, "num_kv_heads": 2},
    "starcoder2": {"intermediate_size": 1024, "num_key_value_heads": 2},
    "opt": {"ffn_dim": 1024, "word_embed_proj_dim": 256},
    "gpt2": {},
    "gpt_bigcode": {"n_inner": 1024},
    "bloom": {},
    "mixtral": {"intermediate_size": 512, "num_key_value_heads": 2, "num_local_experts": 4},
    "qwen3_moe": {"moe_intermediate_size": 256, "num_key_value_heads": 2, "num_experts": 4, "head_dim": 32,
                  "num_experts_per_tok": 2},
    "olmoe": {"intermediate_size": 256, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"intermediate_size": 512, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 384,
                  "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2},
    "gpt_oss": {"intermediate_size": 256, "num_key_value_heads": 2, "num_local_experts": 4, "head_dim": 32},
}  # fmt: skip
"""Model type -> what its tiny config adds to WIDTHS (MLP width, kv heads, head width, experts). Not DeepSeek's MLA:
the CPU's SDPA takes its math path (every score kept) for values narrower than queries, where the GPU's does not, so
its count here says nothing of the GPU's."""
HYBRIDS = {
    "recurrent_gemma": {"intermediate_size": 768, "num_key_value_heads": 1, "lru_width": 256},
    "lfm2": {"intermediate_size": 512, "num_key_value_heads": 2,
             "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention"]},
    "qwen3_next": {"intermediate_size": 512, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128, "head_dim": 32,
                   "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 32,
                   "linear_value_head_dim": 32, "layer_types": ["linear_attention", "linear_attention",
                                                             "full_attention"] * 2},
}  # fmt: skip
"""Hybrids (blocks without softmax attention among their layers: RecurrentGemma's RG-LRU, LFM2's short convolutions,
Qwen3-Next's gated linear attention) in six layers: the meta count's mean is over every block past the first of its
COUNTED_LAYERS (model.saved_count), so theirs is taken over the same blocks."""
DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout", "dropout",
                "attention_probs_dropout_prob", "hidden_dropout_prob", "summary_first_dropout")  # fmt: skip
BLOCK = re.compile(r"\.(?:layers|h|blocks)\.(\d+)(?:\.|$)")


def saved_bytes_per_layer(model, inputs: dict, layers: int, keep_weight_shapes: bool = False):
    """Bytes of unique storages each decoder layer's modules saved for backward and still hold after the loss
    (model.saved_storages.SavedStorages), leaving out parameters and bf16 copies of them (the estimator counts weights
    elsewhere), unless `keep_weight_shapes`: then a tensor shaped like its module's weight counts too (peft's folded
    expert stacks). The forward runs under CUDA's bf16 autocast policy (model.cuda_autocast: what Accelerate's
    mixed_precision does on a GPU, which the CPU's own autocast does not: it keeps layer_norm and pow in bf16)."""
    from generator.model.cuda_autocast import cuda_autocast
    from generator.model.saved_storages import SavedStorages

    stack = ["<root>"]
    weight_shapes: dict[str, set] = {}
    for name, mod in model.named_modules():
        weight_shapes[name] = {s for p in mod.parameters(recurse=False) for s in (p.shape, p.shape[::-1])}
        mod.register_forward_pre_hook(lambda m, a, name=name: stack.append(name))  # append returns None
        mod.register_forward_hook(lambda m, a, o: stack.__delitem__(-1))  # returns None: the output stays

    def weight_like(t) -> bool:
        return not keep_weight_shapes and tuple(t.shape[::-1]) in weight_shapes.get(stack[-1], ())

    saved = SavedStorages(model, lambda: stack[-1], weight_like)
    with saved.hooks(), cuda_autocast():
        loss = model(**inputs).loss
    per_layer = [0] * layers
    for name, nbytes in saved.by_owner().items():
        found = BLOCK.search(name)
        if found:
            per_layer[int(found.group(1))] += nbytes
    del loss
    return per_layer


def _hybrid_mean(per_layer: list[int], layer_types: list[str]) -> float:
    """A hybrid's mean layer over blocks 1 on: its attention blocks' mean and its other blocks' weighed by their
    shares of all its layers (what the meta count gives: model.saved_count.layer_saved's attention_share)."""
    from generator.model.config_dims import recurrent_kind

    attention = [n for n, t in zip(per_layer[1:], layer_types[1:], strict=True) if not recurrent_kind(t)]
    other = [n for n, t in zip(per_layer[1:], layer_types[1:], strict=True) if recurrent_kind(t)]
    share = sum(not recurrent_kind(t) for t in layer_types) / len(layer_types)
    return share * sum(attention) / len(attention) + (1 - share) * sum(other) / len(other)


def count_one(
    model_type: str,
    extra: dict,
    workdir: Path,
    method: str = "full",
    attention: str | None = None,
    compiled: bool = False,
) -> dict:
    """One family's middle layer counted and priced. method "lora": peft's adapters (r 16, no dropout) on the bf16
    base under bf16 autocast, on what train.py adapts: all-linear on a dense architecture beyond the llama names
    (estimate.lora_targets.own_linears_adapted), else the llama names the model has (an MoE's attention).
    `attention`: the kernel (sdpa where the class has it, else eager). `compiled`: each decoder layer past the first
    through AOTAutograd with inductor's min-cut partitioner (which decides what is saved and what recomputed; the
    graphs run uncompiled, so no C++ toolchain), as train.py's float8 and --compile-layers compile them, priced as
    such."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from generator.estimate.activations import activation_terms
    from generator.estimate.lora_targets import own_linears_adapted
    from generator.estimate.scripts import ALL_LINEAR, lora_modules
    from generator.estimate.types import Workload
    from generator.model import load_model

    hybrid = model_type in HYBRIDS
    layers = COUNTED_LAYERS if hybrid else LAYERS
    config = AutoConfig.for_model(model_type, **{**WIDTHS, "num_hidden_layers": layers}, **extra)
    for key in DROPOUT_KEYS:
        if isinstance(getattr(config, key, None), float):
            setattr(config, key, 0.0)
    directory = workdir / model_type
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**config.to_dict(), "model_type": model_type}, default=str))
    spec = load_model(str(directory), compiled=compiled)  # the compiled counts only where they are priced
    attention = attention or ("sdpa" if "sdpa" in spec.attentions else "eager")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention).to(torch.bfloat16).train()
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        from training.model import experts_kept_off, linear_targets

        # train.py's default: the llama names the model holds as Linears, less those peft would move onto fused experts
        named = experts_kept_off(model, linear_targets(model, lora_modules(ALL_LINEAR)))[0]
        targets = "all-linear" if own_linears_adapted(spec) else named
        adapters = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
        model = get_peft_model(model, adapters).train()
        # every block as a deep model's middle one: its input carries a gradient (with frozen embeddings the first
        # blocks before any adapter keep nothing, which a hybrid with adapters in its attention layers alone shows)
        model.enable_input_require_grads()
    if compiled:
        _compile_layers(model, layers)
    ids = torch.randint(3, WIDTHS["vocab_size"], (1, SEQ))
    per_layer = saved_bytes_per_layer(model, {"input_ids": ids, "labels": ids}, layers)
    counted = _hybrid_mean(per_layer, config.layer_types) if hybrid else per_layer[1]
    workload = Workload(method=method, seq_len=SEQ, grad_checkpointing=False, load_dtype="bf16", attention=attention,
                        lora_r=16, lora_targets=ALL_LINEAR, compiled_layers=compiled)  # fmt: skip
    fwd = activation_terms(spec, workload, "ddp")["forward_end"]
    priced = (fwd["activations"] + fwd.get("attention_bias", 0.0)) / spec.num_layers
    return {"attention": attention, "counted_per_token": counted / SEQ, "priced_per_token": priced / SEQ,
            "priced_over_counted": round(priced / counted, 3)}  # fmt: skip


def _compile_layers(model, layers: int) -> None:
    """Decoder blocks 1 on compiled as a float8 step compiles them, their graphs kept uncompiled (see count_one)."""
    blocks = [m for name, m in model.named_modules() if BLOCK.search(name) and BLOCK.search(name).end() == len(name)]
    compile_blocks(blocks[1:])


def compile_blocks(blocks) -> None:
    """Each block through dynamo and AOTAutograd with inductor's decompositions and min-cut partitioner (which decide
    what is saved and what recomputed), its graphs run uncompiled: no C++ toolchain needed."""
    import torch
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    torch._dynamo.reset()
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * len(blocks))
    backend = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm,
                           partition_fn=min_cut_rematerialization_partition,
                           decompositions=select_decomp_table())  # fmt: skip
    for block in blocks:
        block.compile(backend=backend)


def main(argv: list[str] | None = None) -> int:
    import logging
    import warnings

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    default = f"{len(FAMILIES)} families and {len(HYBRIDS)} hybrids"
    p.add_argument("types", nargs="*", help=f"model types (default: {default})")
    p.add_argument("--method", choices=("full", "lora"), default="full", help="full fine-tune, or peft's all-linear")
    p.add_argument("--compiled", action="store_true", help="each decoder layer past the first compiled (fp8's path)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch
    import transformers

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in args.types or [*FAMILIES, *HYBRIDS]:
            extra = FAMILIES.get(model_type) or HYBRIDS.get(model_type, {})
            try:
                results[model_type] = count_one(model_type, extra, Path(tmp), args.method, compiled=args.compiled)
            except Exception as exc:  # a family this tiny config does not build: listed, not guessed
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                results[model_type] = {"error": f"{type(exc).__name__}: {first}"}
            print(model_type, results[model_type], flush=True)
    doc = {
        "what": "bytes per token a middle decoder layer keeps for backward, counted on the CPU, beside what "
        "estimate.activations prices for it (bf16, no checkpointing; bench/scripts/saved_audit.py)",
        "method": (args.method if args.method == "full" else "lora: peft all-linear, r 16, no dropout")
        + (", decoder layers compiled (AOTAutograd, min-cut partitioner)" if args.compiled else ""),
        "date": time.strftime("%Y-%m-%d"), "transformers": transformers.__version__, "torch": torch.__version__,
        "widths": {**WIDTHS, "seq_len": SEQ}, "results": results,
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
