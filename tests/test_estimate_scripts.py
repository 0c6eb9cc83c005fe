"""--script terms (issue 18): what a custom loop's foreach AdamW and TRL's fused LM head change in the estimate, and
`check` warning, with numbers, when a config written for train.py would not fit under a custom script."""

from __future__ import annotations

from dataclasses import replace

import pytest

from generator.cli import main
from generator.estimate import Placement, Workload, estimate
from generator.model import load_model

H200 = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0.0)
FULL = Workload(seq_len=4096, micro_batch=1, grad_checkpointing=True)


def test_foreach_step_copies_the_second_moment_in_the_param_dtype():
    model = load_model("mistral-7b")
    custom = estimate(model, replace(FULL, script="custom", load_dtype="bf16", grad_as_bucket_view=False), H200, "ddp")
    fused = estimate(model, replace(FULL, load_dtype="bf16", grad_as_bucket_view=False), H200, "ddp")
    assert custom.breakdown["foreach_step_temporaries"] == pytest.approx(2 * model.params_total / 1e9)
    assert "foreach_step_temporaries" not in fused.breakdown
    assert custom.tokens_per_s_per_gpu < fused.tokens_per_s_per_gpu  # 13 more passes over the states


def test_custom_fsdp2_on_one_h200_does_not_fit_as_measured():
    # bench/results/h200-x1-sweep-2026-12-01.json: out of memory at 145.2 GB allocated after one step
    model = load_model("mistral-7b")
    e = estimate(model, replace(FULL, script="custom", load_dtype="bf16"), H200, "fsdp")
    assert not e.fits and e.peak_gb > 140
    assert estimate(model, FULL, H200, "fsdp").fits  # train.py's fused AdamW has no such copy


def test_qlora_stream_follows_the_load_dtype_only_where_the_script_skips_kbit_preparation():
    """train.py calls prepare_model_for_kbit_training (embeddings, norms and the residual stream in fp32 whatever the
    load dtype); TRL's SFTTrainer does not, so with --dtype bfloat16 they stay bf16: at 8,192 tokens with
    checkpointing TRL measured 8.5 GB allocated (bench/results/h200-x1-trl-cli-2026-12-02-b.json)."""
    model = load_model("mistral-7b")
    qlora = Workload(method="qlora", seq_len=8192, micro_batch=1, grad_checkpointing=True, attention="flex",
                     lora_targets=("q", "v"), grad_as_bucket_view=False)  # fmt: skip

    def peak(script, load):
        return estimate(model, replace(qlora, script=script, load_dtype=load), H200, "ddp")

    trl_bf16, trl_fp32 = peak("trainer", "bf16"), peak("trainer", "fp32")
    assert trl_bf16.breakdown["checkpoints"] == pytest.approx(trl_fp32.breakdown["checkpoints"] / 2)
    assert trl_bf16.peak_gb == pytest.approx(8.51, rel=0.05)
    assert peak("train.py", "bf16").breakdown["checkpoints"] == trl_fp32.breakdown["checkpoints"]


def test_trainer_keeps_no_logits():
    model = load_model("mistral-7b")
    e = estimate(model, replace(FULL, script="trainer", grad_as_bucket_view=False), H200, "ddp")
    assert "logits_kept" not in e.breakdown and "logits_kept" in estimate(model, FULL, H200, "ddp").breakdown


def test_check_warns_when_a_custom_script_would_not_fit_a_train_py_config(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--strategy", "fsdp",
            "--grad-checkpointing", "on", "--output", "one.yaml"]  # fmt: skip
    assert main(plan) == 0
    assert "# Script assumed: train.py" in (tmp_path / "one.yaml").read_text()
    capsys.readouterr()
    assert main(["check", "one.yaml", "--machine", "h200-sxm-2"]) == 1
    out = capsys.readouterr().out
    assert "will not fit if launched with a custom script" in out and "written for train.py, predicted" in out
    assert main(["check", "one.yaml", "--machine", "h200-sxm-2", "--script", "train.py"]) == 0


def test_lora_dropout_streams_each_adapted_input_in_eager_layers_only():
    """TRL's default dropout (0.05) runs on each adapter's own fp32 copy of its input: its cost follows the adapted
    Linears' input widths (every projection against q and v only), and a compiled layer fuses it away."""
    from generator.estimate.passes import elementwise_bytes

    model = load_model("mistral-7b")
    base = Workload(method="lora", seq_len=4096, micro_batch=1, script="trainer", load_dtype="bf16")

    def extra(**kw):
        w = replace(base, **kw)
        return elementwise_bytes(model, replace(w, lora_dropout=0.05), 1) - elementwise_bytes(model, w, 1)

    every, qv = extra(), extra(lora_targets=("q", "v"))
    h, f = model.hidden_size, model.intermediate_size
    assert every / qv == pytest.approx((6 * h + f) / (2 * h))
    assert extra(compiled_layers=True) == 0
    assert extra(method="full") == 0
