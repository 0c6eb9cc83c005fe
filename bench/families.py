"""Issue 26, item 6: the model families beyond Mistral on one H200, as validation rows (bench/holdout.py: never fitted).

Each cell runs `train.py --init random` on a generator preset's architecture (tests/tiny_model.py preset), planned by
`python -m generator plan` with the cell's levers as every sweep cell is, on documents that fill the sequence (`fill`,
the issue's 4,200-9,000-token documents being longer than most of its sequences). What each family adds:
Llama-3-8B a 128k vocabulary (logits and lm_head), Qwen2.5-7B attention biases and a 152k vocabulary, Llama-2-13B
40 layers of full multi-head attention (no GQA), Mixtral-8x7B the experts: QLoRA on all 32 layers (the layer-by-layer
random init, training/qlora.py), LoRA cut to 8 layers and a full fine-tune cut to 4 (its fp32 experts cast to bf16 per
forward, training/moe.py), the cuts being what fits one GPU.

Order: by what a row tells that no other does (FAMILY_CELLS is run top down under the call's budget):
1. Mixtral QLoRA, 32 layers: the issue's out-of-memory load, and the NF4 experts' step time.
2. Mixtral cut to 4 layers, full: the fp32-experts trap (measured 10.8x slower than predicted before the cast).
3. Llama-3-8B LoRA s8192 in bf16 with Liger: the runner-up of the plan's fp8 pick (PICK_PAIRS), the 128k vocabulary.
4. Mixtral cut to 8 layers, LoRA, bf16 without Liger: router, dispatch and expert activations in memory.
5. Llama-3-8B QLoRA s8192: the issue's -18% allocated.
6. Qwen2.5-7B LoRA s8192 and 7. Llama-2-13B LoRA s4096 (bf16, Liger): two more families' memory and time.
8. Llama-3-8B LoRA s8192 in fp8: the plan's pick against 3 (fp8's compile of a new shape, ~90 s, makes it late).
9. Qwen2.5-7B full s4096 (bf16, Liger, micro-batch 8, checkpointing): a full fine-tune beyond Mistral.
Then, for a later call: Mixtral cut to 4 layers in fp8 (the issue's 10.8x row: compiled layers, the experts' bf16 cast
keeping them on grouped_mm), the fp8 picks of 6 and 7 and of 9, Mixtral QLoRA at the plan's micro-batch 8, Mixtral cut
to 8 layers in fp8 and with Liger's non-expert kernels, and SDPA against flex on Llama-3-8B.
"""

from __future__ import annotations

from dataclasses import replace

from bench.sweep_cell import Cell


def _family(model, method, seq, mb, ckpt, liger, precision="bf16", layers=None, attention="sdpa") -> Cell:
    base = Cell("train.py", "ddp", method, seq, mb, ckpt, attention, "fill", liger=liger, precision=precision)
    return replace(base, model=model, layers=layers)


MIXTRAL_QLORA = _family("mixtral-8x7b", "qlora", 4096, 1, True, False)
MIXTRAL_FULL_L4 = _family("mixtral-8x7b", "full", 4096, 2, True, False, layers=4)
LLAMA3_LORA_BF16 = _family("llama-3-8b", "lora", 8192, 2, False, True)
MIXTRAL_LORA_L8 = _family("mixtral-8x7b", "lora", 4096, 4, False, False, layers=8)
LLAMA3_QLORA = _family("llama-3-8b", "qlora", 8192, 1, False, True)
QWEN_LORA_BF16 = _family("qwen2.5-7b", "lora", 8192, 2, False, True)
LLAMA2_LORA_BF16 = _family("llama-2-13b", "lora", 4096, 2, False, True)
LLAMA3_LORA_FP8 = replace(LLAMA3_LORA_BF16, precision="fp8")
QWEN_FULL_BF16 = _family("qwen2.5-7b", "full", 4096, 8, True, True)

QWEN_LORA_FP8 = replace(QWEN_LORA_BF16, precision="fp8")
LLAMA2_LORA_FP8 = replace(LLAMA2_LORA_BF16, precision="fp8")

LATER = (
    replace(MIXTRAL_FULL_L4, precision="fp8"),  # the issue's 10.8x row, now with the experts' bf16 cast (compiled)
    QWEN_LORA_FP8,
    replace(MIXTRAL_QLORA, micro_batch=8),  # the plan's own pick for Mixtral QLoRA s4096 on one H200 (~130 s)
    LLAMA2_LORA_FP8,
    replace(QWEN_FULL_BF16, precision="fp8"),
    replace(MIXTRAL_LORA_L8, precision="fp8"),
    replace(MIXTRAL_LORA_L8, liger=True),
    replace(LLAMA3_LORA_BF16, attention="flex"),
)

