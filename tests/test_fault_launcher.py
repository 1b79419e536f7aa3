"""The launchers' numeric settings, and the environment values they read as numbers, refused in one line before any
job starts or is submitted: the line names ``hydra.launcher.<key>=<value>`` (or the variable), the allowed range and
the fix, with exit code 2 and no job folder.

Each refusal is a ``-m`` dry run that ends before its first job: a second or two each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_refused

from socratic_exp.multirun.settings import LauncherSettingError
from socratic_exp.multirun.slurm import task_cpus

pytestmark = pytest.mark.fault


def sweep(tmp_path: Path, *settings: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A 2-job dry-run sweep with ``settings``, into ``tmp_path/s``."""
    environment = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    environment.update({"HYDRA_FULL_ERROR": "0", "SOCRATIC_EXP_OUTPUTS": str(tmp_path / "outputs"), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "socratic_exp", "-m", "seed=0,1", "dry_run=true", "logger=none", *settings,
         f"hydra.sweep.dir={tmp_path}/s"],
        capture_output=True, text=True, cwd=tmp_path, timeout=180, env=environment,
    )  # fmt: skip


def no_job_started(tmp_path: Path) -> bool:
    """No job folder and nothing submitted in the sweep folder."""
    folder = tmp_path / "s"
    return not folder.exists() or not [p for p in folder.iterdir() if p.is_dir()]


# --- hydra/launcher=local ---------------------------------------------------------------------------------------
LOCAL = [  # (setting, the start of the line, the range it names)
    ("n_jobs=x", "hydra.launcher.n_jobs=x: ", "must be an integer >= 1, or null"),
    ("n_jobs=0", "hydra.launcher.n_jobs=0: ", "must be an integer >= 1, or null"),
    ("n_jobs=-1", "hydra.launcher.n_jobs=-1: ", "must be an integer >= 1, or null"),
    ("n_jobs=1.5", "hydra.launcher.n_jobs=1.5: ", "must be an integer >= 1, or null"),
    ("n_jobs=true", "hydra.launcher.n_jobs=true: ", "must be an integer >= 1, or null"),
    ("threads_per_job=x", "hydra.launcher.threads_per_job=x: ", "must be an integer >= 1, or null"),
    ("threads_per_job=0", "hydra.launcher.threads_per_job=0: ", "must be an integer >= 1, or null"),
    ("threads_per_job=-2", "hydra.launcher.threads_per_job=-2: ", "must be an integer >= 1, or null"),
    ("timeout=x", "hydra.launcher.timeout=x: ", "must be a number of seconds > 0, or null"),
    ("timeout=-1", "hydra.launcher.timeout=-1: ", "must be a number of seconds > 0, or null"),
    ("timeout=0", "hydra.launcher.timeout=0: ", "must be a number of seconds > 0, or null"),
    ("processes_per_job=x", "hydra.launcher.processes_per_job=x: ", "must be an integer >= 1 (fix"),
    ("processes_per_job=true", "hydra.launcher.processes_per_job=true: ", "must be an integer >= 1 (fix"),
    ("gpus_per_job=x", "hydra.launcher.gpus_per_job=x: ", "must be an integer >= 0, or null"),
    ("gpus_per_job=-1", "hydra.launcher.gpus_per_job=-1: ", "must be an integer >= 0, or null"),
]


@pytest.mark.parametrize(("setting", "start", "allowed"), LOCAL, ids=[s for s, _, _ in LOCAL])
def test_a_bad_local_launcher_setting_is_refused_in_one_line_before_any_job(tmp_path, setting, start, allowed):
    proc = sweep(tmp_path, f"hydra.launcher.{setting}")
    line = assert_refused(proc, allowed, "(fix: hydra.launcher.")
    assert line.startswith(f"error: {start}")
    assert no_job_started(tmp_path)


def test_a_non_integer_thread_count_in_the_environment_is_refused_in_one_line(tmp_path):
    proc = sweep(tmp_path, env={"OMP_NUM_THREADS": "four"})
    line = assert_refused(proc, "must be a whole number of CPU threads >= 1", "(fix: export OMP_NUM_THREADS=")
    assert line.startswith("error: OMP_NUM_THREADS=four: ")
    assert no_job_started(tmp_path)


