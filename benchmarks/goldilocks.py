"""``sampler=goldilocks``: its overhead as a share of the step time, and the comparison sweep's results.

    python benchmarks/goldilocks.py overhead [overrides]        # e.g. algorithm=socraticpo teacher=rule
    python benchmarks/goldilocks.py sweep <multirun folder>...  # accuracy vs rollouts, zero-variance share; plot

``overhead`` trains for ``algorithm.max_steps`` (default here 30) steps with ``sampler=goldilocks`` and times, per
optimizer step, the step itself and what the sampler did on the trainer's thread: choosing the batch (candidate
draw + predictions), taking in the feedback (targets, buffer, the error on unseen questions), and any wait for a
refit still running when the next batch is chosen. The refits themselves run in a thread beside the step; their
time is reported too (on a machine with idle cores it is hidden, on a saturated one it competes for the CPU). The
one-off question features (one forward pass over the training prompts at the start) are reported apart.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components, build_trainer, workbench
from socratic_exp.study.runs import find_runs
from socratic_exp.study.tables import format_mean_std

WARMUP_STEPS = 2  # the first steps pay one-off costs (the predictor's first Adam step imports torch internals)
ON_THREAD = ("selection_s", "feedback_s", "wait_s")


def overhead(overrides: list[str]) -> None:
    from transformers import TrainerCallback

    defaults = ["algorithm=grpo", "sampler=goldilocks", "logger=none", "algorithm.max_steps=30",
                "algorithm.save_steps=10000", "algorithm.log_completions=false"]  # fmt: skip
    given = {override.split("=", 1)[0] for override in overrides}
    cfg = compose(*[d for d in defaults if d.split("=", 1)[0] not in given], *overrides)
    c = build_components(cfg, {"algorithm": cfg.algorithm._target_.rsplit(".", 1)[-1]})
    bench = workbench(c)

    class StepTimer(TrainerCallback):
        """From one step's end to the next: the whole loop, the fetch of the next batch (and its choice) included."""

        def __init__(self) -> None:
            self.rows: list[dict[str, float]] = []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.mark = (time.perf_counter(), dict(c.sampler.selector.totals))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now, totals = time.perf_counter(), dict(c.sampler.selector.totals)
            row = {key: totals.get(key, 0.0) - self.mark[1].get(key, 0.0) for key in (*ON_THREAD, "update_s")}
            self.rows.append({"step_s": now - self.mark[0], **row})
            self.mark = (now, totals)

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(bench, Path(tmp), run_name="bench", seed=cfg.seed, callbacks=[timer])
        started = time.perf_counter()
        trainer.train()
        total = time.perf_counter() - started
        selector = c.sampler.selector
        selector.close()
    # The features are computed when the dataloader is built, before training begins.
    features_s = total - sum(r["step_s"] for r in timer.rows)
    rows = timer.rows[WARMUP_STEPS:]
    step = sum(r["step_s"] for r in rows)
    on_thread = {key: sum(r[key] for r in rows) for key in ON_THREAD}
    refit = sum(r["update_s"] for r in rows)
    settings = c.sampler
    print(
        f"{len(rows)} steps after {WARMUP_STEPS} warm-up ({c.choices['algorithm']}, batch {c.algorithm.batch_size}, "
        f"{trainer.args.generation_batch_size // trainer.num_generations} prompts per batch from "
        f"{settings.candidates} candidates each (pool={settings.pool}), {len(bench.data['train'])} questions, refit "
        f"every {settings.update_every} questions x {settings.update_steps} steps, background={settings.background}):\n"
        f"  step time: mean {step / len(rows):.3f} s, median {statistics.median(r['step_s'] for r in rows):.3f} s\n"
        f"  on the trainer's thread: selection {on_thread['selection_s'] * 1000 / len(rows):.2f} ms/step, feedback "
        f"{on_thread['feedback_s'] * 1000 / len(rows):.2f} ms/step, waiting for a refit "
        f"{on_thread['wait_s'] * 1000 / len(rows):.2f} ms/step: {sum(on_thread.values()) / step:.2%} of the step time\n"
        f"  refits ({selector.fits} in all, in the background thread): {refit * 1000 / len(rows):.2f} ms/step, "
        f"{refit / step:.2%} of the step time\n"
        f"  one-off question features + dataloader start: {features_s:.2f} s "
        f"({features_s / total:.2%} of this {total:.0f} s run)"
    )


