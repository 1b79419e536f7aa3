"""DAPO's dynamic sampling (``algorithm.dynamic_sampling``): which groups it keeps, drops and fills, how it refills,
and that the algorithm then scores the kept batch as if it had been generated at once. Overlong reward shaping (a
task setting, TRL's own function) at its boundaries."""

from __future__ import annotations

import math
import random

import pytest

from socratic_exp.algorithms.grpo.dynamic_sampling import BatchFiller, has_signal
from socratic_exp.core.config import compose
from socratic_exp.core.errors import ConfigError
from socratic_exp.runtime.assembly import build_components, trainer_from
from socratic_exp.samplers.uniform import UniformSampler

FAST = ("debug=fast", "logger=none", "algorithm.log_completions=false")


# --- the choice of groups, by hand ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rewards", "signal"),
    [([1.0, 1.0, 1.0], False), ([0.0, 1.0], True), ([0.5, 0.5], False), ([math.nan, 1.0], False),
     ([math.nan, 0.0, 1.0], True), ([0.0, 0.0, 0.25], True)],
)  # fmt: skip
def test_a_group_has_signal_when_its_scored_rewards_differ(rewards, signal):
    assert has_signal(rewards) is signal


def test_the_filler_keeps_signal_groups_in_order_until_the_quota_and_leaves_the_surplus():
    filler = BatchFiller(quota=3)
    filler.add_round(["A", "B", "C", "D"], [[1, 1], [0, 1], [0, 0], [1, 0]])
    assert (filler.kept, filler.dropped, filler.shortfall) == (["B", "D"], ["A", "C"], 1)
    filler.add_round(["E", "F", "G"], [[0, 0], [1, 0], [0, 1]])
    assert filler.shortfall == 0 and filler.rounds == 2
    assert filler.batch() == ["B", "D", "F"]
    assert filler.counts() == {
        "generated_groups": 7,
        "zero_variance_groups": 3,
        "dropped_groups": 3,
        "unused_groups": 1,
        "filled_groups": 0,
    }


def test_at_the_cap_the_batch_is_completed_with_the_first_zero_variance_groups():
    filler = BatchFiller(quota=3)
    filler.add_round(["A", "B", "C", "D"], [[1, 1], [0, 1], [0, 0], [1, 1]])
    assert filler.batch() == ["B", "A", "C"]
    assert filler.counts() == {
        "generated_groups": 4,
        "zero_variance_groups": 3,
        "dropped_groups": 1,
        "unused_groups": 0,
        "filled_groups": 2,
    }


def test_uniform_refills_draw_their_own_stream_and_resume_from_its_position():
    class Trainer:
        class args:
            seed = 7

    dataset = list(range(50))
    sampler = UniformSampler()
    first, second = sampler.refill(Trainer, dataset, 4), sampler.refill(Trainer, dataset, 4)
    assert first == random.Random("refill:7:0").sample(range(50), 4)
    assert second == random.Random("refill:7:1").sample(range(50), 4)
    assert len(set(first)) == 4 and first != second
    resumed = UniformSampler()
    resumed.load_state_dict(sampler.state_dict())
    assert resumed.refill(Trainer, dataset, 4) == random.Random("refill:7:2").sample(range(50), 4)


# --- the settings ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("algorithm.dynamic_sampling={max_rounds:0}",), "algorithm.dynamic_sampling.max_rounds=0: must be >= 1"),
        (("algorithm.dynamic_sampling={rounds:3}",), "algorithm.dynamic_sampling.rounds: unknown key"),
        (("task.overlong_buffer=48",), "task.overlong_buffer=48: must be below algorithm.max_completion_length=48"),
        (("task.overlong_buffer=-1",), "task.overlong_buffer=-1: must be >= 0"),
        (("algorithm=socraticpo", "task.overlong_buffer=8"), "algorithm=socraticpo rewards each attempt itself"),
        (("+algorithm.trl_args.reward_weights=[2.0,1.0]",), "gives 2 weights for 1 reward functions (the verifier)"),
    ],
)
def test_bad_settings_are_named(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_components(compose("algorithm=grpo", *overrides), {"algorithm": "grpo"})
    assert message in str(err.value)


def test_the_paper_overlay_composes_dapos_recipe():
    """experiment=entropy_masked_dapo_qwen3: dynamic sampling and overlong shaping with the 80/20 script's values."""
    cfg = compose("experiment=entropy_masked_dapo_qwen3")
    components = build_components(cfg, {"algorithm": "entropy_masked"})
    shaping = components.algorithm.dynamic_sampling
    assert (shaping.max_rounds, shaping.batches_per_round) == (10, 3)  # max_num_gen_batches=10, gen = 3 x train
    assert components.task.overlong_buffer == 4096  # overlong_buffer.len=4096 of max_response_length=20480
    assert components.algorithm.max_completion_length == 20480
    # verl's DAPO scorer is +1 / -1: the verifier's 0 / 1 weighs 2 against the penalty; clip_ratio_c=10 is TRL's delta
    assert components.algorithm.trl_args == {"delta": 10.0, "reward_weights": [2.0, 1.0]}


# --- overlong shaping: TRL's function at its boundaries ------------------------------------------------------------
def test_the_overlong_penalty_is_zero_then_linear_then_minus_one():
    task = build_components(compose("algorithm=grpo", "task.overlong_buffer=4"), {}).task
    (penalty,) = task.shaping_rewards(max_completion_length=10)
    lengths = [5, 6, 7, 8, 10, 11]
    assert penalty(completion_ids=[[1] * n for n in lengths]) == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]
    assert build_components(compose("algorithm=grpo"), {}).task.shaping_rewards(10) == []


