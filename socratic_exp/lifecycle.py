"""A run's lifecycle around its data path: what Hydra says about the job, the process's guards (signals, secrets),
validation and resume checks, the tracker's run, and how every failure ends (``summary.json`` says ``failed`` or
``interrupted`` with the error, one line on stderr says what went wrong, and the exit code)."""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
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
from omegaconf import DictConfig, OmegaConf

from socratic_exp import distributed
from socratic_exp.assembly import GROUPS, Components, build_components
from socratic_exp.console import filter_dependency_noise, say_last
from socratic_exp.errors import NO_VALUE, ConfigError, UserError, file_system_error
from socratic_exp.hydra_support import config_dir, sweeps_dir, typed_key
from socratic_exp.loggers.base import RunInfo
from socratic_exp.requirements import check_requirements
from socratic_exp.run_folder import DAMAGED, FolderRefused, RunRecord, is_run_folder, json_ready
from socratic_exp.secrets import protect_command_line, redact, redact_overrides

if TYPE_CHECKING:
    from socratic_exp.console import ProgressDisplay
    from socratic_exp.loggers.base import Logger
    from socratic_exp.teachers.base import Teacher


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
def closed_on_failure(display: ProgressDisplay, tracker: Logger | None, teacher: Teacher) -> Iterator[None]:
    """A run that fails within closes its progress display and its tracker's run (exit code 1); the teacher
    (its server, its threads) is closed either way."""
    try:
        yield
    except BaseException:
        display.close()
        if tracker is not None:
            tracker.finish(exit_code=1)
        raise
    finally:
        teacher.close()


def validate(cfg: DictConfig, job: Job) -> Components:
    """The run's components, built from ``cfg`` (which validates every option; an error names the key the user
    typed), with ``resume=`` checked."""
    check_top_level_keys(cfg, job)
    try:
        components = build_components(cfg, job.choices)
        check_requirements(cfg, components, wait_for_servers=not cfg.get("dry_run"))  # of the machine, its files
    except ConfigError as err:
        raise with_origin(as_typed(err, cfg), job) from None
    check_resume(cfg, job.run_dir, job.multirun)
    return components


def check_top_level_keys(cfg: DictConfig, job: Job) -> None:
    """A top-level key that neither ``conf/config.yaml``, a config group nor an overlay in use has can only come
    from a ``+key=value`` override (Hydra refuses it without ``+``): a typo that would otherwise be carried along
    unread while the run trains on its defaults."""
    known = set(OmegaConf.load(config_dir() / "config.yaml")) | {p.name for p in config_dir().iterdir() if p.is_dir()}
    for group, option in job.overlays.items():
        path = sweeps_dir() / f"{option}.yaml" if group == "sweep" else config_dir() / group / f"{option}.yaml"
        known |= set(OmegaConf.load(path)) if path.is_file() else set()
    for key in cfg:
        if key not in known:
            raise ConfigError(
                str(key), NO_VALUE, "unknown key: no setting or option has it",
                f"check its spelling (python -m socratic_exp --help lists the keys), or drop +{key}",
            )  # fmt: skip


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


def with_origin(err: ConfigError, job: Job) -> ConfigError:
    """``err`` about a key the command line never set, with the overlay that set it (``experiment=``, ``+sweep=``,
    ``+variant=``, ...): its fix is there, not on the command line."""
    typed = {o.split("=", 1)[0].lstrip("+~") for o in job.overrides}
    if err.key in typed:
        return err
    for group, option in job.overlays.items():
        shown = f"sweeps/{option}.yaml" if group == "sweep" else f"conf/{group}/{option}.yaml"
        path = (sweeps_dir() if group == "sweep" else config_dir() / group) / f"{option}.yaml"
        data = OmegaConf.load(path) if path.is_file() else OmegaConf.create()
        if OmegaConf.select(data, err.key, default=_UNSET) is not _UNSET:
            where = f"{group}={option} sets it ({shown})"
            fix = err.fix
            if err.value is NO_VALUE:  # an unknown key: removing it from the command line is no fix
                fix = f"it does not apply to the options now chosen: choose options it fits, or drop it from {shown}"
            return ConfigError(err.key, err.value, f"{err.message.split(': ', 1)[-1]}; {where}", fix)
    return err


_UNSET = object()


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


