"""The composition matrix: every sweep in sweeps/ over every experiment overlay (and over none, the testbed). Each
pair is either refused in one line naming both, or every job of its grid composes, validates, and keeps the setup's
model, task and teacher (the teacher axis taking the setup's own values). Expected outcomes are written by hand."""

from __future__ import annotations

import pytest
from conftest import ROOT, compose
from omegaconf import OmegaConf

from socratic_exp.core.errors import UserError
from socratic_exp.multirun.grid import Grid, check_setup, job_overrides
from socratic_exp.multirun.grid import overlay as overlay_choices
from socratic_exp.runtime.assembly import build_components

SWEEPS = sorted(p.stem for p in (ROOT / "sweeps").glob("*.yaml"))
OVERLAYS = [None, *sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))]
# the testbed's task: its axes apply
ARITHMETIC = [None, "arithmetic_long", "qwen3_arithmetic", "smollm2_cpu", "smollm2_cpu_flexible", "smollm2_cpu_math"]
# jobs of each sweep per setup that runs it (by hand: the product of its axes, seeds included)
JOBS = {
    "entropy_quantile": dict.fromkeys([*ARITHMETIC, "entropy_masked_dapo_qwen3"], 6 * 3 * 3),
    "evidence": {None: 17 * 5},
    "evidence_headroom": {None: 12 * 10},
    "evidence_long": {None: 4 * 10},
    "evidence_rates": {None: 13 * 10},
    "evidence_rates_selection": {None: 13 * 4 * 3},
    "evidence_sparse": {None: 7 * 5},
    "goldilocks_vs_uniform": {**dict.fromkeys(ARITHMETIC, 2 * 2 * 3), "goldilocks_openmath": 2 * 1 * 3},
    "socratic_rl": {**dict.fromkeys(ARITHMETIC, 3 * 2 * 2 * 3), "socratic_rl_gsm8k": 3 * 2 * 2 * 3},
    "socraticpo_ablation": {
        **dict.fromkeys(ARITHMETIC, 3 * 2 * 3),
        "socraticpo_sciknoweval": 3 * 2 * 3,
        "socraticpo_official_sciknoweval": 3 * 1 * 3,  # the authors' only teacher: the frozen starting model
    },
    "vpd_ablation": {**dict.fromkeys(ARITHMETIC, 10 * 3), "vpd_sciknoweval": 7 * 3, "sdpo_sciknoweval": 7 * 3},
}
# the refusal's reason, by hand, for every pair not in JOBS
REASONS = dict.fromkeys(
    ["evidence", "evidence_headroom", "evidence_long", "evidence_rates", "evidence_rates_selection", "evidence_sparse"],
    "shipped students",
)
ALGORITHM_CLASH = "the sweep ablates"  # the overlay is a setup for another method
NO_AXIS = "gives no values for the sweep's setup-specific axis"  # a paper overlay without the sweep's axis values


def expected_refusal(sweep: str, overlay: str) -> str:
    if sweep in REASONS:
        return REASONS[sweep]
    methods = {"entropy_quantile": ["entropy_masked"], "socratic_rl": ["socratic_rl"],
               "socraticpo_ablation": ["socraticpo", "socraticpo_official"]}  # fmt: skip
    own = {"entropy_masked_dapo_qwen3": "entropy_masked", "goldilocks_openmath": "grpo", "vpd_sciknoweval": "vpd",
           "sdpo_sciknoweval": "sdpo_official", "socratic_rl_gsm8k": "socratic_rl",
           "socraticpo_sciknoweval": "socraticpo",
           "socraticpo_official_sciknoweval": "socraticpo_official"}  # fmt: skip
    if sweep in methods and own[overlay] not in methods[sweep]:
        return ALGORITHM_CLASH
    if sweep == "vpd_ablation" and own[overlay] not in ("vpd", "sdpo", "sdpo_official"):
        return ALGORITHM_CLASH
    return NO_AXIS


def test_the_expected_table_covers_every_sweep():
    assert sorted(JOBS) == SWEEPS


