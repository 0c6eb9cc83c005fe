"""Closed-form parameter counts, FLOPs per token and --model resolution (no torch on this path)."""

import json
import subprocess
import sys

import pytest

from generator.errors import UserError
from generator.model import PRESETS, attention_flops_per_token, flops_per_token, load_model, spec_from_config
from generator.model.presets import preset_config

# Published totals (model cards / safetensors index metadata) for the bundled presets.
KNOWN_TOTALS = {
    "mistral-7b": 7_241_732_096,
    "llama-3-8b": 8_030_261_248,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-3-70b": 70_553_706_496,
    "qwen2.5-7b": 7_615_616_512,
    "mixtral-8x7b": 46_702_792_704,
}


def test_required_presets_are_bundled():
    assert set(KNOWN_TOTALS) <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(KNOWN_TOTALS))
def test_preset_totals_match_published_counts(name):
    assert load_model(name).params_total == KNOWN_TOTALS[name]


def test_mistral_derived_sizes():
    m = load_model("mistral-7b")
    assert m.params_total == 7_241_732_096
    assert m.params_per_layer == 218_112_000
    assert m.params_embedding == 131_072_000
    assert m.matmul_params_active == 7_110_393_856
    assert m.largest_layer_params == 131_072_000  # embed_tokens / lm_head, as DeepSpeed's estimator finds
    assert (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim) == (4096, 32, 32, 8, 128)
    assert m.decoder_layer_cls == "MistralDecoderLayer"
    assert m.sliding_window == 4096 and not m.tie_embeddings


def test_tied_embeddings_count_once():
    cfg = preset_config("llama-2-7b")
    untied = spec_from_config(cfg, "x").params_total
    cfg["tie_word_embeddings"] = True
    assert spec_from_config(cfg, "x").params_total == untied - 32000 * 4096


def test_qwen2_has_qkv_biases():
    cfg = preset_config("qwen2.5-7b")
    m = spec_from_config(cfg, "q")
    cfg["model_type"] = "llama"  # same dims without qwen2's implicit q/k/v biases
    assert m.params_total - spec_from_config(cfg, "l").params_total == 28 * (3584 + 2 * 512)


def test_mixtral_active_params_count_two_experts():
    m = load_model("mixtral-8x7b")
    assert m.num_experts == 8 and m.experts_per_token == 2
    per_expert = 3 * 4096 * 14336
    dense_equiv = m.matmul_params_active - 32 * (2 * per_expert + 4096 * 8)
    assert dense_equiv == 32 * 41_943_040 + 32000 * 4096


def test_flops_per_token_mistral():
    m = load_model("mistral-7b")
    assert flops_per_token(m, 4096) == pytest.approx(6 * 7_110_393_856 + 12 * 32 * 4096 * 4096)
    assert flops_per_token(m, 4096) / 1e9 == pytest.approx(49.10, abs=0.01)
    # Sliding window (4096) caps the attention term.
    assert flops_per_token(m, 8192) == flops_per_token(m, 4096)
    assert flops_per_token(m, 512) / 1e9 == pytest.approx(43.47, abs=0.01)
    assert attention_flops_per_token(m, 4096) == 12 * 32 * 4096 * 4096 == attention_flops_per_token(m, 8192)
    assert flops_per_token(m, 4096) - attention_flops_per_token(m, 4096) == 6 * 7_110_393_856


def test_hub_ids_resolve_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = load_model("mistralai/Mistral-7B-v0.1")
    assert m.params_total == 7_241_732_096 and m.name == "mistralai/Mistral-7B-v0.1"


def test_unknown_hub_id_offline_is_a_user_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="preset"):
        load_model("someone/unknown-model")


def test_local_directory(tmp_path):
    cfg = preset_config("llama-3-8b")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model(str(tmp_path)).params_total == 8_030_261_248


def test_local_directory_without_config(tmp_path):
    with pytest.raises(UserError, match="config.json"):
        load_model(str(tmp_path))


def test_broken_config_json(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read"):
        load_model(str(tmp_path))


def test_nonsense_spec():
    with pytest.raises(UserError, match="unknown model"):
        load_model("no-such-preset")


def test_planning_path_imports_no_torch():
    code = (
        "import sys\n"
        "from generator.model import load_model\n"
        "from generator.estimate import estimate_all, Placement, Workload\n"
        "from generator.ui.estimates import render_estimates, estimate_to_dict\n"
        "m = load_model('mistral-7b')\n"
        "p = Placement(num_gpus_per_machine=4, gpu_name='NVIDIA H200', gpu_memory_gb=141, busbw_gbps=370)\n"
        "es = estimate_all(m, Workload(), p)\n"
        "render_estimates(es, 't'); [estimate_to_dict(e) for e in es]\n"
        "bad = [k for k in ('torch', 'transformers', 'accelerate') if k in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_preset_names_a_hub_id_that_resolves_back_to_it():
    from generator.model.presets import HUB_IDS, PRESET_HUB_IDS

    assert set(PRESET_HUB_IDS) == set(PRESETS)
    for preset, hub_id in PRESET_HUB_IDS.items():
        assert HUB_IDS[hub_id.lower()] == preset
