"""User-facing errors: one line that names what is wrong and how to fix it."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path
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
        from socratic_exp.core.secrets import REDACTED, is_secret_key

        self.key = key
        self.value = value
        shown = REDACTED if is_secret_key(key) and value not in (None, "") else value  # the message reaches files
        super().__init__(f"{key}: {problem}" if value is NO_VALUE else f"{key}={shown!r}: {problem}", fix)


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


# The file-system faults that the machine or the user puts right, not the code: a full disk or quota, a file too
# large for the file system, a read-only or forbidden folder, a file where a folder should be (or a folder where a
# file should be), a name too long. Any other OSError stays a bug.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
IN_THE_WAY = (errno.ENOTDIR, errno.EEXIST, errno.EISDIR)
OUTPUTS_FIX = "$SOCRATIC_EXP_OUTPUTS=<folder>"


def file_system_error(err: BaseException, then: str = "") -> UserError | None:
    """``err`` (or the OSError it was raised from) as the user's error, when it is one of the faults above: one line
    naming the file, the system's reason and the fix, followed by ``then`` (e.g. ``resume=<run folder>``, to go on
    once it is fixed); None for any other error (a bug)."""
    found = err if isinstance(err, OSError) else err.__cause__
    if not isinstance(found, OSError) or isinstance(found, UserError):
        return None
    path = Path(os.fsdecode(found.filename)) if found.filename else None
    shown = str(path) if path else "a file"
    reason = found.strerror or type(found).__name__
    after = f", then {then}" if then else ""
    if found.errno in DISK_FULL:
        return UserError(
            f"cannot write {shown} ({reason})",
            f"free space on its disk (or use a folder on another disk: {OUTPUTS_FIX}){after}",
        )
    if found.errno in NOT_WRITABLE:
        return UserError(
            f"cannot write {shown} ({reason})", f"make it writable (or use a writable folder: {OUTPUTS_FIX}){after}"
        )
    if found.errno == errno.ENAMETOOLONG:
        return UserError(f"cannot create {shown} ({reason})", f"use a folder with a shorter path ({OUTPUTS_FIX})")
    if found.errno in IN_THE_WAY and path is not None:
        if found.errno == errno.EISDIR:
            return UserError(f"cannot write {shown}: a folder is in the way ({reason})", f"move it away{after}")
        # the first part of the path that exists and is not a folder (mkdir's EEXIST over a folder is a bug)
        try:
            blocker = next((p for p in [*reversed(path.parents), path] if p.exists() and not p.is_dir()), None)
        except OSError:  # a part of the path that cannot even be looked at: nothing to name
            blocker = None
        if blocker is not None:
            return UserError(
                f"cannot create {shown}: the file {blocker} is in the way ({reason})", f"move {blocker} away{after}"
            )
    return None