# Short steps, where the host's time to issue the kernels, not the GPU's, sets the pace (2026-12-02's profile of a
# 2,048-token Mistral LoRA step: 139 ms of kernels in 224 ms): lengths and models no host row was checked on, for
# the probe's per-layer and per-step host rows (Liger's among them).
SHORT_STEPS = (
    _family("llama-3-8b", "lora", 2048, 1, False, True),
    _family("qwen2.5-7b", "lora", 1024, 2, False, False),
)


# The same kind of step timed over 40 steps on one machine between two runs of the probe's host rows (which a
# results file then carries as `host`, bench/calibration.py): a host's speed differs by up to 36% between leases of
# one H200 kind, so a host-bound row is predicted with its own machine's host rows, as a user who probes theirs is.
# Models, lengths and Liger settings the short-step rows above did not have, and Llama-2-13B's 40 layers.
def _timed_long(*cells: Cell) -> tuple[Cell, ...]:
    return tuple(replace(c, steps=40) for c in cells)


HOST_PAIRED = _timed_long(
    _family("llama-2-13b", "lora", 1024, 1, False, False),
    _family("llama-3-8b", "lora", 2048, 1, False, False),
    _family("mistral-7b", "lora", 2048, 1, False, True),
    _family("qwen2.5-7b", "lora", 1024, 2, False, True),
    _family("mistral-7b", "full", 1024, 1, False, False),
)

# Chosen after the first host-paired call, where the probe then changed (warm calls, generator/probe/
# compute_host.py _interleaved): the held-out check of that change, on models, lengths and levers it had not met.
HOST_PAIRED_B = _timed_long(
    _family("llama-3-8b", "lora", 1024, 2, False, True),
    _family("mistral-7b", "lora", 1024, 1, False, False),
    _family("llama-2-13b", "lora", 2048, 1, False, True),
    _family("qwen2.5-7b", "lora", 2048, 1, False, False),
)

# Qwen2.5-7B LoRA read 283 ms a step at 2,048 x 1 (HOST_PAIRED_B, +52%) where its 1,024 x 2 twin with Liger read 199
# on the first machine: the same tokens and levers back to back on one machine, with that machine's probe, say whether
# it is the machine or the model.
QWEN_PAIR = _timed_long(_family("qwen2.5-7b", "lora", 1024, 2, False, False))

# Chosen on 2026-12-03 (fifth session) before any was run: a model, method and length no row had, each predicted by
# the shipped table and by `probe --compute --quick` run just before them on the same machine, its holes completed
# from the shipped table (generator/estimate/compute_complete.py): Qwen2.5-7B QLoRA (attention biases in NF4, the
# 152k vocabulary), Llama-2-13B QLoRA at micro-batch 8, Llama-2-7B (no GQA) fully fine-tuned with Liger.
UNSEEN = (
    _family("qwen2.5-7b", "qlora", 4096, 4, False, False),
    _family("llama-2-13b", "qlora", 2048, 8, True, False),
    _family("llama-2-7b", "full", 2048, 4, True, True),
    # the first, which the plan said does not fit (run forced, it ran out of memory), with checkpointing
    _family("qwen2.5-7b", "qlora", 4096, 4, True, False),
)

# Chosen on 2026-12-03 (sixth session) before any was run, each between two runs of the default probe (about a
# minute) on its machine, so a row is priced by the file a user would have: Llama-2-7B LoRA (no GQA) with Liger,
# Mixtral cut to 8 layers at 8,192 x 2 (a length no MoE row had), Llama-3-8B QLoRA with checkpointing (QLoRA's reserved
# memory on a third family) and Qwen2.5-7B LoRA at 16,384 with flex and checkpointing (its 28/4 heads, a long row).
UNSEEN_B = (
    _family("llama-2-7b", "lora", 4096, 2, False, True),
    _family("mixtral-8x7b", "lora", 8192, 2, False, False, layers=8),
    _family("llama-3-8b", "qlora", 4096, 4, True, False),
    _family("qwen2.5-7b", "lora", 16384, 1, True, True, attention="flex"),
)

# Chosen on 2026-12-03 (sixth session) before any was run, after the reserved holes beside the plain loss became
# MLP_HOLES (generator/estimate/core.py), whose form three QLoRA rows showed: checkpointed rows with the plain loss on
# lengths and models that rule has not met, for a blind check of it.
UNSEEN_C = (
    _family("llama-3-8b", "qlora", 8192, 2, True, False),
    _family("qwen2.5-7b", "lora", 4096, 4, True, False),
    _family("llama-2-13b", "lora", 4096, 2, True, False),
)

