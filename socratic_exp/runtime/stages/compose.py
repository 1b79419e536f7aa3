"""Stage 1 of a run: the composed config validated into components (an error names the key the user typed), what the
setting needs of the machine checked, and the run folder checked (``resume``, an earlier run's experiment) before
anything in it is rewritten."""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from socratic_exp.core.config import config_dir, sweeps_dir, typed_key
from socratic_exp.core.errors import NO_VALUE, ConfigError
from socratic_exp.core.run_folder import DAMAGED, FolderRefused, RunRecord, is_run_folder, json_ready
from socratic_exp.core.secrets import redact
from socratic_exp.runtime.assembly import Components, build_components
from socratic_exp.runtime.requirements import check_requirements

if TYPE_CHECKING:
    from socratic_exp.runtime.lifecycle import Job


def compose_and_validate(cfg: DictConfig, config: dict[str, Any], job: Job) -> tuple[Components, RunRecord]:
    """Stage 1: the components built from ``cfg`` and checked (``validate``), and the run folder's record; nothing in
    the folder is rewritten before it passes ``check_run_folder`` (a dry run checks it too). A sweep's job that has
    completed already (a resumed sweep) has nothing left to check."""
    components = validate(cfg, job)
    record = RunRecord(job.run_dir, config, job.overrides, writes=job.is_main)
    if not finished_in_sweep(record, job):
        check_run_folder(record, job)
    return components, record


def finished_in_sweep(record: RunRecord, job: Job) -> bool:
    return job.multirun and record.previous.get("status") == "completed"


def validate(cfg: DictConfig, job: Job) -> Components:
    """The run's components, built from ``cfg`` (which validates every option; an error names the key the user
    typed), with ``resume=`` checked."""
    check_top_level_keys(cfg, job)
    with reported_where_typed(cfg, job):
        components = build_components(cfg, job.choices)
        check_requirements(cfg, components, wait_for_servers=not cfg.get("dry_run"))  # of the machine, its files
    check_resume(cfg, job.run_dir, job.multirun)
    return components


@contextlib.contextmanager
def reported_where_typed(cfg: DictConfig, job: Job) -> Iterator[None]:
    """A ``ConfigError`` raised within, reported under the key the user typed and with the overlay that set it."""
    try:
        yield
    except ConfigError as err:
        raise with_origin(as_typed(err, cfg), job) from None


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
