"""Warm-start quality of ``model=tiny``: held-out accuracy by difficulty, with and without hints.

Three settings on the eval split: no hint; a principle line before the question (a viewpoint); and, for the
questions the greedy student gets wrong, a second attempt after targeted guidance (the rule a teacher would
give) versus after a fixed retry line (SocraticPO's "w/o teacher guidance" ablation).
"""

from __future__ import annotations

import random
import sys
import time

from socratic_exp.core.config import compose
from socratic_exp.models.generation import generate
from socratic_exp.runtime.assembly import build_components
from socratic_exp.runtime.evaluation import Evaluator
from socratic_exp.tasks import expressions as ex
from socratic_exp.tasks.arithmetic import PRINCIPLES, guidance_for, prompt_for

FIXED_RETRY = "Hint: try again.\n"


def main() -> None:
    c = build_components(compose(*sys.argv[1:]))
    started = time.time()
    student = c.model.load(c.task)
    print(
        f"model ready in {time.time() - started:.0f} s ({student.info.get('parameters')} parameters, "
        f"warm-start {student.info.get('seconds')} s)"
    )
    rows = c.task.build()["eval"].to_list()
    evaluator = Evaluator(c.task, c.task.build()["eval"], c.eval)
    plain = evaluator.evaluate(student)
    rng = random.Random(0)
    hinted_prompts = []
    for row in rows:
        kinds = c.task.misconception_of(ex.parse(row["expression"])) or ["slip"]
        hinted_prompts.append(prompt_for(row["expression"], rng.choice(PRINCIPLES[kinds[0]])))
    hinted = evaluator.evaluate(student, prefix="principle", prompts=hinted_prompts)
    levels = sorted({row["difficulty"] for row in rows})
    print(f"{'metric':<22}" + "".join(f"{'d' + str(d):>8}" for d in levels) + f"{'all':>8}")
    for prefix, metrics in (("eval", plain), ("principle", hinted)):
        for kind in ("greedy_acc", "sampled_acc", "pass@4"):
            name = f"{prefix}/{kind}"
            if name in metrics:
                cells = "".join(f"{metrics[f'{name}/d{d}']:8.3f}" for d in levels)
                print(f"{name:<22}{cells}{metrics[name]:8.3f}")
    retry_after_wrong(c, student, rows)


def retry_after_wrong(c, student, rows) -> None:
    settings = {"max_new_tokens": c.eval.max_new_tokens, "batch_size": c.eval.batch_size}
    first = generate(student, [r["prompt"] for r in rows], **settings)
    wrong = [(r, a) for r, a in zip(rows, first, strict=True) if c.task.score(a, r["answer"]) == 0]
    rng = random.Random(0)
    guided, fixed = [], []
    for row, attempt in wrong:
        expr = ex.parse(row["expression"])
        kinds = c.task.misconception_of(expr)
        wrong_steps = ex.MISCONCEPTIONS[kinds[0]](expr) if kinds else ex.correct_steps(expr)
        guidance = guidance_for(kinds[0] if kinds else "slip", wrong_steps, ex.correct_steps(expr), expr, rng)
        guided.append(row["prompt"] + attempt + guidance + "\n")
        fixed.append(row["prompt"] + attempt + FIXED_RETRY)
    for label, prompts in (("targeted guidance", guided), ("fixed retry line", fixed)):
        second = generate(student, prompts, **settings)
        solved = int(sum(c.task.score(a, r["answer"]) for (r, _), a in zip(wrong, second, strict=True)))
        print(
            f"second attempt after {label:<18}: {solved}/{len(wrong)} = {solved / max(len(wrong), 1):.3f} "
            "of the greedy student's wrong answers corrected"
        )


if __name__ == "__main__":
    main()
