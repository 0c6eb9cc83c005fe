"""Issue 26 on CPU: MoE experts never compute in fp32 under train.py, QLoRA's NF4 experts compute what the fused
experts compute, and a QLoRA random init is built one decoder layer at a time (bitsandbytes 0.50 quantises on CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from training.moe import Nf4Experts, cast_experts_for_compute, expert_modules  # noqa: E402


def tiny_mixtral_config(**overrides):
    cfg = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=128,
    )
    cfg.update(overrides)
    return transformers.MixtralConfig(**cfg)


@pytest.fixture
def mixtral_fp32():
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(tiny_mixtral_config()).float()


@pytest.fixture
def grouped_mm_dtypes(monkeypatch):
    """The (input, weight) dtypes every expert GEMM is handed (transformers' one dispatch point)."""
    import transformers.integrations.moe as moe

    seen: list[tuple] = []
    original = moe._grouped_mm

    def spy(input, weight, offs):
        seen.append(weight.dtype)
        return original(input, weight, offs)

    monkeypatch.setattr(moe, "_grouped_mm", spy)
    return seen


def _loss(model, autocast=True):
    x = torch.arange(32).reshape(2, 16) % 100
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return model(input_ids=x, labels=x).loss


def test_fp32_experts_run_fp32_gemms_without_the_cast(mixtral_fp32, grouped_mm_dtypes):
    _loss(mixtral_fp32)
    assert set(grouped_mm_dtypes) == {torch.float32}  # the trap: autocast does not reach the experts


def test_cast_gives_experts_bf16_gemms_and_fp32_master_gradients(mixtral_fp32, grouped_mm_dtypes):
    names_before = [n for n, _ in mixtral_fp32.named_parameters()]
    assert cast_experts_for_compute(mixtral_fp32) == 3  # one experts module per layer, all fp32
    _loss(mixtral_fp32).backward()
    assert set(grouped_mm_dtypes) == {torch.bfloat16}
    experts = mixtral_fp32.model.layers[0].mlp.experts
    assert experts.gate_up_proj.dtype == torch.float32 and experts.gate_up_proj.grad.dtype == torch.float32
    assert experts.down_proj.grad.abs().sum() > 0
    # same parameter names: checkpoints and the Hugging Face export see the model as loaded
    assert [n for n, _ in mixtral_fp32.named_parameters()] == names_before


def test_cast_survives_activation_checkpointing_recompute(mixtral_fp32, grouped_mm_dtypes):
    from training.model import enable_grad_checkpointing

    enable_grad_checkpointing(mixtral_fp32)
    mixtral_fp32.train()
    cast_experts_for_compute(mixtral_fp32)
    _loss(mixtral_fp32).backward()
    assert set(grouped_mm_dtypes) == {torch.bfloat16}
    assert len(grouped_mm_dtypes) == 2 * 2 * 3  # gate/up and down, forward and recompute, 3 layers
    assert mixtral_fp32.model.layers[2].mlp.experts.gate_up_proj.grad.abs().sum() > 0


def test_cast_leaves_a_forward_without_autocast_and_a_bf16_model_alone(mixtral_fp32, grouped_mm_dtypes):
    cast_experts_for_compute(mixtral_fp32)
    _loss(mixtral_fp32, autocast=False)
    assert set(grouped_mm_dtypes) == {torch.float32}
    bf16 = transformers.MixtralForCausalLM(tiny_mixtral_config()).to(torch.bfloat16)
    assert cast_experts_for_compute(bf16) == 0


def test_dense_models_have_no_expert_modules():
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    assert expert_modules(transformers.MistralForCausalLM(cfg)) == []


def _split_of(fused):
    def linear(w):
        layer = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        layer.weight.data.copy_(w.detach())
        return layer

    n = fused.gate_up_proj.shape[0]
    return Nf4Experts(
        [linear(fused.gate_up_proj[e]) for e in range(n)], [linear(fused.down_proj[e]) for e in range(n)], fused.act_fn
    )


def _routing(n: int, tokens: int, seed: int):
    torch.manual_seed(seed)
    top_k_index = torch.stack([torch.randperm(n)[:2] for _ in range(tokens)])
    top_k_index[: tokens // 2, 0] = 0  # an expert far busier than the rest, and (below) one that gets no token
    top_k_index[top_k_index == n - 1] = 1 + (top_k_index[top_k_index == n - 1] % (n - 2))
    top_k_index[:, 1] = torch.where(top_k_index[:, 1] == top_k_index[:, 0], (top_k_index[:, 0] + 1) % (n - 1),
                                    top_k_index[:, 1])  # fmt: skip
    return top_k_index, torch.softmax(torch.randn(tokens, 2), dim=-1)


def test_per_expert_layers_compute_what_the_fused_experts_compute(mixtral_fp32):
    """The NF4 module's routing and sums, checked with plain Linear layers holding the fused weights exactly."""
    fused = mixtral_fp32.model.layers[1].mlp.experts
    split = _split_of(fused)
    torch.manual_seed(1)
    hidden = torch.randn(24, 64)
    top_k_index = torch.stack([torch.randperm(split.num_experts)[:2] for _ in range(24)])
    top_k_weights = torch.softmax(torch.randn(24, 2), dim=-1)
    with torch.no_grad():
        expected = fused(hidden, top_k_index, top_k_weights)
        got = split(hidden, top_k_index, top_k_weights)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_per_expert_layers_give_the_fused_experts_gradients(mixtral_fp32):
    """Input, router-weight and weight gradients through the sorted dispatch equal the fused module's, with one
    expert idle and one taking half the tokens."""
    fused = mixtral_fp32.model.layers[0].mlp.experts
    split = _split_of(fused)
    n = fused.gate_up_proj.shape[0]
    top_k_index, weights = _routing(n, 40, seed=3)
    assert (top_k_index == n - 1).sum() == 0 and (top_k_index[:, 0] != top_k_index[:, 1]).all()
    grads = []
    for module in (fused, split):
        hidden = torch.randn(40, 64, generator=torch.Generator().manual_seed(4)).requires_grad_()
        w = weights.clone().requires_grad_()
        module.zero_grad()
        (module(hidden, top_k_index, w) ** 2).sum().backward()
        grads.append((hidden.grad, w.grad))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(split.down[0].weight.grad, fused.down_proj.grad[0], rtol=1e-5, atol=1e-5)
    assert split.down[n - 1].weight.grad is None  # the idle expert ran nothing


def test_dispatch_reads_the_host_once_a_layer_not_once_an_expert(mixtral_fp32):
    """No nonzero / item in the forward (each a host synchronisation on a GPU; transformers' loop runs one per
    routed expert): the expert counts are the one read."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    split = _split_of(mixtral_fp32.model.layers[0].mlp.experts)
    top_k_index, weights = _routing(split.num_experts, 32, seed=5)
    with torch.no_grad(), Ops() as ops:
        split(torch.randn(32, 64), top_k_index, weights)
    reads = [op for op in ops.seen if op.split(".")[0] in ("nonzero", "_local_scalar_dense", "item")]
    assert reads == [] and any(op.startswith("bincount") for op in ops.seen)


# -- QLoRA random init, layer by layer ----------------------------------------------------------------------------


@pytest.fixture
def bnb():
    return pytest.importorskip("bitsandbytes")


def _quantised(seed: int, config=None, **kw):
    from training.qlora import quantised_random_model, quantization_config

    torch.manual_seed(seed)
    return quantised_random_model(config or tiny_mixtral_config(), "cpu", quantization_config(), "sdpa", **kw)


def _dequantised(bnb, linear):
    return bnb.functional.dequantize_4bit(linear.weight.data, linear.weight.quant_state)


def test_random_qlora_model_is_what_a_quantised_load_gives(bnb):
    model = _quantised(0)
    assert model.is_loaded_in_4bit and model.hf_quantizer is not None
    assert model.config.quantization_config.load_in_4bit
    leftovers = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"]
    assert leftovers == []
    layer = model.model.layers[2]
    assert isinstance(layer.self_attn.q_proj, bnb.nn.Linear4bit) and layer.self_attn.q_proj.weight.bnb_quantized
    assert isinstance(layer.mlp.experts, Nf4Experts)
    assert all(isinstance(m, bnb.nn.Linear4bit) for m in layer.mlp.experts.gate_up)
    assert not isinstance(model.lm_head, bnb.nn.Linear4bit)  # kept out of 4-bit, as from_pretrained keeps it
    # the random weights follow _init_weights: normal(0, initializer_range), norms at one
    std = float(_dequantised(bnb, layer.mlp.experts.down[0]).float().std())
    assert abs(std - model.config.initializer_range) < 0.004
    assert torch.all(layer.input_layernorm.weight == 1)
    fresh = transformers.MixtralForCausalLM(tiny_mixtral_config()).model.rotary_emb
    assert torch.equal(model.model.rotary_emb.inv_freq, fresh.inv_freq)


def test_random_qlora_model_is_the_same_for_the_same_seed(bnb):
    a, b, c = _quantised(5), _quantised(5), _quantised(6)
    wa = _dequantised(bnb, a.model.layers[1].mlp.experts.gate_up[3])
    assert torch.equal(wa, _dequantised(bnb, b.model.layers[1].mlp.experts.gate_up[3]))
    assert not torch.equal(wa, _dequantised(bnb, c.model.layers[1].mlp.experts.gate_up[3]))
    assert torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)


def test_no_two_decoder_layers_hold_bf16_experts_at_once(bnb, monkeypatch):
    """The bf16 experts (the bulk of an MoE: 90 GB for Mixtral-8x7B) exist for one layer at a time; Linear weights are
    quantised as each is drawn."""
    import training.qlora as qlora

    held = []
    original = qlora.materialise

    def watch(model, root, device, skip=frozenset()):
        original(model, root, device, skip)
        layers = model.model.layers
        held.append(sum(any(p.dim() >= 3 and p.device.type != "meta" for p in layer.parameters()) for layer in layers))
        plain = [m for m in root.modules() if type(m) is torch.nn.Linear and m is not getattr(model, "lm_head", None)]
        assert plain == []  # every decoder Linear drawn so far is already NF4

    monkeypatch.setattr(qlora, "materialise", watch)
    _quantised(0)
    assert held[:3] == [1, 1, 1]  # each layer's bf16 experts, quantised before the next layer is drawn
    assert held[3] == 0  # the embeddings, final norm and lm_head come last, with no bf16 experts left


def test_random_qlora_model_trains_through_peft(bnb):
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    model = prepare_model_for_kbit_training(
        _quantised(0), use_gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    # peft casts what is not 4-bit to fp32; the experts are 4-bit, so that is only embeddings, norms, router, lm_head
    fp32 = sum(p.numel() for p in model.parameters() if p.dtype == torch.float32)
    cfg = model.config
    outside = 2 * cfg.vocab_size * cfg.hidden_size + (2 * cfg.num_hidden_layers + 1) * cfg.hidden_size
    assert fp32 == outside + cfg.num_hidden_layers * cfg.num_local_experts * cfg.hidden_size
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    peft_model.train()
    loss = _loss(peft_model)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in peft_model.parameters() if p.requires_grad)


def test_a_dense_model_quantises_every_decoder_linear(bnb):
    cfg = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4
    )
    model = _quantised(0, config=cfg)
    linears = [m for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 2 * 7 and all(isinstance(m, bnb.nn.Linear4bit) for m in linears)
    assert torch.isfinite(_loss(model, autocast=False))


def test_an_out_of_memory_while_loading_reaches_train_pys_one_line(monkeypatch):
    """load_model lets a CUDA out-of-memory through, so train.py's handler (training/oom.py) explains it in one line
    with the load phase's prediction and exit 3 (tests/test_train_oom.py covers that line)."""
    from argparse import Namespace

    from training import model as model_mod

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 85.00 GiB")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", oom)
    args = Namespace(
        attn_implementation="sdpa", load_dtype="fp32", method="full", init="random", model="mistralai/Mixtral-8x7B"
    )
    with pytest.raises(torch.OutOfMemoryError):
        model_mod.load_model(args, tiny_mixtral_config(), use_cuda=False)


def test_qlora_refuses_experts_that_run_densely_in_one_line(bnb):
    """Llama-4's experts take the hidden states alone and run every expert over every token; train.py's per-expert
    NF4 module is called as routed experts are, so the load refuses them in one line (plan refuses first:
    generator.plan.model_reasons.qlora_problem) instead of a TypeError at the first step."""
    from generator.errors import UserError

    cfg = transformers.AutoConfig.for_model(
        "llama4_text", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=256, intermediate_size=48, intermediate_size_mlp=96, num_local_experts=4, num_experts_per_tok=1,
        interleave_moe_layer_step=1, head_dim=16,
    )  # fmt: skip
    with pytest.raises(UserError, match="Llama4TextExperts runs every expert over every token"):
        _quantised(0, cfg)


def test_qlora_refuses_an_experts_layout_it_does_not_quantise_with_the_plans_words(bnb):
    """Nemotron-H's ungated experts (has_gate=False): the load's refusal names the same flag as the plan's
    (model.config_dims.odd_layout, one reading of transformers' layout flags for both)."""
    from generator.errors import UserError

    cfg = transformers.AutoConfig.for_model(
        "nemotron_h", hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
        intermediate_size=96, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=48, mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2,
        use_mamba_kernels=False, layers_block_type=["moe", "full_attention"],
    )  # fmt: skip
    with pytest.raises(UserError, match=r"NemotronHExperts's experts layout \(has_gate=False\) is not one train.py"):
        _quantised(0, cfg)
