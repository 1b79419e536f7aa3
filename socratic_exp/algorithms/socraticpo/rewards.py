"""SocraticPO's rewards and advantages (arXiv 2606.09887, Section 4.2-4.3, Eq. 14-20), as plain functions.

Notation: rollout i of the (global) batch makes attempts k = 1..L_i (it stops at its first correct one, Algorithm
1); attempt k has T_ik student tokens and correctness delta_i^(k).

**Step-wise rewards with reward decay (Eq. 17-19).** r_i^(1) = delta_i^(1); for k >= 2,
r_i^(k) = mu_{k-1} * delta_i^(k), where mu_{k-1} is the mean reward of every active attempt of steps 1..k-1 in the
batch (Eq. 18). Without decay (the paper's "w/o rd") r_i^(k) = delta_i^(k).

**Returns and batch normalisation (Eq. 20)**: REINFORCE++'s, one segment per attempt (``algorithms/reinforce_pp/
returns.py``). SocraticPO credits attempt k's tokens with that attempt's own reward only (Eq. 15: the gradient of
attempt k is weighted by r^(k), not by later attempts' rewards), so each attempt is one REINFORCE++ response and its
KL-to-go stops at its own last token. With ``normalize_over=attempts`` (the default) every attempt counts once in
the batch mean and std, so with beta = 0 they are exactly Eq. 20's mean and std over the batch's attempts, on which
Theorem 1 (non-negativity, monotonicity, saturation decay; its proof counts attempts, Eq. 22) rests; ``tokens``
counts every student token once, as OpenRLHF normalises, and Theorem 1 then no longer holds exactly. An attempt
without tokens (a plain-text attempt that was a bare end-of-sequence) trains nothing and is left out of the mean and
std (its reward still enters the decay's mu_k, Eq. 18).

**The authors' estimator** (``Liuz-rui/SocraticPO``, ``job-qwen3-4b-tg-main.sh``: verl's
``reinforce_plus_plus_baseline`` over attempt rows). Every attempt is a row of its own, and every row of every
rollout of a prompt shares the prompt's group: A_ik = r_ik - mean of the rewards of all the attempts of that
prompt's rollouts, each attempt counted once (``prompt_centred``), then one whitening over every token of the batch
(``normalized_returns`` with ``tokens`` weighting and ``whitening="verl"``). Theorem 1 does not hold under it: a
corrected attempt is compared with its prompt's first attempts, so it can be negative (``docs/socraticpo.md``).
"""

from __future__ import annotations

from collections.abc import Sequence

from socratic_exp.algorithms.reinforce_pp.returns import normalized_returns


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


def prompt_centred(rewards: Sequence[Sequence[float]], prompts: Sequence[int]) -> list[list[float]]:
    """r_ik minus the mean reward of every attempt of every rollout of the same prompt (``prompts[i]``: rollout i's
    prompt), each attempt counted once; a prompt with one attempt in the batch keeps its reward (verl's baseline of
    a group of one is 0)."""
    rollouts = list(zip(prompts, rewards, strict=True))
    pooled: dict[int, list[float]] = {}
    for prompt, attempts in rollouts:
        pooled.setdefault(prompt, []).extend(attempts)
    means = {prompt: sum(values) / len(values) if len(values) > 1 else 0.0 for prompt, values in pooled.items()}
    return [[reward - means[prompt] for reward in attempts] for prompt, attempts in rollouts]


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
