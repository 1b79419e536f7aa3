"""SDPO and VPD: the feedback contexts, the E-step (BCO on the teacher), the hybrids, the collapse guard,
and few-step runs of every variant on the tiny model."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from conftest import compose, run_dirs
from hypothesis import given, settings
from hypothesis import strategies as st

from socratic_exp.algorithms.sdpo.contexts import (
    PLAIN_TEMPLATES,
    SDPO_TEMPLATES,
    ContextSettings,
    Rollout,
    Templates,
    build_contexts,
    environment_feedback,
)
from socratic_exp.algorithms.sdpo.losses import reshaped_advantages, reweighted_advantages
from socratic_exp.algorithms.vpd.estep import (
    RunningShift,
    batch_shift,
    classifier_accuracy,
    e_step_loss,
    implicit_rewards,
    side_means,
)
from socratic_exp.core.run_folder import read_metrics, read_summary
from socratic_exp.models.base import frozen_copy

torch = pytest.importorskip("torch")

# --- the E-step (Section 3.2): BCO on the teacher's implicit reward ------------------------------------------------


def test_two_trajectory_e_step_loss_and_gradient_by_hand():
    """beta = 0.1. A success with log q(y+ | x, C+) = -2, log pi_ref(y+ | x) = -3 and a failure with -4 against
    -3.5: r~ = 0.1 * (+1) = 0.1 and 0.1 * (-0.5) = -0.05; delta = (0.1 - 0.05) / 2 = 0.025, margins +-0.075, so
    L = -log sigmoid(0.075) - log sigmoid(0.075) = 2 log(1 + e^-0.075) = 1.312700. dL / d log q =
    beta * (-sigmoid(-0.075), +sigmoid(-0.075)) = (-0.0481259, +0.0481259): descent raises the success's
    likelihood under its context and lowers the failure's, relative to the prior."""
    teacher = torch.tensor([-2.0, -4.0], requires_grad=True)
    rewards = implicit_rewards(teacher, torch.tensor([-3.0, -3.5]), 0.1)
    assert rewards.tolist() == pytest.approx([0.1, -0.05])
    success = torch.tensor([True, False])
    assert side_means(rewards.detach(), success) == pytest.approx((0.1, -0.05))
    shift = batch_shift(side_means(rewards.detach(), success))
    assert shift == pytest.approx(0.025)
    loss = e_step_loss(rewards, success, shift)
    assert float(loss.detach()) == pytest.approx(1.312700, abs=1e-6)
    loss.backward()
    assert teacher.grad.tolist() == pytest.approx([-0.0481259, 0.0481259], abs=1e-7)
    assert classifier_accuracy(rewards.detach(), success, shift) == 1.0
    assert classifier_accuracy(rewards.detach(), success, 0.2) == 0.5  # a shift above both: the success is misread
    assert classifier_accuracy(rewards.detach(), success, 0.1) == 0.5  # on the shift is not above it


def test_each_side_is_averaged_on_its_own():
    """Three failures and one success weigh as much as one of each: BCO's two expectations, not a pooled mean.
    Successes (0.3, 0.1), failures (-0.2, -0.4, -0.6): delta = (0.2 - 0.4) / 2 = -0.1 (the pooled mean is -0.16).
    With delta = -0.1 the margins are (0.4, 0.2) and (-0.1, -0.3, -0.5): L = -(log sig(0.4) + log sig(0.2)) / 2
    - (log sig(0.1) + log sig(0.3) + log sig(0.5)) / 3 = (0.513015 + 0.598139) / 2 + (0.644397 + 0.554355 +
    0.474077) / 3 = 0.555577 + 0.557610 = 1.113187."""
    rewards = torch.tensor([0.3, 0.1, -0.2, -0.4, -0.6])
    success = torch.tensor([True, True, False, False, False])
    assert side_means(rewards, success) == pytest.approx((0.2, -0.4))
    assert batch_shift(side_means(rewards, success)) == pytest.approx(-0.1)
    assert float(e_step_loss(rewards, success, -0.1)) == pytest.approx(1.113187, abs=1e-5)
    assert batch_shift(side_means(torch.tensor([0.2, 0.4]), torch.tensor([True, True]))) == pytest.approx(0.3)
    only_failures = e_step_loss(torch.tensor([-0.2]), torch.tensor([False]), 0.0)  # -log sigmoid(0.2) = 0.598139
    assert float(only_failures) == pytest.approx(0.598139, abs=1e-6)


def test_the_shift_is_the_running_mean_of_the_e_steps_shifts():
    running = RunningShift()
    assert running.update(0.025) == pytest.approx(0.025)
    assert running.update(0.125) == pytest.approx(0.075)
    assert running.update(-0.2) == pytest.approx(-0.016667, abs=1e-6)
    assert running.count == 3


