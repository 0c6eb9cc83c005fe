"""One cell of the sweep (bench/sweep.py): what runs, and the key its row is filed under in the results file."""

from __future__ import annotations

from dataclasses import dataclass

from bench.run_matrix import BENCH_DOC_TOKENS

CURVE_STEPS = 200  # issue 20's loss and gradient-norm curves
LONG_STEPS = 20  # from here on a cell's key names its step count (every few-step cell runs 4-6)


@dataclass(frozen=True)
class Cell:
    script: str
    """train.py (ours), custom (a plain Accelerate loop) or trainer (TRL SFTTrainer)."""
    strategy: str
    method: str
    seq_len: int
    micro_batch: int
    ckpt: bool
    attention: str
    """sdpa | flex."""
    docs: str
    """short (packed ~54-token examples) | fill (one document per sequence)."""
    liger: bool = False
    steps: int = 6
    gpus: int = 1
    """Processes (one per GPU); the global batch is micro-batch x GPUs, no accumulation."""
    precision: str = "bf16"
    """bf16 | fp8 (train.py --precision fp8: torchao float8 Linears, each decoder layer compiled; issue 20)."""
    compiled: bool = False
    """train.py --compile-layers in bf16: the control that separates compile's effect from float8's."""
    seed: int | None = None
    """train.py --seed (random init and data order); None: its default. A second bf16 curve with another seed shows
    how far two bf16 runs drift apart, the yardstick for fp8's curve."""
    model: str = "mistral-7b"
    """The generator preset whose architecture runs (issue 26: the families beyond Mistral, bench/families.py)."""
    layers: int | None = None
    """Keep the preset's first N decoder layers (a model that fits one GPU where the whole one does not); None: all."""
    lora_targets: str | None = None
    """train.py --lora-targets as the plan prints it (all-linear on a model without the llama names); None: train.py's
    default (the llama names the model has)."""

    @property
    def key(self) -> str:
        ck = "on" if self.ckpt else "off"
        # Mistral-7B's keys stay as the committed results files have them; another model names itself (and its cut)
        family = "" if self.model == "mistral-7b" else f"-{self.model}" + (f"-l{self.layers}" if self.layers else "")
        base = f"{self.script}{family}-g{self.gpus}-{self.strategy}-{self.method}-s{self.seq_len}-mb{self.micro_batch}"
        base += f"-ckpt{ck}"
        tail = ("-liger" if self.liger else "") + ("-fp8" if self.precision == "fp8" else "")
        tail += ("-compiled" if self.compiled else "") + (f"-seed{self.seed}" if self.seed is not None else "")
        tail += f"-{self.lora_targets}" if self.lora_targets else ""
        # a long run (issue 20's 200-step loss curves, 40-step host-bound timings) says so, so it never shares a key
        # with a few-step throughput cell
        return f"{base}-{self.attention}-{self.docs}{tail}" + (f"-n{self.steps}" if self.steps >= LONG_STEPS else "")

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.gpus

    @property
    def doc_tokens(self) -> int:
        return self.seq_len if self.docs == "fill" else BENCH_DOC_TOKENS


def _c(
    script, strategy, method, seq, mb, ckpt, attention, docs, liger=False, steps=6, gpus=1, precision="bf16", comp=False
):
    return Cell(script, strategy, method, seq, mb, ckpt, attention, docs, liger, steps, gpus, precision, comp)
