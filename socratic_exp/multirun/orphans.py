"""No job outlives its sweep: a job's process, and each rank of a multi-process job, interrupts itself as Ctrl-C
would once the sweep process that started it has died (``interrupt_when_orphaned``), so a sweep killed by a
scheduler's time limit or ``kill`` leaves no job training on behind it."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path


def interrupt_when_orphaned(parent: int, poll_seconds: float = 1.0, launcher: int | None = None) -> threading.Thread:
    """Interrupt this process, as Ctrl-C would, once ``parent`` has died, or ``launcher`` (the sweep process, where
    it is not the parent: the ranks of a multi-process job are the children of torchrun, which a killed sweep leaves
    running). A sweep killed by SIGTERM or SIGKILL (a scheduler's time limit, ``kill``) would otherwise leave its
    running jobs behind, training on, holding warm-start locks and writing into the sweep folder; interrupted, a job
    records itself as such and ends."""

    def watch() -> None:
        while os.getppid() == parent and (launcher is None or _alive(launcher)):
            time.sleep(poll_seconds)
        os.kill(os.getpid(), signal.SIGINT)

    # A process started with SIGINT ignored (a sweep run in the background of a script, a parent that ignores it)
    # would ignore the watcher's interrupt too: this process takes it as Ctrl-C whatever it inherited.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)

    watcher = threading.Thread(target=watch, name="exit-with-sweep", daemon=True)
    watcher.start()
    return watcher


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"