def test_a_teacher_reacting_only_to_a_contexts_presence_gains_nothing():
    """Every trajectory of the E-step carries its context, so such a teacher moves every r~ by the same c: with delta
    following it the margins are 0, the loss is 2 log 2 = 1.386294 whatever c, and the gradient on c is
    -1/2 + 1/2 = 0, even with one success against three failures. The old arrangement (successes scored under the bare
    prompt, r~ = 0) hands the same teacher a gradient of sigmoid(c - delta) = sigmoid(0.35) = 0.586618 on c at c = 0.7:
    descent lowers its likelihood whenever a hint is present."""
    success = torch.tensor([True, False, False, False])
    c = torch.tensor(0.7, requires_grad=True)
    rewards = c * torch.ones(4)
    loss = e_step_loss(rewards, success, batch_shift(side_means(rewards.detach(), success)))
    assert float(loss.detach()) == pytest.approx(1.386294, abs=1e-6)
    loss.backward()
    assert float(c.grad) == pytest.approx(0.0, abs=1e-7)
    c.grad = None
    bare_successes = torch.where(success, torch.zeros(()), c)
    shortcut = e_step_loss(bare_successes, success, batch_shift(side_means(bare_successes.detach(), success)))
    shortcut.backward()
    assert float(c.grad) == pytest.approx(0.586618, abs=1e-6)


@pytest.mark.parametrize(("every", "expected"), [(1, [0, 1, 2, 3, 4, 5, 6]), (3, [0, 3, 6]), (5, [0, 5])])
def test_the_e_step_runs_every_e_step_every_steps(every, expected):
    """The trainer's own schedule (``VPDTrainer._after_contexts``) over optimizer steps 0-6, two generation calls per
    step (the second, e.g. evaluation or a second generation batch, never adds an E-step), eval batches never, and
    ``e_step=off`` never."""
    from collections import defaultdict
    from types import SimpleNamespace

    from socratic_exp.algorithms.vpd.trainer import VPDTrainer

    ran = []
    trainer = SimpleNamespace(
        sdpo=SimpleNamespace(e_step_every=every, e_step="paper"),
        state=SimpleNamespace(global_step=0),
        _last_e_step=None,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        e_step=lambda output: ran.append(trainer.state.global_step) or {"skipped": 0.0},
    )
    for step in range(7):
        trainer.state.global_step = step
        VPDTrainer._after_contexts(trainer, {}, [], "eval")
        VPDTrainer._after_contexts(trainer, {}, [], "train")
        VPDTrainer._after_contexts(trainer, {}, [], "train")
    assert ran == expected
    assert trainer._metrics["train"]["vpd/skipped"] == [0.0] * len(expected) and not trainer._metrics["eval"]
    trainer.sdpo.e_step, trainer._last_e_step, ran[:] = "off", None, []
    VPDTrainer._after_contexts(trainer, {}, [], "train")
    assert ran == []


def test_the_fixed_prior_arm_differs_from_vpd_in_the_prior_only():
    from omegaconf import OmegaConf

    def flat(*overrides):
        cfg = OmegaConf.to_container(compose(*overrides).algorithm)
        return {k: v for k, v in cfg.items()}

    dynamic, fixed = flat("algorithm=vpd"), flat("+vpd_arm=vpd_fixed/environment")
    assert {k for k in dynamic if dynamic[k] != fixed.get(k)} == {"feedback", "reference_prior"}
    assert fixed["reference_prior"] == "fixed" and fixed["feedback"] == "environment"
    assert flat("+vpd_arm=vpd_dynamic/environment") == {**fixed, "reference_prior": "dynamic"}


@pytest.mark.parametrize(
    ("arm", "expected"),
    [
        ("grpo", ("GRPO", None, None)),
        ("sdpo/sibling", ("SDPO", "sibling", None)),
        ("vpd_dynamic/environment", ("VPD", "environment", "dynamic")),
        ("vpd_fixed/teacher", ("VPD", "teacher", "fixed")),
    ],
)
def test_the_ablation_arms_compose(arm, expected):
    from socratic_exp.runtime.assembly import build_components

    c = build_components(compose("+sweep=vpd_ablation", f"+vpd_arm={arm}"))
    a = c.algorithm
    assert (type(a).__name__, getattr(a, "feedback", None), getattr(a, "reference_prior", None)) == expected
    assert (type(c.teacher).__name__ == "RuleTeacher") == (expected[1] == "teacher")  # critiques need a teacher


# --- the feedback contexts -----------------------------------------------------------------------------------------

GROUP = [  # one prompt, four rollouts: wrong, right, wrong (format), right
    Rollout("Q: 3+4*2=?\n", "3+4=7\n7*2=14\nA: 14\n", 0.0, "wrong", "14"),
    Rollout("Q: 3+4*2=?\n", "4*2=8\n3+8=11\nA: 11\n", 1.0, "correct", "11"),
    Rollout("Q: 3+4*2=?\n", "4*2=8\n3+8=11\n", 0.0, "format"),
    Rollout("Q: 3+4*2=?\n", "<think>hm</think>4*2=8\n3+8=11\nA: 11\n", 1.0, "correct", "11"),
]


