"""A run's learning curves as a PNG, from its ``metrics.jsonl``."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
        window = max(1, len(rewards) // 20)
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
