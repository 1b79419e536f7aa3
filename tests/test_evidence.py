"""The evidence sweep: every arm composes with the sweep's shared budget, the training clock behind
``eval/train_seconds``, and the scoreboard on fabricated run folders with hand-computed intervals and verdicts."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, compose, sweep_grid

from socratic_exp.runtime.assembly import build_components
from socratic_exp.runtime.callbacks import TRAIN_CLOCK, PeriodicEvalCallback, TrainClock
from socratic_exp.study import report
from socratic_exp.study.evidence import Interval, claims, paired_interval, t_quantile, verdict, write_scoreboard
from socratic_exp.study.runs import find_runs

ARMS = sorted(p.stem for p in (ROOT / "conf" / "evidence_arm").glob("*.yaml"))


# --- the arms and the sweeps -----------------------------------------------------------------------------------
def test_the_claims_name_the_arms_that_exist_and_every_arm_is_in_a_sweep():
    named = {arm for claim in claims() for arm in (claim.a, claim.b)}
    assert named == set(ARMS) and len(ARMS) == 18
    regime_1, headroom = sweep_grid("evidence")["+evidence_arm"], sweep_grid("evidence_headroom")["+evidence_arm"]
    assert sorted(set(ARMS) - set(regime_1)) == ["vpd_trust_region"] and set(headroom) < set(ARMS)


def test_the_headroom_sweep_is_its_pre_registration():
    """What the headroom regime's PREREGISTRATION.md fixes: 12 arms x seeds 0-9, the graded task at 5e-6, the
    shipped 1650-step students and three distillations in Socratic-RL's 60 steps."""
    params = sweep_grid("evidence_headroom")
    assert params["seed"] == [str(seed) for seed in range(10)]
    assert sorted(params["+evidence_arm"]) == sorted(
        ["grpo", "socraticpo", "socraticpo_without_tg", "socraticpo_without_rd", "reinforce_pp", "entropy_top",
         "entropy_bottom", "goldilocks", "sdpo", "vpd_dynamic", "vpd_trust_region", "socratic_rl_kl"]
    )  # fmt: skip
    measured = [c.id for c in claims() if {c.a, c.b} <= set(params["+evidence_arm"])]
    assert len(measured) == 13 and "composition>grpo" not in measured and "vpd_trust_region>sdpo" in measured
    for arm, steps in (("grpo", 240), ("socratic_rl_kl", 60)):
        cfg = compose("+sweep=evidence_headroom", f"+evidence_arm={arm}", "seed=7")
        components = build_components(cfg)
        assert (components.algorithm.max_steps, components.algorithm.learning_rate) == (steps, 5e-6)
        assert (components.task.rl_ops, cfg.model.warmstart_steps, cfg.model.warmstart_seed) == ([2, 3, 4], 1650, 7)
    assert components.algorithm.distill_every == 20  # three distillations in 60 steps


def test_the_regularised_vpd_arm_and_the_distillation_schedule_a_sweep_sets():
    vpd = build_components(compose("+sweep=evidence", "+evidence_arm=vpd_trust_region")).algorithm
    assert (vpd.teacher_regularization, vpd.reference_prior) == ("trust_region", "dynamic")
    default = build_components(compose("+sweep=evidence", "+evidence_arm=socratic_rl_dpo")).algorithm
    assert default.distill_every == 50  # the algorithm's default where a sweep sets no schedule


@pytest.mark.parametrize("arm", ARMS)
def test_every_arm_composes_with_the_sweeps_budget(arm):
    components = build_components(compose("+sweep=evidence", f"+evidence_arm={arm}", "seed=3"))
    algorithm = components.algorithm
    # the same rollouts per step for every arm; grpo alone trains 3x the steps (equal wall time)
    assert (algorithm.batch_size, algorithm.num_generations) == (64, 8)
    assert algorithm.max_steps == (240 if arm == "grpo" else 60)
    assert algorithm.lr_scheduler_type == "constant"
    assert (components.eval.every_steps, components.eval.pass_k, components.eval.assisted_attempts) == (20, 0, 1)


def test_the_arms_set_what_their_claim_is_about():
    def built(arm):
        return build_components(compose("+sweep=evidence", f"+evidence_arm={arm}"))

    assert (built("entropy_bottom").algorithm.rho, built("entropy_bottom").algorithm.mode) == (0.8, "bottom")
    assert (built("entropy_random").algorithm.rho, built("entropy_random").algorithm.mode) == (0.2, "random")
    assert built("socraticpo_without_tg").algorithm.guidance == "fixed_retry"
    assert built("socraticpo_without_rd").algorithm.reward_decay is False
    assert built("vpd_fixed").algorithm.reference_prior == "fixed"
    assert (built("vpd_without_e_step").algorithm.e_step, built("vpd_dynamic").algorithm.e_step) == ("off", "paper")
    assert built("reinforce_pp").algorithm.normalize_over == "responses"  # SocraticPO's backend: each rollout once
    assert type(built("socratic_rl_sft").distiller).__name__ == "SFTDistiller"
    composition = built("composition")
    assert (type(composition.algorithm).__name__, type(composition.sampler).__name__) == (
        "SocraticPO", "GoldilocksSampler")  # fmt: skip
    assert (composition.algorithm.guidance, composition.algorithm.reward_decay) == ("teacher", True)
    assert (composition.algorithm.entropy_mask.rho, composition.algorithm.entropy_mask.mode) == (0.2, "top")


# what any two arms differ in by design: the grpo arm's longer run (read at equal steps too) and the arm's name
BY_DESIGN = {"algorithm.max_steps", "evidence.arm_max_steps", "evidence.arm"}


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        out |= _flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


@pytest.fixture(scope="module")
def arm_settings():
    from omegaconf import OmegaConf

    def settings(arm):
        config = OmegaConf.to_container(compose("+sweep=evidence", f"+evidence_arm={arm}", "seed=0"), resolve=True)
        return _flat({k: v for k, v in config.items() if k != "hydra"})

    return {arm: settings(arm) for arm in ARMS}


@pytest.mark.parametrize("claim", claims(), ids=lambda c: c.id)
def test_every_claim_changes_what_it_is_about_and_lists_any_other_difference(claim, arm_settings):
    """A row is single-factor or says what else differs: every setting in which its arms differ is one the claim
    is about (``changes``) or is named in its ``differences``; and each setting it is about does differ."""
    a, b = arm_settings[claim.a], arm_settings[claim.b]
    differing = {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)} - BY_DESIGN

    def about(key):
        return any(key == c or (c.endswith(".") and key.startswith(c)) for c in claim.changes)

    assert claim.changes, "name the settings the claim is about"
    assert all(any(about(key) and key.startswith(c) for key in differing) for c in claim.changes)
    unlisted = sorted(k for k in differing if not about(k) and k.rsplit(".", 1)[-1] not in claim.differences)
    assert unlisted == []


