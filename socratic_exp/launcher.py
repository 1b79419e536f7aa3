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
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from socratic_exp.hydra_support import comparable_overrides
from socratic_exp.run_folder import redact_overrides, scrub_hydra_files, secret_values, write_json_atomic

log = logging.getLogger(__name__)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
CHILD_ENTRY = "from socratic_exp.launcher import child_main; child_main()"


class SweepFolderConflict(RuntimeError):
    """The sweep folder holds jobs launched with other overrides: resuming into it would mix two grids."""


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
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return max(1, (os.cpu_count() or 1) // n_jobs)


def completed_run(job_dir: Path, overrides: Sequence[str]) -> dict[str, Any] | None:
    """The summary of a completed run in ``job_dir`` launched with ``overrides`` (``resume`` aside; secrets are
    compared redacted, as the summary keeps them), else None."""
    summary_file = job_dir / "summary.json"
    if not summary_file.is_file():
        return None
    summary = json.loads(summary_file.read_text())
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


def mark_dead(job_dir: Path, overrides: Sequence[str], returncode: int) -> None:
    """Record a job whose process ended without reporting (killed, out of memory, crashed) as failed."""
    summary_file = job_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {"overrides": list(overrides)}
    if summary.get("status") == "completed":  # it finished its work, then died on the way out: the run stands
        return
    reason = f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit code {returncode}"
    summary.update(
        status="failed",
        objective=None,
        error={"type": "JobProcessDied", "message": f"the job's process ended without finishing ({reason})"},
    )
    job_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(summary_file, summary)


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
    """Run the jobs ``n_jobs`` at a time, each in its own process; returns Hydra's ``JobReturn`` for each."""
    import cloudpickle
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
    from joblib import Parallel, delayed

    setup_globals()
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    # multirun.yaml holds the command line: a secret given there must not stay in it
    scrub_hydra_files(sweep_dir, secret_values([o for job in job_overrides for o in job]))
    try:
        check_sweep_folder(sweep_dir, job_overrides, initial_job_idx)
    except SweepFolderConflict as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)

    slots = gpu_slots(visible_gpus(), launcher.gpus_per_job)
    n_jobs = launcher.n_jobs or max(1, len(slots))
    threads = threads_per_job(n_jobs, launcher.threads_per_job)
    free_gpus: queue.Queue[str] = queue.Queue()
    for slot in slots:
        free_gpus.put(slot)
    gpu_note = f", GPUs {len(slots)} slots of {launcher.gpus_per_job}" if slots else ", no GPU"
    log.info(f"Launching {len(job_overrides)} jobs, {n_jobs} at a time, each in its own process with {threads} "
             f"CPU thread(s){gpu_note}; sweep folder {sweep_dir}")  # fmt: skip
    singleton_state = Singleton.get_state()
    done = {"count": 0}
    progress = threading.Lock()
    start_lock = threading.Lock()

    def run_one(index: int, overrides: Sequence[str]) -> JobReturn:
        job_dir = sweep_dir / str(index)
        shown = " ".join(redact_overrides(filter_overrides(overrides)))
        previous = completed_run(job_dir, overrides)
        if previous is not None:
            log.info(f"#{index} : {shown}: completed in an earlier launch, skipped")
            return _job_return(JobReturn, JobStatus, overrides, job_dir, previous.get("objective"))
        gpu = free_gpus.get() if slots else None
        started = time.perf_counter()
        try:
            environment = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(threads))}
            if gpu is not None:
                environment["CUDA_VISIBLE_DEVICES"] = gpu
            log.info(f"#{index} : {shown}" + (f" (GPU {gpu})" if gpu is not None else ""))
            payload = (index, list(overrides), launcher.hydra_context, config, launcher.task_function, singleton_state)
            result, returncode = _run_in_child(cloudpickle.dumps(payload), environment, start_lock)
        finally:
            if gpu is not None:
                free_gpus.put(gpu)
        if result is None:  # the process died before it could report: the job failed, the sweep goes on
            mark_dead(job_dir, overrides, returncode)
            result = _job_return(JobReturn, JobStatus, overrides, job_dir, None)
        with progress:
            done["count"] += 1
            log.info(f"#{index} {_outcome_of(job_dir)} in {time.perf_counter() - started:.0f} s "
                     f"({done['count']} of {len(job_overrides)} done)")  # fmt: skip
        return result

    return Parallel(n_jobs=n_jobs, backend="threading", timeout=launcher.timeout)(
        delayed(run_one)(initial_job_idx + i, overrides) for i, overrides in enumerate(job_overrides)
    )