# Chosen on 2026-12-04 before any was run: models no preset holds (bench/models, their published config.json), so
# neither the planner's presets nor the shipped probe table has their shapes: each is priced from GEMMs, attention
# and passes the probe timed at other widths. Mistral-NeMo-12B (head_dim 128 below hidden/heads = 160, a 131k
# vocabulary, 40 layers), Llama-3.2-3B (tied embeddings, 24/8 heads at 3,072 wide), Qwen2.5-14B (48 layers, 40/8
# heads, attention biases, 13,824-wide MLP); LoRA, QLoRA and a full fine-tune, with and without Liger.
UNSEEN_MODELS = (
    _family("mistral-nemo-12b", "lora", 4096, 2, False, True),
    _family("llama-3.2-3b", "full", 4096, 4, True, True),
    _family("qwen2.5-14b", "lora", 2048, 2, False, False),
    _family("mistral-nemo-12b", "qlora", 8192, 1, True, False),
    _family("qwen2.5-14b", "qlora", 4096, 2, True, True),
)

# The plan's own pick for the Qwen2.5-14B LoRA cell above: float8, predicted 2.03x its bf16 twin (12,212 against
# 6,072 tokens/s, both predicted before either ran), more than any float8 gain measured on a preset (1.46-1.53x).
QWEN14_LORA_FP8 = replace(UNSEEN_MODELS[2], precision="fp8")
# and for the Llama-3.2-3B full fine-tune: float8, predicted 1.30x its bf16 twin before either ran.
LLAMA32_FULL_FP8 = replace(UNSEEN_MODELS[1], precision="fp8")

# Chosen on 2026-12-04 (second session) before any was run, after the probe learned to time MoE layers compiled as
# train.py compiles them (generator/probe/compute_layers.py; Mixtral cut to 8 layers, LoRA in float8, read -14% priced
# from the eager row): compiled MoE rows on a lever, a length and a method that row had not met. Mixtral cut to 8
# layers with compiled bf16 layers (no float8: compile's share alone), in float8 at 8,192 x 2, and cut to 4 layers,
# fully fine-tuned with compiled bf16 layers (fp32 masters, the experts cast per forward inside the compiled layer).
MOE_COMPILED = (
    replace(MIXTRAL_LORA_L8, compiled=True),
    replace(UNSEEN_B[1], precision="fp8"),
    replace(MIXTRAL_FULL_L4, compiled=True),
)

# Chosen on 2026-12-04 (second session) before any was run: the plan's picks on models no preset holds, each against
# its runner-up. Mistral-NeMo-12B LoRA in float8 against the bf16 Liger row measured in UNSEEN_MODELS; Liger on
# Qwen2.5-14B LoRA against the plain row there; Qwen3-8B (a family no row had: q/k RMSNorm per head, sized on the meta
# device as any architecture the planner does not know), LoRA in float8 against bf16.
NEMO_LORA_FP8 = replace(UNSEEN_MODELS[0], precision="fp8")
QWEN14_LORA_LIGER = replace(UNSEEN_MODELS[2], liger=True)
QWEN3_LORA = _family("qwen3-8b", "lora", 4096, 2, False, False)
QWEN3_LORA_FP8 = replace(QWEN3_LORA, precision="fp8")
UNSEEN_PICKS = (NEMO_LORA_FP8, QWEN14_LORA_LIGER, QWEN3_LORA_FP8, QWEN3_LORA)

# Chosen on 2026-12-04 (second session) before any was run, after two terms were written from sources and a profile,
# and before the probe's optimizer rows were measured: full fine-tunes on shapes no row had, for the optimizer step's
# passes (clip_grad_norm_ and fused AdamW at their own measured rates: what Mixtral cut to 4 layers, profiled, spent
# outside its layers; tried and dropped, bench/README.md), and Qwen3-8B at another shape, for what its q_norm and
# k_norm keep (generator/estimate/layer_saved.py head_norm_bytes, written after Qwen3-8B LoRA read -6.1% allocated).
HELD_OUT_TERMS = (
    _family("mixtral-8x7b", "full", 8192, 1, True, False, layers=4),
    _family("llama-2-7b", "full", 4096, 2, True, False),
    _family("qwen3-8b", "lora", 2048, 3, False, False),
)