def test_the_vpd_sdpo_row_lists_the_teacher_regularisation_and_a_single_factor_row_lists_nothing():
    by_id = {c.id: c for c in claims()}
    assert "teacher_regularization" in by_id["vpd>sdpo"].differences
    assert "feedback_on_success" in by_id["vpd>sdpo"].differences
    assert by_id["vpd_dynamic>without_e_step"].changes == ("algorithm.e_step",)
    assert by_id["socraticpo>without_tg"].differences == "" and by_id["entropy_top>random"].differences == ""


# --- the training clock ----------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_train_seconds_exclude_evaluations_and_survive_a_resume(tmp_path):
    clock = FakeClock(100.0)
    train_clock = TrainClock(clock)

    class Evaluator:  # an evaluation takes 5 s
        def evaluate(self, student, stage=""):
            clock.now += 5.0
            return {"eval/greedy_acc": 0.5}

    logged = []
    sink = SimpleNamespace(log_evaluation=lambda metrics, step, guidance: logged.append((step, dict(metrics))))
    teacher = SimpleNamespace(samples=list)
    callback = PeriodicEvalCallback(Evaluator(), SimpleNamespace(model=None), 2, sink, teacher, None, train_clock)
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=0, max_steps=4, is_world_process_zero=True)
    control = SimpleNamespace(should_training_stop=False, should_log=False)

    clock.now = 100.0  # models loaded, first evaluation done: training starts
    train_clock.on_train_begin(args, state, control)
    clock.now, state.global_step = 103.0, 1
    callback.on_step_end(args, state, control)  # no evaluation at step 1
    callback.on_log(args, state, control)
    assert not control.should_log and logged == []
    clock.now, state.global_step = 107.0, 2
    callback.on_step_end(args, state, control)  # the step is made to log; the evaluation waits for its logs
    assert control.should_log and logged == []
    callback.on_log(args, state, control)  # evaluation: 107 -> 112, not training time
    assert logged == [(2, {"eval/greedy_acc": 0.5, "eval/train_seconds": 7.0})]
    callback.on_log(args, state, control)  # a second log of the step (TRL's summary) evaluates nothing more
    assert len(logged) == 1
    clock.now = 115.0  # 3 s more training after the evaluation
    (tmp_path / "checkpoint-2").mkdir()
    train_clock.on_save(args, state, control)
    assert json.loads((tmp_path / "checkpoint-2" / TRAIN_CLOCK).read_text()) == {"seconds": 10.0}
    clock.now, state.global_step = 121.0, 4
    callback.on_step_end(args, state, control)  # the last step: the final evaluation is the run's, not this one
    callback.on_log(args, state, control)
    train_clock.on_train_end(args, state, control)
    clock.now = 500.0  # the final evaluation and saving do not count
    assert train_clock.seconds == 16.0 and len(logged) == 1

    # a run resumed from checkpoint-2 goes on from the 10 s it had trained up to there
    resumed = TrainClock(clock)
    state.global_step = 2
    resumed.on_train_begin(args, state, control)
    clock.now = 504.0
    assert resumed.seconds == 14.0


# --- the scoreboard --------------------------------------------------------------------------------------------
def test_paired_interval_and_t_quantiles():
    assert (t_quantile(1), t_quantile(2), t_quantile(4), t_quantile(30), t_quantile(60)) == (
        12.706, 4.303, 2.776, 2.042, 2.042)  # fmt: skip
    interval = paired_interval([0.01, 0.02, 0.03, 0.04, 0.05])
    # mean 0.03, sd 0.0158114, half-width 2.776 * 0.0158114 / sqrt(5) = 0.019630
    assert interval.n == 5 and interval.mean == pytest.approx(0.03)
    assert (interval.low, interval.high) == (pytest.approx(0.010370, abs=1e-6), pytest.approx(0.049630, abs=1e-6))
    one = paired_interval([0.2])
    assert one.n == 1 and one.mean == 0.2 and verdict(one, "better") == "inconclusive"
    assert paired_interval([]).n == 0


@pytest.mark.parametrize(
    ("low", "high", "kind", "expected"),
    [
        (0.001, 0.03, "better", "reproduced"),
        (0.001, 0.019, "better", "reproduced, smaller than 2 points"),  # real, and below the margin
        (0.021, 0.05, "better", "reproduced, larger than 2 points"),  # above the margin
        (-0.01, 0.019, "better", "not reproduced"),  # excludes 2 points
        (-0.01, 0.03, "better", "inconclusive"),
        (-0.019, 0.01, "not_worse", "reproduced"),
        (-0.019, -0.001, "not_worse", "reproduced, though behind"),  # within the margin, yet below B
        (-0.05, -0.001, "not_worse", "not reproduced"),
        (-0.03, 0.01, "not_worse", "inconclusive"),
        (-0.019, -0.001, "worse", "reproduced, smaller than 2 points"),  # A behind B by less than the margin
    ],
)
def test_verdict_rule(low, high, kind, expected):
    assert verdict(Interval(5, (low + high) / 2, low, high), kind) == expected


def test_a_verdict_names_the_papers_effect_where_the_margin_is_it():
    """SocraticPO's reward decay: +1.0 points [0.5, 1.5] against the paper's 5.67 is real and smaller."""
    interval = Interval(10, 0.010, 0.005, 0.015)
    assert verdict(interval, "better", 0.0567, "the paper's") == "reproduced, smaller than the paper's"
    assert verdict(Interval(10, 0.08, 0.06, 0.10), "better", 0.0567, "the paper's") == (
        "reproduced, larger than the paper's"
    )
    (decay,) = [claim for claim in claims() if claim.id == "socraticpo>without_rd"]
    assert decay.margin_name == "the paper's"
    from socratic_exp.study.evidence import OneSidedTest, Row

    both = [OneSidedTest("reproduced", ">", 0.0, 1e-9, rejected=True),
            OneSidedTest("not reproduced", "<", 0.0567, 4e-9, rejected=True)]  # fmt: skip
    assert Row(decay, "run", rollouts=interval, tests=both).holm_verdict == "reproduced, smaller than the paper's"
    assert [claim.margin_name for claim in claims() if claim.id == "socraticpo>grpo"] == ["2 points"]


