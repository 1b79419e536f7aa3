"""SocraticPO's premise on the arithmetic testbed, by the class of the first attempt's error: how often a second
attempt is right after the rule teacher's hint, after the fixed retry line and from the bare prompt, and where a
hinted second attempt is still wrong, the class of its own error. The same draws as ``python -m
socratic_exp.study.premises`` (its totals are the command's ``socraticpo/*`` figures).

Usage: ``python research/premises_breakdown.py [overrides...]``, e.g. ``model.num_heads=8``.
"""

from __future__ import annotations

import collections
import statistics
import sys

from socratic_exp.algorithms.socraticpo.evidence import retries
from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components
from socratic_exp.study.premises import Bench
from socratic_exp.tasks import expressions as ex
from socratic_exp.tasks.diagnosis import diagnose

QUESTIONS = 400


def main(overrides: list[str]) -> None:
    from transformers import set_seed

    components = build_components(compose("algorithm=socraticpo", *overrides))
    set_seed(0)
    bench = Bench(components, components.model.load(components.task), QUESTIONS, seed=0)
    outcomes = retries(bench)
    if outcomes and "expression" not in outcomes[0].row:
        sys.exit("error: the breakdown classifies errors of task=arithmetic traces only")
    by_class = collections.defaultdict(list)
    for outcome in outcomes:
        by_class[diagnose(ex.parse(outcome.row["expression"]), outcome.attempt).error].append(outcome)
    print(f"{len(outcomes)} wrong first attempts of {QUESTIONS}; second attempt right after:")
    print(f"{'first error':<12} {'n':>4} {'hint':>6} {'retry':>6} {'fresh':>6}")
    for error, group in sorted(by_class.items(), key=lambda item: -len(item[1])):
        rates = (statistics.fmean(getattr(o, name) for o in group) for name in ("guided", "retry", "fresh"))
        print(f"{error:<12} {len(group):>4} " + " ".join(f"{rate:6.3f}" for rate in rates))
    # what goes wrong in a second attempt the hint did not fix: the first error again, or a new one
    print("\nsecond attempts still wrong after the hint, by the class of their own first error:")
    print(f"{'first error':<12} {'n':>4}  second attempt's error (count)")
    for error, group in sorted(by_class.items(), key=lambda item: -len(item[1])):
        failed = [o for o in group if o.guided < 1.0]
        if not failed:
            continue
        errors = collections.Counter(diagnose(ex.parse(o.row["expression"]), o.guided_attempt).error for o in failed)
        print(f"{error:<12} {len(failed):>4}  " + ", ".join(f"{name} {count}" for name, count in errors.most_common()))


if __name__ == "__main__":
    main(sys.argv[1:])
