"""`probe --compute`: measure this GPU's operator rates (GEMMs by shape and dtype, float8 casts, MoE grouped GEMMs,
attention by kernel path, HBM bandwidth) and return the compute-file document `plan --compute-file` reads.

Sections run in order under their own time boxes, at one of three efforts (Effort below: about a minute by default,
--quick about 20 s, --full two to three minutes); whatever a box cuts is listed under "skipped". Document (version
1; units in each key's name or in "units"):

{"version": 1, "kind": "compute", "gpu": str, "device": "cuda" | "cpu", "measured": true, "env": {...},
 "method": {...}, "units": {...}, "model": str | null,
 "gemm": {"bf16": [{m, k, n, op, ms, tflops}], "fp8": [...]},
 "fp8_cast": [{kind, mode, rows, cols, ms, ns_per_elem, gbps_3_bytes_per_elem}],
 "grouped_gemm": [{impl, op, experts, top_k, tokens, k, n, ms, tflops}],
 "attention": [{path, heads, kv_heads, head_dim, seq, mb, doc, keys_per_query, fwd_ms, fwdbwd_ms, fwd_tflops,
                fwdbwd_tflops}],
 "hbm": [{op, bytes, ms, gbps}],
 "host": [{variant, compiled, liger, layers, tokens, fwd_ms_per_layer, fwdbwd_ms_per_layer, step_ms}],
 "layers": [{model, model_type, hidden, intermediate, heads, kv_heads, experts, top_k, variant, mb, seq, depths,
             fwd_ms_per_layer, fwdbwd_ms_per_layer}], "skipped": [str]}
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from generator.estimate.attention import counts_math_kernel
from generator.estimate.attention_rates import ATTENTION_HEAD_DIM
from generator.estimate.compute_table import GEMM_BURST
from generator.model.types import ModelSpec
from generator.probe import compute_grid as grid
from generator.probe.compute_effort import QUICK, STANDARD, Effort
from generator.topology.nvml import driver_version

VERSION = 1


def _gemms(device: str, model: ModelSpec | None, effort: Effort) -> tuple[list[grid.Gemm], list[grid.Gemm]]:
    """(dense GEMMs, LoRA GEMMs): the model's own shapes first, then the presets' grid."""
    if device != "cuda":
        return grid.cpu_grid(), grid.lora_grid(128, (8, 16), grid.CPU_TOKENS[:1])
    models = ([model] if model is not None else []) + grid.preset_models()
    dense = grid.dense_grid(models, effort.gemm_tokens)
    hidden = model.hidden_size if model is not None else 4096
    lora = grid.lora_grid(hidden, grid.LORA_RANKS, effort.lora_tokens)
    return dense, lora


def _experts(device: str, model: ModelSpec | None) -> list[tuple[int, int, int, int]]:
    if device != "cuda":
        return [(4, 2, 128, 256), (4, 2, 128, 128)]
    mixtral = [m for m in grid.preset_models() if m.num_experts]
    out = grid.model_experts(model) if model is not None else []
    for m in mixtral:
        out += [e for e in grid.model_experts(m) if e not in out]
    return out


def _moe_configs(model: ModelSpec | None) -> list[tuple[str, dict]]:
    """(name, transformers config) of the mixture-of-experts models whose layers are timed whole: --model's first
    (a preset or a local directory), then the presets'."""
    from generator.probe.compute_layers import hf_config_dict

    names = ([model.name] if model is not None and model.num_experts else []) + [
        m.name for m in grid.preset_models() if m.num_experts
    ]
    out = []
    for name in dict.fromkeys(names):
        cfg = hf_config_dict(name)
        if cfg is not None:
            out.append((name, cfg))
    return out


def _own_config(model: ModelSpec | None) -> list[tuple[str, dict]]:
    """[(name, transformers config)] of --model where the probe can build it (a preset or a local config), else []."""
    from generator.probe.compute_layers import hf_config_dict

    cfg = hf_config_dict(model.name) if model is not None else None
    return [(model.name, cfg)] if cfg is not None else []


def env_info(device: str) -> dict:
    import torch

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "driver": None, "torchao": None}
    try:
        from importlib.metadata import version

        env["torchao"] = version("torchao")
    except Exception:  # torchao not installed: fp8 rows still measure torch._scaled_mm
        pass
    if device == "cuda":
        env["driver"] = driver_version()
    return env


class _ContextLost(Exception):
    """A section not started because a row before it left a CUDA error that poisons the process (Clock.lost)."""


