"""Choose the GPUs, strategy, micro-batch, accumulation and checkpointing for a fine-tuning job.

Pure: topology + model + request in, Plan out. Every configuration is priced by the estimator; the planner only
enumerates and chooses. The rules, in order:
1. Only configurations that fit (predicted reserved memory within the GPU minus headroom) are eligible.
2. GPU count: the requested one; otherwise ("as many as help") the fewest GPUs whose best predicted total throughput is
   within GPU_COUNT_TOLERANCE of the best over all counts. Extra GPUs that buy less than that stay free for others.
3. Among the chosen count, the highest predicted throughput wins. Options within TIE_TOLERANCE of it (below the
   estimator's accuracy) are broken first by strategy (tie_rank: DDP, then FSDP2, then DeepSpeed, then the one that
   needs less memory), then for that strategy by checkpointing off, the fewest extras (SDPA, no Liger, bf16) and
   the largest micro-batch (powers of two up to 8) that fits.
Attention kernel (sdpa / flex) and Liger are options like micro-batch: every pair the request leaves open is
estimated (generator.plan.kernels), Liger only where it is importable. So is precision under --precision auto: fp8 rows
beside bf16 ones where generator.plan.precision lets auto take fp8 (DDP only), fp8 counting as one more extra on a tie;
and train.py's compiled layers beside eager ones in bf16 (generator.plan.compile_lever), one more extra on a tie.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import product

from generator.catalog import strategies as catalog
from generator.errors import UserError
from generator.estimate.compute_source import SPEED_NOTE_PREFIX
from generator.estimate.hardware import unknown_gpu_warning
from generator.estimate.scripts import planned_load_dtype, script_facts
from generator.estimate.types import STRATEGIES, Placement, Workload
from generator.model.types import ModelSpec
from generator.plan import advice, model_reasons, parallel, reasons
from generator.plan.bandwidth_file import MeasuredBandwidth
from generator.plan.batch import batch_options
from generator.plan.candidates import free_gpus, gpu_choices, placement_for
from generator.plan.compile_lever import (
    compile_options,
    compile_reasons,
    compile_refusal,
    unpriced,
    with_eager_strategies,
)
from generator.plan.engines import Engines, default_engines
from generator.plan.fabrics import inter_node_gbps
from generator.plan.kernels import kernel_options, kernel_reasons, liger_gain
from generator.plan.lora_targets import lora_targets_for
from generator.plan.policy import GPU_COUNT_TOLERANCE, allowed_strategies, pick
from generator.plan.precision import (
    fp8_lever,
    precision_options,
    precision_reasons,
    require_fp8_runnable,
    strategy_refusal,
)
from generator.plan.request_check import check_request
from generator.plan.rows import Option, Row
from generator.plan.script_levers import load_dtype_reason, versus_train_py
from generator.plan.types import Plan, PlanRequest
from generator.plan.usable import usable_memory_text
from generator.topology.types import Topology


def make_plan(
    topology: Topology,
    model: ModelSpec,
    request: PlanRequest,
    bandwidth: MeasuredBandwidth | None = None,
    engines: Engines | None = None,
) -> Plan:
    engines = engines or default_engines()
    check_request(request)
    problem = model_reasons.model_problem(model, request)
    if problem:
        raise UserError(problem)
    inter, inter_reason, inter_warning = inter_node_gbps(
        request.inter_node_gbps, topology.inter_node_gbps, request.fabric, request.num_machines
    )
    choices = gpu_choices(topology, request, engines, bandwidth)
    options, split_problems = evaluate(topology, model, request, choices, inter, engines)
    if not options:
        raise UserError(split_problems[-1])
    require_fp8_runnable(request, options[0].placement.gpu_name)
    split_note = _batch_split_note(request, choices, options)
    rows = [Row(o, e) for o in options for e in o.estimates if e.strategy in allowed_strategies(request)]
    fitting = [r for r in rows if r.estimate.fits]
    considered = _parallel_layouts(topology, model, request, choices, options, inter, engines, bandwidth)
    taken, why_parallel = parallel.choose(considered, rows, pick(fitting) if fitting else None, request)
    if taken is not None:
        warnings = plan_warnings(topology, model, request, taken.row, False, inter_warning)
        plan = build_plan(topology, model, request, taken.row, False, [why_parallel, *considered.refused[:3]], warnings)
        return replace(plan, gpu_ids=taken.groups.gpu_ids, parallel=taken.groups)
    if split_note and not fitting:
        raise UserError(f"{split_note} (on fewer GPUs, which it splits over, nothing fits)")
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
        base = options[0].workload.precision  # under auto: bf16, the precision every option was estimated in
        lean = (
            [o for o in options if o.workload.precision == base],
            [r for r in rows if r.option.workload.precision == base],
        )
        note = parallel.nothing_fits_note(considered, rows)
        raise UserError(advice.nothing_fits(model, request, *lean, engines, more_gpus=more) + note)
    # The reasons compare the choice with rows in its own precision; the precision line compares across.
    same = _in_precision(rows, chosen)
    shown = with_eager_strategies(chosen, options)
    why = reasons.explain(request, shown, _in_precision(fitting, chosen), same, inter_reason, GPU_COUNT_TOLERANCE)
    why += kernel_reasons(request, chosen, same, model) + liger_gain(model, request, chosen, engines)
    why += precision_reasons(model, request, chosen, engines, rows)
    why += reasons.host_bound_reason(chosen.estimate, chosen.option.workload, model)
    why += model_reasons.model_caveats(model, chosen.option.workload)
    why += compile_reasons(request, chosen, rows)
    why += [r for r in lora_targets_for(request, model)[1:] if r]
    why += [why_parallel] if why_parallel and not forced else []
    if request.strategy != "auto":
        auto = allowed_strategies(replace(request, strategy="auto"))
        auto_fit = [Row(o, e) for o in options for e in o.estimates if e.fits and e.strategy in auto]
        why += reasons.versus_auto(request, chosen, pick(auto_fit) if auto_fit else None, rows)
    warnings = plan_warnings(topology, model, request, chosen, forced, inter_warning) + (
        [split_note] * bool(split_note)
    )
    if request.script != "train.py" and not forced:  # in the header too: a TRL user reads the YAML
        why += load_dtype_reason(
            request, chosen, lambda w, p, s: engines.estimate_all(model, w, p, s, headroom=request.headroom)
        )
        why += versus_train_py(request, chosen, lambda r: make_plan(topology, model, r, bandwidth, engines))
    plan = build_plan(topology, model, request, shown, forced, why, warnings)
    return replace(plan, levers=tuple(fp8_lever(model, request, chosen, engines)))


def _parallel_layouts(topology, model, request, choices, options, inter, engines, bandwidth) -> parallel.Considered:
    """Tensor/context-parallel layouts over the largest GPU choice, its bf16 workload as the template."""
    big = max(choices, key=lambda c: len(c.gpu_ids))
    own = [o.workload for o in options if o.choice is big and o.workload.precision == "bf16"]
    if not own:
        return parallel.Considered()
    return parallel.consider(topology, model, request, big, inter, engines, own[0], bandwidth)


def _in_precision(rows: list[Row], chosen: Row) -> list[Row]:
    """The rows in the chosen one's precision and compile setting: what its strategy and batch reasons compare."""
    w = chosen.option.workload
    return [r for r in rows if (r.option.workload.precision, r.option.workload.compiled_layers)
            == (w.precision, w.compiled_layers)]  # fmt: skip


