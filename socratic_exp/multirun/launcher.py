"""The local sweep launcher (``hydra/launcher=local``, the default for ``-m``): every job in a fresh process.

Hydra's joblib launcher (``hydra-joblib-launcher``) runs jobs in a pool of loky worker processes that are reused:
a worker's second job inherits the first one's memory, CUDA context, W&B state and imported modules, and a
worker that dies (out of memory, a segfault in a kernel) raises ``TerminatedWorkerError`` and stops the whole
sweep. Here joblib's ``Parallel`` still schedules ``n_jobs`` jobs at a time, but each job runs in a new Python
process started for it, which receives the job exactly as the joblib launcher sends it (cloudpickle) and runs the
joblib launcher's own ``execute_job``. The process is given its environment before anything imports torch:
``threads_per_job`` CPU threads (default: the cores divided by ``n_jobs``, so parallel jobs do not oversubscribe
the cores) and, where GPUs exist, its own ``gpus_per_job`` GPUs through ``CUDA_VISIBLE_DEVICES``.

A job whose process dies is marked ``failed`` in its ``summary.json`` and the others go on; a job whose sweep
process dies is interrupted (``interrupt_when_orphaned``), so no job outlives its sweep. A job whose folder
already holds a completed run with the same overrides is skipped, so re-running a sweep into its folder
(``resume=<sweep folder>``, ``resume=auto`` or ``hydra.sweep.dir=<folder>``) runs only what is left.

A job can itself be several processes (``processes_per_job``, ``accelerate_config``): it is then started as a
single-machine distributed launch, ``torchrun`` or ``accelerate launch --config_file``, of the same job entry, and
every rank runs the same pickled job. So every rank gets the job's folder, its overrides and Hydra's MULTIRUN mode,
exactly as a one-process job does (launching ``python -m socratic_exp <overrides>`` instead would make each job a
single run: no sweep block in its W&B config, and ``resume=<sweep folder>`` refused as not a run folder). Rank 0's
return value is the job's; each rank also reports that it finished, so the end line says how many did. Each job gets
a free rendezvous port (parallel jobs would all take torchrun's 29500), its share of the threads split among its
processes, ``SOCRATIC_EXP_RUN_DIR`` set to its folder, and its launch's output in ``<job folder>/launch.log`` (the
ranks of parallel jobs would interleave on the console). The ranks end when the sweep process does, not only when
their own parent (the launch tool, which outlives a killed sweep) does.

Every setting is checked before any job starts (``local_settings``; a SLURM sweep's before anything is submitted,
``check_submitit_job``): a bad value is one line naming ``hydra.launcher.<key>=<value>``, its range and the fix. A
secret given on the command line reaches each job through the job's environment, never through a file it reads
(``JobFiles``, ``submitted_without_secrets``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socratic_exp.core.config import RUN_DIR_ENV, comparable_overrides
from socratic_exp.core.run_folder import read_summary, write_json_atomic
from socratic_exp.core.secrets import (
    config_through_environment,
    leaked_secrets,
    protect_console,
    redact_overrides,
    scrub_hydra_files,
    secret_values,
    singleton_state_through_environment,
    through_environment,
)

log = logging.getLogger(__name__)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
CHILD_ENTRY = "from socratic_exp.multirun.launcher import child_main; child_main()"
CHILD_MODULE = "socratic_exp.multirun.launcher"  # the same entry for torchrun / accelerate launch, which take a module
LAUNCHER_PID_ENV = "SOCRATIC_EXP_SWEEP_PID"  # the process that started the job: its ranks end when it does
LAUNCH_LOG = "launch.log"  # a multi-process job's launch output (every rank's console) in its folder
CHECKOUT = Path(__file__).resolve().parents[2]  # where launch/accelerate/ lives in a checkout


class SweepFolderConflict(RuntimeError):
    """The sweep folder holds jobs launched with other overrides: resuming into it would mix two grids."""


class LauncherSettingError(ValueError):
    """A ``hydra.launcher`` setting that cannot work; its message is one line naming the key and the fix."""


@dataclass(frozen=True)
class ProcessLaunch:
    """How each job's processes start: one plain process, or a single-machine distributed launch of ``processes``
    ranks, through ``accelerate launch --config_file <accelerate_config>`` when a profile is given (DeepSpeed and FSDP
    need accelerate's launcher) and else through ``torchrun`` (DDP on the job's GPUs, gloo on CPU)."""

    processes: int = 1
    accelerate_config: Path | None = None

    @property
    def distributed(self) -> bool:
        return self.processes > 1 or self.accelerate_config is not None

    @property
    def tool(self) -> str:
        return "accelerate launch" if self.accelerate_config else "torchrun" if self.distributed else "python"

    def command(self, job_file: Path, results: Path, port: int, threads: int) -> list[str]:
        """The command that runs the job: every process runs ``child_main`` on the same job file."""
        entry = [str(job_file), str(results)]
        if not self.distributed:
            return [sys.executable, "-c", CHILD_ENTRY, *entry]
        if self.accelerate_config is not None:
            return [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch",
                    "--config_file", str(self.accelerate_config), "--num_machines", "1",
                    "--num_processes", str(self.processes), "--main_process_port", str(port),
                    "--num_cpu_threads_per_process", str(threads), "-m", CHILD_MODULE, *entry]  # fmt: skip
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
                str(self.processes), "--master_addr", "127.0.0.1", "--master_port", str(port),
                "-m", CHILD_MODULE, *entry]  # fmt: skip


def process_launch(processes: Any, accelerate_config: Any, gpus_per_job: Any = None) -> ProcessLaunch:
    """The launcher's ``processes_per_job`` / ``accelerate_config`` (/ ``gpus_per_job``) checked before any job
    starts: a bad value is one line naming the key and the fix, not a failure in every job."""
    processes = whole_number("processes_per_job", processes, *SETTINGS["processes_per_job"])
    gpus_per_job = whole_number("gpus_per_job", gpus_per_job, *SETTINGS["gpus_per_job"])
    if gpus_per_job is not None and 0 < gpus_per_job < processes:
        raise LauncherSettingError(
            f"hydra.launcher.gpus_per_job={gpus_per_job}: each of a job's {processes} processes needs a GPU of its "
            f"own (fix: hydra.launcher.gpus_per_job={processes}, or leave it unset)"
        )
    if accelerate_config in (None, ""):
        return ProcessLaunch(processes)
    return ProcessLaunch(processes, find_accelerate_config(str(accelerate_config)))


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


def check_installed(how: ProcessLaunch) -> None:
    """Jobs launched on this machine under a DeepSpeed profile find deepspeed installed (a SLURM sweep's jobs run
    elsewhere: their own start checks it, ``requirements.check_requirements``)."""
    import yaml

    profile = how.accelerate_config
    uses = str(yaml.safe_load(profile.read_text()).get("distributed_type", "")).upper() if profile else ""
    if uses == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        shown = profile.relative_to(CHECKOUT) if profile.is_relative_to(CHECKOUT) else profile  # type: ignore[union-attr]
        raise LauncherSettingError(
            f"hydra.launcher.accelerate_config={shown}: uses DeepSpeed, which is not installed (fix: "
            'pip install -e ".[deepspeed]", or a profile without it, e.g. launch/accelerate/ddp.yaml)'
        )


def find_accelerate_config(value: str) -> Path:
    """An accelerate profile: a file, relative to the working folder or else to the checkout (``launch/accelerate/
    ddp.yaml`` then works from any folder)."""
    path = Path(value).expanduser()
    for candidate in (path,) if path.is_absolute() else (path, CHECKOUT / path):
        if candidate.is_file():
            return candidate.resolve()
    shipped = ", ".join(
        f"launch/accelerate/{p.name}" for p in sorted((CHECKOUT / "launch" / "accelerate").glob("*.yaml"))
    )
    raise LauncherSettingError(
        f"hydra.launcher.accelerate_config={value}: no such file (fix: an accelerate config file, e.g. "
        f"{shipped or 'one written by accelerate config'}; or leave it unset to launch with torchrun)"
    )


class FreePorts:
    """Rendezvous ports for the jobs' launches, none handed out twice in one sweep (parallel jobs would all take
    torchrun's and accelerate's default 29500 and fail, or worse, join each other)."""

    def __init__(self) -> None:
        self.given: set[int] = set()
        self.lock = threading.Lock()

    def take(self) -> int:
        with self.lock:
            while True:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", 0))
                    port = probe.getsockname()[1]
                if port not in self.given:
                    self.given.add(port)
                    return port


def threads_per_process(threads: int, processes: int) -> int:
    """A job's CPU threads shared among its processes (at least one each)."""
    return max(1, threads // processes)


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


def completed_run(job_dir: Path, overrides: Sequence[str]) -> dict[str, Any] | None:
    """The summary of a completed run in ``job_dir`` launched with ``overrides`` (``resume`` aside; secrets are
    compared redacted, as the summary keeps them), else None."""
    summary = read_summary(job_dir)
    if not summary:
        return None
    same = comparable_overrides(summary.get("overrides", [])) == comparable_overrides(redact_overrides(list(overrides)))
    return summary if same and summary.get("status") == "completed" else None


def check_sweep_folder(sweep_dir: Path, jobs: Sequence[Sequence[str]], first_index: int) -> None:
    """Refuse to launch into a folder whose job folders were made by another grid (job N must be the same job)."""
    from omegaconf import OmegaConf

    for index, overrides in enumerate(jobs, start=first_index):
        earlier = sweep_dir / str(index) / ".hydra" / "overrides.yaml"
        if not earlier.is_file():
            continue
        before = comparable_overrides([str(o) for o in OmegaConf.load(earlier)])
        wanted = comparable_overrides(redact_overrides(list(overrides)))  # Hydra's copy has secrets redacted
        if before != wanted:
            raise SweepFolderConflict(
                f"{sweep_dir}/{index} was launched with {' '.join(before) or '(no overrides)'}, this sweep's job "
                f"{index} is {' '.join(wanted)} (fix: re-run the same grid to resume "
                "it, or start a new sweep folder)"
            )


def mark_dead(job_dir: Path, overrides: Sequence[str], returncode: int, how: ProcessLaunch | None = None) -> None:
    """Record a job whose process ended without reporting (killed, out of memory, crashed) as failed; a
    multi-process job's message points to its launch's output."""
    reason = f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit code {returncode}"
    message = f"the job's process ended without finishing ({reason})"
    if how is not None and how.distributed:
        message = f"the job's {how.tool} ended without finishing ({reason}; its output: {job_dir / LAUNCH_LOG})"
    mark_failed(job_dir, overrides, "JobProcessDied", message)


def mark_failed(job_dir: Path, overrides: Sequence[str], kind: str, message: str) -> None:
    """Record a job that did not finish as failed with ``message`` (a completed run stands: it finished its work,
    then died on the way out); a job without a summary gets one, its overrides redacted as a run's own are."""
    summary = read_summary(job_dir) or {"overrides": redact_overrides(list(overrides))}
    if summary.get("status") == "completed":
        return
    summary.update(status="failed", objective=None, error={"type": kind, "message": message})
    job_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(job_dir / "summary.json", summary)


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
            return _job_return(JobReturn, JobStatus, overrides, job_dir, previous.get("objective"))
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
            result = _job_return(JobReturn, JobStatus, overrides, job_dir, None)
        ranks = f", {reported} of {self.how.processes} processes finished" if self.how.distributed else ""
        with self.progress:
            self.done += 1
            log.info(f"#{index} {_outcome_of(job_dir)} in {time.perf_counter() - started:.0f} s{ranks} "
                     f"({self.done} of {self.total} done)")  # fmt: skip
        return result


def sweep_secrets(config: Any, job_overrides: Sequence[Sequence[str]]) -> list[str]:
    """The secrets of a sweep's command line: its jobs' overrides and Hydra's own (``hydra.job.env_set.<VAR>=...``)."""
    from omegaconf import OmegaConf

    hydra_overrides = OmegaConf.select(config, "hydra.overrides.hydra", default=None) or []
    return secret_values([str(o) for o in hydra_overrides] + [o for job in job_overrides for o in job])


@dataclass(frozen=True)
class JobFiles:
    """What each job of a sweep is handed: its pickled payload (the joblib launcher's ``execute_job`` arguments) and
    the environment variables that carry the command line's secrets.

    A payload is written to a file the job reads (here a temporary job file; under SLURM the plugin pickles the same
    things into a submission in the sweep folder), and holds the job's overrides, the sweep's config and Hydra's
    global state, each of which holds the command line. So a secret never goes in: it is written
    ``${oc.env:SOCRATIC_EXP_SECRET_<n>}`` (``secrets.through_environment``) and its value is put in the job's
    environment, where Hydra's ``oc.env`` resolver reads it back as the job composes its config. The job gets the
    same config; the files hold no secret.
    """

    payloads: list[bytes]
    variables: dict[str, str]

    @classmethod
    def of(cls, launcher: Any, jobs: Sequence[Sequence[str]], first_index: int, secrets: list[str]) -> JobFiles:
        """Every job's payload, checked to hold no secret: one that Hydra keeps somewhere the launcher does not clean
        is refused in one line (``LauncherSettingError``), never written."""
        import cloudpickle

        variables: dict[str, str] = {}
        config, state = without_secrets(launcher.config, variables, secrets)
        context, task = launcher.hydra_context, launcher.task_function
        payloads = [
            cloudpickle.dumps((index, through_environment(list(overrides), variables), context, config, task, state))
            for index, overrides in enumerate(jobs, start=first_index)
        ]
        for payload in payloads:
            refuse_leaks(payload, secrets, "its job files")
        return cls(payloads, variables)


def without_secrets(config: Any, variables: dict[str, str], secrets: list[str]) -> tuple[Any, Any]:
    """A sweep's config and Hydra's global state (``Singleton.get_state()``) as its jobs are handed them: without
    ``secrets``, Hydra's own overrides through the environment (``variables`` gets them; see ``JobFiles``)."""
    from hydra.core.singleton import Singleton

    clean = config_through_environment(config, variables, secrets)
    return clean, singleton_state_through_environment(Singleton.get_state(), variables, secrets)


def refuse_leaks(data: bytes, secrets: list[str], where: str) -> None:
    """One line, not a file holding a secret of the command line (``secrets.leaked_secrets``)."""
    if leaked_secrets(data, secrets):
        raise LauncherSettingError(
            f"a secret of the command line would be written into the sweep's files ({where}) (fix: give it through "
            "the environment instead: the variable its setting reads, e.g. HF_TOKEN, WANDB_API_KEY or "
            "teacher.api_key_env=<VARIABLE>)"
        )


def run_job_processes(
    payload: bytes,
    environment: dict[str, str],
    how: ProcessLaunch,
    job_dir: Path,
    start_lock: threading.Lock,
    ports: FreePorts,
) -> tuple[Any, int, int]:
    """Start the job's process(es), each running ``child_main`` on the job in a file; returns (rank 0's JobReturn
    or None, the exit code of the process started, how many processes reported back). A multi-process launch's
    output goes to ``<job folder>/launch.log``; every rank gets ``SOCRATIC_EXP_RUN_DIR`` = the job folder and the
    job's threads split among its processes."""
    import cloudpickle

    with tempfile.TemporaryDirectory(prefix="socratic_exp-job-") as folder:
        job_file, results = Path(folder) / "job.pkl", Path(folder) / "results"
        results.mkdir()
        job_file.write_bytes(payload)
        environment = {**environment, LAUNCHER_PID_ENV: str(os.getpid())}
        output = None
        threads = int(environment.get("OMP_NUM_THREADS") or 1)
        if how.distributed:
            threads = threads_per_process(threads, how.processes)
            environment.update(dict.fromkeys(THREAD_VARIABLES, str(threads)), **{RUN_DIR_ENV: str(job_dir)})
            job_dir.mkdir(parents=True, exist_ok=True)
            output = (job_dir / LAUNCH_LOG).open("ab")
        try:
            command = how.command(job_file, results, ports.take() if how.distributed else 0, threads)
            with start_lock:  # process creation from several threads at once: one at a time
                process = subprocess.Popen(
                    command, env=environment, stdout=output, stderr=subprocess.STDOUT if output else None
                )
            returncode = process.wait()
        finally:
            if output is not None:
                output.close()
        first = results / "rank-0.pkl"
        result = cloudpickle.loads(first.read_bytes()) if first.is_file() else None
        reported = len(list(results.glob("rank-*.pkl")))
    return result, returncode, reported


def child_main() -> None:
    """The job's own process, or each rank of its launch: run the joblib launcher's ``execute_job`` and write its
    JobReturn back, one file per rank (rank 0's is the job's)."""
    import cloudpickle
    from hydra_plugins.hydra_joblib_launcher._core import execute_job

    job_file, results = Path(sys.argv[1]), Path(sys.argv[2])
    protect_console([])  # the job's secrets came in its environment: they reach neither its console nor its logs
    launcher_pid = os.environ.get(LAUNCHER_PID_ENV, "")
    interrupt_when_orphaned(os.getppid(), launcher=int(launcher_pid) if launcher_pid.isdigit() else None)
    result = execute_job(*cloudpickle.loads(job_file.read_bytes()))
    try:
        data = cloudpickle.dumps(result)
    except Exception as err:  # an exception that does not pickle: keep its text
        result.return_value = RuntimeError(f"{type(result.return_value).__name__}: {result.return_value} ({err})")
        data = cloudpickle.dumps(result)
    partial = results / f".rank-{os.environ.get('RANK', '0')}.tmp"
    partial.write_bytes(data)
    os.replace(partial, results / f"rank-{os.environ.get('RANK', '0')}.pkl")  # whole, or absent


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


@contextlib.contextmanager
def submitted_without_secrets(launcher: Any, job_overrides: Sequence[Sequence[str]]) -> Iterator[list[list[str]]]:
    """While hydra-submitit-launcher submits the jobs (it pickles itself, each job's overrides and Hydra's global
    state into ``<sweep folder>/.submitit/``): the launcher's config and Hydra's state without the command line's
    secrets, the jobs' overrides naming them ``${oc.env:SOCRATIC_EXP_SECRET_<n>}``, and the variables in this
    process's environment, which submitit's local executor and ``sbatch`` hand to the jobs (SLURM keeps a job's
    environment to requeue it). Yields the overrides to submit; a secret still in what will be pickled is refused in
    one line (``LauncherSettingError``) before anything is submitted."""
    import cloudpickle
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton

    secrets = sweep_secrets(launcher.config, job_overrides)
    variables: dict[str, str] = {}
    config, state = without_secrets(launcher.config, variables, secrets)
    overrides = [through_environment(list(job), variables) for job in job_overrides]
    hydra_config = HydraConfig.instance()  # the plugin pickles Singleton.get_state(), taken from this one
    sweep_config, hydra_state = launcher.config, hydra_config.cfg
    earlier = {name: os.environ.get(name) for name in variables}
    launcher.config = config
    hydra_config.cfg = getattr(state["instances"].get(HydraConfig), "cfg", hydra_state)
    try:
        refuse_leaks(cloudpickle.dumps((launcher, overrides, Singleton.get_state())), secrets, ".submitit/")
        os.environ.update(variables)
        yield overrides
    finally:
        launcher.config, hydra_config.cfg = sweep_config, hydra_state
        for name, value in earlier.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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
        return _job_return(JobReturn, JobStatus, overrides, job_dir, None)
    environment = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(cpus))}
    payload = (index, list(overrides), launcher.hydra_context, config, launcher.task_function, state)
    started = time.perf_counter()
    result, returncode, reported = run_job_processes(
        cloudpickle.dumps(payload), environment, how, job_dir, threading.Lock(), FreePorts()
    )
    if result is None:
        mark_dead(job_dir, overrides, returncode, how)
        result = _job_return(JobReturn, JobStatus, overrides, job_dir, None)
    # the task's output is its SLURM log file (no logging is configured in this process)
    print(f"#{index} {_outcome_of(job_dir)} in {time.perf_counter() - started:.0f} s, {reported} of "
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


def _job_return(job_return: Any, job_status: Any, overrides: Sequence[str], job_dir: Path, value: Any) -> Any:
    """A JobReturn for a job that did not report one (skipped or died). Completed, so that Hydra's sweeper goes on
    to the other jobs; its ``summary.json`` says what happened, and the sweep's status table and exit code say it."""
    result = job_return(overrides=list(overrides), working_dir=str(job_dir), status=job_status.COMPLETED)
    result.return_value = value
    return result


def _outcome_of(job_dir: Path) -> str:
    """``completed, eval/greedy_acc 0.5500`` / ``failed: <the error>``: the job's end line."""
    summary = read_summary(job_dir)
    if not summary:
        return "ended (no summary)"
    status, objective = summary.get("status", "?"), summary.get("objective")
    if status == "completed" and isinstance(objective, int | float):
        return f"{status}, {(summary.get('config') or {}).get('objective', 'objective')} {objective:.4f}"
    message = (summary.get("error") or {}).get("message")
    return f"{status}: {str(message).splitlines()[0][:160]}" if message else status


if __name__ == "__main__":  # each rank of a multi-process job: torchrun and accelerate launch start a module
    child_main()
