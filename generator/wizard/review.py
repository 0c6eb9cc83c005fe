"""The wizard's questions once a plan is shown, as data: accept it or change the strategy, the GPU count or the GPU
ids, what to change when nothing fits, and where to write. Their choices read the plan and request flow.py hands
them (`_plan`, `_request`, `_topology`, `_free`, `_gpus`, `_split`)."""

from __future__ import annotations

from dataclasses import replace

from generator.plan.types import PlanRequest
from generator.wizard.runner import Answers, QuestionSpec


def review_choices(answers: Answers) -> list[tuple[str, str]]:
    request: PlanRequest | None = answers.get("_request")
    offload = request is not None and not request.allow_offload and request.strategy == "auto"
    return [
        ("Accept: write the config", "accept"),
        ("Choose another strategy", "strategy"),
        ("Choose the number of GPUs", "gpus"),
        ("Choose which GPUs (leave out busy ones)", "ids"),
        *([("Allow ZeRO CPU offload (slow; lets larger work fit)", "offload")] if offload else []),
        ("Quit without writing anything", "quit"),
    ]


def strategy_choices(answers: Answers) -> list[tuple[str, str]]:
    rows = [("auto (the planner's pick)", "auto")]
    for e in answers["_plan"].estimates:
        verdict = "fits" if e.fits else "does NOT fit"
        rows.append(
            (
                f"{e.strategy}: {e.reserved_gb:.1f} GB/GPU, {verdict}, {e.tokens_per_s_per_gpu:,.0f} tok/s/GPU",
                e.strategy,
            )
        )
    return rows


def gpu_count_choices(answers: Answers) -> list[tuple[str, int | None]]:
    return [("as many as help (auto)", None)] + [(f"{n} GPU{'s' if n > 1 else ''}", n) for n in answers["_free"]]


def gpu_id_choices(answers: Answers) -> list[tuple[str, int]]:
    return [(f"GPU {g.index}: {g.name} ({g.memory_gb:g} GB)", g.index) for g in answers["_topology"].gpus]


def with_gpu_ids(request: PlanRequest, all_ids: tuple[int, ...], chosen: list[int]) -> PlanRequest:
    """The request on exactly the ticked GPUs: the others excluded, and all the ticked ones used."""
    return replace(request, exclude=tuple(i for i in all_ids if i not in chosen), num_gpus=len(chosen))


def rescue_choices(answers: Answers) -> list[tuple[str, str]]:
    """Only changes that alter the request: a batch that splits over the GPUs first when that is what failed, never
    the method already chosen (choosing it again would show the same failure forever)."""
    request: PlanRequest = answers["_request"]
    choices = [
        (f"Use global batch {n} (splits over the {answers['_gpus']} GPUs)", f"batch:{n}") for n in answers["_split"]
    ]
    if request.method == "full":
        choices.append(("Switch to LoRA", "lora"))
    if request.method in ("full", "lora"):
        choices.append(("Switch to QLoRA", "qlora"))
    if not request.allow_offload and request.strategy == "auto":
        choices.append(("Allow ZeRO CPU offload (slow)", "offload"))
    if request.seq_len >= 512:
        choices.append(("Halve the sequence length", "shorter"))
    return [*choices, ("Quit without writing anything", "quit")]


def batches_that_split(request: PlanRequest, num_gpus: int) -> tuple[int, ...]:
    """The global batches nearest to the requested one that split over `num_gpus` GPUs; () when it already does."""
    step = (request.micro_batch or 1) * num_gpus
    if request.global_batch is None or request.global_batch % step == 0:
        return ()
    lower = request.global_batch // step * step
    return tuple(n for n in (lower, lower + step) if n > 0)


REVIEW = QuestionSpec("action", "select", "What now?", review_choices, default="accept")
STRATEGY = QuestionSpec("strategy", "select", "Strategy:", strategy_choices, default=lambda a: a["_plan"].strategy)
GPU_COUNT = QuestionSpec("num_gpus", "select", "How many GPUs?", gpu_count_choices)
GPU_IDS = QuestionSpec(
    "gpu_ids",
    "checkbox",
    "Which GPUs? (space ticks or unticks, Enter accepts; the planner's pick is ticked)",
    gpu_id_choices,
    default=lambda a: a["_plan"].gpu_ids,
)
RESCUE = QuestionSpec(
    "rescue", "select", "Nothing fits. What now?", rescue_choices, default=lambda a: rescue_choices(a)[0][1]
)
WRITE_ANYWAY = QuestionSpec("write_anyway", "confirm", "This strategy does not fit. Write it anyway?", default=False)
OUTPUT = QuestionSpec(
    "output", "text", "Write the config to:", default="accelerate_config.yaml",
    validate=lambda t: bool(t.strip()) or "a file name is needed",
)  # fmt: skip
OVERWRITE = QuestionSpec("overwrite", "confirm", "That file exists. Overwrite it?", default=False)
