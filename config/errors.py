"""The one error type user configuration raises."""


def one_line(text: str) -> str:
    # A key or a value copied from the file, or a path, may hold a newline; the error stays one line.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ConfigError(ValueError):
    """A bad configuration value: `path` names the field, `message` says what is allowed."""

    def __init__(self, path: str, message: str):
        path, message = one_line(path), one_line(message)
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message

    def line(self) -> str:
        return f"config error: {self}"
