"""The MoE terms of the activation formula (generator/estimate/moe.py) against what autograd really saves: one forward
+ loss of a tiny Mixtral on CPU under bf16 autocast, counted as tests/test_estimate_lora_saved.py counts Mistral's
(every saved storage once, while the graph still holds it). Trained experts keep their grouped GEMMs' inputs; frozen
ones (LoRA) do not; QLoRA's per-expert NF4 loop keeps fp32 intermediates (bitsandbytes 0.50 quantises on CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from generator.estimate import Workload  # noqa: E402
from generator.estimate.activations import activation_terms  # noqa: E402
from generator.model import spec_from_config  # noqa: E402
from tests.test_estimate_lora_saved import LAYERS, SEQ, TINY, plain_loop_inputs, saved_bytes_per_layer  # noqa: E402


def tiny_mixtral(method: str):
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(**TINY, intermediate_size=384, num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
    if method == "qlora":  # train.py's path: the layer-by-layer NF4 random init, peft's k-bit preparation, LoRA
        pytest.importorskip("bitsandbytes")
        from peft import prepare_model_for_kbit_training

        from training.qlora import quantised_random_model, quantization_config

        model = quantised_random_model(cfg, "cpu", quantization_config(), "sdpa")
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    else:
        model = MixtralForCausalLM._from_config(cfg, attn_implementation="sdpa").to(torch.bfloat16)
    if method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # train.py's default
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM"))
    return model, spec_from_config(cfg.to_dict(), "tiny-mixtral")


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
def test_moe_layer_activations_match_saved_tensors(method):
    model, spec = tiny_mixtral(method)
    inputs, _ = plain_loop_inputs()
    counted = saved_bytes_per_layer(model, inputs)
    workload = Workload(method=method, seq_len=SEQ, grad_checkpointing=False, load_dtype="bf16", lora_r=16)
    fwd = activation_terms(spec, workload, "ddp")["forward_end"]
    predicted = (fwd["activations"] + fwd["attention_bias"]) / LAYERS
    for layer in counted[1:]:  # layer 0 also holds the rotary cos/sin every layer shares
        assert predicted == pytest.approx(layer, rel=0.03)


def test_dense_qlora_mlp_keeps_fp32_intermediates():
    """bitsandbytes' Linear4bit returns its input's dtype and QLoRA's residual stream is fp32, so gate, up and the
    activation between them are kept in fp32 (the issue-26 row: Llama-3-8B QLoRA s8192 allocated 18% above the
    estimate that counted them in bf16)."""
    pytest.importorskip("bitsandbytes")
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import MistralConfig

    from tests.test_estimate_lora_saved import TARGETS
    from training.qlora import quantised_random_model, quantization_config

    cfg = MistralConfig(**TINY, intermediate_size=896, sliding_window=None)
    torch.manual_seed(0)
    model = prepare_model_for_kbit_training(
        quantised_random_model(cfg, "cpu", quantization_config(), "sdpa"), use_gradient_checkpointing=False
    )
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, task_type="CAUSAL_LM"))
    inputs, _ = plain_loop_inputs()
    counted = saved_bytes_per_layer(model, inputs)
    workload = Workload(method="qlora", seq_len=SEQ, grad_checkpointing=False, load_dtype="bf16", lora_r=16)
    fwd = activation_terms(spec_from_config(cfg.to_dict(), "tiny"), workload, "ddp")["forward_end"]
    for layer in counted[1:]:
        assert (fwd["activations"] + fwd["attention_bias"]) / LAYERS == pytest.approx(layer, rel=0.02)


def test_peft_all_linear_keeps_a_folded_copy_of_each_layers_experts():
    """What the plan's all-linear-on-an-MoE line claims (generator/plan/lora_targets.py): peft adapts the fused expert
    stacks as parameters and folds each adapter into the weight on every forward (baddbmm), and the grouped GEMM keeps
    that folded [experts, out, in] copy for backward, with its inputs for the weight gradient; q,k,v,o keeps neither."""
    from peft import LoraConfig, get_peft_model
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(**TINY, intermediate_size=384, num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
    inputs, _ = plain_loop_inputs()
    r, counted = 16, {}
    for targets in (["q_proj", "k_proj", "v_proj", "o_proj"], "all-linear"):
        torch.manual_seed(0)
        model = MixtralForCausalLM._from_config(cfg, attn_implementation="sdpa").to(torch.bfloat16)
        model = get_peft_model(model, LoraConfig(r=r, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM"))
        counted[str(targets)] = saved_bytes_per_layer(model, inputs, keep_weight_shapes=True)[1]
    h, f, k, experts = cfg.hidden_size, cfg.intermediate_size, cfg.num_experts_per_tok, cfg.num_local_experts
    folded = 2 * experts * 3 * h * f  # bf16 gate_up and down stacks
    grouped_inputs = 2 * k * (h + f) * SEQ  # gathered tokens and gating product, for the weight gradients
    router_adapter = 2 * (h + r) * SEQ  # the router's adapter: its bf16 copy of the input, lora_A's output
    # the fold's factors, bf16: peft gives the fused gate_up stack twice the rank (gate and up each r)
    factors = 2 * experts * (2 * r * (h + 2 * f) + r * (f + h))
    extra = counted["all-linear"] - counted[str(["q_proj", "k_proj", "v_proj", "o_proj"])]
    assert extra == pytest.approx(folded + grouped_inputs + router_adapter + factors, rel=0.02)


def _meta_sized(tmp_path, config: dict):
    """(bf16 model, spec) of a config the closed form does not know: sized as plan sizes it (the meta build)."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    from generator.model import load_model

    directory = tmp_path / config["model_type"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    cfg = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(torch.bfloat16)
    return model, load_model(str(directory), compiled=False)


QWEN2_MOE = {**TINY, "model_type": "qwen2_moe", "intermediate_size": 384, "moe_intermediate_size": 128,
             "shared_expert_intermediate_size": 512, "num_experts": 4, "num_experts_per_tok": 2,
             "decoder_sparse_step": 1, "mlp_only_layers": []}  # fmt: skip


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_gated_shared_expert_keeps_what_a_dense_mlp_does(tmp_path, method):
    """Qwen2-MoE: beside the routed experts every token passes a dense SwiGLU (shared_expert) whose output a sigmoid
    of a 1-wide Linear scales (estimate.moe.shared_mlp). Unpriced it left a third of each layer's saved bytes out."""
    model, spec = _meta_sized(tmp_path, QWEN2_MOE)
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        from tests.test_estimate_lora_saved import TARGETS
        from training.model import experts_kept_off

        # train.py's default: the MLP names on the shared expert alone (peft 0.22 would add the routed experts)
        targets = experts_kept_off(model, TARGETS)[0]
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM"))
    inputs, _ = plain_loop_inputs()
    counted = saved_bytes_per_layer(model, inputs)
    workload = Workload(method=method, seq_len=SEQ, grad_checkpointing=False, load_dtype="bf16", lora_r=16)
    fwd = activation_terms(spec, workload, "ddp")["forward_end"]
    for layer in counted[1:]:
        assert (fwd["activations"] + fwd["attention_bias"]) / LAYERS == pytest.approx(layer, rel=0.02)


def test_ungated_shared_experts_add_what_they_keep(tmp_path):
    """GLM-4.5's shared experts (n_shared_experts x the expert width, added without a gate): what they add to a
    layer's saved bytes, the same model counted with and without them."""
    glm = {**TINY, "model_type": "glm4_moe", "intermediate_size": 384, "moe_intermediate_size": 128,
           "n_routed_experts": 4, "num_experts_per_tok": 2, "first_k_dense_replace": 0, "head_dim": 32,
           "n_group": 1, "topk_group": 1}  # fmt: skip
    inputs, _ = plain_loop_inputs()
    workload = Workload(method="full", seq_len=SEQ, grad_checkpointing=False, load_dtype="bf16")
    counted, predicted = {}, {}
    for shared in (0, 2):
        model, spec = _meta_sized(tmp_path / str(shared), {**glm, "n_shared_experts": shared})
        counted[shared] = saved_bytes_per_layer(model, inputs)[1]
        fwd = activation_terms(spec, workload, "ddp")["forward_end"]
        predicted[shared] = (fwd["activations"] + fwd["attention_bias"]) / LAYERS
    assert predicted[2] - predicted[0] == pytest.approx(counted[2] - counted[0], rel=0.02)
