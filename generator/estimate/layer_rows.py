"""Which measured decoder-layer row (ComputeTable.layers, timed whole by `probe --compute --full`) prices a workload's
layers, and at which twin of it (bf16 or float8, eager or compiled); and the path an MoE's experts take, which a row
must share to price them. Pure; estimate.compute_time reads the row."""

from __future__ import annotations

from dataclasses import replace

from generator.catalog import strategies as catalog
from generator.estimate.compute_table import FP8_ROW, ComputeTable
from generator.estimate.types import Workload
from generator.model.types import ModelSpec

EXPERT_CASTING_SCRIPTS = ("train.py",)
"""Scripts that cast fp32 MoE experts to bf16 for each forward as autocast does for Linears (training/moe.py)."""


def expert_impl(workload: Workload, strategy: str) -> str:
    """How the experts run. transformers 5 calls torch._grouped_mm in bf16; with fp32 weights at compute time (DDP
    of an fp32-loaded model; FSDP2 and DeepSpeed compute in bf16) its grouped_mm_fallback casts the input to the
    weights' dtype and loops over the experts in fp32, which autocast does not reach (issue 26: Mixtral's full
    fine-tune ran 10.8x slower than predicted). train.py casts such experts to bf16 per forward (the cast's bytes are
    step_traffic.cast_bytes'); QLoRA's NF4 experts are one bitsandbytes Linear4bit per expert: a bf16 loop."""
    if workload.method == "qlora":
        return "loop_bf16"
    fp32 = catalog.strategy(strategy).framework == "ddp" and workload.load_dtype == "fp32"
    return "loop_fp32" if fp32 and workload.script not in EXPERT_CASTING_SCRIPTS else "grouped_mm"


ROW_VARIANT = {"full": "full", "lora": "frozen", "qlora": "qlora"}
"""The layer row each method reads: LoRA's frozen base; QLoRA's NF4 base (experts as a per-expert loop)."""
ROW_EXPERTS = {"full": "grouped_mm", "frozen": "grouped_mm", "qlora": "loop_bf16"}
"""The experts' path each row variant ran (expert_impl): a row prices only a step that takes the same path."""


MOE_OPERATORS_NOTE = (
    "speed: {model}'s MoE layers are priced from their operators, which miss what runs around the experts (on one "
    "H200 they put OLMoE-1B-7B's tokens/s 23% below what ran in bf16 and 53% below in float8, Mixtral-8x7B's 26-35% "
    "above); `python -m generator probe --compute --full --model {model}` times its layers whole, for `plan "
    "--compute-file`"
)
"""The plan's warning where an MoE step has no layer row to anchor it (OLMoE: the sweep's predictions before its rows
joined the table, bench/results/h200-x1-families-olmoe-2026-12-04.json; Mixtral: h200-x1-families-2026-12-01.json)."""


FP8_OPERATORS_NOTE = (
    "fp8 (torchao float8 Linears): GEMMs and casts priced from the float8 rate table; `python -m generator probe "
    "--compute --full --model {model}` times its float8 layers whole, for `plan --compute-file`"
)
"""The plan's note where a float8 step's layers are priced from their operators: on an H100 Phi's float8 layer ran
1.04x its bf16 one and Mistral-7B's 1.24x, where the operators give both about 1.3x
(bench/results/h100-x1-fp8-layer-rows-*-2026-12-06.json)."""


def moe_priced_by_operators(table: ComputeTable, model: ModelSpec, workload: Workload, strategy: str) -> bool:
    """An MoE LoRA or full fine-tune on the experts' grouped path that the table has no whole-layer row for, so the
    probe's layer section would price it (QLoRA's NF4 layers are train.py's, which the probe cannot build)."""
    variant = ROW_VARIANT.get(workload.method)
    if not model.num_experts or workload.method == "qlora" or variant is None:
        return False
    return (
        expert_impl(workload, strategy) == ROW_EXPERTS[variant] and anchor(table, model, workload, strategy)[1] is None
    )


def layer_row(table: ComputeTable, model: ModelSpec, workload: Workload, strategy: str) -> tuple | None:
    """The table's whole-layer rows (fewest tokens first) for this model and workload's twin (anchor), or None. In
    bf16, eager or compiled as the twin runs its layers, MoE models only (dense bf16 layers are priced from their
    operators, validated on Mistral and four families); in float8, the model's own float8 rows (compiled), dense or
    MoE; an MoE's only where its experts take the path the rows ran."""
    variant = ROW_VARIANT.get(workload.method)
    if variant is None or (model.num_experts and expert_impl(workload, strategy) != ROW_EXPERTS[variant]):
        return None
    top_k = max(model.experts_per_token, 1) if model.num_experts else 0
    dims = (model.hidden_size, model.intermediate_size, model.num_heads, model.num_kv_heads, model.num_experts, top_k)
    if workload.precision == "fp8":
        return table.layers.get((*dims, variant + FP8_ROW, True))
    return table.layers.get((*dims, variant, workload.layers_compiled)) if model.num_experts else None


def fp8_layers_in_row(table: ComputeTable, model: ModelSpec, workload: Workload, strategy: str) -> bool:
    """Whether a float8 step's decoder layers are priced whole from the model's own float8 rows (anchor)."""
    if workload.precision != "fp8":
        return False
    twin, row = anchor(table, model, workload, strategy)
    return twin.precision == "fp8" and row is not None


def quantised_layers_in_row(table: ComputeTable, model: ModelSpec, workload: Workload, strategy: str) -> bool:
    """Whether a QLoRA step's decoder layers are priced whole from a qlora row, which then holds their
    dequantisation (timing leaves its dequantisation bytes out)."""
    return workload.method == "qlora" and anchor(table, model, workload, strategy)[1] is not None


def row_twin(workload: Workload, compiled: bool = False) -> Workload:
    """The workload as the probe ran its layer rows: bf16, no Liger, the layers eager (or compiled)."""
    return replace(workload, liger=False, precision="bf16", compiled_layers=compiled)


def anchor(table: ComputeTable, model: ModelSpec, workload: Workload, strategy: str) -> tuple[Workload, tuple | None]:
    """(twin, its layer rows): a float8 workload's own float8 twin (without Liger) where the table timed the model's
    float8 layers (what float8 costs beside its GEMMs is not its casts' elements at one rate: FP8_OPERATORS_NOTE);
    else the compiled twin where the workload compiles its layers and the table timed them so (compile fuses
    the MoE dispatch that the eager row holds and the operators do not count), else the eager twin; rows None where
    the table has none of them."""
    if workload.precision == "fp8":
        twin = replace(workload, liger=False)
        row = layer_row(table, model, twin, strategy)
        if row is not None:
            return twin, row
    if workload.layers_compiled:
        twin = row_twin(workload, compiled=True)
        row = layer_row(table, model, twin, strategy)
        if row is not None:
            return twin, row
    twin = row_twin(workload)
    return twin, layer_row(table, model, twin, strategy)
