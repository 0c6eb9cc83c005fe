"""Tensor parallel on CPU: 2 gloo processes, a tiny Llama sharded by transformers' tp_plan on accelerate's mesh,
against the unsharded model. torch 2.13 CPU and transformers 5.24 run TP over gloo (DTensor). What CPU cannot run:
train.py's own TP/CP loop (accelerate 1.15 refuses a ParallelismConfig under MULTI_CPU, and prepares FSDP2 and
context parallel only on GPUs), so the CP path is tested in its pure parts (labels shifted before the split, the
token count and gradient scaling)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes" / "data" / "synthetic_instruct.jsonl"


def _env(**extra) -> dict:
    e = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    e["HF_DATASETS_CACHE"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / "train_test_datasets_cache")
    return {**e, **extra}


def _tiny_llama(out: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.tiny_model import build_tokenizer

    tok = build_tokenizer(out)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(str(out))
    return out


WORKER = """
import json, sys, torch, torch.distributed as dist
from accelerate.parallelism_config import ParallelismConfig
from transformers import AutoModelForCausalLM
model_dir, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = ParallelismConfig(tp_size=2).build_device_mesh("cpu")  # the mesh accelerate builds for tp_size 2
tp = AutoModelForCausalLM.from_pretrained(model_dir, tp_plan="auto", device_mesh=mesh["tp"], dtype=torch.float32)
ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
ids = (torch.arange(48).unsqueeze(0) * 7) % tp.config.vocab_size
lt, lr = tp(input_ids=ids, labels=ids).loss, ref(input_ids=ids, labels=ids).loss
lt.backward(); lr.backward()
q_tp = tp.model.layers[0].self_attn.q_proj.weight
o_tp = tp.model.layers[0].mlp.down_proj.weight
rows = q_tp.to_local().shape[0]
q_ref_grad = ref.model.layers[0].self_attn.q_proj.weight.grad[rank * rows:(rank + 1) * rows]
json.dump({
    "q_local": list(q_tp.to_local().shape), "down_local": list(o_tp.to_local().shape),
    "norm_is_whole": list(tp.model.layers[0].input_layernorm.weight.shape),
    "loss_tp": float(lt), "loss_ref": float(lr),
    "q_grad_diff": float((q_tp.grad.to_local() - q_ref_grad).abs().max()),
}, open(f"{out}/rank{rank}.json", "w"))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_tp2_over_gloo_shards_and_matches_one_process(tmp_path):
    """Two gloo processes: transformers' tp_plan on accelerate's TP mesh (what train.py's tp_load_kwargs passes).
    accelerate 1.15 itself refuses a ParallelismConfig under MULTI_CPU (parallelism_config.py _validate_accelerator),
    so train.py's own TP loop needs GPUs: this checks the part below it, the sharded model, on CPU."""
    model = _tiny_llama(tmp_path / "tiny")
    (tmp_path / "worker.py").write_text(WORKER)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(tmp_path / "worker.py"), str(model), str(tmp_path)],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    from generator.estimate.parallel import tp_shard_model
    from generator.model.sizing import spec_from_config

    spec = tp_shard_model(spec_from_config(json.loads((model / "config.json").read_text()), "tiny"), 2)
    for rank in (0, 1):
        r = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert r["q_local"] == [spec.num_heads * spec.head_dim, spec.hidden_size]  # 2 of 4 heads
        assert r["down_local"] == [spec.hidden_size, spec.intermediate_size]  # 64 of 128 columns
        assert r["norm_is_whole"] == [spec.hidden_size]
        assert abs(r["loss_tp"] - r["loss_ref"]) < 1e-5
        assert r["q_grad_diff"] < 1e-5


def test_tp_shards_have_the_planned_shapes(tmp_path):
    """The shapes generator.estimate.parallel.tp_shard_model assumes: q/k/v/gate/up split by rows (column-wise
    linears), o/down by columns, norms and embeddings whole (transformers' Llama tp_plan, read without a process
    group)."""
    from transformers import LlamaConfig

    plan = LlamaConfig.base_model_tp_plan
    assert {plan[f"layers.*.self_attn.{p}_proj"] for p in "qkv"} == {"colwise"}
    assert plan["layers.*.self_attn.o_proj"] == plan["layers.*.mlp.down_proj"] == "rowwise"
    assert not any("norm" in k or "embed" in k for k in plan)
    from transformers import LlamaForCausalLM

    assert LlamaForCausalLM._tp_plan == {"lm_head": "colwise_gather_output"}


def test_cp_labels_are_shifted_before_the_split(monkeypatch):
    import torch

    from training.parallel import data_parallel_world, gradient_ranks, shared_batch_ranks, with_shift_labels

    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_SIZE", "4")
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "2")
    labels = torch.tensor([[5, 6, -100, 8]])
    out = with_shift_labels({"input_ids": labels.clone(), "labels": labels, "attention_mask": torch.ones_like(labels)})
    assert out["shift_labels"].tolist() == [[6, -100, 8, -100]] and "attention_mask" not in out
    assert (shared_batch_ranks(), data_parallel_world(16), gradient_ranks(16)) == (8, 2, 8)
