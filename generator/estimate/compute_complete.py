"""A partial operator-rate table completed from a reference: what `probe --compute --quick` (or a probe its time box
cut) did not measure is read from the shipped table, scaled to the rates the file did measure.

Why: a table with holes prices a step wrongly, not just roughly. `--quick` times GEMMs at 8,192 tokens only, so a
2,048-token step's GEMMs fall below its smallest measured size, where the lookup lowers the rate in proportion (a
launch-bound call); it has no host rows (no host floor) and no flex rows. On one H200 (2026-12-03) its table read a
2,048-token Qwen2.5-7B LoRA step at 4,253 tokens/s where the full probe's read 9,670. Completed, each missing shape
takes the reference's rate times the median ratio of this file's rates to the reference's at the shapes it measured
(per GEMM dtype and layout, per attention path), so the file still sets the level and the reference only the shape
of the curve. The host rows are the CPU's, not the GPU's: a file without any takes the reference's as they are; one
that timed some levers only (the eager layers) takes the others' at the median ratio of its host times to the
reference's on the rows both have, which carries this CPU's speed to the levers it did not time.
`ComputeTable.filled` names what was taken, and the plan says so.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from generator.estimate.attention_rates import attention_tflops
from generator.estimate.compute_scaling import faster_gemm_rows, faster_layer_rows
from generator.estimate.compute_table import ComputeTable, gemm_tflops
from generator.estimate.host_time import host_ratio, rescaled


def _ratio(pairs: list[tuple[float, float]]) -> float | None:
    """Median of measured / reference over shapes both have; None without any."""
    ratios = [m / r for m, r in pairs if m > 0 and r > 0]
    return statistics.median(ratios) if ratios else None


def _gemm(user: ComputeTable, ref: ComputeTable) -> tuple[dict, float, bool]:
    """(GEMM rows, the bf16 ratio, whether rows were added): each measured (dtype, op) completed with the
    reference's rows at shapes it lacks; a dtype the file has no rows of (no float8 on this GPU) stays absent."""
    out, added, bf16 = dict(user.gemm), False, []
    for key, rows in user.gemm.items():
        comparable = key in ref.gemm or key[0] == "bf16"  # gemm_tflops would read fp8 off the bf16 rows
        pairs = [(r[3], gemm_tflops(ref, *key, *r[:3])) for r in rows] if comparable else []
        ratio = _ratio(pairs)
        if key[0] == "bf16":
            bf16 += pairs
        have = {r[:3] for r in rows}
        extra = faster_gemm_rows((r for r in ref.gemm.get(key, ()) if r[:3] not in have), ratio) if ratio else ()
        out[key] = rows + extra
        added |= bool(extra)
    return out, _ratio(bf16) or 1.0, added


def _attention(user: ComputeTable, ref: ComputeTable) -> tuple[dict, list[str]]:
    """Attention rows per path completed the same way (forward and backward ratios apart); a path the file did not
    time at all (flex under --quick) takes the reference's rows at the mean ratio of the paths it did time."""
    out, filled, ratios = dict(user.attention), [], {}
    for path, rows in user.attention.items():
        if not ref.attention.get(path):
            continue
        looked = [(r, attention_tflops(ref, path, *r[:4], head_dim=r[4])) for r in rows]
        f = _ratio([(r[5], x[0]) for r, x in looked])
        b = _ratio([(r[6], x[1]) for r, x in looked])
        if f and b:
            ratios[path] = (f, b)
    overall = tuple(statistics.fmean(x) for x in zip(*ratios.values(), strict=True)) if ratios else (1.0, 1.0)
    for path, rows in ref.attention.items():
        f, b = ratios.get(path, overall)
        have = {r[:5] for r in user.attention.get(path, ())}
        extra = tuple((*r[:5], r[5] * f, r[6] * b) for r in rows if r[:5] not in have)
        if extra and path not in user.attention:
            filled.append(f"{path} attention")
        out[path] = user.attention.get(path, ()) + extra
    return out, filled


def _host(user: ComputeTable, ref: ComputeTable, ratio: float | None) -> tuple[dict, dict, str | None]:
    """(host, host_step, what was filled): the reference's rows the file lacks, at `ratio`, the file's host times over
    the reference's on the rows both have (host_time.host_ratio); as they are where none is shared (None)."""
    r = ratio or 1.0
    host = {**{k: (f * r, b * r) for k, (f, b) in ref.host.items()}, **user.host}
    step = {**{k: s * r for k, s in ref.host_step.items()}, **user.host_step}
    if len(host) == len(user.host) and len(step) == len(user.host_step):
        return host, step, None
    what = "host rows of other levers" if len(host) > len(user.host) else "host time outside the layers"
    how = "scaled by this CPU's measured ratio" if ratio else "the CPU's: as measured with the reference"
    return host, step, f"{what if user.host else 'host rows'} ({how})"


def completed(user: ComputeTable, ref: ComputeTable) -> ComputeTable:
    """`user` with its holes filled from `ref` (the shipped table, already scaled to the user's GPU)."""
    if user is ref:
        return user
    gemm, ratio, gemm_added = _gemm(user, ref)
    attention, filled = _attention(user, ref)
    if gemm_added:
        filled.insert(0, "GEMM shapes")
    changes: dict = {"gemm": gemm, "attention": attention}
    host_r = host_ratio(user.host, ref.host)
    host, host_step, host_filled = _host(user, ref, host_r)
    if host_filled:
        changes.update(host=host, host_step=host_step)
        filled.append(host_filled)
    models = {k: v for k, v in ref.host_models.items() if k not in user.host_models}
    if models:  # other models' own host rows, at this CPU's ratio to the reference's Mistral rows
        changes["host_models"] = {**rescaled(models, host_r or 1.0), **user.host_models}
        filled.append("other models' own host rows")
    layers = {k: faster_layer_rows(rows, ratio) for k, rows in ref.layers.items() if k not in user.layers}
    if layers:
        changes["layers"] = {**user.layers, **layers}
        filled.append("whole MoE layers")
    grouped = {k: v for k, v in ref.grouped.items() if k not in user.grouped}
    if grouped:
        changes["grouped"] = {**user.grouped, **{k: faster_gemm_rows(rows, ratio) for k, rows in grouped.items()}}
        filled.append("grouped expert GEMMs")
    casts = {
        k: v * ref.hbm_gbps / user.hbm_gbps for k, v in ref.cast_ns_per_elem.items() if k not in user.cast_ns_per_elem
    }
    if casts and user.gemm.get(("fp8", "fwd")):
        changes["cast_ns_per_elem"] = {**user.cast_ns_per_elem, **casts}
        filled.append("float8 casts")
    return replace(user, filled=tuple(filled), **changes)