def plain(*sources, **kwargs):
    return ContextSettings(sources=sources, templates=PLAIN_TEMPLATES, **kwargs)


def test_sibling_feedback_is_a_successful_rollout_of_the_group():
    contexts = build_contexts(GROUP, 4, plain("sibling"))
    assert [c.solution for c in contexts] == [1, 3, 1, 1]  # not its own success (dont_reprompt_on_self_success)
    assert contexts[0].prompt == "Note: a correct solution is\n4*2=8\n3+8=11\nA: 11\nQ: 3+4*2=?\n"
    assert all(c.usable and c.feedback is None for c in contexts)
    themselves = build_contexts(GROUP, 4, plain("sibling", dont_reprompt_on_self_success=False))
    assert [c.solution for c in themselves] == [1, 1, 1, 1]
    stripped = build_contexts(GROUP, 4, plain("sibling", remove_thinking=True))
    assert stripped[1].prompt.startswith("Note: a correct solution is\n4*2=8\n")  # the <think> block is gone
    alone = build_contexts([*GROUP[:2], GROUP[0], GROUP[2]], 2, plain("sibling"))
    assert not alone[1].usable and alone[1].prompt == "Q: 3+4*2=?\n"  # no other success: bare prompt, not distilled
    assert not alone[2].usable and not alone[3].usable  # a group without success


def test_environment_feedback_is_the_verdict_with_the_answer_read():
    wrong = "Hint: Your final answer 14 is incorrect: re-check each step of your reasoning."
    assert environment_feedback("wrong", "14") == wrong
    assert environment_feedback("wrong") == wrong.replace(" 14", "")
    assert environment_feedback("correct", "11") == "Hint: Your final answer 11 is correct."
    assert environment_feedback("format").startswith("Hint: Your answer is not in the required format")
    assert environment_feedback("wrong", "9" * 150) == f"Hint: Your final answer {'9' * 100} is incorrect: " + (
        "re-check each step of your reasoning."
    )
    contexts = build_contexts(GROUP, 4, plain("environment"))
    assert [c.usable for c in contexts] == [True, False, True, False]  # SDPO: successes get no feedback
    assert contexts[0].prompt == f"{wrong}\nQ: 3+4*2=?\n"
    assert "format" in contexts[2].feedback
    assert contexts[1].prompt == "Q: 3+4*2=?\n"


def test_vpd_gives_successful_rollouts_their_verdict_as_context():
    """VPD's E-step scores successes and failures each under its own feedback: with ``feedback_on_success`` every
    rollout has a context, and only what it says tells them apart."""
    contexts = build_contexts(GROUP, 4, plain("environment", feedback_on_success=True))
    assert all(c.usable for c in contexts)
    assert contexts[1].prompt == "Hint: Your final answer 11 is correct.\nQ: 3+4*2=?\n"
    assert contexts[0].feedback == "Hint: Your final answer 14 is incorrect: re-check each step of your reasoning."
    critiques = build_contexts(GROUP, 4, plain("teacher", feedback_on_success=True), lambda ix: ["Hint: no."] * len(ix))
    assert [c.feedback for c in critiques] == ["Hint: no.", "Hint: Your final answer 11 is correct."] * 2
    siblings = build_contexts(GROUP, 4, plain("sibling", feedback_on_success=True))  # a demonstration, no verdict
    assert [c.solution for c in siblings] == [1, 3, 1, 1] and all(c.feedback is None for c in siblings)
    official = plain("sibling", "environment", feedback_on_success=True, feedback_only_without_solution=True)
    assert all(c.feedback is None for c in build_contexts(GROUP, 4, official))  # every rollout has a demonstration


def test_teacher_feedback_is_the_critique_of_the_failed_rollouts():
    asked = []

    def critic(indices):
        asked.append(list(indices))
        return [f"Hint: critique {i}." for i in indices]

    contexts = build_contexts(GROUP, 4, plain("teacher"), critic)
    assert asked == [[0, 2]]  # one batched call, failed rollouts only
    assert contexts[2].prompt == "Hint: critique 2.\nQ: 3+4*2=?\n"
    # the warm-start's retry layout, with the attempt shown
    layout = Templates("{solution}{prompt}{feedback}", PLAIN_TEMPLATES.solution, "{attempt}\n{feedback_raw}\n")
    retry = build_contexts(GROUP, 4, ContextSettings(("teacher",), layout), critic)
    assert retry[2].prompt == "Q: 3+4*2=?\n4*2=8\n3+8=11\nHint: critique 2.\n"
    both = build_contexts(GROUP, 4, plain("sibling", "environment", "teacher"), critic)
    assert both[0].prompt == (
        "Note: a correct solution is\n4*2=8\n3+8=11\nA: 11\n"
        "Hint: Your final answer 14 is incorrect: re-check each step of your reasoning.\n"
        "Hint: critique 0.\nQ: 3+4*2=?\n"
    )
    calls = len(asked)
    only = build_contexts(GROUP, 4, plain("sibling", "teacher", feedback_only_without_solution=True), critic)
    assert len(asked) == calls and only[0].feedback is None and only[0].solution == 1  # a demonstration: no critique
    with pytest.raises(ValueError, match="critic"):
        build_contexts(GROUP, 4, plain("teacher"))


