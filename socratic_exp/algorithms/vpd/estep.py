"""VPD's E-step maths (Section 3.2): unpaired preference optimisation of the feedback-conditioned teacher (pure
tensor functions; tests pin them by hand).

The teacher q_phi(y | x, C) is refined on the batch's trajectories, each scored under its own feedback context C:
the implicit reward of a trajectory is r~(x, y, C) = beta * (log q_phi(y | x, C) - log pi_ref(y | x)), the reward
under which q_phi is the KL-regularised optimum max_q E_q[r] - beta KL(q || pi_ref) (the DPO reparametrisation of the
reward-tilted target, Appendix A). pi_ref is the **dynamic reference prior**, the current student pi_theta (Eq. 7),
so the trust region beta KL(q_phi || pi_theta) slides with the student; the fixed-prior ablation (Figure 5) anchors
it to the initial student instead. Successful (y+) and failed (y-) trajectories are unpaired, so the loss is Binary
Classifier Optimisation's (BCO, Jung et al. 2025, the paper's reference [12]):

    L_E = - mean_{y+} log sigmoid(r~(y+) - delta) - mean_{y-} log sigmoid(-(r~(y-) - delta))

with delta the reward shift: the running mean over E-steps of 1/2 (mean r~(y+) + mean r~(y-)) (BCO's definition,
estimated by a running average as BCO does). Each side is averaged on its own, so the two pull with equal weight
whatever their counts: a teacher that moves every context-bearing trajectory's likelihood by the same amount
(reacting to the presence of a context, not to what it says) leaves every r~ - delta unchanged once delta has
followed it, and gets no gradient from a balanced batch (tests/test_vpd.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def implicit_rewards(teacher_logps: torch.Tensor, reference_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """r~ = beta * (log q_phi(y | x, C) - log pi_ref(y | x)), from sequence log-probabilities (one per trajectory)."""
    return beta * (teacher_logps - reference_logps)


def local_sums(*values: Any) -> list[float]:
    """The figures as they are: the sums of one process's batch (the default ``total``)."""
    return [float(value) for value in values]


def side_means(
    rewards: torch.Tensor, success: torch.Tensor, total: Callable[..., list[float]] = local_sums
) -> tuple[float | None, float | None]:
    """Mean r~ of the successes and of the failures (None for an empty side). ``total`` adds each sum and count up
    over the processes holding the batch (``distributed.summed``), so that the means are the whole batch's."""
    success_sum, successes, failure_sum, failures = total(
        rewards[success].sum(), success.sum(), rewards[~success].sum(), (~success).sum()
    )
    return (success_sum / successes if successes else None, failure_sum / failures if failures else None)


def batch_shift(means: tuple[float | None, float | None]) -> float:
    """1/2 (mean r~ of the successes + mean r~ of the failures); the mean of the side present if one is empty."""
    present = [mean for mean in means if mean is not None]
    return sum(present) / len(present)


class RunningShift:
    """delta: the running mean of the per-E-step shifts, the current one included (as BCO keeps it)."""

    def __init__(self) -> None:
        self.count = 0
        self.value = 0.0

    def update(self, shift: float) -> float:
        self.count += 1
        self.value += (shift - self.value) / self.count
        return self.value


def e_step_loss(
    rewards: torch.Tensor,
    success: torch.Tensor,
    shift: float | torch.Tensor,
    sides: tuple[float, float] | None = None,
) -> torch.Tensor:
    """BCO's loss: -mean_{y+} log sigmoid(r~ - delta) - mean_{y-} log sigmoid(-(r~ - delta)); an empty side adds 0.

    ``sides``: the (successes, failures) counts of the whole batch when ``rewards`` is one process's share of it.
    Each side's sum is divided by the batch's count, so the processes' losses (and gradients) add up to the batch's
    loss; by default the counts of ``rewards`` itself."""
    margin = rewards - shift
    successes, failures = sides if sides is not None else (float(success.sum()), float((~success).sum()))
    loss = rewards.sum() * 0.0  # attached to the graph even where this share holds no trajectory
    if successes > 0:
        loss = loss - F.logsigmoid(margin[success]).sum() / successes
    if failures > 0:
        loss = loss - F.logsigmoid(-margin[~success]).sum() / failures
    return loss


def classifier_accuracy(
    rewards: torch.Tensor, success: torch.Tensor, shift: float, total: Callable[..., list[float]] = local_sums
) -> float:
    """Share of trajectories the implicit reward puts on their side of delta (the teacher as a success classifier);
    ``total`` as in ``side_means``."""
    right, count = total(((rewards > shift) == success).sum(), success.numel())
    return right / count