def grpo_curve(step: int) -> float:
    return 0.30 + step / 1000  # 0.40 at step 100, 0.44 at 140, 0.60 at 300


def make_run(root: Path, job: int, arm: str, seed: int, evals: list[tuple[int, float, float]], status="completed",
             tokens_per_step: int | None = None):  # fmt: skip
    """A run folder as a sweep job writes it: evaluations (step, accuracy, training seconds, and the training tokens
    where ``tokens_per_step`` is given) in ``metrics.jsonl`` between training logs, the last one as the summary's
    final."""
    spent = (lambda step: {"eval/train_tokens": step * tokens_per_step}) if tokens_per_step else (lambda step: {})
    folder = root / str(job)
    folder.mkdir(parents=True)
    lines = []
    for step, accuracy, seconds in evals:
        if step:
            lines.append({"step": step, "time": 1.0, "reward": 0.5, "loss": 0.1})
        lines.append({"step": step, "time": 1.0, "eval/greedy_acc": accuracy, "eval/greedy_acc/d1": 0.9,
                      "eval/no_answer": 0.0, "eval/train_seconds": seconds} | spent(step))  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    step, accuracy, seconds = evals[-1]
    summary = {
        "status": status,
        "overrides": [f"+evidence_arm={arm}", f"seed={seed}", "+sweep=evidence"],
        "config": {"objective": "eval/greedy_acc", "seed": seed},
        "initial": {"eval/greedy_acc": evals[0][1], "eval/train_seconds": 0.0},
        "final": {"eval/greedy_acc": accuracy, "eval/no_answer": 0.0, "eval/train_seconds": seconds} | spent(step),
        "steps": step,
        "wall_time_s": seconds + 50.0,
        "student": {"name": f"tiny/evidence-seed{seed}", "shipped": f"evidence-seed{seed}"},
    }
    if status != "completed":
        summary = {k: summary[k] for k in ("status", "overrides", "config")} | {"error": {"message": "boom"}}
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def sweep(tmp_path):
    """GRPO for 300 steps at 1 s a step; arms of 100 steps whose final accuracy is GRPO's at step 100 (0.40) plus
    the per-seed differences below."""
    root = tmp_path / "sweep"
    jobs = iter(range(100))

    def arm(name: str, diffs: dict[int, float], seconds_per_step: float) -> None:
        for seed, diff in diffs.items():
            evals = [(0, 0.30, 0.0), (100, round(0.40 + diff, 6), 100 * seconds_per_step)]
            make_run(root, next(jobs), name, seed, evals)

    for seed in range(5):
        make_run(root, next(jobs), "grpo", seed, [(s, grpo_curve(s), float(s)) for s in range(0, 301, 20)])
    arm("socraticpo", {0: 0.01, 1: 0.02, 2: 0.03, 3: 0.04, 4: 0.05}, 1.5)  # trains 150 s: GRPO's step 140
    arm("entropy_top", {0: -0.01, 1: -0.005, 2: 0.0, 3: 0.005, 4: 0.01}, 1.0)
    arm("entropy_bottom", {0: -0.01, 1: -0.025, 2: -0.04}, 1.0)  # top - bottom by seed: 0.00, 0.02, 0.04
    arm("sdpo", {0: 0.0, 1: 0.005, 2: 0.01, 3: -0.005, 4: 0.0}, 1.0)
    arm("vpd_dynamic", {0: 0.1}, 1.0)  # one seed
    arm("socratic_rl_kl", {0: 0.05, 1: 0.07}, 10.0)  # 1000 s: more than GRPO's whole run
    make_run(root, next(jobs), "goldilocks", 0, [(0, 0.3, 0.0)], status="failed")
    make_run(root, next(jobs), "goldilocks", 1, [(0, 0.3, 0.0)], status="running")  # still under way: not failed
    return root


def test_against_grpo_a_claim_is_also_read_at_equal_training_tokens(tmp_path):
    """GRPO at 1,000 tokens a step, SocraticPO at 2,500 (its attempts) for 100 steps: 250,000 tokens, GRPO's
    evaluation at step 240 (0.54). A - B there: -0.13, -0.12, -0.11, -0.10, -0.09; mean -0.11, sd 0.015811, t(4)
    2.776: [-0.12963, -0.09037], below the margin. The evaluations file keeps the tokens, and the scoreboard rebuilt
    from it reads the same."""
    import gzip

    root = tmp_path / "sweep"
    for seed in range(5):
        make_run(root, seed, "grpo", seed, [(s, grpo_curve(s), float(s)) for s in range(0, 301, 20)],
                 tokens_per_step=1000)  # fmt: skip
        evals = [(0, 0.30, 0.0), (100, round(0.41 + seed / 100, 6), 150.0)]
        make_run(root, 10 + seed, "socraticpo", seed, evals, tokens_per_step=2500)
    board = write_scoreboard(find_runs([root]), tmp_path / "out")
    (row,) = [row for row in board.rows if row.claim.id == "socraticpo>grpo"]
    assert row.tokens.n == 5 and row.tokens.mean == pytest.approx(-0.11)
    assert (row.tokens.low, row.tokens.high) == (pytest.approx(-0.12963, abs=1e-5), pytest.approx(-0.09037, abs=1e-5))
    assert row.tokens_verdict == "not reproduced"
    assert "| -0.110 [-0.130, -0.090] | not reproduced |" in board.markdown
    with gzip.open(tmp_path / "out" / "evaluations.jsonl.gz", "rt") as handle:
        lines = [json.loads(text) for text in handle]
    socraticpo = next(line for line in lines if line["arm"] == "socraticpo" and line["seed"] == 0)
    assert socraticpo["evaluations"] == [[0, 0.30, 0.0, 0], [100, 0.41, 150.0, 250000]]
    assert socraticpo["final"]["eval/train_tokens"] == 250000
    assert report.main([str(tmp_path / "out" / "evaluations.jsonl.gz"), "--scoreboard", "--out",
                        str(tmp_path / "again")]) == 0  # fmt: skip
    assert (tmp_path / "again" / "scoreboard.md").read_text() == (tmp_path / "out" / "scoreboard.md").read_text()


