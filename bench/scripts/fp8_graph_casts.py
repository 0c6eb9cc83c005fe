"""What a compiled float8 decoder block casts, per token, from its own joint graph on the meta device: the elements
converted to float8 and the elements copied into a transposed float8 layout, forward and backward, beside what the
estimator counts (estimate.operators.fp8_cast_elements: each Linear's input, output gradient and the input's
transposed recast).

The block is model.compiled_count's: one decoder layer with train.py's float8 Linears (torchao's tensorwise recipe),
given the inputs the eager forward hands it, through AOTAutograd with inductor's decompositions, its common-
subexpression pass and the min-cut partitioner, under CUDA's autocast policy. No GPU; about a minute a model.

    python bench/scripts/fp8_graph_casts.py --model bench/models/phi-default.json --model mistral-7b --out casts.json
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

from generator.model import compiled_count as cc  # noqa: E402
from generator.model.count_attention import counted_kernel  # noqa: E402
from generator.model.meta import _decoder_block, class_attentions  # noqa: E402
from generator.probe.compute_layers import hf_config_dict  # noqa: E402

FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _tally(graph, tokens: int) -> dict:
    """Per token: elements cast to float8 and elements copied transposed in float8, where the tensor grows with the
    tokens (a weight's casts are per step, not per token, and left out)."""
    casts = transposed = 0
    for node in graph.nodes:
        value = node.meta.get("val")
        if node.op != "call_function" or not isinstance(value, torch.Tensor) or value.dtype not in FLOAT8:
            continue
        if tokens not in value.shape:
            continue
        op = str(node.target)
        if "convert_element_type" in op or "_to_copy" in op:
            casts += value.numel()
        elif "clone" in op:
            transposed += value.numel()
    return {"cast": casts / tokens, "transposed": transposed / tokens}


def graph_casts(name: str) -> dict:
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = hf_config_dict(name)
    if cfg is None:
        raise SystemExit(f"--model {name!r}: not a preset or a config.json-like file")
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg)
    with init_empty_weights(include_buffers=True):
        model = AutoModelForCausalLM.from_config(config)
    blocks, *_ = _decoder_block(model, config.num_hidden_layers, 0)
    kernel = counted_kernel(model, class_attentions(type(model)))
    captured = cc._inputs(model, blocks, 1, kernel, torch.float32)  # a full fine-tune's fp32 weights
    layer = cc._float8(blocks[1], torch.float32)
    layer.requires_grad_(True)
    tallies: dict = {}

    def compiler(tag):
        def compile_graph(gm, example_inputs):
            tallies[tag] = _tally(gm.graph, cc.TOKENS)
            return gm

        return compile_graph

    cc.partitioned(layer, captured, compiler("forward"), compiler("backward"))
    linears = [m for m in layer.modules() if type(m).__name__ == "Float8Linear"]
    k_in, n_out = sum(m.in_features for m in linears), sum(m.out_features for m in linears)
    flops = sum(2 * m.in_features * m.out_features for m in linears)  # per token, one GEMM of the three
    cast = tallies["forward"]["cast"] + tallies["backward"]["cast"]
    transposed = tallies["forward"]["transposed"] + tallies["backward"]["transposed"]
    return {"model": name, "model_type": model_type, "float8_linears": len(linears), "graph": tallies,
            "graph_cast": cast, "graph_transposed": transposed,
            "priced_cast": k_in + n_out, "priced_transposed": k_in,
            "cast_over_priced": round(cast / (k_in + n_out), 3),
            "transposed_over_priced": round(transposed / k_in, 3),
            "graph_elements_per_gemm_mflop": round((cast + transposed) / (flops / 1e6), 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="a preset or a config.json-like file")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import transformers

    rows = [graph_casts(name) for name in args.model]
    for row in rows:
        print({k: v for k, v in row.items() if k != "graph"})
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    doc = {"kind": "fp8-graph-casts", "script": "bench/scripts/fp8_graph_casts.py", "device": "meta",
           "versions": versions, "rows": rows}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
