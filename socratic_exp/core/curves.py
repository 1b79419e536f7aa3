"""The plots drawn from ``metrics.jsonl`` records: the run's learning curves, the methods' telemetry, and what the
reports and the scoreboard share."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Records = Sequence[dict[str, Any]]  # metrics.jsonl, one dict per logged step


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (imported when a plot is drawn, never at start-up)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure: Any, path: Path) -> Path:
    figure.savefig(path, dpi=110)
    pyplot().close(figure)
    return path


def series(records: Records, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric in ``metrics.jsonl`` records, in logging order."""
    points = [(r["step"], r[metric]) for r in records if isinstance(r.get(metric), int | float)]
    return ([p[0] for p in points], [float(p[1]) for p in points]) if points else ([], [])


def numbered(records: Records, prefix: str) -> list[str]:
    """The metrics ``<prefix><k>`` (k = 1, 2, ...) present in the records, in order of k."""
    names = {key for r in records for key in r if key.startswith(prefix) and key[len(prefix) :].isdigit()}
    return sorted(names, key=lambda key: int(key[len(prefix) :]))


def lines(ax: Any, records: Records, metrics: Sequence[str], title: str, label: Callable[[str], str] | None = None):
    """One line per metric against the step (the metrics not logged are left out)."""
    for metric in metrics:
        steps, values = series(records, metric)
        if steps:
            ax.plot(
                steps, values, marker="o" if len(steps) <= 20 else None, ms=3, label=label(metric) if label else metric
            )
    ax.set(title=title, xlabel="step")
    if ax.has_data():
        ax.legend(fontsize=7)


def mean_curve(runs: Sequence[Records], metric: str, window: int = 1) -> tuple[list[int], list[float], list[float]]:
    """A metric's mean and std over runs at each step every run logged it, each smoothed by a trailing moving
    average over ``window`` of those steps."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for records in runs:
        for record in records:
            if record.get(metric) is not None:
                by_step[record["step"]].append(record[metric])
    steps = sorted(step for step, values in by_step.items() if len(values) == len(runs))
    means = [statistics.fmean(by_step[step]) for step in steps]
    stds = [statistics.stdev(by_step[step]) if len(runs) > 1 else 0.0 for step in steps]

    def smooth(values: list[float]) -> list[float]:
        return [statistics.fmean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]

    return steps, smooth(means), smooth(stds)


def mean_line(
    ax: Any, runs: Sequence[Records], metric: str, label: str, *, window: int = 1, band: bool = False,
    x: str | None = None, **style: Any,
) -> bool:  # fmt: skip
    """A group of runs as one line: the metric's mean over them against the step (or against the mean of another
    metric ``x``, e.g. the training time), with a +- std band if asked. False when nothing was plotted."""
    steps, means, stds = mean_curve(runs, metric, window)
    if not steps:
        return False
    xs: Sequence[float] = steps
    if x is not None:
        xs = mean_curve(runs, x, window)[1]
        if len(xs) != len(means):
            return False
    ax.plot(xs, means, label=label, **style)
    if band:
        low = [m - s for m, s in zip(means, stds, strict=True)]
        high = [m + s for m, s in zip(means, stds, strict=True)]
        ax.fill_between(xs, low, high, color=style.get("color"), alpha=0.15)
    return True


def reward_window(logs: int) -> int:
    """Logs in the training reward's trailing moving mean: the square root of their number, so that a short run's
    trend shows through its noise (16 logs: 4) and a long run's is not flattened (1,000 logs: 32)."""
    return max(1, round(logs**0.5))


def plot_learning_curves(records: Records, path: Path) -> Path | None:
    """Training reward (left) and held-out accuracy by difficulty (right) against the optimizer step."""
    train = [(r["step"], r["reward"]) for r in records if r.get("reward") is not None]
    evals = [r for r in records if r.get("eval/greedy_acc") is not None]
    if not train and not evals:
        return None
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    if train:
        steps, rewards = zip(*train, strict=True)
        left.plot(steps, rewards, color="tab:blue", alpha=0.35, label="per log")
        window = reward_window(len(rewards))
        smooth = [
            sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(rewards))
        ]
        left.plot(steps, smooth, color="tab:blue", label=f"moving mean ({window})")
        left.legend(fontsize=7)
    left.set(title="training reward", xlabel="step", ylabel="mean reward")
    shown = sorted({k for r in evals for k in r if k.startswith("eval/greedy_acc") or k.startswith("eval/pass@")})
    for key in shown:
        points = [(r["step"], r[key]) for r in evals if r.get(key) is not None]
        style = "-" if key.count("/") == 1 else ":"
        right.plot(*zip(*points, strict=True), style, marker="o", label=key.removeprefix("eval/"))
    right.set(title="held-out accuracy", xlabel="step", ylim=(0, 1.02))
    if shown:
        right.legend(fontsize=7, ncol=2)
    return save(fig, path)


def plot_prefixed(records: Records, prefix: str, title: str, path: Path, limit: int = 12) -> Path | None:
    """Small multiples: each metric under ``prefix`` against the step (a method's own telemetry)."""
    names = sorted({k for r in records for k in r if k.startswith(prefix)})[:limit]
    names = [n for n in names if series(records, n)[0]]
    if not names:
        return None
    columns = min(4, len(names))
    rows = -(-len(names) // columns)
    fig, axes = pyplot().subplots(
        rows, columns, figsize=(3.6 * columns, 2.8 * rows), squeeze=False, constrained_layout=True
    )
    for ax, name in zip(axes.flat, names, strict=False):
        steps, values = series(records, name)
        ax.plot(steps, values, marker="o" if len(steps) <= 20 else None, ms=3)
        ax.set_title(name.removeprefix(prefix), fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    return save(fig, path)


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean, sample standard deviation (nan for one value) and count; (nan, nan, 0) for none."""
    if not values:
        return math.nan, math.nan, 0
    std = statistics.stdev(values) if len(values) > 1 else math.nan
    return statistics.fmean(values), std, len(values)


def plot_curves(variants: Sequence[Any], curves: Sequence[str], path: Path) -> Path | None:
    """One panel per metric (three to a row), one line per variant (``study.report.Variant``: its ``name`` and its
    ``runs``, each with its ``records``): the mean over its runs with a +- std band."""
    plotted = [m for m in curves if any(m in r for v in variants for run in v.runs for r in run.records)]
    if not plotted:
        return None
    columns = min(3, len(plotted))
    rows = math.ceil(len(plotted) / columns)
    figure, axes = pyplot().subplots(rows, columns, figsize=(5.5 * columns, 4 * rows), squeeze=False)
    for ax in list(axes.flat)[len(plotted) :]:
        ax.set_visible(False)
    for ax, metric in zip(axes.flat, plotted, strict=False):
        for index, variant in enumerate(v for v in variants if v.runs):
            logs = max(sum(metric in r for r in run.records) for run in variant.runs)
            label = f"{variant.name} (n={len(variant.runs)})"
            style = {"marker": "o" if logs <= 20 else None, "color": f"C{index % 10}"}
            mean_line(
                ax, [r.records for r in variant.runs], metric, label, window=max(1, logs // 20), band=True, **style
            )
        ax.set(title=metric, xlabel="step")
        ax.legend(fontsize=7)
    figure.tight_layout()
    return save(figure, path)