def test_scoreboard_intervals_verdicts_and_files(sweep, tmp_path):
    out = tmp_path / "out"
    board = write_scoreboard(find_runs([sweep]), out)
    rows = {row.claim.id: row for row in board.rows}

    socraticpo = rows["socraticpo>grpo"]  # diffs 0.01..0.05 against GRPO's step 100
    assert socraticpo.rollouts.n == 5 and socraticpo.verdict == "reproduced"
    assert (socraticpo.a_mean, socraticpo.b_mean) == (pytest.approx(0.43), pytest.approx(0.40))
    assert socraticpo.rollouts.low == pytest.approx(0.010370, abs=1e-6)
    assert socraticpo.rollouts.high == pytest.approx(0.049630, abs=1e-6)
    # equal time: 150 s of training -> GRPO's step 140 (0.44): diffs -0.03..0.01, mean -0.01, same half-width
    assert socraticpo.time.mean == pytest.approx(-0.01)
    assert (socraticpo.time.low, socraticpo.time.high) == (
        pytest.approx(-0.029630, abs=1e-6), pytest.approx(0.009630, abs=1e-6))  # fmt: skip
    assert socraticpo.time_verdict == "not reproduced" and socraticpo.capped == 0

    top = rows["entropy_top>=grpo"]  # diffs -0.01..0.01: sd 0.0079057, half-width 0.0098145; not worse
    assert top.rollouts.mean == pytest.approx(0.0, abs=1e-12)
    assert top.rollouts.high == pytest.approx(0.0098145, abs=1e-6) and top.verdict == "reproduced"
    bottom = rows["entropy_top>bottom"]  # seeds 0-2 paired: 0.00, 0.02, 0.04: mean 0.02, half 4.303*0.02/sqrt(3)
    assert bottom.rollouts.n == 3 and bottom.rollouts.low == pytest.approx(-0.029687, abs=1e-6)
    assert bottom.verdict == "inconclusive" and bottom.time is None  # B is not GRPO: no equal-time row
    sdpo = rows["sdpo>grpo"]  # diffs 0, .005, .01, -.005, 0: mean 0.002, sd 0.0057009, half-width 0.0070775
    assert sdpo.rollouts.high == pytest.approx(0.0090775, abs=1e-6) and sdpo.verdict == "not reproduced"
    assert rows["vpd<grpo"].rollouts.n == 1 and rows["vpd<grpo"].verdict == "inconclusive"
    capped = rows["socratic_rl_kl>grpo"]  # 1000 s each: GRPO's whole run (300 s, 0.60) is what it is compared to
    assert capped.capped == 2 and capped.time.mean == pytest.approx(-0.14) and "GRPO trained less" in capped.notes
    assert capped.rollouts.low == pytest.approx(0.06 - 0.12706, abs=1e-6)
    assert rows["goldilocks>grpo"].verdict == "not run (goldilocks missing)"  # its only run failed: a row
    # arms with no run at all are another sweep's: their claims are listed, not scored
    assert "entropy_top>random" not in rows and "vpd_dynamic>fixed" not in rows
    assert "Not in this sweep (an arm of theirs has no run here): " in board.markdown
    assert "`entropy_top>random`" in board.markdown.split("Not in this sweep")[1].split("## Arms")[0]

    assert [f.name for f in board.files] == [
        "scoreboard.md", "scoreboard.csv", "evaluations.jsonl.gz", "scoreboard_arms.csv", "scoreboard.png",
        "evidence_curves.png"]  # fmt: skip
    assert all(f.is_file() and f.stat().st_size > 0 for f in board.files)
    table = {r["claim"]: r for r in csv.DictReader((out / "scoreboard.csv").open())}
    assert set(table) == set(rows) and table["socraticpo>grpo"]["verdict"] == "reproduced"
    assert float(table["socraticpo>grpo"]["diff_low"]) == pytest.approx(0.010370, abs=1e-6)
    assert float(table["socraticpo>grpo"]["diff_equal_time"]) == pytest.approx(-0.01)
    measured = [r for r in table.values() if r["p_reproduced"] not in ("", "nan")]
    assert measured and all(float(r["p_holm_reproduced"]) >= float(r["p_reproduced"]) for r in measured)
    assert {r["holm_family"] for r in measured} == {str(2 * len(measured))}  # two hypotheses per measured claim
    assert "Code: " in board.markdown and "verdict (Holm)" in board.markdown
    arms = {r["arm"]: r for r in csv.DictReader((out / "scoreboard_arms.csv").open())}
    assert arms["grpo"]["n"] == "5" and float(arms["grpo"]["train_seconds mean"]) == 300.0
    assert float(arms["grpo"]["job_seconds mean"]) == 350.0 and float(arms["socraticpo"]["steps"]) == 100
    assert (arms["goldilocks"]["n"], arms["goldilocks"]["failed"]) == ("0", "1")
    markdown = (out / "scoreboard.md").read_text()
    assert "+0.030 [+0.010, +0.050]" in markdown and "**not run (goldilocks missing)**" in markdown


