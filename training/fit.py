"""Does this run fit on the GPU train.py sees? The generator's plan for exactly this run, on a Topology of the visible
GPU (name and memory from torch.cuda), the estimator's memory for each phase of a step, and the levers that would
fit, priced by the same planner the launch config came from (docs/train.md, "Out of memory").

Pure apart from `visible_gpu`: a few make_plan calls of a few milliseconds each, so train.py can ask before loading.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from training import hooks

# The planner prices bandwidth too; only memory is used here, so the links between the visible GPUs get NVLink's
# bandwidth (a slower wire changes predicted speed, never memory).
ASSUMED_BUSBW_GBPS = 100.0
ASSUMED_INTER_NODE_GBPS = 25.0
# train.py's phases (it marks each with oom.enter); phase_gb maps them to the estimator's (estimate.states.PHASES).
LOAD, STEP, OPTIMIZER, SAVE = "model load", "forward/backward", "optimizer step", "checkpoint save"
EXPORT = "export"  # no prediction: the estimator does not model the export's gather
STEP_PHASES = ("forward_end", "backward_start", "backward_end")
WEIGHT_TERMS = ("weights", "frozen_weights", "master_weights_fp32", "weights_bf16")


@dataclass(frozen=True)
class Fit:
    """The plan's verdict on this run, and what the levers and the OOM message need to price alternatives."""

    gpu: str
    """"NVIDIA H200 (150.1 GB)": what train.py sees, as the plan saw it."""
    strategy: str
    fits: bool
    reserved_gb: float
    """Predicted max_memory_reserved per GPU."""
    peak_gb: float
    """Predicted max_memory_allocated per GPU."""
    usable_gb: float
    usable_text: str
    """Why usable is less than the card: the CUDA context (and NCCL's buffers); the verdict keeps no headroom."""
    phases_gb: dict[str, float]
    """train.py phase -> predicted allocated GB at its worst (LOAD: the weights as trained; a QLoRA random init's
    transient bf16 copy is not in it, the estimator has no load phase)."""
    topology: object
    model: object
    request: object


def visible_gpu() -> tuple[str, float] | None:
    """(name, decimal GB) of this process's GPU, or None without CUDA; TRAIN_TEST_GPU pretends one (tests)."""
    pretend = hooks.pretend_gpu()
    if pretend is not None:
        return pretend
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return props.name, props.total_memory / 1e9


def topology_of(name: str, memory_gb: float, count: int):
    """`count` GPUs like the visible one, joined by ASSUMED_BUSBW_GBPS (memory does not depend on the wire)."""
    from generator.topology.types import Gpu, Link, Topology

    gpus = tuple(Gpu(i, name, memory_gb) for i in range(count))
    links = {(i, j): Link("NV", 18, ASSUMED_BUSBW_GBPS) for i in range(count) for j in range(i + 1, count)}
    return Topology(gpus=gpus, links=links, source="train.py: the visible GPU")


def plan_request(args, strategy: str, local: int, machines: int, checkpointing: bool, doc_tokens, fp8: bool):
    """The PlanRequest that describes exactly this run (every choice the planner could make is fixed), or None when
    the planner has no such knob (eager attention)."""
    from generator.plan.types import PlanRequest

    if args.attn_implementation == "eager":
        return None
    return PlanRequest(
        method=args.method,
        seq_len=args.seq_len,
        micro_batch=args.micro_batch,
        global_batch=args.global_batch,
        num_gpus=local,
        num_machines=machines,
        inter_node_gbps=ASSUMED_INTER_NODE_GBPS if machines > 1 else None,
        strategy=strategy,
        grad_checkpointing="on" if checkpointing else "off",
        load_dtype=args.load_dtype,
        lora_r=args.lora_r,
        liger=args.liger,
        liger_installed=args.liger,
        attention="flex" if args.attn_implementation == "flex_attention" else "sdpa",
        doc_tokens=doc_tokens,
        precision="fp8" if fp8 else "bf16",
        fp8_installed=fp8,
        compile_layers=bool(getattr(args, "compile_layers", False)),  # the run's own; the planner must not pick
        script="train.py",
    )


def check_fit(spec, request, world: int, gpu: tuple[str, float] | None) -> Fit | None:
    """The plan for this run on `gpu`; None when there is no GPU, nothing to size, or the planner cannot price this
    combination (then train.py runs unchecked, as before the check existed)."""
    if gpu is None or spec is None or request is None:
        return None
    from generator.plan.planner import make_plan

    topology = topology_of(gpu[0], gpu[1], request.num_gpus)
    try:
        # No headroom for the verdict: it refuses runs predicted to overflow the card, not runs the planner's 10%
        # margin would call tight (Mistral-7B full on one H200, seq 4096: 137.6 GB predicted, 117 GB measured).
        plan = make_plan(topology, spec, replace(request, headroom=0.0))
        phases = phase_gb(spec, plan.workload, _placement(topology, request), plan.estimate.strategy)
    except Exception:  # UserError for what it cannot price; training never depends on the estimator
        return None
    if plan.num_processes != world:
        return None
    e = plan.estimate
    return Fit(
        gpu=f"{gpu[0]} ({gpu[1]:.1f} GB)",
        strategy=e.strategy,
        fits=e.fits,
        reserved_gb=e.reserved_gb,
        peak_gb=e.peak_gb,
        usable_gb=e.capacity_gb,
        usable_text=_usable_text(gpu[1], request.num_gpus * request.num_machines),
        phases_gb=phases,
        topology=topology,
        model=spec,
        request=request,
    )


