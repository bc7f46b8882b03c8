"""The one error type the ops CLI raises for a problem the user can fix."""


class OpsError(Exception):
    """A bad argument or an unmet precondition; the CLI prints it as one line and exits 2."""
