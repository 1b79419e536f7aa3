"""A run's lifecycle around its data path: signals, resume checks, and how every failure ends (``summary.json`` says
``failed`` or ``interrupted`` with the error, one line on stderr says what went wrong, and the exit code)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from socratic_exp import distributed
from socratic_exp.errors import NO_VALUE, ConfigError, UserError
from socratic_exp.hydra_support import typed_key
from socratic_exp.run_folder import RunRecord, is_run_folder


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's time limit, a cancelled job, ``kill``) ends the run as Ctrl-C does: recorded as
    interrupted and resumable, its temporary files removed and its warm-start lock freed, where the default action
    would end the process on the spot with its summary left at ``running``."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def record_failure(
    record: RunRecord | None, run_dir: Path, config: Any, overrides: list[str], err: BaseException, status: str
) -> None:
    if record is None:
        record = RunRecord(run_dir, config if isinstance(config, dict) else {}, overrides, writes=distributed.is_main())
    if not isinstance(err, UserError | KeyboardInterrupt):
        record.data["traceback"] = traceback.format_exc()
    # A bad attempt to resume a completed run must not mark that run failed.
    if record.previous.get("status") != "completed":
        record.fail(err, status=status)
    prefix = "" if distributed.is_main() else f"[rank {distributed.rank()}] "  # the same error from every rank
    if isinstance(err, UserError):
        print(f"{prefix}error: {err}", file=sys.stderr)
    elif isinstance(err, KeyboardInterrupt):
        print(f"interrupted: the run folder {run_dir} can be resumed with resume={run_dir}", file=sys.stderr)
    else:
        first_line = (str(err).strip().splitlines() or [""])[0][:300]
        print(
            f"{prefix}error: {type(err).__name__}: {first_line} (traceback in {run_dir / 'summary.json'})",
            file=sys.stderr,
        )


def as_typed(err: ConfigError, cfg: DictConfig) -> ConfigError:
    """``err`` reported under the key the user typed: a value passed on by interpolation (the run's ``seed`` as
    ``teacher.seed``) is set, and fixed, where it was typed."""
    typed = typed_key(cfg, err.key)
    if typed == err.key:
        return err
    prefix = f"{err.key}: " if err.value is NO_VALUE else f"{err.key}={err.value!r}: "
    problem = err.message.removeprefix(prefix)
    fix = err.fix.replace(f"{err.key}=", f"{typed}=") if err.fix else None
    return ConfigError(typed, err.value, f"{problem} (passed on to {err.key})", fix)


def check_resume(cfg: DictConfig, run_dir: Path, multirun: bool = False) -> None:
    resume = cfg.get("resume")
    if resume in (None, "auto"):
        return
    if multirun:  # resume names the sweep folder; each job continues in its own job folder
        if run_dir.parent.resolve() != Path(str(resume)).resolve():
            raise ConfigError(
                "resume",
                resume,
                "is not a sweep folder (no multirun.yaml)",
                "pass an outputs/multirun/<date>/<time> folder or resume=auto",
            )
        return
    if not Path(str(resume)).is_dir():
        raise ConfigError(
            "resume", resume, "is not a run folder", "pass an existing outputs/<date>/<time> folder or resume=auto"
        )
    if not is_run_folder(resume):  # the resolver gave the run a fresh folder: nothing was written into this one
        raise ConfigError(
            "resume",
            resume,
            "is not a run folder (no summary.json or .hydra/); nothing was written into it",
            "pass an outputs/<date>/<time> folder or resume=auto",
        )
    if Path(str(resume)).resolve() != run_dir.resolve():  # pragma: no cover - the resolver guarantees it
        raise ConfigError("resume", resume, f"resolved to another folder ({run_dir})")
