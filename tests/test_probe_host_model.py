"""The tiny copy of a named model that `probe --compute --model` times for its own host rows keeps what decides the
layer's kernels (model type, expert count and top-k, biases, attention layout) and only that model's widths shrink."""

import json
from pathlib import Path

import pytest

from generator.probe.compute_host import HEADS, HIDDEN, KV_HEADS
from generator.probe.compute_host_model import host_config
from generator.probe.compute_layers import hf_config_dict

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("transformers")


def _bench_model(name: str) -> dict:
    return {k: v for k, v in json.loads((ROOT / "bench" / "models" / f"{name}.json").read_text()).items()
            if not k.startswith("_")}  # fmt: skip


def test_an_moe_keeps_its_experts_and_routing_at_tiny_widths():
    cfg = _bench_model("qwen3-30b-a3b")
    tiny = host_config(cfg, layers=4)
    assert (tiny.model_type, tiny.num_experts, tiny.num_experts_per_tok) == ("qwen3_moe", 128, 8)
    assert tiny.num_hidden_layers == 4 and tiny.hidden_size == HIDDEN and tiny.moe_intermediate_size < 768
    mixtral = host_config(hf_config_dict("mixtral-8x7b"), layers=2)
    assert (mixtral.num_local_experts, mixtral.num_experts_per_tok) == (8, 2)


def test_attention_layout_and_biases_are_kept():
    llama2 = host_config(hf_config_dict("llama-2-13b"), layers=2)  # full multi-head attention
    assert llama2.num_key_value_heads == llama2.num_attention_heads == HEADS
    qwen = host_config(hf_config_dict("qwen2.5-7b"), layers=2)  # grouped queries, q/k/v biases in its modeling code
    assert (qwen.model_type, qwen.num_attention_heads, qwen.num_key_value_heads) == ("qwen2", HEADS, KV_HEADS)
    # the real token ids (151,643) are dropped with the real vocabulary: the config class's defaults fit the tiny one
    assert qwen.vocab_size == 512 and all(t is None or t < 512 for t in (qwen.bos_token_id, qwen.eos_token_id))


@pytest.mark.parametrize("model_type", ["falcon", "phi3", "gemma2", "gpt_oss"])
def test_the_tiny_copy_builds_and_trains_for_classes_the_mistral_recipe_broke(model_type):
    """Falcon derives head_dim (a read-only property), Phi-3's config class defaults pad_token_id to 32,000 (past the
    cut vocabulary), Gemma-2 and GPT-OSS have no SDPA path, and Falcon no llama-named Linear for LoRA's default
    targets: each failed to build for its host rows. The copy now builds with the kernel the class takes (eager on
    the CPU, flex on a GPU) and the plan's targets (all-linear where no llama name is a Linear), and runs a step."""
    import torch
    from transformers import AutoConfig

    from generator.probe.clock import Clock
    from generator.probe.compute_host_model import _builder
    from generator.probe.compute_layers import attn_implementation

    cfg = AutoConfig.for_model(model_type).to_dict()
    moe = model_type == "gpt_oss"
    model = _builder(cfg, moe)(Clock("cpu"), "lora", 2, False)
    ids = torch.randint(0, 512, (1, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    assert any(p.grad is not None for p in model.parameters() if p.requires_grad)
    tiny = host_config(cfg, layers=2)
    on_gpu = {"falcon": "sdpa", "phi3": "sdpa", "gemma2": "flex_attention", "gpt_oss": "flex_attention"}[model_type]
    assert attn_implementation(tiny, cuda=True) == on_gpu
    assert attn_implementation(tiny, cuda=False) == ("sdpa" if on_gpu == "sdpa" else "eager")


@pytest.mark.parametrize("model_type", ["qwen2_moe", "deepseek_v3"])
def test_an_moe_copy_takes_train_py_s_adapters(model_type):
    """The host rows time the adapters train.py's default builds (training/model.py experts_kept_off): none on the
    fused routed experts, which peft 0.22 adds through a bare gate_proj, and the shared expert's only where the MLP
    names are not left out (Qwen1.5-MoE's; catalog.peft_moe)."""
    from transformers import AutoConfig

    from generator.probe.clock import Clock
    from generator.probe.compute_host_model import _builder

    model = _builder(AutoConfig.for_model(model_type).to_dict(), True)(Clock("cpu"), "lora", 2, False)
    adapted = {n.split(".lora_")[0] for n, _ in model.named_parameters() if ".lora_" in n}
    assert adapted and not model.peft_config["default"].target_parameters
    assert not any(".mlp.experts" in n for n in adapted)
    assert any(".mlp." in n for n in adapted) == (model_type == "qwen2_moe")


def test_the_probe_reads_a_config_file_as_plan_does(tmp_path):
    """`plan --model` takes a config.json-like file and its notes name it for `probe --compute --model`: the probe
    reads it too (a directory with config.json as before; a file that is not JSON, or absent, is nothing)."""
    path = ROOT / "bench" / "models" / "gemma2-default.json"
    cfg = hf_config_dict(str(path))
    assert cfg["model_type"] == "gemma2" and not any(k.startswith("_") for k in cfg)
    (tmp_path / "config.json").write_text(path.read_text())
    assert hf_config_dict(str(tmp_path))["head_dim"] == 256
    assert hf_config_dict(str(tmp_path / "absent.json")) is None and hf_config_dict("org/hub-id") is None


@pytest.mark.parametrize("error, calls", [("CUDA error: an illegal memory access was encountered\nSearch for "
                                           "`cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda", 1),
                                          ("Liger does not patch this architecture", 6)])  # fmt: skip
def test_a_cuda_error_stops_the_models_rows_and_a_python_one_does_not(monkeypatch, error, calls):
    """Qwen3-30B-A3B's first own row hit an illegal memory access on an H100 (2026-12-05) and the five after it failed
    the same way in the poisoned process: one CUDA error ends the model's rows, each named as not run, where a Python
    error in one row's build leaves the next rows to run."""
    from generator.model import load_model
    from generator.probe import compute_host_model
    from generator.probe.clock import Clock

    tried = []

    def failing_row(clock, variant, compiled, liger, rounds, build):
        tried.append((variant, compiled, liger))
        raise RuntimeError(error)

    monkeypatch.setattr(compute_host_model, "hf_row", failing_row)
    clock = Clock("cpu")
    model = load_model(str(ROOT / "bench" / "models" / "qwen3-30b-a3b.json"))
    cfg = _bench_model("qwen3-30b-a3b")
    rows = compute_host_model.model_host_rows(clock, model, cfg, compiled=True, liger=True, budget_s=60, rounds=2)
    assert rows == [] and len(tried) == calls and len(clock.skipped) == 6
    assert sum("not run after the CUDA error" in s for s in clock.skipped) == 6 - calls
    assert all("\n" not in s for s in clock.skipped)  # each skip one line: CUDA's paragraph of advice left out
