"""The local sweep launcher (``hydra/launcher=local``, the default for ``-m``): every job in a fresh process.

Hydra's joblib launcher (``hydra-joblib-launcher``) runs jobs in a pool of loky worker processes that are reused:
a worker's second job inherits the first one's memory, CUDA context, W&B state and imported modules, and a
worker that dies (out of memory, a segfault in a kernel) raises ``TerminatedWorkerError`` and stops the whole
sweep. Here joblib's ``Parallel`` still schedules ``n_jobs`` jobs at a time, but each job runs in a new Python
process started for it, which receives the job exactly as the joblib launcher sends it (cloudpickle) and runs the
joblib launcher's own ``execute_job`` (``processes``: the job's process, or its multi-process launch). The process
is given its environment before anything imports torch: ``threads_per_job`` CPU threads (default: the cores divided
by ``n_jobs``, so parallel jobs do not oversubscribe the cores) and, where GPUs exist, its own ``gpus_per_job`` GPUs
through ``CUDA_VISIBLE_DEVICES``.

A job whose process dies is marked ``failed`` in its ``summary.json`` and the others go on; a job whose sweep
process dies is interrupted (``orphans.interrupt_when_orphaned``), so no job outlives its sweep. A job whose folder
already holds a completed run with the same overrides is skipped (``job_folders``), so re-running a sweep into its
folder (``resume=<sweep folder>``, ``resume=auto`` or ``hydra.sweep.dir=<folder>``) runs only what is left.

Every setting is checked before any job starts (``local_settings``): a bad value is one line naming
``hydra.launcher.<key>=<value>``, its range and the fix. A secret given on the command line reaches each job through
the job's environment, never through a file it reads (``job_secrets.JobFiles``).
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socratic_exp.core.secrets import redact_overrides, scrub_hydra_files
from socratic_exp.multirun.job_folders import (
    SweepFolderConflict,
    check_sweep_folder,
    completed_run,
    job_return_for,
    mark_dead,
    outcome_of,
)
from socratic_exp.multirun.job_secrets import JobFiles, sweep_secrets
from socratic_exp.multirun.processes import (
    THREAD_VARIABLES,
    FreePorts,
    ProcessLaunch,
    check_installed,
    process_launch,
    run_job_processes,
    threads_per_process,
)
from socratic_exp.multirun.settings import SETTINGS, LauncherSettingError, environment_threads, seconds, whole_number

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalSettings:
    """``hydra/launcher=local``'s settings, checked (``local_settings``)."""

    how: ProcessLaunch
    n_jobs: int | None
    threads_per_job: int | None
    gpus_per_job: int | None
    timeout: float | None


def local_settings(launcher: Any) -> LocalSettings:
    """Every setting of the local launcher, and the environment it reads (``$OMP_NUM_THREADS``), checked before any
    job starts: a bad value is one line (``LauncherSettingError``) naming the key, its value, the range and the fix."""
    environment_threads()
    return LocalSettings(
        how=process_launch(launcher.processes_per_job, launcher.accelerate_config, launcher.gpus_per_job),
        n_jobs=whole_number("n_jobs", launcher.n_jobs, *SETTINGS["n_jobs"]),
        threads_per_job=whole_number("threads_per_job", launcher.threads_per_job, *SETTINGS["threads_per_job"]),
        gpus_per_job=whole_number("gpus_per_job", launcher.gpus_per_job, *SETTINGS["gpus_per_job"]),
        timeout=seconds("timeout", launcher.timeout, "hydra.launcher.timeout=<seconds for the whole sweep>, or null"),
    )


def visible_gpus() -> list[str]:
    """The GPUs this machine shows, without importing torch: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi``."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [gpu.strip() for gpu in listed.split(",") if gpu.strip() and gpu.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        names = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in names.splitlines() if line.startswith("GPU "))]


def gpu_slots(gpus: list[str], gpus_per_job: int) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` values, one per concurrent job: disjoint groups of ``gpus_per_job`` GPUs."""
    if gpus_per_job <= 0 or not gpus:
        return []
    return [",".join(gpus[i : i + gpus_per_job]) for i in range(0, len(gpus) - gpus_per_job + 1, gpus_per_job)]


