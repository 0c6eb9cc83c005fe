"""Host time from the compute table's host rows: the CPU time PyTorch takes to issue a decoder layer's kernels, per
lever (variant full | lora | qlora, compiled, liger), and once a step what lies outside the layers. Pure; no torch.

Two kinds of rows (generator/probe/compute_host.py, compute_host_model.py):
- the tiny Mistral layer's, which price any model the table has no rows of its own for;
- a named model's own layer (`probe --compute --model M`: M's structure at tiny widths), keyed by what decides the
  layer's code and its routing (model type, experts, top-k), read for that model ahead of the Mistral rows. A lever
  M's own rows lack takes the Mistral row of that lever at M's measured ratio to the Mistral rows both have: an MoE
  layer that issues twice the Mistral layer's work eagerly is taken to do so compiled too, until measured.
  Its QLoRA layer (variant qlora, train.py's NF4 layer: bench/scripts/qlora_host.py, which needs training/) is read
  for its QLoRA steps; a QLoRA step without such a row is priced as a LoRA layer.
A model with no rows of its own takes an eager Mistral row at the ratio of its layer's dispatched ops to the Mistral
layer's, counted at sizing (host_scale).
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.estimate.compute_table import ComputeTable
    from generator.model.types import ModelSpec

ModelKey = tuple[str, int, int]
"""(model_type, experts, top_k): what a model's own host rows are keyed by (top_k 0 for a dense model)."""


def model_key(model: ModelSpec) -> ModelKey:
    return (model.model_type, model.num_experts, model.experts_per_token if model.num_experts else 0)


def mistral_like(model: ModelSpec) -> bool:
    """Whether the model's decoder layer is the one the Mistral rows time (a dense Mistral)."""
    return model.model_type == "mistral" and not model.num_experts


def priced_as_mistral(table: ComputeTable, model: ModelSpec) -> bool:
    """Whether another model's host time is read from the Mistral layer's rows (no rows of its own in the table)."""
    return bool(table.host) and not mistral_like(model) and model_key(model) not in table.host_models


def row_model_key(row: dict) -> ModelKey | None:
    """A host row's model key; None for the Mistral layer's rows (no model_type)."""
    if "model_type" not in row:
        return None
    experts = int(row.get("experts") or 0)
    return (str(row["model_type"]), experts, int(row.get("top_k") or 0) if experts else 0)


def nonneg(x) -> float:
    """A host or layer time: zero is a measurement too (two depths' difference drowned in noise)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise ValueError(f"not a non-negative number: {x!r}")
    return float(x)


def host_tables(rows: list[dict]) -> tuple[dict, dict]:
    """(`host`, `host_step`) of a ComputeTable from the probe's rows of the Mistral layer (a named model's own rows are
    left to model_host_tables); several rows of one key (probes run around a benchmark on its machine) average."""
    fwd_bwd: dict = {}
    step: dict = {}
    for r in rows:
        if row_model_key(r) is not None:
            continue
        fwd, both = nonneg(r["fwd_ms_per_layer"]) / 1e3, nonneg(r["fwdbwd_ms_per_layer"]) / 1e3
        key = (r["variant"], bool(r["compiled"]), bool(r.get("liger", False)))
        fwd_bwd.setdefault(key, []).append((fwd, max(both - fwd, 0.0)))
        if "step_ms" in r:
            step.setdefault(key, []).append(nonneg(r["step_ms"]) / 1e3)
    host = {k: tuple(statistics.fmean(x) for x in zip(*v, strict=True)) for k, v in fwd_bwd.items()}
    return host, {k: statistics.fmean(v) for k, v in step.items()}


def model_host_tables(rows: list[dict]) -> dict:
    """ModelKey -> (host, host_step) of each named model's own rows."""
    groups: dict = {}
    for r in rows:
        key = row_model_key(r)
        if key is not None:
            groups.setdefault(key, []).append({k: v for k, v in r.items() if k != "model_type"})
    return {k: host_tables(v) for k, v in groups.items()}


def _lever_key(host: dict, variant: str, compiled: bool, liger: bool) -> tuple | None:
    """The measured Mistral row nearest this layer: Liger's where measured (eager layers only: compiled layers keep
    only Liger's loss), else the plain row, the eager one where no compiled one was measured; None without rows."""
    for key in ((variant, compiled, liger and not compiled), (variant, compiled, False), (variant, False, False)):
        if key in host:
            return key
    return None


def host_ratio(host: dict, ref: dict) -> float | None:
    """Median of `host`'s time per layer over `ref`'s on the levers both timed (another layer's, or another CPU's);
    None where they share none."""
    ratios = [sum(v) / sum(ref[k]) for k, v in host.items() if k in ref and sum(v) > 0 and sum(ref[k]) > 0]
    return statistics.median(ratios) if ratios else None


