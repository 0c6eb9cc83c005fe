"""The planner offers only the attention kernels the architecture loads with in the installed transformers: Gemma-2
and GPT-OSS have no SDPA (logit softcapping, attention sinks), OLMoE no flex. Planned anyway, the printed command
dies at from_pretrained; so the plan picks among what is left (eager where nothing is), says why, and refuses an
explicit --attention the model lacks in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.cli import main
from generator.model import load_model
from generator.model.sizing import DECODER_LAYER_CLS
from generator.wizard.kernels import kernel_choices, kernel_fields

transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]

# Small widths of real families (the kernels are the class's, whatever the widths); OLMoE and Qwen3-MoE are MoE.
SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=1024, max_position_embeddings=8192)  # fmt: skip
FAMILIES = {
    "gemma2": dict(head_dim=64),
    "gpt_oss": dict(head_dim=64, num_local_experts=4, num_experts_per_tok=2),
    "olmoe": dict(num_experts=4, num_experts_per_tok=2),
    "qwen3_moe": dict(head_dim=64, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128),
}


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    out = {}
    for family, extra in FAMILIES.items():
        (root / family).mkdir()
        (root / family / "config.json").write_text(json.dumps({"model_type": family, **SMALL, **extra}))
        out[family] = root / family
    return out


def _class_kernels(model_type: str) -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
    return {kernel for kernel, ok in (("sdpa", cls._supports_sdpa), ("flex", cls._supports_flex_attn)) if ok} | {
        "eager"
    }


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_sized_architecture_carries_its_class_kernels(configs, family):
    assert set(load_model(str(configs[family]), compiled=False).attentions) == _class_kernels(family)


def test_the_installed_transformers_has_what_the_families_assume():
    """The closed-form families (no transformers on the planning path) are given all three kernels by default, and the
    families above are here because they lack one: both facts of the installed library, read from it."""
    for family in DECODER_LAYER_CLS:
        assert _class_kernels(family) == {"sdpa", "flex", "eager"}, family
    assert "sdpa" not in _class_kernels("gemma2") and "sdpa" not in _class_kernels("gpt_oss")
    assert "flex" not in _class_kernels("olmoe")


def _plan(capsys, model: Path, *extra: str) -> dict:
    argv = ["plan", "--model", str(model), "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora",
            "--seq-len", "4096", "--precision", "bf16", "--json", *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_no_sdpa_architecture_gets_flex_under_train_py_with_the_reason(capsys, configs):
    d = _plan(capsys, configs["gemma2"])
    assert "--attn-implementation flex_attention" in d["launch_command"]
    assert any(r.startswith("attention: flex_attention: gemma2 has no SDPA") for r in d["reasons"])


def test_no_sdpa_architecture_in_a_plain_loop_loads_eager(capsys, configs):
    d = _plan(capsys, configs["gpt_oss"], "--script", "custom")
    assert any("attn_implementation='eager'" in s for s in d["loop_settings"])
    assert any(r.startswith("attention: eager attention: gpt_oss has no SDPA") for r in d["reasons"])


def test_trl_line_names_the_kernel_the_architecture_has(capsys, configs):
    d = _plan(capsys, configs["gemma2"], "--script", "trainer", "--attention", "eager")
    assert "--attn_implementation eager" in d["launch_command"]


def test_no_flex_architecture_is_never_planned_with_flex(capsys, configs):
    d = _plan(capsys, configs["olmoe"], "--seq-len", "8192", "--doc-tokens", "500")  # where flex would win
    assert "flex_attention" not in d["launch_command"]
    assert any(r.startswith("attention: SDPA: olmoe has no flex_attention") for r in d["reasons"])


def test_an_explicit_kernel_the_architecture_lacks_is_one_line_and_exit_2(configs, capsys):
    argv = ["plan", "--model", str(configs["gemma2"]), "--machine", "h200-sxm-2", "--attention", "sdpa", "--method",
            "lora"]  # fmt: skip
    assert main(argv) == 2  # an exception escaping main would fail the test: no traceback
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: gemma2 has no SDPA in transformers (its model class does not support attn_implementation='sdpa'): "
        "use --attention flex or --attention eager"
    ]


def test_wizard_offers_the_same_kernels():
    no_sdpa = kernel_choices("train.py", ("flex", "eager"))
    assert {kernel_fields(k)["attention"] for _, k in no_sdpa if k != "auto"} == {"flex", "eager"}
    custom = kernel_choices("custom", ("flex", "eager"))
    assert "sdpa" not in {kernel_fields(k)["attention"] for _, k in custom}
    assert {kernel_fields(k)["attention"] for _, k in kernel_choices("train.py") if k != "auto"} == {"sdpa", "flex"}


def test_check_refuses_a_kernel_the_model_lacks_and_passes_the_plan_for_it(capsys, configs, tmp_path):
    for name, model in (("mistral", "mistral-7b"), ("gemma", str(configs["gemma2"]))):
        argv = ["plan", "--model", model, "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora",
                "--script", "custom", "--output", str(tmp_path / f"{name}.yaml")]  # fmt: skip
        assert main(argv) == 0
    capsys.readouterr()

    def findings(config: str) -> tuple[int, list[dict]]:
        argv = ["check", str(tmp_path / config), "--machine", "h200-sxm-2", "--model", str(configs["gemma2"]),
                "--script", "custom", "--json"]  # fmt: skip
        code = main(argv)
        return code, [
            f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "attention_the_model_has"
        ]

    assert findings("gemma.yaml") == (0, [])  # its own plan: the loop loads eager
    code, found = findings("mistral.yaml")  # written for SDPA, checked against Gemma-2
    assert code == 2 and len(found) == 1 and found[0]["problem"].startswith("gemma2 has no SDPA in transformers")


def test_check_of_a_hand_written_config_only_notes_the_kernels(capsys, configs):
    """No generator header: SDPA is check's assumption, not the user's loop, so it is a note, not an error."""
    config = ROOT / "tests" / "fixtures" / "configs" / "ddp_clean.yaml"
    argv = ["check", str(config), "--machine", "h200-sxm-2", "--model", str(configs["gemma2"]), "--json"]
    main(argv)
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "attention_the_model_has"]
    assert [f["severity"] for f in found] == ["info"]
    assert "attn_implementation='flex_attention' or 'eager'" in found[0]["fix"]
