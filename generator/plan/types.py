"""What the user asks for (PlanRequest) and what the planner decides (Plan). The emitter reads only a Plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from generator.estimate.types import Estimate, Workload
from generator.model.types import ModelSpec
from generator.plan.parallel_layout import ParallelGroups


@dataclass(frozen=True)
class PlanRequest:
    method: str = "full"
    seq_len: int = 4096
    micro_batch: int | None = None
    """None: the planner picks the largest that fits (up to 8)."""
    global_batch: int | None = None
    """Sequences per optimizer step over all GPUs; None = micro_batch x GPUs (no accumulation)."""
    num_gpus: int | None = None
    """GPUs per machine; None: as many as help."""
    exclude: tuple[int, ...] = ()
    """Busy GPUs (PCI order) the plan must not use."""
    strategy: str = "auto"
    """auto or one of STRATEGIES."""
    grad_checkpointing: str = "auto"
    """auto | on | off."""
    allow_offload: bool = False
    headroom: float = 0.10
    """Fraction of GPU memory kept free."""
    load_dtype: str = "auto"
    """auto (train.py's default for the method: generator.estimate.types.DEFAULT_LOAD_DTYPE) | fp32 | bf16."""
    optimizer: str = "adamw"
    lora_r: int = 16
    lora_targets: tuple[str, ...] | None = None
    """Projections LoRA adapts (estimate.scripts short names); None: the script's default (train.py all linear
    layers, TRL and peft q_proj and v_proj)."""
    # --- kernels (issue 17) ---
    liger: bool | None = None
    """None: the planner chooses (only when liger_installed); True/False: --liger / --no-liger."""
    liger_installed: bool = False
    """liger_kernel is importable where the job runs (the CLI checks with importlib.util.find_spec)."""
    attention: str = "auto"
    """auto (the planner chooses sdpa or flex) | sdpa | flex (train.py --attn-implementation flex_attention)."""
    doc_tokens: int | None = None
    """Mean tokens per packed document (all kernels); None = documents fill the sequence (flex's worst case)."""
    # --- end kernels ---
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None
    main_process_port: int = 29500
    inter_node_gbps: float | None = None
    """Measured all-reduce busbw between machines, GB/s; None: from the topology, --fabric, or an assumed default."""
    fabric: str | None = None
    """Named inter-node fabric (generator.plan.fabrics.FABRICS) whose predicted bandwidth is used when no number is
    given."""
    precision: str = "auto"
    """auto | bf16 | fp8 (float8 Linears via torchao, train.py --precision fp8). auto: fp8 where it was measured to pay
    (generator.plan.precision: DDP, full or LoRA, fp8 tensor cores, torchao importable, predicted faster), else bf16."""
    compile_layers: bool | None = None
    """train.py --compile-layers: each decoder layer compiled in bf16 (float8 compiles them anyway). None: the planner
    estimates both and takes compiled layers where predicted faster (generator.plan.compile_lever: train.py, full or
    LoRA, DDP); True / False: --compile-layers / --no-compile-layers."""
    fp8_installed: bool = False
    """torchao is importable where the job runs (the CLI checks with importlib.util.find_spec, as for Liger)."""
    tp_size: int | None = None
    """Tensor-parallel group size to force (--tp-size); None: the planner chooses (generator.plan.parallel)."""
    cp_size: int | None = None
    """Context-parallel group size to force (--cp-size); None: the planner chooses."""
    # -- the training script (issue 18) --
    script: str = "train.py"
    """The script the YAML is launched with (estimate.scripts.SCRIPTS); load_dtype should be its default unless the
    user chose one (ui.request does that). The planner chooses only among this script's levers (ScriptFacts)."""
    script_path: str | None = None
    """The user's own script file for `trainer` (a TRL-CLI-style script) or `custom` (a plain Accelerate loop);
    None: TRL's own `trl.scripts.sft` for trainer, a placeholder name for custom."""
    # -- end script --


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    workload: Workload
    """The workload as chosen (micro-batch, accumulation and checkpointing filled in)."""
    strategy: str
    gpu_ids: tuple[int, ...]
    """PCI-order GPU ids on each machine, ordered so each NVLink island is a contiguous block of ranks."""
    num_machines: int
    global_batch: int
    estimate: Estimate
    """The chosen row."""
    estimates: tuple[Estimate, ...]
    """Every strategy considered for the chosen GPUs, for the table."""
    reasons: tuple[str, ...]
    machine: str
    """Topology source, for headers ("machine:hgx-h200-8", "nvml", ...)."""
    gpu_name: str
    hsdp_replicate: int = 1
    hsdp_shard: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None
    main_process_port: int = 29500
    forced: bool = False
    """True when the user forced a strategy that does not fit: written only with --force, and the header says so."""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    levers: tuple[str, ...] = ()
    """Gains the plan did not take (fp8 where --precision auto kept bf16, and why): printed with the reasons, not
    written in the config header, so a bf16 plan's config stays as it was."""
    usable_memory: str = ""
    """Why the usable budget (estimate.capacity_gb) is less than the card: headroom, CUDA context, NCCL buffers."""
    script_path: str | None = None
    """PlanRequest.script_path: what the launch command runs for trainer / custom."""
    parallel: ParallelGroups | None = None
    """Tensor/context-parallel groups over FSDP2 (generator.plan.parallel); None: data parallelism only."""

    @property
    def num_processes(self) -> int:
        """Total over all machines, as accelerate expects."""
        return len(self.gpu_ids) * self.num_machines
