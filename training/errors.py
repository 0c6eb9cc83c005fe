"""Exit codes and the one-line form of a library's exception (docs/train.md, "Exit codes")."""

from __future__ import annotations

EXIT_USER_ERROR = 2
EXIT_OUT_OF_MEMORY = 3  # out of GPU memory, measured (an OutOfMemoryError in a phase) or predicted (the fit check)
EXIT_PREEMPTED = 75  # EX_TEMPFAIL in sysexits.h: checkpoint written, rerun with --resume


class OutOfMemory(Exception):
    """The run does not fit in GPU memory: the one line to print and whether only this rank knows it (a measured
    OOM is rank-local; the fit check's verdict is the same on every rank, so rank 0 says it)."""

    def __init__(self, line: str, rank_local: bool):
        super().__init__(line)
        self.rank_local = rank_local


def first_line(exc: BaseException) -> str:
    """The first line of a library's message: enough to say what is wrong without its traceback."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
