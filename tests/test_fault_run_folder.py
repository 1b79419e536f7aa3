"""The fault tier's run-folder cases: a folder has one owner (a lock) and one experiment (a resume compares the
settings that define it); a new run is never written over a completed one. Every refusal is one line with the
folder's files left byte for byte as they were (its log may only grow)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import COMPLETED_RUN, app_environment, assert_refused, copy_run, interrupt_after_step_2

from socratic_exp.core.run_folder import (
    FolderRefused,
    claim_run_folder,
    lock_holder,
    read_metrics,
    read_summary,
    release_run_folder,
)
from socratic_exp.runtime.stages.compose import experiment_differences

pytestmark = pytest.mark.fault
RUN_DIR_ENV = "SOCRATIC_EXP_RUN_DIR"


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run folder but its log and lock file, as bytes."""
    skipped = {"socratic_exp.log", ".lock"}
    return {
        str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name not in skipped
    }


def assert_kept(run_dir: Path, before: dict[str, bytes], log_before: bytes) -> None:
    assert snapshot(run_dir) == before
    assert (run_dir / "socratic_exp.log").read_bytes().startswith(log_before)


@pytest.fixture
def interrupted_run(completed_run, tmp_path) -> Path:
    """A copy of the session's completed run (``COMPLETED_RUN``), as if interrupted after its step-2 checkpoint."""
    run_dir = copy_run(completed_run, tmp_path / "outputs")
    interrupt_after_step_2(run_dir)
    return run_dir


# --- one experiment a folder -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_resume_with_another_algorithm_or_setting_is_refused_with_the_folder_kept(interrupted_run, run_app):
    before, log_before = snapshot(interrupted_run), (interrupted_run / "socratic_exp.log").read_bytes()
    proc, _ = run_app(*COMPLETED_RUN, "algorithm=grpo", f"resume={interrupted_run}")
    assert_refused(proc, "holds another experiment", "algorithm: socraticpo -> grpo", "teacher: rule -> none")
    assert_kept(interrupted_run, before, log_before)

    proc, _ = run_app(*COMPLETED_RUN, "algorithm.learning_rate=0.5", f"resume={interrupted_run}")
    line = assert_refused(proc, "holds another experiment", "algorithm.learning_rate: 0.0001 -> 0.5")
    assert "algorithm:" not in line  # the same algorithm: only the key that differs is listed
    assert_kept(interrupted_run, before, log_before)
    assert read_summary(interrupted_run)["status"] == "running"  # not marked failed by the refused attempts


@pytest.mark.slow
def test_a_resume_may_change_how_long_it_runs_and_logs_and_keeps_the_launch_record(interrupted_run, run_app):
    launched = (interrupted_run / ".hydra" / "overrides.yaml").read_bytes()
    proc, _ = run_app(*COMPLETED_RUN, "verbose=true", "algorithm.save_steps=1", f"resume={interrupted_run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(interrupted_run)
    assert (summary["status"], summary["steps"]) == ("completed", 4)
    assert (interrupted_run / ".hydra" / "overrides.yaml").read_bytes() == launched  # Hydra did not rewrite it
    assert summary["overrides"] == list(COMPLETED_RUN)
    assert summary["resumes"][-1]["overrides"] == [
        *COMPLETED_RUN, "verbose=true", "algorithm.save_steps=1", f"resume={interrupted_run}"
    ]  # fmt: skip
    assert (interrupted_run / "checkpoints" / "checkpoint-3").is_dir()  # the new save_steps took effect
    assert [r["step"] for r in read_metrics(interrupted_run) if "loss" in r] == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_new_run_pointed_at_a_completed_folder_is_refused(completed_run, run_app, tmp_path):
    run_dir = copy_run(completed_run, tmp_path / "outputs")
    before, log_before = snapshot(run_dir), (run_dir / "socratic_exp.log").read_bytes()
    proc, _ = run_app(*COMPLETED_RUN, f"resume={run_dir}")
    assert_refused(proc, f"{run_dir} holds a completed run", "drop resume=")
    proc, _ = run_app(*COMPLETED_RUN, "seed=3", env={RUN_DIR_ENV: str(run_dir)})  # pinned by the variable
    assert_refused(proc, f"{run_dir} holds a completed run")
    proc, _ = run_app(*COMPLETED_RUN, "dry_run=true", f"resume={run_dir}")  # a dry run checks the folder too
    assert_refused(proc, f"{run_dir} holds a completed run")
    assert_kept(run_dir, before, log_before)
    assert read_summary(run_dir)["status"] == "completed"


def test_the_settings_that_define_an_experiment_are_compared_and_the_others_are_not(tmp_path):
    before = {"seed": 0, "verbose": False, "logger": {"mode": "offline"}, "algorithm": {"beta": 0.0, "max_steps": 4},
              "teacher": {"base_url": "http://a:8000/v1", "temperature": 0.7}}  # fmt: skip
    now = {"seed": 1, "verbose": True, "logger": {"mode": "disabled"}, "algorithm": {"beta": 0.04, "max_steps": 8},
           "teacher": {"base_url": "http://b:8000/v1", "temperature": 0.7}, "eval": {"every_steps": 5}}  # fmt: skip
    choices = {"algorithm": "grpo"}
    found = experiment_differences(tmp_path, before, now, choices)  # no .hydra/: no choices to compare
    assert found == ["algorithm.beta: 0.0 -> 0.04", "seed: 0 -> 1"]

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "hydra.yaml").write_text("hydra:\n  runtime:\n    choices:\n      algorithm: socraticpo\n")
    found = experiment_differences(tmp_path, before, now, choices)
    assert found == ["algorithm: socraticpo -> grpo", "seed: 0 -> 1"]  # the group's keys go unlisted


