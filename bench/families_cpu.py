"""train.py on families beyond the llama family, on CPU: does the command `plan` prints for them train at all?

For each architecture a tiny config (transformers' own model_type, small widths) and the test tokenizer; `plan` for one
H200 in bf16 gives the LoRA flags it would print (`--lora-targets`, the attention kernel), then train.py runs two
steps of a full fine-tune and of LoRA from a random init on CPU. flex_attention has no CPU backward, so where the plan
picks flex the CPU run takes eager (both are kernels the architecture loads with). Prints one line per run and writes
the same lines to --log. Speed and memory on a GPU are not what this checks.

    python bench/families_cpu.py --log bench/results/cpu-families-<date>.log
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=128, max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)  # fmt: skip
FAMILIES = {
    "gemma2": dict(head_dim=16),
    "gemma3_text": dict(head_dim=16),
    "phi": dict(),
    "phi3": dict(),
    "qwen3": dict(head_dim=16),
    "qwen3_moe": dict(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
    "olmoe": dict(num_experts=4, num_experts_per_tok=2),
    "gpt_oss": dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=32),
    "granite": dict(),
    "deepseek_v2": dict(num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
                        n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None,
                        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, n_positions=512),
    "falcon": dict(),  # transformers' defaults otherwise: multi-query, a parallel block (Falcon-7B's layout)
    "starcoder2": dict(),
}  # fmt: skip
GPT2_DROPS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "max_position_embeddings")  # fmt: skip


def config_dir(root: Path, model_type: str) -> Path:
    from tests.tiny_model import build_tokenizer

    d = root / model_type
    build_tokenizer(d)
    cfg = {**SMALL, **FAMILIES[model_type], "model_type": model_type}
    if model_type == "gpt2":  # GPT-2's config names them n_embd, n_layer, n_head
        cfg = {k: v for k, v in cfg.items() if k not in GPT2_DROPS}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def planned_flags(model: Path, method: str) -> list[str]:
    """The LoRA and attention flags `plan` prints for this model (one H200, bf16), the attention made CPU-runnable."""
    from generator.cli import main

    out = io.StringIO()
    argv = ["plan", "--model", str(model), "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", method,
            "--precision", "bf16", "--json", "--output", str(model / f"{method}.yaml"), "--force"]  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    words = shlex.split(json.loads(out.getvalue())["launch_command"])
    flags = []
    for name in ("--lora-targets", "--attn-implementation"):
        if name in words:
            flags += [name, words[words.index(name) + 1]]
    if "flex_attention" in flags:  # no CPU backward: the architecture's other kernel
        flags[flags.index("flex_attention")] = "eager"
    return flags


def run(model: Path, method: str, out: Path) -> str:
    flags = planned_flags(model, method)
    data = ROOT / "recipes" / "data" / "synthetic_instruct.jsonl"
    done = subprocess.run(
        [sys.executable, "train.py", "--model", str(model), "--init", "random", "--seq-len", "64", "--micro-batch",
         "2", "--global-batch", "2", "--max-steps", "2", "--no-export", "--dataset", str(data), "--output-dir",
         str(out), "--method", method, *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    text = done.stdout + done.stderr
    summary = [line for line in text.splitlines() if line.startswith(("train.py summary", "train.py: error"))]
    last = summary[-1] if summary else text.strip().splitlines()[-1]
    notes = "".join(f" [{line}]" for line in text.splitlines() if line.startswith("LoRA: "))  # targets left out
    return f"{model.name} {method} rc={done.returncode} flags={' '.join(flags) or '-'}: {last}{notes}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", type=Path, help="write the lines here too")
    p.add_argument("--only", nargs="*", help="model types (default: all)")
    args = p.parse_args()
    import torch
    import transformers

    lines = [f"# train.py on CPU, torch {torch.__version__}, transformers {transformers.__version__}"]
    print(lines[0], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in args.only or FAMILIES:
            model = config_dir(Path(tmp), model_type)
            for method in ("full", "lora"):
                lines.append(run(model, method, Path(tmp) / f"out-{model_type}-{method}"))
                print(lines[-1], flush=True)
    if args.log:
        args.log.write_text("\n".join(lines) + "\n")
    return 0 if all(" rc=0 " in line for line in lines[1:]) else 1


if __name__ == "__main__":
    sys.exit(main())
