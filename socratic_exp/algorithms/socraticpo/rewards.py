"""SocraticPO's rewards and advantages (arXiv 2606.09887, Section 4.2-4.3, Eq. 14-20), as plain functions.

Notation: rollout i of the (global) batch makes attempts k = 1..L_i (it stops at its first correct one, Algorithm
1); attempt k has T_ik student tokens and correctness delta_i^(k).

**Step-wise rewards with reward decay (Eq. 17-19).** r_i^(1) = delta_i^(1); for k >= 2,
r_i^(k) = mu_{k-1} * delta_i^(k), where mu_{k-1} is the mean reward of every active attempt of steps 1..k-1 in the
batch (Eq. 18). Without decay (the paper's "w/o rd") r_i^(k) = delta_i^(k).

**Returns with the KL to the initial policy folded in (REINFORCE++, Hu et al. 2025; OpenRLHF's ``reinforce``
estimator).** REINFORCE++ gives each response the reward r at its last token and -beta * kappa_t at every token,
kappa_t = log pi_old(y_t | .) - log pi_ref(y_t | .) (the k1 estimate), and takes the undiscounted return-to-go.
SocraticPO credits attempt k's tokens with that attempt's own reward only (Eq. 15: the gradient of attempt k is
weighted by r^(k), not by later attempts' rewards), so each attempt is one REINFORCE++ response and its KL-to-go
stops at its own last token::

    G_ikt = r_i^(k) - beta * sum_{s=t..T_ik} kappa_iks

**Batch normalisation (Eq. 20), after the folding.** A_ikt = (G_ikt - mu) / (sigma + eps), with mu and sigma the
weighted mean and (population) standard deviation of the returns over the batch (``groups``: within each group of
rollouts instead, the ``grpo`` backend). The weight of a token decides what "the batch" counts:

- ``attempts`` (default): w_ikt = 1 / T_ik, every attempt counts once. With beta = 0 every token of an attempt has
  G = r_i^(k), so mu and sigma are exactly Eq. 20's mean and std over the batch's attempts, on which Theorem 1
  (non-negativity, monotonicity, saturation decay; its proof counts attempts, Eq. 22) rests.
- ``tokens``: w_ikt = 1, every student token counts once, as OpenRLHF normalises REINFORCE++'s token-level
  returns. With beta = 0 a long attempt then weighs more than a short one, and Theorem 1 no longer holds exactly.

An attempt without tokens (a plain-text attempt that was a bare end-of-sequence) trains nothing and is left out of
mu and sigma (its reward still enters the decay's mu_k, Eq. 18).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Weighting = Literal["attempts", "tokens"]


def decayed_rewards(outcomes: Sequence[Sequence[float]], decay: bool = True) -> list[list[float]]:
    """Step-wise rewards of each rollout's attempts (Eq. 17-19).

    ``outcomes[i]`` holds delta for each attempt rollout i made (a rollout stops at its first correct attempt, so
    rollout i is active at step k when it has a k-th attempt). Without ``decay`` the reward is delta itself.
    """
    if not decay:
        return [[float(d) for d in attempts] for attempts in outcomes]
    rewards: list[list[float]] = [[] for _ in outcomes]
    total, count = 0.0, 0  # running sums over the active attempts of steps 1..k-1 (Eq. 18)
    steps = max((len(attempts) for attempts in outcomes), default=0)
    for k in range(steps):
        scale = 1.0 if k == 0 else total / count  # count > 0: every rollout is active at step 1
        active = [i for i, attempts in enumerate(outcomes) if len(attempts) > k]
        for i in active:
            rewards[i].append(scale * float(outcomes[i][k]))
        total += sum(rewards[i][k] for i in active)
        count += len(active)
    return rewards


def kl_folded_returns(
    rewards: Sequence[Sequence[float]], kl: Sequence[Sequence[Sequence[float]]], kl_coef: float
) -> list[list[list[float]]]:
    """G_ikt = r_i^(k) - kl_coef * (KL of attempt k's tokens t..T_ik): ``kl[i][k]`` lists attempt k's per-token
    k1 KL, so ``result[i][k]`` has one return per token of the attempt."""
    returns = []
    for attempt_rewards, attempt_kls in zip(rewards, kl, strict=True):
        rollout = []
        for reward, token_kls in zip(attempt_rewards, attempt_kls, strict=True):
            to_go, values = 0.0, []
            for value in reversed(token_kls):
                to_go += value
                values.append(reward - kl_coef * to_go)
            rollout.append(values[::-1])
        returns.append(rollout)
    return returns


def normalized_returns(
    returns: Sequence[Sequence[Sequence[float]]],
    groups: Sequence[int] | None = None,
    weighting: Weighting = "attempts",
    eps: float = 1e-6,
) -> list[list[list[float]]]:
    """(G - mu) / (sigma + eps) per token, mu and sigma weighted as ``weighting`` says, over the whole batch or
    within each group of rollouts (``groups[i]``: rollout i's group)."""
    keys = list(groups) if groups is not None else [0] * len(returns)
    rollouts = list(zip(keys, returns, strict=True))
    pooled: dict[int, list[tuple[float, float]]] = {}  # group -> (weight, value) of every token
    for key, rollout in rollouts:
        for values in filter(None, rollout):  # an attempt without tokens trains nothing
            weight = 1.0 / len(values) if weighting == "attempts" else 1.0
            pooled.setdefault(key, []).extend((weight, value) for value in values)
    stats = {}
    for key, items in pooled.items():
        total = sum(weight for weight, _ in items)
        mean = sum(weight * value for weight, value in items) / total
        variance = sum(weight * (value - mean) ** 2 for weight, value in items) / total
        stats[key] = (mean, math.sqrt(variance))
    return [
        [[(value - stats[key][0]) / (stats[key][1] + eps) for value in values] for values in rollout]
        for key, rollout in rollouts
    ]


def normalized_advantages(
    rewards: Sequence[Sequence[float]], groups: Sequence[int] | None = None, eps: float = 1e-6
) -> list[list[float]]:
    """Eq. 20 on the attempts themselves: (r - mean) / (std + eps) over every attempt of the batch (or of its
    group), each attempt counted once (``normalized_returns`` with one return per attempt: either weighting)."""
    as_returns = [[[reward] for reward in rollout] for rollout in rewards]
    advantages = normalized_returns(as_returns, groups, eps=eps)
    return [[values[0] for values in rollout] for rollout in advantages]


def attempt_metrics(
    outcomes: Sequence[Sequence[float]], rewards: Sequence[Sequence[float]], max_attempts: int
) -> dict[str, float]:
    """Unassisted accuracy (attempt 1), guided accuracy after each step, correction rate p_k among the active
    rollouts (Theorem 1), share of rollouts active at each step, mean reward before and after decay, and attempts
    per rollout."""
    n = len(outcomes)
    flat_outcomes = [d for row in outcomes for d in row]
    flat_rewards = [r for row in rewards for r in row]
    metrics = {
        "unassisted_acc": sum(row[0] for row in outcomes) / n,
        "reward_before_decay": sum(flat_outcomes) / len(flat_outcomes),
        "reward_after_decay": sum(flat_rewards) / len(flat_rewards),
        "attempts_per_rollout": len(flat_outcomes) / n,
    }
    for k in range(max_attempts):
        active = [row for row in outcomes if len(row) > k]
        metrics[f"guided_acc/step{k + 1}"] = sum(any(row[: k + 1]) for row in outcomes) / n
        metrics[f"active_share/step{k + 1}"] = len(active) / n
        if active:
            metrics[f"correction_rate/step{k + 1}"] = sum(row[k] for row in active) / len(active)
    return metrics
