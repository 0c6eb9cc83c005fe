"""The output directory and its checkpoints: checks before training, atomic saves, finding and validating a resume
point (docs/train.md, "Checkpoints and preemption").

A directory named step-* is always complete: every rank writes into .tmp-step-*, rank 0 seals it with
trainer_state.json, fsyncs, renames it, then atomically replaces the `latest` pointer; pruning comes after that.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from generator.catalog.strategies import strategy as catalog_strategy
from generator.errors import UserError
from generator.fileio import atomic_write
from training import hooks

CKPT_PREFIX, TMP_PREFIX, LATEST, STATE_FILE = "step-", ".tmp-step-", "latest", "trainer_state.json"
# The flags the data order depends on: a resumed run must repeat them.
RESUME_MUST_MATCH = ("global_batch", "seq_len", "seed", "method", "dataset", "pack")


def check_output_dir(path: str) -> Path:
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"output directory {str(out)!r} is not writable: {exc.strerror or exc}") from None
    return out


def check_free_space(path: Path, need_bytes: int, what: str) -> None:
    free = hooks.free_bytes() or shutil.disk_usage(path).free
    if free < need_bytes:
        raise UserError(
            f"not enough disk space in {str(path)!r}: {what} needs about {need_bytes / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free; free space, lower --keep-last or choose another --output-dir"
        )


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            _fsync_path(Path(dirpath) / name)
        _fsync_path(Path(dirpath))


def complete_checkpoints(out: Path) -> list[Path]:
    """step-* directories holding trainer_state.json, oldest first. Temporary directories are never listed."""
    found = [d for d in out.glob(f"{CKPT_PREFIX}*") if d.is_dir() and (d / STATE_FILE).is_file()]
    return sorted(found, key=lambda d: d.name)


def latest_checkpoint(out: Path) -> Path | None:
    pointer = out / LATEST
    if pointer.is_file():
        named = out / pointer.read_text().strip()
        if named.name.startswith(CKPT_PREFIX) and (named / STATE_FILE).is_file():
            return named
    done = complete_checkpoints(out)  # pointer missing or stale: the newest complete one is still safe
    return done[-1] if done else None


def publish_checkpoint(tmp: Path, final: Path, state: dict, keep_last: int) -> list[Path]:
    """Rank 0, after every rank wrote into `tmp`: seal, rename, point `latest` at it, prune. Returns pruned dirs."""
    atomic_write(tmp / STATE_FILE, json.dumps(state, indent=1), force=True)
    fsync_tree(tmp)
    if final.exists():  # same step saved again (e.g. preempted right after a periodic save): keep the newer one
        old = final.with_name(f".old-{final.name}")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    _fsync_path(final.parent)
    atomic_write(final.parent / LATEST, final.name + "\n", force=True)
    pruned = []
    if keep_last:
        for old in complete_checkpoints(final.parent)[:-keep_last]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
                pruned.append(old)
    return pruned


def remove_stale_temporaries(out: Path) -> list[Path]:
    stale = [d for d in out.iterdir() if d.name.startswith((TMP_PREFIX, f".old-{CKPT_PREFIX}"))]
    for d in stale:
        shutil.rmtree(d, ignore_errors=True)
    return stale


def find_resume(args, out: Path) -> Path | None:
    if args.resume is None:
        found = latest_checkpoint(out)
        if found is not None:
            raise UserError(
                f"{str(out)!r} already holds checkpoint {found.name}; pass --resume to continue from it "
                "or choose an empty --output-dir"
            )
        return None
    if args.resume == "auto":
        return latest_checkpoint(out)
    path = Path(args.resume)
    if not (path / STATE_FILE).is_file():
        raise UserError(
            f"--resume {args.resume!r} is not a complete checkpoint (no {STATE_FILE}); "
            f"complete ones in {str(out)!r}: {[d.name for d in complete_checkpoints(out)] or 'none'}"
        )
    return path


def check_resume_compatible(state: dict, args, path: Path) -> None:
    for key in RESUME_MUST_MATCH:
        if key in state and state[key] != getattr(args, key):
            flag = "--" + key.replace("_", "-")
            raise UserError(
                f"checkpoint {str(path)!r} was written with {flag} {state[key]!r}, this run has "
                f"{getattr(args, key)!r}; resume with the same value (data order depends on it)"
            )
    if state["step"] > args.max_steps:
        raise UserError(f"checkpoint {str(path)!r} is at step {state['step']}, beyond --max-steps {args.max_steps}")


def check_resume_layout(state: dict, world: int, strategy: str, path: Path) -> str | None:
    """Whether this run's processes and strategy can load the checkpoint's model and optimizer state; a note when the
    world size changed and the state maps (None when nothing changed). Under DDP (and one process) accelerate saves
    one whole copy of the model and optimizer, and the data position is counted in samples, not per rank (docs/train.md,
    "Order"), so any world size continues it. FSDP and DeepSpeed save each rank's shard in their own layout: refuse."""
    saved_world, saved = int(state.get("world_size", world)), state.get("strategy")
    where = f"checkpoint {str(path)!r} was written by {saved or 'a run'} on {saved_world} process(es)"
    again = f"resume it with {saved or 'the same strategy'} on {saved_world} process(es) (the launch config that "
    again += "wrote it), or start a fresh --output-dir"
    if saved is not None and saved != strategy:
        raise UserError(f"{where}; this run is {strategy}, which stores model and optimizer state differently; {again}")
    if saved_world == world:
        return None
    if saved is None:
        raise UserError(f"{where} and does not record its strategy (an older train.py); this run has {world}; {again}")
    if _sharded(strategy):
        raise UserError(
            f"{where}; this run has {world}, and {strategy}'s sharded model and optimizer state cannot be mapped onto "
            f"another number of processes; {again}"
        )
    return (
        f"resuming a checkpoint written on {saved_world} process(es) on {world}: {strategy} keeps one whole copy of "
        f"the model and optimizer state, and the data position is {state.get('samples_consumed')} samples whatever "
        "the world size (gradient accumulation is recomputed for the global batch)"
    )


