"""Socratic-RL's viewpoint utility U(v) (Section 3.3), the signal of the teacher's meta-learning (the preference pairs
an LLM teacher learns from are formed in ``meta_learning.py``).

    U(v) = E_p[Score(pi_S(. | p, V u {v}))] - E_p[Score(pi_S(. | p, V))]

For a viewpoint already in V the formula is read with V \\ {v} as the base: U(v) = acc(V) - acc(V \\ {v}), the
accuracy the student loses without it. Scores are greedy (deterministic) on the same probe items for every set, so
the difference is paired: only items whose outcome the viewpoint changes move it. One measurement of all of V
costs |V| + 2 greedy passes over the probe items (V, each V \\ {v}, and no viewpoints at all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from socratic_exp.algorithms.socratic_rl.knowledge_base import Entry

Scorer = Callable[[Sequence[str]], list[float]]  # viewpoint texts in context -> one score per probe item


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def measure_utilities(
    active: Sequence[Entry], scores: Scorer
) -> tuple[dict[int, tuple[float, float, float]], float, float]:
    """U(v) of every active viewpoint as ``{id: (utility, acc with V, acc with V minus v)}``, with the probe accuracy
    with all of V and with no viewpoint at all."""
    memo: dict[tuple[str, ...], float] = {}

    def accuracy(texts: tuple[str, ...]) -> float:
        if texts not in memo:
            memo[texts] = mean(scores(texts))
        return memo[texts]

    texts = tuple(entry.text for entry in active)
    with_all = accuracy(texts)
    results = {}
    for entry in active:
        without = accuracy(tuple(t for t in texts if t != entry.text))
        results[entry.id] = (with_all - without, with_all, without)
    return results, with_all, accuracy(())
