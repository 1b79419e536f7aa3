"""User-facing errors: one line that names what is wrong and how to fix it."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad config, missing file, unreachable server). Printed as one line, no traceback."""

    def __init__(self, message: str, fix: str | None = None):
        self.message = message
        self.fix = fix
        super().__init__(f"{message} (fix: {fix})" if fix else message)


NO_VALUE = object()


class ConfigError(UserError):
    """An invalid config value, reported as ``group.key=value: problem (fix: ...)``."""

    def __init__(self, key: str, value: object, problem: str, fix: str | None = None):
        self.key = key
        self.value = value
        super().__init__(f"{key}: {problem}" if value is NO_VALUE else f"{key}={value!r}: {problem}", fix)
