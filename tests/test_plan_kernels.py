"""The planner chooses the attention kernel and Liger (issue 17): flex by default at long sequences, opt-outs, Liger
only where importable, documents from --doc-tokens or a --dataset scan."""

from __future__ import annotations

import importlib.util
import json

from generator.cli import main

# bf16 and eager layers pinned: the tokens/s checked below are the measured bf16 eager rows (--precision auto may take
# fp8 on an H200, and a bf16 plan compiled layers).
LONG = ["plan", "--model", "mistral-7b", "--method", "lora", "--seq-len", "32768", "--machine", "h200-sxm-2",
        "--num-gpus", "1", "--precision", "bf16", "--no-compile-layers", "--json"]  # fmt: skip


def _plan(capsys, *extra) -> dict:
    assert main([*LONG, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_flex_by_default_at_long_sequences_with_a_reason(capsys):
    d = _plan(capsys)
    assert "--attn-implementation flex_attention" in d["launch_command"]
    assert any(r.startswith("attention: flex_attention") and "SDPA" in r for r in d["reasons"])
    assert any("documents assumed to fill" in r for r in d["reasons"])
    assert any(r.startswith("flex attention compiles its kernels in the first step") for r in d["reasons"])
    assert 0.9 * 7095 < d["chosen"]["tokens_per_s_per_gpu"] < 1.1 * 7095  # measured LoRA s32768 flex (validation)


def test_attention_sdpa_opts_out(capsys):
    d = _plan(capsys, "--attention", "sdpa")
    assert "--attn-implementation" not in d["launch_command"]
    assert not any("compiles its kernels" in r for r in d["reasons"])  # SDPA compiles nothing
    assert 0.9 * 2673 < d["chosen"]["tokens_per_s_per_gpu"] < 1.1 * 2673  # measured LoRA s32768 SDPA (validation)


def test_liger_only_when_importable(capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "liger_kernel" else real(name, *a)
    )
    absent = _plan(capsys)
    assert "--liger" not in absent["launch_command"]
    assert any("Liger is not installed here" in r for r in absent["reasons"])
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "liger_kernel" else real(name, *a)
    )
    present = _plan(capsys)
    assert "--liger" in present["launch_command"]
    assert "--liger" not in _plan(capsys, "--no-liger")["launch_command"]


def test_dataset_scan_sets_the_document_length(capsys, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"text": "x" * 400}) for _ in range(10)))  # 400 bytes ~ 100 tokens
    short = _plan(capsys, "--dataset", str(data), "--attention", "flex")
    fill = _plan(capsys, "--attention", "flex")
    assert not any("documents assumed to fill" in r for r in short["reasons"])
    assert short["chosen"]["tokens_per_s_per_gpu"] > fill["chosen"]["tokens_per_s_per_gpu"]


def test_dataset_without_text_is_one_line(capsys, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"n": 1}\n')
    assert main([*LONG, "--dataset", str(data)]) != 0
    assert "no text found" in capsys.readouterr().err
