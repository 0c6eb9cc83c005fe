"""Choose the GPUs, strategy, micro-batch, accumulation and checkpointing for a fine-tuning job.

Pure: topology + model + request in, Plan out. Every configuration is priced by the estimator; the planner only
enumerates and chooses. The rules, in order:
1. Only configurations that fit (predicted reserved memory within the GPU minus headroom) are eligible.
2. GPU count: the requested one; otherwise ("as many as help") the fewest GPUs whose best predicted total throughput is
   within GPU_COUNT_TOLERANCE of the best over all counts. Extra GPUs that buy less than that stay free for others.
3. Among the chosen count, the highest predicted throughput wins. Options within TIE_TOLERANCE of it (below the
   estimator's accuracy) are broken first by strategy (tie_rank: DDP, then FSDP2, then DeepSpeed, then the one that
   needs less memory), then for that strategy by checkpointing off and the largest micro-batch (powers of two up to
   8) that fits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from generator.catalog import strategies as catalog
from generator.errors import UserError
from generator.estimate.types import STRATEGIES, Estimate, Placement, Workload
from generator.model.types import ModelSpec
from generator.plan import advice, reasons
from generator.plan.bandwidth_file import MeasuredBandwidth
from generator.plan.batch import BatchOption, batch_options
from generator.plan.candidates import GpuChoice, free_gpus, gpu_choices, placement_for
from generator.plan.engines import Engines, default_engines
from generator.plan.fabrics import inter_node_gbps
from generator.plan.request_check import check_request
from generator.plan.types import Plan, PlanRequest
from generator.topology.types import Topology

GPU_COUNT_TOLERANCE = 0.05
"""More GPUs must buy at least 5% more predicted throughput to be used when the user did not fix the count."""
TIE_TOLERANCE = 0.02
"""Throughputs within 2% are a tie: the estimator cannot tell them apart."""
OFFLOAD = tuple(s.name for s in catalog.select(lambda s: s.offload != "none"))
"""Strategies that keep states in CPU memory: considered only with --allow-offload."""


@dataclass(frozen=True)
class Option:
    """One GPU choice and batch setting, with every applicable strategy estimated on it."""

    choice: GpuChoice
    placement: Placement
    batch: BatchOption
    workload: Workload
    estimates: tuple[Estimate, ...]
    not_applicable: tuple[tuple[str, str], ...]
    """(strategy, why it cannot run on this placement)."""


@dataclass(frozen=True)
class Row:
    option: Option
    estimate: Estimate

    @property
    def total_tps(self) -> float:
        return self.estimate.tokens_per_s_per_gpu * self.option.placement.num_gpus

    @property
    def num_gpus(self) -> int:
        return self.option.placement.num_gpus


def make_plan(
    topology: Topology,
    model: ModelSpec,
    request: PlanRequest,
    bandwidth: MeasuredBandwidth | None = None,
    engines: Engines | None = None,
) -> Plan:
    engines = engines or default_engines()
    check_request(request)
    inter, inter_reason, inter_warning = inter_node_gbps(
        request.inter_node_gbps, topology.inter_node_gbps, request.fabric, request.num_machines
    )
    choices = gpu_choices(topology, request, engines, bandwidth)
    options, split_problems = evaluate(topology, model, request, choices, inter, engines)
    if not options:
        raise UserError(split_problems[-1])
    rows = [Row(o, e) for o in options for e in o.estimates if e.strategy in allowed_strategies(request)]
    fitting = [r for r in rows if r.estimate.fits]
    if fitting:
        chosen, forced = pick(fitting), False
    elif request.strategy != "auto" and rows:
        # Nothing to rank on speed: use every GPU asked for (or free) at the least memory, closest to fitting.
        chosen, forced = min(rows, key=lambda r: (-r.num_gpus, r.estimate.reserved_gb)), True
    elif request.strategy != "auto":
        why = {s: w for o in options for s, w in o.not_applicable}.get(request.strategy, "no estimate")
        raise UserError(f"--strategy {request.strategy} cannot run here: {why}; use --strategy auto")
    else:
        more = _all_free(topology, request, engines, bandwidth, inter)
        raise UserError(advice.nothing_fits(model, request, options, rows, engines, more_gpus=more))
    why = reasons.explain(request, chosen, fitting, rows, inter_reason, GPU_COUNT_TOLERANCE)
    if request.strategy != "auto":
        auto = allowed_strategies(replace(request, strategy="auto"))
        auto_fit = [Row(o, e) for o in options for e in o.estimates if e.fits and e.strategy in auto]
        why += reasons.versus_auto(chosen, pick(auto_fit) if auto_fit else None)
    warnings = plan_warnings(topology, model, request, chosen, forced, inter_warning)
    return build_plan(topology, model, request, chosen, forced, why, warnings)


def ranked_candidates(
    topology: Topology,
    model: ModelSpec,
    request: PlanRequest,
    bandwidth: MeasuredBandwidth | None = None,
    engines: Engines | None = None,
    top: int = 3,
) -> list[Plan]:
    """The `top` best predicted configurations that fit, as Plans: make_plan's choice first, then the other fitting
    (GPU choice, batch, strategy) rows by predicted total throughput. What `plan --trial` runs for real."""
    engines = engines or default_engines()
    first = make_plan(topology, model, request, bandwidth, engines)  # validates and raises the usual UserErrors
    inter, inter_reason, inter_warning = inter_node_gbps(
        request.inter_node_gbps, topology.inter_node_gbps, request.fabric, request.num_machines
    )
    choices = gpu_choices(topology, request, engines, bandwidth)
    options, _ = evaluate(topology, model, request, choices, inter, engines)
    rows = [Row(o, e) for o in options for e in o.estimates if e.strategy in allowed_strategies(request)]
    fitting = [r for r in rows if r.estimate.fits]
    plans = [first]
    for row in sorted(fitting, key=lambda r: -r.total_tps):
        if len(plans) >= top:
            break
        why = reasons.explain(request, row, fitting, rows, inter_reason, GPU_COUNT_TOLERANCE)
        warnings = plan_warnings(topology, model, request, row, False, inter_warning)
        candidate = build_plan(topology, model, request, row, False, why, warnings)
        if all(plan_key(candidate) != plan_key(p) for p in plans):
            plans.append(candidate)
    return plans[:top]


def plan_key(plan: Plan) -> tuple:
    """What makes two candidates different runs (the trial never runs the same configuration twice)."""
    w = plan.workload
    return (plan.strategy, plan.gpu_ids, w.micro_batch, w.grad_accum, w.grad_checkpointing)


def plan_warnings(topology, model, request, chosen: Row, forced: bool, inter_warning: str | None) -> list[str]:
    warnings = [*topology.warnings, *([inter_warning] if inter_warning else [])]
    if forced:
        warnings.append(reasons.forced_warning(chosen.estimate))
    if request.seq_len > model.max_seq_len:
        warnings.append(f"--seq-len {request.seq_len} exceeds the model's {model.max_seq_len} positions")
    if request.num_machines > 1 and not request.main_process_ip:
        warnings.append("--main-process-ip not set: give machine 0's private address before launching")
    return list(dict.fromkeys(warnings))


def _all_free(topology, request, engines, bandwidth, inter) -> Placement | None:
    """Placement on every free GPU, when the user asked for fewer (for the "what would fit" advice)."""
    free = free_gpus(topology, request)
    if request.num_gpus is None or request.num_gpus >= len(free):
        return None
    choice = gpu_choices(topology, replace(request, num_gpus=len(free)), engines, bandwidth)[0]
    return placement_for(choice, topology, request, inter)


def evaluate(topology, model, request, choices, inter, engines: Engines) -> tuple[list[Option], list[str]]:
    """Estimate every strategy for every GPU choice and batch option; also say which GPU counts could not split."""
    options, problems = [], []
    for choice in choices:
        placement = placement_for(choice, topology, request, inter)
        batches, why = batch_options(request, placement.num_gpus)
        if why:
            problems.append(why)
        for batch in batches:
            workload = Workload(
                method=request.method,
                seq_len=request.seq_len,
                micro_batch=batch.micro_batch,
                grad_accum=batch.grad_accum,
                grad_checkpointing=batch.grad_checkpointing,
                optimizer=request.optimizer,
                load_dtype=request.load_dtype,
                lora_r=request.lora_r,
                liger=request.liger,
                attention=request.attention,
                doc_tokens=request.doc_tokens,
            )
            skip = [(s, engines.applicable(s, workload, placement)) for s in STRATEGIES]
            runnable = tuple(s for s, why_not in skip if why_not is None)
            estimates = engines.estimate_all(model, workload, placement, strategies=runnable, headroom=request.headroom)
            not_applicable = tuple((s, w) for s, w in skip if w is not None)
            options.append(Option(choice, placement, batch, workload, tuple(estimates), not_applicable))
    return options, problems


def allowed_strategies(request: PlanRequest) -> tuple[str, ...]:
    if request.strategy != "auto":
        return (request.strategy,)
    return tuple(s for s in STRATEGIES if request.allow_offload or s not in OFFLOAD)


def pick(fitting: list[Row]) -> Row:
    best_by_count: dict[int, float] = {}
    for r in fitting:
        best_by_count[r.num_gpus] = max(best_by_count.get(r.num_gpus, 0.0), r.total_tps)
    best = max(best_by_count.values())
    count = min(n for n, tps in best_by_count.items() if tps >= (1 - GPU_COUNT_TOLERANCE) * best)
    same_count = [r for r in fitting if r.num_gpus == count]
    top = max(r.total_tps for r in same_count)
    near = [r for r in same_count if r.total_tps >= (1 - TIE_TOLERANCE) * top]
    least_memory = {}
    for r in near:
        s = r.estimate.strategy
        least_memory[s] = min(least_memory.get(s, float("inf")), r.estimate.reserved_gb)
    strategy = min(least_memory, key=lambda s: (tie_rank(s), least_memory[s]))
    own = [r for r in near if r.estimate.strategy == strategy]
    return min(
        own, key=lambda r: (r.option.batch.grad_checkpointing, -r.option.batch.micro_batch, r.estimate.reserved_gb)
    )


def tie_rank(strategy: str) -> int:
    """Among strategies the estimator cannot tell apart on speed: DDP (nothing sharded, least to go wrong), then
    PyTorch-native FSDP2 (no extra install), then DeepSpeed (an optional package built from source), offload last."""
    s = catalog.strategy(strategy)
    if s.offload != "none":
        return 3
    return {"ddp": 0, "fsdp": 1, "deepspeed": 2}[s.framework]


def build_plan(topology, model, request, chosen: Row, forced: bool, why: list[str], warnings: list[str]) -> Plan:
    o, e = chosen.option, chosen.estimate
    hsdp = catalog.strategy(e.strategy).hybrid
    shard = o.choice.shard_size if hsdp else 1
    return Plan(
        model=model,
        workload=o.workload,
        strategy=e.strategy,
        gpu_ids=o.choice.hsdp_ids if hsdp else o.choice.gpu_ids,
        num_machines=request.num_machines,
        global_batch=o.batch.global_batch,
        estimate=e,
        estimates=o.estimates,
        reasons=tuple(why),
        machine=topology.source,
        gpu_name=o.placement.gpu_name,
        hsdp_replicate=o.placement.num_gpus // shard if hsdp else 1,
        hsdp_shard=shard,
        machine_rank=request.machine_rank,
        main_process_ip=request.main_process_ip,
        main_process_port=request.main_process_port,
        forced=forced,
        warnings=tuple(warnings),
    )
