"""Socratic-RL's premise and claims, as the study measures them (``socratic_exp.study``).

Premise: the utility U(v) (accuracy with v in context minus without, on the probe split) of the viewpoints the
teacher reflects from failed traces: their mean and the best one.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from socratic_exp.core.methods import Claim, Promise

if TYPE_CHECKING:
    from socratic_exp.study.premises import Bench

PROMISES = (Promise("socratic_rl/best_utility", 0.05, "a viewpoint in context lifts accuracy"),)
SOCRATIC_RL = ("algorithm.", "distiller.", "teacher.")  # the whole method: its loop, its distiller, its teacher
CLAIMS = (
    Claim("socratic_rl_kl>grpo", "Socratic-RL, Sec. 3.4 (hypothesis)", "viewpoints distilled by KL beat GRPO",
          "socratic_rl_kl", "grpo", hypothesis=True, changes=SOCRATIC_RL),
    Claim("socratic_rl_dpo>grpo", "Socratic-RL, Sec. 3.4 (hypothesis)", "viewpoints distilled by DPO beat GRPO",
          "socratic_rl_dpo", "grpo", hypothesis=True, changes=SOCRATIC_RL),
    Claim("socratic_rl_sft>grpo", "Socratic-RL, Sec. 3.4 (hypothesis)", "viewpoints distilled by SFT beat GRPO",
          "socratic_rl_sft", "grpo", hypothesis=True, changes=SOCRATIC_RL),
)  # fmt: skip


def premises(bench: Bench) -> dict[str, float]:
    from socratic_exp.algorithms.socratic_rl.prompts import REFLECTION_TEMPLATE
    from socratic_exp.tasks.base import with_context
    from socratic_exp.teachers.base import Attempt
    from socratic_exp.teachers.reflection import Reflective

    if not isinstance(bench.teacher, Reflective):  # a teacher that does not reflect writes no viewpoints
        return {"socratic_rl/viewpoints": 0.0}
    rows = bench.train_rows
    answers = bench.greedy([r["prompt"] for r in rows])
    failed = [(r["prompt"], a) for r, a in zip(rows, answers, strict=True) if bench.score(a, r) < 1.0]
    attempts = [Attempt(a, 0.0, "wrong") for _, a in failed]
    viewpoints = bench.teacher.reflect([q for q, _ in failed], attempts, REFLECTION_TEMPLATE)
    texts = sorted({v.text for v in viewpoints if v is not None})
    if not texts:
        return {"socratic_rl/viewpoints": 0.0}
    probe = bench.probe_rows
    base = statistics.fmean(bench.score(a, r) for r, a in zip(probe, bench.greedy([r["prompt"] for r in probe]),
                                                             strict=True))  # fmt: skip
    utilities = []
    for text in texts:
        answers = bench.greedy([with_context(r["prompt"], text) for r in probe])
        utilities.append(statistics.fmean(bench.score(a, r) for r, a in zip(probe, answers, strict=True)) - base)
    return {
        "socratic_rl/viewpoints": float(len(texts)),
        "socratic_rl/probe_accuracy": base,
        "socratic_rl/mean_utility": statistics.fmean(utilities),
        "socratic_rl/best_utility": max(utilities),
    }