def rescaled(models: dict, ratio: float) -> dict:
    """host_models with every time x ratio (the rows of a CPU `ratio` times as slow)."""
    return {
        m: ({k: (f * ratio, b * ratio) for k, (f, b) in host.items()}, {k: s * ratio for k, s in step.items()})
        for m, (host, step) in models.items()
    }


def _own_row(own: tuple | None, variant: str, compiled: bool, liger: bool, which: int):
    """The model's own row of this lever (a QLoRA layer without one: its LoRA layer's), else None."""
    if not own:
        return None
    for v in (variant, "lora") if variant == "qlora" else (variant,):
        lever = (v, compiled, liger and not compiled)
        if lever in own[which]:
            return own[which][lever]
    return None


def _mistral_key(table: ComputeTable, variant: str, compiled: bool, liger: bool) -> tuple | None:
    """The Mistral row for this lever (a QLoRA layer's is LoRA's: the Mistral rows time no NF4 layer)."""
    return _lever_key(table.host, "lora" if variant == "qlora" else variant, compiled, liger)


PROBE_ADAPTERS = 7
"""LoRA adapters a layer of the probe's LoRA host row carries: train.py's default targets, all seven projections of
the tiny Mistral (probe.compute_host.LORA_TARGETS)."""


def host_scale(model: ModelSpec, variant: str, adapters: float, dropout: bool) -> tuple[float, float]:
    """(forward, backward) factors on the Mistral layer's eager host row for a model with no host rows of its own:
    its layer's dispatched ops over the tiny Mistral's (ModelSpec.layer_ops), `adapters` LoRA adapters a layer
    against the row's seven, each with `dropout`'s ops where the workload has it (both sides, so a llama-coded layer
    reads 1 under TRL's dropout too). On the CPU, where a tiny layer's time is its dispatch, this put eleven dense
    families' own forward host rows 6.9% (mean) from their time, 20% at worst, where the Mistral row read 14% and
    56% (StarCoder2's and Phi's LoRA adapt four and three projections; bench/results/cpu-host-ops-2026-12-05.json).
    (1, 1) where not counted (the closed-form families run the Mistral layer's code) and for a QLoRA MoE (train.py's
    own NF4 expert dispatch, training/moe.py, not the transformers path counted)."""
    ops = model.layer_ops
    if ops is None or (variant == "qlora" and model.num_experts):
        return (1.0, 1.0)
    if variant == "full":
        own, ref = ops.full, ops.reference_full
    else:
        per = ops.adapter_dropout if dropout else ops.adapter
        own = tuple(x + adapters * a for x, a in zip(ops.frozen, per, strict=True))
        ref = tuple(x + PROBE_ADAPTERS * a for x, a in zip(ops.reference_frozen, per, strict=True))
    return tuple(o / r if o > 0 and r > 0 else 1.0 for o, r in zip(own, ref, strict=True))


def host_layer_s(
    table: ComputeTable,
    variant: str,
    compiled: bool,
    liger: bool = False,
    model: ModelKey | None = None,
    scale: tuple[float, float] = (1.0, 1.0),
) -> tuple[float, float]:
    """(forward, backward) host seconds per decoder layer of `variant` (full | lora | qlora): the model's own row of
    this lever, else the Mistral row (a QLoRA layer's is LoRA's; at the model's own ratio where it has rows of other
    levers, else an eager row at `scale`, host_scale's count of its ops: a compiled layer's kernels are inductor's,
    which the eager count does not give); (0, 0) without host rows."""
    own = table.host_models.get(model) if model is not None else None
    row = _own_row(own, variant, compiled, liger, 0)
    if row is not None:
        return row
    key = _mistral_key(table, variant, compiled, liger)
    if key is None:
        return (0.0, 0.0)
    ratio = host_ratio(own[0], table.host) if own else None
    f, b = table.host[key]
    if ratio:
        return (f * ratio, b * ratio)
    return (f * scale[0], b * scale[1]) if not compiled else (f, b)


def host_step_s(
    table: ComputeTable, variant: str, compiled: bool, liger: bool = False, model: ModelKey | None = None
) -> float:
    """Host seconds per optimizer step outside the decoder layers: the model's own row of this lever where it has
    one, else the Mistral row's (embedding, loss and optimizer step run the same code for any decoder); 0 where the
    table predates the step's timing."""
    own = table.host_models.get(model) if model is not None else None
    step = _own_row(own, variant, compiled, liger, 1)
    if step is not None:
        return step
    key = _mistral_key(table, variant, compiled, liger)
    return table.host_step.get(key, 0.0) if key else 0.0
