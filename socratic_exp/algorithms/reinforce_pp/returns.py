"""REINFORCE++'s returns and advantages (Hu et al. 2025; OpenRLHF's ``reinforce`` and ``reinforce_baseline``
estimators), as plain functions over a batch of responses, each split into segments.

Notation: rollout i of the (global) batch holds segments k = 1..L_i (one per response; SocraticPO's rollouts hold
one per attempt), segment k has T_ik tokens and a scalar reward r_ik.

**Returns with the KL to the initial policy folded in.** REINFORCE++ gives a response the reward r at its last
token and -beta * kappa_t at every token, kappa_t = log pi_old(y_t | .) - log pi_ref(y_t | .) (the k1 estimate),
and takes the undiscounted return-to-go; a segment's KL-to-go stops at its own last token::

    G_ikt = r_ik - beta * sum_{s=t..T_ik} kappa_iks

**The group baseline** (REINFORCE++-baseline): r_ik minus the mean reward of its prompt's group, before the folding.

**Batch normalisation, after the folding.** A_ikt = (G_ikt - mu) / (sigma + eps), with mu and sigma the weighted mean
and (population) standard deviation of the returns over the batch (``groups``: within each group of rollouts
instead). The weight of a token decides what "the batch" counts:

- ``attempts``: w_ikt = 1 / T_ik, every segment counts once (with beta = 0, the mean and std over the batch's
  responses; SocraticPO's Eq. 20, on which its Theorem 1 rests);
- ``tokens``: w_ikt = 1, every token counts once, as OpenRLHF whitens REINFORCE++'s token-level advantages.

**Whitening as verl computes it** (``whitening="verl"``, verl 0.7's ``masked_whiten``, which SocraticPO's official
code applies): A = (G - mu) / sqrt(s^2 + 1e-8), with s^2 the weighted variance times N / (N - 1), N the total weight
(the number of tokens with ``tokens`` weighting): Bessel's correction, and the epsilon inside the square root rather
than added to sigma. verl also divides its mean by N + 1e-8, a difference below float64's precision at N >= 1.

A segment without tokens trains nothing and is left out of mu and sigma.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Weighting = Literal["attempts", "tokens"]
Whitening = Literal["std", "verl"]
VERL_WHITEN_EPS = 1e-8  # verl's masked_whiten: rsqrt(var + 1e-8)


def group_centred(rewards: Sequence[float], group_size: int) -> list[float]:
    """r - mean of its group (REINFORCE++-baseline): each run of ``group_size`` rewards is one prompt's group."""
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    centred = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = sum(group) / group_size
        centred.extend(reward - mean for reward in group)
    return centred


def kl_folded_returns(
    rewards: Sequence[Sequence[float]], kl: Sequence[Sequence[Sequence[float]]], kl_coef: float
) -> list[list[list[float]]]:
    """G_ikt = r_ik - kl_coef * (KL of segment k's tokens t..T_ik): ``kl[i][k]`` lists segment k's per-token k1 KL,
    so ``result[i][k]`` has one return per token of the segment."""
    returns = []
    for segment_rewards, segment_kls in zip(rewards, kl, strict=True):
        rollout = []
        for reward, token_kls in zip(segment_rewards, segment_kls, strict=True):
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
    whitening: Whitening = "std",
) -> list[list[list[float]]]:
    """(G - mu) / (sigma + eps) per token (``std``), or verl's (G - mu) / sqrt(unbiased variance + 1e-8) (``verl``;
    ``eps`` unused), mu and sigma weighted as ``weighting`` says, over the whole batch or within each group of
    rollouts (``groups[i]``: rollout i's group)."""
    keys = list(groups) if groups is not None else [0] * len(returns)
    rollouts = list(zip(keys, returns, strict=True))
    pooled: dict[int, list[tuple[float, float]]] = {}  # group -> (weight, value) of every token
    for key, rollout in rollouts:
        for values in filter(None, rollout):  # a segment without tokens trains nothing
            weight = 1.0 / len(values) if weighting == "attempts" else 1.0
            pooled.setdefault(key, []).extend((weight, value) for value in values)
    stats = {}
    for key, items in pooled.items():
        total = sum(weight for weight, _ in items)
        mean = sum(weight * value for weight, value in items) / total
        variance = sum(weight * (value - mean) ** 2 for weight, value in items) / total
        if whitening == "std":
            stats[key] = (mean, math.sqrt(variance) + eps)
        else:  # verl: Bessel's correction over the total weight (a single item: 0, where verl divides 0/0)
            unbiased = variance * total / (total - 1) if total > 1 else 0.0
            stats[key] = (mean, math.sqrt(unbiased + VERL_WHITEN_EPS))
    return [
        [[(value - stats[key][0]) / stats[key][1] for value in values] for values in rollout]
        for key, rollout in rollouts
    ]
