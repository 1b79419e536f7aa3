"""The multi-process tier (``-m distributed``): real gloo processes on CPU, started by torchrun as a user would.

Every algorithm and component runs a whole experiment on 2 processes (``python -m socratic_exp`` under torchrun);
workers under ``tests/distributed/`` check what a run cannot show from outside (the calls each process makes, the
knowledge base each holds, a copy of an FSDP2-sharded model). Each launch runs under a timeout: a hang fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import interrupt_after_step_2, run_dirs
from launch_helpers import free_port, torchrun, torchrun_two_nodes

from socratic_exp.core.run_folder import read_jsonl, read_metrics, read_summary

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
# 2 optimizer steps, a held-out evaluation before, after each step (eval.every_steps=1) and after training, a
# checkpoint at step 2 (debug=fast's save_steps)
SHORT = ["debug=fast", "logger=none", "algorithm.max_steps=2", "eval.every_steps=1", "eval.max_samples=16"]
DYNAMIC = "algorithm.dynamic_sampling={max_rounds:3,batches_per_round:2}"
PROBE_AND_DISTIL = ["algorithm.probe_every=1", "algorithm.distill_every=2"]  # a probe every step, a distillation at 2
# plain GRPO on 2 processes: test_resume_auto_continues_a_two_process_run_after_one_process_is_killed and the two-node
# tests; GRPO with Goldilocks and SocraticPO are each run below with dynamic sampling, which adds to their path (and
# test_socraticpo_makes_the_same_generation_calls_on_every_process runs SocraticPO alone)
RUNS = {
    # two loss calls per generation batch: the entropy ranking spans both, and both processes
    "entropy_masked": ["algorithm=entropy_masked", "algorithm.steps_per_generation=2"],
    "sdpo": ["algorithm=sdpo"],
    "vpd": ["algorithm=vpd", "algorithm.e_step_every=1"],  # an E-step after every M-step
    # distiller=kl: test_socratic_rl_processes_hold_one_knowledge_base; every distiller's step on 2 processes:
    # test_same_update_teachers
    "socratic_rl+dpo": ["algorithm=socratic_rl", "distiller=dpo", *PROBE_AND_DISTIL],
    # dynamic sampling: rounds decided together, refills dealt by process, the kept batch replayed on each
    "grpo+goldilocks+dynamic_sampling": ["algorithm=grpo", "sampler=goldilocks", DYNAMIC],
    "socraticpo+dynamic_sampling": ["algorithm=socraticpo", "teacher=rule", DYNAMIC],
}  # fmt: skip


@pytest.mark.parametrize("name", list(RUNS))
def test_every_algorithm_runs_on_two_processes_and_writes_its_run_folder_once(name, tmp_path):
    """The run completes on 2 gloo processes; the main process alone writes: one evaluation record per evaluation,
    one training record per step, one results table (before, the second process evaluated the whole split again and
    wrote a second step-0 record and table)."""
    run_dir = tmp_path / "run"
    proc = torchrun("-m socratic_exp", *SHORT, *RUNS[name], f"hydra.run.dir={run_dir}")
    summary = read_summary(run_dir)
    assert summary["status"] == "completed"
    assert summary["launch"] == {"processes": 2, "distributed_type": "MULTI_CPU"}
    assert summary["steps"] == 2
    evaluations = [r["step"] for r in read_metrics(run_dir) if "eval/greedy_acc" in r]
    assert evaluations == [0, 1, 2]
    assert [r["step"] for r in read_metrics(run_dir) if "loss" in r] == [1, 2]
    assert (proc.stdout + proc.stderr).count("held-out results in") == 1
    assert (run_dir / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file()
    if name.endswith("dynamic_sampling"):
        rounds = [r["dynamic_sampling/rounds"] for r in read_metrics(run_dir) if "dynamic_sampling/rounds" in r]
        assert len(rounds) == 2 and all(1 <= r <= 3 for r in rounds)
    if name.startswith("socratic_rl"):
        events = read_jsonl(run_dir / "viewpoints.jsonl")
        created = [event["id"] for event in events if event["event"] == "created"]
        assert created == list(range(len(created))) and created  # each viewpoint's creation once: one writer
        assert [r["step"] for r in read_metrics(run_dir) if "distill/count" in r] == [2]


def test_socraticpo_makes_the_same_generation_calls_on_every_process(tmp_path):
    """Each process stops at the same attempt and pads its batch to the largest: one sequence of calls (before, the
    two processes made calls of 16, 15, 9 and 16, 16, 6 rows at the first step). The student is warm-started inside
    the launch, from an empty cache: in a process of its own (before, the warm-start's Trainer joined the process
    group while the other process waited on the build's lock, and the launch hung)."""
    torchrun("socraticpo_generation_calls.py", str(tmp_path), str(tmp_path / "cache"))
    calls = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert len(calls[0]) >= 2 * 2  # 2 steps, a first attempt and at least one retry each
    assert calls[0] == calls[1]


def test_socratic_rl_processes_hold_one_knowledge_base(tmp_path):
    """Both processes file the same viewpoints from the global batch's traces (the teacher asked once, by the main
    process), show the same ones in front of their prompts, and distil at the same step (before, a second process
    was refused: its knowledge base would have grown from its own traces alone)."""
    torchrun("socratic_rl_one_knowledge_base.py", str(tmp_path))
    held = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert held[0] == held[1]
    assert held[0]["kb"]["entries"] and held[0]["distillations"] == 1
    shown = held[0]["shown"]  # at each generation batch (and the distillation's probe): none before the first
    assert shown[0] == [] and shown[1]  # reflection, the viewpoints of step 1 at step 2


def test_a_model_sharded_by_fsdp2_evaluates_and_copies_whole(tmp_path):
    """On a model sharded by FSDP2: the evaluation's ``generate`` returns when one process's answer ends after 1
    token and the other's runs to 6 (before, the first process left generation while the second waited in its next
    forward's all-gather, and the launch aborted); ``frozen_copy`` gathers it: a plain model with every parameter
    (6,784 for this config: embeddings 99 x 16 = 1,584 tied with the head, 2 layers of 4 x 16 x 16 + 3 x 16 x 32 +
    2 x 16 = 2,592 each, the final norm 16), the logits the model had before sharding, unchanged while the source
    trains (before, a deep copy of the shards: DTensors of half the rows)."""
    torchrun("frozen_copy_fsdp2.py", str(tmp_path))
    for rank, answer_length in ((0, 1), (1, 6)):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen == {
            "sharded_parameters": 20,
            "answer_length": answer_length,
            "copy_dtensors": 0,
            "copy_parameters": 6784,
            "tied": True,
            "copy_equals_before": True,
            "fused_equals_before": True,
            "copy_after_step_unchanged": True,
            "source_moved": True,
            "frozen": True,
        }


def test_resume_auto_continues_a_two_process_run_after_one_process_is_killed(tmp_path):
    """``kill -9`` of one process after the step-2 checkpoint ends the launch; the same command with
    ``resume=auto`` finds the run, continues from step 2 on 2 processes, and completes it: every step logged once."""
    outputs = tmp_path / "outputs"
    overrides = ["debug=fast", "logger=none", "algorithm=grpo", "algorithm.max_steps=8", "eval.every_steps=0"]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
               "-m", "socratic_exp", *overrides]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SOCRATIC_EXP_OUTPUTS": str(outputs), "HYDRA_FULL_ERROR": "0"}
    launcher = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and launcher.poll() is None:
            lines = [line for path in outputs.glob("*/*/metrics.jsonl") for line in path.read_text().splitlines()]
            if any('"step": 3' in line and '"loss"' in line for line in lines):
                break  # step 3 trained: the step-2 checkpoint is whole
            time.sleep(0.05)
        ranks = {int(p.environ().get("RANK", -1)): p for p in psutil.Process(launcher.pid).children(recursive=True)}
        os.kill(ranks[1].pid, signal.SIGKILL)
        assert launcher.wait(timeout=300) != 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
    (run_dir,) = run_dirs(outputs)
    assert read_summary(run_dir)["status"] != "completed"

    torchrun("-m socratic_exp", *overrides, "resume=auto", env={"SOCRATIC_EXP_OUTPUTS": str(outputs)})
    assert run_dirs(outputs) == [run_dir]  # the same folder, no new one
    summary = read_summary(run_dir)
    assert (summary["status"], summary["steps"], summary["resumed"]) == ("completed", 8, True)
    assert [r["step"] for r in read_metrics(run_dir) if "loss" in r] == list(range(1, 9))


