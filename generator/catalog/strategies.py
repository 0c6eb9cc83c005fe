"""Every distributed strategy the tool knows, once: what it shards, where it offloads, how often it gathers parameters.

The estimator, planner, emitter, checker and the benchmark read these fields instead of comparing strategy names.
Names are the CLI values (`plan --strategy`) and the names in every emitted config header: never rename one.
The order of ALL is the order strategies are estimated, listed and tried.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Framework = Literal["ddp", "deepspeed", "fsdp"]
Offload = Literal["none", "optimizer", "optimizer+params"]

# Accelerate's `distributed_type` for the sharding frameworks; plain data parallelism is NO or MULTI_GPU by count.
_ACCELERATE_TYPES = {"deepspeed": "DEEPSPEED", "fsdp": "FSDP"}
FSDP1_SHARDING: dict[str, tuple[bool, bool] | None] = {  # in torch's enum order, values 1..5
    "FULL_SHARD": (True, False),
    "SHARD_GRAD_OP": (False, False),
    "NO_SHARD": None,
    "HYBRID_SHARD": (True, True),
    "HYBRID_SHARD_ZERO2": (False, True),
}
"""FSDP1's ShardingStrategy -> (reshard after forward, hybrid) in FSDP2 terms; None = nothing sharded (plain DDP).
Keys are torch's enum names and, as accelerate also accepts them, their values "1".."5"."""
FSDP1_SHARDING |= {str(i): FSDP1_SHARDING[k] for i, k in enumerate(FSDP1_SHARDING, start=1)}


@dataclass(frozen=True)
class Strategy:
    name: str
    """CLI value, config-header name and the estimator's key (e.g. "zero2_offload")."""
    framework: Framework
    """Who runs it: "ddp" (torch DistributedDataParallel, or one plain process), "deepspeed" or "fsdp" (FSDP2)."""
    label: str
    """One line saying what it is, for the config header."""
    shards_optimizer: bool
    """Optimizer states (and fp32 masters) are split over the shard group."""
    shards_gradients: bool
    """Gradients are reduce-scattered, each GPU keeping its partition."""
    shards_parameters: bool
    """Parameters are split at rest and all-gathered to run each layer."""
    reshard_after_forward: bool
    """Gathered parameters are freed after forward and gathered again for backward (FSDP2's
    fsdp_reshard_after_forward; ZeRO-3 does the same). False whenever parameters are not sharded."""
    offload: Offload = "none"
    """What lives in CPU memory: nothing, the optimizer states, or the optimizer states and the parameters."""
    hybrid: bool = False
    """HSDP: shard inside a group (an NVLink island or a machine), replicate across groups."""
    zero_stage: int | None = None
    """DeepSpeed ZeRO stage (1, 2, 3); None outside DeepSpeed."""
    one_gpu_twin: str | None = None
    """On one GPU nothing is sharded and this keeps the same states as the named strategy, so it is not offered."""

    @property
    def gathers_per_micro_step(self) -> int:
        """Parameter all-gathers per forward+backward: two with reshard after forward, one without, none unsharded."""
        if not self.shards_parameters:
            return 0
        return 2 if self.reshard_after_forward else 1

    @property
    def offloads_params(self) -> bool:
        return self.offload == "optimizer+params"


