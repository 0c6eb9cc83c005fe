"""`python -m generator plan` end to end on bundled reference machines: JSON fields, writing, refusing, speed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generator.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASE = ["plan", "--model", "mistral-7b", "--machine", "hgx-h200-8"]


def run_json(capsys, *extra) -> dict:
    assert main([*BASE, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_the_estimator_fields_and_the_choice(capsys):
    d = run_json(capsys, "--num-gpus", "4", "--global-batch", "32", "--precision", "bf16")  # fp8: DDP alone
    for key in ("strategy", "gpu_ids", "num_processes", "gradient_accumulation_steps", "grad_checkpointing",
                "reasons", "config_path", "launch_command", "micro_batch", "hsdp", "estimates"):  # fmt: skip
        assert key in d, key
    assert d["config_path"] is None
    assert d["num_processes"] == len(d["gpu_ids"]) == 4
    assert all(isinstance(i, int) for i in d["gpu_ids"])
    assert isinstance(d["grad_checkpointing"], bool)
    assert d["micro_batch"] * d["gradient_accumulation_steps"] * 4 == 32
    assert {e["strategy"] for e in d["estimates"]} >= {"ddp", "zero3", "fsdp"}
    chosen = next(e for e in d["estimates"] if e["strategy"] == d["strategy"])
    assert chosen["fits"] is True
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in d["launch_command"] and "accelerate launch" in d["launch_command"]


def test_table_output_names_the_plan_and_the_command(capsys):
    assert main([*BASE, "--num-gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "Plan:" in out and "accelerate launch" in out and "nothing written" in out


def test_output_is_written_once_and_never_overwritten_without_force(tmp_path, capsys):
    target = tmp_path / "cfg.yaml"
    assert main([*BASE, "--output", str(target), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config_path"] == str(target)
    text = target.read_text()
    assert text.startswith("#") and "distributed_type" in text
    target.write_text("mine\n")
    assert main([*BASE, "--output", str(target)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert target.read_text() == "mine\n"
    assert main([*BASE, "--output", str(target), "--force"]) == 0
    assert target.read_text() == text


def test_output_is_checked_before_any_work(tmp_path, capsys):
    existing = tmp_path / "x.yaml"
    existing.write_text("keep\n")
    assert (
        main(["plan", "--model", "no-such-model-anywhere", "--machine", "hgx-h200-8", "--output", str(existing)]) == 2
    )
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("fails", ["mkstemp", "fsync"])
def test_a_write_the_os_refuses_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch, fails):
    """What check_writable cannot see (a full disk, a read-only mount, /proc): exit 2, one line, no file, no temp."""
    import errno

    from generator import fileio

    def refuse(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    if fails == "mkstemp":
        monkeypatch.setattr(fileio.tempfile, "mkstemp", refuse)
    else:
        monkeypatch.setattr(fileio.os, "fsync", refuse)
    target = tmp_path / "cfg.yaml"
    assert main([*BASE, "--output", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"error: cannot write {str(target)!r}: No space left on device; nothing was written"
    ]
    assert list(tmp_path.iterdir()) == []


def test_forced_strategy_that_does_not_fit_is_written_only_with_force(tmp_path, capsys):
    target = tmp_path / "ddp.yaml"
    # eager: compiled layers hold no weight copies at the loss, and DDP then fits (test_estimate_compiled_casts.py)
    args = [*BASE, "--num-gpus", "8", "--strategy", "ddp", "--precision", "bf16", "--no-compile-layers"]
    args += ["--output", str(target)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "does not fit" in err and "--force" in err and not target.exists()
    assert main([*args, "--force", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["forced"] is True and d["strategy"] == "ddp" and target.exists()


def test_consumer_machine_full_fine_tune_is_rejected_with_alternatives(capsys):
    assert main(["plan", "--model", "mistral-7b", "--machine", "rtx4090-2", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "does not fit" in err and "--method lora" in err and "--method qlora" in err


def test_bandwidth_file_is_preferred_over_the_table(tmp_path, capsys):
    bw = tmp_path / "bw.json"
    bw.write_text(json.dumps({"subsets": {"0,1": 5.0, "6,7": 400.0}}))
    d = run_json(capsys, "--num-gpus", "2", "--bandwidth-file", str(bw))
    assert d["gpu_ids"] == [6, 7]
    assert any("measured" in r for r in d["reasons"])
    bw.write_text("{not json")
    assert main([*BASE, "--bandwidth-file", str(bw)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_plan_json_is_fast_and_never_imports_torch_or_transformers():
    code = (
        "import sys, io, json, contextlib\n"
        "from generator.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        f"    rc = main({[*BASE, '--num-gpus', '4', '--json']!r})\n"
        "heavy = [m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules]\n"
        "print(json.dumps({'rc': rc, 'heavy': heavy, 'strategy': json.loads(buf.getvalue())['strategy']}))\n"
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["rc"] == 0 and result["heavy"] == []
    assert elapsed < 10  # generous for a loaded CI runner; the real figure is printed by `make demo`


@pytest.mark.parametrize(
    "flag, value", [("--seq-len", "0"), ("--num-gpus", "9"), ("--headroom", "2"), ("--doc-tokens", "0")]
)
def test_bad_flags_fail_with_one_line(flag, value, capsys):
    assert main([*BASE, flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_flex_attention_reaches_the_launch_command_and_pays_more_the_shorter_the_documents(capsys):
    bf16 = ("--num-gpus", "2", "--global-batch", "8", "--precision", "bf16")  # the fsdp row it compares
    sdpa = run_json(capsys, *bf16, "--attention", "sdpa")
    long_docs = run_json(capsys, *bf16, "--attention", "flex")
    short = run_json(capsys, *bf16, "--attention", "flex", "--doc-tokens", "200")
    assert "--attn-implementation flex_attention" in long_docs["launch_command"]
    assert "--attn-implementation" not in sdpa["launch_command"]  # train.py's default, sdpa

    def speed(d):
        return next(e for e in d["estimates"] if e["strategy"] == "fsdp")["tokens_per_s_per_gpu"]

    assert speed(sdpa) < speed(long_docs) < speed(short)
