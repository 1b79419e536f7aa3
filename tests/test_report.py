"""``python -m socratic_exp.report``: grouping, mean +- std over seeds, the files it writes, the W&B report spec."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from socratic_exp.study.curves import mean_curve
from socratic_exp.study.report import build_report, swept_keys, wandb_report
from socratic_exp.study.runs import find_runs
from socratic_exp.study.tables import format_mean_std

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def make_run(folder: Path, overrides: list[str], final: float, initial: float = 0.5, status: str = "completed"):
    """A run folder as a run writes it: summary.json and metrics.jsonl (an evaluation at 0, rewards, a final one)."""
    folder.mkdir(parents=True)
    summary = {
        "status": status,
        "overrides": overrides,
        "config": {"objective": "eval/greedy_acc"},
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
    records += [{"step": step, "reward": final * step / 10} for step in range(1, 11)]
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
            "socratic_exp.study.report",
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
    proc = subprocess.run(
        [sys.executable, "-m", "socratic_exp.study.report", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no run folders" in proc.stderr


def test_wandb_offline_says_so_and_still_writes_the_local_report(sweep, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "socratic_exp.study.report",
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
    from socratic_exp.study.curves import reward_window

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
