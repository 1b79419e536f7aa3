"""The embedded testbed's premises (``python -m socratic_exp.study.premises``): each paper's precondition, at the level
the design promises (each method's ``PROMISES``), on the students that ship with the package. The promises are read
from the shipped manifests (figures measured on exactly those weights, the same on every machine); a slow test
measures the default student again here and finds its manifest's figures."""

from __future__ import annotations

import statistics

import pytest

from socratic_exp.algorithms.entropy_masked.evidence import line_starts
from socratic_exp.models.tiny.shipped import shipped_students
from socratic_exp.samplers.goldilocks.evidence import pearson
from socratic_exp.study.premises import promises

PROMISES = promises()

# Premises the design did not reach on the default student (docs/testbed.md): held to failing, so
# that the statement is revisited when a rebuilt student reaches them.
NOT_REACHED = {"socraticpo/guidance_gain"}
# How far a figure measured on another CPU may stand from the manifest's, relative to max(1, |figure|): a few of 400
# answers (0.01 of a rate, 0.1 nat of a 10-nat margin). Re-measured here with torch, oneDNN and MKL capped to AVX2 or
# to their baseline kernels (research/cross_cpu.py), no answer changed and no figure moved by 1e-4; a different
# student moves them by ten times this (docs/testbed.md, "Across warm-start seeds").
CROSS_CPU_TOLERANCE = 0.01
STUDENTS = {student.name: student for student in shipped_students()}
EVIDENCE = [STUDENTS[f"evidence-seed{seed}"] for seed in range(5)]  # regimes 1 and 2 (the headroom regime: ten)


@pytest.mark.parametrize("promise", [p for p in PROMISES if p.key not in NOT_REACHED], ids=lambda p: p.key)
def test_premise_holds_on_the_shipped_default_student(promise):
    value = STUDENTS["default"].premise_figures[promise.key]
    assert value >= promise.at_least, f"{promise.key} = {value:.3f}: {promise.why}"


@pytest.mark.parametrize("promise", [p for p in PROMISES if p.key in NOT_REACHED], ids=lambda p: p.key)
def test_premise_the_design_did_not_reach_is_still_short_on_the_default_student(promise):
    assert STUDENTS["default"].premise_figures[promise.key] < promise.at_least, "now holds: update NOT_REACHED"


@pytest.mark.parametrize("promise", PROMISES, ids=lambda p: p.key)
def test_premise_holds_over_the_five_evidence_students(promise):
    """The evidence sweep's premise: the level holds on the mean of its five students (the premises table of
    docs/testbed.md gives their spread, which a single build would hide)."""
    values = [student.premise_figures[promise.key] for student in EVIDENCE]
    assert len(values) == 5
    assert statistics.fmean(values) >= promise.at_least, f"{promise.key}: {values}"


@pytest.fixture(scope="module")
def default_measured_here():
    from socratic_exp.core.config import compose
    from socratic_exp.runtime.assembly import build_components
    from socratic_exp.study.premises import measure

    manifest = STUDENTS["default"].manifest["premises"]
    components = build_components(compose("algorithm=socraticpo"))  # the default config: the shipped student
    return measure(components, questions=manifest["questions"], seed=manifest["seed"])


@pytest.mark.slow
def test_the_shipped_default_student_measures_here_as_its_manifest_says(default_measured_here):
    """The same weights give the same figures on any CPU, to the few answers that float32 kernels of another CPU
    may flip (the tolerance: docs/testbed.md)."""
    shipped = STUDENTS["default"].premise_figures
    assert set(shipped) <= set(default_measured_here)  # a figure added since the build is not in its manifest
    off = {key: (value, shipped[key]) for key, value in default_measured_here.items() if key in shipped
           and abs(value - shipped[key]) > CROSS_CPU_TOLERANCE * max(1.0, abs(shipped[key]))}  # fmt: skip
    assert off == {}


def test_decisions_are_the_first_token_of_each_line():
    pieces = ["4", "*", "2", "=", "8", "\n", "3", "+", "8", "=", "1", "1", "\n", "A", ":", " ", "1", "1", "\n"]
    starts = line_starts(pieces)
    assert [i for i, s in enumerate(starts) if s] == [0, 6, 13]


