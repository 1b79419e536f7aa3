"""Evaluation: metric names, per-difficulty breakdown, seeded sampling that leaves training's RNG alone."""

from __future__ import annotations

import torch

from socratic_exp.models.base import Student
from socratic_exp.models.char_tokenizer import build_char_tokenizer
from socratic_exp.models.tiny import TinyModel
from socratic_exp.runtime.evaluation import EvalSettings, Evaluator
from socratic_exp.tasks.arithmetic import ArithmeticTask


def untrained_student() -> Student:
    """A one-layer tiny model with seeded random weights: the evaluator's plumbing, not its accuracy."""
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = TinyModel(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64).build_untrained(tokenizer)
    return Student(model=model, tokenizer=tokenizer, path="")


def test_evaluation_is_reproducible_and_does_not_touch_the_global_rng():
    task = ArithmeticTask(train_size=10, eval_size=24, probe_size=0)
    student = untrained_student()
    settings = EvalSettings(max_samples=24, batch_size=8, max_new_tokens=12, pass_k=3)
    evaluator = Evaluator(task, task.build()["eval"], settings)

    state = torch.get_rng_state()
    first = evaluator.evaluate(student)
    assert torch.equal(state, torch.get_rng_state())
    assert evaluator.evaluate(student) == first
    assert set(settings.metric_names()) <= set(first)
    assert {"eval/greedy_acc/d1", "eval/pass@3/d2", "eval/sampled_acc/d3"} <= set(first)
    assert all(0.0 <= value <= 1.0 for value in first.values())
    assert first["eval/pass@3"] >= first["eval/sampled_acc"]


def test_every_pass_of_an_evaluation_reports_its_questions_as_they_are_answered(caplog, monkeypatch):
    """Greedy, sampled and each assisted attempt report their progress under the evaluation's stage (lines, not
    timings): a real model's evaluation takes minutes, and was silent."""
    import logging

    from socratic_exp.core import console
    from socratic_exp.core.console import PROGRESS_LOG
    from socratic_exp.teachers.rule import RuleTeacher

    caplog.set_level(logging.INFO, logger=PROGRESS_LOG)
    monkeypatch.setattr(console, "QUIET_SECONDS", 0.0)  # the tiny model answers in a second: report from the start
    task = ArithmeticTask(train_size=10, eval_size=12, probe_size=0)
    student = untrained_student()
    settings = EvalSettings(batch_size=5, max_new_tokens=8, pass_k=2, assisted_attempts=3)
    teacher = RuleTeacher()
    teacher.attach(task, student)
    Evaluator(task, task.build()["eval"], settings, teacher).evaluate(student, stage="at step 25")
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOG]
    for name in ("greedy", "pass@2", "assisted attempt 2/3"):
        mine = [line for line in lines if line.startswith(f"eval at step 25: {name} ")]
        assert "| batch 1/3, token 1/8 |" in mine[0]  # the first line comes with the first token
        assert mine[-1].startswith(f"eval at step 25: {name} 12/12 questions | batch 3/3")
        assert any("batch 1/3, token " in line for line in mine)  # inside a batch, token by token


def test_an_unassisted_evaluation_before_training_asks_no_teacher_and_the_table_shows_a_dash():
    """``eval.assisted_before_training=false``: the same questions, greedy only; the before/after table has no
    'before' for the assisted accuracy."""
    from socratic_exp.core.console import result_table

    class CountingTeacher:
        calls = 0

        def guide(self, requests):
            CountingTeacher.calls += 1
            return ["Hint: recheck."] * len(requests)

    task = ArithmeticTask(train_size=10, eval_size=6, probe_size=0)
    student = untrained_student()
    settings = EvalSettings(batch_size=6, max_new_tokens=6, pass_k=0, assisted_attempts=2)
    metrics = Evaluator(task, task.build()["eval"], settings, CountingTeacher()).evaluate(student, assisted=False)
    assert CountingTeacher.calls == 0 and "eval/assisted_acc" not in metrics and "eval/greedy_acc" in metrics
    table = result_table(metrics, {**metrics, "eval/assisted_acc": 0.5}, assisted_attempts=2)
    assert "eval/assisted_acc             - ->  0.500" in table
    tokens = result_table({"eval/train_tokens": 0}, {"eval/train_tokens": 87046}, assisted_attempts=2)
    assert "eval/train_tokens             0 ->  87046   tokens generated and read in training" in tokens


def test_nucleus_sampling_reaches_generation():
    """eval.top_p reaches the sampler: a nucleus this small keeps only the likeliest token, so sampling returns the
    greedy answers; the whole distribution (top_p 1) returns others."""
    from socratic_exp.models.generation import generate

    student = untrained_student()
    prompts = [row["prompt"] for row in ArithmeticTask(train_size=10, eval_size=8, probe_size=0).build()["eval"]]
    common = {"max_new_tokens": 10, "batch_size": 8, "seed": 0}
    greedy = generate(student, prompts, **common)
    assert generate(student, prompts, sample=True, top_p=1e-6, **common) == greedy
    assert generate(student, prompts, sample=True, top_p=1.0, **common) != greedy
