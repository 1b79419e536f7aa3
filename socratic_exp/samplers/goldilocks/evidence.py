"""Goldilocks RL's premise and claim, as the study measures them (``socratic_exp.study``).

Premise: the share of prompts whose group of rollouts is all right or all wrong (zero variance, no GRPO signal), and
how well the student's own prompt features predict a prompt's p(1 - p) on held-out prompts (the correlation of a
ridge fit: a learnable difficulty signal). The all-wrong share alone is the sparse-reward regime's premise
(``task=arithmetic_sparse``; docs/evidence.md): the groups from which no reward reaches GRPO.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from socratic_exp.core.methods import Claim, Promise

if TYPE_CHECKING:
    from socratic_exp.study.premises import Bench

PROMISES = (
    Promise("goldilocks/zero_variance_share", 0.30, "uniform sampling wastes many groups on zero variance"),
    Promise("goldilocks/signal_r", 0.30, "a prompt's difficulty can be learned from the student's features"),
)
CLAIMS = (
    Claim("goldilocks>grpo", "Goldilocks RL", "difficulty-aware prompt sampling beats uniform sampling", "goldilocks",
          "grpo", changes=("sampler.",)),
)  # fmt: skip


def premises(bench: Bench) -> dict[str, float]:
    import torch

    rows = bench.train_rows
    size = bench.group_size
    completions = bench.sample([r["prompt"] for r in rows], n=size, salt=8)
    rates = [
        statistics.fmean(bench.score(c, row) for c in completions[q * size : (q + 1) * size])
        for q, row in enumerate(rows)
    ]
    target = torch.tensor([p * (1 - p) for p in rates])
    features = bench.prompt_features([r["prompt"] for r in rows])
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(bench.seed))
    fit, held = order[: len(rows) // 2], order[len(rows) // 2 :]
    prediction = ridge(features[fit], target[fit], features[held])
    return {
        "goldilocks/zero_variance_share": sum(p in (0.0, 1.0) for p in rates) / len(rates),
        "goldilocks/all_wrong_share": sum(p == 0.0 for p in rates) / len(rates),  # the sparse-reward regime's premise
        "goldilocks/mean_pass_rate": statistics.fmean(rates),
        "goldilocks/signal_r": pearson(prediction, target[held]),
    }


def ridge(x: Any, y: Any, x_new: Any, penalty: float = 1.0) -> Any:
    import torch

    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    x, x_new = (x - mean) / std, (x_new - mean) / std
    gram = x.T @ x + penalty * len(x) * torch.eye(x.shape[1])
    weights = torch.linalg.solve(gram, x.T @ (y - y.mean()))
    return x_new @ weights + y.mean()


def pearson(a: Any, b: Any) -> float:
    a, b = a - a.mean(), b - b.mean()
    denominator = float((a.norm() * b.norm()).clamp_min(1e-12))
    return float((a * b).sum()) / denominator