ALL: tuple[Strategy, ...] = (
    Strategy(
        "ddp",
        "ddp",
        "DDP (DistributedDataParallel): a full model copy per GPU, gradients all-reduced",
        shards_optimizer=False,
        shards_gradients=False,
        shards_parameters=False,
        reshard_after_forward=False,
    ),
    Strategy(
        "zero1",
        "deepspeed",
        "DeepSpeed ZeRO-1: optimizer states sharded",
        shards_optimizer=True,
        shards_gradients=False,
        shards_parameters=False,
        reshard_after_forward=False,
        zero_stage=1,
        one_gpu_twin="zero2",
    ),
    Strategy(
        "zero2",
        "deepspeed",
        "DeepSpeed ZeRO-2: optimizer states and gradients sharded",
        shards_optimizer=True,
        shards_gradients=True,
        shards_parameters=False,
        reshard_after_forward=False,
        zero_stage=2,
    ),
    Strategy(
        "zero3",
        "deepspeed",
        "DeepSpeed ZeRO-3: optimizer states, gradients and parameters sharded",
        shards_optimizer=True,
        shards_gradients=True,
        shards_parameters=True,
        reshard_after_forward=True,
        zero_stage=3,
        one_gpu_twin="zero2",
    ),
    Strategy(
        "zero2_offload",
        "deepspeed",
        "DeepSpeed ZeRO-2 with optimizer states offloaded to CPU memory",
        shards_optimizer=True,
        shards_gradients=True,
        shards_parameters=False,
        reshard_after_forward=False,
        offload="optimizer",
        zero_stage=2,
    ),
    Strategy(
        "zero3_offload",
        "deepspeed",
        "DeepSpeed ZeRO-3 with optimizer states and parameters offloaded to CPU memory",
        shards_optimizer=True,
        shards_gradients=True,
        shards_parameters=True,
        reshard_after_forward=True,
        offload="optimizer+params",
        zero_stage=3,
    ),
    Strategy(
        "fsdp",
        "fsdp",
        "FSDP2 full shard (parameters resharded after forward; ZeRO-3-like)",
        shards_optimizer=True,
        shards_gradients=True,
        shards_parameters=True,
        reshard_after_forward=True,
    ),
    Strategy(
        "fsdp_grad_op",
        "fsdp",
        "FSDP2 without resharding after forward (ZeRO-2-like)",
        shards_optimizer=True,
        shards_gradients=True,
        shards_parameters=True,
        reshard_after_forward=False,
        one_gpu_twin="fsdp",
    ),
    Strategy(
        "hsdp",
        "fsdp",
        "FSDP2 hybrid shard (HSDP): shard inside each group, replicate across groups",
        shards_optimizer=True,
        shards_gradients=True,
        shards_parameters=True,
        reshard_after_forward=True,
        hybrid=True,
    ),
)
NAMES: tuple[str, ...] = tuple(s.name for s in ALL)
_BY_NAME = {s.name: s for s in ALL}


def strategy(name: str) -> Strategy:
    """The catalog entry for `name`; ValueError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r} (one of {', '.join(NAMES)})") from None


def is_known(name: str) -> bool:
    return name in _BY_NAME


def select(keep: Callable[[Strategy], bool]) -> tuple[Strategy, ...]:
    """The strategies `keep` accepts, in catalog order."""
    return tuple(s for s in ALL if keep(s))


def accelerate_type(s: Strategy, num_processes: int) -> str:
    """Accelerate's `distributed_type` for this strategy: DDP over one process is plain training ("NO")."""
    if s.framework == "ddp":
        return "NO" if num_processes == 1 else "MULTI_GPU"
    return _ACCELERATE_TYPES[s.framework]


def from_accelerate(
    distributed_type: str,
    zero_stage: int | None = None,
    offload: bool = False,
    reshard: bool = True,
    hybrid: bool = False,
) -> Strategy | None:
    """The strategy an Accelerate setup runs, from what its plugins say (the inverse of accelerate_type and the
    emitter). DeepSpeed: `zero_stage` and whether anything is offloaded (stage 0 is plain DDP; ZeRO-1 has no offload
    variant here). FSDP: `hybrid` (a replicate dimension above 1) and `reshard` (after forward). Any other type is
    data parallel or single-process: ddp. None when DeepSpeed's stage matches no strategy."""
    kind = str(getattr(distributed_type, "value", distributed_type)).upper()
    if kind == "DEEPSPEED":
        if zero_stage == 0:
            return _BY_NAME["ddp"]
        stage = select(lambda s: s.framework == "deepspeed" and s.zero_stage == zero_stage)
        offloaded = [s for s in stage if (s.offload != "none") == offload]
        return (offloaded or [s for s in stage if s.offload == "none"] or [None])[0]
    if kind == "FSDP":
        fsdp = select(lambda s: s.framework == "fsdp" and s.hybrid == hybrid)
        if hybrid:
            return fsdp[0]
        return next(s for s in fsdp if s.reshard_after_forward == reshard)
    return _BY_NAME["ddp"]
