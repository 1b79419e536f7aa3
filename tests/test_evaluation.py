"""Evaluation: metric names, per-difficulty breakdown, seeded sampling that leaves training's RNG alone."""

from __future__ import annotations

import torch

from socratic_exp.evaluation import EvalSettings, Evaluator
from socratic_exp.models.base import Student
from socratic_exp.models.char_tokenizer import build_char_tokenizer
from socratic_exp.models.tiny import TinyModel
from socratic_exp.tasks.arithmetic import ArithmeticTask


def test_evaluation_is_reproducible_and_does_not_touch_the_global_rng():
    task = ArithmeticTask(train_size=10, eval_size=24, probe_size=0)
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = TinyModel(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64).build_untrained(tokenizer)
    student = Student(model=model, tokenizer=tokenizer, path="")
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
