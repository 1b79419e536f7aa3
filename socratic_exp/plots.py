"""A run's learning curves as a PNG, from its ``metrics.jsonl``."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def reward_window(logs: int) -> int:
    """Logs in the training reward's trailing moving mean: the square root of their number, so that a short run's
    trend shows through its noise (16 logs: 4) and a long run's is not flattened (1,000 logs: 32)."""
    return max(1, round(logs**0.5))


def plot_learning_curves(records: list[dict[str, Any]], path: Path) -> Path | None:
    """Training reward (left) and held-out accuracy by difficulty (right) against the optimizer step."""
    train = [(r["step"], r["reward"]) for r in records if r.get("reward") is not None]
    evals = [r for r in records if r.get("eval/greedy_acc") is not None]
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
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
    series = sorted({k for r in evals for k in r if k.startswith("eval/greedy_acc") or k.startswith("eval/pass@")})
    for key in series:
        points = [(r["step"], r[key]) for r in evals if r.get(key) is not None]
        style = "-" if key.count("/") == 1 else ":"
        right.plot(*zip(*points, strict=True), style, marker="o", label=key.removeprefix("eval/"))
    right.set(title="held-out accuracy", xlabel="step", ylim=(0, 1.02))
    if series:
        right.legend(fontsize=7, ncol=2)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- a method's own telemetry (the run report) ---------------------------------------------------------------
