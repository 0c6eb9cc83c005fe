"""The estimator's GEMM FLOPs (estimate.operators.gemm_flops) against what transformers really runs: a tiny model of
each architecture trains one step on the CPU under torch's FlopCounterMode, and every matrix multiply it executed,
forward and backward, is counted (mm, addmm, bmm and the experts' _grouped_mm, which the counter does not know and
is taught here). Attention's score products run inside SDPA and are priced apart, so they are not in either count.

The cases are the layouts a config's dimensions alone misprice: a shared expert beside the routed ones and a dense
first layer (Qwen2-MoE), shared experts and dense first layers (GLM-4.5), MLA's low-rank projections with shared
experts and a dense first layer (DeepSeek-V3), MoE layers interleaved with dense ones and experts run densely over
every token (Llama-4), Mamba layers between attention ones and experts every other layer (Jamba), experts without a
gate (Nemotron-H: up and down only; priced as gated before ModelSpec.experts_layout was read, 1.5x its experts'
FLOPs), fused qkv and gate_up projections (Phi-3), Linear subclasses (Falcon's FalconLinear) and transformers'
Conv1D (GPT-2, whose weights are stored transposed: 12% over before it was read), plain routed MoEs (OLMoE,
Qwen3-MoE) and the closed-form families (Mistral, Mixtral).
Before the decoder's Linears were read from the built model (ModelSpec.layer_linears) and Llama-4's dense experts were
known (estimate.moe.DENSE_EXPERTS), the estimate was 28% short here on Qwen2-MoE, 16% on GLM-4.5 and 40% on Llama-4.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from bench.scripts.flop_audit import grouped_mm_flops  # noqa: E402
from generator.estimate.operators import gemm_flops  # noqa: E402
from generator.estimate.types import Workload  # noqa: E402
from generator.model import load_model  # noqa: E402

SEQ = 64
BASE = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 256, "max_position_embeddings": 128, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2}  # fmt: skip
CASES = {
    "mistral": {"intermediate_size": 96},
    "mixtral": {"intermediate_size": 32, "num_local_experts": 4, "num_experts_per_tok": 2},
    "phi3": {"intermediate_size": 96},
    "falcon": {"new_decoder_architecture": True, "num_kv_heads": 2, "bias": False},
    "gpt2": {"num_key_value_heads": 4},
    "olmoe": {"intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2},
    "qwen3_moe": {"intermediate_size": 96, "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
                  "head_dim": 16},
    "qwen2_moe": {"intermediate_size": 96, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 80,
                  "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [0]},
    "glm4_moe": {"intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 8,
                 "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "head_dim": 16,
                 "n_group": 1, "topk_group": 1},
    "llama4_text": {"intermediate_size": 48, "intermediate_size_mlp": 96, "num_local_experts": 4,
                    "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "head_dim": 16},
    "jamba": {"num_hidden_layers": 4, "intermediate_size": 96, "attn_layer_period": 2, "attn_layer_offset": 1,
              "expert_layer_period": 2, "expert_layer_offset": 1, "num_experts": 4, "num_experts_per_tok": 2,
              "mamba_d_state": 8, "mamba_expand": 2, "mamba_dt_rank": 8, "use_mamba_kernels": False},
    "nemotron_h": {"num_hidden_layers": 4, "intermediate_size": 96, "n_routed_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48, "head_dim": 16,
                   "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2,
                   "use_mamba_kernels": False},
    "deepseek_v3": {"intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 8,
                    "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "kv_lora_rank": 16,
                    "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
                    "head_dim": 8, "num_key_value_heads": 4, "n_group": 2, "topk_group": 1},
}  # fmt: skip
OTHER_BMM = {
    "jamba": "the selective scan's reference path (the scan is not priced as a GEMM); its conv1d weight is 3-D "
    "without being an expert (model.config_dims.is_expert_tensor)",
    "deepseek_v3": "SDPA's math path for MLA's unequal query and value head widths: attention, priced apart",
    "nemotron_h": "the Mamba-2 layer's chunked scan in PyTorch (not priced as a GEMM)",
    "gpt2": "SDPA's math path on the CPU under GPT-2's attention dropout (0.1): attention, priced apart",
}
"""Cases whose bmm are not a Linear's GEMM, so the count leaves bmm out."""


