"""One error type for bad input: its message says what to do. The CLI prints it as one line."""


class TreeGraftError(ValueError):
    """Bad input or a missing resource, with a message that tells the user what to do."""