def series(records: list[dict[str, Any]], metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric in ``metrics.jsonl`` records, in logging order."""
    points = [(r["step"], r[metric]) for r in records if isinstance(r.get(metric), int | float)]
    return ([p[0] for p in points], [float(p[1]) for p in points]) if points else ([], [])


def _numbered(records: list[dict[str, Any]], prefix: str) -> list[str]:
    """The metrics ``<prefix><k>`` (k = 1, 2, ...) present in the records, in order of k."""
    names = {key for r in records for key in r if key.startswith(prefix) and key[len(prefix) :].isdigit()}
    return sorted(names, key=lambda key: int(key[len(prefix) :]))


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _lines(ax: Any, records: list[dict[str, Any]], metrics: list[str], title: str, label: Any = None) -> None:
    for metric in metrics:
        steps, values = series(records, metric)
        if steps:
            ax.plot(
                steps, values, marker="o" if len(steps) <= 20 else None, ms=3, label=label(metric) if label else metric
            )
    ax.set(title=title, xlabel="step")
    if ax.has_data():
        ax.legend(fontsize=7)


def plot_socraticpo(records: list[dict[str, Any]], path: Path) -> Path | None:
    """The correction rate p_k by attempt (mean over training, and over steps) and the guided accuracy."""
    rates = _numbered(records, "socraticpo/correction_rate/step")
    if not rates:
        return None
    plt = pyplot()
    fig, (bars, over_time, guided) = plt.subplots(1, 3, figsize=(15, 4), constrained_layout=True)
    means = [sum(series(records, m)[1]) / max(1, len(series(records, m)[1])) for m in rates]
    attempts = [int(m.rsplit("step", 1)[1]) for m in rates]
    bars.bar(attempts, means, color="tab:green")
    bars.set(title="correction rate by attempt (mean over training)", xlabel="attempt k", ylabel="p_k", ylim=(0, 1))
    bars.set_xticks(attempts)
    _lines(over_time, records, rates, "correction rate p_k", lambda m: f"attempt {m.rsplit('step', 1)[1]}")
    _lines(guided, records, ["socraticpo/unassisted_acc", *_numbered(records, "socraticpo/guided_acc/step")],
           "unassisted vs guided accuracy (training rollouts)", lambda m: m.removeprefix("socraticpo/"))  # fmt: skip
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_entropy_mask(records: list[dict[str, Any]], rho: float | None, path: Path) -> Path | None:
    """The token-entropy distribution (its logged percentiles, early and late in training) with the kept threshold
    (the 1 - rho quantile: tokens above it are trained on), and the kept / dropped tokens' entropy over steps."""
    quantiles = sorted(
        (int(k.removeprefix("entropy_mask/entropy_p")), k)
        for k in {k for r in records for k in r if k.startswith("entropy_mask/entropy_p")}
        if k.removeprefix("entropy_mask/entropy_p").isdigit()
    )
    if not quantiles:
        return None
    logged = [r for r in records if all(isinstance(r.get(k), int | float) for _, k in quantiles)]
    plt = pyplot()
    fig, (dist, over_time) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for record, style in ((logged[0], ":"), (logged[-1], "-")) if logged else ():
        dist.plot([q for q, _ in quantiles], [record[k] for _, k in quantiles], style, marker="o",
                  label=f"step {record['step']}")  # fmt: skip
    if rho is not None:
        dist.axvline(
            100 * (1 - rho), color="tab:red", ls="--", label=f"kept: top {rho:.0%} (above p{100 * (1 - rho):.0f})"
        )
    dist.set(title="token entropy by percentile", xlabel="percentile of completion tokens", ylabel="entropy (nats)")
    dist.legend(fontsize=7)
    shown = ["entropy_mask/kept_entropy", "entropy_mask/dropped_entropy", "entropy_mask/kept_fraction"]
    _lines(over_time, records, shown, "kept vs dropped tokens", lambda m: m.removeprefix("entropy_mask/"))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_goldilocks(records: list[dict[str, Any]], path: Path) -> Path | None:
    """Predicted vs realised utility of the chosen questions (each point: one logging interval's means), and the
    zero-variance share of the groups over steps."""
    predicted = [(r.get("sampler/predicted_utility"), r.get("sampler/realised_utility"), r["step"]) for r in records]
    pairs = [(p, q, s) for p, q, s in predicted if isinstance(p, int | float) and isinstance(q, int | float)]
    if not pairs:
        return None
    plt = pyplot()
    fig, (scatter, over_time) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    points = scatter.scatter([p for p, _, _ in pairs], [q for _, q, _ in pairs], c=[s for _, _, s in pairs], s=14)
    top = max(max(p, q) for p, q, _ in pairs) or 1.0
    scatter.plot([0, top], [0, top], ":", color="gray", label="y = x")
    scatter.set(title="predicted vs realised utility", xlabel="predicted", ylabel="realised (p(1-p) of the group)")
    scatter.legend(fontsize=7)
    fig.colorbar(points, ax=scatter, label="step")
    _lines(over_time, records, ["sampler/zero_variance_share", "sampler/predicted_utility", "sampler/realised_utility"],
           "over training", lambda m: m.removeprefix("sampler/"))  # fmt: skip
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_prefixed(records: list[dict[str, Any]], prefix: str, title: str, path: Path, limit: int = 12) -> Path | None:
    """Small multiples: each metric under ``prefix`` against the step (VPD's E-step, SDPO's distillation,
    Socratic-RL's viewpoint timeline)."""
    names = sorted({k for r in records for k in r if k.startswith(prefix)})[:limit]
    names = [n for n in names if series(records, n)[0]]
    if not names:
        return None
    plt = pyplot()
    columns = min(4, len(names))
    rows = -(-len(names) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.8 * rows), squeeze=False, constrained_layout=True)
    for ax, name in zip(axes.flat, names, strict=False):
        steps, values = series(records, name)
        ax.plot(steps, values, marker="o" if len(steps) <= 20 else None, ms=3)
        ax.set_title(name.removeprefix(prefix), fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_viewpoints(records: list[dict[str, Any]], path: Path) -> Path | None:
    """Socratic-RL's viewpoint timeline: the knowledge base's active / queued / retired / distilled counts, and the
    viewpoints' measured utility (mean with min-max band) at each probe."""
    if not series(records, "socratic_rl/kb_size")[0] and not series(records, "socratic_rl/active")[0]:
        return None
    plt = pyplot()
    fig, (counts, utility) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    _lines(counts, records, ["socratic_rl/active", "socratic_rl/kb_queued", "socratic_rl/kb_retired",
                             "socratic_rl/kb_distilled", "socratic_rl/kb_size"], "viewpoints |V| over training",
           lambda m: m.removeprefix("socratic_rl/"))  # fmt: skip
    steps, means = series(records, "socratic_rl/utility_mean")
    if steps:
        low = dict(zip(*series(records, "socratic_rl/utility_min"), strict=True))
        high = dict(zip(*series(records, "socratic_rl/utility_max"), strict=True))
        utility.plot(steps, means, marker="o", ms=3, label="mean U(v)")
        if all(s in low and s in high for s in steps):
            utility.fill_between(steps, [low[s] for s in steps], [high[s] for s in steps], alpha=0.2, label="min-max")
        utility.axhline(0.0, color="gray", ls=":")
        utility.legend(fontsize=7)
    utility.set(title="viewpoint utility U(v) at each probe", xlabel="step")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