def test_chat_prompts_get_sdpos_reprompt_in_the_last_user_turn():
    chat = [
        Rollout([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "5", 0.0, "wrong"),
        Rollout([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "4", 1.0, "correct"),
    ]
    contexts = build_contexts(chat, 2, ContextSettings(("sibling", "environment"), SDPO_TEMPLATES))
    messages = contexts[0].prompt
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert messages[1]["content"] == (
        "2+2?\nCorrect solution:\n\n4\n\n\nThe following is feedback from your unsuccessful earlier attempt:\n\n"
        "Hint: Your final answer is incorrect: re-check each step of your reasoning.\n\n\n\nCorrectly solve the "
        "original question.\n"
    )


def test_char_tokenizer_round_trips_blank_lines():
    """Teacher contexts are text (as in TRL): the tiny model's tokenizer must give back what it read, blank lines
    too."""
    from socratic_exp.models.char_tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    text = "Q: 1+2=?\n\nCorrect solution:\n\n1+2=3\nA: 3\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tokenizer.unk_token_id not in ids and tokenizer.decode(ids) == text


# --- the hybrids -----------------------------------------------------------------------------------------------------


def test_advantage_reshaping_adds_the_teacher_log_ratio():
    advantages, tokens = torch.tensor([1.0, -1.0]), torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    delta = torch.tensor([[0.5, -0.5, 0.0], [0.0, 0.0, 0.0]])
    shaped = reshaped_advantages(advantages, delta, tokens, coef=2.0)
    assert shaped.tolist() == [[2.0, 0.0, 0.0], [-1.0, -1.0, -1.0]]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(-3, 3), min_size=4, max_size=4),
    st.floats(0.1, 2) | st.floats(-2, -0.1),
    st.floats(1.0, 4.0),
)
def test_reweighting_moves_advantage_between_tokens_without_changing_its_total(delta, advantage, clip):
    tokens = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    weighted = reweighted_advantages(torch.tensor([advantage]), torch.tensor([delta]), tokens, clip)
    assert float(weighted.sum()) == pytest.approx(4 * advantage, abs=1e-4)
    shares = [float(w) / advantage for w in weighted[0]]
    ordered = [shares[t] for t in sorted(range(4), key=lambda t: delta[t])]
    # a positive advantage goes more to the tokens the teacher prefers, a negative one more to those it rejects
    steps = [b - a for a, b in itertools.pairwise(ordered)]
    assert all(s >= -1e-5 for s in steps) if advantage > 0 else all(s <= 1e-5 for s in steps)
    assert all(1 / clip**2 - 1e-5 <= share <= clip**2 + 1e-5 for share in shares)


# --- the trainers on the tiny model --------------------------------------------------------------------------------


def _vpd_trainer(cache_dir, *overrides):
    """A VPD trainer on the warm-started tiny student with a shared teacher (the E-step updates the student's weights)
    and the environment's feedback, and the task's data."""
    from socratic_exp.runtime.assembly import build_components

    cfg = compose(
        "algorithm=vpd", "algorithm.feedback=environment", "algorithm.teacher_weights=shared",
        "algorithm.teacher_regularization=none", "debug=fast", "debug=quick_warmstart", "logger=none",
        f"model.cache_dir={cache_dir}", *overrides,
    )  # fmt: skip
    from socratic_exp.runtime.assembly import build_trainer, workbench

    bench = workbench(build_components(cfg, {"algorithm": "vpd"}))
    student, data = bench.student, bench.splits
    trainer = build_trainer(bench, Path(tempfile.mkdtemp()))
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which these tests skip
    return trainer, data, student.tokenizer


@pytest.fixture(scope="module")
def vpd_batch(cache_dir):
    """A VPD trainer (dynamic prior) and one batch of rollouts with the environment's feedback; the E-step is left to
    the tests."""
    trainer, data, tokenizer = _vpd_trainer(cache_dir)
    captured = {}
    trainer._after_contexts = lambda output, rollouts, mode: captured.update(rollouts=rollouts)
    rows = [dict(data["train"][i]) for i in range(4) for _ in range(4)]
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows)
    initial = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    return trainer, output, captured["rollouts"], initial, tokenizer


def alternating(output):
    """The batch with outcomes 1, 0, 1, 0...: every group has both sides for the E-step (it reads ``correct``)."""
    correct = torch.tensor([float(i % 2 == 0) for i in range(len(output["correct"]))])
    return dict(output, correct=correct, distill_mask=torch.ones_like(correct))


