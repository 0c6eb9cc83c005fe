"""Check of the host-time scale for models without host rows of their own (estimate.host_time.host_scale): each
family's own host rows, timed by the probe's code (probe.compute_host.hf_row with compute_host_model's builder, eager
LoRA and full), against the tiny Mistral's rows timed between them, (a) as they are, which is how such a model was
priced, (b) at the ratio of the two layers' ops counted on meta at sizing (model.op_count, ModelSpec.layer_ops), and
(c) at the ratio of the ops the run itself dispatched.

On the CPU (the default) the probe's widths are cut four-fold so a layer's time is its dispatch; the CPU runs CPU
autocast's policy where the count takes CUDA's (norms in fp32 there: a few casts more), and its per-call costs are
not a GPU host's: a check of the count's shape. On a GPU (`--device cuda`, bench/README.md Next 6) the rows are the
probe's own, at its widths, and (c) is what the GPU process dispatched under CUDA's autocast: the sizing count's
check, and the host time it is to price.

    PYTHONPATH=. .venv/bin/python bench/scripts/host_ops_audit.py --out bench/results/cpu-host-ops-2026-12-05.json
    PYTHONPATH=. python bench/scripts/host_ops_audit.py --device cuda --out $OUT/gpu-host-ops.json   # ~5 min
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from datetime import date
from pathlib import Path

FAMILIES = ("llama", "qwen2", "qwen3", "starcoder2", "phi", "gemma3_text", "olmo2", "granite", "gpt_neox", "stablelm",
            "cohere")  # fmt: skip
"""Dense causal-LM types at transformers' default configs (MoE layers on the CPU run transformers' per-expert loop,
not the GPU's grouped_mm, so their CPU time is no host proxy)."""
CUT = dict(HIDDEN=32, HEADS=2, KV_HEADS=1, HEAD_DIM=16, INTER=64, TOKENS=8)
"""The probe's widths cut four-fold (eight tokens), on the CPU only: its arithmetic for them is small beside its
dispatch."""


def _cut_widths() -> None:
    import generator.probe.compute_host as host
    import generator.probe.compute_host_model as own

    for module in (host, own):
        for name, value in CUT.items():
            if hasattr(module, name):
                setattr(module, name, value)


def _row(build, variant: str, rounds: int, device: str) -> dict:
    from generator.probe.clock import Clock
    from generator.probe.compute_host import hf_row

    return hf_row(Clock(device, warmup=1, min_repeats=1, max_repeats=1), variant, False, False, rounds, build=build)


def _run_ops(build, variant: str, device: str) -> tuple[float, float]:
    """(forward, backward) aten ops of one layer as the host row's step runs on `device` (on the CPU its own autocast
    policy: no fp32 norms), from depths 2 and 6: what the time is taken to follow. The backward holds the
    optimizer's step too (the CPU's AdamW loops over its tensors; a GPU's is fused)."""
    import torch

    from generator.model.op_count import op_counter
    from generator.probe import compute_host
    from generator.probe.clock import Clock

    counts = []
    for depth in (2, 6):
        model = build(Clock(device), variant, depth, False, False)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-6, fused=device == "cuda")
        ids = torch.randint(0, 512, (1, compute_host.TOKENS), device=device)  # cut on the CPU (_cut_widths)
        forward, backward = op_counter(), op_counter()
        with forward, torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        with backward:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        counts.append((forward.n, backward.n))
    (f2, b2), (f6, b6) = counts
    return (f6 - f2) / 4, (b6 - b2) / 4


def _scaled(fwd: float, both: float, own: tuple, ref: tuple) -> float:
    """The Mistral row's (forward, rest) at the two counts' ratios."""
    return fwd * own[0] / ref[0] + (both - fwd) * own[1] / ref[1]


def _adapters(cfg: dict) -> int:
    """LoRA adapters a layer takes under train.py's default targets (the llama names its Linears have)."""
    from transformers import AutoModelForCausalLM

    from generator.probe.compute_host import LORA_TARGETS
    from generator.probe.compute_host_model import host_config

    model = AutoModelForCausalLM.from_config(host_config(cfg, 1))
    present = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if type(m).__name__ == "Linear"}
    return sum(t in present for t in LORA_TARGETS)


WHAT = (
    "bench/scripts/host_ops_audit.py on the CPU: eleven dense families' own host rows (the probe's code, widths cut "
    "four-fold) against the tiny Mistral's, as they are and scaled by the two layers' op counts (the sizing count, "
    "CUDA's policy, as the estimator scales; and the run's own count)"
)


