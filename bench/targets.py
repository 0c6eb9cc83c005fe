"""The calibration targets of issue 6 and whether the current estimator meets them on the committed results."""

from __future__ import annotations

from dataclasses import dataclass

ALLOC_TOL, RESERVED_TOL, TPS_TOL, REGRET_TOL = 5.0, 10.0, 15.0, 3.0
"""Percent: peak allocated, peak reserved, tokens/s per GPU, recommendation regret."""
VALIDATION_TPS_TOL = 10.0
"""Percent, tokens/s on held-out rows (issues 17 and 18): tighter than the fit rows' 15%, as the issues ask."""
TARGETS = (
    f"peak allocated within {ALLOC_TOL:.0f}%",
    f"peak reserved within {RESERVED_TOL:.0f}%",
    f"tokens/s within {TPS_TOL:.0f}%",
    f"recommendation within {REGRET_TOL:.0f}% of the fastest that fits",
)
# What the model is missing, per target, when it is missed. Written by whoever reads the misses; keep it honest.
# Why a target is missed, where the cause is known; the report prints it beside the rows that missed.
WHY_MISSED: dict[str, str] = {
    "tokens/s within 15%": (
        "ZeRO-3's step time is host-bound (Python hooks fetch and release every submodule's parameters) and varies "
        "between runs of the same cell on the same machine and day: seq 4096 with checkpointing measured 3,911 and "
        "4,483 tokens/s, seq 1024 x mb4 4,600 and 3,976 (single steps of one run range 0.84-1.36 s). The fitted "
        "per-pass overhead sits between the runs; no single value puts both runs of a cell within 15%."
    ),
}


