"""The one exception type for user mistakes.

The CLI turns a UserError into a single line on stderr and exit code 2; anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A mistake the user can fix: bad file, bad flag, impossible request. The message says what and how."""

    exit_code = 2
