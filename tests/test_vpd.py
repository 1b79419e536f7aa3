"""SDPO and VPD: the feedback contexts, the E-step target and its trust region, the hybrids, the collapse guard,
and few-step runs of every variant on the tiny model."""

from __future__ import annotations

import itertools
import json
import math
import tempfile
from pathlib import Path

import pytest
from conftest import compose, read_summary, run_dirs
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
    backtrack_fractions,
    e_step_loss,
    solve_beta,
    step_bound,
    support_kl,
    target_kl,
    teacher_support_kl,
    tilted_target,
    within_bound,
)

torch = pytest.importorskip("torch")

# --- the E-step target ---------------------------------------------------------------------------------------------


def test_tilted_target_hand_example():
    """Dynamic prior (samples of the current student): q* = softmax(r / beta) over the group, Z = mean exp(r / beta)."""
    target, log_z = tilted_target(torch.tensor([1.0, 0.0, 0.0, 1.0]), beta=0.5)
    e2 = math.exp(2.0)
    assert target.tolist() == pytest.approx([e2 / (2 * e2 + 2), 1 / (2 * e2 + 2), 1 / (2 * e2 + 2), e2 / (2 * e2 + 2)])
    assert float(log_z) == pytest.approx(math.log((2 * e2 + 2) / 4))


def test_tilted_target_with_a_prior_is_the_exact_tilted_distribution():
    """Three outcomes, each sampled once by a uniform sampler; l = log pi_ref - log(1/3) reweights them to pi_ref, so
    the estimate is exact: q* = pi_ref exp(r / beta) / Z with Z = sum pi_ref exp(r / beta) (Appendix A.1)."""
    prior, rewards, beta = [0.5, 0.3, 0.2], [0.0, 1.0, 0.5], 0.25
    unnormalised = [p * math.exp(r / beta) for p, r in zip(prior, rewards, strict=True)]
    z = sum(unnormalised)
    log_weights = torch.tensor([math.log(p) - math.log(1 / 3) for p in prior])
    target, log_z = tilted_target(torch.tensor(rewards), beta, log_weights)
    assert target.tolist() == pytest.approx([u / z for u in unnormalised])
    assert float(log_z) == pytest.approx(math.log(z))
    # a larger beta moves the target back toward the prior
    assert tilted_target(torch.tensor(rewards), 1e3, log_weights)[0].tolist() == pytest.approx(prior, abs=1e-3)


def test_two_trajectory_target_and_its_kl_by_hand():
    """One right (r=1) and one wrong (r=0) rollout, beta = 0.5. Dynamic prior (uniform on the support): q* = (e^2, 1) /
    (e^2 + 1) = (0.880797, 0.119203), KL(q* || (1/2, 1/2)) = 0.327813 nats, log Z = log((e^2 + 1) / 2) = 1.433781.
    Fixed prior putting (0.8, 0.2) on them: q* = (0.8 e^2, 0.2) / (0.8 e^2 + 0.2) = (0.967273, 0.032727), KL to
    (0.8, 0.2) = 0.124416, log Z = log(0.8 e^2 + 0.2) = 1.810130."""
    rewards = torch.tensor([[1.0, 0.0]])
    target, log_z = tilted_target(rewards, 0.5)
    assert target[0].tolist() == pytest.approx([0.880797, 0.119203], abs=1e-6)
    assert float(log_z[0]) == pytest.approx(1.433781, abs=1e-6)
    assert target_kl(rewards, 0.5) == pytest.approx(0.327813, abs=1e-6)
    # a second group with no reward signal has q* = prior, KL 0: the mean over groups halves
    assert target_kl(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), 0.5) == pytest.approx(0.163907, abs=1e-6)
    # the prior's log-weights are l = log pi_ref - log pi_sampler; any constant shift of l is the same prior
    fixed = torch.tensor([[math.log(0.8 / 0.5), math.log(0.2 / 0.5)]])
    target, log_z = tilted_target(rewards, 0.5, fixed)
    assert target[0].tolist() == pytest.approx([0.967273, 0.032727], abs=1e-6)
    assert float(log_z[0]) == pytest.approx(1.810130, abs=1e-6)
    assert target_kl(rewards, 0.5, fixed) == pytest.approx(0.124416, abs=1e-6)
    assert target_kl(rewards, 0.5, fixed + 3.0) == pytest.approx(0.124416, abs=1e-6)