def test_pearson_by_hand():
    import torch

    # a = (1, 2, 3), b = (1, 3, 2): centred (-1, 0, 1), (-1, 1, 0): r = 1 / (sqrt 2 sqrt 2) = 0.5
    assert pearson(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 3.0, 2.0])) == pytest.approx(0.5)


def test_socraticpo_figures_count_second_attempts_over_the_wrong_first_ones():
    from socratic_exp.algorithms.socraticpo.evidence import RetryOutcome, fix_rates

    # 4 of 8 first attempts wrong; right after the hint 2 of 4, after the fixed line 1, from the bare prompt 1
    scores = [(1.0, 1.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 1.0)]
    outcomes = [RetryOutcome({}, "wrong", *s) for s in scores]
    assert fix_rates(outcomes, questions=8) == {
        "socraticpo/wrong_first_attempts": 0.5,
        "socraticpo/guided_fix_rate": 0.5,
        "socraticpo/retry_fix_rate": 0.25,
        "socraticpo/fresh_fix_rate": 0.25,
        "socraticpo/guidance_gain": 0.25,
    }
    assert fix_rates([], questions=8) == {"socraticpo/wrong_first_attempts": 0.0}


def test_the_command_names_a_bad_option_and_exits_2(capsys):
    from socratic_exp.study.premises import main

    assert main(["model=nope"]) == 2
    assert "Could not find 'model/nope'" in capsys.readouterr().err
    assert main(["task.max_ops=0"]) == 2
    assert "task.max_ops=0: must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--questions", "3"])
    assert exited.value.code == 2
    assert "give at least 8 questions" in capsys.readouterr().err


@pytest.mark.slow
def test_socraticpo_attempt_reach_follows_the_trainers_stop_rule():
    """Characters as tokens; max_position_embeddings 200, max_completion_length 4: an attempt follows when context +
    attempt + TURN_BUDGET (96) <= 196, i.e. context + attempt <= 100 characters."""
    from types import SimpleNamespace

    from socratic_exp.algorithms.socraticpo.evidence import RetryOutcome, attempt_reach

    def row(prompt_chars, level):
        return {"prompt": "P" * prompt_chars, "difficulty": level}

    rows = [row(10, 1), row(10, 1), row(10, 2), row(10, 2), row(50, 2)]
    outcomes = [  # (the wrong first attempt, the guided second's score, the guidance, the guided attempt)
        RetryOutcome(rows[1], "a" * 20, 1.0, 0, 0, "", "g" * 20),  # 30 <= 100: a 2nd attempt, right: no 3rd
        RetryOutcome(rows[2], "a" * 20, 0.0, 0, 0, "b" * 60, "g" * 20),  # 2nd; then 10+20+1+20+1 + 60 = 112: cut
        RetryOutcome(rows[3], "a" * 20, 0.0, 0, 0, "b" * 10, "g" * 5),  # 2nd; 37 + 10 = 47: a 3rd
        RetryOutcome(rows[4], "a" * 60, 0.0, 0, 0, "b", "g"),  # 50 + 60 = 110: cut after the 1st
    ]
    student = SimpleNamespace(
        chat=False,
        model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=200)),
        tokenizer=lambda text, add_special_tokens: {"input_ids": list(text)},
    )

    def bench(attempts):
        algorithm = SimpleNamespace(max_attempts=attempts, max_completion_length=4)
        return SimpleNamespace(student=student, c=SimpleNamespace(algorithm=algorithm), eval_rows=rows,
                               common={"instruction": ""}, prompt=lambda r: r["prompt"])  # fmt: skip

    assert attempt_reach(bench(3), outcomes) == {
        "socraticpo/reach/attempt2/d1": 0.5, "socraticpo/reach/attempt3/d1": 0.0, "socraticpo/context_cut/d1": 0.0,
        "socraticpo/reach/attempt2/d2": pytest.approx(2 / 3), "socraticpo/reach/attempt3/d2": pytest.approx(1 / 3),
        "socraticpo/context_cut/d2": pytest.approx(2 / 3),
    }  # fmt: skip
    # K = 2: the third attempt is not the rule's to cut, so only the 50-character question is cut
    assert attempt_reach(bench(2), outcomes) == {
        "socraticpo/reach/attempt2/d1": 0.5, "socraticpo/context_cut/d1": 0.0,
        "socraticpo/reach/attempt2/d2": pytest.approx(2 / 3), "socraticpo/context_cut/d2": pytest.approx(1 / 3),
    }  # fmt: skip


