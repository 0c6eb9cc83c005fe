"""Out of GPU memory, explained in one line: which phase of train.py ran out (model load, forward/backward, optimizer
step, checkpoint save, export), the measured peaks against the plan's prediction for that phase, and what would fit
(training/fit.py). train.py marks each phase with `enter`; main() turns the OutOfMemoryError into `explain`'s line
and exit code 3 (docs/train.md, "Out of memory"). Rank-local: the rank that ran out says so.

Module state, like training/preemption.py: one process trains one run, and marking a phase is one assignment, so the
loop stays as it reads instead of nesting every phase in a `with`.
"""

from __future__ import annotations

import re

from training import hooks
from training.fit import SAVE, Fit, what_would_fit

_state: dict = {"phase": None, "step": None, "fit": None, "rank": 0, "world": 1}


def configure(fit: Fit | None, rank: int, world: int) -> None:
    """What the message needs: the plan's verdict (None without a GPU or a prediction) and who is speaking."""
    _state.update(fit=fit, rank=rank, world=world)


def enter(phase: str, step: int | None = None) -> None:
    """From here on an out-of-memory belongs to `phase` (of optimizer step `step`, counted from 1)."""
    _state.update(phase=phase, step=step)
    if phase != SAVE:  # the save's simulated OOM comes from inside it, once its temporary directory is written
        hooks.simulated_oom(phase, step)


def errors() -> tuple[type[BaseException], ...]:
    """The exceptions a CUDA out-of-memory raises (torch.cuda.OutOfMemoryError is the same class in torch 2.x)."""
    import torch

    return tuple({torch.OutOfMemoryError, torch.cuda.OutOfMemoryError})


def measured_gb() -> tuple[float, float] | None:
    """(peak allocated, peak reserved) GB on this process's GPU since the last reset; None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / 1e9, torch.cuda.max_memory_reserved() / 1e9


def explain(exc: BaseException, measured: tuple[float, float] | None) -> str:
    """The one line: phase, step, rank, GPU; measured peaks; the plan's prediction for the phase; what would fit."""
    phase, step, fit = _state["phase"] or "setup", _state["step"], _state["fit"]
    where = [f"step {step}"] if step is not None else []
    where += [f"rank {_state['rank']} of {_state['world']}"] if _state["world"] > 1 else []
    where += [fit.gpu] if fit is not None else []
    # "out of memory": the words generator/trial and the bench harnesses look for (generator.trial.metrics)
    head = f"CUDA out of memory in the {phase}" + (f" ({', '.join(where)})" if where else "")
    if measured is None:
        seen = "no CUDA peak to measure"
    else:
        seen = f"measured peak {measured[0]:.1f} GB allocated, {measured[1]:.1f} GB reserved"
    tried = re.search(r"Tried to allocate ([0-9.]+ [KMGT]?i?B)", str(exc))
    if tried:
        seen += f", {tried.group(1)} more requested"
    if fit is None:
        return (
            f"{head}: {seen}; no prediction for this run (no GPU, or a model or setting the estimator cannot price). "
            "Lower --micro-batch, keep --grad-checkpointing on, or ask python -m generator plan what fits"
        )
    predicted = fit.phases_gb.get(phase)
    said = f"{predicted:.1f} GB allocated in this phase and " if predicted is not None else ""
    said = f"the plan predicted {said}{fit.reserved_gb:.1f} GB reserved at the run's peak ({fit.strategy}), "
    said += f"{fit.usable_gb:.1f} GB usable"
    if fit.fits:
        said += ": it was predicted to fit, so the estimate is off for this run"
    return f"{head}: {seen}; {said}. {what_would_fit(fit)}"
