"""Step log for a Trainer script run unchanged (TRL's own `trl/scripts/sft.py`, the line `plan --script trainer`
prints): with this directory first on PYTHONPATH and BENCH_STEPLOG=<path.jsonl> set, every `transformers.Trainer`
built in the process gets one more callback that writes bench/scripts/steplog.py's per-step JSONL.

Why a site hook rather than a callback in a copy of the script: the issue measures the command exactly as printed, so
the script file stays TRL's. The callback adds two `cuda.synchronize()` per optimizer step (at its ends), nothing else.
Tokens per step are TRL's own count (`SFTTrainer._total_train_tokens`, what it logs as `num_tokens`: position_ids'
length under padding-free packing, the attention mask's sum otherwise), per GPU; a plain Trainer without that
counter falls back to BENCH_TOKENS_PER_STEP.
Without BENCH_STEPLOG nothing is imported or patched.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("BENCH_STEPLOG"):
    _REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

    def _install() -> None:
        import time

        import transformers
        from transformers import TrainerCallback

        if _REPO not in sys.path:
            sys.path.append(_REPO)  # bench.scripts.steplog; appended, so the user's own imports win
        from bench.scripts import steplog

        class _StepLog(TrainerCallback):
            def __init__(self, trainer):
                self.trainer, self.t0, self.pending, self.started, self.tokens_before = trainer, 0.0, None, False, 0
                rank0 = int(os.environ.get("RANK", "0")) == 0
                fixed = int(os.environ.get("BENCH_TOKENS_PER_STEP", "0"))
                self.log = steplog.StepLog(os.environ["BENCH_STEPLOG"], rank0, fixed, None)

            def _tokens(self) -> int:
                return int(getattr(self.trainer, "_total_train_tokens", 0))

            def on_step_begin(self, targs, state, control, **kw):
                if not self.started:
                    self.started = True
                    self.log.start(script="trainer-cli", argv=sys.argv, **steplog.trainer_facts(self.trainer, targs))
                steplog.sync()
                self.tokens_before = self._tokens()
                self.t0 = time.perf_counter()

            def on_step_end(self, targs, state, control, **kw):
                steplog.sync()
                elapsed = time.perf_counter() - self.t0
                world = max(targs.world_size, 1)
                counted = self._tokens() - self.tokens_before
                tokens = counted / world if counted else None
                self.pending = (state.global_step, elapsed, steplog.memory_per_rank(), tokens)

            def on_log(self, targs, state, control, logs=None, **kw):
                if self.pending and logs and "loss" in logs and self.pending[0] == state.global_step:
                    step, elapsed, memory, tokens = self.pending
                    self.log.step(
                        step, float(logs["loss"]), elapsed, memory, tokens=tokens,
                        lr=logs.get("learning_rate"), grad_norm=logs.get("grad_norm"),
                        num_tokens=logs.get("num_tokens"),
                    )  # fmt: skip
                    self.pending = None

            def on_train_end(self, targs, state, control, **kw):
                self.log.summary(steplog.memory_per_rank(), script="trainer-cli")

        init = transformers.Trainer.__init__

        def patched(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.add_callback(_StepLog(self))

        transformers.Trainer.__init__ = patched

    import contextlib

    with contextlib.suppress(ImportError):  # the launcher process may lack transformers; training processes do not
        _install()
        if os.environ.get("BENCH_PROFILE"):
            from bench.scripts import profiler  # the same window train.py gets through bench/scripts/profile_hook

            profiler.install()