def _sharded(strategy: str) -> bool:
    """FSDP2 and DeepSpeed (every ZeRO stage, offload too) save per-rank state; DDP one whole copy."""
    return catalog_strategy(strategy).framework != "ddp"


def resume_step(args, out: Path, world: int = 1, strategy: str = "ddp") -> tuple[Path | None, int, str | None]:
    """(checkpoint to resume from or None, the step it reached, a note when the world size changed); refuses a
    checkpoint this run cannot continue."""
    path = find_resume(args, out)
    if path is None:
        return None, 0, None
    state = json.loads((path / STATE_FILE).read_text())
    check_resume_compatible(state, args, path)
    note = check_resume_layout(state, world, strategy, path)
    return path, int(state["step"]), note


def load_state_kwargs(method: str, is_deepspeed: bool) -> dict:
    """What accelerator.load_state needs for this run. QLoRA: strict=False, because accelerate saves the 4-bit base's
    bitsandbytes quantisation state (absmax, quant_map, nested_absmax, ... of every Linear4bit) as extra state-dict
    keys that its strict safetensors load then rejects as unexpected, so a preempted QLoRA run could not resume
    (accelerate 1.15, bitsandbytes 0.50, reproduced on CPU: tests/test_train_qlora_resume.py). The frozen 4-bit base
    is then the one this run's load built (same seed or the same weights), not the saved copy: the same codes only
    where quantisation is deterministic (bitsandbytes' CPU kernel is not: a few codes differ between two calls; on
    the GPU, bench/preempt.py's ddp-qlora row compares the resumed losses).
    Adapters, optimizer, scheduler and RNG load as for LoRA. DeepSpeed's load_checkpoint has no `strict` (QLoRA runs
    under DDP anyway)."""
    return {"strict": False} if method == "qlora" and not is_deepspeed else {}


def save_checkpoint(accelerator, out: Path, step: int, args, world: int, ga: int, log, strategy: str) -> None:
    """Every rank calls it: accelerator.save_state into a temporary directory, then rank 0 publishes it."""
    t0 = time.perf_counter()
    tmp, final = out / f"{TMP_PREFIX}{step:08d}", out / f"{CKPT_PREFIX}{step:08d}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    log.write(event="save_begin", step=step, path=str(tmp))
    try:
        accelerator.save_state(str(tmp))
        hooks.inside_save(step)
        accelerator.wait_for_everyone()
        pruned = []
        if accelerator.is_main_process:
            state = {
                "step": step,
                "world_size": world,
                "strategy": strategy,  # with world_size: what a resume must match to load the state (sharded or not)
                "grad_accum": ga,
                **{key: getattr(args, key) for key in RESUME_MUST_MATCH},
                "samples_consumed": step * args.global_batch,
                "time": time.time(),
            }
            pruned = publish_checkpoint(tmp, final, state, args.keep_last)
    except OSError as exc:
        prev = latest_checkpoint(out)
        raise UserError(
            f"writing checkpoint {str(tmp)!r} failed: {exc.strerror or exc}; the previous checkpoint "
            f"{str(prev) if prev else '(none)'} is intact"
        ) from None
    accelerator.wait_for_everyone()
    log.write(
        event="checkpoint",
        step=step,
        path=str(final),
        seconds=round(time.perf_counter() - t0, 3),
        pruned=[p.name for p in pruned],
    )
