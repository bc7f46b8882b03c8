"""The one error type user configuration raises."""


class ConfigError(ValueError):
    """A bad configuration value: `path` names the field, `message` says what is allowed."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message

    def line(self) -> str:
        return f"config error: {self}"
