"""Viewpoint utility on the probe split (Socratic-RL, Section 3.3).

    U(v) = E_p[Score(pi_S(. | p, V u {v}))] - E_p[Score(pi_S(. | p, V))]

For a viewpoint already in V the formula is read with V \\ {v} as the base: U(v) = acc(V) - acc(V \\ {v}), the
accuracy the student loses without it. Scores are greedy (deterministic) on the same probe items for every set, so
the difference is paired: only items whose outcome the viewpoint changes move it. One measurement of all of V
costs |V| + 2 greedy passes over the probe items (V, each V \\ {v}, and no viewpoints at all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task
    from socratic_exp.viewpoints.knowledge_base import Entry

Scorer = Callable[[Sequence[str]], list[float]]  # viewpoint texts in context -> one score per probe item


def context_of(texts: Sequence[str]) -> str:
    """Viewpoints as the lines in front of the question (the form the warm-started student has seen)."""
    return "\n".join(text.strip() for text in texts)


class Prober:
    """Greedy scores of the student on the probe items with a given set of viewpoints in its context.

    ``rows`` hold rendered prompts (the trainer's form); ``in_context(prompt, texts)`` puts viewpoints in front of
    the question exactly as training does."""

    def __init__(
        self,
        task: Task,
        rows: list[dict[str, Any]],
        student: Student,
        in_context: Callable[[Any, Sequence[str]], Any],
        max_new_tokens: int,
        batch_size: int,
    ):
        self.task = task
        self.rows = rows
        self.student = student
        self.in_context = in_context
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size

    def scores(self, texts: Sequence[str]) -> list[float]:
        from socratic_exp.evaluation import generate

        prompts = [self.in_context(row["prompt"], texts) for row in self.rows]
        completions = generate(self.student, prompts, max_new_tokens=self.max_new_tokens, batch_size=self.batch_size)
        return [self.task.score(c, r["answer"]) for c, r in zip(completions, self.rows, strict=True)]


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
