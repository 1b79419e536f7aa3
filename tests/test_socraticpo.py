"""SocraticPO: reward decay and Theorem 1 (property tests), the interactive rollout, and end-to-end runs."""

from __future__ import annotations

import pytest
from conftest import compose, perturbed_reference, run_dirs
from hypothesis import given, settings
from hypothesis import strategies as st

from socratic_exp.algorithms.reinforce_pp.returns import kl_folded_returns, normalized_returns
from socratic_exp.algorithms.socraticpo.rewards import (
    attempt_metrics,
    decayed_rewards,
    normalized_advantages,
    prompt_centred,
)
from socratic_exp.core.run_folder import read_metrics, read_summary
from socratic_exp.models.base import frozen_copy


@st.composite
def batches(draw, max_attempts: int = 4):
    """Rollouts as their attempt outcomes: wrong attempts, then possibly a correct one, at most K attempts."""
    k = draw(st.integers(1, max_attempts))
    rollouts = []
    for _ in range(draw(st.integers(2, 24))):
        solved_at = draw(st.integers(1, k + 1))  # k + 1: never solved
        length = min(solved_at, k)
        rollouts.append([1.0 if step + 1 == solved_at else 0.0 for step in range(length)])
    return rollouts


def hand_example():
    # Four rollouts, K = 3: solved at step 1, at step 2, at step 3, never.
    return [[1.0], [0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]


def test_reward_decay_hand_computed():
    rewards = decayed_rewards(hand_example())
    # step 1: r = delta -> [1, 0, 0, 0]; mu_1 = 1/4
    # step 2 (rollouts 2-4 active): r = mu_1 * delta -> [1/4, 0, 0]; mu_2 = (1 + 1/4) / (4 + 3) = 5/28
    # step 3 (rollouts 3-4 active): r = mu_2 * delta -> [5/28, 0]
    assert rewards == [[1.0], [0.0, 0.25], [0.0, 0.0, pytest.approx(5 / 28)], [0.0, 0.0, 0.0]]
    assert decayed_rewards(hand_example(), decay=False) == hand_example()
    # a correct attempt at step 2 after a step-1 batch with no success earns nothing (mu_1 = 0)
    assert decayed_rewards([[0.0, 1.0], [0.0, 0.0]]) == [[0.0, 0.0], [0.0, 0.0]]
    # mu_1 = 1/3 over three rollouts; mu_2 counts every active attempt of steps 1 and 2, decayed rewards included:
    # (1 + 0 + 0 + 1/3 + 0) / 5 = 4/15
    rewards = decayed_rewards([[1.0], [0.0, 1.0], [0.0, 0.0, 1.0]])
    assert rewards == [[1.0], [0.0, pytest.approx(1 / 3)], [0.0, 0.0, pytest.approx(4 / 15)]]


def test_eq20_advantages_hand_computed():
    """Eq. 20 over the nine attempts of the hand example: rewards 1, 0, 1/4, 0, 0, 5/28, 0, 0, 0.
    mean = (1 + 1/4 + 5/28) / 9 = 10/63 = 0.158730; E[r^2] = (1 + 1/16 + 25/784) / 9 = 0.121599,
    std = sqrt(0.121599 - 0.158730^2) = 0.310489; a = (r - mean) / (std + 1e-6)."""
    advantages = normalized_advantages(decayed_rewards(hand_example()))
    wrong = -0.511225  # (0 - 0.158730) / 0.310489
    expected = [[2.709492], [wrong, 0.293954], [wrong, wrong, 0.063903], [wrong, wrong, wrong]]
    assert advantages == [[pytest.approx(a, abs=2e-6) for a in row] for row in expected]


def test_grpo_backend_normalises_within_each_prompt_group():
    # group 0 pools 1, 0, 0.5: mean 0.5, std sqrt(1/6) = 0.408248 -> +-1.224745 and 0; group 1 (0, 0): std 0 -> 0
    advantages = normalized_advantages([[1.0], [0.0, 0.5], [0.0], [0.0]], groups=[0, 0, 1, 1])
    assert advantages[0] == [pytest.approx(1.224742, abs=1e-6)]  # 0.5 / (0.408248 + 1e-6)
    assert advantages[1] == [pytest.approx(-1.224742, abs=1e-6), 0.0]
    assert advantages[2] == advantages[3] == [0.0]
    with pytest.raises(ZeroDivisionError):  # eps is what keeps a group without spread finite
        normalized_advantages([[0.0], [0.0]], groups=[0, 0], eps=0.0)
    assert normalized_advantages([[0.0], [0.0]], groups=[0, 0]) == [[0.0], [0.0]]


# --- the authors' estimator (verl's reinforce_plus_plus_baseline over attempt rows, then masked_whiten) -------------
# Two prompts x four rollouts, K = 2. Prompt A: three rollouts solved at attempt 1, the fourth at attempt 2; prompt B:
# three never solved, the fourth at attempt 2. With decay mu_1 = 3/8, so both corrected attempts earn 3/8.
PARITY_OUTCOMES = [[1.0], [1.0], [1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0]]
PARITY_PROMPTS = [0, 0, 0, 0, 1, 1, 1, 1]


def authors_advantages(rewards, lengths):
    """The authors' chain, as the trainer runs it: prompt baseline, no KL, verl's whitening over tokens."""
    centred = prompt_centred(rewards, PARITY_PROMPTS)
    returns = kl_folded_returns(centred, [[[0.0] * n for n in row] for row in lengths], 0.0)
    whitened = normalized_returns(returns, weighting="tokens", whitening="verl")
    return [[values[0] for values in row] for row in whitened], centred


def test_prompt_baseline_pools_every_attempt_of_the_prompts_rollouts():
    """A's five attempts 1, 1, 1, 0, 3/8: mean 3.375 / 5 = 0.675; B's eight 0, ..., 0, 3/8: mean 0.046875."""
    centred = prompt_centred(decayed_rewards(PARITY_OUTCOMES), PARITY_PROMPTS)
    a, b = 0.325, -0.046875
    assert centred == [
        [pytest.approx(a)], [pytest.approx(a)], [pytest.approx(a)], [pytest.approx(-0.675), pytest.approx(-0.3)],
        [b, b], [b, b], [b, b], [b, pytest.approx(0.328125)],
    ]  # fmt: skip
    # without decay the corrected attempts earn 1: A's mean 0.8 -> +0.2; B's 0.125 -> +0.875
    centred = prompt_centred(decayed_rewards(PARITY_OUTCOMES, decay=False), PARITY_PROMPTS)
    assert centred[3] == [pytest.approx(-0.8), pytest.approx(0.2)] and centred[7][1] == pytest.approx(0.875)
    assert prompt_centred([[1.0]], [0]) == [[1.0]]  # a group of one: verl's baseline is 0
    assert prompt_centred([[1.0], [0.0]], [0, 0]) == [[0.5], [-0.5]]  # two attempts: their mean
    with pytest.raises(ValueError):
        prompt_centred([[1.0], [0.0]], [0])


def test_verl_whitening_uses_the_unbiased_variance_with_eps_inside_the_root():
    """Three tokens 1, 1, 0: mean 2/3, population variance 2/9, unbiased 2/9 * 3/2 = 1/3 -> +-(x - 2/3) * sqrt(3)."""
    advantages = normalized_returns([[[1.0, 1.0]], [[0.0]]], weighting="tokens", whitening="verl")
    assert advantages == [[[pytest.approx(0.577350, abs=1e-6)] * 2], [[pytest.approx(-1.154700, abs=1e-6)]]]
    # ours, for contrast: population std sqrt(2/9) = 0.471405 + eps
    ours = normalized_returns([[[1.0, 1.0]], [[0.0]]], weighting="tokens", eps=1e-6)
    assert ours[0][0][0] == pytest.approx(0.707105, abs=1e-6)
    # two tokens 1, 0: unbiased variance 0.25 * 2 / 1 = 0.5 -> +-0.5 / sqrt(0.5)
    assert normalized_returns([[[1.0]], [[0.0]]], weighting="tokens", whitening="verl") == [
        [[pytest.approx(0.707107, abs=1e-6)]],
        [[pytest.approx(-0.707107, abs=1e-6)]],
    ]
    # no spread: rsqrt(0 + 1e-8) keeps it finite, and a single token has no variance at all
    assert normalized_returns([[[0.5]], [[0.5]]], weighting="tokens", whitening="verl") == [[[0.0]], [[0.0]]]
    assert normalized_returns([[[0.5]]], weighting="tokens", whitening="verl") == [[[0.0]]]


@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        # one token per attempt: each prompt's centred rewards sum to 0, so mu = 0; the unbiased variance is
        # (3 * 0.325^2 + 0.675^2 + 0.3^2 + 7 * 0.046875^2 + 0.328125^2) / 12 = 0.985547 / 12 = 0.0821289
        (
            [[1], [1], [1], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1]],
            [1.134058, 1.134058, 1.134058, -2.355351, -1.046823, *[-0.163566] * 7, 1.144963],
        ),
        # unequal lengths: 2, 2, 2, (3, 1), (1, 1) x 3, (2, 4) tokens; N = 25, mu = 0.6392 / 25 = 0.0255682, and
        # the unbiased variance 0.120214: whitening shifts every value, a corrected attempt of A stays negative
        (
            [[2], [2], [2], [3, 1], [1, 1], [1, 1], [1, 1], [2, 4]],
            [0.863617, 0.863617, 0.863617, -2.020569, -0.938999, *[-0.20894] * 7, 0.87263],
        ),
    ],
)
def test_authors_estimator_parity_by_hand(lengths, expected):
    """The authors' advantages of the parity batch (decay on): A's corrected attempt is negative, -0.3 before
    whitening, where Theorem 1 (ours) keeps every correct attempt non-negative."""
    advantages, centred = authors_advantages(decayed_rewards(PARITY_OUTCOMES), lengths)
    assert centred[3][1] == pytest.approx(-0.3)
    flat = [value for row in advantages for value in row]
    assert flat == [pytest.approx(value, abs=2e-6) for value in expected]
    assert advantages[3][1] < 0


