"""Sweeps whose jobs are multi-process: ``hydra.launcher.processes_per_job`` starts each job as a torchrun (or, with
``hydra.launcher.accelerate_config``, an accelerate launch) of that many processes, locally or in a SLURM task.

The settings are checked before anything runs; the launch commands and the SLURM config are checked by composition
(no cluster here); the real sweeps run 2 gloo processes per job on CPU, 2 jobs at a time where they can collide."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import yaml
from conftest import ROOT

from socratic_exp.core.run_folder import read_metrics, read_summary
from socratic_exp.multirun import local
from socratic_exp.multirun.processes import FreePorts, ProcessLaunch, process_launch
from socratic_exp.multirun.settings import LauncherSettingError
from socratic_exp.multirun.slurm import check_submitit_job

# 2 optimizer steps (a checkpoint at step 2), a 16-question evaluation before and after: the shortest real run
SHORT_JOB = (
    "debug=fast",
    "algorithm=grpo",
    "logger=none",
    "+algorithm.trl_args.use_cpu=true",  # accelerate's gloo MULTI_CPU: the CPU stand-in for a GPU launch
    "algorithm.max_steps=2",
    "eval.every_steps=0",
    "eval.max_samples=16",
    "eval.pass_k=0",
    "save_final_model=false",
)


# --- the settings, checked before any job starts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("processes", "accelerate_config", "gpus", "message"),
    [
        (0, None, None, "hydra.launcher.processes_per_job=0: must be an integer >= 1"),
        ("two", None, None, "hydra.launcher.processes_per_job=two: must be an integer >= 1"),
        (2, None, 1, "hydra.launcher.gpus_per_job=1: each of a job's 2 processes needs a GPU of its own"),
        (1, None, -1, "hydra.launcher.gpus_per_job=-1"),
        (2, "launch/accelerate/nope.yaml", None, "hydra.launcher.accelerate_config=launch/accelerate/nope.yaml: no"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_key_and_the_fix(processes, accelerate_config, gpus, message):
    with pytest.raises(LauncherSettingError) as raised:
        process_launch(processes, accelerate_config, gpus)
    text = str(raised.value)
    assert text.startswith(message) and "(fix: " in text and "\n" not in text


def test_the_settings_choose_the_launch_tool_and_its_command(tmp_path, monkeypatch):
    assert not process_launch(1, None).distributed
    assert process_launch(2, None, 0) == ProcessLaunch(2)  # 0 GPUs per job: all left visible
    job, results = tmp_path / "job.pkl", tmp_path / "results"
    torchrun = process_launch(2, None).command(job, results, port=29123, threads=3)
    assert torchrun[1:3] == ["-m", "torch.distributed.run"]
    assert torchrun[torchrun.index("--nproc_per_node") + 1] == "2"
    assert torchrun[torchrun.index("--master_port") + 1] == "29123"
    assert torchrun[-4:] == ["-m", "socratic_exp.multirun.processes", str(job), str(results)]
    # a profile of launch/accelerate/ is found from any working folder (the checkout's), and launches with accelerate
    monkeypatch.chdir(tmp_path)
    how = process_launch(4, "launch/accelerate/zero2.yaml")
    assert how.accelerate_config == ROOT / "launch" / "accelerate" / "zero2.yaml" and how.tool == "accelerate launch"
    command = how.command(job, results, port=29124, threads=2)
    assert command[1:4] == ["-m", "accelerate.commands.accelerate_cli", "launch"]
    for flag, value in (("--config_file", str(how.accelerate_config)), ("--num_processes", "4"),
                        ("--main_process_port", "29124"), ("--num_cpu_threads_per_process", "2")):  # fmt: skip
        assert command[command.index(flag) + 1] == value
    ports = FreePorts()
    assert len({ports.take() for _ in range(20)}) == 20  # parallel jobs never share a rendezvous port


@pytest.mark.parametrize(
    ("settings", "gpus", "message"),
    [
        (["hydra.launcher.accelerate_config=launch/accelerate/nope.yaml"], None,
         "hydra.launcher.accelerate_config=launch/accelerate/nope.yaml: no such file (fix: "),
        ([], "0", "hydra.launcher.processes_per_job=2: this machine shows 1 GPU(s), fewer than a job's 2 (fix: "),
    ],
    ids=["missing-profile", "too-few-gpus"],
)  # fmt: skip
def test_a_bad_setting_stops_the_sweep_in_one_line_before_any_job(tmp_path, settings, gpus, message):
    environment = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    if gpus is not None:  # the GPUs the launcher sees (it reads CUDA_VISIBLE_DEVICES before nvidia-smi)
        environment["CUDA_VISIBLE_DEVICES"] = gpus
    proc = subprocess.run(
        [sys.executable, "-m", "socratic_exp", "-m", "seed=0,1", "dry_run=true", "logger=none",
         "hydra.launcher.processes_per_job=2", *settings, f"hydra.sweep.dir={tmp_path}/s"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, env=environment,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith(f"error: {message}")
    assert proc.stderr.strip().count("\n") == 0 and not list((tmp_path / "s").glob("*/"))


# --- SLURM: the config, and its job path on submitit's local executor ------------------------------------------


def test_the_slurm_launcher_makes_each_job_a_launch_on_its_node(tmp_path):
    from hydra import compose, initialize_config_dir

    from socratic_exp.core.config import register_resolvers

    register_resolvers()
    overrides = ["hydra/launcher=slurm", "hydra.launcher.processes_per_job=8",
                 "hydra.launcher.accelerate_config=launch/accelerate/zero3.yaml"]  # fmt: skip
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    settings = config.hydra.launcher
    assert settings._target_ == "hydra_plugins.socratic_exp_launcher.submitit_launcher.SlurmLauncher"
    assert (settings.processes_per_job, settings.gpus_per_node, settings.tasks_per_node, settings.nodes) == (8, 8, 1, 1)
    assert settings.max_num_timeout == 3 and settings.partition is None  # the plugin's keys are all still there
    params = {key: settings[key] for key in ("nodes", "tasks_per_node", "gpus_per_node")}
    how = check_submitit_job(8, settings.accelerate_config, params)
    assert how == ProcessLaunch(8, ROOT / "launch" / "accelerate" / "zero3.yaml")
    refusals = (("tasks_per_node", 8, "hydra.launcher.tasks_per_node=8: a job of 8 processes runs as one SLURM task"),
                ("nodes", 2, "hydra.launcher.nodes=2: "),
                ("gpus_per_node", 4, "hydra.launcher.gpus_per_node=4: each of a job's 8 processes"))  # fmt: skip
    for key, value, message in refusals:
        with pytest.raises(LauncherSettingError, match=re.escape(message)):
            check_submitit_job(8, None, {**params, key: value})
    # the command line: shown as composed, and refused in one line before anything is submitted
    shown = subprocess.run(
        [sys.executable, "-m", "socratic_exp", *overrides, "--cfg", "hydra", "--package", "hydra.launcher"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    composed = yaml.safe_load(shown.stdout)
    assert composed["_target_"] == settings._target_ and composed["processes_per_job"] == 8
    assert composed["gpus_per_node"] == "${.processes_per_job}"
    refused = subprocess.run(
        [sys.executable, "-m", "socratic_exp", "-m", "seed=0,1", *overrides, "hydra.launcher.tasks_per_node=8",
         f"hydra.sweep.dir={tmp_path}/s"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.strip().startswith("error: hydra.launcher.tasks_per_node=8: ")
    assert refused.stderr.strip().count("\n") == 0
    assert not (tmp_path / "s" / ".submitit").exists()


@pytest.mark.slow
@pytest.mark.distributed
def test_the_slurm_job_path_runs_an_accelerate_launch_of_2_processes(tmp_path):
    """The SLURM launcher's job on submitit's local executor: the pickled launcher in a task process, which starts
    the job as ``accelerate launch --config_file launch/accelerate/ddp.yaml`` of 2 processes (the GPU profile, given
    relative to the checkout and run from another folder; on CPU its processes use gloo). Dry runs: each rank
    composes and validates the job's config."""
    proc = subprocess.run(
        [sys.executable, "-m", "socratic_exp", "-m", "seed=3", "dry_run=true", "logger=none",
         "hydra/launcher=socratic_exp_submitit_local", "hydra.launcher.processes_per_job=2",
         "hydra.launcher.accelerate_config=launch/accelerate/ddp.yaml", f"hydra.sweep.dir={tmp_path}/s"],
        capture_output=True, text=True, cwd=tmp_path, timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "s" / "0" / "launch.log").read_text().count("config OK: ") == 2
    (task_log,) = (tmp_path / "s" / ".submitit").glob("*/*_0_log.out")
    assert re.search(r"#0 ended \(no summary\) in \d+ s, 2 of 2 processes finished", task_log.read_text())


