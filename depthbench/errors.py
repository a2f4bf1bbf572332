"""The one exception type that reaches the user as a one-line CLI error (exit status 2)."""


class UserError(Exception):
    """Bad input from the user: a path, a spec, a config value, a file that does not match.
    The message says what is wrong and how to fix it."""
