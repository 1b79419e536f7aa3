"""Sweeps: the sweeps/ convention, the local launcher (a process per job, threads and GPUs per job, dead and
completed jobs), resuming a sweep, the SLURM launcher config, one run folder for all ranks of a distributed launch;
and a real 4-job multirun, 2 at a time, one failing, re-run and reported."""

from __future__ import annotations

import csv
import os
import re
import statistics
import subprocess
import sys
import textwrap
import time

import pytest
import yaml
from conftest import ROOT, compose

from socratic_exp.core.config import _sweep_dir
from socratic_exp.core.run_folder import read_summary
from socratic_exp.multirun.grid import job_overrides
from socratic_exp.multirun.job_folders import SweepFolderConflict, check_sweep_folder
from socratic_exp.multirun.local import gpu_slots, threads_per_job, visible_gpus
from socratic_exp.runtime.assembly import build_components

SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))
ACCELERATE_PROFILES = sorted((ROOT / "launch" / "accelerate").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_sweep_follows_the_convention(path):
    text = path.read_text()
    assert text.startswith("# @package _global_\n#"), "header: package line, then what the grid is"
    data = yaml.safe_load(text)
    assert data["hydra"]["mode"] == "MULTIRUN"
    params = data["hydra"]["sweeper"]["params"]
    assert "seed" in params, "seeds are a sweep axis"
    assert f"| `{path.stem}` |" in (ROOT / "sweeps" / "README.md").read_text(), "listed in sweeps/README.md"
    # the grid's first job composes and validates (tests/test_sweep_matrix.py: every job, over every setup)
    first = job_overrides(f"+sweep={path.stem}")[0]
    build_components(compose(*first))


def test_every_experiment_overlay_is_in_the_readme_index():
    index = (ROOT / "docs" / "reproductions.md").read_text()  # the index, linked from the README
    assert index.startswith("# Paper reproductions") and "(docs/reproductions.md)" in (ROOT / "README.md").read_text()
    for path in sorted((ROOT / "conf" / "experiment").glob("*.yaml")):
        assert f"`experiment={path.stem}`" in index, path.stem


def test_gpu_slots_threads_and_visible_gpus(monkeypatch):
    assert gpu_slots(["0", "1", "2", "3", "4"], 2) == ["0,1", "2,3"]
    assert gpu_slots(["0", "1"], 0) == [] and gpu_slots([], 1) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 5")
    assert visible_gpus() == ["3", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_gpus() == []
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert threads_per_job(2, None) == 4 and threads_per_job(16, None) == 1
    assert threads_per_job(2, 3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads_per_job(2, None) == 1


def test_a_sweep_folder_of_another_grid_is_refused(tmp_path):
    (tmp_path / "1" / ".hydra").mkdir(parents=True)
    (tmp_path / "1" / ".hydra" / "overrides.yaml").write_text("- seed=1\n- algorithm.beta=0.1\n")
    check_sweep_folder(tmp_path, [["seed=0"], ["algorithm.beta=0.1", "seed=1", "resume=auto"]], 0)
    with pytest.raises(SweepFolderConflict, match=r"/1 was launched with algorithm.beta=0.1 seed=1"):
        check_sweep_folder(tmp_path, [["seed=0"], ["seed=1"]], 0)


def test_resume_names_the_sweep_folder_or_finds_the_latest_with_the_same_overrides(tmp_path, monkeypatch):
    fresh = str(tmp_path / "multirun" / "2026-02-02" / "12-00-00-000000")
    for stamp, seeds in (("09-00-00-000000", "0,1"), ("10-00-00-000000", "0,1"), ("11-00-00-000000", "0,2")):
        folder = tmp_path / "multirun" / "2026-02-01" / stamp
        folder.mkdir(parents=True)
        (folder / "multirun.yaml").write_text(f"hydra:\n  overrides:\n    task: ['seed={seeds}', 'resume=auto']\n")
    monkeypatch.setattr(sys, "argv", ["socratic_exp", "-m", "seed=0,1", "resume=auto", "hydra.launcher.n_jobs=2"])
    assert _sweep_dir("auto", fresh).endswith("2026-02-01/10-00-00-000000")
    monkeypatch.setattr(sys, "argv", ["socratic_exp", "-m", "seed=5", "resume=auto"])
    assert _sweep_dir("auto", fresh) == fresh
    earlier = str(tmp_path / "multirun" / "2026-02-01" / "09-00-00-000000")
    assert _sweep_dir(earlier, fresh) == earlier
    assert _sweep_dir(None, fresh) == fresh


TOY_APP = """
import os, hydra
from hydra.core.config_store import ConfigStore
ConfigStore.instance().store(group="hydra/launcher", name="local", node={
    "_target_": "hydra_plugins.socratic_exp_launcher.local_launcher.LocalLauncher", "n_jobs": 2,
    "threads_per_job": 3, "gpus_per_job": 1, "timeout": None})

@hydra.main(version_base="1.3", config_path=None, config_name=None)
def main(cfg):
    print(f"job {cfg.job} pid {os.getpid()} threads {os.environ['OMP_NUM_THREADS']} "
          f"gpus {os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
    if cfg.job == 1:
        os._exit(9)  # dies without reporting, as a killed or crashed job would
    return cfg.job

if __name__ == "__main__":
    main()
"""


def test_each_job_gets_its_own_process_and_a_dead_one_is_marked_failed(tmp_path):
    (tmp_path / "toy_app.py").write_text(textwrap.dedent(TOY_APP))
    proc = subprocess.run(
        [sys.executable, "toy_app.py", "-m", "+job=0,1,2", "hydra/launcher=local", f"hydra.sweep.dir={tmp_path}/s"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "4,6", "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    jobs = dict(re.findall(r"job (\d) pid (\d+) threads 3 gpus [46]", proc.stdout))
    assert sorted(jobs) == ["0", "1", "2"] and len(set(jobs.values())) == 3, proc.stdout
    assert str(os.getpid()) not in jobs.values()
    dead = read_summary(tmp_path / "s" / "1")
    assert dead["status"] == "failed" and "exit code 9" in dead["error"]["message"]
    assert not (tmp_path / "s" / "0" / "summary.json").exists()
    # another grid into the same folder: refused in one line, nothing run
    other = subprocess.run(
        [sys.executable, "toy_app.py", "-m", "+job=5,6", "hydra/launcher=local", f"hydra.sweep.dir={tmp_path}/s"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert other.returncode == 2 and "job 5" not in other.stdout
    assert other.stderr.strip().startswith("error: ") and "/s/0 was launched with +job=0" in other.stderr
    assert other.stderr.strip().count("\n") == 0


def test_a_job_is_interrupted_when_its_sweep_process_is_killed(tmp_path):
    # a "sweep" process starts a "job" that watches it, then the sweep is SIGKILLed (no handler can run in it)
    job = textwrap.dedent(f"""
        import os, sys, time
        from socratic_exp.multirun.orphans import interrupt_when_orphaned
        interrupt_when_orphaned(os.getppid(), poll_seconds=0.05)
        print("ready", flush=True)
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            open({str(tmp_path / "interrupted")!r}, "w").write("KeyboardInterrupt")
    """)
    sweep = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {job!r}]); time.sleep(60)"
    process = subprocess.Popen([sys.executable, "-c", sweep], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    process.kill()
    process.wait()
    marker = tmp_path / "interrupted"
    for _ in range(200):
        if marker.is_file() and marker.read_text():
            break
        time.sleep(0.05)
    assert marker.read_text() == "KeyboardInterrupt"


def test_slurm_launcher_config_composes_and_submitit_runs_the_app(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "socratic_exp", "hydra/launcher=slurm", "--cfg", "hydra", "--package", "hydra.launcher"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    assert config["_target_"].endswith("submitit_launcher.SlurmLauncher")
    assert config["max_num_timeout"] == 3 and config["tasks_per_node"] == 1
    # the same plugin's local executor: each job pickled, run by submitit in a process of its own
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "socratic_exp",
            "-m",
            "seed=0,1",
            "dry_run=true",
            "logger=none",
            "hydra/launcher=submitit_local",
            f"hydra.sweep.dir={tmp_path}/s",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    logs = sorted((tmp_path / "s" / ".submitit").glob("*/*_log.out"))
    assert len(logs) == 2 and all("config OK" in log.read_text() for log in logs)


@pytest.mark.parametrize("path", ACCELERATE_PROFILES, ids=[p.stem for p in ACCELERATE_PROFILES])
def test_accelerate_profiles_load(path):
    from accelerate.commands.config.config_args import load_config_from_file

    profile = load_config_from_file(str(path))
    expected = {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp2": "FSDP"}[path.stem]
    assert profile.distributed_type.value == expected
    if path.stem.startswith("zero"):
        assert profile.deepspeed_config["zero_stage"] == int(path.stem[-1])
    if path.stem == "fsdp2":
        assert profile.fsdp_config["fsdp_version"] == 2


def test_all_ranks_of_a_distributed_launch_share_one_run_folder(tmp_path):
    """torchrun is what ``accelerate launch`` runs for a multi-GPU profile: the same rank variables."""
    outputs = tmp_path / "outputs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "-m",
            "socratic_exp",
            "dry_run=true",
            "logger=none",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "SOCRATIC_EXP_OUTPUTS": str(outputs), "OMP_NUM_THREADS": "1"},
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("config OK") == 2
    (run_dir,) = outputs.glob("*/*")  # one folder, not one per rank
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    pinned = tmp_path / "pinned"
    proc = subprocess.run(
        [sys.executable, "-m", "socratic_exp", "dry_run=true", "logger=none"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "SOCRATIC_EXP_RUN_DIR": str(pinned), "RANK": "1", "WORLD_SIZE": "2"},
    )
    assert proc.returncode == 0, proc.stderr
    assert pinned.is_dir() and not (pinned / ".hydra").exists()  # only rank 0 writes Hydra's files


QUICK_JOB = (
    "debug=quick_warmstart",
    "algorithm=grpo",
    "algorithm.max_steps=2",
    "eval.every_steps=0",
    "eval.max_samples=32",
    "eval.pass_k=0",
    "logger=none",
    "save_final_model=false",
)


@pytest.mark.slow
def test_a_real_sweep_of_4_jobs_2_at_a_time_with_one_failing_resumes_and_reports(run_app, tmp_path):
    # batch 4 cannot hold 8 generations: that job fails when it validates its config, in its own process
    grid = ("algorithm.batch_size=4,8", "algorithm.num_generations=4,8", "hydra.launcher.n_jobs=2")
    proc, outputs = run_app("-m", *QUICK_JOB, *grid)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (sweep,) = outputs.glob("multirun/*/*")
    assert "4 jobs, 2 at a time, each in its own process with 1 CPU thread(s)" in proc.stdout  # Hydra's log
    rows = list(csv.DictReader((sweep / "sweep_summary.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "completed"), ("1", "failed"), ("2", "completed"),
                                                        ("3", "completed")]  # fmt: skip
    assert "must divide the generation batch" in rows[1]["error"]
    assert rows[0]["overrides"] == "algorithm.batch_size=4 algorithm.num_generations=4"
    assert "4 jobs: 3 completed, 1 failed" in (sweep / "sweep_summary.md").read_text()
    summaries = {job: read_summary(sweep / job) for job in "0123"}
    assert summaries["0"]["run_group"] == summaries["0"]["sweep_launch"] == f"{sweep.parent.name}/{sweep.name}"
    before = {job: (sweep / job / "summary.json").stat().st_mtime_ns for job in "023"}

    proc, _ = run_app("-m", *QUICK_JOB, *grid, f"resume={sweep}")
    assert proc.returncode == 1
    assert proc.stdout.count("completed in an earlier launch, skipped") == 3
    assert {job: (sweep / job / "summary.json").stat().st_mtime_ns for job in "023"} == before
    assert read_summary(sweep / "1")["status"] == "failed"

    report = subprocess.run(
        [sys.executable, "-m", "socratic_exp.study.report", str(sweep), "--by", "algorithm.num_generations"],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    table = {r["variant"]: r for r in csv.DictReader((sweep / "report.csv").open())}
    four, eight = table["algorithm.num_generations=4"], table["algorithm.num_generations=8"]
    assert (four["n"], four["failed"], eight["n"], eight["failed"]) == ("2", "0", "1", "1")
    for metric in ("eval/greedy_acc", "wall_time_s"):
        values = [summaries[job]["final"].get(metric, summaries[job].get(metric)) for job in "02"]
        assert float(four[f"{metric} mean"]) == pytest.approx(statistics.fmean(values))
        assert float(four[f"{metric} std"]) == pytest.approx(statistics.stdev(values))
    for name in ("curves.png", "finals.png"):
        import matplotlib.image

        assert matplotlib.image.imread(sweep / name).shape[2] in (3, 4)  # a readable PNG
    assert read_summary(sweep / "3")["status"] == "completed"