def _usable_text(memory_gb: float, num_gpus: int) -> str:
    """The headroom-free form of the planner's usable_memory_text: the card less what lives outside the allocator."""
    from generator.estimate.core import CUDA_CONTEXT_GB, NCCL_BUFFERS_GB

    nccl = f" and {NCCL_BUFFERS_GB:g} GB NCCL buffers" if num_gpus > 1 else ""
    return f"{memory_gb:.1f} GB less {CUDA_CONTEXT_GB:g} GB CUDA context{nccl}"


def _placement(topology, request):
    from generator.estimate.types import Placement

    g = topology.gpus[0]
    return Placement(
        num_gpus_per_machine=len(topology.gpus),
        gpu_name=g.name,
        gpu_memory_gb=g.memory_gb,
        busbw_gbps=ASSUMED_BUSBW_GBPS if len(topology.gpus) > 1 else 0.0,
        num_machines=request.num_machines,
        inter_node_gbps=request.inter_node_gbps,
    )


def phase_gb(spec, workload, placement, strategy: str) -> dict[str, float]:
    """Predicted allocated GB in each of train.py's phases, from the estimator's per-phase terms."""
    from generator.estimate.activations import activation_terms
    from generator.estimate.states import model_states

    states, acts = model_states(spec, workload, placement, strategy), activation_terms(spec, workload, strategy)
    total = {ph: (sum(states[ph].values()) + sum(acts[ph].values())) / 1e9 for ph in states}
    weights = sum(v for k, v in states["forward_end"].items() if k in WEIGHT_TERMS) / 1e9
    return {LOAD: weights, STEP: max(total[ph] for ph in STEP_PHASES), OPTIMIZER: total["optimizer"],
            SAVE: total["optimizer"]}  # fmt: skip


def levers(fit: Fit) -> list[str]:
    """What would fit instead, each priced by make_plan on the same GPUs (with the planner's headroom, as the plan
    command would write it) and needing less memory than this run: a smaller micro-batch (accumulation keeps the
    global batch), activation checkpointing, another strategy, CPU offload, LoRA / QLoRA. Worded like the planner's
    own "What would fit" advice."""
    from generator.plan.planner import make_plan

    r = fit.request
    tries = [(f"--micro-batch {m}", replace(r, micro_batch=m)) for m in _smaller(r.micro_batch)]
    if r.grad_checkpointing == "off":
        tries.append(("--grad-checkpointing", replace(r, grad_checkpointing="on")))
    tries.append(("--strategy", replace(r, strategy="auto", micro_batch=None, grad_checkpointing="auto")))
    tries.append(("--allow-offload", replace(r, strategy="auto", micro_batch=None, grad_checkpointing="auto",
                                             allow_offload=True)))  # fmt: skip
    for method in {"full": ("lora", "qlora"), "lora": ("qlora",)}.get(r.method, ()):
        tries.append((f"--method {method}", replace(r, method=method, load_dtype="auto", strategy="auto",
                                                    micro_batch=None, grad_checkpointing="auto")))  # fmt: skip
    found, micro_found = [], False
    for label, request in tries:
        if label.startswith("--micro-batch") and micro_found:
            continue  # the largest smaller micro-batch that fits is the one worth saying
        try:
            plan = make_plan(fit.topology, fit.model, request)
        except Exception:  # UserError: nothing fits that way; anything else must not hide the line it is part of
            continue
        e = plan.estimate
        if plan.forced or not e.fits or e.reserved_gb >= fit.reserved_gb:
            continue
        if label == "--strategy":
            if e.strategy == fit.strategy or "offload" in e.strategy:
                continue
            label = f"--strategy {e.strategy}"
        elif label == "--allow-offload" and "offload" not in e.strategy:
            continue
        micro_found = micro_found or label.startswith("--micro-batch")
        found.append(f"{label} ({_setting(plan, r, label)}{e.reserved_gb:.1f} GB per GPU, "
                     f"predicted {e.tokens_per_s_per_gpu:,.0f} tokens/s per GPU)")  # fmt: skip
    return found


def _smaller(micro: int) -> list[int]:
    out, m = [], micro // 2
    while m >= 1:
        out.append(m)
        m //= 2
    return out


def _setting(plan, original, label: str) -> str:
    """What the lever's plan changed beyond what its label says: strategy always, micro-batch and checkpointing
    where they differ from this run's."""
    w, parts = plan.workload, [plan.strategy]
    if w.micro_batch != original.micro_batch and "--micro-batch" not in label:
        parts.append(f"micro-batch {w.micro_batch}")
    if w.grad_checkpointing != (original.grad_checkpointing == "on") and "--grad-checkpointing" not in label:
        parts.append(f"checkpointing {'on' if w.grad_checkpointing else 'off'}")
    return ", ".join(parts) + ", "


def what_would_fit(fit: Fit) -> str:
    found = levers(fit)
    if not found:
        return (
            "nothing the planner tried fits in less memory than this run (smaller micro-batch, checkpointing, "
            "another strategy, offload, LoRA/QLoRA)"
        )
    new_config = any(f"({fit.strategy}," not in lever for lever in found)
    tail = " (another strategy needs its own config: python -m generator plan ... --output NEW.yaml)" * new_config
    return "What would fit: " + "; ".join(found) + tail


def refusal(fit: Fit) -> str:
    """The one line train.py stops with when the plan says this run does not fit."""
    r = fit.request
    return (
        f"this run does not fit on {fit.gpu}: the plan for it ({fit.strategy}, {r.method}, --seq-len {r.seq_len}, "
        f"--micro-batch {r.micro_batch}, checkpointing {r.grad_checkpointing}) predicts {fit.reserved_gb:.1f} GB "
        f"reserved per GPU > {fit.usable_gb:.1f} GB usable ({fit.usable_text}). "
        f"{what_would_fit(fit)}. --no-fit-check runs it anyway"
    )
