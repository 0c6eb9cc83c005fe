"""Which measured rows the estimator's terms were never fitted to: REPORT.md scores them apart from the fit rows.

One owner for the held-out sweep keys (bench/wires.py owns the slow-wire ones). A key named here is `validation`
whatever file holds it; every other train.py sweep row is `fit`; the scripts' rows (custom, trainer) are all held out.
"""

from __future__ import annotations

from bench.families import FAMILY_CELLS

# Issue 17 (chosen before any term was fitted to the sweep): spread over sequence length (2048-32768), method (full,
# LoRA, QLoRA), kernel (SDPA dense mask, SDPA causal, flex) and document length.
LONG_SEQUENCE_KEYS = frozenset(
    {
        "train.py-g1-ddp-lora-s32768-mb1-ckpton-flex-fill",
        "train.py-g1-ddp-lora-s32768-mb1-ckpton-sdpa-fill",
        "train.py-g1-ddp-full-s8192-mb1-ckpton-flex-fill",
        "train.py-g1-ddp-lora-s8192-mb1-ckpton-sdpa-short",
        "train.py-g1-ddp-full-s16384-mb1-ckpton-flex-fill-liger",
        "train.py-g1-ddp-full-s2048-mb4-ckpton-sdpa-fill",
        "train.py-g1-ddp-qlora-s4096-mb1-ckpton-sdpa-short",
        "train.py-g1-ddp-lora-s4096-mb1-ckpton-sdpa-fill",
    }
)

# Issue 20 (bench/results/h200-x1-fp8-2026-12-01*.json): two rows fit the two new terms, one each --
# FP8_GEMM_SPEEDUP (generator/estimate/precision.py) and COMPILED_ADAPTER_FUSED (generator/estimate/step_traffic.py).
# Since 2026-12-07 COMPILED_ADAPTER_FUSED is fitted on compiled layers timed with and without adapters
# (bench/fit_compute.py), not on the compiled LoRA row; that row, seen by the earlier fit, stays out of validation.
FP8_FIT_KEYS = frozenset(
    {
        "train.py-g1-ddp-full-s4096-mb8-ckpton-flex-short-liger-fp8",
        "train.py-g1-ddp-lora-s4096-mb4-ckptoff-flex-short-liger-compiled",
    }
)
# ... and every other row of those files is held out: fp8 at another length and document mix, fp8 LoRA, the bf16 rows
# beside them, the bf16 full fine-tune with its layers compiled, and the six 200-step curve rows (micro-batch 1).
FP8_VALIDATION_KEYS = frozenset(
    {
        "train.py-g1-ddp-full-s8192-mb4-ckpton-flex-fill-liger-fp8",
        "train.py-g1-ddp-lora-s4096-mb4-ckptoff-flex-short-liger-fp8",
        "train.py-g1-ddp-full-s4096-mb8-ckpton-flex-short-liger",
        "train.py-g1-ddp-full-s8192-mb4-ckpton-flex-fill-liger",
        "train.py-g1-ddp-lora-s4096-mb4-ckptoff-flex-short-liger",
        "train.py-g1-ddp-full-s4096-mb8-ckpton-flex-short-liger-compiled",
        "train.py-g1-ddp-full-s2048-mb1-ckptoff-flex-short-liger-fp8-n200",
        "train.py-g1-ddp-full-s2048-mb1-ckptoff-flex-short-liger-n200",
        "train.py-g1-ddp-lora-s2048-mb1-ckptoff-flex-short-liger-fp8-n200",
        "train.py-g1-ddp-lora-s2048-mb1-ckptoff-flex-short-liger-n200",
        "train.py-g1-ddp-full-s2048-mb1-ckptoff-flex-short-liger-seed1-n200",
        "train.py-g1-ddp-lora-s2048-mb1-ckptoff-flex-short-liger-seed1-n200",
    }
)

# Issue 26 (bench/families.py): every row of a model beyond Mistral-7B, chosen before any of them ran; none is fitted.
FAMILY_VALIDATION_KEYS = frozenset(c.key for c in FAMILY_CELLS)

VALIDATION_KEYS = LONG_SEQUENCE_KEYS | FP8_VALIDATION_KEYS | FAMILY_VALIDATION_KEYS
# TRL's own CLI script run as `plan --script trainer` prints it (bench/trl_cli.py), chosen before any run: these rows
# may fit the trainer's packed-row attention (one flattened row per micro-batch) and its Liger-with-TRL's-loss term;
# every other TRL CLI row is held out, like every other script row.
TRL_CLI_FIT_KEYS = frozenset(
    {
        "trl-g1-ddp-lora-qv-s4096-mb1-ckpton-sdpa-fill-bf16",
        "trl-g1-ddp-lora-qv-s4096-mb4-ckpton-sdpa-fill-bf16",
        "trl-g1-ddp-lora-qv-s4096-mb4-ckpton-flex-fill-bf16",
        "trl-g1-ddp-lora-qv-s4096-mb1-ckpton-flex-fill-bf16",
        "trl-g1-ddp-lora-all-s4096-mb2-ckptoff-sdpa-fill-bf16",
        "trl-g1-ddp-lora-all-s4096-mb2-ckptoff-sdpa-fill-liger-bf16",
    }
)

# Rows of a model whose modelling code differs between the transformers the row ran under (the GPU image's) and the
# one installed here, read in both versions' sources: the estimate counts the installed code, so such a row is no
# check of it until it runs again under that version. Shown beside what the estimator predicted when it ran (under the
# row's own versions), unscored.
OTHER_CODE: dict[str, tuple[frozenset[str], str]] = {
    "falcon-default": (
        frozenset({"5.17.0"}),
        "transformers 5.17-5.24's FalconAttention calls SDPA itself with one key head and 71 query heads, so torch "
        "runs its math kernel (every score in fp32); 5.25 sends it through the attention interface, whose repeat_kv "
        "takes the fused kernels",
    ),
}
"""model -> (the transformers versions whose code for it differs from the installed one's, why)."""
