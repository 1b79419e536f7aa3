"""The premise figures of several warm-started students: the same testbed and corpus, a different
``model.warmstart_seed`` each (the seed of the warm-start's initial weights and batch order). Prints each promised
figure per student with the mean over them, and writes every figure to ``--out``. Students already in the cache
are reused; each new one costs a warm-start (3 to 5 minutes on 2 cores).

Usage: ``python research/premises_students.py [--seeds 0,1,2,3,4] [--out FILE] [overrides...]`` (``--out``: by
default ``research/results/premises_students.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components
from socratic_exp.study.premises import measure, promises, verdicts

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="warm-start seeds, comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS / "premises_students.json")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    figures = {}
    for seed in seeds:
        overrides = ["algorithm=socraticpo", *args.overrides, f"model.warmstart_seed={seed}"]
        figures[seed] = measure(build_components(compose(*overrides)))
    args.out.write_text(json.dumps({"overrides": args.overrides, "figures": figures}, indent=1))

    print(f"{'figure':<32} {'promised':>8} " + " ".join(f"{f'seed {s}':>7}" for s in seeds) + f" {'mean':>7}")
    for promise in promises():
        values = [figures[seed].get(promise.key, float("nan")) for seed in seeds]
        cells = " ".join(f"{v:7.3f}" for v in values)
        print(f"{promise.key:<32} {promise.at_least:>8} {cells} {statistics.fmean(values):7.3f}")
    held = (sum(holds for _, _, holds in verdicts(figures[seed])) for seed in seeds)
    print(f"{'promises held':<41} " + " ".join(f"{n:>4}/{len(promises())}" for n in held))


if __name__ == "__main__":
    main()