# Why a held-out row misses, where it is understood. Nothing here was fitted: these are the open questions.
WHY_VALIDATION_MISSED: dict[str, str | tuple[str, ...]] = {
    "tokens/s within 10%": (
        "Causes, none fitted away (operator rates measured on one H200 on 2026-12-03, "
        "bench/results/compute-h200-2026-12-03.json, with flex rows at 54-512-token documents added; where a "
        "step's time goes is profiled in bench/results/profile-h200-2026-12-02/ and -2026-12-02-b/).",
        "Host-bound steps of 1,024-2,048 tokens (-18% to +52%): the step is the larger of the GPU's work and "
        "the host's time to issue it, which the probe measures on transformers' tiny Mistral at four depths, "
        "warm, in interleaved rounds (generator/probe/compute_host.py). The host is the machine's CPU and its "
        "speed moves: the same cell ran 7,621-9,133 tokens/s on different leases of one H200 kind, "
        "Llama-2-13B LoRA at 1,024 tokens 3,633 and 3,154 on two machines the same morning, and on one "
        "machine the probe's LoRA layer read 5.8 ms and then 7.2 seven minutes later. Priced with their own "
        "machine's probe (files h200-x1-families-hostpaired-2026-12-03 and -b, the probe run before and after "
        "the cells), the held-out cells of the second machine read -3.7%, -6.4%, +9.6%, +13.6%, +22.8% and "
        "+52.0% (Qwen2.5-7B at 2,048 x 1, 283 ms a step against its 1,024 x 2 twin's 199 on the first "
        "machine): half within 10%. That Qwen row was the machine, not the model: on one machine back to back "
        "with its own probe (h200-x1-families-qwenpair-2026-12-03 and -b, in both orders), 2,048 x 1 ran "
        "11,239 and 11,292 tokens/s (-8.9%, -1.1%) and 1,024 x 2 9,300 and 10,612 (+10.1%, +7.3%); the same "
        "probe's eager LoRA host row read 7.0 ms a layer in the first call and 4.5 in the second. Outside the "
        "layers train.py's host spent 15-25 ms in the profiled step where the probe's tiny model spends 3-7. "
        "Run `probe --compute` on the training machine for its own host rows. The plan no longer leaves a "
        "train.py bf16 step there: it compiles the layers where that is predicted faster "
        "(generator/plan/compile_lever.py), which takes the per-layer host work down with it; held out on "
        "2026-12-04, Llama-3-8B LoRA at 2,048 x 1 compiled ran 14,846 tokens/s (-1.0% now, 1.64x its eager "
        "twin's 9,078, +6.2%) and Qwen2.5-7B at 2,048 x 1 compiled 15,876 (-5.2%; eager 11,254, -2.4%) "
        "(h200-x1-families-compile-pairs-2026-12-04 and -c). These host-bound rows are llama-coded layers, "
        "which the Mistral rows time as they run; another layer with no host rows of its own now takes the "
        "eager Mistral row at the ratio of the ops the two layers dispatch, counted at sizing "
        "(generator/model/op_count.py; on the CPU, eleven families' own forward host rows 6.9% from it "
        "against 14% from the Mistral row as it is, cpu-host-ops-2026-12-05), which moves none of these rows "
        "(the eager rows of such models are GPU-bound).",
        "TRL's short packed documents at micro-batch 2 (one flattened row of 8,192 tokens under SDPA's masked "
        "kernel, 26% fast): in the profiled step (profile-h200-2026-12-02/trl-short) the kernels ran 918 ms a "
        "step against 935 priced, cuDNN's masked attention 501 ms against the 401 the probe's dense-mask rows "
        "give and the GEMMs 298 against 375, and the GPU sat idle 0.2-0.3 s of each 1.13-1.23 s step behind 24 "
        "host synchronisations (TRL's per-step metrics and transformers' packed-sequence detection: "
        "aten::nonzero and .item()), which no term models. Timed alone (bench/scripts/attention_layout.py, on "
        "an H100 on 2026-12-06: attention-layout-h100-2026-12-06), the masked kernel ran alike as the probe "
        "calls it and as transformers' layer does, under a causal or a block-diagonal mask (12.37-12.59 ms a "
        "layer forward and backward at one 8,192-token row, the same cuDNN kernels): the 100 ms it ran over "
        "its price in the step is not the layout or the mask.",
        "QLoRA (14-27% slow before 2026-12-03's fourth session): the dequantisation constant had been fitted "
        "on train.py's QLoRA rows, whose residual stream is fp32 (prepare_model_for_kbit_training), and held "
        "that stream's extra traffic and, by accident, the cost of Mixtral's 4-bit per-expert loop. Both are "
        "now priced for what they are: the fp32 stream's passes (RoPE and SwiGLU in fp32, bitsandbytes' casts "
        "into and out of each 4-bit Linear, generator/estimate/passes.py) and train.py's NF4 Mixtral layers "
        "timed whole (bench/scripts/qlora_layer.py); refitted on train.py's two QLoRA fit rows the constant "
        "went to zero (a dense Linear4bit's dequantisation costs next to nothing beside its GEMM). Held out: "
        "Mistral-7B QLoRA at 4,096 -6.8% before, +0.1% now; Llama-3-8B QLoRA +5.2%, +0.7%; TRL's bf16 QLoRA "
        "at 4,096 x 2 -14.2%, -3.1%, at 8,192 -26.9%, -13.4%, and the plan's own pick at 4,096 x 4 "
        "(h200-x1-trl-cli-2026-12-03-c) -20.0%, -4.9% (with flex timed over 4,096-token documents in a "
        "16,384-token row, flex-docs-in-rows-h200-2026-12-03); the unseen Qwen2.5-7B QLoRA at 4,096 x 4 -7.4% "
        "and Llama-2-13B QLoRA at 2,048 x 8 -4.3%; Mixtral QLoRA at micro-batch 8, the plan's pick, -1.9% "
        "with train.py's sorted NF4 dispatch (4,585 tokens/s; -1.1% and -2.1% with the per-expert loop it "
        "replaced, shown unscored). Mixtral at micro-batch 1 with checkpointing is fast by +18.6% (2,944 "
        "tokens/s measured, 3,491 predicted; h200-x1-families-mixtral-sorted-2026-12-04): the step is "
        "launch-bound, which the step-level max of GPU and host time does not see. The layer rows "
        "(qlora-layers-mixtral-sorted-h200-2026-12-04, timed right before the cell) give 35.5 ms a layer "
        "checkpointed; profiled on the same machine (profile-mixtral-qlora-sorted-h200-2026-12-04, gaps.json "
        "from bench/scripts/profiler.py), the GPU was busy 1,057-1,059 ms of each step, the same as under the "
        "per-expert loop (1,064), running 33,331 kernels a step (1,040 a layer: eight experts' "
        "dequantisation, 4-bit GEMMs and adapters, forward, recompute and backward), and idle 580-650 ms "
        "under the profiler, about 400 ms of it in over 30,000 gaps shorter than 100 us: the host issues "
        "kernels more slowly than the GPU runs them, and the one host read a layer (the routed counts) keeps "
        "it from running ahead of the next layer. The sorted dispatch cut the synchronisations from 651 to "
        "203 a step and the step from 1.38-1.75 s to 1.28-1.45 s; what remains is the host's per-kernel cost "
        "in train.py's process (at most 42 us a kernel: the step's 1.39 s over its 33,331; the warm layer "
        "timing's 35.5 ms over its 1,040 is 34), which no probe row of the shipped table measures for an NF4 "
        "expert layer (bench/scripts/qlora_host.py times its host rows as the probe times a dense layer's, "
        "for the estimator to read). At micro-batch 8 each kernel is eight times longer and the step is "
        "GPU-bound. The idle time is the machine's CPU: on an H100 80GB on 2026-12-06 (h100-x1-mixtral-qlora-"
        "host-2026-12-06, unscored) the same cell ran 3,268 tokens/s, faster than the H200's 2,944, predicted "
        "3,433 from the shipped table scaled by the catalog (+5.0%; micro-batch 2 +8.7%, 4 +6.2%), and "
        "profiled on that machine the GPU was busy 1,161 ms of 1,367-1,506 (idle 206-345 ms under the "
        "profiler against the H200 machine's 580-650); its NF4 layer's host rows read 9.7 ms a layer forward "
        "and backward, a host time of 0.45 s a step against 1.15 s of GPU work.",
        "Mixtral-8x7B cut to 4 layers and fully fine-tuned, every row 9-14% fast before 2026-12-05 (six rows: "
        "eager and float8 twice each and compiled at 4,096 x 2, eager at 8,192 x 1): the GPU is busy 357-366 "
        "ms of a 368-376 ms step (profiled, profile-mixtral-l4-full-h200-2026-12-04), and what the layer rows "
        "leave out is the optimizer step over 6.07B fp32 parameters for only four layers of work: fused AdamW "
        "took 49 ms (3.5 TB/s) where it is priced at the copy rate (40 ms), and clip_grad_norm_ 20 ms that no "
        "term priced (a foreach norm and a foreach multiply over every gradient, which torch runs whatever "
        "the norm). clip_grad_norm_ is now priced from torch's source (generator/estimate/step_traffic.py "
        "CLIP_PASSES: three passes over the gradients, DeepSpeed's own clip left in its fitted overhead), at "
        "the table's stream rate as the update is, and bench/fit_compute.py refitted the constants on their "
        "fit rows on top of it (the elementwise scale 1.63 to 1.31, LoRA's adapter bytes 5.01 to 6.84): those "
        "six rows read +2% to +8%, Mistral's Liger full fine-tunes at 2,048 x 1 (+16.3% to +20.8% before) "
        "+8.3% to +12.1%, the Liger LoRA rows moved 2.5-4.5 points slower (worst -9.6%, Llama-3-8B with flex "
        "at 8,192 x 2), and over the 135 validation rows those past 10% went from 25 to 20, the mean absolute "
        "error from 6.49% to 5.92%. Both the update and the clip run below the stream rate (3.0-3.3 TB/s in "
        "the probe's optimizer rows, optimizer-rows-h200-2026-12-04-b; 3.5-3.6 in the Mixtral profile, "
        "against 4.2 for a copy). Priced at the probe rows' rate they bring the full fine-tunes closer (the "
        "six Mixtral rows -4% to +3%, Mistral's Liger ones -3% to +4%), but the refit then takes the "
        "elementwise scale to 0.86 and LoRA's adapter bytes to 9.4, which puts six more Liger LoRA rows past "
        "10% slow (worst -13.6%): 27 rows past 10%, mean 6.44%. The stream rate was kept having seen both "
        "outcomes on the validation rows, so for this one choice they are not held out; what it says is that "
        "LoRA's adapter bytes, fitted after the elementwise scale on rows without Liger, carry elementwise "
        "work that Liger's fused kernels remove (a joint fit of the two is next).",
        "Mixtral cut to 8 layers, LoRA in float8 (14% slow before, +2.9% now): a compiled MoE layer fuses the "
        "router, the gathers and scatters and SwiGLU that the eager layer row holds and the operators do not "
        "count, so float8 and --compile-layers are now anchored on the probe's compiled layer rows "
        "(generator/probe/compute_layers.py; moe-layers-mixtral-h200-2026-12-04: 25.1 ms a LoRA layer forward "
        "and backward against 36.7 eager); held out, Mixtral cut to 8 layers with compiled bf16 layers +3.0% "
        "and in float8 at 8,192 x 2 +2.9% (h200-x1-families-moe-compiled-2026-12-04). The same file's eager "
        "rows, timed with checkpointing, replaced the table's untimed ones (bench/fit_compute.py's rule): the "
        "bf16 LoRA rows moved from -0.3% and +0.9% to -5.0% and -4.4%.",
        "Qwen3-30B-A3B, an MoE named by its config (128 experts of 768, top-8), LoRA in float8: 44% fast at "
        "2,048 x 2 (13,901 tokens/s against 20,010; h200-x1-families-qwen3moe-2026-12-04-b), 11% at 4,096 x "
        "1, and its compiled bf16 twin 10% fast there. The estimator calls the 2,048 x 2 step host-bound from "
        "the probe's host rows, which time a dense layer's kernels; a compiled MoE layer's host work (routing "
        "4,096 tokens over 128 experts) is in no row of the shipped table (`probe --compute --model` now "
        "times a model's own layer's host rows, generator/probe/compute_host_model.py; not yet run on a GPU), "
        "and the step ran 0.29 s where its 4,096 x 1 twin, the same tokens, ran 0.23. Its eager row at 4,096 "
        "x 1 reads -1.2% and its compiled one at 8,192 x 1 +0.1%. From the operators alone the three 4,096 x "
        "1 cells read -15%, -46% and -46% (the plan warned it); the probe's layer rows first carried the "
        "model's unused dense width (6,144) where the planner looks up the experts' (768) and were never read "
        "(fixed: generator/probe/compute_layers.layer_dims, tests/test_probe_layer_keys.py); read, the "
        "8,192-token rows alone put the three at +9.8%, +8.3% and +9.2%, and --full now times each MoE layer "
        "at 4,096 tokens too (eager LoRA 8.9 ms a layer against 15.8 at 8,192: a part that does not shrink "
        "with the tokens).",
        "Fixed after they missed, from measurements and library sources, fitting nothing to them: the float8 "
        "LoRA rows of Llama-3-8B, Qwen2.5-7B and Mistral-7B (11-14% slow before; LoRA's rank-16 GEMMs are now "
        "priced as a step runs them); TRL's all-linear LoRA with Liger and checkpointing (18% fast before: "
        "LoRA dropout's fp32 inputs and masks are counted); Mixtral-8x7B's Liger and float8 rows (29% and 22% "
        "fast from the operators alone: they take the probe's whole-layer row and add the lever's operator "
        "difference); Llama-3.2-3B fully fine-tuned with Liger, a model no preset holds (+6.9% in bf16, "
        "+10.8% in float8; h200-x1-families-unseen-models-2026-12-04, -llama32-fp8-2026-12-04: now +2.0% and "
        "+4.4%), from Liger's source: over an fp32 lm_head weight under autocast its fused loss casts the "
        "whole weight to bf16 once per chunk of tokens (32 chunks at 16,384 tokens and a 128k vocabulary) and "
        "accumulates each chunk's fp32 gradient (generator/estimate/passes.py liger_weight_bytes; the cast "
        "cache's rule checked on the installed torch by tests/test_estimate_liger_weight.py).",
        "Compiled and float8 LoRA steps (2026-12-07): peft's passes around each adapter were priced as fused away "
        "in a compiled layer (compiled_adapter_fused 1.0, at its bound on the one compiled Mistral-7B step it was "
        "fitted on, where it also hid the operators' over-price of the compiled frozen layers), so every LoRA step "
        "priced from a model's own layer rows read 3-15% fast. One compiled decoder layer timed with and without "
        "train.py's adapters on an H100 (bench/scripts/lora_layer_gap.py --compiled; Mistral-7B, Phi and "
        "StarCoder2, bf16 and float8, default targets and all-linear; h100-x1-lora-layer-gap-compiled-*) put the "
        "adapters at 1.5-2.7x their GEMMs' price: their outputs go through memory before their adds. Refitted "
        "on those ten layer pairs (0.81; bench/fit_compute.py) and on no step: Phi's float8 LoRA +14.9% -> "
        "+5.2%, StarCoder2's +7.6% -> 0.0%, Qwen1.5-MoE's +10.4% -> +5.2%, Qwen3-30B-A3B's compiled and float8 "
        "4,096 rows +11.1% and +11.6% -> +8.9% and +9.4%, the dense float8 LoRA rows +2.6..+8.2% -> -3.5..+1.6%; "
        "the operator-priced compiled bf16 LoRA rows -0.5..+4.0% -> -5.2..-0.7% and Mistral-7B's float8 LoRA at "
        "4,096 x 4 -1.1% -> -8.4%: the operators over-price a compiled dense layer (0-8% on an H200's own "
        "float8-layer-rows files), which the former fit had hidden in the adapters.",
        "Mistral-7B fully fine-tuned at 1,024 x 1 (2026-12-06; -12.3% slow before, +5.4% now; the row was known "
        "when the change was made, so for it this row is not held out): its GEMMs were priced as a 2,048-token "
        "step's (the shipped table's smallest size) and the optimizer's update and clip (68 ms of its 222) were "
        "hidden under the host's issuing. The table now holds the dense Linears' 1,024-token rows timed by the "
        "probe's code on one H200 (small-gemms-dense-h200-2026-12-05, LoRA's rank-r pairs left out: they time "
        "the host's launch rate), and from train.py's source the step's tail never hides (generator/estimate/"
        "step_traffic.py tail_bytes: issued after the backward, before the loss's host read). Either alone moves it "
        "the wrong way or not at all (the rows alone: +25.0%, the host-bound step then hiding the tail), and "
        "no other row moves by more than 0.4 points; fit rows unchanged. Checked blind after on an H100 "
        "(h100-x1-tail-blind-2026-12-06, unscored; predicted before the call in results/predicted/tail-blind-"
        "2026-12-06): Llama-3.2-3B fully fine-tuned at 1,024 x 1 and 2,048 x 1 ran 6,361 and 11,074 tokens/s, "
        "read -3.0% and +11.4% with the tail (+31.0% and +13.8% with it hidden) from the shipped host rows, "
        "-11.6% and +1.6% (+15.8% and +13.8%) from that machine's own.",
        "StarCoder2 at transformers' default config (2026-12-05, chosen and predicted before it ran: full "
        "+13.8% fast, LoRA -11.4% slow), fixed after it missed from PyTorch's and train.py's sources, fitted "
        "on no row: the meta count now runs under CUDA's autocast policy (generator/model/cuda_autocast.py: "
        "layer_norm, pow and sum in fp32, which the CPU's autocast and a bf16 count leave in bf16), so its "
        "eager passes hold the LayerNorms' fp32 traffic and q, k and v's three casts of their output, and the "
        "LoRA row is priced as it ran (train.py's default targets: the llama names the model has, "
        "q/k/v/o_proj alone; the plan prints --lora-targets all-linear there): +2.3% and -4.2% now.",
        "Qwen1.5-MoE-A2.7B (2026-12-05; its float8 pick -27.7% from its operators as planned, then both rows "
        "13-15% fast from its own layer rows, moe-layers-qwen1.5-moe-h200-2026-12-05), fixed on 2026-12-07 from "
        "peft's source, fitted on no row: peft adapts gate_proj, up_proj and down_proj by name on its shared "
        "expert's Linears (qwen2_moe's names are not moved onto the fused experts), 3 of the 7 adapters a layer "
        "and 58% of their width, which the estimate priced on the memory side only (estimate.lora_saved) and left "
        "out of the adapters' GEMMs, passes, host time and states (estimate.lora_targets.moe_mlp_linears_adapted; "
        "tests/test_estimate_lora_own_linears.py checks the count against peft's). bf16 +12.5% -> +1.4%, float8 "
        "+15.9% -> +10.4%, and +5.2% with the compiled adapters repriced (below); its float8 lever is priced from "
        "the operators; the H200's own float8 layer row is bench/README Next 5.",
        "Open, 2026-12-05 (thirteenth session, chosen and predicted before the call): Phi at transformers' "
        "default config in float8, full at 2,048 x 8 +18.6% and LoRA +14.6% fast, where its compiled bf16 "
        "full fine-tune reads -0.7% and StarCoder2's float8 LoRA +5.8%: Phi's attention is 64 wide and priced "
        "from the 128-wide rows (the plan says so), and its float8 Linears are priced from the presets' "
        "shapes. Timed on an H100 (no H200 could be started), Phi's float8 layer ran 1.04x its bf16 one where "
        "the operators give about 1.3x: float8 adds 2.6 ms a layer beside its GEMMs, its casts priced 0.9 "
        "(fp8_cast_scale, fitted on one Mistral-7B row whose GEMMs, over-priced against a step's, hide its "
        "own 2.4 against 1.2; h100-x1-fp8-layer-rows-*-2026-12-06). A model's own float8 layer rows (probe "
        "--compute --full --model) now price its float8 steps; with the H100's standing in, the two Phi rows "
        "read -2.7% and +8.5% (not scored: an H100's rows are not in the table). Timed on an H200 on "
        "2026-12-06 and added to the table (h200-x1-fp8-layers-phi/-starcoder2-2026-12-06), Phi's float8 full "
        "fine-tune reads +3.0% (a second run +2.3%) and its LoRA +14.9%, +5.2% since its adapters inside the "
        "compiled layers are priced as such layers timed with them run (below). StarCoder2's float8 pick pair, "
        "chosen and predicted before it ran "
        "(h200-x1-float8-layernorm-2026-12-06): the pick held (1.27x its compiled bf16 runner-up), its float8 "
        "cell +10.4% from the operators then, -5.8% now from its own float8 layer rows, timed after it ran; "
        "the runner-up +1.2%.",
        "Qwen3-30B-A3B's float8 LoRA at 2,048 x 2 ran again at 16,306 tokens/s (+31.6%), 17% above its first "
        "run: its own layer's host rows stopped with an illegal memory access on the H200. Alone in a process "
        "they ran on an H100 (h100-x1-host-rows-qwen3-own-2026-12-06: its compiled LoRA layer issues 1.10x the "
        "tiny Mistral's host work), and rescaled to the H200 machine they price the cell at 21,701 tokens/s "
        "where the op-count-scaled Mistral rows give 21,460: the layer's own host time is not what is missed. "
        "Cut to 24 layers on an H100 (h100-x1-qwen3-cut-2026-12-06, unscored) the pair did not reproduce the "
        "gap: 2,048 x 2 ran 121 ms a step and 4,096 x 1 129 (the same tokens), and profiled the GPU was busy "
        "114 and 122 ms of them, 8-9% above the table's price scaled to that card, with the host ahead of "
        "the GPU at each step's end (16-24 ms waiting in cudaDeviceSynchronize). Its layer timed compiled on an "
        "H100 (2026-12-07, h100-x1-fp8-layer-rows-qwen3moe-*) ran float8 1.06x slower than bf16 at 2,048 x 2 "
        "and level at 4,096 x 1 (its experts are not Linears): float8's price is not the miss, and its 4,096 "
        "float8 row reads as its compiled bf16 twin. A profile of the whole model's step on an H200 is next.",
    ),
    "peak allocated within 5%": (
        "Mixtral-8x7B cut to 8 layers, LoRA in float8 (+17% before, -0.4% now): a compiled decoder layer keeps "
        "what Liger's RMSNorm and SwiGLU keep whether --liger is on or not (inductor saves a norm's input and gate "
        "and up, and recomputes the rest), and a compiled expert recomputes its activation. Found by torch's CUDA "
        "memory history at the step's peak (bench/scripts/memhist.py; memhist-h200-2026-12-03.json): the Mixtral row "
        "holds 184,448 bytes a token and layer (the eager count 258,264, the compiled one now 184,536), Llama-3-8B "
        "LoRA in float8 147,584 (the count 147,680); a change from what the peak holds, fitted on no row. The same "
        "rule is the 45 KB a token and layer by which a compiled Mistral layer without Liger kept less than the "
        "model said (bench/scripts/saved_by_layer.py's 70 KB against the modelled 25). "
        "TRL's all-linear LoRA at 8,192 tokens (-5.4% before, -3.1% now): an adapted down_proj's backward holds "
        "lora_A's input gradient, its fp32 cast and dropout's fp32 gradient at once, 8 bytes per token and F where "
        "the SwiGLU product holds 4 (counted on the CPU, tests/test_estimate_lora_transient.py; fitted on no row). "
        "StarCoder2 at transformers' default config (2026-12-05, chosen and predicted before it ran; its layer "
        "counted on meta and on the CPU within 0.1% at tiny widths, bf16, no autocast) missed both ways on the GPU: "
        "its fp32 full fine-tune kept about 13 KB a token and layer more than priced (-6.1%; "
        "memhist-starcoder2-h200-2026-12-05.json: the window's 74.2 GB against 67.5 priced), its LoRA at 4,096 x 8 "
        "about 19 KB less (+15.5%). Both from sources, fitted on no row: CUDA's autocast runs layer_norm in fp32 "
        "(aten's autocast lists; the CPU's keeps it bf16), so each of q, k and v casts the norm's fp32 output to a "
        "bf16 copy of its own, 4h more a token and layer (12,288 bytes); the count now runs under that policy "
        "(generator/model/cuda_autocast.py), at the full fine-tune's fp32 stream too (LayerSaved.trained_fp32). "
        "The LoRA row ran train.py's default targets, the llama names the model has (q/k/v/o_proj alone), where "
        "the estimate had priced the plan's all-linear (c_fc and c_proj adapted too: 30 KB a token and layer): "
        "calibration now prices a train.py row without --lora-targets as it ran. -0.7% and -0.1% now. "
        "Thirteenth session (h200-x1-families-layernorm-2026-12-05, chosen and predicted before the call): the "
        "compiled and float8 layers of two LayerNorm families kept less than priced. Phi at transformers' default "
        "config, full at 2,048 x 8 with its layers compiled in bf16 +21.3%, in float8 +52.5%, LoRA in float8 "
        "+46.9%; StarCoder2's float8 LoRA at 4,096 x 4 +18.2%. Three causes, found on the CPU on 2026-12-05 from "
        "what the partitioner and peft do, none fitted (these rows showed them, so they no longer check them "
        "blind): (1) the compiled count traced the block without inductor's decompositions, so the partitioner saw "
        "LayerNorm and GELU as single ops and kept their fp32 intermediates; with the table inductor hands it "
        "(torch._inductor.decomposition) Phi's compiled layer keeps 61.6 KB a token where it counted 98.4, "
        "Mistral's is unchanged (139.4); (2) compiled, torchao's float8 Linear keeps its input cast to float8 where "
        "nothing else needs the bf16 one, and an fp32 weight of a float8 Linear gets no autocast bf16 copy: the "
        "count now traces the block with train.py's float8 Linears too (LayerSaved.compiled_fp8: Phi 43.1 KB with "
        "fp32 weights against 65.7 compiled bf16); (3) compiled, peft's adapters on Linears the forward hands one "
        "tensor keep one bf16 copy of it, which sizing now finds (LayerSaved.shared_inputs: Phi's q, k, v and fc1, "
        "StarCoder2's q, k and v), where all-linear on a model's own Linears priced a copy each: 3 x 2h and 2 x 2h, "
        "12.0 KB a token and layer in both rows. Now +1.2%, -0.5%, -0.3% and -0.2%. "
        "Falcon-7B's shape, LoRA at 2,048 x 8 (compiled bf16 and float8), ran out of memory where the plan said 86 "
        "GB; at 2,048 x 2 it did too past 81.9 GB where the plan said 38.2 (h100-x1-falcon-memory-2026-12-05, on an "
        "H100: memory does not depend on the card). transformers 5.17's FalconAttention, which the device runs, "
        "calls SDPA with one key head for 71 query heads and no enable_gqa, so torch runs its math kernel, which "
        "keeps every score in fp32; the count at sizing now runs that kernel where a class calls SDPA so "
        "(generator/model/saved_count.py: sdpa_math, priced as eager attention with the kernel's own 4 bytes a "
        "score and head; tests/test_model_sdpa_math.py) and the plan gives 107.9 GB for that cell under 5.17. "
        "The report prices rows with the transformers it runs under (5.25 in CI, whose Falcon repeats the key head "
        "first and takes the fused kernel): those rows are out-of-memory rows, listed below, not scored."
    ),
    "peak reserved within 10%": (
        "The reserved allowance on top of allocated memory: FRAGMENTATION in generator/estimate/core.py on the peak, "
        "or, where the loss builds logits-sized blocks, the holes they leave once the layers' backward splits them "
        "(MLP_HOLES: nine of the MLP's F-wide intermediates per token in the MLP's dtype, per expert's tokens for an "
        "MoE; minimax on the fit rows, twelve within 5.3%). Until 2026-12-03 that term was per vocabulary entry "
        "(fitted on the same 32k-vocabulary rows) and three unseen QLoRA rows with checkpointing missed both ways: "
        "Qwen2.5-7B at 4,096 x 4 +17.5%, Llama-3-8B at 4,096 x 4 +13.4%, Llama-2-13B at 2,048 x 8 -13.6%, their holes "
        "9.5-10.5 GB whatever the vocabulary (32k, 128k, 152k); the allocator's segments after a step "
        "(memhist-qlora-h200-2026-12-03.json) hold Qwen2.5-7B's as cached fp32-logits blocks and Llama-2-13B's as 38 "
        "segments of 0.2-2 GB, most of them 864 MiB (one layer's fp32 gate or up output at 16,384 tokens). Those "
        "rows showed the form, so they no longer check it blind: +0.6%, -3.4%, -5.3% now, Mixtral QLoRA at "
        "micro-batch 8 +4.2% (+11.8% before), Mistral-7B QLoRA at 4,096 -3.4% (-11.0%). The former QLoRA allowance "
        "(1.21-1.29x, from the former random init that built the bf16 model on the GPU) was removed on 2026-12-02. "
        "StarCoder2's LoRA (+22.8% before, +6.2% now) was its allocated miss (+15.5%) carried over; the Phi and "
        "StarCoder2 float8 rows of 2026-12-05 (+29% to +61% before, +4.3% to +7.2% now) carried theirs (peak "
        "allocated, above)."
    ),
}