def test_good_settings_given_as_text_still_launch(tmp_path):
    """A count given through the environment (``${oc.env:...}`` gives text) is read as the number it is."""
    proc = sweep(tmp_path, "hydra.launcher.n_jobs=${oc.env:SX_JOBS}", "hydra.launcher.timeout=600",
                 env={"SX_JOBS": "2", "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Launching 2 jobs, 2 at a time, each in its own process with 1 CPU thread(s)" in proc.stdout + proc.stderr


# --- hydra/launcher=slurm (checked before anything is submitted) -------------------------------------------------
SUBMITIT = [  # (launcher, setting, the start of the line, the range it names)
    ("socratic_exp_submitit_local", "timeout_min=x", "hydra.launcher.timeout_min=x: ", "must be an integer >= 1 (fix"),
    ("socratic_exp_submitit_local", "timeout_min=-5", "hydra.launcher.timeout_min=-5: ", "must be an integer >= 1"),
    ("socratic_exp_submitit_local", "nodes=0", "hydra.launcher.nodes=0: ", "must be an integer >= 1 (fix"),
    ("socratic_exp_submitit_local", "tasks_per_node=0", "hydra.launcher.tasks_per_node=0: ", "must be an integer >= 1"),
    ("socratic_exp_submitit_local", "cpus_per_task=0", "hydra.launcher.cpus_per_task=0: ", "an integer >= 1, or null"),
    ("socratic_exp_submitit_local", "mem_gb=x", "hydra.launcher.mem_gb=x: ", "must be an integer >= 0, or null"),
    ("socratic_exp_submitit_local", "gpus_per_node=1.5", "hydra.launcher.gpus_per_node=1.5: ", "an integer >= 0, or"),
    ("socratic_exp_submitit_local", "processes_per_job=x", "hydra.launcher.processes_per_job=x: ", "an integer >= 1"),
    ("slurm", "max_num_timeout=-1", "hydra.launcher.max_num_timeout=-1: ", "must be an integer >= 0 (fix"),
    ("slurm", "array_parallelism=0", "hydra.launcher.array_parallelism=0: ", "must be an integer >= 1 (fix"),
    ("slurm", "signal_delay_s=x", "hydra.launcher.signal_delay_s=x: ", "must be an integer >= 0 (fix"),
    ("slurm", "cpus_per_gpu=0", "hydra.launcher.cpus_per_gpu=0: ", "must be an integer >= 1, or null"),
    ("slurm", "gpus_per_task=0", "hydra.launcher.gpus_per_task=0: ", "must be an integer >= 1, or null"),
    ("slurm", "cpus_per_task=eight", "hydra.launcher.cpus_per_task=eight: ", "must be an integer >= 1, or null"),
]


@pytest.mark.parametrize(
    ("chosen", "setting", "start", "allowed"), SUBMITIT, ids=[f"{c}-{s}" for c, s, _, _ in SUBMITIT]
)
def test_a_bad_slurm_launcher_setting_is_refused_in_one_line_before_anything_is_submitted(
    tmp_path, chosen, setting, start, allowed
):
    proc = sweep(tmp_path, f"hydra/launcher={chosen}", f"hydra.launcher.{setting}")
    line = assert_refused(proc, allowed, "(fix: hydra.launcher.")
    assert line.startswith(f"error: {start}")
    assert no_job_started(tmp_path)


def test_the_slurm_launcher_refuses_a_non_integer_thread_count_in_the_environment(tmp_path):
    proc = sweep(tmp_path, "hydra/launcher=socratic_exp_submitit_local", env={"OMP_NUM_THREADS": "2,1"})
    assert_refused(proc, "OMP_NUM_THREADS=2,1: must be a whole number of CPU threads >= 1")
    assert no_job_started(tmp_path)


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"SLURM_CPUS_PER_TASK": "many"}, "SLURM_CPUS_PER_TASK=many: must be a whole number of CPU cores >= 1"),
        ({"SLURM_CPUS_PER_TASK": "0"}, "SLURM_CPUS_PER_TASK=0: must be a whole number of CPU cores >= 1"),
        ({"OMP_NUM_THREADS": "x"}, "OMP_NUM_THREADS=x: must be a whole number of CPU threads >= 1"),
    ],
)
def test_a_slurm_task_names_a_bad_cpu_count_of_its_environment(monkeypatch, environment, message):
    """In the SLURM task, the cores a multi-process job shares among its processes."""
    for name in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(LauncherSettingError) as raised:
        task_cpus()
    assert str(raised.value).startswith(message) and "(fix: " in str(raised.value)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    assert task_cpus() == 6