def reset(trainer, initial, lr):
    trainer.model.load_state_dict(initial)
    trainer.e_optimizer.state.clear()
    trainer.e_optimizer.param_groups[0]["lr"] = lr
    trainer.shift = RunningShift()


def sequence_logps_by_hand(model, output, context_ids=None, context_mask=None):
    """log p(y | context) of each rollout from the model's plain logits (not TRL's or the trainer's helpers)."""
    completion, completion_mask = output["completion_ids"], output["completion_mask"]
    if context_ids is None:
        context_ids, context_mask = output["prompt_ids"], output["prompt_mask"]
        ids, mask = torch.cat([context_ids, completion], 1), torch.cat([context_mask, completion_mask], 1)
    else:
        ids, mask = context_ids, context_mask  # the teacher inputs already end with the completion
    with torch.no_grad():
        logits = type(model).forward(model, input_ids=ids, attention_mask=mask).logits
    width = completion.size(1)
    logps = logits[:, -width - 1 : -1].float().log_softmax(-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    return (logps * completion_mask).sum(1)


@pytest.mark.slow
def test_the_teacher_prompt_is_the_documented_context_then_the_completion(vpd_batch):
    trainer, output, rollouts, _, tokenizer = vpd_batch
    contexts = build_contexts(rollouts, 4, trainer.context_settings)  # the same texts: feedback reads the verdicts
    for i, context in enumerate(contexts):
        ids = output["teacher_input_ids"][i][output["teacher_attention_mask"][i].bool()]
        completion = output["completion_ids"][i][output["completion_mask"][i].bool()]
        expected_context = context.prompt if output["distill_mask"][i] else rollouts[i].prompt
        assert tokenizer.decode(ids[: len(ids) - len(completion)]) == expected_context
        assert ids[len(ids) - len(completion) :].tolist() == completion.tolist()


@pytest.mark.slow
def test_the_teachers_context_receives_no_student_gradient(vpd_batch):
    """Shared weights: the teacher's forward (feedback tokens included) is outside the student's graph, and the
    student's gradient equals the one computed against constant teacher logits."""
    trainer, output, _, initial, _ = vpd_batch
    reset(trainer, initial, 1e-3)
    inputs = dict(output)
    inputs["distill_mask"] = torch.ones_like(output["distill_mask"])
    embeddings = []
    hook = trainer.model.get_input_embeddings().register_forward_hook(lambda m, a, out: embeddings.append(out))
    try:
        loss = trainer._distillation_loss(trainer.model, inputs)
    finally:
        hook.remove()
    student_pass, teacher_pass = embeddings
    assert student_pass.requires_grad and not teacher_pass.requires_grad
    assert teacher_pass.shape[1] > student_pass.shape[1] - output["completion_ids"].shape[1]  # it read the feedback
    parameters = list(trainer.model.parameters())
    gradient = torch.autograd.grad(loss, parameters, allow_unused=True)
    assert any(g is not None and float(g.abs().sum()) > 0 for g in gradient)
    # the same loss with the teacher's logits from a frozen copy (constants: no path to the student's weights)
    shared, trainer.teacher_model = trainer.teacher_model, frozen_copy(trainer.accelerator.unwrap_model(trainer.model))
    try:
        constant = torch.autograd.grad(trainer._distillation_loss(trainer.model, inputs), parameters, allow_unused=True)
    finally:
        trainer.teacher_model = shared
    for with_shared, with_constant in zip(gradient, constant, strict=True):
        assert (with_shared is None) == (with_constant is None)
        if with_shared is not None:
            torch.testing.assert_close(with_shared, with_constant)


@pytest.mark.slow
def test_the_e_step_teaches_the_shared_teacher_to_tell_success_from_failure(vpd_batch):
    """On one batch, by hand: r~ = 0.1 (log q(y | x, C) - log pi(y | x)) from plain forwards; the E-step's telemetry
    is those numbers, its update moves the student's own weights (shared), lowers the loss on the batch and leaves no
    gradient for the M-step."""
    trainer, output, _, initial, _ = vpd_batch
    assert trainer.teacher_model is trainer.accelerator.unwrap_model(trainer.model)  # the paper's shared network
    batch = alternating(output)
    reset(trainer, initial, 1e-4)  # a small first Adam step (each weight moves by about lr): descent, not overshoot
    student = sequence_logps_by_hand(trainer.model, batch)
    teacher = sequence_logps_by_hand(trainer.model, batch, batch["teacher_input_ids"], batch["teacher_attention_mask"])
    rewards = 0.1 * (teacher - student)
    success = batch["correct"].bool()
    delta = 0.5 * (float(rewards[success].mean()) + float(rewards[~success].mean()))
    metrics = trainer.e_step(batch)
    assert metrics["successes"] == 8.0 and metrics["failures"] == 8.0 and metrics["skipped"] == 0.0
    assert metrics["reward_success"] == pytest.approx(float(rewards[success].mean()), abs=1e-5)
    assert metrics["reward_failure"] == pytest.approx(float(rewards[~success].mean()), abs=1e-5)
    assert metrics["shift"] == pytest.approx(delta, abs=1e-5)
    assert not all(torch.equal(p, initial[k]) for k, p in trainer.model.state_dict().items())
    assert all(p.grad is None for p in trainer.model.parameters())
    second = trainer.e_step(batch)
    assert second["e_step_loss"] < metrics["e_step_loss"]
    assert second["reward_success"] - second["reward_failure"] > metrics["reward_success"] - metrics["reward_failure"]
    trainer.model.load_state_dict(initial)


@pytest.mark.slow
def test_a_one_sided_batch_is_skipped(vpd_batch):
    trainer, output, _, initial, _ = vpd_batch
    reset(trainer, initial, 1e-3)
    batch = dict(alternating(output), correct=torch.ones(16))
    assert trainer.e_step(batch) == {"successes": 16.0, "failures": 0.0, "skipped": 1.0}
    assert all(torch.equal(p, initial[k]) for k, p in trainer.model.state_dict().items())
    assert trainer.shift.count == 0


@pytest.mark.slow
def test_the_trainers_e_step_gives_a_presence_only_teacher_nothing(vpd_batch):
    """A teacher whose log-likelihood is the student's plus c on every context-bearing trajectory: the E-step leaves
    c where it is. Scoring the successes without context (the old arrangement) would push c down."""
    trainer, output, _, initial, _ = vpd_batch
    batch = alternating(output)
    c = torch.nn.Parameter(torch.tensor(0.7))
    saved = trainer.teacher_sequence_logps, trainer.teacher_parameters, trainer.e_optimizer, trainer.shift
    try:
        trainer.teacher_parameters, trainer.e_optimizer = [c], torch.optim.SGD([c], lr=1.0)
        reference = trainer.reference_logps(batch, trainer._token_mask(batch))
        trainer.shift = RunningShift()
        trainer.teacher_sequence_logps = lambda output, tokens: reference + c
        trainer.e_step(batch)
        assert float(c.detach()) == pytest.approx(0.7, abs=1e-6)
        trainer.shift = RunningShift()
        trainer.teacher_sequence_logps = lambda output, tokens: reference + c * (1 - batch["correct"])
        trainer.e_step(batch)
        assert float(c.detach()) < 0.7 - 1e-3
    finally:
        trainer.teacher_sequence_logps, trainer.teacher_parameters, trainer.e_optimizer, trainer.shift = saved
        trainer.model.load_state_dict(initial)


@pytest.mark.slow
def test_the_dynamic_anchor_follows_the_student_and_the_fixed_one_does_not(vpd_batch, cache_dir):
    """Eq. 7 against the Figure 5 ablation: two trainers that differ only in ``reference_prior``, same student, same
    batch. Before any student step both references are the student's log pi(y | x) and both E-steps make the same
    update; after one student step the dynamic reference is the new student's, the fixed one still the initial's."""
    dynamic, output, _, initial, _ = vpd_batch
    fixed, _, _ = _vpd_trainer(cache_dir, "algorithm.reference_prior=fixed")
    batch = alternating(output)
    tokens = dynamic._token_mask(batch)
    for trainer in (dynamic, fixed):
        reset(trainer, initial, 1e-3)
    fixed.reference_model.load_state_dict(initial)  # both anchors start at the batch's student
    by_hand = sequence_logps_by_hand(dynamic.model, batch)
    for trainer in (dynamic, fixed):
        assert torch.allclose(trainer.reference_logps(batch, tokens), by_hand, atol=1e-4)
    first = [trainer.e_step(batch) for trainer in (dynamic, fixed)]
    assert first[0] == pytest.approx(first[1], abs=1e-6)
    assert all(
        torch.allclose(a, b, atol=1e-6)
        for a, b in zip(dynamic.model.state_dict().values(), fixed.model.state_dict().values(), strict=True)
    )
    batch = dict(batch, old_per_token_logps=None)  # the dynamic prior is the student as it is now
    moved = sequence_logps_by_hand(dynamic.model, batch)
    assert float((moved - by_hand).abs().max()) > 1e-3  # the E-step moved the shared student
    assert torch.allclose(dynamic.reference_logps(batch, tokens), moved, atol=1e-4)
    assert torch.allclose(fixed.reference_logps(batch, tokens), by_hand, atol=1e-4)
    second = [trainer.e_step(batch) for trainer in (dynamic, fixed)]
    assert second[0]["reward_success"] != pytest.approx(second[1]["reward_success"], abs=1e-4)
    for trainer in (dynamic, fixed):
        trainer.model.load_state_dict(initial)


@pytest.mark.slow
def test_a_teacher_copy_scores_with_its_own_weights(vpd_batch):
    """TRL's fused LM head binds the plain forward to the student: a deep copy must still use its own weights."""
    from socratic_exp.algorithms.trl_batch import full_logits

    trainer, output, _, _, _ = vpd_batch
    copy = frozen_copy(trainer.model)
    ids, mask = output["teacher_input_ids"], output["teacher_attention_mask"]
    keep = output["completion_ids"].size(1)
    with torch.no_grad():
        for parameter in copy.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
        ours = full_logits(copy, ids, mask, keep, 1.0)
        student = full_logits(trainer.model, ids, mask, keep, 1.0)
        fused, _, _ = trainer._get_per_token_logps_and_entropies(copy, ids, mask, keep)
    assert not torch.allclose(ours, student)
    tokens = output["completion_mask"].bool()
    own = ours.log_softmax(-1).gather(-1, output["completion_ids"].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(own[tokens], fused[tokens], atol=1e-4)


@pytest.mark.slow
def test_the_trust_region_teacher_mixes_the_live_students_logits_with_the_initial_ones(cache_dir):
    """Official SDPO's trust-region teacher on VPD's shared weights: its logits are (1 - r) initial + r live, the
    initial student frozen; the E-step's gradient reaches the student's weights, scaled by r."""
    trainer, data, _ = _vpd_trainer(
        cache_dir, "algorithm.teacher_regularization=trust_region", "algorithm.teacher_update_rate=0.25"
    )
    rows = [dict(data["train"][i]) for i in range(2) for _ in range(4)]
    trainer._after_contexts = lambda *_: None
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows)
    ids, mask = output["teacher_input_ids"], output["teacher_attention_mask"]
    keep = output["completion_ids"].size(1)
    assert trainer.teacher_model is trainer.accelerator.unwrap_model(trainer.model)
    assert not any(p.requires_grad for p in trainer.initial_teacher.parameters())

    def plain_logits(model):
        with torch.no_grad():
            return type(model).forward(model, input_ids=ids, attention_mask=mask).logits[:, -keep - 1 : -1].float()

    before = plain_logits(trainer.model)
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    after = plain_logits(trainer.model)
    with torch.no_grad():
        mixed = trainer.teacher_logits(ids, mask, keep)
        logps, entropy = trainer.teacher_logps(output, entropy=True)
    assert not torch.allclose(before, after, atol=1e-3)
    assert torch.allclose(mixed, 0.75 * before + 0.25 * after, atol=1e-4)  # the trainer's temperature is 1
    by_hand = (0.75 * before + 0.25 * after).log_softmax(-1)
    tokens = output["completion_mask"].bool()
    own = by_hand.gather(-1, output["completion_ids"].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(own[tokens], logps[tokens], atol=1e-4)
    assert torch.allclose(-(by_hand.exp() * by_hand).sum(-1)[tokens], entropy[tokens], atol=1e-4)
    # the E-step's teacher log-probabilities carry the gradient to the live student only
    trainer.model.zero_grad()
    trainer.teacher_sequence_logps(output, output["completion_mask"].float()).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainer.model.parameters())
    assert all(p.grad is None for p in trainer.initial_teacher.parameters())
    assert "trust region" in trainer.memory["description"] and trainer.memory["copy_mb"] > 0


# --- the collapse guard --------------------------------------------------------------------------------------------


def test_collapse_guard_stops_after_patience_and_restores_the_best_weights():
    from socratic_exp.runtime.evaluation import CollapseGuard

    model = torch.nn.Linear(2, 1)
    guard = CollapseGuard("eval/greedy_acc", margin=0.05, patience=2)
    values = {}
    for step, value in [(0, 0.50), (10, 0.60), (20, 0.54), (30, 0.57), (40, 0.54), (50, 0.50)]:
        with torch.no_grad():
            model.weight.fill_(step)
        values[step] = guard.observe(step, {"eval/greedy_acc": value}, model)
    # 0.54 < 0.60 - 0.05 once, then 0.57 resets the count, then twice in a row
    assert values == {0: False, 10: False, 20: False, 30: False, 40: False, 50: True}
    guard.restore(model)
    assert float(model.weight[0, 0]) == 10.0
    assert guard.summary == {
        "metric": "eval/greedy_acc", "margin": 0.05, "best": 0.6, "best_step": 10, "last_step": 50, "last": 0.5,
        "stopped_at_step": 50, "restored_step": 10,
    }  # fmt: skip
    watch_only = CollapseGuard("eval/greedy_acc", margin=None)
    assert not any(watch_only.observe(s, {"eval/greedy_acc": v}, model) for s, v in [(0, 0.9), (1, 0.1), (2, 0.0)])
    assert watch_only.summary["best"] == 0.9 and "stopped_at_step" not in watch_only.summary


def test_periodic_evaluation_stops_training_on_collapse():
    from types import SimpleNamespace

    from socratic_exp.runtime.callbacks import PeriodicEvalCallback
    from socratic_exp.runtime.evaluation import CollapseGuard

    scores = iter([0.5, 0.2])
    evaluator = SimpleNamespace(evaluate=lambda student, stage="": {"eval/greedy_acc": next(scores)})
    sink = SimpleNamespace(log_evaluation=lambda *args: None)
    student = SimpleNamespace(model=torch.nn.Linear(1, 1))
    guard = CollapseGuard("eval/greedy_acc", margin=0.1)
    callback = PeriodicEvalCallback(evaluator, student, 5, sink, SimpleNamespace(samples=list), guard)
    control = SimpleNamespace(should_training_stop=False, should_log=False)
    for step in (5, 10):
        state = SimpleNamespace(global_step=step, max_steps=100, is_world_process_zero=True)
        callback.on_step_end(None, state, control)
        callback.on_log(None, state, control)
    assert control.should_training_stop and guard.stopped_at == 10 and guard.best_step == 5


@pytest.mark.slow
def test_a_collapsing_run_stops_and_keeps_its_best_checkpoint(run_app):
    proc, outputs = run_app(
        "algorithm=grpo",
        "debug=fast",
        "debug=quick_warmstart",
        "logger=none",
        "algorithm.learning_rate=1.0",
        "eval.collapse_margin=0.0",
        "eval.pass_k=0",
        "algorithm.batch_size=64",
        "algorithm.num_generations=8",
    )  # fmt: skip  (64 rollouts: the quick student solves a few, so the huge step has an advantage to follow)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    summary = read_summary(run_dir)
    collapse = summary["collapse"]
    assert collapse["stopped_at_step"] == summary["steps"] and collapse["last"] < collapse["best"]
    assert collapse["restored_step"] == collapse["best_step"] < collapse["stopped_at_step"]
    # the best weights are back: their (greedy, deterministic) evaluation is the final result
    assert summary["final"]["eval/greedy_acc"] == collapse["best"]


# --- end to end ----------------------------------------------------------------------------------------------------

VARIANTS = {
    "sdpo": ["algorithm=sdpo"],
    "sdpo_official": ["algorithm=sdpo_official"],
    "sdpo_environment_shared_forward_kl": [
        "algorithm=sdpo", "algorithm.feedback=environment", "algorithm.teacher_weights=shared",
        "algorithm.teacher_regularization=none", "algorithm.distillation=full_logits", "algorithm.alpha=0",
    ],
    "sdpo_teacher_critique_joint": [
        "algorithm=sdpo", "algorithm.feedback=teacher", "teacher=rule", "algorithm.hybrid=joint",
    ],
    "sdpo_advantage_reshaping": [
        "algorithm=sdpo", "algorithm.feedback=sibling+environment", "algorithm.hybrid=advantage_reshaping",
    ],
    "sdpo_reweighting": ["algorithm=sdpo", "algorithm.feedback=environment", "algorithm.hybrid=reweighting"],
    "vpd_dynamic": ["algorithm=vpd", "algorithm.feedback=teacher", "teacher=rule", "algorithm.e_step_every=2"],
    "vpd_fixed_copy": [
        "algorithm=vpd", "algorithm.reference_prior=fixed", "algorithm.teacher_weights=copy",
        "algorithm.teacher_regularization=ema", "algorithm.feedback=environment", "algorithm.e_step_every=2",
    ],
    "vpd_e_step_off": ["algorithm=vpd", "algorithm.e_step=off"],
    "vpd_trust_region": ["algorithm=vpd", "algorithm.teacher_regularization=trust_region", "algorithm.e_step_every=2"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_runs_end_to_end(run_in_process, variant):
    proc, outputs = run_in_process("debug=fast", "debug=quick_warmstart", "logger=none", *VARIANTS[variant])
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 4
    lines = read_metrics(run_dir)
    train = [line for line in lines if "self_distillation/usable_feedback_share" in line]
    assert len(train) == 4 and all(0 <= line["self_distillation/usable_feedback_share"] <= 1 for line in train)
    assert all(line["self_distillation/teacher_copy_mb"] >= 0 for line in train)
    e_steps = [line for line in lines if "vpd/skipped" in line]
    if variant in ("vpd_dynamic", "vpd_fixed_copy", "vpd_trust_region"):
        assert len(e_steps) == 2  # e_step_every=2 over 4 steps: before steps 0 and 2
        for line in e_steps:
            assert line["vpd/successes"] + line["vpd/failures"] <= 16  # 4 prompts x 4 rollouts with a context
            if not line["vpd/skipped"]:
                assert 0.0 <= line["vpd/classifier_accuracy"] <= 1.0 and line["vpd/e_step_loss"] > 0
    else:
        assert not e_steps
    if "hybrid" in " ".join(VARIANTS[variant]):
        assert any("reward" in line for line in train)  # TRL's GRPO side ran too
