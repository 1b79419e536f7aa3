"""SocraticPO: reward decay and Theorem 1 (property tests), the interactive rollout, and end-to-end runs."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from conftest import compose, read_summary, run_dirs
from hypothesis import given, settings
from hypothesis import strategies as st

from socratic_exp.algorithms.socraticpo import attempt_metrics, decayed_rewards, normalized_advantages
from socratic_exp.models.base import frozen_copy


@st.composite
def batches(draw, max_attempts: int = 4):
    """Rollouts as their attempt outcomes: wrong attempts, then possibly a correct one, at most K attempts."""
    k = draw(st.integers(1, max_attempts))
    rollouts = []
    for _ in range(draw(st.integers(2, 24))):
        solved_at = draw(st.integers(1, k + 1))  # k + 1: never solved
        length = min(solved_at, k)
        rollouts.append([1.0 if step + 1 == solved_at else 0.0 for step in range(length)])
    return rollouts


def hand_example():
    # Four rollouts, K = 3: solved at step 1, at step 2, at step 3, never.
    return [[1.0], [0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]


def test_reward_decay_hand_computed():
    rewards = decayed_rewards(hand_example())
    # step 1: r = delta -> [1, 0, 0, 0]; mu_1 = 1/4
    # step 2 (rollouts 2-4 active): r = mu_1 * delta -> [1/4, 0, 0]; mu_2 = (1 + 1/4) / (4 + 3) = 5/28
    # step 3 (rollouts 3-4 active): r = mu_2 * delta -> [5/28, 0]
    assert rewards == [[1.0], [0.0, 0.25], [0.0, 0.0, pytest.approx(5 / 28)], [0.0, 0.0, 0.0]]
    assert decayed_rewards(hand_example(), decay=False) == hand_example()
    flat = [0.0 + r for row in rewards for r in row]
    mean = sum(flat) / len(flat)
    std = (sum((r - mean) ** 2 for r in flat) / len(flat)) ** 0.5
    advantages = normalized_advantages(rewards, eps=1e-6)
    assert advantages[0][0] == pytest.approx((1 - mean) / (std + 1e-6))
    assert advantages[1][1] == pytest.approx((0.25 - mean) / (std + 1e-6))


def test_grpo_backend_normalises_within_each_prompt_group():
    rewards = [[1.0], [0.0, 0.5], [0.0], [0.0]]
    advantages = normalized_advantages(rewards, groups=[0, 0, 1, 1])
    assert advantages[2] == advantages[3] == [0.0]  # a group with one reward value carries no signal
    assert advantages[0][0] > advantages[1][1] > advantages[1][0]
    assert sum(advantages[0] + advantages[1]) == pytest.approx(0.0, abs=1e-6)  # centred within the group


@settings(max_examples=300, deadline=None)
@given(batches())
def test_theorem1_correct_attempts_have_non_negative_advantage(rollouts):
    advantages = normalized_advantages(decayed_rewards(rollouts))
    for outcomes, values in zip(rollouts, advantages, strict=True):
        for delta, value in zip(outcomes, values, strict=True):
            if delta == 1.0:
                assert value >= -1e-9


@settings(max_examples=300, deadline=None)
@given(batches())
def test_theorem1_earlier_correct_attempts_get_larger_advantage(rollouts):
    """A rollout still active at a later step was wrong before it, so p_k < 1 there: the inequality is strict
    whenever the earlier correct attempt earned a positive reward (mu_{k-1} > 0)."""
    rewards = decayed_rewards(rollouts)
    advantages = normalized_advantages(rewards)
    correct = [(len(o), r[-1], a[-1]) for o, r, a in zip(rollouts, rewards, advantages, strict=True) if o[-1] == 1.0]
    for step_i, reward_i, value_i in correct:
        for step_j, _, value_j in correct:
            if step_i < step_j:
                assert value_i > value_j if reward_i > 0 else value_i >= value_j - 1e-9


def test_theorem1_advantage_vanishes_as_correction_saturates():
    """p_t -> 1: nearly every active rollout corrected at step 2 -> their advantage -> 0."""
    values = []
    for n in (10, 100, 1000):
        rollouts = [[1.0]] * n + [[0.0, 1.0]] * n + [[0.0, 0.0]]  # one of n + 1 active rollouts not corrected
        values.append(normalized_advantages(decayed_rewards(rollouts))[n][1])
    assert values[0] > values[1] > values[2] >= 0 and values[2] < 0.02


def test_attempt_metrics_follow_the_active_sets():
    rollouts = hand_example()
    metrics = attempt_metrics(rollouts, decayed_rewards(rollouts), 3)
    assert metrics["unassisted_acc"] == 0.25
    assert metrics["guided_acc/step2"] == 0.5 and metrics["guided_acc/step3"] == 0.75
    assert metrics["active_share/step2"] == 0.75 and metrics["active_share/step3"] == 0.5
    assert metrics["correction_rate/step2"] == pytest.approx(1 / 3) and metrics["correction_rate/step3"] == 0.5
    assert metrics["attempts_per_rollout"] == 9 / 4


# --- the interactive rollout on the tiny model ---------------------------------------------------------------


@pytest.fixture(scope="module")
def rollout_trainer(tmp_path_factory):
    """A SocraticPO trainer on the quickly warm-started tiny student, with the rule teacher."""
    from socratic_exp.algorithms.base import RunContext
    from socratic_exp.components import build_components

    cache = tmp_path_factory.mktemp("cache")
    cfg = compose(
        "algorithm=socraticpo", "teacher=rule", "debug=fast", "debug=quick_warmstart", "logger=none",
        f"model.cache_dir={cache}",
    )  # fmt: skip
    c = build_components(cfg, {"algorithm": "socraticpo"})
    student = c.model.load(c.task)
    c.teacher.attach(c.task, student)
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
    rows = [dict(data["train"][i]) for i in range(8) for _ in range(4)]
    calls = []
    guide = c.teacher.guide
    c.teacher.guide = lambda requests: calls.append(list(requests)) or guide(requests)
    trainer.model.train()  # as in the training loop: the rollout's metrics are training metrics
    output = trainer._generate_and_score_completions(rows)
    return trainer, output, calls, student.tokenizer


@pytest.mark.slow
def test_rollout_guidance_only_after_wrong_attempts_and_never_after_the_last(rollout_trainer):
    trainer, output, calls, tokenizer = rollout_trainer
    K = trainer.socratic.max_attempts
    mask = output["tool_mask"]
    for i, rollout in enumerate(trainer._rollouts):
        assert 1 <= len(rollout.outcomes) <= K
        assert all(d == 0.0 for d in rollout.outcomes[:-1])  # the rollout stopped at its first correct attempt
        gaps = [(end, start) for (_, end), (start, _) in zip(rollout.segments, rollout.segments[1:], strict=False)]
        for end, start in gaps:  # between two attempts: only teacher tokens (mask 0), and some of them
            assert start > end and mask[i, end:start].sum() == 0
        last_end = rollout.segments[-1][1]
        assert mask[i, :last_end].sum() == sum(e - s for s, e in rollout.segments)  # attempts: mask 1
        teacher_text = tokenizer.decode(output["completion_ids"][i, :last_end][mask[i, :last_end] == 0])
        assert teacher_text.count("Hint:") == len(rollout.outcomes) - 1
    # the teacher was asked exactly about the wrong, non-final attempts, each with its attempt history
    asked = [len(request.attempts) for batch in calls for request in batch]
    expected = [k + 1 for r in trainer._rollouts for k in range(len(r.outcomes) - 1)]
    assert sorted(asked) == sorted(expected)
    assert all(request.latest.score == 0.0 for batch in calls for request in batch)


@pytest.mark.slow
def test_rollout_teacher_tokens_carry_no_loss(rollout_trainer):
    """A token TRL's loss masks (tool_mask 0) gets zero gradient whatever its advantage."""
    import torch

    trainer, output, _, _ = rollout_trainer
    inputs = dict(output)
    trainer.model.train()
    trainer.model.zero_grad()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test skips
    inputs["advantages"] = torch.zeros_like(output["advantages"])
    teacher_positions = (output["tool_mask"] == 0) & (output["completion_mask"] == 1)
    assert teacher_positions.any()
    inputs["advantages"][teacher_positions] = 100.0  # only teacher tokens have a non-zero advantage
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert all(float(g.abs().sum()) == 0.0 for g in grads)