@dataclass(frozen=True)
class Result:
    name: str
    rows: int
    """Rows (or workloads) the target was assessed on."""
    result: str
    """met | missed | not assessed."""
    worst: str
    misses: tuple[str, ...]


def _check(name: str, items: list[tuple[str, float | None]], tol: float) -> Result:
    scored = [(label, err) for label, err in items if err is not None]
    if not scored:
        return Result(name, 0, "not assessed", "-", ())
    label, err = max(scored, key=lambda it: (abs(it[1]), it[0]))
    misses = tuple(f"{lab} ({e:+.1f}%)" for lab, e in scored if abs(e) > tol)
    return Result(name, len(scored), "missed" if misses else "met", f"{err:+.1f}% ({label})", misses)


def judge(mem: list, tput: list, recs: list) -> list[Result]:
    """mem: (row, estimate, alloc error %, reserved error %); tput: (row, estimate, error %); recs: Verdicts."""
    # A pick that ran out of memory or failed is as bad as it gets; one not measured (or not made: the reference
    # topology lacks that many GPUs) cannot be judged.
    worst = {"oom": 100.0, "error": 100.0}
    regrets = [
        (v.group, v.regret_pct if v.status == "ok" else worst[v.status])
        for v in recs
        if v.fastest_tps and v.status in ("ok", *worst)
    ]
    return [
        _check(TARGETS[0], [(r.label, ea) for r, _, ea, _ in mem], ALLOC_TOL),
        _check(TARGETS[1], [(r.label, er) for r, _, _, er in mem], RESERVED_TOL),
        _check(TARGETS[2], [(r.label, et) for r, _, et in tput], TPS_TOL),
        _check(TARGETS[3], regrets, REGRET_TOL),
    ]


def judge_validation(mem: list, tput: list) -> list[Result]:
    """The held-out rows' targets (issues 17 and 18): allocated 5%, reserved 10%, tokens/s 10%."""
    names = (TARGETS[0], TARGETS[1], f"tokens/s within {VALIDATION_TPS_TOL:.0f}%")
    return [
        _check(names[0], [(r.label, ea) for r, _, ea, _ in mem], ALLOC_TOL),
        _check(names[1], [(r.label, er) for r, _, _, er in mem], RESERVED_TOL),
        _check(names[2], [(r.label, et) for r, _, et in tput], VALIDATION_TPS_TOL),
    ]


def explain(t: Result, why_missed: dict[str, str | tuple[str, ...]] = WHY_MISSED) -> list[str]:
    """The missed target's bullet; a tuple of reasons is its lead sentence and one sub-bullet per cause."""
    why = why_missed.get(t.name, "Not explained yet: compare the breakdown of these rows with the measurement.")
    lead, *causes = (why,) if isinstance(why, str) else why
    return [f"- **{t.name}: missed** on {'; '.join(t.misses)}. {lead}", *(f"  - {c}" for c in causes)]