# Chosen on 2026-12-04 (second session) before either ran: an MoE no row had, named by its published config
# (bench/models/olmoe-1b-7b.json: 64 experts of 1,024, top-8, q/k norms, 16 layers), its decoder layers timed by the
# probe's code in the same call (bench/scripts/moe_layers.py, eager and compiled) as a user who probes first; LoRA in
# bf16 and its float8 twin.
OLMOE_LORA = _family("olmoe-1b-7b", "lora", 4096, 4, False, False)
OLMOE_LORA_FP8 = replace(OLMOE_LORA, precision="fp8")

# Chosen on 2026-12-04 (third session) before any was run: train.py's --compile-layers against its eager twin in bf16
# on dense models, each pair in one call, before the planner takes compiled layers as a lever of its own (bench/README
# next call 5). Predicted on the shipped table: Llama-3-8B LoRA at 2,048 x 1 (host-bound eager) 1.45x, Qwen3-8B LoRA
# at 4,096 x 2 1.63x, Mistral-7B fully fine-tuned at 4,096 x 2 with checkpointing 1.15x.
COMPILE_PAIRS: tuple[tuple[Cell, Cell], ...] = tuple(
    (replace(c, compiled=True), c)
    for c in (
        _family("llama-3-8b", "lora", 2048, 1, False, False),
        QWEN3_LORA,
        _family("mistral-7b", "full", 4096, 2, True, False),
    )
)

# Chosen on 2026-12-04 (third session) after the first pairs and once the planner took compiled layers on its own
# (generator/plan/compile_lever.py), before any ran: its pick on two more LoRA shapes (Llama-2-13B at 4,096 x 1,
# predicted 1.40x; Qwen2.5-7B at 4,096 x 2, 1.39x) and a pair it calls a tie, so leaves eager (Llama-3.2-3B fully
# fine-tuned with Liger, whose kernels already fuse what compile would: predicted 1.00x).
COMPILE_PAIRS_B: tuple[tuple[Cell, Cell], ...] = tuple(
    (replace(c, compiled=True), c)
    for c in (
        _family("llama-2-13b", "lora", 4096, 1, False, False),
        _family("qwen2.5-7b", "lora", 4096, 2, False, False),
        UNSEEN_MODELS[1],
    )
)

# Chosen on 2026-12-04 (third session) after COMPILE_PAIRS_B ran (both picks met, predicted within 3.1%), before
# either ran: the compiled pick on a model no preset holds (Mistral-NeMo-12B LoRA at 4,096 x 2, predicted 1.43x) and on
# the step whose eager run read +52% on one machine (Qwen2.5-7B LoRA at 2,048 x 1, host-bound eager; predicted 1.41x).
COMPILE_PAIRS_C: tuple[tuple[Cell, Cell], ...] = tuple(
    (replace(c, compiled=True), c)
    for c in (
        _family("mistral-nemo-12b", "lora", 4096, 2, False, False),
        _family("qwen2.5-7b", "lora", 2048, 1, False, False),
    )
)

# Chosen on 2026-12-04 (third session) before any ran: a second MoE named only by its config, with 128 experts of 768
# and top-8 routing (bench/models/qwen3-30b-a3b.json: Qwen3-30B-A3B, q/k norms, 48 layers), its decoder layers timed by
# the probe's code right before its cells on the same machine (bench/scripts/moe_layers.py), as a user who probes
# first. LoRA at 4,096 x 1 (what fits without checkpointing) in bf16, the plan's float8 pick and compiled bf16 layers.
QWEN3_MOE_LORA = _family("qwen3-30b-a3b", "lora", 4096, 1, False, False)
QWEN3_MOE_LORA_FP8 = replace(QWEN3_MOE_LORA, precision="fp8")
QWEN3_MOE_LORA_COMPILED = replace(QWEN3_MOE_LORA, compiled=True)

# Chosen on 2026-12-04 (third session) after those three read +8% to +10% from the 8,192-token layer rows, and before
# the probe timed the layers at 4,096 tokens as well (compute_grid.LAYER_SIZES_FULL): another length and lever on each
# side of that size. Predicted from the 8,192-token rows alone: 20,010 and 11,979 tokens/s.
QWEN3_MOE_B = (
    _family("qwen3-30b-a3b", "lora", 2048, 2, False, False, precision="fp8"),
    replace(_family("qwen3-30b-a3b", "lora", 8192, 1, True, False), compiled=True),
)

