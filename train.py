"""Fine-tune a causal LM (Mistral-7B by default) under any Accelerate config the generator emits.

    accelerate launch --config_file CONFIG.yaml train.py --model mistralai/Mistral-7B-v0.1 \
        --dataset recipes/data/synthetic_instruct.jsonl --method full --seq-len 4096 \
        --micro-batch 1 --global-batch 16 --max-steps 100 --output-dir out/run1

One script for DDP, FSDP2/HSDP and DeepSpeed ZeRO-1/2/3 (+offload); nothing in here names a strategy except to report
it: the parallelism comes from the launch environment, so `Accelerator()` gets no parallelism arguments. It reads top
to bottom (arguments, setup, data, model, the loop, the summary); its parts live in training/. The manual (numerics,
data, checkpoints and preemption, exit codes, metrics, test hooks) is docs/train.md; `train.py --help` lists the flags.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import sys
import time
from pathlib import Path

from generator.catalog.strategies import strategy as strategy_facts
from generator.errors import UserError
from training import hooks, oom, preemption
from training.args import grad_accum_steps, parse_args
from training.checkpoints import (
    check_free_space,
    check_output_dir,
    load_state_kwargs,
    remove_stale_temporaries,
    resume_step,
    save_checkpoint,
)
from training.data import BlockStream, load_rows, mean_tokens, pack_blocks, tokenize_rows
from training.distributed import build_on_gpu, configure_deepspeed, outside_zero_init, strategy_name
from training.errors import EXIT_OUT_OF_MEMORY, EXIT_PREEMPTED, EXIT_USER_ERROR, OutOfMemory
from training.estimates import (
    DDP_GRADIENT_AS_BUCKET_VIEW,
    disk_needed,
    estimator_inputs,
    flops_per_token,
    gpu_peak_tflops,
    predicted_peak_gb,
)
from training.export import export
from training.fit import EXPORT, LOAD, OPTIMIZER, SAVE, STEP, check_fit, plan_request, refusal, visible_gpu
from training.metrics import JsonLog, make_progress, memory_record, print_summary, step_record, summarize
from training.model import (
    add_adapters,
    apply_liger,
    count_params,
    enable_grad_checkpointing,
    load_config_and_tokenizer,
    load_model,
)
from training.parallel import (
    cp_context,
    data_parallel_world,
    describe,
    gradient_ranks,
    model_parallel_sizes,
    shared_batch_ranks,
    tp_load_kwargs,
    unsupported_reason,
    with_shift_labels,
)
from training.parallel import predicted_peak_gb as layout_peak_gb
from training.precision import ao_recipe, check_fp8, compile_layers, config_asks_fp8, fp8_layer_names
from training.process_group import import_group_binders


def lr_factor(step: int, warmup: int, total: int) -> float:
    """transformers' get_cosine_schedule_with_warmup (linear warm-up, then half a cosine to zero), for torch's
    LambdaLR: importing transformers' scheduler imports its Trainer's utilities and with them peft and bitsandbytes,
    1.5-2 s of every process's start (tests/test_train_unit.py checks the two schedules agree)."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))


