"""The launchers' settings, checked before anything runs: ``hydra/launcher=local``'s before any job starts
(``local.local_settings``), a SLURM sweep's before anything is submitted (``slurm.check_submitit_job``). A bad value
is one line (``LauncherSettingError``) naming ``hydra.launcher.<key>=<value>``, its range and the fix."""

from __future__ import annotations

import contextlib
import os
from typing import Any


class LauncherSettingError(ValueError):
    """A ``hydra.launcher`` setting that cannot work; its message is one line naming the key and the fix."""


# The launchers' numeric settings: (least value, whether null is allowed, the fix). hydra/launcher=local's keys, then
# hydra/launcher=slurm's (hydra-submitit-launcher's): a bad value is refused before any job starts or is submitted.
SETTINGS: dict[str, tuple[int, bool, str]] = {
    "n_jobs": (1, True, "hydra.launcher.n_jobs=<jobs at a time>, or null: one per GPU slot, 1 without GPUs"),
    "threads_per_job": (1, True, "hydra.launcher.threads_per_job=<CPU threads per job>, or null: $OMP_NUM_THREADS"),
    "gpus_per_job": (0, True, "hydra.launcher.gpus_per_job=<GPUs per job> (0: every GPU visible), or null"),
    "processes_per_job": (1, False, "hydra.launcher.processes_per_job=<processes per job>, 1 for one process"),
    "timeout_min": (1, False, "hydra.launcher.timeout_min=<minutes of wall time per job>"),
    "nodes": (1, False, "hydra.launcher.nodes=1; a run over several nodes: launch/slurm/multinode.sbatch"),
    "tasks_per_node": (1, False, "hydra.launcher.tasks_per_node=1: the launch tool starts a job's processes"),
    "cpus_per_task": (1, True, "hydra.launcher.cpus_per_task=<CPU cores per job>, or null: the partition's default"),
    "gpus_per_node": (0, True, "hydra.launcher.gpus_per_node=<GPUs per job>, or null: none asked for"),
    "mem_gb": (0, True, "hydra.launcher.mem_gb=<GB per job> (0: all of the node's), or null: the partition's default"),
    "cpus_per_gpu": (1, True, "hydra.launcher.cpus_per_gpu=<CPU cores per GPU>, or null"),
    "gpus_per_task": (1, True, "hydra.launcher.gpus_per_task=<GPUs per task>, or null"),
    "signal_delay_s": (0, False, "hydra.launcher.signal_delay_s=<seconds of warning before the time limit>"),
    "max_num_timeout": (0, False, "hydra.launcher.max_num_timeout=<requeues after a timeout>, 0 for none"),
    "array_parallelism": (1, False, "hydra.launcher.array_parallelism=<jobs of the array running at once>"),
}


def whole_number(key: str, value: Any, minimum: int, nullable: bool, fix: str) -> int | None:
    """A launcher setting that counts something (``hydra.launcher.<key>``): an integer >= ``minimum`` (a string of
    digits, as ``${oc.env:...}`` gives, counts), or None where ``nullable``; else one line naming the key, its value,
    the allowed range and the fix."""
    if value is None and nullable:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = f"an integer >= {minimum}" + (", or null" if nullable else "")
        raise LauncherSettingError(f"hydra.launcher.{key}={_shown(value)}: must be {allowed} (fix: {fix})")
    return value


def seconds(key: str, value: Any, fix: str) -> float | None:
    """A launcher setting that is a duration in seconds: a number > 0, or None."""
    if value is None:
        return None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise LauncherSettingError(f"hydra.launcher.{key}={_shown(value)}: must be a number of seconds > 0, or "
                                   f"null (fix: {fix})")  # fmt: skip
    return float(value)


def environment_threads() -> int | None:
    """``$OMP_NUM_THREADS`` as a number of threads (None: unset): the local launcher shares it among its jobs, a
    SLURM job's launch among its processes, and every job inherits it."""
    value = os.environ.get("OMP_NUM_THREADS")
    if value is None or not value.strip():
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise LauncherSettingError(
            f"OMP_NUM_THREADS={value}: must be a whole number of CPU threads >= 1 (fix: export OMP_NUM_THREADS="
            "<threads>, or unset it; hydra.launcher.threads_per_job=<threads> sets the jobs' own)"
        )
    return int(value)


def _shown(value: Any) -> str:
    """A setting's value as it is typed on the command line (``true``, ``null``, ``x``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)
