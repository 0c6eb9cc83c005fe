"""Exit codes and the one-line form of a library's exception (docs/train.md, "Exit codes")."""

from __future__ import annotations

EXIT_USER_ERROR = 2
EXIT_PREEMPTED = 75  # EX_TEMPFAIL in sysexits.h: checkpoint written, rerun with --resume


def first_line(exc: BaseException) -> str:
    """The first line of a library's message: enough to say what is wrong without its traceback."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
