"""Inputs and outputs of the estimator: what is trained how (Workload), on which GPUs (Placement), and what that
costs per strategy (Estimate). Pure data; the estimator functions live beside this module."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from generator.catalog.strategies import NAMES as STRATEGIES  # noqa: F401  (re-exported: the names, in order)
from generator.estimate.compute_table import ComputeTable

Method = Literal["full", "lora", "qlora"]
"""Fine-tuning method: every weight, LoRA adapters on a frozen base, or adapters on a 4-bit base (CLI values)."""
METHODS: tuple[str, ...] = get_args(Method)
LoadDtype = Literal["fp32", "bf16"]
"""dtype the weights are loaded in (train.py --load-dtype)."""
LOAD_DTYPES: tuple[str, ...] = get_args(LoadDtype)
DEFAULT_LOAD_DTYPE: dict[str, str] = {"full": "fp32", "lora": "bf16", "qlora": "bf16"}
"""What train.py's --load-dtype auto resolves to per method (training/args.py reads this table): fp32 masters for
full fine-tuning, a bf16 frozen base under fp32 adapters."""


@dataclass(frozen=True)
class Workload:
    method: Method = "full"
    """What is trained (see Method)."""
    seq_len: int = 4096
    micro_batch: int = 1
    """Sequences per GPU per forward/backward."""
    grad_accum: int = 1
    grad_checkpointing: bool = True
    """Full activation checkpointing of every decoder layer."""
    optimizer: str = "adamw"
    """adamw | adamw8bit."""
    load_dtype: LoadDtype = "fp32"
    """dtype the weights are loaded in: fp32 (train.py default: fp32 master weights under every strategy) or bf16
    (pure-bf16 training under DDP; FSDP and DeepSpeed still keep fp32 masters)."""
    mixed_precision: str = "bf16"
    """bf16 | no."""
    precision: str = "bf16"
    """bf16 | fp8: float8 Linear layers via torchao (train.py --precision fp8; estimate.precision)."""
    compiled_layers: bool = False
    """Each decoder layer under torch.compile (train.py --compile-layers); fp8 always does (layers_compiled)."""
    lora_r: int = 16
    lora_targets: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
    """Projections LoRA adapts in each decoder layer (estimate.scripts.ALL_LINEAR names them)."""
    lora_dropout: float = 0.0
    """LoRA dropout (TRL's CLI: 0.05): each adapter keeps a dropout mask of its input and runs one more pass."""
    liger: bool = False
    """Liger fused kernels (fused linear cross-entropy: no full logits tensor)."""
    attention: str = "sdpa"
    """sdpa | flex | eager: train.py's --attn-implementation (generator.estimate.attention says what each computes)."""
    doc_tokens: int | None = None
    """Mean tokens per packed document, for every kernel (packing hands SDPA a dense mask; flex skips the empty
    tiles); None = documents fill every sequence (no packing: flex's least favourable case)."""
    grad_as_bucket_view: bool = True
    """DDP `gradient_as_bucket_view`: train.py turns it on (the gradients are views into the Reducer's buckets, which
    live for the whole run); Accelerate's own default is False (the Reducer keeps a second gradient copy)."""
    # -- the training script (issue 18) --
    script: str = "train.py"
    """The script launched with the YAML (estimate.scripts.SCRIPTS): which AdamW implementation, loss and defaults
    it brings (estimate.scripts.ScriptFacts). The caller sets grad_as_bucket_view and load_dtype from the same facts."""
    # -- end script --

    @property
    def layers_compiled(self) -> bool:
        """The decoder layers run compiled: asked for, or implied by fp8 (float8's casts fuse only under compile)."""
        return self.compiled_layers or self.precision == "fp8"


@dataclass(frozen=True)
class Placement:
    """The GPUs a job runs on, reduced to what the estimator needs (no topology object: the planner derives these)."""

    num_gpus_per_machine: int
    gpu_name: str
    gpu_memory_gb: float
    busbw_gbps: float
    """All-reduce bus bandwidth over the GPUs of one machine in this job (0 for one GPU)."""
    num_machines: int = 1
    inter_node_gbps: float | None = None
    """Bus bandwidth between machines (required when num_machines > 1)."""
    shard_size: int | None = None
    """HSDP shard-group size (GPUs sharing one model copy); None = num_gpus_per_machine."""
    shard_busbw_gbps: float | None = None
    """Bus bandwidth inside one shard group; None = busbw_gbps."""
    host_gbps: float = 25.0
    """Host<->GPU copy bandwidth for offload (PCIe)."""
    compute: ComputeTable | None = None
    """Operator rates measured on this GPU (`plan --compute-file`); None: the shipped H200 table, scaled by the GPU
    catalog for any other GPU (estimate.compute_source)."""

    @property
    def num_gpus(self) -> int:
        return self.num_gpus_per_machine * self.num_machines


@dataclass(frozen=True)
class Estimate:
    strategy: str
    fits: bool
    """reserved_gb <= gpu memory x (1 - headroom)."""
    peak_gb: float
    """Predicted torch.cuda.max_memory_allocated per GPU, decimal GB."""
    reserved_gb: float
    """Predicted torch.cuda.max_memory_reserved per GPU (what actually runs out)."""
    breakdown: dict[str, float]
    """Named GB terms alive at the peak; they sum to peak_gb."""
    capacity_gb: float
    """GPU memory left for the job after headroom."""
    comm_gb_per_step: float
    """Bytes each GPU sends per optimizer step over its bottleneck link, GB."""
    comm_s: float
    compute_s: float
    step_s: float
    """Predicted optimizer-step time (all accumulation micro-steps)."""
    tokens_per_s_per_gpu: float
    mfu: float
    """Model FLOPs utilisation (6N + 12*L*h*s over the GPU's dense bf16 peak)."""
    cpu_gb: float = 0.0
    """Host memory per machine for offloaded states."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    gpu_work_s: float = 0.0
    """The GPU's operator time per step (estimate.compute_time's gpu_s), without the memory-bound passes."""
    host_s: float = 0.0
    """CPU time per step to issue the kernels (the table's host rows; 0 where none): the step is host-bound when it
    passes gpu_work_s, and then follows the machine's CPU, not its GPU."""
    tail_s: float = 0.0
    """GPU time per step issued after the backward (clip and the optimizer's update): a host-bound step takes host_s
    plus this."""
    layers_from_operators: bool = False
    """An MoE step whose decoder layers no whole-layer row of the compute table prices, so they are summed from their
    operators (layer_rows.moe_priced_by_operators; the plan warns, and does not take compiled layers for it)."""
    host_as_mistral: bool = False
    """The host time of a model other than a dense Mistral read from the Mistral layer's host rows: the table has no
    rows of its own layer (estimate.host_time; `probe --compute --model` times them)."""

    @property
    def host_bound(self) -> bool:
        return self.host_s > self.gpu_work_s > 0