# Chosen on 2026-12-04 (fourth session) before any ran, with the host rows of a model's own layer (`probe --compute
# --model`, bench/scripts/qlora_host.py), for the call that measures those rows on the same machine first
# (bench/README.md Next 1 and 3; `bench/sweep.py --host-from`): Mixtral QLoRA between its launch-bound micro-batch 1
# and its GPU-bound 8, and two Qwen3-30B-A3B steps neither earlier call ran (compiled bf16 at 2,048 x 2, beside the
# float8 cell that read +43.9% there; float8 at 1,024 x 4, host-heavier still). Predicted with the shipped table,
# whose host rows are the Mistral layer's: 4,208, 4,394, 20,010 and 20,010 tokens/s (the Qwen3 pair host-bound).
NEXT_HOST = (
    replace(MIXTRAL_QLORA, micro_batch=2),
    replace(MIXTRAL_QLORA, micro_batch=4),
    replace(QWEN3_MOE_B[0], precision="bf16", compiled=True),
    replace(QWEN3_MOE_B[0], seq_len=1024, micro_batch=4),
)

# Chosen on 2026-12-04 (fifth session) before any was run: an MoE with a gated shared expert beside its routed ones
# (bench/models/qwen1.5-moe-a2.7b.json: Qwen1.5-MoE-A2.7B, 60 experts of 1,408 at top-4, a shared expert of 5,632 in
# every layer), sized on the meta device with its decoder's own Linears (ModelSpec.layer_linears), for which no probe
# row exists: the plan's pick (LoRA in float8 at 4,096 x 4, no checkpointing) and eager bf16 at 4,096 x 2 (at x 4 bf16
# does not fit: 144.7 GB predicted, so the two are not a pick pair).
# Predicted with the shipped table: 28,041 and 21,189 tokens/s, 130.9 and 88.3 GB reserved. Before the shared expert
# was priced (same session) the operators held 35% fewer of its FLOPs per token.
QWEN15_MOE = (
    _family("qwen1.5-moe-a2.7b", "lora", 4096, 4, False, False, precision="fp8"),
    _family("qwen1.5-moe-a2.7b", "lora", 4096, 2, False, False),
)

# Chosen on 2026-12-05 before any ran (no GPU was lent that day): a GELU-MLP family, whose activations the llama
# formula had priced at 1.8x what its layer keeps and the meta count of its own layer now prices
# (generator/model/saved_count.py; bench/models/starcoder2-default.json, transformers' default StarCoder2 shape): the
# plan's picks on one H200 at 4,096 tokens, which the count doubled (full micro-batch 2 to 4, LoRA 4 to 8). They settle
# whether the count's memory holds on a GPU for a layer that is not the llama one.
STARCODER2 = (
    _family("starcoder2-default", "full", 4096, 4, False, False),
    _family("starcoder2-default", "lora", 4096, 8, False, False),
)

# Chosen on 2026-12-05 (ninth session) before any ran, after the count took CUDA's autocast policy (layer_norm, pow and
# sum in fp32: generator/model/cuda_autocast.py): two more LayerNorm families at transformers' default configs
# (bench/models/phi-default.json: Phi's gelu_new MLP, whose pow chain autocast runs in fp32, a partial rotary and a
# parallel block; bench/models/falcon-default.json: Falcon-7B's shape, multi-query, a parallel block, no biases), the
# plan's own picks at their 2,048-token limit on one H200 (float8, all-linear LoRA as the plan prints it), their bf16
# twins where the plan's pick is float8 (PICK_PAIRS), and StarCoder2's LoRA as the plan now prints it (float8 at 4,096
# x 4, --lora-targets all-linear: its 2026-12-05 row ran train.py's default, the llama names: q/k/v/o_proj alone).
# Predicted in bench/results/predicted/families-2026-12-05-b.json before the call.
# The twins were eager bf16 until 2026-12-05's tenth session (still unrun): the plan's bf16 pick compiles the layers
# there (--precision bf16 prints --compile-layers for both), so that is the runner-up float8 is measured against.
PHI = _family("phi-default", "full", 2048, 8, False, False, precision="fp8")
PHI_BF16 = replace(_family("phi-default", "full", 2048, 8, False, False), compiled=True)
PHI_LORA = replace(_family("phi-default", "lora", 2048, 8, False, False, precision="fp8"), lora_targets="all-linear")
FALCON_LORA = replace(
    _family("falcon-default", "lora", 2048, 8, False, False, precision="fp8"), lora_targets="all-linear"
)
FALCON_LORA_BF16 = replace(FALCON_LORA, precision="bf16", compiled=True)
FALCON = _family("falcon-default", "full", 2048, 2, False, False, precision="fp8")
STARCODER2_ALL_LINEAR = replace(STARCODER2[1], micro_batch=4, precision="fp8", lora_targets="all-linear")
LAYERNORM_FAMILIES = (PHI, PHI_BF16, PHI_LORA, FALCON_LORA, FALCON_LORA_BF16, FALCON, STARCODER2_ALL_LINEAR)
# Chosen on 2026-12-05 (thirteenth session) after both Falcon LoRA cells above ran out of memory at micro-batch 8
# where the plan predicted 86 GB allocated (h200-x1-families-layernorm-2026-12-05): the same LoRA at micro-batch 2,
# compiled as the plan's bf16 pick and eager, for the peak Falcon's layer really reaches; predicted before the call
# (results/predicted/falcon-memory-2026-12-05.json).
FALCON_MEMORY = (replace(FALCON_LORA_BF16, micro_batch=2), replace(FALCON_LORA_BF16, micro_batch=2, compiled=False))

