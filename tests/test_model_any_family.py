"""`plan --model DIR` for architectures beyond the llama family, each config.json the installed transformers' own
defaults for that model_type (most are a released checkpoint's shape): sized through transformers' config object
(GPT-2's n_embd, a multimodal checkpoint's text config, Gemma-3n's per-layer widths), built on the meta device without
allocating (DeepSeek-V3 filled a 30 GB buffer for real before), FSDP's layer class found in the built model, and
every architecture transformers cannot build, or that has no attention, refused in one line with no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.errors import UserError
from generator.model import load_model

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# model_type -> (FSDP's decoder layer class, what makes it a case)
SIZED = {
    "gpt2": ("GPT2Block", "n_embd / n_layer / n_head through the config's attribute_map"),
    "mpt": ("MptBlock", "d_model / n_layers through the attribute_map, eager attention only"),
    "gemma3": ("Gemma3DecoderLayer", "multimodal: dimensions in text_config, a vision tower beside the decoder"),
    "llama4": ("Llama4TextDecoderLayer", "multimodal config, MoE text decoder"),
    "gemma3n_text": ("Gemma3nTextDecoderLayer", "per-layer MLP widths given as a list"),
    "deepseek_v3": ("DeepseekV3DecoderLayer", "671B: a buffer its __init__ fills must stay on meta"),
    "phi3": ("Phi3DecoderLayer", "fused qkv and gate_up projections"),
}
REFUSED = {
    "mamba": "names no attention heads",
    "rwkv": "names no attention heads",
    # transformers' DeepSeek-V2 default leaves num_experts_per_tok None: priced, every expert would count as active
    "deepseek_v2": "64 experts but no routed top-k",
}


def _config_dir(tmp_path: Path, model_type: str) -> Path:
    if model_type not in CONFIG_MAPPING_NAMES:
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    cfg = AutoConfig.for_model(model_type).to_dict()
    cfg["model_type"] = model_type
    (tmp_path / model_type).mkdir()
    (tmp_path / model_type / "config.json").write_text(json.dumps(cfg, default=str))
    return tmp_path / model_type


@pytest.mark.parametrize("model_type", sorted(SIZED))
def test_sized_with_its_decoder_layer_class(tmp_path, model_type):
    spec = load_model(str(_config_dir(tmp_path, model_type)), compiled=False)
    assert spec.decoder_layer_cls == SIZED[model_type][0]
    assert spec.hidden_size > 0 and spec.num_heads > 0 and spec.num_layers > 0
    assert 0 < spec.matmul_params_active <= spec.params_total
    assert spec.params_total > spec.num_layers * spec.hidden_size**2  # at least the attention projections


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_no_attention_is_one_user_error(tmp_path, model_type):
    with pytest.raises(UserError, match=REFUSED[model_type]):
        load_model(str(_config_dir(tmp_path, model_type)), compiled=False)


def _plan_error(capsys, *argv: str) -> list[str]:
    """`plan` in this process (the CLI's own entry point, without a fresh interpreter's imports): it must exit 2
    (an exception escaping main fails the test) and leave the error lines it printed."""
    from generator.cli import main

    assert main(["plan", *argv]) == 2
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


def test_a_config_transformers_cannot_build_is_one_line(tmp_path, capsys):
    d = tmp_path / "broken"
    d.mkdir()
    broken = {"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 3,
              "head_dim": None, "vocab_size": 100}  # fmt: skip
    (d / "config.json").write_text(json.dumps(broken))
    errors = _plan_error(capsys, "--model", str(d), "--machine", "h200-sxm-2")
    assert len(errors) == 1 and "cannot build model_type 'llama4_text'" in errors[0], errors


def test_a_multimodal_checkpoint_plans_fsdp_around_its_decoder_layers(tmp_path, capsys):
    from generator.cli import main

    d = _config_dir(tmp_path, "gemma3")
    out = tmp_path / "g.yaml"
    argv = ["plan", "--model", str(d), "--machine", "h200-sxm-2", "--strategy", "fsdp", "--output", str(out)]
    assert main(argv) == 0
    assert "fsdp_transformer_layer_cls_to_wrap: Gemma3DecoderLayer" in out.read_text()


@pytest.mark.parametrize("script", ["trainer", "custom"])
def test_default_lora_targets_the_model_lacks_become_all_linear_with_a_reason(tmp_path, capsys, script):
    from generator.check.written_for import written_for
    from generator.cli import main
    from generator.estimate.scripts import ALL_LINEAR

    d = _config_dir(tmp_path, "phi3")
    assert "qkv_proj" in load_model(str(d)).linear_names
    out = tmp_path / f"{script}.yaml"
    argv = ["plan", "--model", str(d), "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora",
            "--script", script, "--output", str(out), "--json"]  # fmt: skip
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    assert any(r.startswith("LoRA targets: all linear layers: phi3 has no q_proj, v_proj") for r in plan["reasons"])
    if script == "trainer":
        assert "--lora_target_modules all-linear" in plan["launch_command"]
    else:
        assert any("target_modules='all-linear'" in s for s in plan["loop_settings"])
    # check reads the same targets back from the header, so its memory verdict is the plan's
    assert written_for(out.read_text())[1].lora_targets == ALL_LINEAR
    assert main(["check", str(out), "--machine", "h200-sxm-2", "--script", script, "--json"]) == 0


def test_named_lora_targets_the_model_lacks_are_one_line(tmp_path, capsys):
    d = _config_dir(tmp_path, "phi3")
    argv = ["--model", str(d), "--machine", "h200-sxm-2", "--method", "lora", "--lora-targets", "q_proj,v_proj"]
    assert _plan_error(capsys, *argv) == [
        "error: --lora-targets: phi3 has no q_proj, v_proj (its decoder layer's linear layers: down_proj, "
        "gate_up_proj, o_proj, qkv_proj); use --lora-targets all-linear"
    ]


TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)  # fmt: skip


def _tiny_dir(tmp_path: Path, model_type: str, **extra) -> Path:
    from tests.tiny_model import build_tokenizer

    d = tmp_path / f"tiny-{model_type}"
    build_tokenizer(d)
    (d / "config.json").write_text(json.dumps({**TINY, **extra, "model_type": model_type}))
    return d


def _start(model: Path, out: Path, *flags: str) -> tuple[subprocess.Popen, Path]:
    """train.py for two CPU steps with `flags`, in the background (independent runs start together: each spends most
    of its time importing, on one core of CI's two)."""
    data = ROOT / "recipes" / "data" / "synthetic_instruct.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "train.py", "--model", str(model), "--init", "random", "--seq-len", "64", "--micro-batch",
         "2", "--global-batch", "2", "--max-steps", "2", "--no-export", "--dataset", str(data), "--output-dir",
         str(out), *flags],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        env=dict(os.environ, HF_DATASETS_CACHE=str(out.with_name(out.name + "-datasets"))),  # an Arrow cache each
    )  # fmt: skip
    return proc, out


