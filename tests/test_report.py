"""``python -m socratic_exp.report``: grouping, mean +- std over seeds, the files it writes, the W&B report spec."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT

from socratic_exp.core.curves import mean_curve
from socratic_exp.study.report import build_report, swept_keys, wandb_report
from socratic_exp.study.runs import find_runs
from socratic_exp.study.tables import format_mean_std

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def make_run(
    folder: Path,
    overrides: list[str],
    final: float,
    initial: float = 0.5,
    status: str = "completed",
    config: dict | None = None,
    logged: Callable[[int], dict] | None = None,
):
    """A run folder as a run writes it: summary.json and metrics.jsonl (an evaluation at 0, rewards, a final one);
    ``logged(step)``: the method's own metrics in each training log."""
    folder.mkdir(parents=True)
    summary = {
        "status": status,
        "overrides": overrides,
        "config": {"objective": "eval/greedy_acc", **(config or {})},
        "initial": {"eval/greedy_acc": initial},
        "wall_time_s": 10.0 * final,
        "run_group": "toy_sweep",
        "sweep_launch": "2026-01-01/00-00-00-000000",
        "wandb_run_id": None,
    }
    if status == "completed":
        summary |= {"objective": final, "final": {"eval/greedy_acc": final, "eval/no_answer": 1 - final}}
    else:
        summary |= {"objective": None, "error": {"type": "RuntimeError", "message": "boom"}}
    (folder / "summary.json").write_text(json.dumps(summary))
    records = [{"step": 0, "eval/greedy_acc": initial}]
    records += [
        {"step": step, "reward": final * step / 10, **(logged(step) if logged else {})} for step in range(1, 11)
    ]
    records += [{"step": 10, "eval/greedy_acc": final}] if status == "completed" else []
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def sweep(tmp_path) -> Path:
    """2 variants x 3 seeds, plus a failed job; numbered job folders like a multirun's."""
    root = tmp_path / "multirun" / "2026-01-01" / "00-00-00-000000"
    finals = {"top": [0.6, 0.7, 0.8], "random": [0.5, 0.55, 0.45]}
    job = 0
    for mode, values in finals.items():
        for seed, value in enumerate(values):
            make_run(root / str(job), ["+sweep=toy", f"algorithm.mode={mode}", f"seed={seed}"], value)
            job += 1
    make_run(root / str(job), ["+sweep=toy", "algorithm.mode=top", "seed=3"], 0.0, status="failed")
    (root / str(job) / "checkpoints" / "x").mkdir(parents=True)
    (root / str(job) / "checkpoints" / "x" / "summary.json").write_text("{}")  # not a run folder
    return root


def test_runs_are_grouped_by_the_keys_that_differ_seed_aside(sweep):
    runs = find_runs([sweep])
    assert [run.path.name for run in runs] == [str(i) for i in range(7)]  # numeric order, checkpoints not searched
    assert swept_keys(runs) == ["algorithm.mode"]


def test_the_table_holds_mean_std_and_n_over_seeds(sweep, tmp_path):
    report = build_report(find_runs([sweep]), tmp_path / "out")
    rows = {row["variant"]: row for row in csv.DictReader((tmp_path / "out" / "report.csv").open())}
    top, random = rows["algorithm.mode=top"], rows["algorithm.mode=random"]
    assert (top["n"], top["failed"], random["n"], random["failed"]) == ("3", "1", "3", "0")
    assert float(top["eval/greedy_acc mean"]) == pytest.approx(0.7)
    assert float(top["eval/greedy_acc std"]) == pytest.approx(statistics.stdev([0.6, 0.7, 0.8]))
    assert float(random["eval/greedy_acc gain mean"]) == pytest.approx(0.0)
    assert float(top["wall_time_s mean"]) == pytest.approx(7.0)
    assert float(random["eval/no_answer mean"]) == pytest.approx(0.5)
    assert "| algorithm.mode=top | 3 | 1 | 0.700 +- 0.100 | +0.200 +- 0.100 |" in report.markdown
    for name in ("curves.png", "finals.png"):
        assert (tmp_path / "out" / name).read_bytes().startswith(PNG_SIGNATURE)
    assert "![curves](curves.png)" in (tmp_path / "out" / "report.md").read_text()