def test_two_trajectory_e_step_loss_and_gradient_by_hand():
    """Target (0.880797, 0.119203) as above. A teacher with log q/pi = (log 3, 0) puts (3/4, 1/4) on the support:
    KL(q* || q_phi) = 0.053306, and its own KL to the uniform prior is 0.75 log 1.5 + 0.25 log 0.5 = 0.130812. At log
    q/pi = (0, 0) the gradient of KL(q* || softmax(z)) is softmax(z) - q* = (-0.380797, +0.380797)."""
    target = torch.tensor([[0.880797, 0.119203]])
    assert float(e_step_loss(torch.tensor([[math.log(3.0), 0.0]]), target)) == pytest.approx(0.053306, abs=1e-5)
    assert float(e_step_loss(torch.tensor([[math.log(3.0) + 7.0, 7.0]]), target)) == pytest.approx(0.053306, abs=1e-5)
    assert teacher_support_kl(torch.tensor([[math.log(3.0), 0.0]]), torch.zeros(1, 2)) == pytest.approx(
        0.130812, abs=1e-6
    )
    fixed = torch.tensor([[math.log(0.8), math.log(0.2)]])  # KL((3/4, 1/4) || (0.8, 0.2)) = 0.007382
    assert teacher_support_kl(torch.tensor([[math.log(3.0), 0.0]]), fixed) == pytest.approx(0.007382, abs=1e-6)
    ratio = torch.zeros(1, 2, requires_grad=True)
    loss = e_step_loss(ratio, target)
    assert float(loss) == pytest.approx(0.327813, abs=1e-5)  # = KL(q* || uniform)
    loss.backward()
    assert ratio.grad[0].tolist() == pytest.approx([-0.380797, 0.380797], abs=1e-6)
    both = torch.zeros(2, 2, requires_grad=True)  # two groups, the second already at its (uniform) target
    e_step_loss(both, torch.tensor([[0.880797, 0.119203], [0.5, 0.5]])).backward()
    assert both.grad.flatten().tolist() == pytest.approx([-0.190399, 0.190399, 0.0, 0.0], abs=1e-6)  # group mean


def test_one_group_may_be_a_flat_support():
    """A single group as a (G,) tensor gives the same numbers as a (1, G) one (the support is the last dimension)."""
    target = torch.tensor([0.880797, 0.119203])
    three_to_one = torch.tensor([math.log(3.0), 0.0])
    assert float(e_step_loss(three_to_one, target)) == pytest.approx(0.053306, abs=1e-5)
    assert target_kl(torch.tensor([1.0, 0.0]), 0.5) == pytest.approx(0.327813, abs=1e-6)
    prior = torch.tensor([math.log(0.8), math.log(0.2)])
    assert teacher_support_kl(three_to_one, prior) == pytest.approx(0.007382, abs=1e-6)
    assert float(support_kl(torch.tensor([0.75, 0.25]).log(), prior)) == pytest.approx(0.007382, abs=1e-6)
    assert tilted_target(torch.tensor([1.0, 0.0]), 0.5)[0].tolist() == pytest.approx([0.880797, 0.119203], abs=1e-6)


def test_beta_solve_lands_on_the_trust_region_by_hand():
    """One right rollout out of four, dynamic prior: at beta = 1 / log 3, q* = (3, 1, 1, 1) / 6 and KL(q* || uniform)
    = 1/2 log 2 + 1/2 log(2/3) = 1/2 log(4/3) = 0.143841. So a trust region of 0.143841 nats gives beta = 0.910239."""
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    assert solve_beta(rewards, 0.5 * math.log(4 / 3)) == pytest.approx(1 / math.log(3), rel=1e-5)
    # two such groups and one without signal: the mean KL is 2/3 of a group's, so the same beta needs 2/3 the bound
    three = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    assert solve_beta(three, 0.5 * math.log(4 / 3) * 2 / 3) == pytest.approx(1 / math.log(3), rel=1e-5)
    # a region wider than any target (the sharpest q* = (1, 0, 0, 0) is log 4 = 1.386 nats out): the smallest beta
    assert solve_beta(rewards, 1.4) == pytest.approx(1e-3)
    # a region narrower than the flattest target in range (beta = 1e3: KL ~ 1.9e-7 nats): the largest beta
    assert solve_beta(rewards, 1e-8) == pytest.approx(1e3)
    # a fixed prior already leaning to the right rollout: q* is (0.8 e^2, 0.2) / Z at beta = 0.5, 0.124416 nats out
    fixed = torch.tensor([[math.log(0.8), math.log(0.2)]])
    assert solve_beta(torch.tensor([[1.0, 0.0]]), 0.124416, fixed) == pytest.approx(0.5, rel=1e-4)