# Chosen on 2026-12-05 (tenth session) before any ran: a head width no attention row has (bench/models/gemma2-default
# .json, transformers' default Gemma-2: Gemma-2-2B's shape, 8/4 heads 256 wide, logit softcapping, so flex: the class
# has no SDPA path), LoRA at 8,192 x 2, the plan's float8 pick and its bf16 runner-up (compiled layers), priced from
# the 128-wide rows (the plan says so). With `probe --compute --model` of it on the same machine (bench/README Next 7)
# the same rows are priced again from its own 256-wide rows.
GEMMA2_LORA = _family("gemma2-default", "lora", 8192, 2, False, False, precision="fp8", attention="flex")
GEMMA2_LORA_BF16 = replace(GEMMA2_LORA, precision="bf16", compiled=True)
HEAD_WIDTH = (GEMMA2_LORA, GEMMA2_LORA_BF16)

# Chosen on 2026-12-05 (fifteenth session) before any ran, after the float8 count (generator/model/compiled_count.py)
# was fixed on the CPU on Phi's and StarCoder2's float8 rows, which no longer check it blind: the plan's own pick for
# StarCoder2 (transformers' default config) fully fine-tuned at 4,096 (float8, micro-batch 8, no checkpointing, 120.7
# GB allocated of 135.1 usable: the count decides whether it fits) and its bf16 runner-up as the plan prints it
# (compiled layers, micro-batch 4). Predicted in bench/results/predicted/float8-layernorm-2026-12-05.json.
STARCODER2_FULL_FP8 = _family("starcoder2-default", "full", 4096, 8, False, False, precision="fp8")
STARCODER2_FULL_BF16 = replace(STARCODER2_FULL_FP8, micro_batch=4, precision="bf16", compiled=True)
FLOAT8_LAYERNORM = (STARCODER2_FULL_FP8, STARCODER2_FULL_BF16)

# Chosen on 2026-12-06 (twenty-second session), for an H100 when no H200 can be started (the whole model needs 92
# GB): Qwen3-30B-A3B cut to 24 layers, LoRA in float8 at 2,048 x 2 and 4,096 x 1, the same tokens a step. Whole, on
# H200s, 2,048 x 2 ran 0.25-0.29 s a step (+31.6% and +43.9%) and 4,096 x 1 0.23 (+11.6%), though its attention is
# the cheaper; the cut pair, plain and under BENCH_PROFILE, says whether the gap is in the layers and where.
QWEN3_MOE_CUT = tuple(replace(c, layers=24) for c in (QWEN3_MOE_B[0], QWEN3_MOE_LORA_FP8))

# Chosen on 2026-12-07 (twenty-sixth session), for an H100 when no H200 can be started (micro-batch 2 needs 79.6 GB):
# Qwen1.5-MoE LoRA, eager bf16, at 4,096 x 1, beside its decoder layers' own rows timed on the same machine
# (bench/scripts/moe_layers.py) and once under BENCH_PROFILE. On an H200 its step ran 12-14% slower than its own layer
# rows price it; the profile's GPU-busy time against those rows says whether that is GPU work outside the rows or
# time the host spends issuing an eager 60-expert layer.
QWEN15_MOE_H100 = (replace(QWEN15_MOE[1], micro_batch=1),)

# Chosen on 2026-12-06 (twenty-second session) before any ran, after the step's tail (clip and the optimizer's update,
# generator/estimate/step_traffic.py tail_bytes) stopped hiding under a host-bound step's issuing: a full fine-tune
# small enough to be host-bound and to fit 80 GB (Llama-3.2-3B, fp32 weights, eager, no checkpointing) at 1,024 x 1 and
# 2,048 x 1, where the tail is about a quarter of the step. Predicted before the call with and without the change
# (results/predicted/tail-blind-2026-12-06.json).
TAIL_BLIND = (
    _family("llama-3.2-3b", "full", 1024, 1, False, False),
    _family("llama-3.2-3b", "full", 2048, 1, False, False),
)