def _jobs(sweep_dirs: list[Path]) -> list[dict[str, Any]]:
    jobs = []
    for run in find_runs(sweep_dirs):
        if run.status != "completed":
            continue
        summary, records = run.summary, run.records
        train = [r for r in records if "sampler/rollouts" in r]
        per_step = train[-1]["sampler/rollouts"] / train[-1]["step"]
        jobs.append(
            {
                "key": (summary["choices"]["algorithm"], summary["choices"]["sampler"]),
                "objective": summary["config"]["objective"],
                "final": summary["final"],
                "initial": summary["initial"],
                "rollouts": train[-1]["sampler/rollouts"],
                # evaluations (step 0: before training) against the rollouts spent by then
                "curve": [(r["step"] * per_step, r["eval/greedy_acc"]) for r in records if "eval/greedy_acc" in r],
                "zero_variance": [
                    (r["sampler/rollouts"], r["sampler/zero_variance_share"])
                    for r in train
                    if "sampler/zero_variance_share" in r
                ],
                "utility": [r["sampler/utility"] for r in train if "sampler/utility" in r],
                "grad_norm": [r["grad_norm"] for r in records if "grad_norm" in r],  # TRL's
            }
        )
    return jobs


def sweep_report(sweep_dirs: list[Path]) -> None:
    """Per (algorithm, sampler), over the completed jobs of one or more multirun folders: held-out accuracy after
    training and its gain over the run's own evaluation before it, by difficulty, the share of zero-variance groups,
    the mean utility of the trained questions and TRL's gradient norm (means over training), as mean +- std tables;
    and ``goldilocks_vs_uniform.png`` in the first folder: accuracy against rollouts spent, and the zero-variance
    share along training."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = _jobs(sweep_dirs)
    if not jobs:
        sys.exit(f"no completed jobs in {' '.join(map(str, sweep_dirs))}")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for job in jobs:
        groups[job["key"]].append(job)

    objective = jobs[0]["objective"]
    difficulties = sorted(k for k in jobs[0]["final"] if k.startswith(f"{objective}/d"))
    measures = ["zero-var share", "utility", "grad norm", "rollouts"]
    columns = ["final", "gain", *[d.rsplit("/", 1)[-1] for d in difficulties], *measures]
    print(f"\n{objective} (mean +- std over seeds; gain = after - before training, per run)")
    print(f"{'algorithm':<12}{'sampler':<12}{'n':>3}" + "".join(f"{c:>18}" for c in columns))
    for (algorithm, sampler), members in sorted(groups.items()):
        cells = [
            format_mean_std([j["final"][objective] for j in members]),
            format_mean_std([j["final"][objective] - j["initial"][objective] for j in members], signed=True),
            *[format_mean_std([j["final"][d] for j in members]) for d in difficulties],
            format_mean_std([statistics.mean(v for _, v in j["zero_variance"]) for j in members]),
            format_mean_std([statistics.mean(j["utility"]) for j in members]),
            format_mean_std([statistics.mean(j["grad_norm"]) for j in members]),
            f"{statistics.mean(j['rollouts'] for j in members):.0f}",
        ]
        print(f"{algorithm:<12}{sampler:<12}{len(members):>3}" + "".join(f"{c:>18}" for c in cells))

    algorithms = sorted({a for a, _ in groups})
    figure, panels = plt.subplots(len(algorithms), 2, figsize=(11, 3.8 * len(algorithms)), squeeze=False)
    for row, algorithm in zip(panels, algorithms, strict=True):
        for (name, sampler), members in sorted(groups.items()):
            if name != algorithm:
                continue
            for axes, series in zip(row, ("curve", "zero_variance"), strict=True):
                xs, means, stds = _mean_curve([j[series] for j in members], smooth=series == "zero_variance")
                line = axes.plot(xs, means, marker="o" if series == "curve" else None, label=sampler)[0]
                axes.fill_between(xs, [m - s for m, s in zip(means, stds, strict=True)],
                                  [m + s for m, s in zip(means, stds, strict=True)], alpha=0.2,
                                  color=line.get_color())  # fmt: skip
        row[0].set_title(f"{algorithm}: held-out {objective}")
        row[1].set_title(f"{algorithm}: share of zero-variance groups (no gradient)")
        for axes in row:
            axes.set_xlabel("rollouts spent")
            axes.legend(title="sampler")
    figure.tight_layout()
    plot = sweep_dirs[0] / "goldilocks_vs_uniform.png"
    figure.savefig(plot, dpi=120)
    print(f"plot: {plot}")


def _mean_curve(runs: list[list[tuple[float, float]]], smooth: bool) -> tuple[list[float], list[float], list[float]]:
    """Mean and std over runs, point by point (runs of one group share their x values); ``smooth`` averages each
    run over a moving window of 5 points first (the per-log zero-variance share is noisy)."""
    length = min(len(run) for run in runs)
    if smooth:
        runs = [[(x, statistics.mean(v for _, v in run[max(0, i - 4) : i + 1])) for i, (x, _) in enumerate(run)]
                for run in runs]  # fmt: skip
    xs = [runs[0][i][0] for i in range(length)]
    values = [[run[i][1] for run in runs] for i in range(length)]
    return xs, [statistics.mean(v) for v in values], [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "overhead":
        overhead(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "sweep":
        sweep_report([Path(arg) for arg in sys.argv[2:]])
    else:
        sys.exit(__doc__.split("\n\n")[1])
