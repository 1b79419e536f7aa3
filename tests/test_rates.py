"""Each evidence arm's learning rate, chosen on the selection sweep by its pre-registered rule
(socratic_exp.study.rates): the sweep is its pre-registration, the rule picks the highest mean with ties to the
lower rate and never a rate with a failed or missing run, and the choice rebuilds from rates.json byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, compose, sweep_grid

from socratic_exp.runtime.assembly import build_components
from socratic_exp.study import report
from socratic_exp.study.rates import ArmRates, choose

SEEDS = (100, 101, 102)


def test_the_selection_sweep_is_its_pre_registration():
    """What PREREGISTRATION.md fixes: the headroom regime's 12 arms and VPD without its E-step, the four rates,
    seeds 100-102, every arm (GRPO too) 60 steps on the headroom regime's students and task."""
    params = sweep_grid("evidence_rates_selection")
    assert params["seed"] == ["100", "101", "102"]
    assert params["algorithm.learning_rate"] == ["2.5e-6", "5.0e-6", "1.0e-5", "2.0e-5"]
    assert len(params["+evidence_arm"]) == 13 and "vpd_without_e_step" in params["+evidence_arm"]
    assert (ROOT / "research" / "results" / "evidence_rates" / "PREREGISTRATION.md").is_file()
    for arm in ("grpo", "vpd_without_e_step"):
        cfg = compose("+sweep=evidence_rates_selection", f"+evidence_arm={arm}", "seed=101",
                      "algorithm.learning_rate=2.0e-5")  # fmt: skip
        components = build_components(cfg)
        assert (components.algorithm.max_steps, components.algorithm.learning_rate) == (60, 2e-5)
        assert (components.task.rl_ops, cfg.model.warmstart_steps, cfg.model.warmstart_seed) == ([2, 3, 4], 1650, 101)
    assert components.algorithm.e_step == "off"


def test_the_scoreboard_sweep_trains_each_arm_at_the_rate_the_selection_chose():
    """Part 2 takes one thing from Part 1: each arm's rate, as rates.json names it."""
    selection = json.loads((ROOT / "research/results/evidence_rates/selection/rates.json").read_text())
    chosen = {arm: entry["chosen"] for arm, entry in selection["arms"].items()}
    assert (chosen["grpo"], chosen["sdpo"], chosen["socratic_rl_kl"]) == (2e-5, 2e-5, 1e-5)  # by hand
    params = sweep_grid("evidence_rates")
    assert params["seed"] == [str(seed) for seed in range(10, 20)]
    assert sorted(params["+evidence_arm"]) == sorted(chosen)
    for arm in params["+evidence_arm"]:
        cfg = compose("+sweep=evidence_rates", f"+evidence_arm={arm}", "seed=13")
        components = build_components(cfg)
        assert components.algorithm.learning_rate == chosen[arm], arm
        assert components.algorithm.max_steps == (240 if arm == "grpo" else 60)
        assert (components.task.rl_ops, cfg.model.warmstart_steps, cfg.model.warmstart_seed) == ([2, 3, 4], 1650, 13)


def test_the_long_runs_train_every_arm_240_steps_at_its_selected_rate():
    params = sweep_grid("evidence_long")
    assert params["seed"] == [str(seed) for seed in range(10, 20)]
    assert params["+evidence_arm"] == ["grpo", "sdpo", "vpd_dynamic", "vpd_trust_region"]
    for arm in params["+evidence_arm"]:
        algorithm = build_components(compose("+sweep=evidence_long", f"+evidence_arm={arm}", "seed=10")).algorithm
        assert (algorithm.max_steps, algorithm.learning_rate) == (240, 2e-5), arm
    assert algorithm.teacher_regularization == "trust_region"


def arm(accuracy: dict[float, dict[int, float]], failed: dict[float, int] | None = None) -> ArmRates:
    return ArmRates("grpo", accuracy, failed or {}, SEEDS)


def test_the_highest_mean_wins_and_a_tie_goes_to_the_lower_rate():
    full = lambda a, b, c: dict(zip(SEEDS, (a, b, c), strict=True))  # noqa: E731
    assert choose(arm({2.5e-6: full(0.5, 0.6, 0.7), 5e-6: full(0.6, 0.6, 0.7)})) == 5e-6  # 0.633 over 0.600
    # 1e-5 and 5e-6 both average 0.65 (different seeds' values): the lower rate
    assert choose(arm({5e-6: full(0.6, 0.65, 0.7), 1e-5: full(0.7, 0.6, 0.65), 2.5e-6: full(0.5, 0.5, 0.5)})) == 5e-6
    assert choose(arm({2e-5: full(0.9, 0.9, 0.9), 1e-5: full(0.6, 0.6, 0.6)})) == 2e-5


