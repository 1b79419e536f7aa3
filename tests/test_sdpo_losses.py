"""SDPO's loss maths (``algorithms/sdpo/losses.py``) against numbers worked out by hand: the divergence's direction
in each mode, which tokens are distilled, the two aggregations, and the reward margin's sign."""

from __future__ import annotations

import math

import pytest
import torch

from socratic_exp.algorithms.sdpo.losses import aggregated, distilled_tokens, margin_of_means, per_token_divergence


def logits(*probabilities: float) -> torch.Tensor:
    """One position's logits (B = T = 1) whose softmax is ``probabilities``."""
    return torch.tensor([[[math.log(p) for p in probabilities]]])


STUDENT, TEACHER = logits(0.5, 0.5), logits(0.75, 0.25)


@pytest.mark.parametrize(
    ("alpha", "expected"),
    [
        # alpha 0: KL(teacher || student) = 0.75 ln(0.75 / 0.5) + 0.25 ln(0.25 / 0.5) = 0.304099 - 0.173287
        (0.0, 0.130812),
        # alpha 1: KL(student || teacher) = 0.5 ln(0.5 / 0.75) + 0.5 ln(0.5 / 0.25) = -0.202733 + 0.346574
        (1.0, 0.143841),
        # alpha 0.5: mixture m = (0.625, 0.375); (KL(student || m) + KL(teacher || m)) / 2 = (0.032269 + 0.035375) / 2
        (0.5, 0.033822),
    ],
)
def test_the_full_vocabulary_divergence_runs_from_the_side_alpha_names(alpha, expected):
    loss = per_token_divergence(STUDENT, TEACHER, torch.tensor([[0]]), mode="full_logits", alpha=alpha, topk=None,
                                add_tail=False)  # fmt: skip
    assert float(loss) == pytest.approx(expected, abs=1e-6)


def test_the_sampled_token_loss_is_the_students_log_ratio_times_its_log_probability():
    """Token 0 sampled: (ln 0.5 - ln 0.75) x ln 0.5 = -0.405465 x -0.693147 (the ratio is a constant weight)."""
    loss = per_token_divergence(STUDENT, TEACHER, torch.tensor([[0]]), mode="sampled_token", alpha=1.0, topk=None,
                                add_tail=False)  # fmt: skip
    assert float(loss) == pytest.approx(0.281047, abs=1e-6)


@pytest.mark.parametrize(
    ("topk", "add_tail", "expected"),
    [
        # the student's top 2 (tokens 0, 1) renormalised: (0.6, 0.4) against (0.2, 0.5) / 0.7
        (2, False, 0.213235),
        # with the tail bucket: (0.5, 1/3, 1/6) against (0.2, 0.5, 0.3), KL(student || teacher)
        (2, True, 0.225026),
        # k at least the vocabulary: the full divergence (SDPO's k = 100 on a 98-token model)
        (5, False, 0.225026),
    ],
)
def test_the_top_k_divergence_on_the_students_support(topk, add_tail, expected):
    student, teacher = logits(0.5, 1 / 3, 1 / 6), logits(0.2, 0.5, 0.3)
    loss = per_token_divergence(student, teacher, torch.tensor([[0]]), mode="topk", alpha=1.0, topk=topk,
                                add_tail=add_tail)  # fmt: skip
    assert float(loss) == pytest.approx(expected, abs=1e-6)


def test_only_rollouts_with_a_usable_context_are_distilled():
    tokens = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    assert distilled_tokens(tokens, torch.tensor([1.0, 0.0])).tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]


PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])


def test_the_token_mean_divides_by_every_distilled_token():
    assert float(aggregated(PER_TOKEN, MASK, "token_mean")) == pytest.approx((1 + 2 + 5) / 3)
    # the count of the whole batch (summed over processes) when given: 8 / 6
    assert float(aggregated(PER_TOKEN, MASK, "token_mean", count=6.0)) == pytest.approx(8 / 6)


def test_the_sequence_mean_averages_each_rollouts_mean():
    assert float(aggregated(PER_TOKEN, MASK, "sequence_mean")) == pytest.approx((1.5 + 5.0) / 2)
    # a rollout with nothing distilled counts 0 in the mean over rollouts
    empty_row = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert float(aggregated(PER_TOKEN, empty_row, "sequence_mean")) == pytest.approx(1.5 / 2)
    assert float(aggregated(PER_TOKEN, torch.zeros(2, 3), "token_mean")) == 0.0
    one_token = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert float(aggregated(PER_TOKEN, one_token, "token_mean")) == 2.0  # one distilled token: its own value


def test_the_margin_is_the_right_rollouts_mean_minus_the_wrong_ones():
    assert margin_of_means(3.0, 2.0, 1.0, 4.0) == pytest.approx(1.25)  # 1.5 - 0.25
    assert margin_of_means(-1.0, 1.0, 2.0, 1.0) == pytest.approx(-3.0)
    assert margin_of_means(3.0, 0.0, 1.0, 4.0) is None and margin_of_means(3.0, 2.0, 1.0, 0.0) is None


def test_reweighting_clips_each_weight_and_keeps_each_rollouts_summed_advantage():
    """Rollout 0 (A = 1): weights exp(+delta) = 5, 1 on its two tokens, 5 clipped to 3, then normalised to mean 1:
    1.5, 0.5. Rollout 1 (A = -2): exp(-delta) = 0.5, 0.25, 1, 0.25 clipped to 1/3; their mean 11/18, so the weights
    are 9/11, 6/11, 18/11 and the advantages -18/11, -12/11, -36/11 (summing to -6 = A x 3 tokens)."""
    from socratic_exp.algorithms.sdpo.losses import reweighted_advantages

    advantages = torch.tensor([1.0, -2.0])
    delta = torch.tensor([[math.log(5.0), 0.0, 7.0], [math.log(2.0), math.log(4.0), 0.0]])
    tokens = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    result = reweighted_advantages(advantages, delta, tokens, clip=3.0)
    assert result[0].tolist() == pytest.approx([1.5, 0.5, 0.0], abs=1e-6)
    assert result[1].tolist() == pytest.approx([-18 / 11, -12 / 11, -36 / 11], abs=1e-6)
    # a rollout of one token keeps its advantage whatever its weight
    single = reweighted_advantages(torch.tensor([0.5]), torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0]]), 3.0)
    assert single[0].tolist() == pytest.approx([0.5, 0.0], abs=1e-6)
