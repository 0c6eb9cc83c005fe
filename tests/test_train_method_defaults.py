"""Defaults that follow --method (issue 17): LoRA/QLoRA load the frozen base in bf16 and train at 2e-4, a full
fine-tune keeps fp32 masters at 1e-5; peft keeps the adapters fp32 over a bf16 base. And QLoRA from a random init:
the random weights go through the same from_pretrained + quantization config as a pretrained QLoRA load."""

from __future__ import annotations

import pytest

from training.args import build_parser, parse_args
from training.model import add_adapters, load_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.tiny_model import build_tiny_mistral

    return build_tiny_mistral(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize(
    ("argv", "lr", "dtype"),
    [
        ([], 1e-5, "fp32"),
        (["--method", "lora"], 2e-4, "bf16"),
        (["--method", "qlora"], 2e-4, "bf16"),
        (["--method", "lora", "--load-dtype", "fp32", "--lr", "3e-3"], 3e-3, "fp32"),  # explicit values win
        (["--method", "full", "--load-dtype", "bf16"], 1e-5, "bf16"),
    ],
)
def test_lr_and_load_dtype_resolve_per_method(argv, lr, dtype):
    args = parse_args(argv)
    assert (args.lr, args.load_dtype) == (lr, dtype)


def test_help_states_every_default_and_the_per_method_ones(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping inside a help text
    lines: dict[str, str] = {}
    for line in build_parser().format_help().split("options:")[1].splitlines():
        if line.startswith("  -"):
            flag = line.split()[0].rstrip(",")
            lines[flag] = line.strip()
        elif line.strip():  # help placed under a long option string
            lines[flag] += " " + line.strip()
    assert lines["--lr"].endswith("peak learning rate (default: 1e-5 for full, 2e-4 for lora/qlora)")
    assert "auto: fp32 for full, bf16 for lora/qlora" in lines["--load-dtype"]
    for flag, default in [("--seq-len", "4096"), ("--warmup-steps", "10"), ("--lora-r", "16"), ("--method", "full")]:
        assert lines[flag].endswith(f"(default: {default})"), lines[flag]


def test_lora_base_loads_in_bf16_and_adapters_stay_fp32(tiny):
    """peft's PeftModel upcasts bf16 adapter weights to fp32 (autocast_adapter_dtype=True, tuners_utils
    cast_adapter_dtype), so the default bf16 base trains fp32 adapters."""
    import torch
    from transformers import AutoConfig

    args = parse_args(["--model", str(tiny), "--method", "lora", "--lora-r", "4"])
    model, _ = add_adapters(load_model(args, AutoConfig.from_pretrained(str(tiny)), use_cuda=False), args, False)
    trainable = {n: p.dtype for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.dtype for n, p in model.named_parameters() if not p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert set(trainable.values()) == {torch.float32}
    assert set(frozen.values()) == {torch.bfloat16}


def _capture(monkeypatch, cls) -> list[dict]:
    from transformers import MistralForCausalLM

    calls: list[dict] = []

    def fake_from_pretrained(path, **kwargs):
        calls.append({"path": path, **kwargs})
        return MistralForCausalLM(kwargs["config"])  # any model: load_model only sets use_cache on it

    monkeypatch.setattr(cls, "from_pretrained", fake_from_pretrained)
    return calls


def test_qlora_random_init_quantises_with_the_pretrained_loads_config(tiny, monkeypatch):
    """The refusal is gone: a random QLoRA init is built by training/qlora.py one layer at a time (never the whole
    bf16 model, never through from_pretrained) with the very quantization config and attention a pretrained QLoRA
    load gets (CPU stands in for the GPU: both loaders are faked)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, MistralForCausalLM

    import training.qlora as qlora

    config = AutoConfig.from_pretrained(str(tiny))
    random_calls: list[dict] = []
    monkeypatch.setattr(
        qlora, "quantised_random_model", lambda cfg, dev, **kw: random_calls.append(kw) or MistralForCausalLM(cfg)
    )
    not_used = _capture(monkeypatch, MistralForCausalLM)
    args = parse_args(["--model", str(tiny), "--init", "random", "--method", "qlora"])
    load_model(args, config, use_cuda=True, init_device="cpu")
    pretrained_calls = _capture(monkeypatch, AutoModelForCausalLM)
    load_model(parse_args(["--model", str(tiny), "--method", "qlora"]), config, use_cuda=True, init_device="cpu")

    (rnd,), (pre,), [] = random_calls, pretrained_calls, not_used
    q_rnd, q_pre = rnd.pop("quantization_config"), pre.pop("quantization_config")
    assert q_rnd.to_dict() == q_pre.to_dict()
    assert (q_rnd.bnb_4bit_quant_type, q_rnd.bnb_4bit_use_double_quant) == ("nf4", True)
    assert q_rnd.bnb_4bit_quant_storage == torch.bfloat16  # shardable by FSDP / ZeRO-3
    pre.pop("path"), pre.pop("config")
    assert rnd == pre  # same dtype (bf16 by default), attention, no device_map on the host
    assert rnd["dtype"] == torch.bfloat16 and "device_map" not in rnd


def test_qlora_random_init_with_bitsandbytes_gives_a_4bit_model_peft_prepares(tiny):
    """Real quantisation where bitsandbytes is installed (it quantises on CPU since 0.46; CI has no bitsandbytes and
    skips): Linear4bit layers holding the random weights to NF4 precision, flagged as peft and accelerate check."""
    pytest.importorskip("bitsandbytes")
    import bitsandbytes as bnb
    import bitsandbytes.functional as bnbf
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.qlora import quantised_random_model, quantization_config

    config = AutoConfig.from_pretrained(str(tiny))
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    torch.manual_seed(0)
    model = quantised_random_model(
        config, "cpu", quantization_config=quantization_config(), dtype=torch.bfloat16, attn_implementation="sdpa"
    )
    q_proj = model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj, bnb.nn.Linear4bit)
    assert model.is_loaded_in_4bit and model.hf_quantizer is not None and model.config.quantization_config
    # layer 0's first weight, drawn as the layer-by-layer build draws it: layer 0's own seed, a bf16 Linear through
    # the model's _init_weights (training/qlora.py)
    torch.manual_seed(torch.initial_seed() + 1)
    plain = torch.nn.Linear(q_proj.in_features, q_proj.out_features, bias=False, dtype=torch.bfloat16)
    reference._init_weights(plain)
    want = plain.weight.float()
    got = bnbf.dequantize_4bit(q_proj.weight.data, q_proj.weight.quant_state).float()
    assert (got - want).abs().max() < 0.25 * want.abs().max()  # NF4: 16 levels per 64-weight block
    torch.testing.assert_close(model.model.norm.weight, reference.model.norm.weight)  # unquantised parts exact

    args = parse_args(["--model", str(tiny), "--init", "random", "--method", "qlora", "--lora-r", "4"])
    peft_model, _ = add_adapters(model, args, grad_checkpointing=False)
    trainable = {n: p.dtype for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable) and set(trainable.values()) == {torch.float32}
