"""``python -m socratic_exp.report <run folder>``: one run's page, in its folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from socratic_exp.core.run_folder import read_summary
from socratic_exp.study.report import before_after_table, completion_samples, write_run_report
from socratic_exp.study.runs import Run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def telemetry(step: int) -> dict:
    """One logging step of every method's telemetry, by the metric names the methods log."""
    return {
        "reward": 0.1 * step,
        "socraticpo/unassisted_acc": 0.2,
        "socraticpo/guided_acc/step1": 0.2,
        "socraticpo/guided_acc/step2": 0.5,
        "socraticpo/correction_rate/step1": 0.2,
        "socraticpo/correction_rate/step2": 0.375,
        "entropy_mask/kept_fraction": 0.2,
        "entropy_mask/entropy_p50": 0.1,
        "entropy_mask/entropy_p80": 0.6,
        "entropy_mask/entropy_p90": 1.1,
        "entropy_mask/entropy_p99": 2.0,
        "entropy_mask/kept_entropy": 1.4,
        "entropy_mask/dropped_entropy": 0.2,
        "sampler/zero_variance_share": 0.5,
        "sampler/updates": float(step),
        "sampler/predicted_utility": 0.15,
        "sampler/realised_utility": 0.2,
        "vpd/beta": 0.1,
        "vpd/target_kl": 0.05,
        "self_distillation/reward_margin": 0.01,
        "socratic_rl/active": float(step),
        "socratic_rl/kb_size": float(step + 1),
        "socratic_rl/utility_mean": 0.02,
        "socratic_rl/utility_min": -0.1,
        "socratic_rl/utility_max": 0.2,
    }


@pytest.fixture
def run_dir(tmp_path) -> Path:
    folder = tmp_path / "outputs" / "2026-01-01" / "00-00-00-000000"
    folder.mkdir(parents=True)
    summary = {
        "status": "completed",
        "run_name": "socraticpo-arithmetic-tiny",
        "steps": 4,
        "wall_time_s": 90.0,
        "overrides": ["algorithm.max_steps=4"],
        "choices": {"algorithm": "socraticpo", "teacher": "rule"},
        "config": {"objective": "eval/greedy_acc", "algorithm": {"entropy_mask": {"rho": 0.2}}},
        "initial": {"eval/greedy_acc": 0.25, "eval/pass@2": 0.5, "eval/greedy_acc/d1": 0.9},
        "final": {"eval/greedy_acc": 0.375, "eval/pass@2": 0.5, "eval/greedy_acc/d1": 1.0},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    records = [{"step": 0, "eval/greedy_acc": 0.25}] + [{"step": s, **telemetry(s)} for s in range(1, 5)]
    records.append({"step": 4, "eval/greedy_acc": 0.375})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    guidance = [
        {"step": 2, "question": "2+3*4", "attempt": "20", "reason": "wrong: step 1", "guidance": "Hint | order"}
    ]
    guidance[0]["leaked"] = False
    (folder / "teacher_guidance.jsonl").write_text("".join(json.dumps(g) + "\n" for g in guidance))
    import pandas

    completions = folder / "checkpoints" / "completions"
    completions.mkdir(parents=True)
    for step in (2, 10):  # the latest table is the one shown (10, not 2: natural order)
        pandas.DataFrame(
            {"step": [step] * 2, "prompt": ["1+1", "2*3"], "completion": [f"2 at {step}", "5"], "correct": [1.0, 0.0]}
        ).to_parquet(completions / f"completions_{step:05d}.parquet")
    return folder


def test_before_after_table_has_top_level_metrics_and_the_change():
    summary = {"initial": {"eval/greedy_acc": 0.25, "eval/greedy_acc/d1": 0.5}, "final": {"eval/greedy_acc": 0.375}}
    assert before_after_table(summary).splitlines() == [
        "| metric | before | after | change |",
        "| --- | --- | --- | --- |",
        "| eval/greedy_acc | 0.2500 | 0.3750 | +0.1250 |",
    ]


def test_run_report_has_the_table_curves_each_methods_telemetry_and_samples(run_dir):
    files = write_run_report(Run(run_dir, read_summary(run_dir)))
    names = sorted(f.name for f in files)
    assert names == [
        "learning_curves.png",
        "report.md",
        "telemetry_entropy_mask.png",
        "telemetry_goldilocks.png",
        "telemetry_self_distillation.png",
        "telemetry_socraticpo.png",
        "telemetry_viewpoints.png",
        "telemetry_vpd.png",
    ]
    for png in (f for f in files if f.suffix == ".png"):
        assert png.parent == run_dir and png.read_bytes().startswith(PNG_SIGNATURE)
    page = (run_dir / "report.md").read_text()
    assert "| eval/greedy_acc | 0.2500 | 0.3750 | +0.1250 |" in page
    assert "| eval/pass@2 | 0.5000 | 0.5000 | +0.0000 |" in page
    assert "status **completed**, 4 steps, 1.5 min; algorithm=socraticpo teacher=rule" in page
    for png in names[:1] + names[2:]:
        assert f"({png})" in page
    assert "| 1+1 | 2 at 10 | 1.0000 |" in page  # the latest completions table, reward = verdict
    assert "| 2 | 2+3*4 | 20 | wrong: step 1 | Hint \\| order | False |" in page


def test_a_run_without_telemetry_or_samples_still_gets_its_page(run_dir):
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    (run_dir / "teacher_guidance.jsonl").unlink()
    files = write_run_report(Run(run_dir, read_summary(run_dir)), run_dir / "page")
    assert sorted(f.name for f in files) == ["learning_curves.png", "report.md"]
    assert completion_samples(run_dir / "nothing") == [
        "## Completions",
        "",
        "(none recorded: algorithm.log_completions=false and no teacher)",
        "",
    ]


def test_cli_on_one_run_folder_writes_its_page_there(run_dir, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "socratic_exp.report", str(run_dir)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| eval/greedy_acc | 0.2500 | 0.3750 | +0.1250 |" in proc.stdout
    assert (run_dir / "report.md").is_file() and not (tmp_path / "report").exists()
    assert f"written: {run_dir / 'report.md'}" in proc.stdout