def _batch_split_note(request: PlanRequest, choices, options: list[Option]) -> str | None:
    """A --global-batch that does not split over every GPU on offer leaves only fewer GPUs to plan on: say so, with
    the batches that split over all of them (None when the largest GPU count has options)."""
    most = max(len(c.gpu_ids) for c in choices)
    if request.global_batch is None or any(len(o.choice.gpu_ids) == most for o in options):
        return None
    _, hint = batch_options(request, most * request.num_machines)
    return f"{hint} to use all {most} GPUs"


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
        why = reasons.explain(
            request, row, _in_precision(fitting, row), _in_precision(rows, row), inter_reason, GPU_COUNT_TOLERANCE
        )
        why += precision_reasons(model, request, row, engines, rows)
        warnings = plan_warnings(topology, model, request, row, False, inter_warning)
        candidate = build_plan(topology, model, request, row, False, why, warnings)
        if all(plan_key(candidate) != plan_key(p) for p in plans):
            plans.append(candidate)
    return plans[:top]


def plan_key(plan: Plan) -> tuple:
    """What makes two candidates different runs (the trial never runs the same configuration twice)."""
    w = plan.workload
    return (
        plan.strategy, plan.gpu_ids, w.micro_batch, w.grad_accum, w.grad_checkpointing, w.attention, w.liger,
        w.precision,
    )  # fmt: skip