def test_our_estimator_on_the_parity_batch_by_hand():
    """Ours on the same batch: Eq. 20 over its 13 attempts, rewards 1, 1, 1, 0, 3/8, 0 x 7, 3/8. mean = 3.75 / 13 =
    0.288462; E[r^2] = 3.28125 / 13 = 0.252404; std = sqrt(0.252404 - 0.083210) = 0.411332. The corrected attempts:
    (0.375 - 0.288462) / 0.411332 = +0.210386 (Theorem 1: non-negative)."""
    advantages = normalized_advantages(decayed_rewards(PARITY_OUTCOMES))
    wrong, first, corrected = -0.701285, 1.729837, 0.210386
    expected = [[first]] * 3 + [[wrong, corrected]] + [[wrong, wrong]] * 3 + [[wrong, corrected]]
    assert advantages == [[pytest.approx(a, abs=2e-6) for a in row] for row in expected]


# The KL hand example (REINFORCE++'s folding, beta = 0.5). Rollout 0 solved at once (r = 1) in two tokens with
# k1 KL 0.2, 0.4; rollout 1 wrong at attempt 1 (one token, KL 0.2), then right at attempt 2 with the decayed
# reward 0.5 in two tokens with KL 0.2, -0.2 (k1 can be negative).
KL_REWARDS = [[1.0], [0.0, 0.5]]
KL_VALUES = [[[0.2, 0.4]], [[0.2], [0.2, -0.2]]]