def executed_matmul_flops(config: dict, bmm: bool = True) -> int:
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).float()
    ids = torch.randint(3, BASE["vocab_size"], (1, SEQ))
    counter = FlopCounterMode(display=False, custom_mapping={torch.ops.aten._grouped_mm: grouped_mm_flops})
    with counter:
        model(input_ids=ids, labels=ids).loss.backward()
    counts = counter.get_flop_counts()["Global"]
    matmuls = ("mm", "addmm", "_grouped_mm") + (("bmm", "baddbmm") if bmm else ())
    return sum(v for op, v in counts.items() if str(op).split(".")[-1] in matmuls)


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_gemm_flops_are_what_transformers_executes(tmp_path: Path, model_type):
    config = {**BASE, **CASES[model_type], "model_type": model_type}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = load_model(str(tmp_path), compiled=False)
    fwd, bwd = gemm_flops(spec, Workload(seq_len=SEQ, micro_batch=1, method="full"))
    assert fwd + bwd == executed_matmul_flops(config, bmm=model_type not in OTHER_BMM)


def test_gemm_modules_are_what_peft_and_torchao_take(tmp_path: Path):
    """peft's all-linear adapts every nn.Linear subclass and transformers' Conv1D; torchao's float8 conversion
    (train.py's filter) takes nn.Linear only. Falcon's FalconLinear layers are LoRA targets (they were missing from the
    names a --lora-targets error lists) and run in float8; GPT-2's Conv1D layers are LoRA targets and stay bf16."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from generator.estimate.operators import linears

    fp8 = Workload(seq_len=SEQ, micro_batch=1, method="full", precision="fp8")
    for model_type in ("falcon", "gpt2"):
        config = {**BASE, **CASES[model_type], "model_type": model_type}
        (tmp_path / model_type).mkdir()
        (tmp_path / model_type / "config.json").write_text(json.dumps(config))
        spec = load_model(str(tmp_path / model_type), compiled=False)
        cfg = AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k != "model_type"})
        peft_model = get_peft_model(AutoModelForCausalLM.from_config(cfg), LoraConfig(target_modules="all-linear"))
        adapted = {name.rsplit(".", 1)[-1] for name, m in peft_model.named_modules() if hasattr(m, "lora_A")}
        assert set(spec.linear_names) == adapted, model_type
        in_float8 = {lin.name.rsplit(".", 1)[-1] for lin in linears(spec, fp8) if lin.fp8}
        assert in_float8 == (adapted if model_type == "falcon" else set()), model_type


def test_the_plan_says_dense_experts_and_refuses_train_pys_qlora_for_them(tmp_path: Path, capsys):
    """The Llama-4 case above, planned: the reasons say the experts run densely (what the FLOPs above count), and
    train.py's QLoRA, whose per-expert NF4 module is called as routed experts are, is refused in one line before any
    config is written."""
    from generator.cli import main

    (tmp_path / "config.json").write_text(json.dumps({**BASE, **CASES["llama4_text"], "model_type": "llama4_text"}))
    base = ["plan", "--model", str(tmp_path), "--machine", "h200-sxm-2", "--num-gpus", "1", "--seq-len", "128",
            "--json", "--force"]  # fmt: skip
    assert main([*base, "--method", "lora", "--output", str(tmp_path / "a.yaml")]) == 0
    reasons = json.loads(capsys.readouterr().out)["reasons"]
    assert [r for r in reasons if r.startswith("experts run densely")] == [
        "experts run densely: transformers' llama4_text runs all 4 experts over every token and weights their outputs "
        "by the router (top-1 is a weighting, not a dispatch), so the experts cost 4x their routed FLOPs; priced as "
        "it runs"
    ]
    assert main([*base, "--method", "qlora", "--output", str(tmp_path / "b.yaml")]) == 2
    assert "experts run densely over every token" in capsys.readouterr().err
    assert not (tmp_path / "b.yaml").exists()


@pytest.mark.parametrize("model_type", ["nemotron_h", "mixtral"])
def test_train_pys_qlora_is_refused_for_an_experts_layout_it_does_not_quantise(tmp_path: Path, capsys, model_type):
    """Nemotron-H's experts have no gate (transformers' layout flag has_gate=False): train.py's per-expert NF4 layer
    refuses it at load (training/moe.py, from the same flags of the built model), so the plan refuses QLoRA under
    train.py first, in one line naming the flag; LoRA plans, and so does Mixtral's QLoRA (the default layout)."""
    from generator.cli import main

    (tmp_path / "config.json").write_text(json.dumps({**BASE, **CASES[model_type], "model_type": model_type}))
    assert load_model(str(tmp_path), compiled=False).experts_layout == (
        ("has_gate",) if model_type == "nemotron_h" else ()
    )
    base = ["plan", "--model", str(tmp_path), "--machine", "h200-sxm-2", "--num-gpus", "1", "--seq-len", "128",
            "--force"]  # fmt: skip
    assert main([*base, "--method", "lora", "--output", str(tmp_path / "a.yaml")]) == 0
    code = main([*base, "--method", "qlora", "--output", str(tmp_path / "b.yaml")])
    err = capsys.readouterr().err
    if model_type == "mixtral":
        assert code == 0
        return
    assert code == 2 and not (tmp_path / "b.yaml").exists()
    assert err.strip().splitlines()[-1] == (
        "error: --method qlora with train.py: nemotron_h's experts layout (has_gate=False) is not one train.py "
        "quantises per expert; use --method lora"
    )