def _uniform_prior_kl(rewards: list[list[float]], beta: float) -> float:
    """KL(softmax(r / beta) || uniform), averaged over groups, written out in plain Python (not the module's code)."""
    total = 0.0
    for group in rewards:
        weights = [math.exp((r - max(group)) / beta) for r in group]
        z = sum(weights)
        total += sum(w / z * math.log(w / z * len(group)) for w in weights if w > 0)
    return total / len(rewards)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=4, max_size=4), min_size=1, max_size=6),
    st.floats(0.01, 1.5),
)
def test_adaptive_beta_puts_the_target_on_the_trust_region(groups, bound):
    beta = solve_beta(torch.tensor(groups), bound)
    if _uniform_prior_kl(groups, 1e-3) <= bound:  # even the sharpest target is inside: beta is the interval's end
        assert beta == pytest.approx(1e-3)
    else:
        assert _uniform_prior_kl(groups, beta) == pytest.approx(bound, abs=1e-4)
    assert _uniform_prior_kl(groups, beta) <= bound + 1e-4


def test_the_teacher_step_guard_by_hand():
    """A step may end at max(trust region, where the teacher was): inside stays inside, outside never goes further;
    a rejected step is retried at 1/2, 1/4, ... of itself, ``max_backtracks`` times."""
    assert step_bound(0.5, 0.2) == 0.5 and step_bound(0.5, 0.8) == 0.8
    assert within_bound(0.5, 0.5) and within_bound(0.5 + 5e-7, 0.5)  # float noise of a forward pass
    assert within_bound(0.5 + 1e-6, 0.5)  # the tolerance itself is inside
    assert not within_bound(0.5 + 2e-6, 0.5) and not within_bound(0.6, 0.5)
    assert backtrack_fractions(3) == [0.5, 0.25, 0.125]
    assert backtrack_fractions(1) == [0.5] and backtrack_fractions(0) == []


def test_e_step_loss_vanishes_at_the_target_and_pushes_toward_it():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    target, _ = tilted_target(rewards, 0.5)
    at_target = (target.log() + 3.0).requires_grad_(True)  # any per-group constant
    assert float(e_step_loss(at_target, target)) == pytest.approx(0.0, abs=1e-6)
    ratio = torch.zeros(1, 4, requires_grad=True)  # the teacher does not yet prefer any rollout
    e_step_loss(ratio, target).backward()
    assert ratio.grad[0, 0] < 0 and ratio.grad[0, 1] > 0  # descent raises the rewarded, lowers the others
    assert teacher_support_kl(torch.zeros(1, 4), torch.zeros(1, 4)) == pytest.approx(0.0)


@pytest.mark.parametrize(("every", "expected"), [(1, [0, 1, 2, 3, 4, 5, 6]), (3, [0, 3, 6]), (4, [0, 4])])
def test_the_e_step_runs_every_e_step_every_steps(every, expected):
    """The trainer's own schedule (``VPDTrainer._after_contexts``) over optimizer steps 0-6, two generation calls per
    step (the second, e.g. evaluation or a second generation batch, never adds an E-step), eval batches never."""
    from collections import defaultdict
    from types import SimpleNamespace

    from socratic_exp.algorithms.vpd.trainer import VPDTrainer

    ran = []
    trainer = SimpleNamespace(
        sdpo=SimpleNamespace(e_step_every=every),
        state=SimpleNamespace(global_step=0),
        _last_e_step=None,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        e_step=lambda output, rollouts: ran.append(trainer.state.global_step) or {"beta": 1.0, "backtracks": None},
    )
    for step in range(7):
        trainer.state.global_step = step
        VPDTrainer._after_contexts(trainer, {}, [], "eval")
        VPDTrainer._after_contexts(trainer, {}, [], "train")
        VPDTrainer._after_contexts(trainer, {}, [], "train")
    assert ran == expected
    assert trainer._metrics["train"]["vpd/beta"] == [1.0] * len(expected) and not trainer._metrics["eval"]
    assert "vpd/backtracks" not in trainer._metrics["train"]  # None values are not logged


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
    from socratic_exp.components import build_components

    c = build_components(compose("+sweep=vpd_ablation", f"+vpd_arm={arm}"))
    a = c.algorithm
    assert (type(a).__name__, getattr(a, "feedback", None), getattr(a, "reference_prior", None)) == expected
    assert (type(c.teacher).__name__ == "RuleTeacher") == (expected[1] == "teacher")  # critiques need a teacher