def threads_per_job(n_jobs: int, requested: int | None) -> int:
    """CPU threads for each job: as requested, else the caller's ``OMP_NUM_THREADS``, else the cores / ``n_jobs``."""
    if requested:
        return requested
    from_environment = environment_threads()
    if from_environment is not None:
        return from_environment
    return max(1, (os.cpu_count() or 1) // n_jobs)


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
    """Run the jobs ``n_jobs`` at a time, each in its own process (or its own multi-process launch); returns
    Hydra's ``JobReturn`` for each."""
    from hydra.core.utils import configure_log, setup_globals
    from joblib import Parallel, delayed

    setup_globals()
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    settings, jobs = checked_jobs(launcher, sweep_dir, job_overrides, initial_job_idx)
    slots = job_gpu_slots(launcher, settings)
    n_jobs = settings.n_jobs or max(1, len(slots))
    runner = LocalJobs(sweep_dir, settings.how, jobs, initial_job_idx, len(job_overrides), slots,
                       threads_per_job(n_jobs, settings.threads_per_job))  # fmt: skip
    log.info(f"Launching {len(job_overrides)} jobs, {n_jobs} at a time, {runner.shape()}; sweep folder {sweep_dir}")
    return Parallel(n_jobs=n_jobs, backend="threading", timeout=settings.timeout)(
        delayed(runner.run)(initial_job_idx + i, overrides) for i, overrides in enumerate(job_overrides)
    )


def checked_jobs(
    launcher: Any, sweep_dir: Path, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> tuple[LocalSettings, JobFiles]:
    """The launcher's settings and the jobs' files, once the settings, the tools and the sweep folder are checked
    (a fault ends the launch in one line); the secrets of the command line scrubbed from Hydra's files."""
    # multirun.yaml holds the command line: a secret given there must not stay in it
    secrets = sweep_secrets(launcher.config, job_overrides)
    scrub_hydra_files(sweep_dir, secrets)
    try:
        settings = local_settings(launcher)
        check_installed(settings.how)
        check_sweep_folder(sweep_dir, job_overrides, initial_job_idx)
        return settings, JobFiles.of(launcher, job_overrides, initial_job_idx, secrets)
    except (LauncherSettingError, SweepFolderConflict) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def job_gpu_slots(launcher: Any, settings: LocalSettings) -> list[str]:
    """The GPU slots the jobs take turns on (``CUDA_VISIBLE_DEVICES`` values; none without GPUs); a multi-process
    job that would put two ranks on one GPU ends the launch in one line."""
    how = settings.how
    gpus_per_job = how.processes if settings.gpus_per_job is None else settings.gpus_per_job
    gpus = visible_gpus()
    if how.distributed and gpus and len(gpus) < gpus_per_job:  # the ranks would share a GPU: NCCL refuses
        key = "processes_per_job" if gpus_per_job == how.processes else "gpus_per_job"  # the one that asks for more
        print(f"error: hydra.launcher.{key}={getattr(launcher, key)}: this machine shows {len(gpus)} GPU(s), fewer "
              f"than a job's {gpus_per_job} (fix: hydra.launcher.processes_per_job={len(gpus)}; or, for processes on "
              "CPU, hydra.launcher.gpus_per_job=0 with +algorithm.trl_args.use_cpu=true)", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    return gpu_slots(gpus, gpus_per_job)


class LocalJobs:
    """The jobs of one local launch, run by joblib's threads: each takes a free GPU slot (if any), runs in its own
    process or multi-process launch, and reports its outcome as Hydra's ``JobReturn``; a job completed in an earlier
    launch is skipped."""

    def __init__(self, sweep_dir: Path, how: ProcessLaunch, jobs: JobFiles, first_index: int, total: int,
                 slots: list[str], threads: int) -> None:  # fmt: skip
        self.sweep_dir, self.how, self.jobs, self.first_index, self.total = sweep_dir, how, jobs, first_index, total
        self.slots, self.threads = slots, threads
        self.free_gpus: queue.Queue[str] = queue.Queue()
        for slot in slots:
            self.free_gpus.put(slot)
        self.done = 0
        self.progress = threading.Lock()
        self.start_lock = threading.Lock()
        self.ports = FreePorts()

    def shape(self) -> str:
        """How each job runs, for the launch's first line."""
        how, gpus_per_job = self.how, len(self.slots[0].split(",")) if self.slots else 0
        gpu_note = f", GPUs {len(self.slots)} slots of {gpus_per_job}" if self.slots else ", no GPU"
        if how.distributed:
            return (f"each launched by {how.tool}: {how.processes} processes with "
                    f"{threads_per_process(self.threads, how.processes)} CPU thread(s) each{gpu_note}")  # fmt: skip
        return f"each in its own process with {self.threads} CPU thread(s){gpu_note}"

    def run(self, index: int, overrides: Sequence[str]) -> Any:
        from hydra.core.utils import JobReturn, JobStatus, filter_overrides

        job_dir = self.sweep_dir / str(index)
        shown = " ".join(redact_overrides(filter_overrides(overrides)))
        previous = completed_run(job_dir, overrides)
        if previous is not None:
            log.info(f"#{index} : {shown}: completed in an earlier launch, skipped")
            return job_return_for(JobReturn, JobStatus, overrides, job_dir, previous.get("objective"))
        gpu = self.free_gpus.get() if self.slots else None
        started = time.perf_counter()
        try:
            environment = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(self.threads)), **self.jobs.variables}
            if gpu is not None:
                environment["CUDA_VISIBLE_DEVICES"] = gpu
            log.info(f"#{index} : {shown}" + (f" (GPU {gpu})" if gpu is not None else ""))
            payload = self.jobs.payloads[index - self.first_index]
            result, returncode, reported = run_job_processes(
                payload, environment, self.how, job_dir, self.start_lock, self.ports
            )
        finally:
            if gpu is not None:
                self.free_gpus.put(gpu)
        if result is None:  # the process died before it could report: the job failed, the sweep goes on
            mark_dead(job_dir, overrides, returncode, self.how)
            result = job_return_for(JobReturn, JobStatus, overrides, job_dir, None)
        ranks = f", {reported} of {self.how.processes} processes finished" if self.how.distributed else ""
        with self.progress:
            self.done += 1
            log.info(f"#{index} {outcome_of(job_dir)} in {time.perf_counter() - started:.0f} s{ranks} "
                     f"({self.done} of {self.total} done)")  # fmt: skip
        return result
