"""VPD's E-step maths on one group's sampled support (pure tensor functions; tests pin them by hand).

**Our reading, not yet the paper's Section 3.2** (issue 17 replaces it): the teacher q_phi(y | x, C) is fitted, with a
forward KL, to the reward-tilted target q*(y | x) = pi_ref(y | x) exp(r(x, y) / beta) / Z(x) (Appendix A.1, Eq. A.6).
The G rollouts of a prompt are samples of the current student pi_theta, so on that support q* is the self-normalised
importance estimate q*_i = softmax_i(l_i + r_i / beta), l_i = log pi_ref(y_i | x) - log pi_theta(y_i | x) (l = 0 for
the dynamic prior, Eq. 7). The teacher's distribution on the same support is softmax_i(log q_phi(y_i | x, C_i) -
log pi_theta(y_i | x)). beta is the temperature whose target lies ``trust_region`` nats from the prior (mean over
groups; the REPS / MPO temperature dual), and a teacher step is accepted only while the teacher's own support KL to
the prior stays within max(trust_region, its value before the step), else halved (``backtrack_fractions``).

Every function takes (groups, G) tensors (or (G,) for one group): rows are groups, the last dimension the support.
"""

from __future__ import annotations

import math

import torch

BETA_RANGE = (1e-3, 1e3)  # the temperature search interval (log-bisection)
NOTHING_TO_FIT = 1e-6  # an E-step loss (nats) below which the teacher already matches the target
TOLERANCE = 1e-6  # nats: slack of the trust-region test (float noise of a forward pass)


def tilted_target(
    rewards: torch.Tensor, beta: float, prior_log_weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """q*_i = softmax_i(l_i + r_i / beta) on the last dimension, and log Z = log sum_i softmax(l)_i exp(r_i / beta).

    ``prior_log_weights`` l_i = log pi_ref(y_i) - log pi_sampler(y_i) (None: the sampler is the prior, l = 0).
    """
    log_prior = torch.zeros_like(rewards) if prior_log_weights is None else prior_log_weights
    scores = log_prior + rewards / beta
    log_z = torch.logsumexp(scores, -1) - torch.logsumexp(log_prior, -1)
    return torch.softmax(scores, -1), log_z


def support_kl(p_log: torch.Tensor, q_log: torch.Tensor) -> torch.Tensor:
    """KL(p || q) of distributions given as log-probabilities on the last dimension."""
    return (p_log.exp() * (p_log - q_log)).sum(-1)


def target_kl(rewards: torch.Tensor, beta: float, prior_log_weights: torch.Tensor | None = None) -> float:
    """Mean over groups (rows) of KL(q*_g || prior_g) at temperature ``beta``."""
    log_prior = torch.zeros_like(rewards) if prior_log_weights is None else prior_log_weights
    target, _ = tilted_target(rewards, beta, log_prior)
    return float(support_kl(target.clamp(min=1e-30).log(), log_prior.log_softmax(-1)).mean())


def solve_beta(
    rewards: torch.Tensor, bound: float, prior_log_weights: torch.Tensor | None = None, iterations: int = 60
) -> float:
    """The temperature whose target lies ``bound`` nats from the prior (mean over groups), by bisection in log beta:
    the KL falls monotonically as beta grows. Beyond the reachable range it returns the interval's end."""
    low, high = (math.log(b) for b in BETA_RANGE)
    if target_kl(rewards, math.exp(low), prior_log_weights) <= bound:
        return math.exp(low)  # even the sharpest target is within the region
    if target_kl(rewards, math.exp(high), prior_log_weights) >= bound:
        return math.exp(high)
    for _ in range(iterations):
        middle = (low + high) / 2
        if target_kl(rewards, math.exp(middle), prior_log_weights) > bound:
            low = middle
        else:
            high = middle
    return math.exp(high)  # the side within the bound


def e_step_loss(teacher_log_ratio: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over groups of KL(q* || q_phi), q_phi = softmax over each group of log q_phi(y | x, C) - log pi(y | x)."""
    return support_kl(target.clamp(min=1e-30).log(), teacher_log_ratio.log_softmax(-1)).mean()


def teacher_support_kl(teacher_log_ratio: torch.Tensor, prior_log_weights: torch.Tensor) -> float:
    """Mean over groups of KL(q_phi,g || prior_g): how far the teacher is from the anchor on the sampled support."""
    return float(support_kl(teacher_log_ratio.log_softmax(-1), prior_log_weights.log_softmax(-1)).mean())


# --- the trust-region guard on the teacher's step -----------------------------------------------------------------
def step_bound(trust_region: float, kl_before: float) -> float:
    """The most support KL to the prior a teacher step may end at: the region, or where the teacher already was if
    it was outside (the student moved, or the fixed prior), so a step never takes it further out."""
    return max(trust_region, kl_before)


def within_bound(kl_after: float, bound: float) -> bool:
    """Whether a teacher step ending at ``kl_after`` is accepted (up to float noise, ``TOLERANCE``)."""
    return kl_after <= bound + TOLERANCE


def backtrack_fractions(max_backtracks: int) -> list[float]:
    """The shares of a rejected step tried in turn (1/2, 1/4, ...); after the last the step is undone (share 0)."""
    return [0.5**k for k in range(1, max_backtracks + 1)]