@pytest.mark.slow
def test_the_shaping_follows_the_verifier_among_the_trainers_rewards():
    trainer = trainer_from("algorithm=grpo", "task.overlong_buffer=8", *FAST)
    assert trainer.reward_func_names == ["accuracy", "soft_overlong_punishment_reward"]


# --- the trainer: discovery rounds, then the kept batch scored once -----------------------------------------------
def scripted(signal: set[int], calls: list[list[int]]):
    """A reward by row, not by text: rows of a question in ``signal`` alternate 0, 1 within their group, others get
    0; every call's question indices are recorded."""

    def accuracy(completions, index, **_):
        calls.append(list(index))
        return [float(i in signal and n % 2) for n, i in enumerate(index)]

    return accuracy


def groups_of(indices: list[int], size: int) -> list[int]:
    return indices[::size]


@pytest.mark.slow
def test_dropped_groups_are_refilled_from_the_samplers_stream_and_the_kept_batch_is_scored_once():
    """A batch of 4 questions (groups of 4), of which only even questions have signal: the rounds go on with the
    uniform refill stream until 4 even questions are found, and TRL scores exactly their 16 completions."""
    trainer = trainer_from("algorithm=grpo", "algorithm.dynamic_sampling={max_rounds:10}", *FAST)
    calls: list[list[int]] = []
    trainer.reward_funcs[0] = scripted({i for i in range(len(trainer.train_dataset)) if i % 2 == 0}, calls)
    questions = [1, 2, 3, 5]
    rows = [dict(trainer.train_dataset[q]) for q in questions for _ in range(4)]
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows)

    rounds = [groups_of(call, 4) for call in calls]
    assert rounds[0] == questions
    size = len(trainer.train_dataset)
    for n, drawn in enumerate(rounds[1:]):  # the refill stream: the run's seed, the refills so far
        assert drawn == random.Random(f"refill:0:{n}").sample(range(size), 4)
    generated = [q for drawn in rounds for q in drawn]
    kept = [q for q in generated if q % 2 == 0][:4]
    assert len(kept) == 4 and sum(q % 2 == 0 for q in [q for d in rounds[:-1] for q in d]) < 4  # stopped when full
    trained = [trainer.processing_class.decode(ids, skip_special_tokens=True) for ids in output["prompt_ids"]]
    assert trained == [trainer.train_dataset[q]["prompt"] for q in kept for _ in range(4)]
    assert trainer._metrics["train"]["frac_reward_zero_std"][-1] == 0.0  # TRL's statistic of the batch trained
    advantages = output["advantages"].view(4, 4)
    assert all(float(group.abs().min()) > 0.5 for group in advantages)  # 0/1 within each group: +-0.866
    logged = {name: values[-1] for name, values in trainer._metrics["train"].items() if name.startswith("dynamic")}
    assert logged["dynamic_sampling/rounds"] == len(rounds)
    assert logged["dynamic_sampling/generated_groups"] == len(generated)
    assert logged["dynamic_sampling/zero_variance_share"] == pytest.approx(
        sum(q % 2 for q in generated) / len(generated)
    )
    assert logged["dynamic_sampling/filled_groups"] == 0.0


