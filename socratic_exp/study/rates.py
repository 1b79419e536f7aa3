"""Each evidence arm's learning rate, chosen on the selection seeds by a rule fixed before the runs
(``sweeps/evidence_rates_selection.yaml``; research/results/evidence_rates/PREREGISTRATION.md).

``python -m socratic_exp.report <selection sweep folder> --rates`` reads the sweep's run folders (one
``+evidence_arm`` and one ``algorithm.learning_rate`` per run) and writes ``rates.md`` (each arm's mean final
accuracy at each rate, the chosen rate marked), ``rates.json`` (every run's final accuracy, the rule and each arm's
choice: the choice rebuilds from this file alone, ``--rates rates.json``) and ``rates.png`` (accuracy against the
rate, a line per arm). Several folders or files (a launch per selection seed) are read as one selection.

The rule: for each arm, the rate whose mean final ``eval/greedy_acc`` over the selection seeds is highest; a tie
(means within ``TIE``) goes to the lower rate (the smaller step, the slower drift from the student); a rate at which
a selection run of the arm failed, or has not run, is not chosen.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from socratic_exp.core.curves import pyplot, save
from socratic_exp.core.errors import UserError
from socratic_exp.study.evidence import ARM_KEY, METRIC, seed_of
from socratic_exp.study.runs import Run
from socratic_exp.study.tables import markdown_table, number

RATE_KEY = "algorithm.learning_rate"  # the override that names a run's rate
TIE = 1e-9  # means this close are equal (accuracies on 400 questions are multiples of 1/400; a mean of 3, of 1/1200)
RULE = (
    "per arm, the rate with the highest mean final eval/greedy_acc over the selection seeds; ties to the lower rate; "
    "a rate with a failed or missing selection run is not chosen"
)
FORMAT = 1  # rates.json's layout


@dataclass
class ArmRates:
    """One arm's selection runs: final accuracy by rate and seed, failed runs by rate, and the rate chosen."""

    arm: str
    accuracy: dict[float, dict[int, float]]  # rate -> seed -> final accuracy
    failed: dict[float, int]
    seeds: tuple[int, ...]  # the selection seeds (every seed any run of the sweep has)
    chosen: float | None = None

    def mean(self, rate: float) -> float:
        found = self.accuracy.get(rate, {})
        return statistics.fmean(found.values()) if found else math.nan

    def eligible(self, rate: float) -> bool:
        return not self.failed.get(rate) and sorted(self.accuracy.get(rate, {})) == list(self.seeds)


def choose(arm: ArmRates) -> float | None:
    """The rule (module docstring): the eligible rate of highest mean, ties to the lower; None if none is eligible."""
    best: float | None = None
    for rate in sorted(r for r in arm.accuracy if arm.eligible(r)):  # ascending: a tie keeps the lower rate
        if best is None or arm.mean(rate) > arm.mean(best) + TIE:
            best = rate
    return best


def rate_of(run: Run) -> float | None:
    value = run.overrides.get(RATE_KEY)
    if value is None:
        value = ((run.summary.get("config") or {}).get("algorithm") or {}).get("learning_rate")
    return float(value) if value is not None else None