def _start_record(run: tuple[subprocess.Popen, Path]) -> dict:
    """The run's start record, once it has finished cleanly."""
    proc, out = run
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return next(r for r in records if r.get("event") == "start")


def _train(model: Path, out: Path, *flags: str) -> dict:
    return _start_record(_start(model, out, *flags))


def test_train_py_adapts_every_linear_layer_of_a_fused_projection_architecture(tmp_path, capsys):
    """Phi-3's qkv_proj and gate_up_proj: train.py's default names would adapt only o_proj and down_proj."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from generator.cli import main

    d = _tiny_dir(tmp_path, "phi3")
    argv = ["plan", "--model", str(d), "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora",
            "--precision", "bf16", "--seq-len", "512", "--json", "--output", str(tmp_path / "p.yaml")]  # fmt: skip
    assert main(argv) == 0
    words = json.loads(capsys.readouterr().out)["launch_command"].split()
    assert words[words.index("--lora-targets") + 1] == "all-linear"
    start = _train(d, tmp_path / "out", "--method", "lora", "--lora-targets", "all-linear")
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(d))
    lora = LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM")
    expected = sum(p.numel() for p in get_peft_model(model, lora).parameters() if p.requires_grad)
    assert start["trainable_params"] == expected


def test_train_py_lora_on_an_moe_adapts_its_linear_layers_and_runs_with_peft_adapted_experts(tmp_path):
    """OLMoE: peft maps gate_proj/up_proj/down_proj onto its 3-D experts. train.py's default targets stay on its
    Linear layers, as on Mixtral and in the estimate; named explicitly, peft adapts the experts (torch's parametrize
    then holds their weights), which the experts' bf16 cast (training/moe.py) once stopped on."""
    d = _tiny_dir(tmp_path, "olmoe", num_experts=4, num_experts_per_tok=2)
    named = ("--lora-targets", "q_proj,v_proj,down_proj")
    runs = (_start(d, tmp_path / "default", "--method", "lora"), _start(d, tmp_path / "experts", "--method", "lora",
                                                                       *named))  # fmt: skip
    linear, experts = map(_start_record, runs)
    r, h, heads, kv = 16, TINY["hidden_size"], TINY["num_attention_heads"], TINY["num_key_value_heads"]
    head_dim = h // heads
    per_layer = r * (h + heads * head_dim) + 2 * r * (h + kv * head_dim) + r * (heads * head_dim + h)  # q, k, v, o
    assert linear["trainable_params"] == TINY["num_hidden_layers"] * per_layer
    q_and_v = TINY["num_hidden_layers"] * (r * (h + heads * head_dim) + r * (h + kv * head_dim))
    assert experts["trainable_params"] > q_and_v  # the experts' down_proj adapters on top of q and v