def summarise(data: dict) -> None:
    """Each family's errors and the summary, in place: the Mistral rows' medians as they are, scaled by the sizing
    count (what the estimator does) and by the run's own count, for the whole step and for the forward alone.
    The forward is the clean check: the CPU's step also runs AdamW's per-tensor loop and per-tensor norms for
    clipping (a GPU's fused AdamW and foreach norm issue a few calls), which the count leaves out."""
    errors: dict = {}
    for variant in ("lora", "full"):
        fwd = statistics.median(r["fwd_ms_per_layer"] for r in data["mistral_rows"][variant])
        both = statistics.median(r["fwdbwd_ms_per_layer"] for r in data["mistral_rows"][variant])
        run_ref = data["mistral_run_ops"][variant]
        for key, e in data["families"].items():
            if not key.endswith("/" + variant):
                continue
            own = {p: statistics.median(r[f"{p}_ms_per_layer"] for r in e["own_rows"]) for p in ("fwd", "fwdbwd")}
            found = {
                "step_as_mistral": both, "step_scaled": _scaled(fwd, both, e["ops"], e["reference_ops"]),
                "step_scaled_run_count": _scaled(fwd, both, e["run_ops"], run_ref),
                "forward_as_mistral": fwd, "forward_scaled": fwd * e["ops"][0] / e["reference_ops"][0],
                "forward_scaled_run_count": fwd * e["run_ops"][0] / run_ref[0],
            }  # fmt: skip
            e["own_ms"] = {p: round(v, 4) for p, v in own.items()}
            for name, ms in found.items():
                err = ms / own["fwd" if name.startswith("forward") else "fwdbwd"] - 1
                e[f"{name}_err"] = round(err, 4)
                errors.setdefault(name, []).append(abs(err))
    data["summary"] = {k: {"mean_abs": round(statistics.fmean(v), 4), "max_abs": round(max(v), 4), "rows": len(v)}
                       for k, v in errors.items()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--summarise", action="store_true", help="recompute --out's errors and summary from its rows")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args(argv)
    if args.summarise:
        data = json.loads(args.out.read_text())
        summarise(data)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(json.dumps(data["summary"]))
        return 0
    logging.disable(logging.WARNING)
    import torch
    from transformers import AutoConfig, __version__

    from generator.estimate.host_time import PROBE_ADAPTERS
    from generator.model import meta
    from generator.model.config_dims import expert_count
    from generator.probe.compute_host import _hf_model
    from generator.probe.compute_host_model import _builder

    dev = args.device
    if dev == "cpu":
        torch.set_num_threads(1)
        _cut_widths()
    started = time.time()
    mistral = {v: [_row(_hf_model, v, args.rounds, dev)] for v in ("lora", "full")}
    mistral_run_ops = {v: _run_ops(_hf_model, v, dev) for v in ("lora", "full")}

    def write(families: dict) -> dict:
        """Rewritten after each family, so a call cut at its limit keeps what it timed."""
        data = {"what": WHAT if dev == "cpu" else WHAT.replace("on the CPU", "on a GPU's host").replace(
                    " (the probe's code, widths cut four-fold)", " (the probe's code and widths)"),
                "device": dev, "date": date.today().isoformat(), "transformers": __version__,
                "torch": torch.__version__, "widths": CUT if dev == "cpu" else None, "rounds": args.rounds,
                "mistral_rows": mistral, "mistral_run_ops": mistral_run_ops,
                "families": families, "seconds": round(time.time() - started, 1)}  # fmt: skip
        summarise(data)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        return data

    out = {}
    for family in args.families.split(","):
        cfg = AutoConfig.for_model(family).to_dict()
        ops = meta.meta_counts(cfg, family).ops
        build = _builder(cfg, moe=bool(expert_count(cfg)))  # an MoE on a GPU only: grouped_mm is CUDA's path
        adapters = _adapters(cfg)
        for variant in ("lora", "full"):
            if variant == "lora" and not adapters:
                continue  # no llama-named Linear: train.py's default targets adapt nothing
            own = []
            for _ in range(2):  # each family and the reference alternately: the host's speed drifts
                own.append(_row(build, variant, args.rounds, dev))
                mistral[variant].append(_row(_hf_model, variant, args.rounds, dev))
            if variant == "full":
                count, ref = ops.full, ops.reference_full
            else:
                count = tuple(x + adapters * a for x, a in zip(ops.frozen, ops.adapter, strict=True))
                ref = tuple(x + PROBE_ADAPTERS * a for x, a in zip(ops.reference_frozen, ops.adapter, strict=True))
            out[f"{family}/{variant}"] = {"adapters": adapters if variant == "lora" else 0, "ops": count,
                                          "reference_ops": ref, "run_ops": _run_ops(build, variant, dev),
                                          "own_rows": own}  # fmt: skip
            print(family, variant, [r["fwdbwd_ms_per_layer"] for r in own], count, flush=True)
        write(out)
    data = write(out)
    print(json.dumps(data["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