# What may change when a run resumes (our reading: when it stops, how it logs, saves and evaluates on the way, and
# where its servers and caches are); any other setting defines the experiment. Patterns over the config's keys.
RESUMABLE_KEYS = (
    "resume", "dry_run", "verbose", "objective", "save_final_model", "axes.*", "logger.*",
    "eval.every_steps", "eval.batch_size",
    "algorithm.max_steps", "algorithm.logging_steps", "algorithm.save_steps", "algorithm.save_total_limit",
    "algorithm.log_completions", "algorithm.num_completions_to_print",
    "algorithm.trl_args.vllm_server_*", "algorithm.trl_args.report_to", "algorithm.trl_args.dataloader_num_workers",
    "model.cache_dir", "teacher.cache_dir", "teacher.base_url", "teacher.api_key_env", "teacher.max_concurrency",
    "teacher.timeout_s", "teacher.max_retries", "teacher.backoff_s", "teacher.backoff_max_s", "teacher.check_server",
    "teacher.log_samples",
)  # fmt: skip
SHOWN_DIFFERENCES = 6


def check_run_folder(record: RunRecord, job: Job) -> None:
    """A run goes on in a folder with a record only when that record is readable, not completed, and of the same
    experiment: every setting but ``RESUMABLE_KEYS`` as it was (the config groups' options compared first, so that
    another algorithm over a run is named as such). Raises ``FolderRefused`` in one line otherwise;
    nothing in the folder has been rewritten yet."""
    previous = record.previous
    if previous.get("status") == DAMAGED:  # its record is not readable: nothing to resume from, kept as is
        raise FolderRefused(previous["error"]["message"], previous["error"]["fix"])
    fresh = "drop resume= (and $SOCRATIC_EXP_RUN_DIR) to start a fresh run"
    if previous.get("status") == "completed":
        objective = previous.get("objective")
        shown = f"{objective:.4f}" if isinstance(objective, float) else objective
        completed = f"{job.run_dir} holds a completed run (objective {shown}); a new run does not overwrite it"
        raise FolderRefused(completed, fresh)
    if not previous.get("config"):
        return
    differences = experiment_differences(job.run_dir, previous["config"], record.data["config"], job.choices)
    if differences:
        more = len(differences) - SHOWN_DIFFERENCES
        listed = ", ".join(differences[:SHOWN_DIFFERENCES]) + (f" and {more} more" if more > 0 else "")
        launched = " ".join(previous.get("overrides") or []) or "no overrides"
        raise FolderRefused(
            f"{job.run_dir} holds another experiment: {listed}",
            f"resume it with the settings it was launched with ({launched}; only how long it runs, how it logs, saves "
            f"and evaluates, and where its servers and caches are may change), or {fresh}",
        )


def experiment_differences(
    run_dir: Path, before: dict[str, Any], now: dict[str, Any], choices: dict[str, str]
) -> list[str]:
    """The settings that differ between a folder's run and this one, ``RESUMABLE_KEYS`` aside: a config group's
    changed option as ``algorithm: <before> -> <now>`` (its keys then go unlisted), else ``key: old -> new``."""
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    launched = OmegaConf.load(hydra_file).hydra.runtime.choices if hydra_file.is_file() else {}
    changed_groups = [g for g, option in choices.items() if g in launched and str(launched[g]) != option]
    found = [f"{g}: {launched[g]} -> {choices[g]}" for g in changed_groups if not _resumable(g)]
    flat_before, flat_now = _flat(before), _flat(json_ready(redact(now)))
    for key in sorted(flat_before.keys() | flat_now.keys()):
        if _resumable(key) or key.split(".", 1)[0] in changed_groups:
            continue
        old, new = flat_before.get(key, "(unset)"), flat_now.get(key, "(unset)")
        if old != new:
            found.append(f"{key}: {old!r} -> {new!r}"[:120])
    return found


def _resumable(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in RESUMABLE_KEYS)


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict) or not data:
        return {prefix[:-1]: data} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(_flat(value, f"{prefix}{key}."))
    return flat


def start_tracker(
    cfg: DictConfig, components: Components, job: Job, record: RunRecord, name: str, checkpoint: Any
) -> None:
    """Open the tracker's run (W&B), resumed where ``checkpoint`` left it; its id, name and group go into
    ``summary.json``. In a sweep, the group is the sweep's name (``+sweep=<name>``, else its launch) and the config's
    ``sweep`` block names the launch and the job's overrides, for reports to filter and group by."""
    from socratic_exp.callbacks import tracker_position

    group = None
    config = redact(OmegaConf.to_container(cfg, resolve=True))
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
