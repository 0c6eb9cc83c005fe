"""One measured configuration (Row) as the estimator is asked about it: the model, the workload and the card a bench
results file's cell ran, in the estimator's terms (bench/results_rows.py reads the files into rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from bench.harness import bench_model_config
from bench.run_matrix import BENCH_DOC_TOKENS
from bench.wires import NVLINK
from generator.catalog.gpus import find_gpu
from generator.estimate import Workload
from generator.estimate.lora_targets import named_targets
from generator.estimate.scripts import ALL_LINEAR
from generator.model import ModelSpec, load_model, spec_from_any_config
from generator.model.presets import preset_config

GPU_NAME = "NVIDIA H200"


def card_memory_gb(gpu: str) -> float:
    """What NVML reports for the card, as the planner's Placement carries it: the catalog's captured total, else its
    memory in GiB written in decimal GB (NVML counts the binary units)."""
    part = find_gpu(gpu)
    if part is None:
        raise ValueError(f"{gpu}: not in the GPU catalog (generator/catalog/gpus.py)")
    return part.reported_memory_gb or part.memory_gb * 2**30 / 1e9


GPU_MEMORY_GB = card_memory_gb(GPU_NAME)
"""What NVML reports for the measured H200 (the catalog's captured total)."""
MODEL = "mistral-7b"


def bench_attention(flex: bool) -> dict:
    """Workload / PlanRequest attention fields of a matrix cell: the bench data is packed (its mean document length)
    under either kernel, so SDPA gets a dense mask."""
    return {"attention": "flex" if flex else "sdpa", "doc_tokens": BENCH_DOC_TOKENS}


SCRIPT_LOAD_DTYPE = {"train.py": "fp32", "custom": "bf16", "trainer": "fp32"}
"""What each bench script loads in when --load-dtype is not given (its library's default, docs/scripts.md)."""


@dataclass(frozen=True)
class Row:
    """One measured configuration."""

    source: str
    """Results file name."""
    machine: str
    strategy: str
    method: str
    gpus: int
    seq_len: int
    micro_batch: int
    ckpt: bool
    load_dtype: str
    liger: bool = False
    grad_accum: int = 1
    status: str = "ok"
    """ok | oom | error (matrix cells); other files hold only runs that finished."""
    alloc_gb: float | None = None
    """Measured peak torch.cuda.max_memory_allocated, worst rank, decimal GB."""
    reserved_gb: float | None = None
    """Measured peak torch.cuda.max_memory_reserved, worst rank."""
    tps: float | None = None
    """Measured tokens/s per GPU."""
    from_matrix: bool = False
    """Written by bench/run_matrix.py (every strategy under one harness, so they can be ranked)."""
    compiled: bool = False
    """Run under Accelerate's dynamo config (matrix rows): a lever the estimator does not model."""
    compiled_layers: bool = False
    """train.py --compile-layers (sweep rows): each decoder layer compiled, modelled (Workload.compiled_layers)."""
    precision: str = "bf16"
    """bf16 | fp8 (train.py --precision fp8, sweep rows)."""
    flex: bool = False
    """Attention through transformers' flex_attention instead of SDPA."""
    bucket_view: bool = True
    """DDP gradient_as_bucket_view: on in train.py (matrix rows), off under plain Accelerate (memory-phase rows)."""
    script: str = "train.py"
    """What ran the row: train.py, custom (a plain Accelerate loop) or trainer (TRL SFTTrainer)."""
    doc_tokens: int | None = None
    """Tokens per packed document (sweep rows); matrix rows use the bench data's mean."""
    key: str = ""
    """The harness's cell key (sweep rows), which a later file's `supersedes` refers to."""
    wire: str = NVLINK
    """What joined the GPUs (bench/wires.py): nvlink, p2poff (host path) or sockets."""
    role: str = "fit"
    """fit (the estimator's terms may be fitted to it), validation (held out: VALIDATION_KEYS) or superseded (a later
    file of the same harness measured the same cell again after a fix: shown, unscored)."""
    lora_targets: tuple[str, ...] = ALL_LINEAR
    """LoRA's adapted projections (every bench script adapts all of them; TRL's CLI rows say which)."""
    lora_dropout: float = 0.0
    """LoRA dropout (TRL's CLI default 0.05; the other bench scripts 0)."""
    lora_by_name: bool = False
    """train.py ran without --lora-targets: its default adapts the llama names the model has (q/k/v/o_proj alone on
    StarCoder2, training/model.linear_targets), not the model's every Linear that the plan's `all-linear` asks for."""
    model: str = MODEL
    """The generator preset or bench model (bench/models) that ran (sweep rows name theirs; every earlier row is
    Mistral-7B)."""
    layers: int | None = None
    """The preset cut to its first N decoder layers (bench/families.py); None: the whole model."""
    transformers: str | None = None
    """The transformers version the row ran under (a results file's `versions`; None where the file names none)."""
    ran_predicted: tuple = field(default=(), compare=False)
    """(allocated GB, tokens/s) the estimator predicted when the cell ran, under its versions (sweep rows); shown
    beside a row whose model's code the installed transformers changed (bench/holdout.OTHER_CODE)."""
    host: tuple = field(default=(), compare=False)  # dicts: no part of the row's identity or hash
    """`probe --compute` host rows measured on the row's own machine in the same device call (a results file's
    `host`): the row is priced with them instead of the shipped table's, as a user who probes their machine is."""

    @cached_property
    def config(self) -> dict | None:
        """The config the row's model is sized from: the bench model's or the preset's, its layer count cut as the
        run's config was; None for a whole preset (load_model's)."""
        bench_model = bench_model_config(self.model)
        if self.layers is None and bench_model is None:
            return None
        config = bench_model or preset_config(self.model)
        return {**config, "num_hidden_layers": self.layers or config["num_hidden_layers"]}

    @cached_property
    def spec(self) -> ModelSpec:
        """The model the row's prediction is for (read once: the workload's LoRA targets and the prediction both
        ask)."""
        return load_model(self.model) if self.config is None else spec_from_any_config(self.config, self.model)

    @property
    def unmodelled(self) -> bool:
        """A lever the estimator does not model and the generator does not emit (torch.compile): the row is shown
        but kept out of the targets and the ranking."""
        return self.compiled

    @property
    def label(self) -> str:
        extra = (f" {self.method}" if self.method != "full" else "") + (" liger" if self.liger else "")
        extra += (" compile" if self.compiled else "") + (" layers-compiled" if self.compiled_layers else "")
        extra += " flex" if self.flex else ""
        extra += " fp8" if self.precision == "fp8" else ""
        extra += f" {self.wire}" if self.wire != NVLINK else ""
        if self.model != MODEL:
            extra = f" {self.model}" + (f"-l{self.layers}" if self.layers else "") + extra
        if self.doc_tokens is not None:
            extra += " fill" if self.doc_tokens >= self.seq_len else f" docs{self.doc_tokens}"
        ckpt = "ckpt" if self.ckpt else "no-ckpt"
        mb = f"mb{self.micro_batch}" + (f"x{self.grad_accum}" if self.grad_accum > 1 else "")
        script = "" if self.script == "train.py" else f"{self.script}: "
        return f"{script}{self.gpus}x {self.strategy}{extra} {self.load_dtype} s{self.seq_len} {mb} {ckpt}"

    @property
    def workload(self) -> Workload:
        return Workload(
            method=self.method,
            seq_len=self.seq_len,
            micro_batch=self.micro_batch,
            grad_accum=self.grad_accum,
            grad_checkpointing=self.ckpt,
            load_dtype=self.load_dtype,
            liger=self.liger,
            grad_as_bucket_view=self.bucket_view,
            script=self.script,
            precision=self.precision,
            compiled_layers=self.compiled_layers,
            lora_targets=named_targets(self.spec, self.lora_targets) if self.lora_by_name else self.lora_targets,
            lora_dropout=self.lora_dropout,
            **(self._attention() if self.doc_tokens is not None else bench_attention(self.flex)),
        )

    def _attention(self) -> dict:
        return {"attention": "flex" if self.flex else "sdpa", "doc_tokens": self.doc_tokens}