def arm_rates(runs: Sequence[Run]) -> list[ArmRates]:
    """The selection runs by arm (in the order arms first appear), each arm's rate chosen."""
    accuracy: dict[str, dict[float, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    failed: dict[str, dict[float, int]] = defaultdict(lambda: defaultdict(int))
    seeds: set[int] = set()
    for run in runs:
        arm, seed, rate = run.overrides.get(ARM_KEY), seed_of(run), rate_of(run)
        if arm is None or seed is None or rate is None:
            continue
        seeds.add(seed)
        value = run.value(METRIC)
        if run.status == "completed" and value is not None:
            accuracy[arm][rate][seed] = value
        elif run.status != "running":
            failed[arm][rate] += 1
        else:
            accuracy[arm].setdefault(rate, {})
    if not accuracy and not failed:
        raise UserError(
            f"no run names an {ARM_KEY} and an {RATE_KEY}",
            "point --rates at the selection sweep's folder (sweeps/evidence_rates_selection.yaml)",
        )
    arms = [ArmRates(arm, dict(accuracy[arm]), dict(failed[arm]), tuple(sorted(seeds)))
            for arm in dict.fromkeys([*accuracy, *failed])]  # fmt: skip
    for arm in arms:
        arm.chosen = choose(arm)
    return arms


def rates_markdown(arms: Sequence[ArmRates]) -> str:
    rates = sorted({rate for arm in arms for rate in (*arm.accuracy, *arm.failed)})

    def cell(arm: ArmRates, rate: float) -> str:
        shown = f"{number(arm.mean(rate))} ({len(arm.accuracy.get(rate, {}))})"
        if arm.failed.get(rate):
            shown += f", {arm.failed[rate]} failed"
        return f"**{shown}**" if rate == arm.chosen else shown

    header = ["arm", *(f"{rate:g}" for rate in rates), "chosen"]
    rows = [[arm.arm, *(cell(arm, rate) for rate in rates), f"{arm.chosen:g}" if arm.chosen else "none"]
            for arm in arms]  # fmt: skip
    edges = [f"{arm.arm} ({arm.chosen:g})" for arm in arms if arm.chosen in (rates[0], rates[-1])]
    return (f"Mean final `{METRIC}` over the selection seeds {', '.join(map(str, arms[0].seeds))} (runs completed); "
            f"the chosen rate in bold. Rule: {RULE}.\n\n" + markdown_table(header, rows)
            + f"\n\nChosen at the grid's edge (the grid is not extended): {', '.join(edges) or 'none'}")  # fmt: skip


def plot_rates(arms: Sequence[ArmRates], path: Path) -> Path:
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(10, 5))
    for index, arm in enumerate(arms):  # 20 colours and 4 markers: no two of up to 20 arms look alike
        style = {"color": plt.cm.tab20(index % 20), "marker": "osD^"[index % 4]}
        rates = sorted(arm.accuracy)
        ax.plot(rates, [arm.mean(rate) for rate in rates], label=arm.arm, **style)
        if arm.chosen is not None:
            ax.plot([arm.chosen], [arm.mean(arm.chosen)], markersize=16, color=style["color"], marker="*")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel(f"mean final {METRIC} (selection seeds)")
    ax.set_title("Each arm's learning rate (star: chosen)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    return save(figure, path)


def rates_json(arms: Sequence[ArmRates]) -> dict:
    return {
        "format": FORMAT,
        "rule": RULE,
        "seeds": list(arms[0].seeds) if arms else [],
        "arms": {
            arm.arm: {
                "accuracy": {
                    f"{rate:g}": {str(s): v for s, v in sorted(by_seed.items())}
                    for rate, by_seed in sorted(arm.accuracy.items())
                },
                "failed": {f"{rate:g}": n for rate, n in sorted(arm.failed.items())},
                "chosen": arm.chosen,
            }
            for arm in arms
        },
    }


def read_rates(path: Path) -> list[ArmRates]:
    """The arms of a ``rates.json``, each choice made again by the rule (not read from the file)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        seeds = tuple(data["seeds"])
        arms = [
            ArmRates(
                name,
                {float(rate): {int(s): v for s, v in by_seed.items()} for rate, by_seed in entry["accuracy"].items()},
                {float(rate): n for rate, n in entry["failed"].items()},
                seeds,
            )
            for name, entry in data["arms"].items()
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(
            f"{path}: not a readable rates file ({err.__class__.__name__}: {err})",
            "point --rates at a rates.json that --rates wrote, or at the selection sweep's folder",
        ) from None
    for arm in arms:
        arm.chosen = choose(arm)
    return arms


def merged(parts: Sequence[Sequence[ArmRates]]) -> list[ArmRates]:
    """The arms of several launches (a selection seed each) as one selection, each choice made again by the rule."""
    by_arm: dict[str, ArmRates] = {}
    seeds = tuple(sorted({seed for part in parts for arm in part for seed in arm.seeds}))
    for part in parts:
        for arm in part:
            into = by_arm.setdefault(arm.arm, ArmRates(arm.arm, {}, {}, seeds))
            for rate, by_seed in arm.accuracy.items():
                into.accuracy.setdefault(rate, {}).update(by_seed)
            for rate, count in arm.failed.items():
                into.failed[rate] = into.failed.get(rate, 0) + count
    for arm in by_arm.values():
        arm.chosen = choose(arm)
    return list(by_arm.values())


def write_rates(arms: Sequence[ArmRates], out: Path) -> tuple[str, list[Path]]:
    out.mkdir(parents=True, exist_ok=True)
    markdown = rates_markdown(arms)
    (out / "rates.md").write_text(markdown + "\n", encoding="utf-8")
    (out / "rates.json").write_text(json.dumps(rates_json(arms), indent=1) + "\n", encoding="utf-8")
    return markdown, [out / "rates.md", out / "rates.json", plot_rates(arms, out / "rates.png")]