@pytest.mark.parametrize("script", ["train.py", "trainer"])
def test_all_linear_on_an_moe_is_named_where_peft_adapts_the_experts(capsys, script):
    """peft's all-linear adapts Mixtral's router and experts (TRL's and a plain loop's spelling); train.py's own list
    stays on the Linear layers the estimate prices."""
    from generator.cli import main

    argv = ["plan", "--model", "mixtral-8x7b", "--machine", "hgx-h200-8", "--method", "lora", "--script", script,
            "--lora-targets", "all-linear", "--json"]  # fmt: skip
    assert main(argv) == 0
    reasons = json.loads(capsys.readouterr().out)["reasons"]
    named = [r for r in reasons if r.startswith("LoRA targets: all-linear on a mixture of experts")]
    assert len(named) == (script == "trainer")


def test_a_window_on_some_layers_or_all_is_read_from_the_config(tmp_path):
    """Gemma-2 alternates windowed and full layers (layer_types): partial_window, each kind priced on its own path
    (tests/test_estimate_attention.py). A window on every layer (Ministral's layer_types) is the window Mistral's is;
    Qwen3's sliding_window is switched off by use_sliding_window."""
    cases = {
        "gemma2": (dict(head_dim=16, sliding_window=256, layer_types=["sliding_attention", "full_attention"]),
                   (None, (1, 256))),
        "ministral": (dict(head_dim=16, sliding_window=256, layer_types=["sliding_attention"] * 2, rope_theta=1e6),
                      (256, None)),
        "qwen3": (dict(head_dim=16, sliding_window=256, use_sliding_window=False), (None, None)),
    }  # fmt: skip
    for model_type, (extra, expected) in cases.items():
        d = tmp_path / model_type
        d.mkdir()
        (d / "config.json").write_text(json.dumps({**TINY, **extra, "model_type": model_type}))
        spec = load_model(str(d), compiled=False)
        assert (spec.sliding_window, spec.partial_window) == expected, model_type


def test_context_parallel_is_refused_for_a_model_with_windowed_layers(tmp_path, capsys):
    """accelerate's CP hook drops the attention mask: a window on some layers needs one as much as on all."""
    d = tmp_path / "gemma2"
    d.mkdir()
    extra = dict(head_dim=16, sliding_window=256, layer_types=["sliding_attention", "full_attention"])
    (d / "config.json").write_text(json.dumps({**TINY, **extra, "model_type": "gemma2"}))
    argv = ["--model", str(d), "--machine", "hgx-h200-8", "--method", "lora", "--seq-len", "512", "--cp-size", "2"]
    (line,) = _plan_error(capsys, *argv)
    assert "this model's 256-token window needs one" in line


def test_an_moe_given_its_top_k_prices_only_the_routed_share(tmp_path):
    """The DeepSeek-V2 config refused above, completed with its top-k: of each MoE layer's experts only k of n count
    for compute, all of them for memory."""
    d = _config_dir(tmp_path, "deepseek_v2")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "num_experts_per_tok": 6}))
    spec = load_model(str(d), compiled=False)
    assert (spec.num_experts, spec.experts_per_token) == (64, 6)
    assert spec.matmul_params_active < spec.params_total / 4