@pytest.mark.slow
def test_rollout_advantages_and_counts_match_the_active_sets(rollout_trainer):
    trainer, output, _, _ = rollout_trainer
    outcomes = [r.outcomes for r in trainer._rollouts]
    advantages = normalized_advantages(decayed_rewards(outcomes))
    for i, (rollout, values) in enumerate(zip(trainer._rollouts, advantages, strict=True)):
        for (start, end), value in zip(rollout.segments, values, strict=True):
            assert torch_close(output["advantages"][i, start:end], value)
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("socraticpo/")}
    n = len(outcomes)
    for k in range(trainer.socratic.max_attempts):
        assert logged[f"socraticpo/active_share/step{k + 1}"] == sum(len(o) > k for o in outcomes) / n
    assert logged["socraticpo/attempts_per_rollout"] == sum(map(len, outcomes)) / n
    assert logged["socraticpo/generated_tokens"] == sum(e - s for r in trainer._rollouts for s, e in r.segments)


@pytest.mark.slow
def test_length_bucketed_log_probs_equal_trl_unchunked(rollout_trainer):
    """The packed rollouts' log-probabilities and entropies, scored in trimmed length-sorted chunks, are TRL's."""
    import torch

    trainer, output, _, _ = rollout_trainer
    input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    keep = output["completion_ids"].size(1)
    lengths = output["completion_mask"].sum(1)
    assert lengths.max() > 1.5 * lengths.min()  # the case the chunking is for
    from trl import GRPOTrainer

    with torch.no_grad():
        ours = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention, keep, None, True)
        theirs = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, trainer.model, input_ids, attention, keep, compute_entropy=True
        )
    mask = output["completion_mask"].bool()
    for mine, reference in zip(ours[:2], theirs[:2], strict=True):
        assert mine.shape == reference.shape
        assert torch.allclose(mine[mask], reference[mask], atol=1e-4)