def test_kl_is_folded_into_each_attempts_return_to_go():
    # G_t = r - 0.5 * (KL of tokens t.. of the same attempt): 1 - 0.5 * 0.6, 1 - 0.5 * 0.4 | 0 - 0.5 * 0.2 |
    # 0.5 - 0.5 * 0.0, 0.5 - 0.5 * (-0.2)
    returns = kl_folded_returns(KL_REWARDS, KL_VALUES, 0.5)
    expected = [[[0.7, 0.8]], [[-0.1], [0.5, 0.6]]]
    assert returns == [[[pytest.approx(g) for g in attempt] for attempt in rollout] for rollout in expected]
    assert kl_folded_returns(KL_REWARDS, KL_VALUES, 0.0) == [[[1.0, 1.0]], [[0.0], [0.5, 0.5]]]


def test_folded_returns_are_normalised_per_attempt_then_per_token():
    returns = [[[0.7, 0.8]], [[-0.1], [0.5, 0.6]]]
    # attempts: token weights 1/2, 1/2 | 1 | 1/2, 1/2 (total 3). mean = (0.75 - 0.1 + 0.55) / 3 = 0.4;
    # variance = (0.5 (0.3^2 + 0.4^2) + 0.5^2 + 0.5 (0.1^2 + 0.2^2)) / 3 = 0.4 / 3, std = 0.365148
    by_attempt = normalized_returns(returns, eps=0.0)
    expected = [[[0.821584, 1.095445]], [[-1.369306], [0.273861, 0.547723]]]
    assert by_attempt == [[[pytest.approx(a, abs=1e-6) for a in att] for att in rollout] for rollout in expected]
    # tokens: each of the five counts once. mean = 2.5 / 5 = 0.5; variance = (0.04 + 0.09 + 0.36 + 0 + 0.01) / 5
    # = 0.1, std = 0.316228
    by_token = normalized_returns(returns, weighting="tokens", eps=0.0)
    expected = [[[0.632456, 0.948683]], [[-1.897367], [0.0, 0.316228]]]
    assert by_token == [[[pytest.approx(a, abs=1e-6) for a in att] for att in rollout] for rollout in expected]
    # the default epsilon, 1e-6, is in the denominator: 0.3 / (0.365148 + 1e-6)
    assert normalized_returns(returns)[0][0][0] == pytest.approx(0.821582, abs=1e-6)


