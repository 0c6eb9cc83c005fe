"""SIGTERM / SIGUSR1 (SLURM's preemption warning) set a flag; the loop finishes its step, checkpoints and exits 75."""

from __future__ import annotations

import signal

_stop_signal = 0


def _on_stop_signal(signum, frame) -> None:
    global _stop_signal
    _stop_signal = signum


def install() -> None:
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, _on_stop_signal)


def received() -> int:
    """The signal number that asked this process to stop, or 0."""
    return _stop_signal