def test_a_rate_with_a_failed_or_missing_run_is_not_chosen():
    full = dict(zip(SEEDS, (0.6, 0.6, 0.6), strict=True))
    assert choose(arm({1e-5: full, 2e-5: {100: 0.9, 101: 0.9}})) == 1e-5  # seed 102 missing at 2e-5
    assert choose(arm({1e-5: full, 2e-5: dict.fromkeys(SEEDS, 0.9)}, failed={2e-5: 1})) == 1e-5  # a 4th run failed
    assert choose(arm({2e-5: {100: 0.9}})) is None


def make_run(root: Path, job: int, arm: str, seed: int, rate: str, accuracy: float, status: str = "completed"):
    folder = root / str(job)
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 60, "eval/greedy_acc": accuracy}) + "\n")
    summary = {"status": status, "overrides": [f"seed={seed}", f"algorithm.learning_rate={rate}",
                                               f"+evidence_arm={arm}", "+sweep=evidence_rates_selection"],
               "config": {"seed": seed}, "final": {"eval/greedy_acc": accuracy}, "steps": 60}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def selection(tmp_path):
    """Two arms at two rates on the three seeds: sdpo best at 1e-5 (0.600 against 0.550), grpo tied (0.500 both:
    5e-6); sdpo's seed-101 run at 5e-6 failed."""
    root, jobs = tmp_path / "selection", iter(range(100))
    for seed, (g5, g10, s5, s10) in zip(SEEDS, [(0.5, 0.45, 0.55, 0.6), (0.5, 0.5, 0.0, 0.6), (0.5, 0.55, 0.55, 0.6)],
                                        strict=True):  # fmt: skip
        make_run(root, next(jobs), "grpo", seed, "5e-06", g5)
        make_run(root, next(jobs), "grpo", seed, "1e-05", g10)
        make_run(root, next(jobs), "sdpo", seed, "5e-06", s5, status="failed" if seed == 101 else "completed")
        make_run(root, next(jobs), "sdpo", seed, "1e-05", s10)
    return root


def test_the_report_chooses_each_arms_rate_and_rebuilds_it_from_its_file(selection, tmp_path, capsys):
    assert report.main([str(selection), "--rates"]) == 0
    printed = capsys.readouterr().out
    assert "| grpo | **0.500 (3)** | 0.500 (3) | 5e-06 |" in printed
    assert "| sdpo | 0.550 (2), 1 failed | **0.600 (3)** | 1e-05 |" in printed
    assert "Chosen at the grid's edge (the grid is not extended): grpo (5e-06), sdpo (1e-05)" in printed
    chosen = json.loads((selection / "rates.json").read_text())
    assert {name: entry["chosen"] for name, entry in chosen["arms"].items()} == {"grpo": 5e-6, "sdpo": 1e-5}
    assert chosen["arms"]["sdpo"]["accuracy"]["5e-06"] == {"100": 0.55, "102": 0.55}
    assert (selection / "rates.png").stat().st_size > 10_000
    rebuilt = tmp_path / "rebuilt"
    assert report.main([str(selection / "rates.json"), "--rates", "--out", str(rebuilt)]) == 0
    for name in ("rates.md", "rates.json"):
        assert (rebuilt / name).read_bytes() == (selection / name).read_bytes()


def test_the_launches_of_each_seed_are_read_as_one_selection(selection, tmp_path, capsys):
    """One launch per selection seed: seed 100's folder and the other seeds' rates.json give the same choice, and
    the same rates.json, as the whole selection read at once."""
    assert report.main([str(selection), "--rates", "--out", str(tmp_path / "whole")]) == 0
    first, rest = tmp_path / "seed100", tmp_path / "rest"
    first.mkdir(), rest.mkdir()
    for job in sorted(selection.glob("*/summary.json")):
        seed = json.loads(job.read_text())["config"]["seed"]
        job.parent.rename((first if seed == 100 else rest) / job.parent.name)
    assert report.main([str(rest), "--rates"]) == 0
    assert report.main([str(first), str(rest / "rates.json"), "--rates", "--out", str(tmp_path / "merged")]) == 0
    assert (tmp_path / "merged" / "rates.json").read_bytes() == (tmp_path / "whole" / "rates.json").read_bytes()
    assert "5e-06" in capsys.readouterr().out


def test_a_damaged_rates_file_or_a_folder_without_selection_runs_is_one_line(tmp_path, capsys):
    damaged = tmp_path / "rates.json"
    damaged.write_text('{"format": 1, "seeds": [100], "arms": {"grpo": {"accuracy": 3}}}')
    assert report.main([str(damaged), "--rates"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {damaged}: not a readable rates file (") and error.count("\n") == 1
    empty = tmp_path / "empty"
    make_run(empty, 0, "grpo", 100, "5e-06", 0.5)
    (empty / "0" / "summary.json").write_text(json.dumps({"status": "completed", "overrides": ["seed=100"]}))
    assert report.main([str(empty), "--rates"]) == 2
    assert capsys.readouterr().err.startswith("error: no run names an evidence_arm and an algorithm.learning_rate")