def test_kl_enters_before_the_normalisation_not_after():
    """The issue's bug: subtracting beta * KL-to-go from the normalised advantage leaves the KL unscaled by the
    batch std and outside the mean. Here the folded advantages are the hand-computed ones above, not
    Eq. 20's advantages of the rewards 1, 0, 0.5 (1.224745, -1.224745, 0) minus 0.5 * KL-to-go."""
    advantages = normalized_returns(kl_folded_returns(KL_REWARDS, KL_VALUES, 0.5), eps=0.0)
    assert advantages[0][0][0] == pytest.approx(0.821584, abs=1e-6)  # not 1.224745 - 0.3 = 0.924745
    assert advantages[1][0][0] == pytest.approx(-1.369306, abs=1e-6)  # not -1.224745 - 0.1 = -1.324745


def test_without_kl_the_token_advantages_are_eq20_per_attempt():
    # rewards 1, 0, 0.5 in attempts of 2, 1 and 3 tokens: per-attempt weighting gives Eq. 20's +-1.224745 and 0
    # whatever the lengths; per-token weighting counts the six tokens 1, 1, 0, 0.5, 0.5, 0.5: mean 0.583333,
    # variance (2 * 0.416667^2 + 0.583333^2 + 3 * 0.083333^2) / 6 = 0.118056, std 0.343592 -> 1.212678, -1.697749,
    # -0.242536
    returns = kl_folded_returns([[1.0], [0.0, 0.5]], [[[0.0, 0.0]], [[0.0], [0.0, 0.0, 0.0]]], 0.01)
    by_attempt = normalized_returns(returns, eps=0.0)
    assert by_attempt[0] == [[pytest.approx(1.224745, abs=1e-6)] * 2]
    assert by_attempt[1] == [[pytest.approx(-1.224745, abs=1e-6)], [pytest.approx(0.0, abs=1e-9)] * 3]
    by_token = normalized_returns(returns, weighting="tokens", eps=0.0)
    assert by_token[0] == [[pytest.approx(1.212678, abs=1e-6)] * 2]
    assert by_token[1] == [[pytest.approx(-1.697749, abs=1e-6)], [pytest.approx(-0.242536, abs=1e-6)] * 3]


def test_shapes_must_match():
    assert decayed_rewards([]) == [] and normalized_returns([]) == []
    with pytest.raises(ValueError):  # one KL list per attempt
        kl_folded_returns([[1.0], [0.0, 0.5]], [[[0.1]], [[0.2]]], 0.5)
    with pytest.raises(ValueError):  # one KL list per rollout
        kl_folded_returns([[1.0], [0.0]], [[[0.1]]], 0.5)
    with pytest.raises(ValueError):  # one group per rollout
        normalized_returns([[[1.0]], [[0.0]]], groups=[0])


def test_an_attempt_without_tokens_stays_out_of_the_statistics():
    # values 1, 1 (one attempt, weight 1/2 each) and 0 (weight 1): mean 0.5, std 0.5; the empty attempt adds nothing
    advantages = normalized_returns([[[1.0, 1.0]], [[], [0.0]]], eps=0.0)
    assert advantages == [[[1.0, 1.0]], [[], [-1.0]]]
    assert normalized_returns([[[1.0, 1.0]], [[], [0.0]]], groups=[0, 1], eps=1.0) == [[[0.0, 0.0]], [[], [0.0]]]


@settings(max_examples=300, deadline=None)
@given(batches())
def test_theorem1_correct_attempts_have_non_negative_advantage(rollouts):
    advantages = normalized_advantages(decayed_rewards(rollouts))
    for outcomes, values in zip(rollouts, advantages, strict=True):
        for delta, value in zip(outcomes, values, strict=True):
            if delta == 1.0:
                assert value >= -1e-9


@settings(max_examples=300, deadline=None)
@given(batches())
def test_theorem1_earlier_correct_attempts_get_larger_advantage(rollouts):
    """A rollout still active at a later step was wrong before it, so p_k < 1 there: the inequality is strict
    whenever the earlier correct attempt earned a positive reward (mu_{k-1} > 0)."""
    rewards = decayed_rewards(rollouts)
    advantages = normalized_advantages(rewards)
    correct = [(len(o), r[-1], a[-1]) for o, r, a in zip(rollouts, rewards, advantages, strict=True) if o[-1] == 1.0]
    for step_i, reward_i, value_i in correct:
        for step_j, _, value_j in correct:
            if step_i < step_j:
                assert value_i > value_j if reward_i > 0 else value_i >= value_j - 1e-9


def test_theorem1_advantage_vanishes_as_correction_saturates():
    """p_t -> 1: nearly every active rollout corrected at step 2 -> their advantage -> 0."""
    values = []
    for n in (10, 100, 1000):
        rollouts = [[1.0]] * n + [[0.0, 1.0]] * n + [[0.0, 0.0]]  # one of n + 1 active rollouts not corrected
        values.append(normalized_advantages(decayed_rewards(rollouts))[n][1])
    assert values[0] > values[1] > values[2] >= 0 and values[2] < 0.02