def plan_warnings(topology, model, request, chosen: Row, forced: bool, inter_warning: str | None) -> list[str]:
    warnings = [*topology.warnings, *([inter_warning] if inter_warning else [])]
    unknown = unknown_gpu_warning(chosen.option.placement.gpu_name)
    if unknown:
        warnings.append(unknown)
    if forced:
        warnings.append(reasons.forced_warning(chosen.estimate))
    warnings += [n for n in chosen.estimate.notes if n.startswith(SPEED_NOTE_PREFIX)]  # rates scaled, not measured
    if model.max_seq_len and request.seq_len > model.max_seq_len:
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


def load_dtype(request: PlanRequest) -> str:
    """--load-dtype, with auto resolved by the planner where the script has the flag (estimate.scripts.
    planned_load_dtype: train.py's per-method rule), else as the script resolves it."""
    auto = request.load_dtype == "auto"
    return planned_load_dtype(request.script, request.method) if auto else request.load_dtype


def evaluate(topology, model, request, choices, inter, engines: Engines) -> tuple[list[Option], list[str]]:
    """Estimate every strategy for every GPU choice and batch option; also say which GPU counts could not split."""
    options, problems = [], []
    lora_targets = lora_targets_for(request, model)[0]
    for choice in choices:
        placement = placement_for(choice, topology, request, inter)
        batches, why = batch_options(request, placement.num_gpus)
        if why:
            problems.append(why)
        levers = [(p, c) for p in precision_options(request, placement.gpu_name) for c in compile_options(request, p)]
        for batch, (attention, liger), (precision, compiled) in product(
            batches, kernel_options(request, model), levers
        ):
            workload = Workload(
                method=request.method,
                seq_len=request.seq_len,
                micro_batch=batch.micro_batch,
                grad_accum=batch.grad_accum,
                grad_checkpointing=batch.grad_checkpointing,
                optimizer=request.optimizer,
                load_dtype=load_dtype(request),
                lora_r=request.lora_r,
                lora_targets=lora_targets,
                lora_dropout=script_facts(request.script).lora_dropout,
                liger=liger,
                attention=attention,
                doc_tokens=request.doc_tokens,
                script=request.script,
                precision=precision,
                compiled_layers=compiled,
                grad_as_bucket_view=script_facts(request.script).grad_as_bucket_view,
            )
            skip = [
                (s, engines.applicable(s, workload, placement) or strategy_refusal(request, precision, s)
                 or compile_refusal(request, workload, s))
                for s in STRATEGIES
            ]  # fmt: skip
            runnable = tuple(s for s, why_not in skip if why_not is None)
            estimates = engines.estimate_all(model, workload, placement, strategies=runnable, headroom=request.headroom)
            estimates = [e for e in estimates if not unpriced(request, workload, e)]
            not_applicable = tuple((s, w) for s, w in skip if w is not None)
            options.append(Option(choice, placement, batch, workload, tuple(estimates), not_applicable))
    return options, problems


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
        usable_memory=usable_memory_text(o.placement.gpu_memory_gb, request.headroom, o.placement.num_gpus),
        script_path=request.script_path,
    )
