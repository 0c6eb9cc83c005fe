"""The sweep's cells (bench/sweep.py runs them, `--only` picks among them), in priority order: issue 19's acceptance
rows first, then the long-sequence sweep, the scripts' validation rows, float8 against bf16 (issue 20), the families
beyond Mistral (issue 26, bench/families.py) and the two-GPU rows (issue 21)."""

from __future__ import annotations

from dataclasses import replace

from bench.families import FAMILY_CELLS
from bench.sweep_cell import CURVE_STEPS, Cell, _c


def _fp8_cells() -> tuple[Cell, ...]:
    """Issue 20 on one GPU: float8 against bf16 with the levers the planner picks for the bf16 run on one H200 with
    Liger installed (micro-batch, checkpointing, flex, Liger; `plan --liger`), fp8 first in each pair. Throughput:
    the full fine-tune at 4096 (short packed examples) and 8192 (documents filling the sequence), and LoRA at 4096.
    Curves: 200 steps of the full fine-tune and of LoRA at 2048, bf16 and fp8 on the same data order."""
    pairs = [
        ("full", 4096, 8, True, "short", 6),
        ("full", 8192, 4, True, "fill", 6),
        ("lora", 4096, 4, False, "short", 6),
        ("full", 2048, 1, False, "short", CURVE_STEPS),
        ("lora", 2048, 1, False, "short", CURVE_STEPS),
    ]
    cells = [
        _c("train.py", "ddp", method, seq, mb, ckpt, "flex", docs, liger=True, steps=steps, precision=p)
        for method, seq, mb, ckpt, docs, steps in pairs
        for p in ("fp8", "bf16")
    ]
    # bf16 with the layers compiled as fp8 compiles them: how much of fp8's gain and loss curve is compile's
    controls = [
        _c("train.py", "ddp", "full", 4096, 8, True, "flex", "short", liger=True, comp=True),
        _c("train.py", "ddp", "lora", 4096, 4, False, "flex", "short", liger=True, comp=True),
    ]
    # bf16 against bf16 from another seed (init and data order): how far two bf16 curves drift on their own
    curves = [
        replace(_c("train.py", "ddp", m, 2048, 1, False, "flex", "short", liger=True, steps=CURVE_STEPS), seed=1)
        for m in ("full", "lora")
    ]
    return (*cells, *controls, *curves)


def _two_gpu_cells(script: str) -> tuple[Cell, ...]:
    """Issue 21, run 5: full with checkpointing under every family the scripts can be launched with, LoRA under DDP."""
    full = [_c(script, s, "full", 4096, 1, True, "sdpa", "short", gpus=2) for s in ("ddp", "fsdp", "zero2", "zero3")]
    lora = [_c(script, "ddp", "lora", 4096, 1, ckpt, "sdpa", "short", gpus=2) for ckpt in (False, True)]
    return (*full, *lora)


# Priority order: the acceptance rows first (LoRA at 32768 with flex, then SDPA), then the long-sequence
# sweep, then the scripts' validation rows, then short sequences. Long SDPA cells run fewer steps (~25 s each).
CELLS: tuple[Cell, ...] = (
    _c("train.py", "ddp", "lora", 32768, 1, True, "flex", "fill", steps=5),
    _c("train.py", "ddp", "lora", 32768, 1, True, "sdpa", "fill", steps=4),
    _c("train.py", "ddp", "lora", 16384, 1, True, "flex", "fill"),
    _c("train.py", "ddp", "lora", 16384, 1, True, "sdpa", "fill", steps=5),
    _c("train.py", "ddp", "full", 8192, 1, True, "sdpa", "fill"),
    _c("train.py", "ddp", "full", 8192, 1, True, "flex", "fill"),
    _c("train.py", "ddp", "lora", 8192, 1, True, "flex", "short"),
    _c("train.py", "ddp", "lora", 8192, 1, True, "sdpa", "short"),
    _c("train.py", "ddp", "full", 1024, 8, False, "sdpa", "short"),
    # Scripts (issue 18): DDP and single-GPU FSDP2, full with checkpointing, LoRA with and without.
    _c("custom", "ddp", "full", 4096, 1, True, "sdpa", "short"),
    _c("custom", "fsdp", "full", 4096, 1, True, "sdpa", "short"),
    _c("custom", "ddp", "lora", 4096, 1, False, "sdpa", "short"),
    _c("custom", "ddp", "lora", 4096, 1, True, "sdpa", "short"),
    _c("trainer", "ddp", "full", 4096, 1, True, "sdpa", "short"),
    _c("trainer", "fsdp", "full", 4096, 1, True, "sdpa", "short"),
    _c("trainer", "ddp", "lora", 4096, 1, False, "sdpa", "short"),
    _c("trainer", "ddp", "lora", 4096, 1, True, "sdpa", "short"),
    # More of the sweep: QLoRA, FSDP2 LoRA reserved memory, full at 16384, short sequences, Liger.
    _c("train.py", "ddp", "qlora", 16384, 1, True, "flex", "fill"),
    _c("train.py", "fsdp", "lora", 16384, 1, True, "flex", "fill"),
    _c("train.py", "ddp", "full", 16384, 1, True, "flex", "fill", liger=True),
    _c("train.py", "ddp", "qlora", 4096, 1, True, "sdpa", "short"),
    _c("train.py", "ddp", "lora", 4096, 4, False, "sdpa", "fill"),
    _c("train.py", "ddp", "lora", 2048, 8, False, "flex", "short"),
    _c("train.py", "ddp", "full", 4096, 2, False, "flex", "fill", liger=True),
    _c("train.py", "ddp", "lora", 32768, 1, True, "flex", "short", steps=5),
    _c("train.py", "ddp", "full", 2048, 4, True, "sdpa", "fill"),
    _c("train.py", "ddp", "lora", 4096, 1, True, "sdpa", "fill"),
    _c("train.py", "ddp", "full", 4096, 1, True, "flex", "short"),
    # Float8 against bf16 on one GPU (issue 20).
    *_fp8_cells(),
    # The families beyond Mistral on one GPU (issue 26): validation rows, bench/families.py.
    *FAMILY_CELLS,
    # Two GPUs (issue 21, run 5): the scripts' validation rows, then train.py beside them as the reference.
    *_two_gpu_cells("custom"),
    *_two_gpu_cells("trainer"),
    *_two_gpu_cells("train.py"),
)