# --- one owner a folder ------------------------------------------------------------------------------------------
def test_a_second_process_is_refused_while_the_folder_is_held_and_writes_nothing(run_app, tmp_path):
    folder = tmp_path / "pinned"
    claim_run_folder(folder)  # this test process plays the run that holds the folder
    try:
        proc, _ = run_app("dry_run=true", env={RUN_DIR_ENV: str(folder)})
        assert_refused(proc, f"the run folder {folder} is in use by process {os.getpid()}", "wait for that run")
        assert sorted(p.name for p in folder.iterdir() if p.name != "socratic_exp.log") == [".lock"]
    finally:
        release_run_folder(folder)
    proc, _ = run_app("dry_run=true", env={RUN_DIR_ENV: str(folder)})
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_lock_ends_with_its_process_even_a_killed_one(tmp_path):
    folder = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from socratic_exp.core.run_folder import claim_run_folder; "
         "claim_run_folder(sys.argv[1]); print('held', flush=True); time.sleep(120)", str(folder)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderRefused, match=f"in use by process {holder.pid}"):
            claim_run_folder(folder)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        holder.kill()
    claim_run_folder(folder)  # no stale lock to clear
    try:
        assert lock_holder(folder)["pid"] == os.getpid()
    finally:
        release_run_folder(folder)
    assert lock_holder(folder) == {}  # emptied on release


def test_without_file_locks_the_lock_file_names_its_holder(tmp_path, monkeypatch):
    """A file system without locks (flock fails with ENOLCK): a dead holder on this host is taken over, a live one
    refused, and one on another host refused with how to clear it."""
    import fcntl

    def no_locks(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    folder = tmp_path / "run"
    folder.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = os.uname().nodename
    (folder / ".lock").write_text(json.dumps({"host": host, "pid": int(gone.stdout), "since": "earlier"}))
    claim_run_folder(folder)
    assert lock_holder(folder)["pid"] == os.getpid()
    release_run_folder(folder)

    (folder / ".lock").write_text(json.dumps({"host": "node-7", "pid": 4242, "since": "earlier"}))
    with pytest.raises(FolderRefused, match="process 4242 on node-7") as refused:
        claim_run_folder(folder)
    assert f"delete {folder / '.lock'}" in str(refused.value)


@pytest.mark.slow
def test_two_runs_started_in_one_folder_leave_one_history(run_app, tmp_path, cache_dir):
    """A run holds its folder from before Hydra's first write; a second run started meanwhile with other settings is
    refused naming it, and a third started after it completed is refused too: one run's steps, settings and record."""
    folder = tmp_path / "pinned"
    env = {**os.environ, **app_environment(tmp_path / "outputs", cache_dir), RUN_DIR_ENV: str(folder)}
    first = subprocess.Popen([sys.executable, "-m", "socratic_exp", "debug=fast", "seed=1"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while lock_holder(folder).get("pid") != first.pid and time.monotonic() < deadline:
            time.sleep(0.05)
        proc, _ = run_app("debug=fast", "seed=2", env={RUN_DIR_ENV: str(folder)})
        assert_refused(proc, f"is in use by process {first.pid}")
        output, _ = first.communicate(timeout=600)
    finally:
        first.kill()
    assert first.returncode == 0, output[-3000:]
    proc, _ = run_app("debug=fast", "seed=3", env={RUN_DIR_ENV: str(folder)})
    assert_refused(proc, "holds a completed run")
    summary = read_summary(folder)
    assert summary["overrides"] == ["debug=fast", "seed=1"] and "resumes" not in summary
    assert (folder / ".hydra" / "overrides.yaml").read_text() == "- debug=fast\n- seed=1\n"
    assert [r["step"] for r in read_metrics(folder) if "loss" in r] == [1, 2, 3, 4]  # each step once
