"""A run's lifecycle around its stages: what Hydra says about the job, the process's guards (signals, secrets), the
tracker's run, and how every failure ends (``summary.json`` says ``failed`` or ``interrupted`` with the error, one
line on stderr says what went wrong, and the exit code)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from socratic_exp.core import distributed
from socratic_exp.core.checkpoints import tracker_position
from socratic_exp.core.console import filter_dependency_noise, say_last
from socratic_exp.core.errors import UserError, file_system_error
from socratic_exp.core.run_folder import RunRecord
from socratic_exp.core.secrets import protect_command_line, redact_overrides
from socratic_exp.loggers.base import RunInfo
from socratic_exp.runtime.assembly import GROUPS, Components

if TYPE_CHECKING:
    pass


@dataclasses.dataclass(frozen=True)
class Job:
    """This job as Hydra started it: its run folder, the overrides it was composed with and the option of each
    config group; in a sweep (``-m``) also the sweep's launch (its folder's ``<date>/<time>``) and the job's number."""

    run_dir: Path
    multirun: bool
    overrides: list[str]
    choices: dict[str, str]
    is_main: bool  # the main process speaks for the run; the others only warn
    launch: str | None = None
    number: int | None = None
    overlays: dict[str, str] = dataclasses.field(default_factory=dict)  # e.g. {"experiment": "qwen3_arithmetic"}

    @classmethod
    def current(cls) -> Job:
        hydra_cfg = HydraConfig.get()
        multirun = hydra_cfg.mode == RunMode.MULTIRUN
        choices = {group: str(hydra_cfg.runtime.choices.get(group)) for group in GROUPS}
        if "sweep" in hydra_cfg.runtime.choices:
            choices["sweep"] = str(hydra_cfg.runtime.choices["sweep"])
        sweep_dir = Path(hydra_cfg.sweep.dir) if multirun else None
        overlays = {  # experiment=, debug=, +sweep= and the other overlays: every choice but the components'
            g: str(o) for g, o in hydra_cfg.runtime.choices.items() if o and g not in GROUPS and "hydra" not in g
        }
        return cls(
            run_dir=Path(hydra_cfg.runtime.output_dir),
            multirun=multirun,
            overrides=list(hydra_cfg.overrides.task),
            choices=choices,
            is_main=distributed.is_main(),
            launch=f"{sweep_dir.parent.name}/{sweep_dir.name}" if sweep_dir else None,
            number=hydra_cfg.job.num if multirun else None,
            overlays=overlays,
        )


def guard_process(job: Job) -> None:
    """Before the config is read: the processes other than the main one only warn, the dependencies' noise is
    filtered, and a secret given on the command line reaches no file: Hydra's dumps are scrubbed, and the process's
    own arguments (which W&B records as the run's metadata) lose it before anything else reads them."""
    if not job.is_main:
        logging.getLogger("socratic_exp").setLevel(logging.WARNING)
    filter_dependency_noise()
    protect_command_line(job.overrides, job.run_dir if job.is_main else None)  # the main process scrubs Hydra's dumps


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


def end_failed(job: Job, record: RunRecord | None, config: Any, err: KeyboardInterrupt | Exception) -> None:
    """Record ``err`` (bugs keep their traceback in ``summary.json``), say on stderr what went wrong and end: 130 when
    interrupted, else 2 for the user's error and 1 for a bug; a sweep's failed job returns, so the sweep goes on
    with its other jobs. Called while ``err`` is handled."""
    interrupted = isinstance(err, KeyboardInterrupt)
    # a full disk, a folder that cannot be written, a file in the way: the user's to fix, and the run resumable
    err = file_system_error(err, then=f"resume={job.run_dir}") or err
    unrecorded = None  # why summary.json could not be written (the disk is full): the one line is said anyway
    try:
        if record is None:
            record = RunRecord(
                job.run_dir, config if isinstance(config, dict) else {}, job.overrides, writes=job.is_main
            )
        if not isinstance(err, UserError | KeyboardInterrupt):
            record.data["traceback"] = traceback.format_exc()
        # An attempt that fails before it begins in a folder with a record (a completed, damaged or another
        # experiment's run, or a bad config on resume) leaves that record as it was.
        if record.began or not record.previous:
            record.fail(err, status="interrupted" if interrupted else "failed")
    except OSError as unwritable:
        unrecorded = unwritable.strerror or type(unwritable).__name__
    prefix = "" if job.is_main else f"[rank {distributed.rank()}] "  # the same error from every rank
    if isinstance(err, UserError):
        say_last(f"{prefix}error: {err}")
    elif interrupted:
        say_last(f"interrupted: the run folder {job.run_dir} can be resumed with resume={job.run_dir}", logging.WARNING)
    else:
        first_line = (str(err).strip().splitlines() or [""])[0][:300]
        kept = f"no traceback kept: {unrecorded}" if unrecorded else f"traceback in {job.run_dir / 'summary.json'}"
        say_last(f"{prefix}error: {type(err).__name__}: {first_line} ({kept})")
    if interrupted:
        sys.exit(130)
    if not job.multirun:
        sys.exit(2 if isinstance(err, UserError) else 1)


@contextlib.contextmanager
def closed_on_failure(run: Any) -> Iterator[None]:
    """A run (``runtime.stages.build.Run``) that fails within closes its progress display and its tracker's run (exit
    code 1), as far as it has opened them; the teacher (its server, its threads) is closed either way."""
    try:
        yield
    except BaseException:
        if run.display is not None:
            run.display.close()
        if run.tracker is not None:
            run.tracker.finish(exit_code=1)
        raise
    finally:
        run.components.teacher.close()


def start_tracker(components: Components, job: Job, record: RunRecord, name: str, checkpoint: Any) -> None:
    """Open the tracker's run (W&B) with the config as ``summary.json`` records it (secrets redacted), resumed where
    ``checkpoint`` left it; its id, name and group go into ``summary.json``. In a sweep, the group is the sweep's name
    (``+sweep=<name>``, else its launch) and the config's ``sweep`` block names the launch and the job's overrides,
    for reports to filter and group by."""
    group = None
    config = dict(record.data["config"])  # a copy: the ``sweep`` block is the tracker's alone
    if job.multirun:
        group = components.choices.get("sweep") or job.launch
        overrides = dict(o.split("=", 1) for o in redact_overrides(job.overrides) if "=" in o)
        config["sweep"] = {
            "name": group,
            "launch": job.launch,
            "job": job.number,
            "overrides": {key.lstrip("+~"): value for key, value in overrides.items()},
        }
    info = RunInfo(
        run_dir=job.run_dir,
        name=name,
        group=group,
        job_type=components.choices["algorithm"],
        tags=[f"{g}={v}" for g, v in components.choices.items() if g in GROUPS],
        config=config,
        resume_id=record.data.get("wandb_run_id"),
        resume_position=tracker_position(checkpoint),
    )
    run_id = components.logger.start(info)
    record.update(wandb_run_id=run_id, run_name=name, run_group=group, sweep_launch=job.launch)
