"""train.py --precision fp8 on CPU: which Linear layers float8 takes, torchao's conversion of them, the per-layer
compile, and the refusals (no GPU, a GPU without float8, no torchao, LoRA) before any model is loaded. The float8
matmul itself needs CUDA; its speed and loss curves are measured on the GPU (issue 20)."""

from __future__ import annotations

import sys

import pytest

from generator.errors import UserError
from training.args import parse_args
from training.errors import EXIT_USER_ERROR
from training.precision import check_fp8, compile_layers, config_asks_fp8, decoder_layers, fp8_filter

DECODER_LINEARS = {
    f"model.layers.{i}.{part}"
    for i in range(2)
    for part in (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    )
}


@pytest.fixture()
def tiny_model(tmp_path):
    """A tiny Mistral whose lm_head has dims divisible by 16 (vocab 128), so only its name keeps it out, plus one
    Linear inside a decoder layer whose output (40) float8 cannot take."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.tiny_model import build_tiny_mistral

    model = AutoModelForCausalLM.from_pretrained(str(build_tiny_mistral(tmp_path, vocab_size=128)))
    assert model.lm_head.out_features % 16 == 0 and model.lm_head.in_features % 16 == 0
    model.model.layers[0].odd = torch.nn.Linear(64, 40)
    return model


def test_filter_takes_exactly_the_decoder_linears(tiny_model):
    picked = {name for name, m in tiny_model.named_modules() if fp8_filter(m, name)}
    assert picked == DECODER_LINEARS


def test_torchao_converts_exactly_the_filtered_layers_on_cpu(tiny_model):
    pytest.importorskip("torchao.float8")
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    from training.precision import fp8_config, fp8_layer_names

    convert_to_float8_training(tiny_model, module_filter_fn=fp8_filter, config=fp8_config("tensorwise", False))
    assert set(fp8_layer_names(tiny_model)) == DECODER_LINEARS
    assert not isinstance(tiny_model.lm_head, Float8Linear)
    assert not isinstance(tiny_model.model.layers[0].odd, Float8Linear)


@pytest.mark.parametrize(("recipe", "fsdp2", "all_gather"), [("tensorwise", True, True), ("tensorwise", False, False)])
def test_float8_all_gather_only_under_fsdp2(monkeypatch, recipe, fsdp2, all_gather):
    pytest.importorskip("torchao.float8")
    pytest.importorskip("accelerate.utils", reason="AORecipeKwargs")
    from training.precision import ao_recipe

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true" if fsdp2 else "false")
    monkeypatch.setenv("FSDP_VERSION", "2")
    handler = ao_recipe(recipe)
    assert handler.config.enable_fsdp_float8_all_gather is all_gather
    assert handler.module_filter_func is fp8_filter  # accelerate converts with train.py's filter, not its own


def test_rowwise_never_asks_for_the_float8_all_gather(monkeypatch):
    pytest.importorskip("torchao.float8")
    from training.precision import fp8_config

    cfg = fp8_config("rowwise", fsdp2=True)
    assert cfg.enable_fsdp_float8_all_gather is False
    assert cfg.cast_config_weight.scaling_granularity.value == "axiswise"


def test_each_decoder_layer_is_compiled_in_place(tiny_model):
    layers_before = list(tiny_model.model.layers)
    assert compile_layers(tiny_model) == 2
    assert list(tiny_model.model.layers) == layers_before  # same objects, same class: FSDP2's wrap policy still matches
    assert all(getattr(layer, "_compiled_call_impl", None) is not None for layer in tiny_model.model.layers)
    assert getattr(tiny_model.lm_head, "_compiled_call_impl", None) is None


def test_decoder_layers_are_found_through_peft(tiny_model):
    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(tiny_model, LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    assert decoder_layers(wrapped) == list(tiny_model.model.layers)


# -- refusals ---------------------------------------------------------------------------------------------------------
def _fake_torchao(monkeypatch):
    """check_fp8 only imports torchao.float8: a stand-in lets the GPU checks run where torchao is not installed."""
    import types

    monkeypatch.setitem(sys.modules, "torchao", types.ModuleType("torchao"))
    monkeypatch.setitem(sys.modules, "torchao.float8", types.ModuleType("torchao.float8"))


def test_refuses_without_torchao(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.float8", None)  # import raises ImportError
    with pytest.raises(UserError, match=r"needs torchao: pip install"):
        check_fp8("full")


def test_refuses_on_cpu(monkeypatch):
    import torch

    _fake_torchao(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"needs a CUDA GPU with float8 tensor cores"):
        check_fp8("full")


@pytest.mark.parametrize(("cap", "ok"), [((8, 0), False), ((8, 6), False), ((8, 9), True), ((9, 0), True)])
def test_refuses_a_gpu_without_float8(monkeypatch, cap, ok):
    import torch

    _fake_torchao(monkeypatch)
    monkeypatch.delenv("FSDP_CPU_RAM_EFFICIENT_LOADING", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cap)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "FakeGPU")
    if ok:
        check_fp8("full")
    else:
        with pytest.raises(UserError, match=rf"needs compute capability 8.9 or newer.*FakeGPU is {cap[0]}\.{cap[1]}"):
            check_fp8("full")


def test_refuses_fsdp_efficient_loading(monkeypatch):
    import torch

    _fake_torchao(monkeypatch)
    monkeypatch.setenv("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(UserError, match=r"fsdp_cpu_ram_efficient_loading: set it false"):
        check_fp8("full")


def test_refuses_qlora():
    with pytest.raises(UserError, match=r"does not apply to --method qlora: QLoRA's base is 4-bit"):
        check_fp8("qlora")


def test_lora_takes_the_frozen_base_not_the_adapters(tiny_model):
    """Under peft only each adapted projection's `base_layer` goes to float8; the trained rank-r adapters stay bf16,
    and after a float8 forward and backward (torch's CPU _scaled_mm) only the adapters hold gradients."""
    pytest.importorskip("torchao.float8")
    import torch
    from peft import LoraConfig, get_peft_model
    from torchao.float8 import convert_to_float8_training

    from training.precision import fp8_config, fp8_layer_names

    del tiny_model.model.layers[0].odd
    model = get_peft_model(tiny_model, LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    convert_to_float8_training(model, module_filter_fn=fp8_filter, config=fp8_config("tensorwise", False))
    names = fp8_layer_names(model)
    assert {n.removeprefix("base_model.model.").removesuffix(".base_layer") for n in names} == DECODER_LINEARS
    assert all(n.endswith(".base_layer") for n in names)  # rank 16 divides by 16, so only the filter keeps them out
    ids = torch.randint(0, 128, (2, 32))
    model(input_ids=ids, labels=ids).loss.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    assert with_grad and all(".lora_A." in n or ".lora_B." in n for n in with_grad)


def test_compiled_float8_linear_drops_a_frozen_weight_gradient():
    """torchao's float8 backward computes the weight gradient unconditionally (float8_linear.py); compiled, as train.py
    compiles each decoder layer, AOTAutograd keeps only the GEMMs whose results are needed: with the weight frozen (a
    LoRA base) the backward runs one matmul (the input gradient), with it trainable two. Counted on CPU."""
    pytest.importorskip("torchao.float8")
    import torch
    from torch._dynamo.testing import AotEagerAndRecordGraphs
    from torchao.float8 import convert_to_float8_training

    from training.precision import fp8_config

    def backward_mms(frozen: bool) -> int:
        torch._dynamo.reset()
        layer = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False))
        layer[0].weight.requires_grad_(not frozen)
        convert_to_float8_training(layer, module_filter_fn=fp8_filter, config=fp8_config("tensorwise", False))
        backend = AotEagerAndRecordGraphs()
        x = torch.randn(16, 64, requires_grad=True)
        torch.compile(layer, backend=backend)(x).sum().backward()
        (graph,) = backend.bw_graphs
        mms = (torch.ops.aten.mm.default, torch.ops.aten._scaled_mm.default)
        return sum(n.target in mms for n in graph.graph.nodes)

    assert backward_mms(frozen=True) == 1
    assert backward_mms(frozen=False) == 2


def test_refused_before_the_model_is_loaded(monkeypatch, tmp_path, capsys):
    """Through train.py's entry point on this CPU machine: one line, exit 2, and load_model never runs."""
    import train

    def must_not_load(*a, **k):
        raise AssertionError("the model was loaded before the fp8 check")

    monkeypatch.setattr(train, "load_model", must_not_load)
    monkeypatch.setattr(train, "load_config_and_tokenizer", must_not_load)
    argv = ["--precision", "fp8", "--global-batch", "1", "--output-dir", str(tmp_path / "o")]
    assert train.main(argv) == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("train.py: error: --precision fp8 needs ")


def test_config_mixed_precision_fp8_means_fp8(monkeypatch):
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    assert not config_asks_fp8()
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert not config_asks_fp8()
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp8")
    assert config_asks_fp8()


def test_bf16_stays_the_default():
    args = parse_args([])
    assert (args.precision, args.fp8_recipe) == ("bf16", "tensorwise")
