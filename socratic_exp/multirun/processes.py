"""How a sweep's job runs as processes of its own, for the local launcher (``local``) and a SLURM task (``slurm``):
the launch spec (``ProcessLaunch``, checked by ``process_launch``), the job's process(es) started and waited for
(``run_job_processes``) and the entry each of them runs (``child_main``).

A job can itself be several processes (``processes_per_job``, ``accelerate_config``): it is then started as a
single-machine distributed launch, ``torchrun`` or ``accelerate launch --config_file``, of the same job entry, and
every rank runs the same pickled job. So every rank gets the job's folder, its overrides and Hydra's MULTIRUN mode,
exactly as a one-process job does (launching ``python -m socratic_exp <overrides>`` instead would make each job a
single run: no sweep block in its W&B config, and ``resume=<sweep folder>`` refused as not a run folder). Rank 0's
return value is the job's; each rank also reports that it finished, so the end line says how many did. Each job gets
a free rendezvous port (parallel jobs would all take torchrun's 29500), its share of the threads split among its
processes, ``SOCRATIC_EXP_RUN_DIR`` set to its folder, and its launch's output in ``<job folder>/launch.log`` (the
ranks of parallel jobs would interleave on the console). The ranks end when the sweep process does, not only when
their own parent (the launch tool, which outlives a killed sweep) does (``orphans.interrupt_when_orphaned``).

``python -m socratic_exp.multirun.processes <job file> <results folder>`` is the entry that torchrun and accelerate
launch start in each rank (a one-process job runs ``child_main`` through ``python -c``).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socratic_exp.core.config import RUN_DIR_ENV
from socratic_exp.core.secrets import protect_console
from socratic_exp.multirun.orphans import interrupt_when_orphaned
from socratic_exp.multirun.settings import SETTINGS, LauncherSettingError, whole_number

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
CHILD_ENTRY = "from socratic_exp.multirun.processes import child_main; child_main()"
CHILD_MODULE = "socratic_exp.multirun.processes"  # the same entry for torchrun / accelerate launch, which take a module
LAUNCHER_PID_ENV = "SOCRATIC_EXP_SWEEP_PID"  # the process that started the job: its ranks end when it does
LAUNCH_LOG = "launch.log"  # a multi-process job's launch output (every rank's console) in its folder
CHECKOUT = Path(__file__).resolve().parents[2]  # where launch/accelerate/ lives in a checkout


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


if __name__ == "__main__":  # each rank of a multi-process job: torchrun and accelerate launch start a module
    child_main()