def test_a_hybrid_model_is_said_to_be_priced_roughly(tmp_path: Path, capsys):
    """Jamba's Mamba layers (the config's layer_types) have no softmax attention and a recurrent scan the estimator
    does not price, nor do Nemotron-H's MoE and MLP blocks: the plan says how many layers that is; a model with
    attention in every layer gets no such line."""
    from generator.cli import main

    said = {}
    for model_type in ("jamba", "qwen3_moe", "nemotron_h"):
        (tmp_path / model_type).mkdir()
        config = {**BASE, **CASES[model_type], "model_type": model_type}
        (tmp_path / model_type / "config.json").write_text(json.dumps(config))
        argv = ["plan", "--model", str(tmp_path / model_type), "--machine", "h200-sxm-2", "--num-gpus", "1",
                "--method", "lora", "--seq-len", "128", "--json", "--force",
                "--output", str(tmp_path / "p.yaml")]  # fmt: skip
        assert main(argv) == 0
        said[model_type] = [r for r in json.loads(capsys.readouterr().out)["reasons"] if r.startswith("hybrid")]
    assert said["qwen3_moe"] == []
    assert len(said["jamba"]) == 1 and said["jamba"][0].startswith("hybrid layers: 2 of 4 decoder layers")
    # Nemotron-H's blocks hold one mixer each: Mamba, MoE, attention, MLP; only one of the four attends
    assert said["nemotron_h"][0].startswith("hybrid layers: 3 of 4 decoder layers have no softmax attention")


def test_mla_attention_is_priced_at_its_query_and_value_widths(tmp_path: Path):
    """DeepSeek's multi-head latent attention multiplies queries and keys qk_nope + qk_rope wide (24 here) and values
    v_head_dim wide (16), where the config's head_dim is the rotary part (8). On the CPU, SDPA's math path runs the
    scores as bmm over the whole square, so the counted bmm FLOPs are the estimator's at every key of the sequence."""
    from generator.estimate.attention import attention_flops_per_token

    config = {**BASE, **CASES["deepseek_v3"], "model_type": "deepseek_v3"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = load_model(str(tmp_path), compiled=False)
    workload = Workload(seq_len=SEQ, micro_batch=1, method="full")
    priced = attention_flops_per_token(spec, workload, keys=lambda group, w: float(SEQ)) * SEQ
    scores = executed_matmul_flops(config) - executed_matmul_flops(config, bmm=False)
    assert priced == scores