# Chosen on 2026-12-07 (twenty-eighth session) before any ran, after compiled_adapter_fused moved from one compiled
# Mistral step (1.0, at its bound) to compiled layers timed with and without train.py's adapters (0.81): LoRA steps at
# shapes no row was timed at, whose adapters are priced on top of their compiled layers. Phi's all-linear LoRA compiled
# in bf16 (the plan's bf16 runner-up to PHI_LORA; its layers priced from the operators) and StarCoder2's all-linear
# float8 LoRA at 2,048 x 8 (its layers from its own float8 rows, timed at 4,096 x 2). Predicted before the call
# (results/predicted/adapters-in-rows-2026-12-07.json).
PHI_LORA_BF16 = replace(PHI_LORA, precision="bf16", compiled=True)
ADAPTERS_IN_ROWS = (PHI_LORA_BF16, replace(STARCODER2_ALL_LINEAR, seq_len=2048, micro_batch=8))

# Chosen on 2026-12-07 (twenty-ninth session) before any ran, after the layers' elementwise passes moved from the
# probe's copy rate to its widening copy's (ComputeTable.passes_gbps), which moves only cards other than the H200:
# eager steps priced from the operators, GPU-bound and under 80 GB, where an H100's prediction moves most (6-7%):
# Llama-3-8B LoRA at 4,096 x 1 and Llama-3.2-3B fully fine-tuned at 4,096 x 1. Predicted for an H100 before the
# call with and without the change (results/predicted/passes-h100-2026-12-07.json and -former.json).
PASSES_H100 = (
    _family("llama-3-8b", "lora", 4096, 1, False, False),
    _family("llama-3.2-3b", "full", 4096, 1, False, False),
)
# The second did not run on the H100 (its reserved 76.63 GB predicted over the sweep's 76.37 usable there); in its
# place, chosen before it ran: Qwen2.5-7B LoRA at 4,096 x 1 (results/predicted/passes-h100-2026-12-07-b.json).
PASSES_H100_B = (_family("qwen2.5-7b", "lora", 4096, 1, False, False),)
# And a full fine-tune that fits there, chosen after those two ran and before it did: Llama-3.2-3B at 4,096 x 2 with
# checkpointing (58 GB; results/predicted/passes-h100-2026-12-07-c.json).
PASSES_H100_C = (_family("llama-3.2-3b", "full", 4096, 2, True, False),)
# It ran on an H100 at 12,802 tokens/s against 14,288 (+11.6%) and 62.94 GB allocated against 58.38 (-7.2%); the same
# cell on the report's H200, predicted before it ran there (results/predicted/passes-c-h200-2026-12-07.json), says
# which of the two misses is the card's. Same cell, so no new entry in FAMILY_CELLS.
# Chosen after that H100 run and its memory history (thirtieth session), before it ran, for an H100: the same model
# fully fine-tuned at 4,096 x 3 checkpointed, where the previous step's logits held through the loss are the largest
# share yet (results/predicted/kept-logits-h100-2026-12-07.json).
KEPT_LOGITS_H100 = (_family("llama-3.2-3b", "full", 4096, 3, True, False),)
# Chosen on 2026-12-07 (thirty-first session) before either ran, for whichever card the call gets: PASSES_H100_C's
# cell with Liger and with compiled layers, each run plain and profiled beside it, so the kernels a Liger step and a
# compiled step run can be priced from inside a step as the eager one's were (bench/README Next 4: the GEMMs' in-step
# rate needs in-step prices for Liger's kernels and the compiled passes too). Predicted before the call
# (results/predicted/levers-in-step-2026-12-07.json, both cards).
LEVERS_IN_STEP = (
    _family("llama-3.2-3b", "full", 4096, 2, True, True),
    replace(PASSES_H100_C[0], compiled=True),
)
# Chosen on 2026-12-07 (thirty-first session), after LEVERS_IN_STEP's compiled row read +5.4% allocated and before
# either ran: a compiled, checkpointed layer's weight casts are ops of its graph, not autocast's cache, so none is
# alive at the loss (generator/estimate/activations.py). A model no file holds (bench/models/qwen2.5-3b.json: a
# 152k vocabulary, tied, 36 layers of 2,048), fully fine-tuned at 4,096 x 2 checkpointed, compiled and eager: the
# change moves the compiled prediction only, and the eager one is a blind row of the passes' pricing beside it.
# Predicted before the call (results/predicted/cast-blind-2026-12-07.json).
CAST_BLIND = (
    replace(_family("qwen2.5-3b", "full", 4096, 2, True, False), compiled=True),
    _family("qwen2.5-3b", "full", 4096, 2, True, False),
)

