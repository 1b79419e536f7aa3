"""User-facing errors: one line that names what is wrong and how to fix it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


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


def or_exit_code(command: Callable[[], T]) -> T | int:
    """``command()``, or exit code 2 after one line on stderr when the user's input is at fault (a bad value, an
    unknown option or a malformed override): for the package's commands besides the Hydra app."""
    from hydra.errors import HydraException

    try:
        return command()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
    except HydraException as err:  # its first line says which override
        print(f"error: {str(err).splitlines()[0]} (see python -m socratic_exp --help)", file=sys.stderr)
    return 2