# --- the ranks end with their sweep ------------------------------------------------------------------------------


def test_a_rank_is_interrupted_when_the_sweep_dies_though_its_launch_tool_lives_on(tmp_path):
    """sweep -> launch tool -> rank: the sweep is SIGKILLed, the tool (the rank's parent) stays; the rank, watching
    the sweep's pid, interrupts itself. The sweep is left a zombie (not reaped) meanwhile: it counts as dead. The
    rank inherited SIGINT ignored and still takes the interrupt (before, it slept on and this test failed)."""
    marker = tmp_path / "interrupted"
    rank = textwrap.dedent(f"""
        import os, time
        from socratic_exp.multirun.orphans import interrupt_when_orphaned
        interrupt_when_orphaned(os.getppid(), poll_seconds=0.05, launcher=int(os.environ["SWEEP"]))
        try:
            print("ready", flush=True)  # inside the try: an interrupt right after it still reaches the handler
            time.sleep(60)
        except KeyboardInterrupt:
            with open({str(marker)!r}, "w") as handle:
                handle.write("KeyboardInterrupt")
    """)
    tool = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {rank!r}]).wait()"
    # the sweep ignores SIGINT, as a command run in the background of a script does, and its children inherit that
    sweep = (f"import os, signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
             f"os.environ['SWEEP'] = str(os.getpid()); "
             f"subprocess.Popen([sys.executable, '-c', {tool!r}], start_new_session=True); time.sleep(60)")  # fmt: skip
    process = subprocess.Popen([sys.executable, "-c", sweep], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    process.kill()
    deadline = time.monotonic() + 60  # a bound for a loaded machine (the rank polls every 0.05 s), not a timing
    while time.monotonic() < deadline and not (marker.is_file() and marker.read_text()):
        time.sleep(0.05)
    process.wait()
    assert marker.read_text() == "KeyboardInterrupt"


# --- real sweeps: 2 gloo processes per job -----------------------------------------------------------------------


def _recording_returns(monkeypatch) -> list:
    """The JobReturns that the launcher hands to Hydra's sweeper (what a sweeper optimising the objective reads)."""
    returned: list = []
    original = local.launch

    def recording(*args, **kwargs):
        results = original(*args, **kwargs)
        returned.append([result.return_value for result in results])
        return results

    monkeypatch.setattr(local, "launch", recording)
    return returned


@pytest.mark.slow
@pytest.mark.distributed
def test_a_sweep_of_jobs_each_a_torchrun_of_2_processes_one_failing(run_in_process, monkeypatch):
    """3 jobs, 2 launches at a time (they would collide on torchrun's default port): job 0's ``seed=-1`` is refused
    by its config check in both ranks, jobs 1 and 2 train on 2 gloo processes."""
    returned = _recording_returns(monkeypatch)
    grid = ("seed=-1,0,1", "hydra.launcher.processes_per_job=2", "hydra.launcher.n_jobs=2")
    proc, outputs = run_in_process("-m", *SHORT_JOB, *grid)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # a job failed: the sweep says so
    (sweep,) = outputs.glob("multirun/*/*")
    assert [p.name for p in outputs.iterdir()] == ["multirun"]  # no rank made a run folder of its own
    assert "3 jobs, 2 at a time, each launched by torchrun: 2 processes with 1 CPU thread(s) each" in proc.stdout
    failed, *summaries = (read_summary(sweep / job) for job in "012")
    assert failed["status"] == "failed" and failed["error"]["message"].startswith("seed=-1: must be")
    assert re.search(r"#0 failed: seed=-1: .* 2 of 2 processes finished", proc.stdout)
    assert [s["status"] for s in summaries] == ["completed", "completed"]
    for job in "12":
        assert re.search(rf"#{job} completed, eval/greedy_acc [\d.]+ in \d+ s, 2 of 2 processes finished", proc.stdout)
        assert [p.name for p in (sweep / job / "checkpoints").glob("checkpoint-*")] == ["checkpoint-2"]
        records = read_metrics(sweep / job)
        assert sum(r.get("step") == 1 and "loss" in r for r in records) == 1  # one writer: rank 0
        assert (sweep / job / "launch.log").is_file()
    objectives = [s["objective"] for s in summaries]
    assert returned == [[None, *objectives]] and all(isinstance(o, float) for o in objectives)
    assert summaries[0]["sweep_launch"] == f"{sweep.parent.name}/{sweep.name}"  # each rank ran it as a sweep's job