# --- the feedback contexts -----------------------------------------------------------------------------------------

GROUP = [  # one prompt, four rollouts: wrong, right, wrong (format), right
    Rollout("Q: 3+4*2=?\n", "3+4=7\n7*2=14\nA: 14\n", 0.0, "wrong"),
    Rollout("Q: 3+4*2=?\n", "4*2=8\n3+8=11\nA: 11\n", 1.0, "correct"),
    Rollout("Q: 3+4*2=?\n", "4*2=8\n3+8=11\n", 0.0, "format"),
    Rollout("Q: 3+4*2=?\n", "<think>hm</think>4*2=8\n3+8=11\nA: 11\n", 1.0, "correct"),
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


def test_environment_feedback_is_the_verifiers_reason_after_the_attempt():
    contexts = build_contexts(GROUP, 4, plain("environment"))
    assert [c.usable for c in contexts] == [True, False, True, False]  # successes get no feedback
    assert contexts[0].feedback == environment_feedback("wrong")
    assert contexts[0].prompt == f"{environment_feedback('wrong')}\nQ: 3+4*2=?\n"
    assert "format" in contexts[2].feedback and contexts[2].feedback != contexts[0].feedback
    assert contexts[1].prompt == "Q: 3+4*2=?\n"


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
        f"Note: a correct solution is\n4*2=8\n3+8=11\nA: 11\n{environment_feedback('wrong')}\nHint: critique 0.\n"
        "Q: 3+4*2=?\n"
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
        f"{environment_feedback('wrong')}\n\n\n\nCorrectly solve the original question.\n"
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
    from socratic_exp.algorithms.base import RunContext
    from socratic_exp.components import build_components

    cfg = compose(
        "algorithm=vpd", "algorithm.feedback=environment", "algorithm.teacher_weights=shared",
        "algorithm.ema_update_rate=0", "debug=fast", "debug=quick_warmstart", "logger=none",
        f"model.cache_dir={cache_dir}", *overrides,
    )  # fmt: skip
    c = build_components(cfg, {"algorithm": "vpd"})
    student = c.model.load(c.task)
    data = c.task.build()
    ctx = RunContext(
        components=c,
        data=data,
        student=student,
        run_dir=Path(tempfile.mkdtemp()),
        run_name="test",
        seed=0,
        callbacks=[],
        report_to=[],
    )
    trainer = c.algorithm.build_trainer(ctx)
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


def alternating(rollouts):
    """The rollouts with rewards 0, 1, 0, 1...: every group has something for the E-step to fit (it reads scores)."""
    return [Rollout(r.prompt, r.completion, float(i % 2), r.reason) for i, r in enumerate(rollouts)]


def reset(trainer, initial, lr):
    trainer.model.load_state_dict(initial)
    trainer.e_optimizer.state.clear()
    trainer.e_optimizer.param_groups[0]["lr"] = lr


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
    gradient = torch.autograd.grad(loss, list(trainer.model.parameters()), allow_unused=True)
    assert any(g is not None and float(g.abs().sum()) > 0 for g in gradient)


@pytest.mark.slow
def test_the_trust_region_keeps_the_teacher_within_its_bound_of_the_student(vpd_batch):
    trainer, output, rollouts, initial, _ = vpd_batch
    rollouts = alternating(rollouts)
    trainer.sdpo.trust_region = 0.02
    reset(trainer, initial, 0.05)  # a step far too large: it must be cut back
    metrics = trainer.e_step(output, rollouts)
    bound = max(0.02, metrics["teacher_kl_before"])
    assert metrics["teacher_kl_after"] <= bound + 1e-6
    assert metrics["backtracks"] > 0 or metrics["rejected"] == 1.0
    tokens = trainer._token_mask(output)
    student = trainer._student_sequence_logps(output, tokens)
    # measured again, independently of the E-step's own bookkeeping (the student's weights are the teacher's here)
    with torch.no_grad():
        prior = torch.zeros(4, 4)
        kl, _ = trainer._teacher_state(output, tokens, output["completion_ids"].size(1), student, 4, prior)
    assert kl <= bound + 0.05  # the anchor is the student before the step; the shared weights moved with the teacher
    assert all(p.grad is None for p in trainer.model.parameters())  # no E-step gradient is left for the M-step
    trainer.sdpo.max_backtracks = 0
    reset(trainer, initial, 0.05)
    rejected = trainer.e_step(output, rollouts)
    assert rejected["rejected"] == 1.0 and rejected["teacher_kl_after"] == pytest.approx(rejected["teacher_kl_before"])
    assert all(torch.equal(p, initial[k]) for k, p in trainer.model.state_dict().items())  # the step was undone
    trainer.sdpo.max_backtracks, trainer.sdpo.trust_region = 4, 0.5
    reset(trainer, initial, 1e-3)  # a moderate step: accepted, and closer to the target
    before = trainer.e_step(output, rollouts)
    after = trainer.e_step(output, rollouts)
    assert before["rejected"] == 0.0 and after["e_step_loss"] < before["e_step_loss"]
    trainer.model.load_state_dict(initial)


@pytest.mark.slow
def test_the_dynamic_anchor_follows_the_student_and_the_fixed_one_does_not(vpd_batch, cache_dir):
    """Eq. 7 against the Figure 5 ablation: two trainers that differ only in ``reference_prior``, same student, same
    batch, beta fixed at 1. Before any student step both priors are the student, so both targets are softmax(r) over
    each group: rewards (0, 1, 0, 1) give (1, e, 1, e) / (2 + 2e) = (0.134471, 0.365529, ...). After one student step
    the dynamic prior is the new student (log-weights 0, the same target); the fixed prior is still the initial
    student, log-weights log pi_0 - log pi_1 != 0, so its target moves."""
    dynamic, output, rollouts, initial, _ = vpd_batch
    fixed, _, _ = _vpd_trainer(cache_dir, "algorithm.reference_prior=fixed")
    rollouts = alternating(rollouts)
    softmax_r = torch.tensor([0.134471, 0.365529] * 8).view(4, 4)
    dynamic.model.load_state_dict(initial)
    fixed.model.load_state_dict(initial)
    fixed.reference_model.load_state_dict(initial)  # both start from the batch's student
    for trainer in (dynamic, fixed):
        trainer.sdpo.tilt_beta = 1.0
        _, _, prior, beta, target = trainer.e_step_target(output, rollouts)
        assert beta == 1.0 and float(prior.abs().max()) < 1e-4
        assert torch.allclose(target, softmax_r, atol=1e-4)
    inputs = dict(output, distill_mask=torch.ones_like(output["distill_mask"]))
    for trainer in (dynamic, fixed):  # one M-step (plain SGD on the distillation loss), the same on both
        trainer.model.zero_grad(set_to_none=True)
        trainer._distillation_loss(trainer.model, inputs).backward()
        with torch.no_grad():
            for parameter in trainer.model.parameters():
                if parameter.grad is not None:
                    parameter.add_(parameter.grad, alpha=-0.5)
        trainer.model.zero_grad(set_to_none=True)
    assert not all(torch.equal(p, initial[k]) for k, p in dynamic.model.state_dict().items())
    _, _, dynamic_prior, _, dynamic_target = dynamic.e_step_target(output, rollouts)
    _, _, fixed_prior, _, fixed_target = fixed.e_step_target(output, rollouts)
    assert float(dynamic_prior.abs().max()) == 0.0 and torch.allclose(dynamic_target, softmax_r, atol=1e-4)
    assert float(fixed_prior.abs().max()) > 1e-2  # log pi_0 - log pi_1 of the rollouts
    assert float((fixed_target - dynamic_target).abs().max()) > 1e-3
    # the fixed target is the tilted prior by hand: pi_0 / pi_1 times exp(r), renormalised over each group
    by_hand = fixed_prior.exp() * torch.tensor([1.0, math.e] * 8).view(4, 4)
    assert torch.allclose(fixed_target, by_hand / by_hand.sum(1, keepdim=True), atol=1e-5)
    dynamic.model.load_state_dict(initial)
    dynamic.sdpo.tilt_beta = None


@pytest.mark.slow
def test_a_teacher_copy_scores_with_its_own_weights(vpd_batch):
    """TRL's fused LM head binds the plain forward to the student: a deep copy must still use its own weights."""
    from socratic_exp.algorithms.trl_batch import full_logits
    from socratic_exp.models.base import frozen_copy

    trainer, output, _, _, _ = vpd_batch
    copy = frozen_copy(trainer.model)
    ids, mask = output["teacher_input_ids"], output["teacher_attention_mask"]
    keep = output["completion_ids"].size(1)
    with torch.no_grad():
        for parameter in copy.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
        ours = full_logits(copy, ids, mask, keep, 1.0)
        student = full_logits(trainer.model, ids, mask, keep, 1.0)
        fused, _ = trainer._sampled_logps(copy, ids, mask, keep)
    assert not torch.allclose(ours, student)
    tokens = output["completion_mask"].bool()
    own = ours.log_softmax(-1).gather(-1, output["completion_ids"].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(own[tokens], fused[tokens], atol=1e-4)


# --- the collapse guard --------------------------------------------------------------------------------------------


def test_collapse_guard_stops_after_patience_and_restores_the_best_weights():
    from socratic_exp.callbacks import CollapseGuard

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
    assert guard.summary() == {
        "metric": "eval/greedy_acc", "margin": 0.05, "best": 0.6, "best_step": 10, "last_step": 50, "last": 0.5,
        "stopped_at_step": 50, "restored_step": 10,
    }  # fmt: skip
    watch_only = CollapseGuard("eval/greedy_acc", margin=None)
    assert not any(watch_only.observe(s, {"eval/greedy_acc": v}, model) for s, v in [(0, 0.9), (1, 0.1), (2, 0.0)])
    assert watch_only.summary()["best"] == 0.9 and "stopped_at_step" not in watch_only.summary()


def test_periodic_evaluation_stops_training_on_collapse():
    from types import SimpleNamespace

    from socratic_exp.callbacks import CollapseGuard, PeriodicEvalCallback

    scores = iter([0.5, 0.2])
    evaluator = SimpleNamespace(evaluate=lambda student: {"eval/greedy_acc": next(scores)})
    sink = SimpleNamespace(log_evaluation=lambda *args: None)
    student = SimpleNamespace(model=torch.nn.Linear(1, 1))
    guard = CollapseGuard("eval/greedy_acc", margin=0.1)
    callback = PeriodicEvalCallback(evaluator, student, 5, sink, None, guard)
    control = SimpleNamespace(should_training_stop=False)
    for step in (5, 10):
        state = SimpleNamespace(global_step=step, max_steps=100, is_world_process_zero=True)
        callback.on_step_end(None, state, control)
    assert control.should_training_stop and guard.stopped_at == 10 and guard.best_step == 5


@pytest.mark.slow
def test_a_collapsing_run_stops_and_keeps_its_best_checkpoint(run_app):
    proc, outputs = run_app(
        "algorithm=grpo", "debug=fast", "debug=quick_warmstart", "logger=none", "algorithm.learning_rate=1.0",
        "eval.collapse_margin=0.0", "eval.pass_k=0",
    )  # fmt: skip
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
        "algorithm.ema_update_rate=0", "algorithm.distillation=full_logits", "algorithm.alpha=0",
    ],
    "sdpo_teacher_critique_joint": [
        "algorithm=sdpo", "algorithm.feedback=teacher", "teacher=rule", "algorithm.hybrid=joint",
    ],
    "sdpo_advantage_reshaping": [
        "algorithm=sdpo", "algorithm.feedback=sibling+environment", "algorithm.hybrid=advantage_reshaping",
    ],
    "sdpo_reweighting": ["algorithm=sdpo", "algorithm.feedback=environment", "algorithm.hybrid=reweighting"],
    "vpd_dynamic": ["algorithm=vpd", "algorithm.feedback=teacher", "teacher=rule"],
    "vpd_fixed_shared": [
        "algorithm=vpd", "algorithm.reference_prior=fixed", "algorithm.teacher_weights=shared",
        "algorithm.ema_update_rate=0", "algorithm.feedback=environment",
    ],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_runs_end_to_end(run_app, variant):
    proc, outputs = run_app("debug=fast", "debug=quick_warmstart", "logger=none", *VARIANTS[variant])
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 4
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [line for line in lines if "self_distillation/usable_feedback_share" in line]
    assert len(train) == 4 and all(0 <= line["self_distillation/usable_feedback_share"] <= 1 for line in train)
    assert all(line["self_distillation/teacher_copy_mb"] >= 0 for line in train)
    e_steps = [line for line in lines if "vpd/teacher_kl_after" in line]
    if variant.startswith("vpd"):
        assert len(e_steps) == 4  # e_step_every=1
        for line in e_steps:
            assert line["vpd/teacher_kl_after"] <= max(0.5, line["vpd/teacher_kl_before"]) + 1e-6
            assert 1e-3 <= line["vpd/beta"] <= 1e3
    else:
        assert not e_steps
    if "hybrid" in " ".join(VARIANTS[variant]):
        assert any("reward" in line for line in train)  # TRL's GRPO side ran too