def test_attempt_metrics_follow_the_active_sets():
    rollouts = hand_example()
    metrics = attempt_metrics(rollouts, decayed_rewards(rollouts), 4)
    assert metrics["unassisted_acc"] == 0.25 and metrics["guided_acc/step1"] == 0.25
    assert metrics["guided_acc/step2"] == 0.5 and metrics["guided_acc/step3"] == 0.75
    assert metrics["active_share/step1"] == 1.0
    assert metrics["active_share/step2"] == 0.75 and metrics["active_share/step3"] == 0.5
    assert metrics["correction_rate/step1"] == 0.25
    assert metrics["correction_rate/step2"] == pytest.approx(1 / 3) and metrics["correction_rate/step3"] == 0.5
    assert metrics["attempts_per_rollout"] == 9 / 4
    assert metrics["reward_before_decay"] == pytest.approx(3 / 9)  # three correct attempts among nine
    assert metrics["reward_after_decay"] == pytest.approx(10 / 63)  # (1 + 1/4 + 5/28) / 9
    # step 4: no rollout is active, so there is no correction rate to report
    assert metrics["guided_acc/step4"] == 0.75 and metrics["active_share/step4"] == 0.0
    assert "correction_rate/step4" not in metrics


def test_kl_defaults_follow_the_backend():
    from socratic_exp.runtime.assembly import build_components

    default = build_components(compose()).algorithm
    assert default.kl_coef is None and default.reward_kl_coef == 0.01  # OpenRLHF's REINFORCE++ default
    assert default.loss_type == "dapo" and default.normalize_over == "attempts"
    grpo = build_components(compose("algorithm.backend=grpo", "algorithm.beta=0.01")).algorithm
    assert grpo.reward_kl_coef == 0.0
    assert build_components(compose("algorithm.kl_coef=0")).algorithm.reward_kl_coef == 0.0
    assert build_components(compose("algorithm.kl_coef=0.05")).algorithm.reward_kl_coef == 0.05


def test_vllm_runs_without_trls_importance_sampling_correction():
    """The interactive rollout returns no sampling log-probabilities: TRL's correction is off, not a crash."""
    from types import SimpleNamespace

    from socratic_exp.algorithms import builder
    from socratic_exp.runtime.assembly import build_components

    components = build_components(compose("algorithm.use_vllm=true", "model=smollm2_135m"))  # vLLM loads it
    build, student = builder(components.algorithm), SimpleNamespace(chat_template_kwargs={})
    ctx = SimpleNamespace(checkpoint_dir="out", run_name="r", seed=0, report_to=[], student=student,
                          components=components)  # fmt: skip
    assert type(build).__name__ == "SocraticPOBuild"
    assert build.trl_kwargs(ctx)["vllm_importance_sampling_correction"] is False
    assert build.trl_kwargs(ctx)["use_vllm"] is True


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.loss_type=grpo"], "algorithm.loss_type='grpo': weighs a token by its packed rollout"),
        (["algorithm.loss_type=bnpo"], "(fix: set algorithm.loss_type=dapo"),
        (["+algorithm.trl_args.importance_sampling_level=sequence"], "sets a sequence-level importance ratio"),
        (
            ["algorithm.use_vllm=true", "+algorithm.trl_args.vllm_importance_sampling_correction=true"],
            "turns on TRL's vLLM importance-sampling correction",
        ),
        (["algorithm.backend=grpo", "algorithm.kl_coef=0.01"], "algorithm.kl_coef=0.01: folds the KL"),
        (["algorithm.beta=0.01"], "algorithm.beta=0.01: is TRL's KL in the loss"),
        (["algorithm.kl_coef=-1"], "algorithm.kl_coef=-1.0: must be >= 0.0"),
        (["algorithm.normalize_over=rollouts"], "algorithm.normalize_over='rollouts': expected one of"),
        (["algorithm.backend=grpo", "algorithm.baseline=prompt"], "algorithm.baseline='prompt': subtracts a prompt"),
        (["algorithm.whitening=population"], "algorithm.whitening='population': expected one of"),
    ],
)
def test_socraticpo_refuses_settings_its_advantages_do_not_hold_under(overrides, message):
    from socratic_exp.core.errors import ConfigError
    from socratic_exp.runtime.assembly import build_components

    with pytest.raises(ConfigError) as raised:
        build_components(compose("algorithm=socraticpo", *overrides))
    assert message in str(raised.value) and "\n" not in str(raised.value)
    build_components(compose("algorithm=socraticpo", "algorithm.loss_type=cispo"))  # token-level too: accepted


# --- the interactive rollout on the tiny model ---------------------------------------------------------------