def test_the_entropy_row_says_on_how_many_students_it_holds_by_construction(sweep, tmp_path, capsys):
    """The 80/20 claim holds before any run on a student whose bottom 80% of tokens carry under 2% of GRPO's
    gradient norm: the row counts those students among its paired seeds (0-4), from their premise figures."""
    premises = {
        "overrides": [],
        "figures": {
            "0": {"entropy/bottom80_gradient_share": 0.011},
            "1": {"entropy/bottom80_gradient_share": 0.035},
            "2": {"entropy/bottom80_gradient_share": 0.004},
            "3": {"entropy/other": 1.0},
            "9": {"entropy/bottom80_gradient_share": 0.5},
        },
    }  # fmt: skip  (seed 3: no figure; seed 9: not in the sweep)
    path = tmp_path / "premises.json"
    path.write_text(json.dumps(premises))
    assert report.main([str(sweep), "--scoreboard", "--premises", str(path), "--out", str(tmp_path / "b")]) == 0
    table = {r["claim"]: r for r in csv.DictReader((tmp_path / "b" / "scoreboard.csv").open())}
    assert table["entropy_top>=grpo"]["by_construction"] == (
        "2 of 3 students: entropy/bottom80_gradient_share 0.004-0.035 (below 0.02: the bottom 80% carry almost none "
        "of GRPO's gradient: the top 20% alone are GRPO's update)"
    )
    assert table["socraticpo>grpo"]["by_construction"] == "-"  # no such check
    board = write_scoreboard(find_runs([sweep]), tmp_path / "c")  # without the figures
    assert {r.claim.id: r.construction for r in board.rows}["entropy_top>=grpo"] == "not measured"
    capsys.readouterr()
    path.write_text('{"figures": [1, 2]}')
    assert report.main([str(sweep), "--scoreboard", "--premises", str(path), "--out", str(tmp_path / "d")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {path}: not a readable premises file (") and error.count("\n") == 1


def test_the_arms_table_gives_accuracy_by_step_and_when_each_run_collapsed(tmp_path):
    """VPD's "delays SDPO's collapse": a run collapses at its first evaluation 10 points or more below step 0."""
    from socratic_exp.study.evidence import Arms, arm_rows, collapse_step

    root = tmp_path / "sweep"
    make_run(root, 0, "sdpo", 0, [(0, 0.70, 0.0), (20, 0.62, 10.0), (40, 0.59, 20.0), (60, 0.30, 30.0)])
    make_run(root, 1, "sdpo", 1, [(0, 0.60, 0.0), (20, 0.50, 10.0), (40, 0.40, 20.0), (60, 0.20, 30.0)])
    make_run(root, 2, "vpd_dynamic", 0, [(0, 0.70, 0.0), (20, 0.75, 10.0), (40, 0.61, 20.0), (60, 0.60, 30.0)])
    make_run(root, 3, "vpd_dynamic", 1, [(0, 0.60, 0.0), (20, 0.55, 10.0), (40, 0.58, 20.0), (60, 0.52, 30.0)])
    (root / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - +sweep=evidence\n    - model.warmstart_seed=${seed}\n"
    )
    runs = find_runs([root])
    # sdpo: seed 0 is 0.08 below at step 20, 0.11 at 40; seed 1 exactly 0.10 at 20. vpd: seed 0 0.10 below at 60
    assert sorted(collapse_step(run) for run in runs if run.overrides["evidence_arm"] == "sdpo") == [20, 40]
    rows = {row["arm"]: row for row in arm_rows(Arms.of(runs))}
    assert (rows["sdpo"]["collapsed"], rows["sdpo"]["collapse_step mean"]) == (2, 30.0)
    assert (rows["vpd_dynamic"]["collapsed"], rows["vpd_dynamic"]["collapse_step mean"]) == (1, 60.0)
    assert rows["vpd_dynamic"]["accuracy by step"] == "0: 0.650, 20: 0.650, 40: 0.595, 60: 0.560"
    board = write_scoreboard(runs, tmp_path / "out")
    assert "Sweep: `python -m socratic_exp +sweep=evidence 'model.warmstart_seed=${seed}'`" in board.markdown


def long_runs(root: Path, arm: str, seeds_drops: dict[int, tuple[float, ...]], start: float = 0.70):
    """Runs evaluated every 20 steps to step 100: accuracy at step 0 ``start``, then ``start`` minus each drop."""
    for seed, drops in seeds_drops.items():
        evals = [(0, start, 0.0)] + [(20 * (i + 1), round(start - d, 6), 10.0 * (i + 1)) for i, d in enumerate(drops)]
        make_run(root, f"{arm}-{seed}", arm, seed, evals)


def test_a_collapse_claim_counts_the_seeds_where_a_collapses_later_by_a_sign_test(tmp_path, capsys):
    """SDPO collapses (10 points below step 0) at steps 40, 60, 20, never, 100 on seeds 0-4; VPD at 80, never, 20,
    never, never: later on seeds 0, 1, 4 (never counts as 120), tied on 2 and 3. Sign test: 3 of 3, p = 1/8."""
    from socratic_exp.core.methods import CollapseClaim
    from socratic_exp.study.collapse import censored_step, score_all, sign_test

    root = tmp_path / "long"
    never = (0.02, 0.03, 0.05, 0.04, 0.06)
    long_runs(root, "sdpo", {0: (0.05, 0.10, 0.2, 0.3, 0.3), 1: (0.0, 0.05, 0.12, 0.2, 0.3),
                             2: (0.15, 0.2, 0.3, 0.3, 0.3), 3: never, 4: (0.0, 0.0, 0.0, 0.0, 0.10)})  # fmt: skip
    long_runs(root, "vpd_dynamic", {0: (0.0, 0.0, 0.05, 0.10, 0.2), 1: never, 2: (0.11, 0.2, 0.2, 0.2, 0.2),
                                    3: never, 4: (-0.05, -0.05, 0.0, 0.0, 0.0)})  # fmt: skip
    runs = find_runs([root])
    assert sorted(censored_step(r) for r in runs if r.overrides["evidence_arm"] == "sdpo") == [20, 40, 60, 100, 120]
    assert (sign_test(3, 0), sign_test(5, 1), sign_test(0, 0)) == (0.125, 7 / 64, 1.0)
    claim = CollapseClaim("vpd_dynamic>sdpo (collapse)", "VPD", "delays", "vpd_dynamic", "sdpo")
    (row,) = score_all(runs, [claim])
    assert (row.later, row.earlier, row.b_collapsed, len(row.seeds)) == (3, 0, 4, 5)
    assert row.test.p == 0.125 and row.verdict == "inconclusive"  # one claim: Holm leaves p as it is
    # drop from the best evaluation to the last: sdpo 0.30, 0.30, 0.30, 0.06, 0.10; vpd 0.20, 0.06, 0.20, 0.06 and
    # 0.05 (best 0.75 at step 20, last 0.70)
    assert row.drop_b == pytest.approx(1.06 / 5) and row.drop_a == pytest.approx(0.57 / 5)
    rare = CollapseClaim("vpd_dynamic>sdpo (collapse)", "VPD", "delays", "sdpo", "vpd_dynamic")  # B collapses twice
    assert score_all(runs, [rare])[0].verdict == "untestable here (no collapse to delay: 2 of 5 runs collapse)"
    assert report.main([str(root), "--collapse"]) == 0
    assert (root / "collapse.md").is_file() and (root / "collapse.png").stat().st_size > 10_000
    assert "| `vpd_trust_region>sdpo (collapse)` |" not in capsys.readouterr().out  # its arm has no run here
    # the same table from the launch's evaluations file
    assert report.main([str(root), "--evaluations", "--out", str(tmp_path / "record")]) == 0
    assert report.main([str(tmp_path / "record" / "evaluations.jsonl.gz"), "--collapse"]) == 0
    assert (tmp_path / "record" / "collapse.md").read_text() == (root / "collapse.md").read_text()


def test_b_is_read_at_as_final_step_and_says_so_when_it_has_no_evaluation_there(tmp_path):
    root = tmp_path / "sweep"
    for seed in range(2):
        make_run(root, 2 * seed, "grpo", seed, [(s, grpo_curve(s), float(s)) for s in range(0, 301, 20)])
        make_run(root, 2 * seed + 1, "goldilocks", seed, [(0, 0.3, 0.0), (90, 0.45 + seed / 100, 90.0)])
    row = {r.claim.id: r for r in write_scoreboard(find_runs([root]), tmp_path / "out").rows}
    goldilocks = row["goldilocks>grpo"]  # GRPO at step 80 (0.38): diffs 0.07, 0.08
    assert goldilocks.b_mean == pytest.approx(0.38) and goldilocks.rollouts.mean == pytest.approx(0.075)
    assert "no evaluation at step 90 (step 80 used)" in goldilocks.notes


def test_report_cli_scoreboard(sweep, capsys):
    assert report.main([str(sweep), "--scoreboard"]) == 0
    printed = capsys.readouterr().out
    assert "# Evidence scoreboard" in printed and "`socraticpo>grpo`" in printed
    assert (sweep / "scoreboard.md").is_file() and (sweep / "evidence_curves.png").is_file()


def test_a_scoreboard_with_no_claim_measured_writes_nothing_and_exits_2(tmp_path, capsys):
    root = tmp_path / "sweep"
    for seed in range(2):  # one arm alone: no claim has both its arms
        make_run(root, seed, "grpo", seed, [(0, 0.30, 0.0), (100, 0.40, 100.0)])
    assert report.main([str(root), "--scoreboard"]) == 2
    assert capsys.readouterr().err == (
        "error: no claim of the scoreboard has both its arms among these 2 runs (arms found: grpo) (fix: point it "
        "at the folder of a +sweep=evidence or +sweep=evidence_sparse launch)\n"
    )
    assert sorted(p.name for p in root.iterdir()) == ["0", "1"]  # no scoreboard files


def test_each_verdict_is_a_one_sided_test_of_its_own_hypothesis_and_holm_runs_over_them():
    """Three "better" claims (margin 0.02), 5 seeds each (t, 4 degrees of freedom). Mean 0.05 (se 0.0031623), 0.03
    (se 0.0089443), 0 (se 0.0054772). One-sided p of "effect > 0": 4.67464e-05, 0.0142301, 0.5; of "effect < 0.02":
    0.999656, 0.836918, 0.0108715. Holm over the 6: 4.67464e-05 <= 0.05/6 is rejected, 0.0108715 > 0.05/5 stops it.
    So only the first claim has a Holm verdict. The third is where the earlier construction (claims ranked by the
    two-sided p of no difference, read on an interval at their Holm level) said "not reproduced": ranked last, it got
    the raw 95% interval, whose upper bound 0.0152 is below the margin. Tested on its own hypothesis it is
    inconclusive."""
    from socratic_exp.study.evidence import Claim, Row, judge, one_sided_tests

    diffs = ([0.05, 0.06, 0.04, 0.05, 0.05], [0.05, 0.01, 0.05, 0.01, 0.03], [0.01, -0.02, 0.0, 0.01, 0.0])
    rows = []
    for name, values in zip("abc", diffs, strict=True):
        interval = paired_interval(values)
        rows.append(Row(Claim(name, "", "", "x", "y"), "run", rollouts=interval,
                        tests=one_sided_tests(interval, "better", 0.02)))  # fmt: skip
    judge(rows)
    p_above = [row.tests[0].p for row in rows]
    p_below = [row.tests[1].p for row in rows]
    assert p_above == [pytest.approx(4.67464e-05, rel=1e-5), pytest.approx(0.0142301, rel=1e-5), 0.5]
    assert p_below == [pytest.approx(0.999656, abs=1e-6), pytest.approx(0.836918, abs=1e-6),
                       pytest.approx(0.0108715, rel=1e-5)]  # fmt: skip
    assert [test.p_holm for row in rows for test in row.tests] == [
        pytest.approx(2.80478e-04, rel=1e-5), 1.0, pytest.approx(0.0569204, rel=1e-5), 1.0, 1.0,
        pytest.approx(0.0543575, rel=1e-5)]  # fmt: skip
    assert [test.rejected for row in rows for test in row.tests] == [True, False, False, False, False, False]
    # the first's interval [0.041, 0.059] lies above the margin; the second's [0.005, 0.055] straddles it
    assert [row.verdict for row in rows] == ["reproduced, larger than 2 points", "reproduced", "not reproduced"]
    assert [row.holm_verdict for row in rows] == ["reproduced", "inconclusive", "inconclusive"]
    assert [row.family for row in rows] == [6, 6, 6]
    detectable = [row.detectable() for row in rows]  # (t(0.975) + t(0.8)) se; Holm-strictest: t(1 - 0.05/6)
    assert detectable == [(pytest.approx(0.011755, abs=1e-6), pytest.approx(0.015501, abs=1e-6)),
                          (pytest.approx(0.033250, abs=1e-6), pytest.approx(0.043843, abs=1e-6)),
                          (pytest.approx(0.020361, abs=1e-6), pytest.approx(0.026848, abs=1e-6))]  # fmt: skip


def test_holm_rejects_in_order_until_the_first_test_it_cannot():
    from socratic_exp.study.evidence import OneSidedTest, holm

    tests = [OneSidedTest("reproduced", ">", 0.0, p) for p in (0.01, 0.04, 0.03, 0.005)]
    holm(tests)  # ranked 0.005 (<= 0.0125), 0.01 (<= 0.01667), 0.03 (> 0.025: stop), 0.04
    assert [test.rejected for test in tests] == [True, False, False, True]
    assert [test.p_holm for test in tests] == [pytest.approx(0.03), pytest.approx(0.06), pytest.approx(0.06),
                                               pytest.approx(0.02)]  # fmt: skip


def test_a_claim_of_being_behind_and_one_of_no_worse_test_their_own_thresholds():
    from socratic_exp.study.evidence import one_sided_tests

    behind = one_sided_tests(paired_interval([-0.05, -0.01, -0.05, -0.01, -0.03]), "worse", 0.02)
    assert [test.p for test in behind] == [pytest.approx(0.0142301, rel=1e-5), pytest.approx(0.836918, abs=1e-6)]
    no_worse = one_sided_tests(paired_interval([0.05, 0.01, 0.05, 0.01, 0.03]), "not_worse", 0.02)
    # effect > -0.02: t = 0.05 / 0.0089443 = 5.5902; effect < 0: t = 3.3541
    assert [(test.direction, test.threshold) for test in no_worse] == [(">", -0.02), ("<", 0.0)]
    assert [test.p for test in no_worse] == [pytest.approx(0.00251200, rel=1e-5), pytest.approx(0.985770, abs=1e-6)]
    assert one_sided_tests(paired_interval([0.01]), "better", 0.02) == []


def test_a_bound_within_a_tenth_of_a_point_of_its_threshold_is_a_knife_edge():
    from socratic_exp.study.evidence import Claim, Interval, Row

    def row(interval: Interval, kind: str = "better") -> Row:
        return Row(Claim("c", "", "", "x", "y", kind=kind, margin=0.02), "run", rollouts=interval)

    assert row(Interval(5, 0.02, 0.0005, 0.0395)).knife_edge  # lower bound 0.05 points above 0
    assert not row(Interval(5, 0.02, 0.0015, 0.0385)).knife_edge
    assert row(Interval(5, 0.0, -0.0195, 0.0195)).knife_edge  # upper bound 0.05 points below the margin
    assert row(Interval(5, -0.02, -0.0395, -0.0005), kind="worse").knife_edge  # mirrored
    assert not row(Interval(1, 0.02, math.nan, math.nan)).knife_edge


def test_a_proposals_hypothesis_is_supported_or_not_and_a_papers_result_reproduced_or_not():
    from socratic_exp.study.evidence import Claim, Row

    interval = paired_interval([0.05, 0.06, 0.04, 0.05, 0.05])  # lower bound 0.041 > 0
    hypothesis = Row(Claim("h", "", "", "x", "y", hypothesis=True), "run", rollouts=interval, time=interval)
    result = Row(Claim("r", "", "", "x", "y"), "run", rollouts=interval)
    assert (hypothesis.verdict, hypothesis.time_verdict, result.verdict) == (
        "supported, larger than 2 points",  # lower bound 0.041 above the margin too
        "supported, larger than 2 points",
        "reproduced, larger than 2 points",
    )
    null_interval = paired_interval([0.0, 0.002, -0.002, 0.001, -0.001])  # [-0.002, +0.002]: below the margin
    null = Row(Claim("h", "", "", "x", "y", hypothesis=True), "run", rollouts=null_interval)
    assert null.verdict == "not supported"
    sources = {claim.id: claim for claim in claims()}
    assert all(sources[f"socratic_rl_{d}>grpo"].hypothesis for d in ("kl", "dpo", "sft"))
    assert sources["entropy_top>random"].source.startswith("ours")


def test_a_worse_claim_is_the_mirror_of_better():
    behind = Interval(5, -0.04, -0.06, -0.02)  # A 4 points behind B, the interval below 0
    assert verdict(behind, "worse") == "reproduced" and verdict(behind, "better") == "not reproduced"
    assert verdict(Interval(5, 0.0, -0.01, 0.01), "worse") == "not reproduced"  # excludes 2 points behind
    assert verdict(Interval(5, -0.01, -0.03, 0.01), "worse") == "inconclusive"


def test_a_claims_margin_is_the_effect_its_not_reproduced_excludes():
    """[-0.010, +0.040]: it excludes the paper's 5.67 points (SocraticPO's reward decay, Table 2), not 2 points."""
    from socratic_exp.study.evidence import Claim, Row

    interval = Interval(5, 0.015, -0.010, 0.040)
    paper = Row(Claim("p", "", "", "x", "y", margin=0.0567), "run", rollouts=interval)
    default = Row(Claim("d", "", "", "x", "y"), "run", rollouts=interval)
    assert (paper.verdict, default.verdict) == ("not reproduced", "inconclusive")
    sources = {claim.id: claim for claim in claims()}
    assert sources["socraticpo>without_rd"].margin == 0.0567 and sources["socraticpo>reinforce_pp"].margin == 0.0236
    assert all(claim.margin_source for claim in claims())


def test_the_scoreboard_rebuilds_from_its_evaluations_file_to_the_digit(sweep, tmp_path, capsys):
    import gzip

    first = tmp_path / "first"
    board = write_scoreboard(find_runs([sweep]), first)
    packed = first / "evaluations.jsonl.gz"
    assert packed in board.files
    with gzip.open(packed, "rt") as handle:
        lines = [json.loads(text) for text in handle]
    assert len(lines) == 28  # every job with an arm and a seed, the failed and the running ones too
    grpo = next(line for line in lines if line["arm"] == "grpo" and line["seed"] == 0)
    assert grpo["evaluations"][:2] == [[0, 0.30, 0.0], [20, 0.32, 20.0]] and len(grpo["evaluations"]) == 16
    assert grpo["final"] == {"eval/greedy_acc": 0.6, "eval/train_seconds": 300.0} and grpo["steps"] == 300
    assert grpo["config_hash"] == "58437cc8e863"  # sha256 of {"objective": "eval/greedy_acc", "seed": 0}, sorted
    assert grpo["student"] == "tiny/evidence-seed0"
    assert {line["status"] for line in lines if line["arm"] == "goldilocks"} == {"failed", "running"}

    second = tmp_path / "second"
    assert report.main([str(packed), "--scoreboard", "--out", str(second)]) == 0
    for name in ("scoreboard.md", "scoreboard.csv", "scoreboard_arms.csv"):
        assert (second / name).read_text() == (first / name).read_text(), name
    assert not (second / "evaluations.jsonl.gz").exists()  # rebuilt from the file, not rewritten
    write_scoreboard(find_runs([sweep]), tmp_path / "third")
    assert (tmp_path / "third" / "evaluations.jsonl.gz").read_bytes() == packed.read_bytes()  # the same bytes

    capsys.readouterr()  # a launch's record alone: the same file, nothing scored
    assert report.main([str(sweep), "--evaluations", "--out", str(tmp_path / "record")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("28 runs (26 completed, 1 failed, 1 running) of 8 arms, seeds 0, 1, 2, 3, 4: nothing")
    assert "reproduced" not in printed and "0.4" not in printed
    assert (tmp_path / "record" / "evaluations.jsonl.gz").read_bytes() == packed.read_bytes()
    (tmp_path / "empty").mkdir()
    assert report.main([str(tmp_path / "empty"), "--evaluations"]) == 2
    assert capsys.readouterr().err.startswith("error: no evidence runs")

    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(packed.read_bytes()[:40])
    capsys.readouterr()
    assert report.main([str(damaged), "--scoreboard"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {damaged}: not a readable evaluations file") and error.count("\n") == 1


def landed_launches(folder: str, sweep: str) -> list[tuple[int, list[dict]]]:
    """Each landed launch's seed and evaluation lines: a Part 2 or 3 folder's seed<k>/evaluations.jsonl.gz."""
    import gzip

    files = sorted((ROOT / "research/results/evidence_rates" / folder).glob("seed*/evaluations.jsonl.gz"))
    assert files, f"no launch of +sweep={sweep} has landed"
    launches = []
    for path in files:
        seed = int(path.parent.name.removeprefix("seed"))
        assert 10 <= seed <= 19
        with gzip.open(path, "rt") as handle:
            launches.append((seed, [json.loads(text) for text in handle]))
    return launches


def test_each_landed_launch_of_the_rates_scoreboard_is_its_seeds_arms_all_completed():
    """The per-arm-rate scoreboard as it runs, one launch per seed (research/results/evidence_rates/PREREGISTRATION.md):
    each landed launch's file holds its seed's run of every arm, each completed on its seed's shipped student, GRPO
    240 steps and the others 60, from the commit that recorded the students' premises."""
    for seed, lines in landed_launches("scoreboard", "evidence_rates"):
        assert sorted(line["arm"] for line in lines) == sorted(sweep_grid("evidence_rates")["+evidence_arm"])
        assert {(line["seed"], line["status"], line["student"]) for line in lines} == {
            (seed, "completed", f"tiny/evidence-seed{seed}")}  # fmt: skip
        assert {line["arm"]: line["steps"] for line in lines if line["steps"] != 60} == {"grpo": 240}
        assert {line["git_commit"] for line in lines} == {"5e1762913abe385be096bdceebcb1df5a60e7131"}


def test_the_shipped_headroom_scoreboard_is_its_evaluations_file_read_again(tmp_path):
    """The pre-registered sweep as it ran: every one of its 120 jobs completed, from the pre-registration's commit,
    and the scoreboard the docs cite is what its evaluations file gives."""
    import gzip

    shipped = ROOT / "research" / "results" / "evidence_headroom"
    with gzip.open(shipped / "evaluations.jsonl.gz", "rt") as handle:
        lines = [json.loads(text) for text in handle]
    assert sorted((line["arm"], line["seed"]) for line in lines) == sorted(
        (arm, seed) for arm in sweep_grid("evidence_headroom")["+evidence_arm"] for seed in range(10)
    )
    assert {line["status"] for line in lines} == {"completed"}
    assert {line["git_commit"] for line in lines} == {"f276f99b3e941a37cbea27bf541e5ea190f63730"}
    premises = ROOT / "research" / "results" / "premises_students_headroom.json"  # the ten students' premises
    assert report.main([str(shipped / "evaluations.jsonl.gz"), "--scoreboard", "--premises", str(premises),
                        "--out", str(tmp_path)]) == 0  # fmt: skip
    for name in ("scoreboard.md", "scoreboard.csv", "scoreboard_arms.csv"):
        assert (tmp_path / name).read_text() == (shipped / name).read_text(), name


def test_the_shipped_rates_scoreboard_is_its_ten_launches_files_read_again(tmp_path):
    """The per-arm-rate scoreboard the docs cite is what the ten launches' evaluations files give, with the
    evaluation students' premises."""
    shipped = ROOT / "research/results/evidence_rates/scoreboard"
    files = sorted(shipped.glob("seed*/evaluations.jsonl.gz"))
    assert [path.parent.name for path in files] == [f"seed{seed}" for seed in range(10, 20)]
    premises = ROOT / "research/results/evidence_rates/premises_students_eval.json"
    assert report.main([*map(str, files), "--scoreboard", "--premises", str(premises), "--out", str(tmp_path)]) == 0
    for name in ("scoreboard.md", "scoreboard.csv", "scoreboard_arms.csv"):
        assert (tmp_path / name).read_text() == (shipped / name).read_text(), name


def test_each_landed_launch_of_the_long_runs_is_its_seeds_four_arms_all_completed_at_240_steps():
    """The long runs as they ran, one launch per seed (Part 3 of research/results/evidence_rates/PREREGISTRATION.md):
    each landed launch's file holds its seed's run of GRPO, SDPO and both VPD arms, each completed 240 steps on its
    seed's shipped student, from a commit after the per-arm-rate scoreboard's (the code the scoreboard ran)."""
    after_the_scoreboard = {"5097bf149d0b2c6c3e2221d44647e2a0eeb58bfc", "b2c64593d0253c2e5f0e0dc783b195c201409ae9"}
    for seed, lines in landed_launches("long", "evidence_long"):
        assert sorted(line["arm"] for line in lines) == ["grpo", "sdpo", "vpd_dynamic", "vpd_trust_region"]
        assert {(line["seed"], line["status"], line["student"], line["steps"]) for line in lines} == {
            (seed, "completed", f"tiny/evidence-seed{seed}", 240)}  # fmt: skip
        assert {line["git_commit"] for line in lines} <= after_the_scoreboard


def test_the_shipped_long_scoreboard_and_collapse_table_are_the_ten_launches_files_read_again(tmp_path):
    """The step-240 scoreboard and the collapse table the docs cite are what the ten long launches' files give."""
    shipped = ROOT / "research/results/evidence_rates/long"
    files = sorted(shipped.glob("seed*/evaluations.jsonl.gz"))
    assert [path.parent.name for path in files] == [f"seed{seed}" for seed in range(10, 20)]
    assert report.main([*map(str, files), "--scoreboard", "--out", str(tmp_path)]) == 0
    assert report.main([*map(str, files), "--collapse", "--out", str(tmp_path)]) == 0
    for name in ("scoreboard.md", "scoreboard.csv", "scoreboard_arms.csv", "collapse.md", "collapse.csv"):
        assert (tmp_path / name).read_text() == (shipped / name).read_text(), name


def test_the_long_runs_figures_the_evidence_page_quotes():
    """The page's reading of the long runs, its figures written by hand: no SDPO run collapses (so both delay claims
    are untestable), VPD without a regulariser ends at 0.480 with 2 runs collapsed, the trust-region arm at 0.627."""
    shipped = ROOT / "research/results/evidence_rates/long"
    with open(shipped / "scoreboard_arms.csv", newline="") as handle:
        arms = {row["arm"]: row for row in csv.DictReader(handle)}
    final_and_collapsed = {
        arm: (round(float(row["eval/greedy_acc mean"]), 3), row["collapsed"]) for arm, row in arms.items()
    }
    assert final_and_collapsed == {"grpo": (0.621, "0"), "sdpo": (0.615, "0"), "vpd_dynamic": (0.480, "2"),
                                   "vpd_trust_region": (0.627, "0")}  # fmt: skip
    with open(shipped / "collapse.csv", newline="") as handle:
        claims = {row["claim"]: row for row in csv.DictReader(handle)}
    assert {claim: (row["b_collapsed"], row["verdict"].split(" (")[0]) for claim, row in claims.items()} == {
        "vpd_dynamic>sdpo (collapse)": ("0", "untestable here"),
        "vpd_trust_region>sdpo (collapse)": ("0", "untestable here"),
    }
    assert round(float(claims["vpd_dynamic>sdpo (collapse)"]["drop_a"]), 3) == 0.134