def train(args: argparse.Namespace) -> int:
    # -- checks that need no torch: a typo fails in a second -----------------------------------------------------------
    out = check_output_dir(args.output_dir)
    if unsupported_reason(args):  # what TP/CP launches cannot take (training/parallel.py)
        raise UserError(unsupported_reason(args))
    grad_accum_steps(args.global_batch, args.micro_batch, data_parallel_world(int(os.environ.get("WORLD_SIZE", "1"))))
    preemption.install()

    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, DistributedType, GradientAccumulationPlugin, set_seed

    # -- the Accelerator: the launch config decides the strategy -------------------------------------------------------
    import_group_binders()  # before the group starts, or the group outlives destroy_process_group (process_group.py)
    use_cuda = torch.cuda.is_available()
    fp8 = args.precision == "fp8" or config_asks_fp8()
    if fp8:  # a machine or method float8 cannot serve fails here, before the model load
        check_fp8(args.method)
    accelerator = Accelerator(
        cpu=not use_cuda,  # without it, torchrun-spawned CPU workers each train alone instead of joining a gloo group
        # fp8: accelerate converts the Linear layers inside prepare, with train.py's filter and config (ao_recipe)
        mixed_precision="fp8" if fp8 else None,
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=1, sync_with_dataloader=False),
        step_scheduler_with_optimizer=False,  # stepped once per optimizer step below, independent of world size
        kwargs_handlers=[DistributedDataParallelKwargs(gradient_as_bucket_view=DDP_GRADIENT_AS_BUCKET_VIEW)]
        + ([ao_recipe(args.fp8_recipe)] if fp8 else []),
    )
    main = accelerator.is_main_process
    world = accelerator.num_processes
    ga = grad_accum_steps(args.global_batch, args.micro_batch, data_parallel_world(world))
    accelerator.gradient_accumulation_steps = ga
    is_ds = accelerator.distributed_type == DistributedType.DEEPSPEED
    is_fsdp = accelerator.distributed_type == DistributedType.FSDP
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" and not is_fsdp and main:
        print("train.py: note: the config asks for FSDP but there is no GPU; running DDP over gloo", flush=True)
    if is_ds:
        configure_deepspeed(accelerator, args, ga)
    strategy = strategy_name(accelerator)

    # -- checkpoint bookkeeping before the model load, so a wrong --resume fails fast ----------------------------------
    if main:
        for stale in remove_stale_temporaries(out):
            print(f"train.py: removed incomplete checkpoint {stale}", flush=True)
    accelerator.wait_for_everyone()
    resume_from, start_step, resume_note = resume_step(args, out, world, strategy)
    if resume_note and main:
        print(f"train.py: {resume_note}", flush=True)

    # -- data before the model: a bad dataset fails in seconds, not after loading 7B -----------------------------------
    config, tok = load_config_and_tokenizer(args)
    with accelerator.main_process_first():
        ids, labels, data_format = tokenize_rows(load_rows(args.dataset), tok, args.seq_len)
    blocks = pack_blocks(ids, labels, args.seq_len, tok.pad_token_id, args.pack)
    doc_tokens = mean_tokens(ids)

    # -- does the plan for exactly this run fit on this GPU? Asked before loading 7B (docs/train.md, "Out of memory") --
    fsdp_ac = is_fsdp and bool(accelerator.state.fsdp_plugin.activation_checkpointing)
    hf_ckpt = args.grad_checkpointing and not fsdp_ac and args.method != "qlora"
    qlora_ckpt = args.method == "qlora" and args.grad_checkpointing  # peft's prepare_model_for_kbit_training does it
    checkpointing = hf_ckpt or fsdp_ac or qlora_ckpt
    spec, workload = estimator_inputs(args, config, ga, checkpointing, accelerator.mixed_precision, doc_tokens)
    t_fit = time.perf_counter()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    request = plan_request(args, strategy, local, max(1, world // local), checkpointing, doc_tokens, fp8)
    fit = check_fit(spec, request, world, visible_gpu())  # None without a GPU: no check
    fit_s = time.perf_counter() - t_fit
    if fit is not None and not fit.fits:
        if args.fit_check:
            raise OutOfMemory(refusal(fit), rank_local=False)
        if main:
            print(f"train.py: warning: {refusal(fit).split('. ')[0]}; running it anyway (--no-fit-check)", flush=True)
    oom.configure(fit, accelerator.process_index, world)

    # -- the model -----------------------------------------------------------------------------------------------------
    oom.enter(LOAD)  # from here on an out-of-memory is explained in one line, naming its phase (training/oom.py)
    set_seed(args.seed)  # identical random init on every rank
    on_gpu = use_cuda and build_on_gpu(args, config, strategy, is_fsdp and accelerator.state.fsdp_plugin)
    # A ZeRO-3 random init is built whole, as every other strategy builds it (see outside_zero_init).
    whole = is_ds and strategy_facts(strategy).zero_stage == 3 and on_gpu
    with outside_zero_init(accelerator) if whole else contextlib.nullcontext():
        model = load_model(
            args, config, use_cuda, str(accelerator.device) if on_gpu else "cpu", extra=tp_load_kwargs(accelerator)
        )
    from training.moe import cast_experts_for_compute, experts_note  # imports torch: after the no-torch checks

    # MoE experts holding fp32 weights run bf16 GEMMs, as the Linears do (FSDP2 and DeepSpeed compute in bf16 anyway)
    ddp_autocast = strategy_facts(strategy).framework == "ddp" and accelerator.mixed_precision != "no"
    if cast_experts_for_compute(model) and main and ddp_autocast:
        print(experts_note(config.model_type), flush=True)
    compile_wanted = fp8 or args.compile_layers  # float8's casts fuse only under compile (training/precision.py)
    if args.liger:
        liger_note = apply_liger(model, inside_layers=not compile_wanted)
        if liger_note and main:  # an architecture Liger is not measured on (generator/catalog/liger.py)
            print(liger_note, flush=True)
    if hf_ckpt:
        enable_grad_checkpointing(model)
    if args.method in ("lora", "qlora"):
        model, targets_note = add_adapters(model, args, args.grad_checkpointing and not fsdp_ac)
        if targets_note and main:  # an MoE whose MLP names peft would move onto its experts
            print(targets_note, flush=True)
    compiled = compile_layers(model) if compile_wanted else 0
    n_params, n_trainable = count_params(model)

    # -- room on disk for a checkpoint and the export ------------------------------------------------------------------
    if main and (args.save_every or args.export):
        need = disk_needed(spec, workload, strategy, n_params, n_trainable, args)
        check_free_space(out, need, "one checkpoint plus the export")

    # -- data order, optimizer, schedule; prepare hands them to the strategy -------------------------------------------
    done = start_step * args.global_batch
    stream = BlockStream(blocks, args.seed, done, args.max_steps * args.global_batch - done)
    loader = torch.utils.data.DataLoader(stream, batch_size=args.micro_batch, shuffle=False, num_workers=0)
    # No named list of the parameters may outlive prepare(): FSDP2's fully_shard moves the original Parameter objects
    # to the GPU whole and then swaps in sharded ones, so a lingering reference pins a full fp32 copy of the model on
    # every GPU (on 2x H200 the FSDP2 runs peaked 29.0 GB = 4 bytes x 7.24B params above the estimate).
    optimizer = torch.optim.AdamW(
        (p for p in model.parameters() if p.requires_grad),
        lr=args.lr,
        weight_decay=0.0,
        fused=use_cuda and strategy_facts(strategy).offload == "none",
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(lr_factor, warmup=args.warmup_steps, total=args.max_steps)
    )
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    if whole:  # DeepSpeed now holds only its partitions: hand the whole model's cached blocks back to the driver
        torch.cuda.empty_cache()
    if use_cuda:  # the logged peaks are training's: QLoRA's in-memory quantisation of a random init peaked above them
        torch.cuda.reset_peak_memory_stats()
    if resume_from is not None:
        accelerator.load_state(str(resume_from), **load_state_kwargs(args.method, is_ds))
    fp8_linears = fp8_layer_names(model) if fp8 else []

    # -- the start record ----------------------------------------------------------------------------------------------
    log = JsonLog(args.log_file, main)
    flops = flops_per_token(spec, args.seq_len, workload if spec is not None else None)
    peak_tflops = gpu_peak_tflops()
    predicted, predicted_src = (
        layout_peak_gb(accelerator, spec, workload)  # TP/CP: the layout's estimate (training/parallel.py)
        if describe(world)
        else predicted_peak_gb(accelerator, spec, workload, strategy)
    )
    log.write(
        event="start",
        step=start_step,
        strategy=strategy,
        distributed_type=str(accelerator.distributed_type),
        world_size=world,
        grad_accum=ga,
        mixed_precision=accelerator.mixed_precision,
        precision="fp8" if fp8 else "bf16",
        fp8_recipe=args.fp8_recipe if fp8 else None,
        fp8_linears=len(fp8_linears),
        compiled_layers=compiled,
        liger=("loss only" if compile_wanted else "all") if args.liger else None,
        load_dtype=args.load_dtype,
        lr=args.lr,
        method=args.method,
        params=n_params,
        trainable_params=n_trainable,
        data_format=data_format,
        blocks=len(blocks[0]),
        packed=args.pack,
        grad_checkpointing="fsdp" if fsdp_ac else (hf_ckpt or qlora_ckpt),
        resumed_from=str(resume_from) if resume_from else None,
        flops_per_token=flops,
        flops_source="estimator" if spec is not None else workload,
        fit_check=None if fit is None else dict(fits=fit.fits, predicted_reserved_gb=round(fit.reserved_gb, 2),
                                                usable_gb=round(fit.usable_gb, 2), seconds=round(fit_s, 4)),
    )  # fmt: skip
    if main:
        print(
            f"train.py: {strategy} on {world} process(es), grad accumulation {ga}, {args.method}, "
            f"weights {args.load_dtype}, lr {args.lr:g}, {n_trainable:,}/{n_params:,} trainable params, "
            f"data {data_format}, {len(blocks[0])} blocks"
            + (f", resuming at step {start_step} from {resume_from}" if resume_from else ""),
            flush=True,
        )
        if describe(world):
            print(f"train.py: {describe(world)}", flush=True)

    # -- the loop ------------------------------------------------------------------------------------------------------
    step, exit_code = start_step, 0
    stats = {"tokens": 0, "seconds": 0.0, "losses": [], "warmup_s": 0.0}
    # Left out of tokens/s: the first step (allocator warm-up, lazy init) and, under compile, the second too, where a
    # recompilation would land (a guard that only fails once the optimizer has stepped); their time is compile_s.
    warmup_steps = 2 if compiled else 1
    device = accelerator.device
    tokens_per_step_per_gpu = args.micro_batch * ga * args.seq_len // shared_batch_ranks()
    data = iter(loader)
    bar = make_progress(main, start_step, args.max_steps)
    model.train()
    while step < args.max_steps:
        t0 = time.perf_counter()
        oom.enter(STEP, step + 1)
        micro = [next(data) for _ in range(ga)]
        n_tok = sum((mb["labels"][:, 1:] != -100).sum() for mb in micro).to(device)
        n_tok = (accelerator.reduce(n_tok, "sum") // shared_batch_ranks()).clamp(min=1)  # a TP x CP group shares one
        loss_sum = torch.zeros((), device=device)
        for mb in micro:
            with accelerator.accumulate(model):
                inputs = with_shift_labels({k: v for k, v in mb.items() if k != "sample_id"})
                with cp_context(accelerator, inputs):  # context parallel: the sequence split over the CP group
                    out_ = model(**inputs, use_cache=False, num_items_in_batch=n_tok)
                    # Accelerate divides by ga and the gradient reduction averages over ranks (all but TP's): undo
                    # both, so the gradient is d(sum of token losses)/d(theta) / (label tokens in the global batch).
                    accelerator.backward(out_.loss * (gradient_ranks(world) * ga))
                loss_sum += out_.loss.detach().float()
        grad_norm = None
        oom.enter(OPTIMIZER, step + 1)  # under DeepSpeed the engine steps inside backward: counted there
        if args.max_grad_norm > 0 or is_ds:
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm or float("inf"))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        loss = accelerator.reduce(loss_sum, "sum").item() / model_parallel_sizes()["tp"]  # TP ranks repeat it
        elapsed = time.perf_counter() - t0

        record = step_record(step, loss, scheduler, grad_norm, elapsed, tokens_per_step_per_gpu, flops, peak_tflops)
        record.update(memory_record(accelerator, use_cuda))
        if args.log_sample_ids:
            ids_here = torch.cat([mb["sample_id"] for mb in micro]).to(device)
            record["samples"] = sorted(accelerator.gather(ids_here).tolist())
        log.write(**record)
        if len(stats["losses"]) >= warmup_steps:
            stats["tokens"] += tokens_per_step_per_gpu
            stats["seconds"] += elapsed
        else:
            stats["warmup_s"] += elapsed
        stats["losses"].append(loss)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                loss=f"{loss:.4f}", lr=f"{record['lr']:.2e}", tok_s_gpu=f"{record['tokens_per_s_per_gpu']:.0f}"
            )
        hooks.after_step()

        # Every rank finishes the same step before stopping: one all-reduce of the stop flag per step.
        stop = accelerator.reduce(torch.tensor(float(preemption.received()), device=device), "max").item()
        due = args.save_every and (step % args.save_every == 0 or step == args.max_steps)
        if stop or due:
            oom.enter(SAVE, step)  # an OOM here leaves .tmp-step-*, never `latest` (training/checkpoints.py)
            save_checkpoint(accelerator, out, step, args, world, ga, log, strategy)
        if stop:
            exit_code = EXIT_PREEMPTED
            log.write(event="preempted", step=step, signal=int(stop), exit_code=EXIT_PREEMPTED)
            if main:
                print(
                    f"train.py: preempted by signal {int(stop)} at step {step}; checkpoint written, exiting with "
                    f"{EXIT_PREEMPTED} (rerun with --resume)",
                    file=sys.stderr,
                    flush=True,
                )
            break
    if bar is not None:
        bar.close()

    # -- export and summary --------------------------------------------------------------------------------------------
    oom.enter(EXPORT)
    if exit_code == 0 and args.export:
        export(accelerator, model, tok, Path(args.export), args.method != "full")
        log.write(event="export", step=step, path=args.export)
    summary = summarize(accelerator, stats, step, flops, peak_tflops, predicted, predicted_src, use_cuda)
    if compiled:
        summary["compile_s"] = round(stats["warmup_s"], 3)
    log.write(event="summary", **summary)
    if main:
        print_summary(summary, strategy)
    accelerator.wait_for_everyone()
    # The DDP wrapper goes before the process group. The other way round, its Reducer is the group's last owner and
    # joins gloo's worker threads holding the GIL, while a worker waits for the GIL to free the tensors of the last
    # collective (pytorch/pytorch#56297): under CPU load a rank hung at exit with its run complete.
    model = optimizer = loader = scheduler = None  # noqa: F841
    accelerator.free_memory()
    accelerator.end_training()
    return exit_code


def main(argv: list[str] | None = None) -> int:
    rank0 = int(os.environ.get("RANK", "0")) == 0
    try:
        return train(parse_args(argv))
    except UserError as exc:
        if rank0:
            print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    except OutOfMemory as exc:  # the fit check: every rank computed the same verdict
        if rank0 or exc.rank_local:
            print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_OUT_OF_MEMORY
    except oom.errors() as exc:  # evaluated only when an exception gets here: torch is imported by then
        print(f"train.py: error: {oom.explain(exc, oom.measured_gb())}", file=sys.stderr, flush=True)
        return EXIT_OUT_OF_MEMORY


if __name__ == "__main__":
    sys.exit(main())