def test_the_command_measures_every_premise_shows_progress_and_writes_the_figures(tmp_path, cache_dir, capsys):
    import json

    from socratic_exp.study.premises import main

    out = tmp_path / "premises.json"
    args = ["debug=quick_warmstart", f"model.cache_dir={cache_dir}", "--questions", "8", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr()
    lines = [line for line in printed.err.splitlines() if line.startswith("premises ")]
    assert lines == ["premises 1/5: SocraticPO", "premises 2/5: SDPO / VPD", "premises 3/5: 80/20",
                     "premises 4/5: Goldilocks", "premises 5/5: Socratic-RL"]  # fmt: skip
    record = json.loads(out.read_text())
    assert record["questions"] == 8 and record["overrides"] == args[:2]
    # every promised figure was measured, but the sibling's: 8 questions of the quick student leave no group with
    # both a success and a failure, so no context with a sibling's solution
    measured = {p.key for p in PROMISES if not p.key.startswith("sdpo/sibling/")}
    assert measured <= set(record["figures"])
    assert 0.0 <= record["figures"]["goldilocks/zero_variance_share"] <= 1.0
    assert f"written: {out}" in printed.out


@pytest.mark.slow
def test_a_task_without_reference_solutions_measures_the_margin_on_a_successful_sibling(monkeypatch):
    from socratic_exp.core.config import compose
    from socratic_exp.runtime.assembly import build_components
    from socratic_exp.study.premises import measure
    from socratic_exp.tasks.arithmetic import ArithmeticTask

    build = ArithmeticTask.build
    monkeypatch.setattr(ArithmeticTask, "build", lambda self: build(self).remove_columns("reference"))  # as MultiArith
    # the shipped default student: some rollouts succeed
    figures = measure(build_components(compose("algorithm=socraticpo")), questions=16)
    # a failed rollout's correct solution is then a successful rollout of its group, as for a sibling's context
    assert figures["sdpo/sibling/contexts"] > 0
    assert {f"sdpo/{source}/margin" for source in ("sibling", "environment", "teacher")} <= set(figures)


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "plain"])
def test_feedback_contexts_are_laid_out_as_the_trainers_lay_them_out(chat):
    from types import SimpleNamespace

    from socratic_exp.algorithms.sdpo import evidence as sdpo
    from socratic_exp.algorithms.socraticpo.evidence import retries
    from socratic_exp.core.config import compose
    from socratic_exp.runtime.assembly import build_components
    from socratic_exp.study.premises import Bench

    premises = Bench(build_components(compose("algorithm=socraticpo")), SimpleNamespace(chat=chat), 8, seed=0)
    prompts_by_salt = {}
    wrong = "3-9=-6\n-6+1=-5\n-5-9=-14\nA: -14\n"  # the first eval question, 3-(9+1)-9 = -16, brackets ignored

    def sample(prompts, n=1, salt=0):
        prompts_by_salt[salt] = list(prompts)
        return [wrong] * (len(prompts) * n)

    premises.sample = sample
    premises.logps = lambda prompts, completions: [0.0] * len(prompts)
    retries(premises)
    guided, retry = prompts_by_salt[2][0], prompts_by_salt[3][0]
    sdpo.premises(premises)
    critique = prompts_by_salt[6][0]  # the last feedback source measured: the teacher's critique
    question, hint = "Q: 3-(9+1)-9=?\n", "Hint: step 1 ignores the brackets."
    # chat: SocraticPO's attempt is the assistant's turn, its guidance a user turn; SDPO's template is the user turn
    if chat:
        attempt_turns = [{"role": "user", "content": question}, {"role": "assistant", "content": wrong}]
        assert guided == [*attempt_turns, {"role": "user", "content": hint}]
        assert retry == [*attempt_turns, {"role": "user", "content": "Hint: try again."}]
        sdpo_feedback = f"\nThe following is feedback from your unsuccessful earlier attempt:\n\n{hint}\n\n"
        assert critique == [
            {"role": "user", "content": f"{question}{sdpo_feedback}\n\nCorrectly solve the original question.\n"}
        ]
    else:  # the warm-start's lines: the attempt, then the guidance; the critique before the question
        assert guided == f"{question}{wrong}{hint}\n"
        assert retry == f"{question}{wrong}Hint: try again.\n"
        assert critique == f"{hint}\n{question}"