def _run_in_child(payload: bytes, environment: dict[str, str], start_lock: threading.Lock) -> tuple[Any, int]:
    """Start ``python -c CHILD_ENTRY`` with the job in a file; returns (its JobReturn or None, exit code)."""
    import cloudpickle

    with tempfile.TemporaryDirectory(prefix="socratic_exp-job-") as folder:
        job_file, result_file = Path(folder) / "job.pkl", Path(folder) / "result.pkl"
        job_file.write_bytes(payload)
        with start_lock:  # process creation from several threads at once: one at a time
            process = subprocess.Popen(
                [sys.executable, "-c", CHILD_ENTRY, str(job_file), str(result_file)], env=environment
            )
        returncode = process.wait()
        result = cloudpickle.loads(result_file.read_bytes()) if result_file.is_file() else None
    return result, returncode


def child_main() -> None:
    """The job's own process: run the joblib launcher's ``execute_job`` and write its JobReturn back."""
    import cloudpickle
    from hydra_plugins.hydra_joblib_launcher._core import execute_job

    job_file, result_file = Path(sys.argv[1]), Path(sys.argv[2])
    interrupt_when_orphaned(os.getppid())
    result = execute_job(*cloudpickle.loads(job_file.read_bytes()))
    try:
        data = cloudpickle.dumps(result)
    except Exception as err:  # an exception that does not pickle: keep its text
        result.return_value = RuntimeError(f"{type(result.return_value).__name__}: {result.return_value} ({err})")
        data = cloudpickle.dumps(result)
    result_file.write_bytes(data)


def interrupt_when_orphaned(parent: int, poll_seconds: float = 1.0) -> threading.Thread:
    """Interrupt this process, as Ctrl-C would, once ``parent`` has died. A sweep killed by SIGTERM or SIGKILL (a
    scheduler's time limit, ``kill``) would otherwise leave its running jobs behind, training on, holding warm-start
    locks and writing into the sweep folder; interrupted, a job records itself as such and ends."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=watch, name="exit-with-sweep", daemon=True)
    watcher.start()
    return watcher


def _job_return(job_return: Any, job_status: Any, overrides: Sequence[str], job_dir: Path, value: Any) -> Any:
    """A JobReturn for a job that did not report one (skipped or died). Completed, so that Hydra's sweeper goes on
    to the other jobs; its ``summary.json`` says what happened, and the sweep's status table and exit code say it."""
    result = job_return(overrides=list(overrides), working_dir=str(job_dir), status=job_status.COMPLETED)
    result.return_value = value
    return result


def _outcome_of(job_dir: Path) -> str:
    """``completed, eval/greedy_acc 0.5500`` / ``failed: <the error>``: the job's end line."""
    summary_file = job_dir / "summary.json"
    if not summary_file.is_file():
        return "ended (no summary)"
    summary = json.loads(summary_file.read_text())
    status, objective = summary.get("status", "?"), summary.get("objective")
    if status == "completed" and isinstance(objective, int | float):
        return f"{status}, {(summary.get('config') or {}).get('objective', 'objective')} {objective:.4f}"
    message = (summary.get("error") or {}).get("message")
    return f"{status}: {str(message).splitlines()[0][:160]}" if message else status
