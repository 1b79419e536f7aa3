"""``sampler=goldilocks``: the target and the selection rule on hand examples, the predictor on a planted difficulty
signal, the batch structure TRL expects, determinism, the state across a resume, and a run with every algorithm."""

from __future__ import annotations

import json
import math
import random
import shutil

import pytest
from conftest import compose, read_summary, run_dirs
from omegaconf import OmegaConf

from socratic_exp.components import build_components
from socratic_exp.errors import UserError
from socratic_exp.hydra_support import sweeps_dir
from socratic_exp.samplers.base import STATE_FILE, GroupStats, group_rewards, utility
from socratic_exp.samplers.goldilocks import GoldilocksSampler, GoldilocksSelector, select_from_pool
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


# --- the selection rule -------------------------------------------------------------------------------------------

SCORES = [0.1, 0.4, 0.3, 0.4, 0.0]


def test_greedy_takes_the_best_and_ties_keep_pool_order():
    rng = random.Random(0)
    assert select_from_pool(SCORES, 2, rng) == [1, 3]
    assert select_from_pool(SCORES, 3, rng) == [1, 3, 2]
    assert select_from_pool(SCORES, 9, rng) == [1, 3, 2, 0, 4]  # never more than the pool


def test_softmax_is_greedy_at_low_temperature_and_uniform_at_high():
    distinct = [0.1, 0.45, 0.3, 0.2, 0.0]
    for seed in range(20):
        assert select_from_pool(distinct, 2, random.Random(seed), "softmax", temperature=1e-4) == [1, 2]
    counts = [0] * 5
    trials = 5000
    for seed in range(trials):
        counts[select_from_pool(distinct, 1, random.Random(seed), "softmax", temperature=1e3)[0]] += 1
    assert all(abs(c / trials - 0.2) < 0.03 for c in counts), counts
    # in between: the higher the utility, the more often it is drawn
    counts = [0] * 5
    for seed in range(trials):
        counts[select_from_pool(distinct, 1, random.Random(seed), "softmax", temperature=0.1)[0]] += 1
    assert counts[1] > counts[2] > counts[3] > counts[0] > counts[4], counts


def test_epsilon_explores_the_given_share_uniformly():
    distinct = [0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
    picks = [select_from_pool(distinct, 1, random.Random(seed), epsilon=0.3)[0] for seed in range(6000)]
    explored = sum(p != 0 for p in picks) / len(picks)
    assert explored == pytest.approx(0.3 * 5 / 6, abs=0.02)  # an exploring pick hits the best 1 time in 6
    for other in range(1, 6):
        assert picks.count(other) / len(picks) == pytest.approx(0.05, abs=0.012)
    every = select_from_pool(distinct, 6, random.Random(1), epsilon=1.0)
    assert sorted(every) == list(range(6))  # always distinct


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
    mean = sum(t for _, t in sel.buffer) / len(sel.buffer)
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

    from socratic_exp.samplers.question_features import FEATURES_FILE, prior_features, question_features

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
    from socratic_exp.samplers.question_features import question_features

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
    params = OmegaConf.load(sweeps_dir() / "goldilocks_vs_uniform.yaml").hydra.sweeper.params
    assert set(str(params.sampler).split(",")) == {"uniform", "goldilocks"}
    assert set(str(params.algorithm).split(",")) == {"grpo", "socraticpo"}
    assert len(str(params.seed).split(",")) == 3
    classes = {"uniform": "UniformSampler", "goldilocks": "GoldilocksSampler"}
    for sampler in classes:
        for algorithm in ("grpo", "socraticpo"):
            job = ("+sweep=goldilocks_vs_uniform", f"sampler={sampler}", f"algorithm={algorithm}")
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


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_goldilocks_runs_with_every_algorithm(run_app, algorithm):
    proc, outputs = run_app(*QUICK, *ALGORITHMS[algorithm])
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 4
    logged = [r for r in _records(run_dir) if "sampler/zero_variance_share" in r]
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
def test_goldilocks_resumes_with_its_state(run_app):
    import torch

    proc, outputs = run_app(*QUICK, "algorithm=grpo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    saved = torch.load(run_dir / "checkpoints" / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert saved["rollouts"] == 32 and saved["goldilocks"]["fits"] == 2
    shutil.rmtree(run_dir / "checkpoints" / "checkpoint-4")
    shutil.rmtree(run_dir / "checkpoints" / "final")
    summary = read_summary(run_dir)
    summary["status"] = "running"
    (run_dir / "summary.json").write_text(json.dumps(summary))

    proc, _ = run_app(*QUICK, "algorithm=grpo", "resume=auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = read_summary(run_dir)
    assert resumed["status"] == "completed" and resumed["steps"] == 4
    logged = [r for r in _records(run_dir) if "sampler/zero_variance_share" in r]
    assert [r["step"] for r in logged] == [1, 2, 3, 4]
    # the counters continue from the checkpoint instead of starting over
    assert [r["sampler/rollouts"] for r in logged] == [16.0, 32.0, 48.0, 64.0]
    assert [r["sampler/updates"] for r in logged] == [1.0, 2.0, 3.0, 4.0]
    assert "question features read from" in proc.stderr + proc.stdout
