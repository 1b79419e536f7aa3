"""The SLURM path (``hydra/launcher=slurm``, hydra-submitit-launcher's jobs through
``hydra_plugins/socratic_exp_launcher/submitit_launcher.py``): its settings checked before anything is submitted
(``check_submitit_job``), and a job of several processes run in its one SLURM task as a launch on the task's node
(``run_submitted_job``), its CPUs (``task_cpus``) split among the processes, as the local launcher does."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from socratic_exp.multirun.job_folders import job_return_for, mark_dead, mark_failed, outcome_of
from socratic_exp.multirun.processes import (
    THREAD_VARIABLES,
    FreePorts,
    ProcessLaunch,
    process_launch,
    run_job_processes,
)
from socratic_exp.multirun.settings import SETTINGS, LauncherSettingError, environment_threads, whole_number


def check_submitit_job(processes: Any, accelerate_config: Any, params: dict[str, Any]) -> ProcessLaunch:
    """``hydra/launcher=slurm``'s settings for a multi-process job, checked before anything is submitted: the job's
    ranks are started inside its one SLURM task on one node, one GPU each. Every numeric setting (``timeout_min``,
    ``cpus_per_task``, ...) and ``$OMP_NUM_THREADS``, which the jobs inherit, are checked too."""
    environment_threads()
    for key, value in params.items():
        if key in SETTINGS:
            whole_number(key, value, *SETTINGS[key])
    how = process_launch(processes, accelerate_config)
    if not how.distributed:
        return how
    for key, fix in (("nodes", "a run over several nodes: launch/slurm/multinode.sbatch"),
                     ("tasks_per_node", "the launch tool starts the processes")):  # fmt: skip
        if params.get(key, 1) != 1:
            raise LauncherSettingError(
                f"hydra.launcher.{key}={params[key]}: a job of {how.processes} processes runs as one SLURM task on "
                f"one node, started by {how.tool} (fix: hydra.launcher.{key}=1; {fix})"
            )
    gpus = params.get("gpus_per_node")
    if gpus and gpus < how.processes:
        raise LauncherSettingError(
            f"hydra.launcher.gpus_per_node={gpus}: each of a job's {how.processes} processes needs a GPU of its own "
            f"(fix: hydra.launcher.gpus_per_node={how.processes}, or leave it unset)"
        )
    return how


def run_submitted_job(launcher: Any, how: ProcessLaunch, overrides: Sequence[str], index: int, state: Any) -> Any:
    """A submitit job (a SLURM task) whose work is a launch of ``how.processes`` processes on its node's GPUs (those
    SLURM made visible) and CPUs (``cpus_per_task``, split among the processes); returns rank 0's JobReturn."""
    import cloudpickle
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobReturn, JobStatus, setup_globals

    from socratic_exp.core.config import register_resolvers

    setup_globals()  # as the plugin's own job does: Hydra's resolvers (``now``) and ours, for the job's folder
    register_resolvers()
    Singleton.set_state(state)
    config = launcher.config
    job_dir = Path(str(config.hydra.sweep.dir)) / str(index)
    try:
        cpus = task_cpus()
    except LauncherSettingError as err:  # the job cannot start: it fails, with the line that says why
        print(f"error: {err}", file=sys.stderr, flush=True)
        mark_failed(job_dir, overrides, "LauncherSettingError", str(err))
        return job_return_for(JobReturn, JobStatus, overrides, job_dir, None)
    environment = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(cpus))}
    payload = (index, list(overrides), launcher.hydra_context, config, launcher.task_function, state)
    started = time.perf_counter()
    result, returncode, reported = run_job_processes(
        cloudpickle.dumps(payload), environment, how, job_dir, threading.Lock(), FreePorts()
    )
    if result is None:
        mark_dead(job_dir, overrides, returncode, how)
        result = job_return_for(JobReturn, JobStatus, overrides, job_dir, None)
    # the task's output is its SLURM log file (no logging is configured in this process)
    print(f"#{index} {outcome_of(job_dir)} in {time.perf_counter() - started:.0f} s, {reported} of "
          f"{how.processes} processes finished", flush=True)  # fmt: skip
    return result


def task_cpus() -> int:
    """A SLURM task's CPU cores, to share among its job's processes: ``$SLURM_CPUS_PER_TASK`` (SLURM sets it from
    ``cpus_per_task``), else ``$OMP_NUM_THREADS``, else the machine's cores."""
    value = os.environ.get("SLURM_CPUS_PER_TASK", "").strip()
    if not value:
        return environment_threads() or os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise LauncherSettingError(
            f"SLURM_CPUS_PER_TASK={value}: must be a whole number of CPU cores >= 1 (fix: set "
            "hydra.launcher.cpus_per_task=<cores per job>, from which SLURM sets it)"
        )
    return int(value)
