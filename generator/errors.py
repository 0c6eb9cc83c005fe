"""The one exception type for user mistakes.

The CLI turns a UserError into a single line on stderr and exit code 2 (with --json also a JSON object on stdout);
anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A mistake the user can fix: bad file, bad flag, impossible request. The message says what and how."""

    exit_code = 2


def require_at_least_one(flag: str, value: int | None) -> None:
    """The one wording of "this count must be positive", so every verb says it the same way."""
    if value is not None and value < 1:
        raise UserError(f"{flag} must be at least 1, got {value}")