FAMILY_CELLS: tuple[Cell, ...] = (
    MIXTRAL_QLORA,
    MIXTRAL_FULL_L4,
    LLAMA3_LORA_BF16,
    MIXTRAL_LORA_L8,
    LLAMA3_QLORA,
    QWEN_LORA_BF16,
    LLAMA2_LORA_BF16,
    LLAMA3_LORA_FP8,
    QWEN_FULL_BF16,
    *LATER,
    *SHORT_STEPS,
    *HOST_PAIRED,
    *HOST_PAIRED_B,
    *QWEN_PAIR,
    *UNSEEN,
    *UNSEEN_B,
    *UNSEEN_C,
    *UNSEEN_MODELS,
    QWEN14_LORA_FP8,
    LLAMA32_FULL_FP8,
    *MOE_COMPILED,
    *UNSEEN_PICKS,
    *HELD_OUT_TERMS,
    OLMOE_LORA,
    OLMOE_LORA_FP8,
    *(c for pair in COMPILE_PAIRS for c in pair if c != QWEN3_LORA),
    *(c for pair in COMPILE_PAIRS_B for c in pair if c != UNSEEN_MODELS[1]),
    *(c for pair in COMPILE_PAIRS_C for c in pair),
    QWEN3_MOE_LORA_FP8,
    QWEN3_MOE_LORA_COMPILED,
    QWEN3_MOE_LORA,
    *QWEN3_MOE_B,
    *NEXT_HOST,
    *QWEN15_MOE,
    *STARCODER2,
    *LAYERNORM_FAMILIES,
    *FALCON_MEMORY,
    *HEAD_WIDTH,
    *FLOAT8_LAYERNORM,
    *QWEN3_MOE_CUT,
    *TAIL_BLIND,
    *QWEN15_MOE_H100,
    *ADAPTERS_IN_ROWS,
    *PASSES_H100,
    *PASSES_H100_B,
    *PASSES_H100_C,
    *KEPT_LOGITS_H100,
    *LEVERS_IN_STEP,
    *CAST_BLIND,
)

# (the plan's default pick, its runner-up): one lever apart, measured in the same call where the budget allows.
# The plan's pick on one H200 with Liger and torchao installed (2026-12-01): DDP, micro-batch 2, no checkpointing,
# SDPA, Liger, fp8 for LoRA at s8192 on Llama-3-8B and Qwen2.5-7B and at s4096 on Llama-2-13B.
PICK_PAIRS: tuple[tuple[Cell, Cell], ...] = (
    (LLAMA3_LORA_FP8, LLAMA3_LORA_BF16),
    (QWEN_LORA_FP8, QWEN_LORA_BF16),
    (LLAMA2_LORA_FP8, LLAMA2_LORA_BF16),
    (QWEN14_LORA_FP8, UNSEEN_MODELS[2]),
    (LLAMA32_FULL_FP8, UNSEEN_MODELS[1]),
    (NEMO_LORA_FP8, UNSEEN_MODELS[0]),
    (QWEN14_LORA_LIGER, UNSEEN_MODELS[2]),
    (QWEN3_LORA_FP8, QWEN3_LORA),
    (OLMOE_LORA_FP8, OLMOE_LORA),
    (PHI, PHI_BF16),
    (FALCON_LORA, FALCON_LORA_BF16),
    (GEMMA2_LORA, GEMMA2_LORA_BF16),
    (STARCODER2_FULL_FP8, STARCODER2_FULL_BF16),
    *COMPILE_PAIRS,
    *COMPILE_PAIRS_B,
    *COMPILE_PAIRS_C,
    (QWEN3_MOE_LORA_FP8, QWEN3_MOE_LORA),
    (QWEN3_MOE_LORA_COMPILED, QWEN3_MOE_LORA),
    # the plan's float8 pick against its bf16 runner-up as the plan has printed it since 2026-12-05 (compiled layers,
    # generator/plan/precision.py): both measured in one call on 2026-12-04, 0.6% apart
    (QWEN3_MOE_LORA_FP8, QWEN3_MOE_LORA_COMPILED),
)

FIRST_CALL = FAMILY_CELLS[:7]
"""What the first family call's 500 s budget reaches by the sweep's own per-cell expectation (~460 s predicted on one
H200; bench/README.md): the later cells are skipped by the budget and run in the next call."""
