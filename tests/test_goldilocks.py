"""``sampler=goldilocks``: the target, the selection rules, the loss and the refit schedule on hand examples, the
predictor on a planted difficulty signal, the batch structure TRL expects, determinism, the state across a resume,
and a run with every algorithm."""

from __future__ import annotations

import math
import random

import pytest
from conftest import compose, interrupt_after_step_2, run_dirs
from omegaconf import OmegaConf

from socratic_exp.core.errors import UserError
from socratic_exp.core.run_folder import read_metrics, read_summary
from socratic_exp.multirun.grid import job_overrides
from socratic_exp.runtime.assembly import build_components
from socratic_exp.samplers.base import STATE_FILE, GroupStats, group_rewards, utility
from socratic_exp.samplers.goldilocks import sampler as runtime
from socratic_exp.samplers.goldilocks.config import GoldilocksSampler
from socratic_exp.samplers.goldilocks.predictor import (
    RefitSchedule,
    ReplayBuffer,
    UtilityPredictor,
    build_head,
    regression_loss,
)
from socratic_exp.samplers.goldilocks.sampler import GoldilocksSelector
from socratic_exp.samplers.goldilocks.selector import best_of_each, candidate_groups, ranked, top_of_pool
from socratic_exp.samplers.uniform import UniformSampler

# --- the target and the group statistics --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([1, 1, 1, 1], 0.0),  # always solved: no gradient
        ([0, 0, 0, 0], 0.0),  # never solved: no gradient
        ([1, 0, 1, 0], 0.5),  # the maximum, at p = 1/2
        ([1, 0, 0, 0], math.sqrt(3) / 4),  # p = 1/4
        ([1, 1, 1, 0, 0, 0, 0, 0], math.sqrt(15) / 8),  # p = 3/8
        ([2.0, -1.0], 0.5),  # clipped into [0, 1]: p = 1/2
    ],
)
def test_utility_is_sqrt_p_one_minus_p(rewards, expected):
    assert utility(rewards) == pytest.approx(expected)