@pytest.mark.slow
def test_without_zero_variance_groups_the_batch_is_the_plain_one():
    """Every group with signal: one round, and the same completions and advantages as without dynamic sampling."""
    import torch
    from transformers import set_seed

    outputs = []
    for extra in ((), ("algorithm.dynamic_sampling={max_rounds:3}",)):
        trainer = trainer_from("algorithm=grpo", *extra, *FAST)
        trainer.reward_funcs[0] = scripted(set(range(len(trainer.train_dataset))), [])
        rows = [dict(trainer.train_dataset[q]) for q in (0, 1, 2, 3) for _ in range(4)]
        trainer.model.train()
        set_seed(3)
        outputs.append(trainer._generate_and_score_completions(rows))
    plain, dynamic = outputs
    assert torch.equal(plain["completion_ids"], dynamic["completion_ids"])
    assert torch.equal(plain["advantages"], dynamic["advantages"])


@pytest.mark.slow
def test_at_the_cap_zero_variance_groups_fill_the_batch():
    trainer = trainer_from("algorithm=grpo", "algorithm.dynamic_sampling={max_rounds:2}", *FAST)
    calls: list[list[int]] = []
    trainer.reward_funcs[0] = scripted(set(), calls)  # no group ever has signal
    rows = [dict(trainer.train_dataset[q]) for q in (0, 1, 2, 3) for _ in range(4)]
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows)
    assert len(calls) == 2  # the cap
    trained = [trainer.processing_class.decode(ids, skip_special_tokens=True) for ids in output["prompt_ids"]]
    assert trained == [trainer.train_dataset[q]["prompt"] for q in (0, 1, 2, 3) for _ in range(4)]  # the first
    logged = {name: values[-1] for name, values in trainer._metrics["train"].items() if name.startswith("dynamic")}
    assert (logged["dynamic_sampling/filled_groups"], logged["dynamic_sampling/dropped_groups"]) == (4.0, 4.0)


@pytest.mark.slow
def test_socraticpo_under_dynamic_sampling_decays_over_the_kept_batch():
    """The interactive rollout's attempts travel with their rows: after the replay SocraticPO's rollouts are the kept
    rows' and its decayed rewards are those of their outcomes (Eq. 17-19 over the batch trained)."""
    from socratic_exp.algorithms.socraticpo.rewards import decayed_rewards

    trainer = trainer_from(
        "algorithm=socraticpo", "algorithm.dynamic_sampling={max_rounds:4}", "algorithm.teacher_kl_every=0", *FAST
    )
    rows = [dict(trainer.train_dataset[q]) for q in (0, 1, 2, 3) for _ in range(4)]
    trainer.model.train()
    trainer._generate_and_score_completions(rows)
    assert len(trainer._rollouts) == 16
    outcomes = [r.outcomes for r in trainer._rollouts]
    assert trainer._rewards == decayed_rewards(outcomes)
    returns = [sum(r) for r in trainer._rewards]
    groups = [returns[start : start + 4] for start in range(0, 16, 4)]
    filled = trainer._metrics["train"]["dynamic_sampling/filled_groups"][-1]
    assert sum(not has_signal(group) for group in groups) == filled


@pytest.mark.slow
def test_a_resumed_run_refills_as_the_uninterrupted_one(run_in_process):
    """The refill stream's position is in every checkpoint: resumed at step 2, steps 3 and 4 take the rounds of the
    run that went through."""
    import torch
    from conftest import interrupt_after_step_2, run_dirs

    from socratic_exp.core.run_folder import read_metrics, read_summary
    from socratic_exp.samplers.base import STATE_FILE

    overrides = ("algorithm=grpo", "algorithm.dynamic_sampling={max_rounds:4}", "debug=quick_warmstart", "logger=none")
    proc, outputs = run_in_process(*overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    rounds = {r["step"]: r["dynamic_sampling/rounds"] for r in read_metrics(run_dir) if "dynamic_sampling/rounds" in r}
    assert sorted(rounds) == [1, 2, 3, 4] and max(rounds.values()) > 1  # refills happened
    saved = torch.load(run_dir / "checkpoints" / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert saved["refills"] == rounds[1] + rounds[2] - 2  # every round after a step's first was a refill
    interrupt_after_step_2(run_dir)

    proc, _ = run_in_process(*overrides, "resume=auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_summary(run_dir)["status"] == "completed"
    resumed = [r for r in read_metrics(run_dir) if "dynamic_sampling/rounds" in r]
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]  # steps 3 and 4 logged once, by the resumed run
    assert {r["step"]: r["dynamic_sampling/rounds"] for r in resumed} == rounds