@pytest.fixture(scope="module")
def rollout_trainer(tmp_path_factory):
    """A SocraticPO trainer on the quickly warm-started tiny student, with the rule teacher."""
    from socratic_exp.runtime.assembly import build_components

    cache = tmp_path_factory.mktemp("cache")
    cfg = compose(
        "algorithm=socraticpo", "teacher=rule", "debug=fast", "debug=quick_warmstart", "logger=none",
        f"model.cache_dir={cache}",
    )  # fmt: skip
    from socratic_exp.runtime.assembly import build_trainer, workbench

    c = build_components(cfg, {"algorithm": "socraticpo"})
    bench = workbench(c)  # the student loaded, the teacher attached, the task's rows rendered
    student, data = bench.student, bench.splits
    trainer = build_trainer(bench, cache / "run")
    rows = [dict(data["train"][i]) for i in range(8) for _ in range(4)]
    calls = []
    guide = c.teacher.guide
    c.teacher.guide = lambda requests: calls.append(list(requests)) or guide(requests)
    trainer.model.train()  # as in the training loop: the rollout's metrics are training metrics
    output = trainer._generate_and_score_completions(rows)
    return trainer, output, calls, student.tokenizer


@pytest.mark.slow
def test_rollout_guidance_only_after_wrong_attempts_and_never_after_the_last(rollout_trainer):
    trainer, output, calls, tokenizer = rollout_trainer
    K = trainer.socratic.max_attempts
    mask = output["tool_mask"]
    for i, rollout in enumerate(trainer._rollouts):
        assert 1 <= len(rollout.outcomes) <= K
        assert all(d == 0.0 for d in rollout.outcomes[:-1])  # the rollout stopped at its first correct attempt
        gaps = [(end, start) for (_, end), (start, _) in zip(rollout.segments, rollout.segments[1:], strict=False)]
        for end, start in gaps:  # between two attempts: only teacher tokens (mask 0), and some of them
            assert start > end and mask[i, end:start].sum() == 0
        last_end = rollout.segments[-1][1]
        assert mask[i, :last_end].sum() == sum(e - s for s, e in rollout.segments)  # attempts: mask 1
        teacher_text = tokenizer.decode(output["completion_ids"][i, :last_end][mask[i, :last_end] == 0])
        assert teacher_text.count("Hint:") == len(rollout.outcomes) - 1
    # the teacher was asked exactly about the wrong, non-final attempts, each with its attempt history
    asked = [len(request.attempts) for batch in calls for request in batch]
    expected = [k + 1 for r in trainer._rollouts for k in range(len(r.outcomes) - 1)]
    assert sorted(asked) == sorted(expected)
    assert all(request.latest.score == 0.0 for batch in calls for request in batch)


@pytest.mark.slow
def test_rollout_teacher_tokens_carry_no_loss(rollout_trainer):
    """A token TRL's loss masks (tool_mask 0) gets zero gradient whatever its advantage."""
    import torch

    trainer, output, _, _ = rollout_trainer
    inputs = dict(output)
    trainer.model.train()
    trainer.model.zero_grad()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test skips
    inputs["advantages"] = torch.zeros_like(output["advantages"])
    teacher_positions = (output["tool_mask"] == 0) & (output["completion_mask"] == 1)
    assert teacher_positions.any()
    inputs["advantages"][teacher_positions] = 100.0  # only teacher tokens have a non-zero advantage
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert all(float(g.abs().sum()) == 0.0 for g in grads)


@pytest.mark.slow
def test_rollout_advantages_and_counts_match_the_active_sets(rollout_trainer):
    """Wiring: each attempt's tokens get (r - mean) / (std + eps) over the batch's attempts (Eq. 20; the KL to the
    initial policy is 0 before the first update, the copy having the same weights: to float rounding, the policy's
    log-probabilities being those recorded as the tokens were sampled), teacher tokens 0, and the logged counts
    follow the rollouts."""
    import statistics

    trainer, output, _, _ = rollout_trainer
    assert trainer.socratic.reward_kl_coef == 0.01 and trainer.ref_policy is not None
    assert float(trainer._per_token_kl(output).abs().max()) < 1e-5
    # The quickly warm-started student may solve nothing in one batch (every advantage 0): give the attempts
    # rewards of our own, 0.1 * (rollout index % 4) * attempt number, and compute Eq. 20 here.
    original = trainer._rewards
    trainer._rewards = [
        [0.1 * (i % 4) * (k + 1) for k in range(len(r.outcomes))] for i, r in enumerate(trainer._rollouts)
    ]
    try:
        advantages = trainer._token_advantages(output)
    finally:
        rewards, trainer._rewards = trainer._rewards, original
    counted = [
        reward for r, values in zip(trainer._rollouts, rewards, strict=True)
        for (start, end), reward in zip(r.segments, values, strict=True) if end > start
    ]  # fmt: skip
    mean, std = statistics.fmean(counted), statistics.pstdev(counted)
    assert std > 0.1
    for i, rollout in enumerate(trainer._rollouts):
        for (start, end), reward in zip(rollout.segments, rewards[i], strict=True):
            assert torch_close(advantages[i, start:end], (reward - mean) / (std + 1e-6))
    assert float(advantages[output["tool_mask"] == 0].abs().max()) == 0.0
    outcomes = [r.outcomes for r in trainer._rollouts]
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("socraticpo/")}
    n = len(outcomes)
    for k in range(trainer.socratic.max_attempts):
        assert logged[f"socraticpo/active_share/step{k + 1}"] == sum(len(o) > k for o in outcomes) / n
    assert logged["socraticpo/attempts_per_rollout"] == sum(map(len, outcomes)) / n
    assert logged["socraticpo/generated_tokens"] == sum(e - s for r in trainer._rollouts for s, e in r.segments)
    assert abs(logged["socraticpo/reward_kl"]) < 1e-6


