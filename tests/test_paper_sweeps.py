"""Each paper's ablation sweep over the paper's own overlay, end to end on CPU: the overlay's setup (its task on the
real benchmark files or a stand-in file in its format, its teacher served by an OpenAI-compatible stub that answers as
the 27B teacher), the student swapped for a random 2-layer Qwen3 of the same family (``models.random_qwen3``) and one
step a job (``debug=paper_cpu``), seed 0 only. Every job of the grid must complete and keep the overlay's setup.

Two grids are cut to keep the suite's time: Socratic-RL's meta-learning axis runs its ``true`` half only, the entropy
ablation two of its six quantiles (``rho`` 0.2, the paper's, and 1.0, GRPO); every other axis runs whole. The jobs run
one after another in the sweep's own process (Hydra's basic launcher), which loads the libraries once; the launcher
that starts each job in a process of its own is tested by ``test_sweeps.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_dirs
from openai_stub import StubServer

from socratic_exp.core.run_folder import read_summary

pytestmark = pytest.mark.slow
TEACHER = "Qwen/Qwen3.5-27B"  # conf/teacher/qwen27b.yaml's model: the stub serves it under that name


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    from socratic_exp.models.random_qwen3 import build

    folder = tmp_path_factory.mktemp("qwen3-standin")
    build(folder, "standin")
    return folder


@pytest.fixture(scope="module")
def teacher_url():
    with StubServer(model=TEACHER) as server:
        yield server.url


def math_rows(path: Path, shape: str, n: int = 24) -> Path:
    """``n`` small problems written in a task's own file format (openmath's columns or DAPO's prompt / solution)."""
    with path.open("w") as handle:
        for i in range(n):
            problem, answer = f"What is {i} + {i + 1}?", str(2 * i + 1)
            if shape == "openmath":
                row = {"problem": problem, "expected_answer": answer, "problem_type": "has_answer_extracted"}
            else:
                row = {"prompt": problem, "solution": answer}
            handle.write(json.dumps(row) + "\n")
    return path