# two machines simulated on one: a torchrun launcher per node, no $SOCRATIC_EXP_RUN_DIR (4 steps, saves at 2 and 4)
TWO_NODES = ["debug=fast", "logger=none", "eval.every_steps=0", "eval.max_samples=16"]


def test_two_nodes_write_one_run_folder_and_resume_in_it(tmp_path):
    """Both nodes' ranks write to the main process's folder (each rank's part of every checkpoint beside the
    other's), and ``resume=auto`` on both nodes continues the run there (before, the second node made a folder of its
    own, with its part of every checkpoint)."""
    for node in torchrun_two_nodes(*TWO_NODES, cwd=tmp_path):
        assert node.returncode == 0, node.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path / "outputs")
    assert sorted(p.name for p in (run_dir / "checkpoints" / "checkpoint-2").glob("rng_state*")) == [
        "rng_state_0.pth", "rng_state_1.pth"
    ]  # fmt: skip
    assert read_summary(run_dir)["launch"] == {"processes": 2, "distributed_type": "MULTI_CPU"}

    interrupt_after_step_2(run_dir)
    for node in torchrun_two_nodes(*TWO_NODES, "resume=auto", cwd=tmp_path):
        assert node.returncode == 0, node.stderr[-3000:]
    assert run_dirs(tmp_path / "outputs") == [run_dir]
    summary = read_summary(run_dir)
    assert (summary["status"], summary["steps"], summary["resumed"]) == ("completed", 4, True)
    assert [r["step"] for r in read_metrics(run_dir) if "loss" in r] == [1, 2, 3, 4]
    assert (run_dir / "checkpoints" / "checkpoint-4" / "rng_state_1.pth").is_file()


def test_a_node_that_cannot_see_the_run_folder_stops_the_launch_in_one_line(tmp_path):
    """The second node starts in another folder (a machine without the shared file system): every node stops with
    one line naming the rank that does not see the folder, and the folder the main process made is gone."""
    elsewhere = tmp_path / "another-machine"
    elsewhere.mkdir()
    nodes = torchrun_two_nodes(*TWO_NODES, cwd=tmp_path, node1_cwd=elsewhere)
    for node in nodes:
        assert node.returncode != 0
        ours = [line for line in (node.stdout + node.stderr).splitlines() if line.startswith("error:")]
        assert len(ours) == 1, node.stderr[-3000:]
        assert "rank 1 on" in ours[0] and "does not see the run folder outputs/" in ours[0]
        assert "shared file system" in ours[0]
    assert not [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    assert not (elsewhere / "outputs").exists()