@pytest.mark.slow
def test_rollout_advantages_under_the_authors_estimator(rollout_trainer):
    """Wiring of the authors' settings (baseline=prompt, whitening=verl, normalize_over=tokens, no KL): each
    attempt's tokens get (r - its prompt's mean over every attempt - mu) / sqrt(unbiased var + 1e-8), mu and var
    over every student token of the batch; the prompts are TRL's groups of num_generations rollouts."""
    import dataclasses
    import math

    trainer, output, _, _ = rollout_trainer
    assert trainer.num_generations == 4  # the fixture's rows: 8 prompts x 4 rollouts, in TRL's order
    settings, original = trainer.socratic, trainer._rewards
    trainer.socratic = dataclasses.replace(
        settings, baseline="prompt", whitening="verl", normalize_over="tokens", kl_coef=0.0
    )
    trainer._rewards = [
        [0.1 * (i % 4) * (k + 1) for k in range(len(r.outcomes))] for i, r in enumerate(trainer._rollouts)
    ]
    try:
        advantages = trainer._token_advantages(output)
    finally:
        rewards, trainer._rewards, trainer.socratic = trainer._rewards, original, settings
    means = {}
    for prompt in range(8):
        pooled = [reward for i in range(4 * prompt, 4 * prompt + 4) for reward in rewards[i]]
        means[prompt] = sum(pooled) / len(pooled)
    tokens = [
        (rewards[i][k] - means[i // 4], end - start)
        for i, r in enumerate(trainer._rollouts) for k, (start, end) in enumerate(r.segments)
    ]  # fmt: skip
    n = sum(count for _, count in tokens)
    mu = sum(value * count for value, count in tokens) / n
    var = sum((value - mu) ** 2 * count for value, count in tokens) / (n - 1)
    assert var > 0.001
    for i, rollout in enumerate(trainer._rollouts):
        for k, (start, end) in enumerate(rollout.segments):
            expected = (rewards[i][k] - means[i // 4] - mu) / math.sqrt(var + 1e-8)
            assert torch_close(advantages[i, start:end], expected)
    assert float(advantages[output["tool_mask"] == 0].abs().max()) == 0.0


@pytest.mark.slow
def test_rollout_folds_the_kl_into_the_returns_before_normalising(rollout_trainer):
    """With a reference that differs from the policy, within an attempt A_t - A_(t+1) = -beta * kl_t / (std + eps),
    one factor for the whole batch; the attempt-weighted mean of the advantages is 0 and their variance 1; teacher
    tokens and padding get 0."""
    import torch

    trainer, output, _, _ = rollout_trainer
    with perturbed_reference(trainer):
        kl = trainer._per_token_kl(output)
        advantages = trainer._token_advantages(output)
    ratios, weighted_sum, weighted_squares, attempts = [], 0.0, 0.0, 0
    for i, rollout in enumerate(trainer._rollouts):
        for start, end in rollout.segments:
            if start == end:  # a bare end-of-sequence attempt: no tokens, out of the statistics (rewards.py)
                continue
            values = advantages[i, start:end].double()
            steps, token_kl = values[:-1] - values[1:], kl[i, start : end - 1].double()
            ratios += (steps / token_kl)[token_kl.abs() > 0.02].tolist()  # float32 advantages: skip tiny KLs
            weighted_sum += float(values.mean())
            weighted_squares += float((values**2).mean())
            attempts += 1
    assert float(kl.abs().max()) > 1e-3
    factor = sum(ratios) / len(ratios)
    assert len(ratios) > 10 and factor < 0 and all(abs(r - factor) < 1e-2 * abs(factor) for r in ratios)
    assert weighted_sum / attempts == pytest.approx(0.0, abs=1e-5)
    assert weighted_squares / attempts == pytest.approx(1.0, abs=1e-4)
    student = torch.zeros_like(advantages, dtype=torch.bool)
    for i, rollout in enumerate(trainer._rollouts):
        for start, end in rollout.segments:
            student[i, start:end] = True
    assert float(advantages[~student].abs().max()) == 0.0


@pytest.mark.slow
def test_length_bucketed_log_probs_equal_trl_unchunked(rollout_trainer):
    """The packed rollouts' log-probabilities and entropies, scored in trimmed length-sorted chunks, are TRL's."""
    import torch

    trainer, output, _, _ = rollout_trainer
    input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    keep = output["completion_ids"].size(1)
    lengths = output["completion_mask"].sum(1)
    assert lengths.max() > 1.5 * lengths.min()  # the case the chunking is for
    from trl import GRPOTrainer

    with torch.no_grad():
        ours = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention, keep, None, True)
        theirs = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, trainer.model, input_ids, attention, keep, compute_entropy=True
        )
    mask = output["completion_mask"].bool()
    for mine, reference in zip(ours[:2], theirs[:2], strict=True):
        assert mine.shape == reference.shape
        assert torch.allclose(mine[mask], reference[mask], atol=1e-4)


def torch_close(tensor, value: float) -> bool:
    return bool(((tensor - value).abs() < 1e-5).all())


# --- end to end ----------------------------------------------------------------------------------------------

# the paper's ablation cells (without teacher guidance, without reward decay, self-guidance) run end to end in
# test_paper_sweeps' SocraticPO sweep
VARIANTS = {
    "reinforce_pp": [],
    "grpo_backend": ["algorithm.backend=grpo", "algorithm.beta=0.01"],
    "no_kl": ["algorithm.kl_coef=0"],
    "entropy_mask": ["algorithm.entropy_mask={rho:0.25,mode:top}"],
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_socraticpo_runs_end_to_end(run_in_process, variant):
    proc, outputs = run_in_process(
        "algorithm=socraticpo", "teacher=rule", "debug=fast", "debug=quick_warmstart", "logger=none",
        *VARIANTS[variant],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 4
    lines = read_metrics(run_dir)
    train = [line for line in lines if "socraticpo/unassisted_acc" in line]
    assert len(train) == 4
    assert all(0 <= line["socraticpo/correction_rate/step1"] <= 1 for line in train)
    assert "eval/assisted_acc" in summary["final"]
    kept = [line["entropy_mask/kept_fraction"] for line in lines if "entropy_mask/kept_fraction" in line]
    if variant == "entropy_mask":  # the share of the student's tokens only: teacher turns are outside the mask
        assert len(kept) == 4 and all(abs(k - 0.25) < 0.01 for k in kept)
    else:
        assert not kept


@pytest.mark.slow
def test_the_authors_preset_runs_end_to_end_on_the_testbed(run_in_process):
    """algorithm=socraticpo_official: two attempts at most, no KL (no reference copy), one rollout batch for four
    updates (steps_per_generation 4: 64 completions generated, 16 per update)."""
    proc, outputs = run_in_process(
        "algorithm=socraticpo_official", "teacher=rule", "debug=fast", "debug=quick_warmstart", "logger=none"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 4
    config = summary["config"]["algorithm"]
    assert (config["max_attempts"], config["baseline"], config["whitening"], config["kl_coef"]) == (
        2,
        "prompt",
        "verl",
        0,
    )
    lines = read_metrics(run_dir)
    rollouts = [line for line in lines if "socraticpo/unassisted_acc" in line]
    assert len(rollouts) == 1  # the four updates share one generation batch
    assert "socraticpo/active_share/step2" in rollouts[0] and "socraticpo/active_share/step3" not in rollouts[0]
    assert not any("socraticpo/reward_kl" in line for line in lines)


def test_socraticpo_needs_a_teacher_for_teacher_guidance():
    from socratic_exp.core.errors import ConfigError
    from socratic_exp.runtime.assembly import build_components

    with pytest.raises(ConfigError, match="needs a teacher"):
        build_components(compose("algorithm=socraticpo", "teacher=none"), {"algorithm": "socraticpo"})
    build_components(compose("algorithm=socraticpo", "teacher=none", "algorithm.guidance=fixed_retry"))


@pytest.mark.slow
def test_teacher_student_kl_is_zero_for_the_same_weights_and_positive_otherwise(rollout_trainer):
    import torch

    trainer, output, _, _ = rollout_trainer
    trainer.kl_teacher = frozen_copy(trainer.model)
    assert trainer._teacher_student_kl(output) == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        for parameter in trainer.kl_teacher.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    assert trainer._teacher_student_kl(output) > 1e-3  # and the student's own weights did not move with the copy
    assert not torch.equal(next(trainer.kl_teacher.parameters()), next(trainer.model.parameters()))
    trainer.kl_teacher = None