def sweep_over_overlay(run_app, standin, teacher_url, experiment, sweep, *overrides):
    proc, outputs = run_app(
        "-m", f"experiment={experiment}", f"+sweep={sweep}", "debug=paper_cpu", f"model.name={standin}", "seed=0",
        "logger=none", "hydra/launcher=basic", *overrides,
        env={"SOCRATIC_EXP_TEACHER_URL": teacher_url}, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    jobs = sorted(p.parent for p in outputs.glob("multirun/*/*/*/summary.json"))
    assert not run_dirs(outputs), "a sweep's jobs write under multirun/ only"
    summaries = [read_summary(job) for job in jobs]
    assert [s["status"] for s in summaries] == ["completed"] * len(jobs)
    for summary in summaries:  # the overlay's setup, with the stand-in student
        assert summary["config"]["model"]["name"] == str(standin)
        assert summary["steps"] == 1
    return summaries


def test_socraticpo_ablation_over_the_sciknoweval_setup(run_app, standin, teacher_url, data_dir):
    summaries = sweep_over_overlay(
        run_app, standin, teacher_url, "socraticpo_sciknoweval", "socraticpo_ablation",
        f"task.data_dir={data_dir / 'sciknoweval'}",
    )  # fmt: skip
    assert len(summaries) == 6  # 3 variants x {the 27B teacher, self-guidance}
    cells = sorted(
        (s["choices"]["teacher"], s["config"]["algorithm"]["guidance"], s["config"]["algorithm"]["reward_decay"])
        for s in summaries
    )  # full, without teacher guidance (the fixed retry prompt), without reward decay; by the 27B and by itself
    assert cells == [(teacher, guidance, decay) for teacher in ("llm", "qwen27b")
                     for guidance, decay in (("fixed_retry", True), ("teacher", False), ("teacher", True))]  # fmt: skip
    assert {s["config"]["task"]["_target_"] for s in summaries} == {"socratic_exp.tasks.sciknoweval.SciKnowEvalTask"}


def test_socraticpo_ablation_over_the_authors_setup(run_app, standin, data_dir):
    """The authors' run (their preset, their frozen-copy teacher served under its name, their prompt style), one job
    per variant, a run per domain as the authors run theirs: two domains here."""
    with StubServer(model="Qwen/Qwen3-4B-Instruct-2507") as server:
        summaries = sweep_over_overlay(
            run_app, standin, server.url, "socraticpo_official_sciknoweval", "socraticpo_ablation",
            f"task.data_dir={data_dir / 'sciknoweval'}", "task.domain=biology,physics",
        )  # fmt: skip
    assert len(summaries) == 6  # 3 variants x the one teacher x 2 domains
    cells = sorted((s["config"]["task"]["domain"], s["config"]["algorithm"]["guidance"],
                    s["config"]["algorithm"]["reward_decay"]) for s in summaries)  # fmt: skip
    assert cells == [(domain, guidance, decay) for domain in ("biology", "physics")
                     for guidance, decay in (("fixed_retry", True), ("teacher", False), ("teacher", True))]  # fmt: skip
    for summary in summaries:
        config = summary["config"]
        assert summary["choices"]["teacher"] == "socraticpo_official"
        assert (config["algorithm"]["max_attempts"], config["algorithm"]["baseline"]) == (2, "prompt")
        assert config["algorithm"]["retry_prompt"] == "Your answer is incorrect. Please try again."
        assert config["task"]["prompt_style"] == "authors" and config["eval"]["top_p"] == 0.95


def test_vpd_ablation_over_the_sciknoweval_setup(run_app, standin, teacher_url, data_dir):
    summaries = sweep_over_overlay(
        run_app, standin, teacher_url, "vpd_sciknoweval", "vpd_ablation", f"task.data_dir={data_dir / 'sciknoweval'}"
    )
    assert len(summaries) == 7  # the overlay's arms: GRPO, SDPO and VPD's two priors x {environment, sibling}
    assert sorted(s["choices"]["algorithm"] for s in summaries) == ["grpo"] + ["sdpo_official"] * 2 + ["vpd"] * 4
    assert {s["choices"]["teacher"] for s in summaries} == {"none"}


def test_goldilocks_vs_uniform_over_the_openmath_setup(run_app, standin, teacher_url, tmp_path):
    train = math_rows(tmp_path / "openmath.jsonl", "openmath")
    summaries = sweep_over_overlay(
        run_app, standin, teacher_url, "goldilocks_openmath", "goldilocks_vs_uniform",
        f"task.data_files={{train:{train}}}", "task.holdout_size=8",
    )  # fmt: skip
    assert sorted(s["choices"]["sampler"] for s in summaries) == ["goldilocks_gpu", "uniform"]
    assert {s["choices"]["algorithm"] for s in summaries} == {"grpo"}  # the paper's student: GRPO only


def test_socratic_rl_over_the_gsm8k_setup(run_app, standin, teacher_url, data_dir):
    summaries = sweep_over_overlay(
        run_app, standin, teacher_url, "socratic_rl_gsm8k", "socratic_rl",
        f"task.data_files={{train:{data_dir / 'gsm8k/train.jsonl'},eval:{data_dir / 'gsm8k/test.jsonl'}}}",
        "algorithm.meta_learning=true", "algorithm.distill_every=1", "algorithm.probe_every=1",
        "algorithm.probe_items=4", "algorithm.reflections_per_step=2", "distiller.items=4", "distiller.steps=1",
        "distiller.batch_size=4", "distiller.max_completion_length=16",
    )  # fmt: skip
    assert len(summaries) == 6  # {kl, dpo, sft} x {the 27B teacher, self-guidance}
    assert {(s["choices"]["distiller"], s["choices"]["teacher"]) for s in summaries} == {
        (d, t) for d in ("kl", "dpo", "sft") for t in ("qwen27b", "llm")
    }


def test_entropy_quantile_over_the_dapo_setup(run_app, standin, teacher_url, tmp_path, data_dir):
    train = math_rows(tmp_path / "dapo.jsonl", "dapo")
    summaries = sweep_over_overlay(
        run_app, standin, teacher_url, "entropy_masked_dapo_qwen3", "entropy_quantile",
        f"task.data_files={{train:{train},eval:{data_dir / 'aime24/test.jsonl'}}}", "task.overlong_buffer=8",
        "algorithm.rho=0.2,1.0",
    )  # fmt: skip
    assert len(summaries) == 6  # rho {0.2, 1.0} x mode {top, bottom, random}
    assert {s["config"]["algorithm"]["trl_args"]["delta"] for s in summaries} == {10.0}  # the overlay's own keys
