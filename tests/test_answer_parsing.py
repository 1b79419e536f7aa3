"""How answers are read (``task.answer_parser``: strict, flexible, math_verify) and the format reward, on hand-written
answers: SmolLM2's own at the start of training among them (right working, no final ``A:`` line; a number copied
from the question)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest
from conftest import run_dirs

from socratic_exp.core.config import compose
from socratic_exp.core.errors import ConfigError
from socratic_exp.core.run_folder import read_metrics, read_summary
from socratic_exp.runtime import evaluation
from socratic_exp.runtime.assembly import build_components
from socratic_exp.runtime.evaluation import EvalSettings, Evaluator
from socratic_exp.tasks.arithmetic import ArithmeticTask
from socratic_exp.tasks.base import Task, Verdict
from socratic_exp.tasks.gsm8k import Gsm8kTask
from socratic_exp.tasks.math500 import Math500Task
from socratic_exp.tasks.sciknoweval import SciKnowEvalTask

ARITHMETIC = ArithmeticTask(train_size=10, eval_size=10, probe_size=0)
PARSERS = ("strict", "flexible", "math_verify")

# (completion, gold, what strict / flexible / math_verify read: (score, extracted))
ARITHMETIC_CASES = [
    ("7 + 3 = 10", "10", [(0.0, None), (1.0, "10"), (1.0, "10")]),  # the working right, no final line
    ("9 + 6 = 15", "15", [(0.0, None), (1.0, "15"), (1.0, "15")]),
    ("1+1 = 2", "2", [(0.0, None), (1.0, "2"), (1.0, "2")]),
    ("The answer is 7.", "12", [(0.0, None), (0.0, "7"), (0.0, "7")]),  # a number copied from the question
    ("3*4=12\nA: 12", "12", [(1.0, "12"), (1.0, "12"), (1.0, "12")]),  # the format: all three agree
    ("A: 11\nso 3*4 is 12", "12", [(0.0, "11"), (0.0, "11"), (1.0, "12")]),  # strict's line first, unless math-verify
    ("the sum is \\boxed{9}", "9", [(0.0, None), (1.0, "9"), (1.0, "9")]),
    ("The answer is 7, since 2+5 = 7 and I checked 3 times", "7", [(0.0, None), (1.0, "7"), (1.0, "7")]),
    ("I do not know.", "4", [(0.0, None), (0.0, None), (0.0, None)]),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), ARITHMETIC_CASES)
def test_each_parser_reads_the_arithmetic_answers_as_written(completion, gold, expected):
    for parser, (score, extracted) in zip(PARSERS, expected, strict=True):
        verdict = ARITHMETIC.verify_as(parser, completion, gold)
        assert (verdict.score, verdict.extracted) == (score, extracted), parser


def test_the_run_parser_is_what_verify_and_the_rewards_read():
    flexible = dataclasses.replace(ARITHMETIC, answer_parser="flexible")
    assert ARITHMETIC.verify("7 + 3 = 10", "10") == Verdict(0.0, "format")
    assert flexible.verify("7 + 3 = 10", "10") == Verdict(1.0, "correct", "10")
    reward = flexible.reward_function()
    assert reward(["7 + 3 = 10", "A: 9", "nothing"], answer=["10", "10", "10"]) == [1.0, 0.0, 0.0]


def test_gsm8k_answers_under_each_parser():
    task = Gsm8kTask()
    cases = [
        ("She earns 9 * 2 = $18 a day.\n#### 18", "18", [1.0, 1.0, 1.0]),
        ("She earns 9 * 2 = $18 a day.", "18", [0.0, 1.0, 1.0]),  # no '####' line: lm-eval's flexible extract
        ("In all 1,000 apples.", "1000", [0.0, 1.0, 1.0]),  # thousands separators
        # "the answer is" goes before a later number, in both lenient readings
        ("The answer is 17.\nCheck: 9 + 9 = 18", "18", [0.0, 0.0, 0.0]),
    ]
    for completion, gold, scores in cases:
        assert [task.verify_as(p, completion, gold).score for p in PARSERS] == scores, completion


def test_math_answers_read_flexibly_compare_as_math():
    task = Math500Task()
    assert task.verify_as("strict", "so x = 1/2", "\\frac{1}{2}").extracted is None
    assert task.verify_as("flexible", "so x = 1/2", "\\frac{1}{2}") == Verdict(1.0, "correct", "1/2")
    assert task.verify_as("math_verify", "so $x = \\frac{1}{2}$", "\\frac{1}{2}").score == 1.0
    assert task.verify_as("flexible", "x is \\boxed{3}", "3") == Verdict(1.0, "correct", "3")  # strict reads it


def test_the_format_reward_pays_for_the_strict_format_only():
    reward = ARITHMETIC.format_reward_function()
    assert reward.__name__ == "answer_format"  # what TRL logs it under: rewards/answer_format/mean
    completions = ["3*4=12\nA: 12", "A: 11", "7 + 3 = 10", "", [{"role": "assistant", "content": "A: 5"}]]
    assert reward(completions, answer=["12", "12", "10", "1", "4"]) == [1.0, 1.0, 0.0, 0.0, 1.0]


def test_the_format_reward_joins_the_verifier_in_trls_reward_weights():
    task = dataclasses.replace(ARITHMETIC, format_reward=0.25, overlong_buffer=4)
    assert [f.__name__ for f in task.shaping_rewards(max_completion_length=16)][1:] == ["answer_format"]
    assert task.shaping_weights() == [1.0, 0.25]  # the overlong penalty's 1, then the format's weight
    assert ARITHMETIC.shaping_rewards(16) == [] and ARITHMETIC.shaping_weights() == []


def test_every_evaluation_reports_strict_and_flexible_accuracy_side_by_side(monkeypatch):
    completions = ["7 + 3 = 10", "A: 5", "The answer is 7.", "no idea"]
    monkeypatch.setattr(evaluation, "generate", lambda student, prompts, **_: completions[: len(prompts)])
    rows = ARITHMETIC.build()["eval"].select(range(4)).map(lambda row, i: {"answer": ["10", "5", "8", "3"][i]},
                                                         with_indices=True)  # fmt: skip
    settings = EvalSettings(pass_k=0)
    for parser, greedy, no_answer in (("strict", 0.25, 0.75), ("flexible", 0.5, 0.25)):
        task = dataclasses.replace(ARITHMETIC, answer_parser=parser)
        metrics = Evaluator(task, rows, settings).evaluate(student=None)
        assert metrics["eval/strict_acc"] == 0.25 and metrics["eval/flexible_acc"] == 0.5
        assert (metrics["eval/greedy_acc"], metrics["eval/no_answer"]) == (greedy, no_answer)
        assert "eval/strict_acc/d1" not in metrics  # overall only
    assert "eval/flexible_acc" in settings.metric_names(parsers=ARITHMETIC.answer_parsers)
    assert "eval/flexible_acc" not in settings.metric_names(parsers=SciKnowEvalTask.answer_parsers)


@dataclasses.dataclass(kw_only=True)
class FreeTextTask(Task):
    """A task whose answers have no form to reward."""

    name: ClassVar[str] = "free_text"


@pytest.mark.parametrize(
    ("overrides", "key", "phrase"),
    [
        (["task.answer_parser=loose"], "task.answer_parser", "expected one of 'strict', 'flexible', 'math_verify'"),
        (["task.format_reward=inf"], "task.format_reward", "finite"),
        (["task.format_reward=nan"], "task.format_reward", "finite"),
        (["task.format_reward=-0.5"], "task.format_reward", ">= 0"),
        (["task=sciknoweval", "task.answer_parser=flexible"], "task.answer_parser", "task.answer_parser=strict"),
        (["task.format_reward=0.5", "+algorithm.trl_args.reward_weights=[1.0,0.5]"],
         "algorithm.trl_args.reward_weights", "leave reward_weights unset"),
    ],
)  # fmt: skip
def test_bad_parser_and_format_settings_are_refused_by_key(overrides, key, phrase):
    with pytest.raises(ConfigError) as raised:
        components = build_components(compose(*overrides), {})
        components.algorithm.check_compatible(components)
    assert raised.value.key == key and phrase in str(raised.value)


def test_a_format_reward_on_a_task_without_a_format_is_refused():
    with pytest.raises(ConfigError, match="task=free_text asks for none") as raised:
        FreeTextTask(format_reward=0.5).validate()
    assert raised.value.key == "task.format_reward"
    FreeTextTask().validate()  # off: nothing to refuse


# --- end to end -------------------------------------------------------------------------------------------------------
FORMAT_RUN = ["debug=fast", "logger=none", "algorithm.max_steps=2", "eval.every_steps=0", "eval.max_samples=8",
              "task.answer_parser=flexible", "task.format_reward=0.5"]  # fmt: skip


@pytest.mark.slow
def test_grpo_trains_on_correctness_plus_the_weighed_format_reward(run_in_process):
    proc, outputs = run_in_process(*FORMAT_RUN, "algorithm=grpo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    steps = [r for r in read_metrics(run_dir) if "loss" in r]
    assert len(steps) == 2
    for row in steps:  # TRL's reward: the verifier's mean plus 0.5 x the format reward's, each logged on its own
        assert row["reward"] == pytest.approx(row["rewards/accuracy/mean"] + 0.5 * row["rewards/answer_format/mean"])
    final = read_summary(run_dir)["final"]
    assert {"eval/strict_acc", "eval/flexible_acc", "eval/no_answer"} <= set(final)


@pytest.mark.slow
def test_socraticpo_rewards_each_attempt_in_the_format(run_in_process):
    proc, outputs = run_in_process(*FORMAT_RUN, "algorithm=socraticpo", "teacher=rule")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    steps = [r for r in read_metrics(run_dir) if "loss" in r]
    assert len(steps) == 2 and all(0.0 <= row["socraticpo/answer_format"] <= 1.0 for row in steps)
    assert not [key for row in steps for key in row if key.startswith("rewards/answer_format")]  # not TRL's: ours
