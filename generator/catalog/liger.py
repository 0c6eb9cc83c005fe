"""Where Liger's kernels are known to work under train.py, by transformers model_type, with the evidence (issue 26).

The planner chooses Liger (`plan` with Liger left to it) only for an architecture listed as measured, or as running
exactly the kernels of a measured one; train.py runs `--liger` anywhere Liger has a patch, and says so in one line
where this table has no measurement. An architecture absent here is unmeasured.
"""

from __future__ import annotations

from dataclasses import dataclass

MEASURED, SAME_KERNELS, EXCLUDED = "measured", "same kernels as a measured one", "excluded"


@dataclass(frozen=True)
class LigerFit:
    status: str
    """MEASURED, SAME_KERNELS (the same Liger kernels as a measured architecture, on other shapes) or EXCLUDED."""
    kernels: str
    """What train.py --liger applies on it."""
    summary: str
    """The status in a few words, for the plan's line."""
    evidence: str
    """The rows, or the source, the status rests on."""


DENSE_KERNELS = "RMSNorm, RoPE, SwiGLU MLP and the fused linear cross-entropy"

LIGER: dict[str, LigerFit] = {
    "mistral": LigerFit(
        MEASURED,
        DENSE_KERNELS,
        "measured on one and two H200s",
        "one H200: the -liger rows of bench/results/h200-x1-sweep-2026-12-01.json and "
        "h200-x1-fp8-2026-12-01-rerun.json; 2x H200: the liger cells of h200-x2-2026-11-30-bf16init.json, losses and "
        "gradient norms checked against their plain twins (bench/check_liger.py)",
    ),
    "llama": LigerFit(
        SAME_KERNELS,
        DENSE_KERNELS,
        "Mistral's measured kernels",
        "liger_kernel 0.8.5 apply_liger_kernel_to_llama patches the same LigerRMSNorm, liger_rotary_pos_emb, "
        "LigerSwiGLUMLP and fused linear cross-entropy as Mistral's; the family cells (bench/families.py) "
        "run it on Llama-3-8B and Llama-2-13B",
    ),
    "qwen2": LigerFit(
        SAME_KERNELS,
        DENSE_KERNELS,
        "Mistral's measured kernels",
        "apply_liger_kernel_to_qwen2 patches the same four kernels (the attention biases are not Liger's); the "
        "family cells (bench/families.py) run it on Qwen2.5-7B",
    ),
    "mixtral": LigerFit(
        EXCLUDED,
        "RMSNorm, RoPE and the fused linear cross-entropy; never its fused experts kernel",
        "its fused experts kernel stalled the first step over 5 minutes on one H200 and the rest is unmeasured here",
        "seen on one H200 (2026-12-01, not yet a results file; bench/families.py has the cells): with Liger's "
        "fused experts kernel (LigerExperts, liger_kernel/ops/fused_moe.py, which "
        "apply_liger_kernel_to_mixtral swaps in for transformers 5's experts) the first step of Mixtral cut to 8 "
        "layers had not finished after 5 minutes, against 0.6 s a step without Liger. Its Triton GEMM kernels "
        "autotune over 32 configurations each and its weight-gradient kernels over 16 (fused_moe_kernels.py 315-345), "
        "every one compiled and benchmarked inside the first step. train.py leaves that kernel out on any MoE; the "
        "rest is unmeasured on Mixtral",
    ),
}


def liger_plannable(model_type: str) -> bool:
    """Whether the planner may choose Liger for this architecture (measured, or the measured kernels)."""
    fit = LIGER.get(model_type)
    return fit is not None and fit.status in (MEASURED, SAME_KERNELS)


def liger_not_planned(model_type: str) -> str:
    """The plan's line when Liger is left out for this architecture."""
    fit = LIGER.get(model_type)
    if fit is None:
        return f"Liger not chosen: its kernels are unmeasured on {model_type} (plan --liger takes them anyway)"
    return f"Liger not chosen for {model_type}: {fit.summary} (generator/catalog/liger.py; --liger runs {fit.kernels})"


def liger_run_note(model_type: str) -> str | None:
    """train.py's line for --liger on an architecture the planner would not choose it for (None where it would)."""
    if liger_plannable(model_type):
        return None
    fit = LIGER.get(model_type)
    what = f"{fit.kernels}; " if fit else ""
    return f"train.py: note: --liger on {model_type}: {what}unmeasured on it (generator/catalog/liger.py)"