def test_mean_curve_averages_runs_at_shared_steps():
    runs = [[{"step": 0, "m": 1.0}, {"step": 1, "m": 3.0}], [{"step": 0, "m": 3.0}, {"step": 2, "m": 5.0}]]
    assert mean_curve(runs, "m") == ([0], [2.0], [pytest.approx(2**0.5)])
    assert format_mean_std([0.5]) == "0.500" and format_mean_std([]) == "-"
    assert format_mean_std([0.1, 0.3], signed=True) == "+0.200 +- 0.141"


def test_cli_prints_the_table_and_takes_explicit_variant_keys(sweep, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "socratic_exp.report",
            str(sweep),
            "--by",
            "seed",
            "--metrics",
            "eval/greedy_acc",
            "--out",
            str(tmp_path / "by_seed"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| seed=0 | 2 | 0 | 0.550 +- 0.071 |" in proc.stdout
    assert "| seed=3 | 0 | 1 | - |" in proc.stdout


def test_cli_without_runs_fails_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "socratic_exp.report", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no run folders" in proc.stderr


def test_wandb_offline_says_so_and_still_writes_the_local_report(sweep, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "socratic_exp.report",
            str(sweep),
            "--wandb",
            "me/socratic",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "W&B report not saved: WANDB_MODE=offline (offline)"
    assert (tmp_path / "o" / "report.md").is_file()


@pytest.mark.filterwarnings("ignore:Pydantic V1 style")  # wandb-workspaces' own validators
def test_wandb_report_spec_filters_to_the_sweep_and_groups_by_the_swept_keys(sweep, tmp_path):
    from wandb_workspaces import expr

    runs = find_runs([sweep])
    report = build_report(runs, tmp_path / "out")
    spec = wandb_report(runs, report, "me", "socratic", ["eval/greedy_acc", "reward"])
    assert (spec.entity, spec.project) == ("me", "socratic")
    (grid,) = [block for block in spec.blocks if type(block).__name__ == "PanelGrid"]
    (runset,) = grid.runsets
    filters = expr.expr_to_filters(runset.filters)  # the W&B filter language parses it
    conditions = {(f.key.section, f.key.name): f.value for f in filters.filters}
    assert conditions[("run", "group")] == "toy_sweep"
    assert conditions[("config", "sweep.launch")] == ["2026-01-01/00-00-00-000000"]
    assert runset.groupby == ["config.sweep.overrides.algorithm.mode"]
    lines = [p for p in grid.panels if type(p).__name__ == "LinePlot"]
    assert [p.y for p in lines] == [["eval/greedy_acc"], ["reward"]]
    assert all((p.x, p.groupby_aggfunc, p.groupby_rangefunc) == ("train/global_step", "mean", "stderr") for p in lines)
    (bars,) = [p for p in grid.panels if type(p).__name__ == "BarPlot"]
    assert bars.metrics == ["eval/greedy_acc", "eval/no_answer"] and bars.groupby_rangefunc == "stderr"
    assert any(type(p).__name__ == "RunComparer" for p in grid.panels)
    assert any("0.700 +- 0.100" in getattr(block, "text", "") for block in spec.blocks)


@pytest.mark.parametrize(("logs", "window"), [(1, 1), (3, 2), (16, 4), (100, 10), (1000, 32)])
def test_the_reward_curve_is_smoothed_over_the_square_root_of_its_logs(logs, window):
    from socratic_exp.core.curves import reward_window

    assert reward_window(logs) == window


def test_a_damaged_summary_is_named_and_counted_as_not_completed(sweep, capsys):
    from socratic_exp.study import report

    (sweep / "0" / "summary.json").write_text('{"status": "completed", "overrides": ["+sweep=toy", ')  # cut short
    assert report.main([str(sweep), "--by", "algorithm.mode", "--metrics", "eval/greedy_acc"]) == 0
    printed = capsys.readouterr()
    assert printed.err.startswith(f"warning: {sweep / '0' / 'summary.json'} is damaged (not valid JSON: ")
    assert printed.err.rstrip().endswith(": counted as not completed")
    # 'top': seeds 1 and 2 (0.7, 0.8) completed; seed 3 failed; the damaged job 0 has no overrides left, its own row
    assert "| algorithm.mode=top | 2 | 1 | 0.750 +- 0.071 |" in printed.out


# --- a sweep's report: the common table and curves, and each method's own plots ----------------------------------
@pytest.fixture
def drawn(monkeypatch) -> dict[str, dict[str, dict[str, tuple[list, list]]]]:
    """What the report draws, by file: {file name: {panel title: {line label: (xs, ys)}}} (visible panels; an error
    bar's line under the error bar's label)."""
    from socratic_exp.core import curves
    from socratic_exp.study import report

    figures: dict[str, dict[str, dict[str, tuple[list, list]]]] = {}
    original = curves.save

    def data(line) -> tuple[list, list]:
        return list(line.get_xdata()), list(line.get_ydata())

    def save(figure, path: Path) -> Path:
        figures[path.name] = {
            ax.get_title(): {line.get_label(): data(line) for line in ax.lines}
            | {bars.get_label(): data(bars.lines[0]) for bars in ax.containers if getattr(bars, "lines", [None])[0]}
            for ax in figure.axes
            if ax.get_visible()
        }
        return original(figure, path)

    monkeypatch.setattr(curves, "save", save)
    monkeypatch.setattr(report, "save", save)
    return figures


@pytest.fixture
def socraticpo_sweep(tmp_path) -> Path:
    """SocraticPO's ablation in small, as its sweep folder holds it: 2 variants x 2 seeds; each run logs its training
    rollouts' unassisted accuracy (final - 0.2) and guided accuracy within K=2 attempts (the final accuracy)."""
    root = tmp_path / "multirun" / "2026-01-02" / "00-00-00-000000"
    finals = {"full": [0.6, 0.8], "without_tg": [0.5, 0.6]}
    config = {"algorithm": {"_target_": "socratic_exp.algorithms.socraticpo.config.SocraticPO", "max_attempts": 2}}
    for job, (variant, seed, value) in enumerate((v, s, x) for v, xs in finals.items() for s, x in enumerate(xs)):
        overrides = ["+sweep=socraticpo_ablation", f"+variant={variant}", "teacher=rule", f"seed={seed}"]
        logged = {"socraticpo/unassisted_acc": round(value - 0.2, 3), "socraticpo/guided_acc/step1": value - 0.2,
                  "socraticpo/guided_acc/step2": value}  # fmt: skip
        make_run(root / str(job), overrides, value, config=config, logged=lambda step, logged=logged: logged)
    return root


def test_a_sweep_report_has_the_table_the_curves_and_the_methods_own_plot(socraticpo_sweep, drawn):
    report = build_report(find_runs([socraticpo_sweep]), socraticpo_sweep)
    assert report.keys == ["variant"]
    table = report.markdown.splitlines()
    # full: 0.6, 0.8 -> 0.700 +- 0.141, gain over 0.5 +0.200; without_tg: 0.5, 0.6 -> 0.550 +- 0.071, gain +0.050
    assert "| variant=full | 2 | 0 | 0.700 +- 0.141 | +0.200 +- 0.141 |" in "\n".join(table)
    assert "| variant=without_tg | 2 | 0 | 0.550 +- 0.071 | +0.050 +- 0.071 |" in "\n".join(table)
    rows = {row["variant"]: row for row in csv.DictReader((socraticpo_sweep / "report.csv").open())}
    assert float(rows["variant=full"]["eval/greedy_acc std"]) == pytest.approx(0.1414214)
    assert float(rows["variant=without_tg"]["wall_time_s mean"]) == pytest.approx(5.5)
    names = [f.name for f in report.files]
    assert names == ["report.md", "report.csv", "curves.png", "finals.png", "sweep_socraticpo.png"]
    for png in report.files[2:]:
        assert png.read_bytes().startswith(PNG_SIGNATURE)
    page = (socraticpo_sweep / "report.md").read_text()
    assert "## SocraticPO: unassisted vs guided accuracy\n\n![sweep_socraticpo](sweep_socraticpo.png)" in page
    # the common curves: the reward's mean over seeds, full at step 10 = (0.6 + 0.8) / 2
    steps, rewards = drawn["curves.png"]["reward"]["variant=full (n=2)"]
    assert steps[-1] == 10 and rewards[-1] == pytest.approx(0.7)
    # the method's own: unassisted and guided within the last attempt (K=2), no assisted evaluation logged
    own = drawn["sweep_socraticpo.png"]
    assert list(own) == ["socraticpo/unassisted_acc", "socraticpo/guided_acc/step2"]
    assert own["socraticpo/unassisted_acc"]["variant=without_tg (n=2)"][1] == pytest.approx([0.35] * 10)
    assert own["socraticpo/guided_acc/step2"]["variant=full (n=2)"][1] == pytest.approx([0.7] * 10)


def test_a_sweep_of_a_method_without_sweep_plots_gets_the_common_report(tmp_path, drawn):
    root = tmp_path / "reinforce_pp_sweep"
    config = {"algorithm": {"_target_": "socratic_exp.algorithms.reinforce_pp.config.ReinforcePP"}}
    for job, (lr, seed, value) in enumerate([("1e-6", 0, 0.6), ("1e-6", 1, 0.7), ("1e-5", 0, 0.4), ("1e-5", 1, 0.4)]):
        make_run(root / str(job), [f"algorithm.learning_rate={lr}", f"seed={seed}"], value, config=config,
                 logged=lambda step: {"reinforce_pp/reward_kl": 0.01})  # fmt: skip
    report = build_report(find_runs([root]), root)
    assert [f.name for f in report.files] == ["report.md", "report.csv", "curves.png", "finals.png"]
    assert "| algorithm.learning_rate=1e-6 | 2 | 0 | 0.650 +- 0.071 | +0.150 +- 0.071 |" in report.markdown
    assert "| algorithm.learning_rate=1e-5 | 2 | 0 | 0.400 +- 0.000 | -0.100 +- 0.000 |" in report.markdown
    assert "##" not in (root / "report.md").read_text().split("\n", 1)[1]  # no method section
    assert set(drawn) == {"curves.png", "finals.png"}


def test_each_method_draws_its_sweep_plot_from_its_own_metrics(tmp_path, drawn):
    """Runs that log every method's telemetry, the mask at rho 0.2 and 1.0: each method's plot, with its numbers."""
    root = tmp_path / "every_method"
    for job, (rho, seed, value) in enumerate([(0.2, 0, 0.6), (0.2, 1, 0.8), (1.0, 0, 0.5), (1.0, 1, 0.7)]):
        logged = {
            "sampler/rollouts": 8.0,  # 8 rollouts a step: the count so far is 8 x step
            "sampler/updates": 1.0,
            "sampler/zero_variance_share": 0.25 if seed else 0.75,
            "self_distillation/reward_margin": 0.1,
            "vpd/skipped": 0.0,
        }
        make_run(root / str(job), [f"algorithm.rho={rho}", f"seed={seed}"], value,
                 config={"algorithm": {"rho": rho, "mode": "top"}},
                 logged=lambda step, logged=logged: logged | {"sampler/rollouts": 8.0 * step})  # fmt: skip
    report = build_report(find_runs([root]), root)
    assert [f.name for f in report.files][4:] == [
        "sweep_entropy_mask.png",
        "sweep_self_distillation.png",
        "sweep_vpd.png",
        "sweep_goldilocks.png",
    ]
    rho = drawn["sweep_entropy_mask.png"]
    assert rho["eval/greedy_acc"]["top"][0] == [0.2]  # rho=0.2: (0.6 + 0.8) / 2; rho=1 pooled as the baseline
    assert rho["eval/greedy_acc"]["top"][1] == pytest.approx([0.7])
    assert rho["eval/greedy_acc"]["rho=1 (GRPO)"][1] == pytest.approx([0.6, 0.6])
    assert rho["eval/greedy_acc gain"]["top"][1] == pytest.approx([0.2])
    rollouts = drawn["sweep_goldilocks.png"]
    # evaluations at step 0 and 10: 0 and 80 rollouts; zero-variance share: (0.75 + 0.25) / 2 at every log
    xs, ys = rollouts["held-out eval/greedy_acc"]["algorithm.rho=0.2 (n=2)"]
    assert xs == [0.0, 80.0] and ys == pytest.approx([0.5, 0.7])
    xs, ys = rollouts["share of zero-variance groups (no gradient)"]["algorithm.rho=1.0 (n=2)"]
    assert xs == [8.0 * step for step in range(1, 11)] and ys == pytest.approx([0.5] * 10)
    assert list(drawn["sweep_self_distillation.png"]) == ["self_distillation/reward_margin"]
    assert list(drawn["sweep_vpd.png"]) == ["vpd/skipped"]