@pytest.mark.parametrize("sweep", SWEEPS)
@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda o: o or "testbed")
def test_every_sweep_over_every_overlay_composes_or_is_refused(sweep, overlay):
    if overlay not in JOBS[sweep]:
        with pytest.raises(UserError) as refused:
            check_setup(sweep, overlay)
        message = str(refused.value)
        assert "\n" not in message and f"+sweep={sweep} with experiment={overlay}" in message
        assert expected_refusal(sweep, overlay) in message
        return
    check_setup(sweep, overlay)
    setup = [f"experiment={overlay}"] if overlay else []
    jobs = job_overrides(f"+sweep={sweep}", *setup)
    assert len(jobs) == JOBS[sweep][overlay]
    alone = compose(*setup)  # the setup without the sweep
    pinned = overlay_choices(overlay)[0] if overlay else {}  # the groups the overlay chooses
    regime = Grid.load(sweep).testbed_only  # a scoreboard's pre-registered regime on the shipped students
    axes = OmegaConf.select(alone, "axes.teachers").split(",")
    for job in {tuple(o for o in j if not o.startswith("seed=")) for j in jobs}:  # seeds change nothing else
        cfg = compose(*job)
        build_components(cfg)
        # the setup's student and task (the tiny model once replaced the overlay's); a scoreboard's pre-registered
        # regime names its own (evidence_sparse: harder questions; evidence_headroom: its students and task)
        assert cfg.model == alone.model or regime, job
        assert cfg.task == alone.task or regime, job
        teacher = next((o.split("=", 1)[1] for o in job if o.startswith("teacher=")), None)
        if teacher is not None:  # the teacher axis: the setup's own values
            assert teacher in axes and cfg.teacher == compose(*setup, f"teacher={teacher}").teacher, job
        elif "teacher" in pinned and not any(o.startswith("+vpd_arm=") and o.endswith("/teacher") for o in job):
            assert cfg.teacher == alone.teacher, job  # the overlay's teacher (a critique arm brings its critic)
        if "algorithm" in pinned and not any(o.startswith(("+vpd_arm=", "+evidence_arm=")) for o in job):
            assert cfg.algorithm._target_ == alone.algorithm._target_, job


def test_the_paper_pairs_take_the_overlays_axis_values():
    jobs = job_overrides("+sweep=socraticpo_ablation", "experiment=socraticpo_sciknoweval")
    assert sorted({j[1] for j in jobs}) == ["teacher=llm", "teacher=qwen27b"]
    jobs = job_overrides("+sweep=goldilocks_vs_uniform", "experiment=goldilocks_openmath")
    assert sorted({(j[0], j[1]) for j in jobs}) == [("sampler=goldilocks_gpu", "algorithm=grpo"),
                                                     ("sampler=uniform", "algorithm=grpo")]  # fmt: skip
    # a value typed on the command line wins over the setup's, as any Hydra sweep axis
    jobs = job_overrides("+sweep=socraticpo_ablation", "experiment=socraticpo_sciknoweval", "axes.teachers=llm")
    assert {j[1] for j in jobs} == {"teacher=llm"}


def test_the_ablation_runs_over_the_method_the_setup_chooses():
    """The SocraticPO ablation keeps the setup's preset of the method (the authors' settings stay in every job), and
    refuses another method typed on the command line."""
    for setup, attempts in ((["algorithm=socraticpo_official"], 2), (["experiment=socraticpo_official_sciknoweval"], 2),
                            ([], 3)):  # fmt: skip
        for job in job_overrides("+sweep=socraticpo_ablation", *setup):
            cfg = compose(*job)
            assert cfg.algorithm.max_attempts == attempts and cfg.algorithm.baseline == (
                "prompt" if attempts == 2 else "none"
            ), job
    check_setup("socraticpo_ablation", None, algorithm="socraticpo_official")
    with pytest.raises(UserError) as refused:
        check_setup("socraticpo_ablation", None, algorithm="grpo")
    assert str(refused.value) == (
        "+sweep=socraticpo_ablation with algorithm=grpo: the sweep ablates algorithm=socraticpo or "
        "algorithm=socraticpo_official (fix: drop algorithm=grpo, or choose algorithm=socraticpo)"
    )


def test_a_refused_pair_stops_the_launch_in_one_line(run_app):
    proc, outputs = run_app("experiment=socraticpo_sciknoweval", "+sweep=entropy_quantile", timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "error: +sweep=entropy_quantile with experiment=socraticpo_sciknoweval: the sweep ablates "
        "algorithm=entropy_masked, the overlay is a setup for algorithm=socraticpo (fix: run +sweep=entropy_quantile "
        "without experiment=, or with an overlay for entropy_masked)"
    ]
    assert not list(outputs.glob("multirun/*/*/0")), "no job started"


def test_a_key_the_user_never_set_names_the_overlay_that_set_it(capsys):
    from socratic_exp.runtime.lifecycle import Job
    from socratic_exp.runtime.stages.compose import validate

    cfg = compose("experiment=socraticpo_sciknoweval", "task=arithmetic")
    job = Job(run_dir=ROOT, multirun=False, overrides=["experiment=socraticpo_sciknoweval", "task=arithmetic"],
              choices={}, is_main=True, overlays={"experiment": "socraticpo_sciknoweval"})  # fmt: skip
    with pytest.raises(UserError) as err:
        validate(cfg, job)
    assert str(err.value) == (
        "task.domain: unknown key; experiment=socraticpo_sciknoweval sets it "
        "(conf/experiment/socraticpo_sciknoweval.yaml) (fix: it does not apply to the options now chosen: choose "
        "options it fits, or drop it from conf/experiment/socraticpo_sciknoweval.yaml)"
    )
    typed = Job(run_dir=ROOT, multirun=False, overrides=["+task.domain=all"], choices={}, is_main=True)
    with pytest.raises(UserError) as err:
        validate(compose("+task.domain=all"), typed)
    assert str(err.value).startswith("task.domain: unknown key (fix: remove it;")  # typed: the fix is the user's
