"""The selection rules of ``sampler=goldilocks``: pure functions of the predicted utilities and a seeded ``random``.

Goldilocks RL (arXiv 2602.14868, Fig. 1, steps 1-2): for each prompt the student asks for, K candidate questions are
drawn at random from the data set and the teacher keeps the one it predicts most useful. Here a generation batch
asks for B prompts at once, so ``candidate_groups`` draws the B groups of K together (distinct questions throughout,
so the batch never holds a question twice) and ``best_of_each`` keeps one per group: the paper's rule
(``pool=per_prompt``). ``top_of_pool`` is ours (``pool=batch``): the B best of all K x B candidates.

Within a group the pick is the best prediction (``greedy``, the paper) or a draw with probabilities proportional to
exp(utility / temperature) (``softmax``, ours), and with probability ``epsilon`` a uniform draw among the
candidates (ours). Softmax draws use the Gumbel-max trick: argmax of utility / temperature + Gumbel noise.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

Rule = Literal["greedy", "softmax"]


def candidate_groups(num_questions: int, batch_size: int, candidates: int, rng: random.Random) -> list[list[int]]:
    """``batch_size`` groups of questions drawn uniformly without replacement, ``candidates`` each (fewer when the
    data set holds fewer than ``candidates x batch_size`` questions: as many as it allows, at least one)."""
    size = max(1, min(candidates, num_questions // batch_size))
    pool = rng.sample(range(num_questions), size * batch_size)
    return [pool[start : start + size] for start in range(0, len(pool), size)]


def ranked(scores: Sequence[float], rng: random.Random, rule: Rule, temperature: float) -> list[int]:
    """Positions of ``scores`` from the best: by score (``greedy``; ties keep the earlier position, and candidates
    come in random order) or by score / temperature plus Gumbel noise (``softmax``: the first is a softmax draw, the
    first k a draw without replacement)."""
    if rule == "softmax":
        keys = [s / temperature - math.log(-math.log(_open_unit(rng))) for s in scores]
    else:
        keys = list(scores)
    return sorted(range(len(scores)), key=lambda i: -keys[i])


def best_of_each(
    groups: Sequence[Sequence[float]], rng: random.Random, *, rule: Rule, temperature: float, epsilon: float
) -> list[int]:
    """For each group of predicted utilities, the position within it of the candidate kept (the paper's rule)."""
    picks = []
    for scores in groups:
        if rng.random() < epsilon:
            picks.append(rng.randrange(len(scores)))  # exploration: any of the group's candidates
        else:
            picks.append(ranked(scores, rng, rule, temperature)[0])
    return picks


def top_of_pool(
    scores: Sequence[float], count: int, rng: random.Random, *, rule: Rule, temperature: float, epsilon: float
) -> list[int]:
    """``count`` distinct positions of one pool of candidates (ours): each pick uniform among those left with
    probability ``epsilon``, the others the best by ``rule``."""
    count = min(count, len(scores))
    explore = sum(rng.random() < epsilon for _ in range(count))
    order = ranked(scores, rng, rule, temperature)
    return order[: count - explore] + rng.sample(order[count - explore :], explore)


def _open_unit(rng: random.Random) -> float:
    """A uniform draw in (0, 1): ``random()`` may return 0, whose log is undefined."""
    while True:
        u = rng.random()
        if u > 0.0:
            return u
