"""Why `probe --compute` reads Mistral-7B's GEMMs at 600-700 TFLOP/s where a profiled train.py step ran them at 847
(bench/README, next call 4): the same shapes, in one process, timed five ways, with the SM clock and power sampled
through each (generator/probe/gpu_clocks.py):

- `in_step`: inside a training step (Mistral-7B cut to 2 layers, random init as train.py builds it, fp32 weights under
  bf16 autocast, 8,192 tokens), from torch.profiler's kernel times grouped by input shape;
- `probe`: the probe's own timing (`gemm_time`) on the probe's operands (torch.randn);
- `captured`: the probe's timing on the operands the step really handed each GEMM (hooks on layer 1 and lm_head);
- `zeros`: the same shapes on zeros (the least power a GEMM draws);
- `sustained`: back-to-back for about 0.4 s on the probe's and on the captured operands, where the clock settles;
- `interleaved`: each captured GEMM between device copies lasting half and as long as it (a step's duty cycle).

    python bench/scripts/gemm_in_step.py --out $OUT/gemm-in-step.json      # one H200: about a minute
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.harness import model_dir  # noqa: E402
from generator.probe.clock import Clock, gemm_time  # noqa: E402
from generator.probe.compute_bench import gemm_operands  # noqa: E402
from generator.probe.compute_grid import Gemm  # noqa: E402
from generator.probe.gpu_clocks import ClockSampler  # noqa: E402

TOKENS = 8192
SUSTAIN_S = 0.4


def build(layers: int):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(model_dir(Path(tempfile.gettempdir()) / "gemm-in-step", "mistral-7b", layers))
    with torch.device("cuda"):
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa")


def capture(model, ids) -> dict[str, dict]:
    """Each Linear of layer 1 and lm_head: its bf16 input, weight and output gradient from one forward + backward."""
    got: dict[str, dict] = {}
    wanted = {f"model.layers.1.{n}" for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.o_proj",
                                              "mlp.gate_proj", "mlp.down_proj")} | {"lm_head"}  # fmt: skip
    hooks = []
    for name, mod in model.named_modules():
        if name in wanted:

            def fwd(m, inp, out, name=name):
                got.setdefault(name, {})["x"] = inp[0].detach().reshape(-1, inp[0].shape[-1]).to(torch.bfloat16)
                got[name]["w"] = m.weight.detach().to(torch.bfloat16)

            def bwd(m, gin, gout, name=name):
                got[name]["dy"] = gout[0].detach().reshape(-1, gout[0].shape[-1]).to(torch.bfloat16)

            hooks += [mod.register_forward_hook(fwd), mod.register_full_backward_hook(bwd)]
    step(model, ids)
    for h in hooks:
        h.remove()
    return got


def step(model, ids) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)


def gemms(name: str, ops: dict) -> list[tuple[Gemm, torch.Tensor, torch.Tensor]]:
    """(shape, A, B) of the three GEMMs autograd runs for a Linear, as it lays them out: x @ W^T, dY @ W, dY^T @ X."""
    x, w, dy = ops["x"], ops["w"], ops["dy"]
    m, k, n = x.shape[0], x.shape[1], w.shape[0]
    out = [(Gemm(m, k, n, "fwd"), x, w.t()), (Gemm(m, n, k, "dgrad"), dy, w)]
    if name != "lm_head":  # full fine-tune: every weight has a gradient; lm_head's wgrad is the largest, kept short
        out.append((Gemm(n, m, k, "wgrad"), dy.t(), x))  # operators.linear_shapes' (n_out, tokens, k_in)
    return out


def sustained(fn, sampler: ClockSampler) -> dict:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    single = Clock("cuda").time(fn)
    n = max(3, round(SUSTAIN_S / max(single, 1e-6)))
    t0 = time.time()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return {"s": start.elapsed_time(end) / 1e3 / n, "calls": n, "clocks": sampler.summary(t0, time.time(), 50)}


def interleaved(fn, gemm_s: float, ratio: float, sampler: ClockSampler) -> dict:
    """Median seconds of fn between two copies each lasting about `ratio` x gemm_s (4.3 TB/s, bytes read + written)."""
    n = max(1 << 20, int(ratio * gemm_s * 4.3e12 / 4))
    src = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    rounds = max(10, round(SUSTAIN_S / (gemm_s * (1 + ratio))))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rounds)]
    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    for a, b in events:
        dst.copy_(src)
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) / 1e3 for a, b in events[2:]]
    return {"s": statistics.median(times), "ratio": ratio, "clocks": sampler.summary(t0, time.time(), 50)}


def in_step_times(model, ids, sampler: ClockSampler) -> tuple[dict, dict]:
    """{(m, k, n): median device seconds of aten::mm with those operand shapes} over three profiled steps, and the
    clocks over them."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        step(model, ids)
    torch.cuda.synchronize()
    t0 = time.time()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            step(model, ids)
        torch.cuda.synchronize()
    clocks = sampler.summary(t0, time.time(), 50)
    out = {}
    for ev in prof.key_averages(group_by_input_shape=True):
        if ev.key != "aten::mm" or not ev.input_shapes or len(ev.input_shapes) < 2:
            continue
        (m, k), (_, n) = ev.input_shapes[0][:2], ev.input_shapes[1][:2]
        out[(m, k, n)] = getattr(ev, "device_time_total", getattr(ev, "cuda_time_total", 0)) / 1e6 / ev.count
    return out, clocks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    rows, clock = [], Clock("cuda")
    with ClockSampler(interval_ms=20) as sampler:
        t_idle = time.time()
        time.sleep(1.0)
        idle = sampler.summary(t_idle, time.time(), 0)
        model = build(args.layers)
        ids = torch.randint(0, model.config.vocab_size, (1, TOKENS), device="cuda")
        ops = capture(model, ids)
        in_step, step_clocks = in_step_times(model, ids, sampler)
        del model
        torch.cuda.empty_cache()
        for name, tensors in ops.items():
            for g, a, b in gemms(name, tensors):
                ra, rb = gemm_operands(g, "cuda", torch.bfloat16)
                za, zb = torch.zeros_like(ra), torch.zeros_like(rb)
                fns = {"probe": lambda ra=ra, rb=rb: torch.mm(ra, rb), "captured": lambda a=a, b=b: torch.mm(a, b),
                       "zeros": lambda za=za, zb=zb: torch.mm(za, zb)}  # fmt: skip
                row = {"linear": name, "m": g.m, "k": g.k, "n": g.n, "op": g.op, "flops": g.flops,
                       "in_step_s": in_step.get((a.shape[0], a.shape[1], b.shape[1]))}  # fmt: skip
                row.update({f"{how}_s": gemm_time(clock, fn) for how, fn in fns.items()})
                row["sustained_probe"] = sustained(fns["probe"], sampler)
                row["sustained_captured"] = sustained(fns["captured"], sampler)
                row["interleaved"] = [interleaved(fns["captured"], row["captured_s"], r, sampler) for r in (0.5, 1.0)]
                row["operand_std"] = [round(float(a.float().std()), 6), round(float(b.float().std()), 6)]
                rows.append(row)
                tf = {k: round(g.flops / row[k] / 1e12, 1) for k in ("in_step_s", "probe_s", "captured_s", "zeros_s")
                      if row.get(k)}  # fmt: skip
                print(name, g.op, g.m, g.k, g.n, tf, "sustained", round(g.flops / row["sustained_probe"]["s"] / 1e12),
                      row["sustained_probe"]["clocks"].get("sm_mhz"), "interleaved",
                      [round(g.flops / r["s"] / 1e12) for r in row["interleaved"]], flush=True)  # fmt: skip
                del ra, rb, za, zb
    result = {
        "what": __doc__.split("\n\n")[0],
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tokens": TOKENS,
        "idle_clocks": idle,
        "in_step_clocks": step_clocks,
        "in_step_shapes": [[m, k, n, s] for (m, k, n), s in sorted(in_step.items())],
        "sampler_error": sampler.error,
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