def test_group_stats_count_zero_variance_groups_and_rollouts():
    sampler = UniformSampler()
    sampler.observe([7, 7, 3, 3, 5, 5], [1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    assert group_rewards([7, 7, 3], [1, 0, 1]) == {7: [1.0, 0.0], 3: [1.0]}
    metrics = sampler.metrics()
    assert metrics == {"rollouts": 6.0, "zero_variance_share": pytest.approx(2 / 3), "utility": pytest.approx(0.5 / 3)}
    sampler.observe([1, 1], [1.0, 0.0])
    assert sampler.metrics() == {"rollouts": 8.0, "zero_variance_share": 0.0, "utility": 0.5}  # a new window
    assert GroupStats().drain() == {"rollouts": 0.0}


# --- the selection rules (Goldilocks RL, Fig. 1) -------------------------------------------------------------------

GREEDY = {"rule": "greedy", "temperature": 1.0, "epsilon": 0.0}
# three prompts' candidates (K = 3); the paper keeps the best of each prompt's own: 0.4, 0.2 and 0.5
GROUPS = [[0.1, 0.4, 0.3], [0.2, 0.0, 0.05], [0.45, 0.5, 0.49]]


def test_each_prompt_keeps_the_best_of_its_own_candidates():
    assert best_of_each(GROUPS, random.Random(0), **GREEDY) == [1, 0, 1]
    assert best_of_each([[0.3, 0.3, 0.1], [0.0]], random.Random(0), **GREEDY) == [0, 0]  # ties: the earlier one


def test_the_batch_pool_keeps_the_best_of_all_candidates():
    flat = [u for group in GROUPS for u in group]  # the same 9 candidates as one pool: the 3 best are all prompt 3's
    assert top_of_pool(flat, 3, random.Random(0), **GREEDY) == [7, 8, 6]
    scores = [0.1, 0.4, 0.3, 0.4, 0.0]
    assert top_of_pool(scores, 2, random.Random(0), **GREEDY) == [1, 3]  # ties keep pool order
    assert top_of_pool(scores, 9, random.Random(0), **GREEDY) == [1, 3, 2, 0, 4]  # never more than the pool


def test_candidate_groups_are_disjoint_uniform_draws_of_k():
    groups = candidate_groups(100, 4, 3, random.Random(0))
    assert [len(g) for g in groups] == [3, 3, 3, 3]
    assert len({q for g in groups for q in g}) == 12 and all(0 <= q < 100 for g in groups for q in g)
    assert candidate_groups(100, 4, 3, random.Random(0)) == groups  # the seed decides the draw
    small = candidate_groups(10, 4, 3, random.Random(1))  # 10 questions: 2 candidates for each of 4 prompts
    assert [len(g) for g in small] == [2, 2, 2, 2] and len({q for g in small for q in g}) == 8
    assert [len(g) for g in candidate_groups(3, 3, 5, random.Random(0))] == [1, 1, 1]
    every = [q for seed in range(3000) for g in candidate_groups(10, 2, 2, random.Random(seed)) for q in g]
    assert all(every.count(q) / len(every) == pytest.approx(0.1, abs=0.015) for q in range(10))  # uniform


class FixedUtility:
    """A fitted predictor stand-in: hand-given utilities per dataset position."""

    fitted = True

    def __init__(self, utilities):
        self.utilities = utilities

    def predict(self, positions):
        return [self.utilities[p] for p in positions]


@pytest.mark.parametrize(("pool", "expected"), [("per_prompt", [1, 3]), ("batch", [1, 2])])
def test_the_sampler_applies_the_rule_to_its_candidate_groups(monkeypatch, pool, expected):
    """Two prompts, candidates {0, 1, 2} and {3, 4, 5}: the second prompt gets 3 (its best, 0.2) by the paper's rule,
    2 (the pool's second best, 0.3) by the batch rule."""
    features, _ = planted(size=40)
    sel = GoldilocksSelector(
        GoldilocksSampler(pool=pool, background=False),
        features=features,
        indices=list(range(40)),
        batch_size=2,
        mini_repeat_count=1,
        repeat_count=1,
        seed=0,
    )
    monkeypatch.setattr(runtime, "candidate_groups", lambda n, b, k, rng: [[0, 1, 2], [3, 4, 5]])
    sel.predictor = FixedUtility([0.1, 0.4, 0.3, 0.2, 0.0, 0.05])
    assert sel.next_batch() == expected
    assert sel.metrics()["candidate_utility"] == pytest.approx(1.05 / 6)


def test_softmax_is_greedy_at_low_temperature_and_uniform_at_high():
    distinct = [0.1, 0.45, 0.3, 0.2, 0.0]
    for seed in range(20):
        assert ranked(distinct, random.Random(seed), "softmax", 1e-4)[:2] == [1, 2]
        assert best_of_each([distinct], random.Random(seed), rule="softmax", temperature=1e-4, epsilon=0.0) == [1]
    trials = 5000
    counts = [0] * 5
    for seed in range(trials):
        counts[best_of_each([distinct], random.Random(seed), rule="softmax", temperature=1e3, epsilon=0.0)[0]] += 1
    assert all(abs(c / trials - 0.2) < 0.03 for c in counts), counts
    # in between: exp(u / 0.1) / sum, i.e. e^1, e^4.5, e^3, e^2, e^0 over their sum 121.21 (hand-computed)
    counts = [0] * 5
    for seed in range(trials):
        counts[best_of_each([distinct], random.Random(seed), rule="softmax", temperature=0.1, epsilon=0.0)[0]] += 1
    shares = [c / trials for c in counts]
    assert shares == pytest.approx([0.0224, 0.7427, 0.1657, 0.0610, 0.0083], abs=0.02), shares
    pool_counts = [0] * 5
    for seed in range(trials):
        pool_counts[top_of_pool(distinct, 1, random.Random(seed), rule="softmax", temperature=0.1, epsilon=0.0)[0]] += 1
    assert [c / trials for c in pool_counts] == pytest.approx(shares, abs=0.03)


def test_epsilon_explores_the_given_share_uniformly():
    distinct = [0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
    rule = {"rule": "greedy", "temperature": 1.0, "epsilon": 0.3}
    picks = [best_of_each([distinct], random.Random(seed), **rule)[0] for seed in range(6000)]
    assert picks.count(0) / len(picks) == pytest.approx(0.7 + 0.3 / 6, abs=0.02)  # an exploring pick may hit the best
    for other in range(1, 6):
        assert picks.count(other) / len(picks) == pytest.approx(0.05, abs=0.012)
    pool_picks = [top_of_pool(distinct, 1, random.Random(seed), **rule)[0] for seed in range(6000)]
    assert pool_picks.count(0) / len(pool_picks) == pytest.approx(0.75, abs=0.02)  # the same for one pick
    assert best_of_each([distinct, distinct], random.Random(0), **GREEDY) == [0, 0]
    every = top_of_pool(distinct, 6, random.Random(1), rule="greedy", temperature=1.0, epsilon=1.0)
    assert sorted(every) == list(range(6))  # always distinct


class Scripted(random.Random):
    """A ``random.Random`` whose ``random()`` returns the given values, then fails (the edge values 0.0 and epsilon
    itself: a uniform draw lies in [0, 1), and a pick explores when the draw is below epsilon)."""

    def __init__(self, values):
        super().__init__(3)
        self.values = iter(values)

    def random(self):
        return next(self.values)

    def getrandbits(self, k):  # randrange and sample keep drawing from the seeded stream
        return super().getrandbits(k)


def test_the_edges_of_a_uniform_draw():
    from socratic_exp.samplers.goldilocks.selector import _open_unit

    assert _open_unit(Scripted([0.0, 0.25])) == 0.25  # 0 is drawn again: its log is undefined
    distinct = [0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
    # a draw equal to epsilon does not explore, so epsilon = 0 never does
    assert best_of_each([distinct, distinct], Scripted([0.3, 0.3]), **{**GREEDY, "epsilon": 0.3}) == [0, 0]
    assert top_of_pool(distinct, 3, Scripted([0.0, 0.0, 0.0]), rule="greedy", temperature=1.0, epsilon=0.0) == [0, 1, 2]


# --- the predictor's loss, buffer and schedule (hand examples) -------------------------------------------------------


def test_the_loss_is_the_mean_absolute_error():
    """Errors -0.2, 0.3, 0: MAE 0.5 / 3 with gradient sign(e) / 3; MSE would give 0.13 / 3 and 2 e / 3."""
    import torch

    predictions = torch.tensor([0.1, 0.4, 0.25], requires_grad=True)
    targets = torch.tensor([0.3, 0.1, 0.25])
    mae = regression_loss(predictions, targets, "mae")
    mae.backward()
    assert mae.item() == pytest.approx(0.5 / 3)
    assert predictions.grad.tolist() == pytest.approx([-1 / 3, 1 / 3, 0.0])
    predictions.grad = None
    mse = regression_loss(predictions, targets, "mse")
    mse.backward()
    assert mse.item() == pytest.approx(0.13 / 3)
    assert predictions.grad.tolist() == pytest.approx([-0.4 / 3, 0.6 / 3, 0.0])


def zero_predictor(learning_rate: float = 0.1) -> UtilityPredictor:
    """A linear head on all-zero features with zero weights: every prediction is 0.5 * sigmoid(bias), 0.25 at first."""
    import torch

    predictor = UtilityPredictor(torch.zeros(4, 2), hidden_size=0, learning_rate=learning_rate, seed=0)
    for module in (predictor.live, predictor.learner):
        torch.nn.init.zeros_(module[0].weight)
        torch.nn.init.zeros_(module[0].bias)
    return predictor


@pytest.mark.parametrize(
    ("loss", "steps", "expected"),
    [
        ("mae", 1, 0.15),  # |0.25 - 0.1|
        ("mse", 1, 0.0225),  # (0.25 - 0.1)^2
        # Adam's first step moves the bias by -lr = -0.1: 0.5 * sigmoid(-0.1) = 0.237510, error 0.137510
        ("mae", 2, (0.15 + 0.137510) / 2),
    ],
)
def test_a_refit_minimises_the_configured_loss(loss, steps, expected):
    import torch

    predictor = zero_predictor()
    positions, targets = torch.tensor([0, 1, 2, 3]), torch.full((4,), 0.1)
    weights, mean_loss = predictor.fit(positions, targets, steps=steps, batch_size=8, loss=loss, seed=0)
    assert mean_loss == pytest.approx(expected, abs=1e-5)
    assert weights["0.bias"].item() == pytest.approx(-0.1 * steps, abs=1e-4)  # Adam: lr per step, whatever the loss
    assert predictor.predict([0]) == [0.25]  # the live copy answers until the sampler applies the new weights


def test_a_refit_step_uses_a_mini_batch_of_the_buffer():
    """Targets 0.1 and 0.3, every prediction 0.25: one observation per step gives a loss of 0.15 or 0.05, never the
    whole buffer's 0.1."""
    import torch

    losses = set()
    for seed in range(6):
        _, loss = zero_predictor().fit(
            torch.tensor([0, 1]), torch.tensor([0.1, 0.3]), steps=1, batch_size=1, loss="mae", seed=seed
        )
        losses.add(round(loss, 6))
    assert losses == {0.15, 0.05}


def test_mae_fits_the_median_and_mse_the_mean():
    """Targets 0.1, 0.1, 0.1, 0.5: the MAE minimiser is their median 0.1, the MSE one their mean 0.2."""
    import torch

    fitted = {}
    for loss in ("mae", "mse"):
        predictor = zero_predictor(learning_rate=0.05)
        weights, _ = predictor.fit(
            torch.tensor([0, 1, 2, 3]), torch.tensor([0.1, 0.1, 0.1, 0.5]), steps=400, batch_size=64, loss=loss, seed=0
        )
        predictor.live.load_state_dict(weights)
        fitted[loss] = predictor.predict([0])[0]
    assert fitted["mae"] == pytest.approx(0.1, abs=0.01)
    assert fitted["mse"] == pytest.approx(0.2, abs=0.01)


def test_predictions_lie_in_zero_to_one_half():
    import torch

    predictor = zero_predictor()
    torch.nn.init.constant_(predictor.live[0].bias, 40.0)
    assert predictor.predict([0, 3]) == [0.5, 0.5]
    torch.nn.init.constant_(predictor.live[0].bias, -40.0)
    assert predictor.predict([1]) == pytest.approx([0.0], abs=1e-12)


def test_the_head_and_its_seeded_initial_weights():
    import torch

    linear, mlp = build_head(6, 0), build_head(6, 5)
    assert [type(m).__name__ for m in linear] == ["Linear", "Sigmoid"] and linear[0].weight.shape == (1, 6)
    assert [type(m).__name__ for m in mlp] == ["Linear", "GELU", "Linear", "Sigmoid"]
    assert mlp[0].weight.shape == (5, 6) and mlp[2].weight.shape == (1, 5)
    before = torch.random.get_rng_state()
    a, b, c = (UtilityPredictor(torch.zeros(3, 6), hidden_size=5, learning_rate=0.1, seed=s) for s in (7, 7, 8))
    assert torch.equal(torch.random.get_rng_state(), before)  # the global stream is untouched
    assert torch.equal(a.live[0].weight, b.live[0].weight) and not torch.equal(a.live[0].weight, c.live[0].weight)
    assert torch.equal(a.learner[0].weight, a.live[0].weight) and a.learner is not a.live
    assert a.optimizer.param_groups[0]["lr"] == 0.1 and a.fitted is False


def test_the_replay_buffer_keeps_the_latest():
    buffer = ReplayBuffer(3)
    for position, target in [(5, 0.1), (6, 0.2), (7, 0.3), (8, 0.5)]:
        buffer.add(position, target)
    assert len(buffer) == 3 and list(buffer.entries) == [(6, 0.2), (7, 0.3), (8, 0.5)]
    assert buffer.mean() == pytest.approx(1.0 / 3)
    positions, targets = buffer.tensors()
    assert positions.tolist() == [6, 7, 8] and str(positions.dtype) == "torch.int64"
    assert targets.tolist() == pytest.approx([0.2, 0.3, 0.5]) and str(targets.dtype) == "torch.float32"
    buffer.load([1, 2], [0.0, 0.4])
    assert list(buffer.entries) == [(1, 0.0), (2, 0.4)]
    with pytest.raises(ValueError):
        buffer.load([1, 2], [0.0])  # a truncated state is an error, not a shorter buffer
    assert str(ReplayBuffer(2).tensors()[0].dtype) == "torch.int64"  # positions index the features, even when empty


def test_a_refit_is_due_every_n_observations():
    schedule = RefitSchedule(3)
    assert [schedule.add(2) for _ in range(6)] == [False, True, True, False, True, True]  # 2, 4 -> 1, 3 -> 0, ...
    assert schedule.count == 0
    assert RefitSchedule(3).add(3) is True
    big = RefitSchedule(3)
    assert big.add(7) is True and big.count == 1  # one refit per batch; the rest counts towards the next
    assert big.add(1) is False and big.add(1) is True


# --- the selector on synthetic feedback -------------------------------------------------------------------------


def planted(size: int = 3000, width: int = 8, seed: int = 0):
    """Random features whose first column plants the success rate p = sigmoid(3 x0)."""
    import torch

    features = torch.randn(size, width, generator=torch.Generator().manual_seed(seed))
    rates = torch.sigmoid(3 * features[:, 0]).tolist()
    return features, rates


def feedback(rates, positions, draw, group=8):
    """Deterministic 0/1 rewards for each question of a batch (the ``draw``-th batch)."""
    groups = {}
    for position in positions:
        rng = random.Random(f"{position}:{draw}")
        groups[position] = [float(rng.random() < rates[position]) for _ in range(group)]
    return groups


def selector(features, **settings) -> GoldilocksSelector:
    options = {"update_every": 32, "background": False, **settings}
    return GoldilocksSelector(
        GoldilocksSampler(**options),
        features=features,
        indices=list(range(len(features))),
        batch_size=16,
        mini_repeat_count=8,
        repeat_count=1,
        seed=0,
    )


def drive(sel: GoldilocksSelector, rates, batches: int, start: int = 0, ahead: list[int] | None = None):
    """The trainer's order of calls: the dataloader fetches one batch ahead, so batch b+1 is chosen before the
    feedback of batch b arrives. ``ahead``: the batch already fetched (when continuing). Returns the batches chosen,
    the one fetched ahead first."""
    chosen = [sel.next_batch() if ahead is None else ahead]
    for draw in range(start, start + batches):
        chosen.append(sel.next_batch())
        sel.observe(feedback(rates, chosen[-2], draw))
    return chosen


def test_predictor_learns_a_planted_difficulty_signal():
    """Fed noisy feedback (8 rollouts per question) on uniform draws, the predictor beats the mean on questions it
    never saw, both against the true utility and in its own logged metric."""
    features, rates = planted()
    sel = selector(features, candidates=1)  # one candidate: uniform draws, the feedback is unbiased
    drive(sel, rates, 40)
    truth = [math.sqrt(p * (1 - p)) for p in rates]
    unseen = [q for q in range(len(rates)) if not sel.seen[q]][:1000]
    predictions = sel.predictor.predict(unseen)
    mean = sel.buffer.mean()
    mae = sum(abs(p - truth[q]) for p, q in zip(predictions, unseen, strict=True)) / len(unseen)
    baseline = sum(abs(mean - truth[q]) for q in unseen) / len(unseen)
    assert mae < 0.7 * baseline, (mae, baseline)
    metrics = sel.metrics()
    assert metrics["predictor_mae_unseen"] < metrics["mean_baseline_mae"]
    assert metrics["updates"] == sel.fits == 40 * 16 // 32


def test_selection_concentrates_on_useful_questions():
    features, rates = planted()
    sel = selector(features)  # greedy, 4 candidates per pick
    chosen = drive(sel, rates, 40)
    truth = [math.sqrt(p * (1 - p)) for p in rates]
    late = [truth[q] for batch in chosen[-10:] for q in batch]
    uniform = sum(truth) / len(truth)
    assert sum(late) / len(late) > uniform + 0.08, (sum(late) / len(late), uniform)
    metrics = sel.metrics()
    assert metrics["predicted_utility"] > metrics["candidate_utility"]  # the picks are the pool's best
    assert metrics["predictor_mae_unseen"] < metrics["mean_baseline_mae"]


def test_batches_follow_trl_repeat_sampler_structure_and_are_chosen_lazily():
    from trl.trainer.utils import RepeatSampler

    features, _ = planted(size=203)
    sel = GoldilocksSelector(
        GoldilocksSampler(),
        features=features,
        indices=list(range(203)),
        batch_size=4,
        mini_repeat_count=3,
        repeat_count=2,
        seed=5,
    )
    assert len(sel) == len(RepeatSampler(list(range(203)), mini_repeat_count=3, batch_size=4, repeat_count=2))
    stream = iter(sel)
    first = [next(stream) for _ in range(4 * 3 * 2)]
    assert sel.selections == 1  # the next batch is not chosen before the dataloader asks for it
    prompts = first[::3][:4]
    assert len(set(prompts)) == 4
    assert first == [p for _ in range(2) for p in prompts for _ in range(3)]
    next(stream)
    assert sel.selections == 2
    assert sum(1 for _ in iter(sel)) == len(sel)  # a whole epoch


def test_selection_is_deterministic_and_the_same_inline_or_in_background():
    features, rates = planted()
    inline = drive(selector(features), rates, 12)
    again = drive(selector(features), rates, 12)
    threaded_selector = selector(features, background=True)
    threaded = drive(threaded_selector, rates, 12)
    assert inline == again == threaded
    assert threaded_selector.fits > 0
    other_seed = selector(features)
    other_seed.seed = 1
    assert drive(other_seed, rates, 12) != inline


def test_one_candidate_is_uniform_sampling():
    features, rates = planted()
    learnt = selector(features, candidates=1)
    drive(learnt, rates, 4)
    assert learnt.predictor.fitted
    fresh = selector(features, candidates=1)
    fresh.selections = learnt.selections
    assert sorted(learnt.next_batch()) == sorted(fresh.next_batch())  # the pool is the batch: nothing to choose


def test_state_survives_a_resume(tmp_path):
    """Save after a step (one batch already fetched ahead, a refit possibly running), load into a new selector:
    both continue with exactly the same batches."""
    import torch

    features, rates = planted()
    original = selector(features, background=True)
    ahead = drive(original, rates, 9)[-1]
    torch.save(original.state_dict(), tmp_path / STATE_FILE)
    resumed = selector(features, background=True)
    resumed.load_state_dict(torch.load(tmp_path / STATE_FILE, weights_only=True))
    continued = drive(original, rates, 8, start=9, ahead=ahead)
    replayed = drive(resumed, rates, 8, start=9)  # the batch fetched ahead comes first, then new choices
    assert replayed == continued
    assert resumed.fits == original.fits > 0


def test_a_question_in_two_batches_keeps_the_later_batch_waiting():
    features, _ = planted(size=40)
    sel = selector(features)
    sel.pending.extend([([1, 2], {1, 2}), ([2, 3], {2, 3})])  # the batch trained now, and the one fetched ahead
    sel.observe({1: [1.0, 0.0], 2: [1.0, 1.0]})
    assert [chunk for chunk, _ in sel.pending] == [[2, 3]]
    assert sel.state_dict()["replay"] == [[2, 3]]  # a resume would serve it again, whole


def test_sampler_restores_state_given_before_its_selector_exists():
    import torch

    features, rates = planted()
    sel = selector(features)
    drive(sel, rates, 3)
    sampler = GoldilocksSampler(background=False)
    sampler.load_state_dict({"rollouts": 640, "goldilocks": sel.state_dict()})
    assert sampler.group_stats.rollouts == 640 and sampler._restored is not None
    assert torch.equal(sampler._restored["seen"], sel.seen)


# --- the features ---------------------------------------------------------------------------------------------------


def fake_trainer(tmp_path):
    from types import SimpleNamespace

    return SimpleNamespace(
        args=SimpleNamespace(output_dir=str(tmp_path)), accelerator=SimpleNamespace(is_main_process=True)
    )


def test_prior_column_features_are_standardised_and_cached(tmp_path):
    import torch
    from datasets import Dataset

    from socratic_exp.samplers.goldilocks.features import FEATURES_FILE, prior_features, question_features

    raw = prior_features([0.2, None, 1.0, "n/a", 1.5])  # [p, sqrt(p (1 - p)), missing]; missing counts as 0.5
    expected = [[0.2, 0.4, 0.0], [0.5, 0.5, 1.0], [1.0, 0.0, 0.0], [0.5, 0.5, 1.0], [0.5, 0.5, 1.0]]
    assert torch.allclose(raw, torch.tensor(expected))
    data = Dataset.from_dict(
        {"prompt": ["a", "b", "c", "d"], "index": [0, 1, 2, 3], "prior_pass_rate": [0.2, None, 1.0, 0.5]}
    )
    settings = GoldilocksSampler(features="none", prior_column="prior_pass_rate")
    features = question_features(settings, fake_trainer(tmp_path), data, seed=0)
    assert features.shape == (4, 3)
    assert features.mean(0).abs().max() < 1e-6 and (features.std(0) - 1).abs().max() < 1e-5
    # a resumed run reads the matrix back (not recomputed with trained weights); other settings recompute it
    stored = torch.load(tmp_path / FEATURES_FILE, weights_only=True)
    torch.save({**stored, "features": torch.zeros(4, 3)}, tmp_path / FEATURES_FILE)
    assert question_features(settings, fake_trainer(tmp_path), data, seed=0).abs().sum() == 0
    other = GoldilocksSampler(features="none", prior_column="prior_pass_rate", projection_dim=8)
    assert torch.allclose(question_features(other, fake_trainer(tmp_path), data, seed=0), features)
    with pytest.raises(UserError, match=r"sampler\.prior_column='difficulty': is not a column"):
        question_features(
            GoldilocksSampler(features="none", prior_column="difficulty"), fake_trainer(tmp_path / "x"), data, seed=0
        )


def test_embedding_model_features_from_a_local_folder(tmp_path):
    """Any local AutoModel folder serves as the encoder (here an untrained tiny model); wide ones are projected."""
    from datasets import Dataset

    from socratic_exp.models.char_tokenizer import build_char_tokenizer
    from socratic_exp.models.tiny import TinyModel
    from socratic_exp.samplers.goldilocks.features import question_features

    tokenizer = build_char_tokenizer()
    TinyModel().build_untrained(tokenizer).save_pretrained(tmp_path / "encoder")
    tokenizer.save_pretrained(tmp_path / "encoder")
    data = Dataset.from_dict({"prompt": ["Q: 1+2=?", "Q: 3*4=?", "Q: (5-1)*2=?"], "index": [0, 1, 2]})
    encoder = str(tmp_path / "encoder")
    settings = GoldilocksSampler(features="embedding_model", embedding_model=encoder, projection_dim=16)
    features = question_features(settings, fake_trainer(tmp_path), data, seed=0)
    assert features.shape == (3, 16)
    with pytest.raises(UserError, match=r"sampler\.embedding_model='/no/such/encoder': could not be loaded"):
        question_features(
            GoldilocksSampler(features="embedding_model", embedding_model="/no/such/encoder"),
            fake_trainer(tmp_path / "y"),
            data,
            seed=0,
        )


# --- the config -------------------------------------------------------------------------------------------------


def test_goldilocks_changes_nothing_but_which_prompts():
    """Compute matching by construction: every setting that decides the rollouts spent is the same."""
    for algorithm in ("grpo", "socraticpo"):
        uniform = OmegaConf.to_container(compose(f"algorithm={algorithm}"), resolve=True)
        goldilocks = OmegaConf.to_container(compose(f"algorithm={algorithm}", "sampler=goldilocks"), resolve=True)
        assert uniform.pop("sampler") != goldilocks.pop("sampler")
        assert uniform == goldilocks


def test_sweep_crosses_sampler_algorithm_and_seed():
    jobs = job_overrides("+sweep=goldilocks_vs_uniform")  # on the testbed: the axes' values of conf/config.yaml
    cells = sorted({(job[0], job[1]) for job in jobs})
    assert cells == [("sampler=goldilocks", "algorithm=grpo"), ("sampler=goldilocks", "algorithm=socraticpo"),
                     ("sampler=uniform", "algorithm=grpo"), ("sampler=uniform", "algorithm=socraticpo")]  # fmt: skip
    assert sorted({job[2] for job in jobs}) == ["seed=0", "seed=1", "seed=2"]
    classes = {"sampler=uniform": "UniformSampler", "sampler=goldilocks": "GoldilocksSampler"}
    for sampler, algorithm in cells:
        job = ("+sweep=goldilocks_vs_uniform", sampler, algorithm)
        assert type(build_components(compose(*job)).sampler).__name__ == classes[sampler]


def test_openmath_overlay_is_the_papers_setting():
    c = build_components(compose("experiment=goldilocks_openmath"))
    assert type(c.sampler).__name__ == "GoldilocksSampler" and type(c.task).__name__ == "OpenMathTask"
    assert type(c.algorithm).__name__ == "GRPO"


# --- end to end -----------------------------------------------------------------------------------------------------

QUICK = ("debug=fast", "debug=quick_warmstart", "logger=none", "sampler=goldilocks", "sampler.update_every=4")
ALGORITHMS = {
    "grpo": ["algorithm=grpo"],
    "entropy_masked": ["algorithm=entropy_masked"],
    "socraticpo": ["algorithm=socraticpo", "teacher=rule"],
}


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_goldilocks_runs_with_every_algorithm(run_in_process, algorithm):
    proc, outputs = run_in_process(*QUICK, *ALGORITHMS[algorithm])
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 4
    logged = [r for r in read_metrics(run_dir) if "sampler/zero_variance_share" in r]
    assert [r["step"] for r in logged] == [1, 2, 3, 4]
    # 4 steps x 16 rollouts, every one observed; 4 questions per step, a refit every 4
    assert [r["sampler/rollouts"] for r in logged] == [16.0, 32.0, 48.0, 64.0]
    assert [r["sampler/updates"] for r in logged] == [1.0, 2.0, 3.0, 4.0]
    assert all(0.0 <= r["sampler/zero_variance_share"] <= 1.0 for r in logged)
    assert any("sampler/predictor_mae_unseen" in r for r in logged)
    assert all("sampler/selection_ms" in r for r in logged)
    assert (run_dir / "checkpoints" / "checkpoint-2" / STATE_FILE).is_file()
    assert (run_dir / "checkpoints" / "goldilocks_features.pt").is_file()


@pytest.mark.slow
def test_goldilocks_resumes_with_its_state(run_in_process):
    import torch

    proc, outputs = run_in_process(*QUICK, "algorithm=grpo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    saved = torch.load(run_dir / "checkpoints" / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert saved["rollouts"] == 32 and saved["goldilocks"]["fits"] == 2
    interrupt_after_step_2(run_dir)

    proc, _ = run_in_process(*QUICK, "algorithm=grpo", "resume=auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = read_summary(run_dir)
    assert resumed["status"] == "completed" and resumed["steps"] == 4
    logged = [r for r in read_metrics(run_dir) if "sampler/zero_variance_share" in r]
    assert [r["step"] for r in logged] == [1, 2, 3, 4]
    # the counters continue from the checkpoint instead of starting over
    assert [r["sampler/rollouts"] for r in logged] == [16.0, 32.0, 48.0, 64.0]
    assert [r["sampler/updates"] for r in logged] == [1.0, 2.0, 3.0, 4.0]
    assert "question features read from" in proc.stderr + proc.stdout