def measure(
    device: str, model: ModelSpec | None, effort: Effort = STANDARD, on_section=None, gemm_timing: str = GEMM_BURST
) -> dict:
    """Run every section at `effort` (on the CPU always QUICK's sizes); `on_section(name)` is called before each;
    `gemm_timing`: estimate.compute_table.GEMM_TIMINGS."""
    import torch

    from generator.probe.clock import Clock
    from generator.probe.compute_attention import attention_rows
    from generator.probe.compute_bench import cast_rows, fp8_gemm_rows, fp8_supported, gemm_rows, grouped_rows, hbm_rows
    from generator.probe.compute_optimizer import optimizer_rows

    progress = on_section or (lambda name: None)

    sections: dict[str, float] = {}
    last = [time.monotonic(), None]

    def step(name: str | None) -> None:
        """Close the running section's clock (method.sections_s: where the probe's minute goes), start `name`'s."""
        now = time.monotonic()
        if last[1] is not None:
            sections[last[1]] = round(now - last[0], 1)
        if name is not None and clock.lost:  # every kernel after such an error fails with it: say so once
            last[:] = [now, None]
            raise _ContextLost(name)
        last[:] = [now, name]
        if name is None:
            return
        progress(name)
        if clock.device == "cuda":
            torch.cuda.empty_cache()  # the previous section's large operands go back to the driver

    cuda = device == "cuda"
    budget = effort if cuda else QUICK
    clock = Clock.for_device(device)
    clock.gemm_timing = gemm_timing
    if cuda:
        torch.cuda.init()
    started = time.monotonic()
    dense, lora = _gemms(device, model, budget)
    doc: dict = {"gemm": {}, "skipped": clock.skipped}
    try:
        step("bf16 GEMMs")
        doc["gemm"]["bf16"] = gemm_rows(clock, dense + lora, "bf16", budget.gemm_bf16)
        why = fp8_supported(device)
        step("float8 GEMMs")
        if why is None:
            doc["gemm"]["fp8"] = fp8_gemm_rows(clock, dense + lora, budget.gemm_fp8)
            h = model.hidden_size if model is not None else 4096
            shapes = [(8192, h), (32768, h), (32768, 14336)] if budget.cast_shapes > 1 else [(32768, h)]
            step("float8 casts")
            doc["fp8_cast"] = cast_rows(clock, shapes[: budget.cast_shapes], compiled=budget.compiled_casts,
                                        budget_s=budget.cast)  # fmt: skip
        else:
            doc["gemm"]["fp8"], doc["fp8_cast"] = [], []
            clock.skipped.append(f"fp8: {why}")
        step("MoE grouped GEMMs")
        tokens = (8192,) if cuda else (64,)
        doc["grouped_gemm"] = grouped_rows(clock, _experts(device, model), tokens, budget.grouped)
        step("attention")
        dim = ATTENTION_HEAD_DIM if cuda else 32
        layouts = tuple((h, kv, dim) for h, kv in (grid.ATTN_LAYOUTS if cuda else ((4, 2), (4, 4))))
        seqs = budget.attn_seqs if cuda else (128, 256)
        if cuda:
            layouts += tuple(x for x in budget.attn_widths if x not in layouts)
            if model is not None:  # --model's own layout at its own head width, first (flex times the first)
                own = (model.num_heads, model.num_kv_heads, model.head_dim)
                layouts = (own, *(x for x in layouts if x != own))
        tokens_attn = grid.ATTN_TOKENS if cuda else 256
        doc["attention"] = attention_rows(clock, ["sdpa_causal", "sdpa_dense"], layouts, seqs, tokens_attn, dim,
                                          budget.attention, doc=0)  # fmt: skip
        if model is not None and counts_math_kernel(model):
            step("SDPA's math kernel (the model's own layout)")
            own = (model.num_heads, model.num_kv_heads, model.head_dim) if cuda else (4, 1, dim)
            doc["attention"] += attention_rows(clock, ["sdpa_math"], (own,), seqs, tokens_attn, dim,
                                               budget.attention, doc=0)  # fmt: skip
        if budget.flex > 0 and cuda:
            step("flex attention (compiles)")
            flex_seqs, t_flex = (4096, 16384), time.monotonic()
            # packed 1,024-token documents, one per sequence, then chat-sized ones (at 4,096 only: the rate of a mask of
            # partial tiles does not depend on the sequence)
            for doc_tokens, seqs_here in ((grid.FLEX_DOC_TOKENS, flex_seqs), (0, flex_seqs),
                                          (grid.FLEX_SHORT_DOC_TOKENS, flex_seqs[:1])):  # fmt: skip
                left = budget.flex - (time.monotonic() - t_flex)
                doc["attention"] += attention_rows(clock, ["flex"], layouts[:1], seqs_here, tokens_attn, dim, left,
                                                   doc=doc_tokens)  # fmt: skip
        else:
            clock.skipped.append("flex attention: skipped (--quick or CPU: its compile takes ~10 s per shape)")
        step("HBM bandwidth")
        doc["hbm"] = hbm_rows(clock, 1 << 30 if cuda else 1 << 20) + optimizer_rows(clock, None if cuda else 1 << 18)
        if budget.host > 0 or not cuda:
            step("host time per layer (eager, compiled)")
            from generator.probe.compute_host import host_rows

            box = budget.host if cuda else 60.0
            doc["host"] = host_rows(clock, compiled=cuda and budget.host_compiled, budget_s=box,
                                    rounds=budget.host_rounds or None)  # fmt: skip
        else:  # one row of four depths in interleaved rounds takes longer than --quick's whole budget
            doc["host"] = []
            clock.skipped.append("host rows: skipped under --quick (plan --compute-file takes the shipped table's)")
        step("MoE decoder layers, whole")
        from generator.probe.compute_layers import layer_rows

        t_layers = time.monotonic()
        doc["layers"] = layer_rows(clock, _moe_configs(model), budget.layers if cuda else 60.0,
                                   compiled=cuda and budget.compiled_layers, sizes=budget.layer_sizes)  # fmt: skip
        own = _own_config(model)
        if own and why is None and budget.fp8_layers:
            step("--model's own float8 layers, whole (compile)")
            left = (budget.layers if cuda else 60.0) - (time.monotonic() - t_layers)
            doc["layers"] += layer_rows(clock, own, max(left, 0.0), sizes=budget.layer_sizes[:1], fp8=True)
        elif own:
            clock.skipped.append(f"--model's own float8 layers: {why or 'timed under --full only'}")
        if budget.host > 0 or not cuda:
            # last: Liger's rows of --model's own layer patch its model type's module (RMSNorm, RoPE) for every model of
            # that type built after them, the whole-layer rows of an MoE --model among them
            step("host time per layer, --model's own layer")
            from generator.probe.compute_host_model import own_host_rows

            doc["host"] += own_host_rows(clock, model, budget.host_model, budget.host_compiled, budget.host_rounds)
    except _ContextLost as cut:
        clock.skipped.append(f"{cut.args[0]} and every section after it: not run after the CUDA error of an earlier "
                             f"row ({clock.lost})")  # fmt: skip
    for key in ("bf16", "fp8"):
        doc["gemm"].setdefault(key, [])
    for key in ("fp8_cast", "grouped_gemm", "attention", "hbm", "host", "layers"):
        doc.setdefault(key, [])
    step(None)
    name = torch.cuda.get_device_name() if cuda else "cpu"
    return {
        "version": VERSION,
        "kind": "compute",
        "gpu": name,
        "device": device,
        "measured": True,
        "model": model.name if model is not None else None,
        "env": env_info(device),
        "method": {
            "timing": "CUDA events per call (GPU time)" if cuda else "perf_counter per call",
            "gemm_timing": gemm_timing if cuda else "per call",  # compute_table reads per-call rows less the launch gap
            "statistic": f"median of {clock.min_repeats}-{clock.max_repeats} calls after {clock.warmup} warm-ups",
            "gemm": "torch.mm in autograd's layouts: fwd x@W^T, dgrad dY@W, wgrad dY^T@X; 2*m*k*n FLOPs",
            "fp8_gemm": "torch._scaled_mm e4m3 x e4m3 -> bf16, tensorwise scales, operands pre-cast (cast timed "
            "separately under fp8_cast)",
            "fp8_cast": "amax + scale + clamp + cast to e4m3 of a bf16 tensor (cast_transpose adds the column-major "
            "copy), eager and torch.compile'd",
            "grouped_gemm": "balanced top-k routing; torch._grouped_mm bf16 and the per-expert loop (bf16, fp32)",
            "hbm": "1 GiB bf16 tensors (bytes read + written)",
            "host": "wall time per layer of a tiny eager (or compiled, or Liger's) decoder layer stack, synchronised, "
            "with clipping and fused AdamW: the CPU cost of issuing the layer's kernels, and step_ms the step's rest "
            "(generator/probe/compute_host.py); rows with a model_type: --model's own layer at the same tiny widths "
            "(generator/probe/compute_host_model.py)",
            "layers": "transformers' own MoE decoder layers at real widths, bf16, depth 3 minus depth 1, frozen and "
            "fully trained; rows with precision fp8: --model's own layers (dense or MoE) with train.py's float8 "
            "Linears, compiled, fully trained at fp32 weights under bf16 autocast and frozen at bf16 "
            "(generator/probe/compute_layers.py)",
            "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(time.monotonic() - started, 1),
            "quick": budget is QUICK,
            "effort": budget.name,
            "sections_s": sections,
        },
        "units": {"ms": "milliseconds per call", "tflops": "1e12 FLOP/s", "gbps": "1e9 bytes/s"},
        **doc,
    }
