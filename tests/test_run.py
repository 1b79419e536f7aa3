"""End-to-end runs of the app: the run folder contract, W&B offline files, resume, and multirun failures."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import COMPLETED_RUN, app_environment, copy_run, interrupt_after_step_2, run_dirs

from socratic_exp.core.run_folder import read_metrics, read_summary

pytestmark = pytest.mark.slow

QUICK = ("debug=quick_warmstart",)
SUMMARY_KEYS = {
    "status",
    "objective",
    "initial",
    "final",
    "config",
    "git_commit",
    "versions",
    "wall_time_s",
    "steps",
    "overrides",
    "wandb_run_id",
    "choices",
}


def test_grpo_run_writes_the_whole_run_folder(completed_run):
    run_dir = completed_run
    summary = read_summary(run_dir)
    assert summary["status"] == "completed"
    assert set(summary) >= SUMMARY_KEYS
    assert summary["steps"] == 4
    assert re.fullmatch(r"tiny/tiny-[0-9a-f]{16}", summary["student"]["name"])  # its warm-start cache's name
    tokens = [r["eval/train_tokens"] for r in read_metrics(run_dir) if "eval/train_tokens" in r]
    assert tokens[0] == 0 and tokens == sorted(tokens) and len(set(tokens)) == len(tokens)  # grows at every evaluation
    assert summary["final"]["eval/train_tokens"] == tokens[-1] and isinstance(tokens[-1], int)
    assert 0.0 <= summary["objective"] <= 1.0
    assert summary["objective"] == summary["final"]["eval/greedy_acc"]
    for key in ("eval/greedy_acc", "eval/pass@2", "eval/sampled_acc", "eval/greedy_acc/d1"):
        assert key in summary["initial"] and key in summary["final"]
    assert summary["versions"]["trl"] == "1.16.0"
    assert (summary["evaluation_generation"], summary["evaluation_dtype"]) == ("transformers", "float32")
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / ".hydra" / "overrides.yaml").is_file()
    records = read_metrics(run_dir)
    train_steps = [r["step"] for r in records if "loss" in r]
    assert train_steps == [1, 2, 3, 4]
    eval_steps = [r["step"] for r in records if "eval/greedy_acc" in r]
    assert eval_steps == [0, 2, 4]  # before, every 2 steps, after
    assert all("reward" in r for r in records if "loss" in r)
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.is_dir())
    assert checkpoints == ["checkpoint-2", "checkpoint-4", "completions", "final"]
    assert (run_dir / "socratic_exp.log").is_file()
    assert (run_dir / "learning_curves.png").stat().st_size > 10_000
    offline = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1 and summary["wandb_run_id"] in offline[0].name
    # TRL's completions tables: parquet in the run folder and a W&B table in the offline run
    assert len(list((run_dir / "checkpoints" / "completions").glob("completions_*.parquet"))) == 4
    assert list((run_dir / "wandb").glob("offline-run-*/files/media/table/completions_*.table.json"))


def test_resume_continues_at_the_checkpoint_without_duplicating_metrics(completed_run, run_app, tmp_path):
    run_dir = copy_run(completed_run, tmp_path / "outputs")
    first_id = read_summary(run_dir)["wandb_run_id"]
    # Simulate an interruption after the step-2 checkpoint.
    interrupt_after_step_2(run_dir)

    proc, outputs = run_app(*COMPLETED_RUN, "resume=auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dirs(outputs) == [run_dir]  # continued in the same folder
    resumed = read_summary(run_dir)
    assert resumed["status"] == "completed" and resumed["resumed"] is True
    assert resumed["steps"] == 4
    assert resumed["wandb_run_id"] == first_id
    train_steps = [r["step"] for r in read_metrics(run_dir) if "loss" in r]
    assert train_steps == [1, 2, 3, 4]
    assert [r["step"] for r in read_metrics(run_dir) if "eval/greedy_acc" in r] == [0, 2, 4]
    assert "resuming from" in proc.stderr + proc.stdout


def test_multirun_keeps_going_past_a_failed_job(run_app, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"expression": "1+2"}\n{"expression": "2+*"}\n')
    proc, outputs = run_app(
        "-m",
        *QUICK,
        "logger=none",
        "algorithm.max_steps=2",
        "eval.every_steps=0",
        f"task.data_files=null,{{eval:{bad}}}",
    )
    assert proc.returncode == 1
    (sweep,) = outputs.glob("multirun/*/*")
    first, second = read_summary(sweep / "0"), read_summary(sweep / "1")
    assert first["status"] == "completed"
    assert second["status"] == "failed"
    assert f"{bad}:2: malformed arithmetic row" in second["error"]["message"]
    assert "2 jobs" in proc.stderr and "1 of 2 jobs did not complete: #1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sigterm_ends_a_run_as_interrupted_and_resumable(tmp_path, cache_dir):
    # a scheduler's time limit: SIGTERM once training has logged a step
    outputs = tmp_path / "outputs"
    process = subprocess.Popen(
        [sys.executable, "-m", "socratic_exp", *QUICK, "logger=none", "algorithm.max_steps=500"],
        cwd=tmp_path,
        env={**os.environ, **app_environment(outputs, cache_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not any('"loss"' in m.read_text() for m in outputs.glob("*/*/metrics.jsonl")):
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130
    (run_dir,) = run_dirs(outputs)
    assert read_summary(run_dir)["status"] == "interrupted"
    assert f"resume={run_dir}" in stderr and "Traceback" not in stderr
