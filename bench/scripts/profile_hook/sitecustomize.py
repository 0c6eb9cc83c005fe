"""With this directory first on PYTHONPATH and BENCH_PROFILE=<dir> set, every Python process that imports torch's
optimizers gets bench/scripts/profiler.py's window (train.py or a plain loop, run unchanged); with BENCH_MEMHIST=<dir>
set, bench/scripts/memhist.py's memory history of one step. Nothing happens without either; TRL's script gets the
profiler window through the trainer hook, which loads first on its PYTHONPATH."""

import os
import sys

if os.environ.get("BENCH_PROFILE") or os.environ.get("BENCH_MEMHIST"):
    _REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if _REPO not in sys.path:
        sys.path.append(_REPO)
    import contextlib

    with contextlib.suppress(ImportError):  # the launcher may run without torch's CUDA pieces; trainers do not
        if os.environ.get("BENCH_PROFILE"):
            from bench.scripts import profiler

            profiler.install()
        if os.environ.get("BENCH_MEMHIST"):
            from bench.scripts import memhist

            memhist.install()