def torch_close(tensor, value: float) -> bool:
    return bool(((tensor - value).abs() < 1e-5).all())


# --- end to end ----------------------------------------------------------------------------------------------

VARIANTS = {
    "reinforce_pp": [],
    "grpo_backend": ["algorithm.backend=grpo", "algorithm.beta=0.01"],
    "kl_in_reward": ["algorithm.kl_coef=0.01"],
    "without_teacher_guidance": ["algorithm.guidance=fixed_retry", "teacher=none"],
    "without_reward_decay": ["algorithm.reward_decay=false"],
    "self_guidance": ["teacher=llm", "teacher.max_new_tokens=16"],
    "entropy_mask": ["algorithm.entropy_mask={rho:0.25,mode:top}"],
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_socraticpo_runs_end_to_end(run_app, variant):
    proc, outputs = run_app(
        "algorithm=socraticpo", "teacher=rule", "debug=fast", "debug=quick_warmstart", "logger=none",
        *VARIANTS[variant],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 4
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [line for line in lines if "socraticpo/unassisted_acc" in line]
    assert len(train) == 4
    assert all(0 <= line["socraticpo/correction_rate/step1"] <= 1 for line in train)
    if variant != "without_teacher_guidance":
        assert "eval/assisted_acc" in summary["final"]
    kept = [line["entropy_mask/kept_fraction"] for line in lines if "entropy_mask/kept_fraction" in line]
    if variant == "entropy_mask":  # the share of the student's tokens only: teacher turns are outside the mask
        assert len(kept) == 4 and all(abs(k - 0.25) < 0.01 for k in kept)
    else:
        assert not kept


def test_socraticpo_needs_a_teacher_for_teacher_guidance():
    from socratic_exp.components import build_components
    from socratic_exp.errors import ConfigError

    with pytest.raises(ConfigError, match="needs a teacher"):
        build_components(compose("algorithm=socraticpo", "teacher=none"), {"algorithm": "socraticpo"})
    build_components(compose("algorithm=socraticpo", "teacher=none", "algorithm.guidance=fixed_retry"))


@pytest.mark.slow
def test_teacher_student_kl_is_zero_for_the_same_weights_and_positive_otherwise(rollout_trainer):
    import torch

    trainer, output, _, _ = rollout_trainer
    trainer.kl_teacher = frozen_copy(trainer.model)
    assert trainer._teacher_student_kl(output) == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        for parameter in trainer.kl_teacher.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    assert trainer._teacher_student_kl(output) > 1e-3  # and the student's own weights did not move with the copy
    assert not torch.equal(next(trainer.kl_teacher.parameters()), next(trainer.model.parameters()))
    trainer.kl_teacher = None
