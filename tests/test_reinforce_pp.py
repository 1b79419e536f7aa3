"""``algorithm=reinforce_pp``: REINFORCE++'s returns by hand (KL folded in, the group baseline, batch
normalisation), its trainer's advantages, and the same advantages as SocraticPO's backend when there is no guidance."""

from __future__ import annotations

import pytest

from socratic_exp.algorithms.reinforce_pp.returns import group_centred, kl_folded_returns, normalized_returns
from socratic_exp.core.config import compose
from socratic_exp.core.errors import ConfigError
from socratic_exp.runtime.assembly import build_components, trainer_from

FAST = ("debug=fast", "logger=none", "algorithm.log_completions=false")


def test_the_group_baseline_subtracts_each_prompts_mean():
    assert group_centred([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], 2) == [0.5, -0.5, 0.0, 0.0, 0.0, 0.0]
    assert group_centred([1.0, 0.0, 0.0, 0.0], 4) == [0.75, -0.25, -0.25, -0.25]
    with pytest.raises(ValueError, match="groups of 4"):
        group_centred([1.0, 0.0], 4)


def test_one_segment_per_response_returns_by_hand():
    """Rewards 1 and 0, tokens' KL [0.2, 0.1] and [0.4], beta 0.5: returns-to-go [1 - 0.15, 1 - 0.05] and [-0.2].
    Each response counting once (its tokens weigh 1/2 each): mean (0.425 + 0.475 - 0.2) / 2 = 0.35, variance
    (0.5 x 0.5^2 + 0.5 x 0.6^2 + 0.55^2) / 2 = 0.30375."""
    returns = kl_folded_returns([[1.0], [0.0]], [[[0.2, 0.1]], [[0.4]]], 0.5)
    assert returns == [[[pytest.approx(0.85), pytest.approx(0.95)]], [[pytest.approx(-0.2)]]]
    by_response = normalized_returns(returns, weighting="attempts", eps=0.0)
    assert by_response[0][0] == [pytest.approx(0.907218, abs=1e-6), pytest.approx(1.088662, abs=1e-6)]
    assert by_response[1][0] == [pytest.approx(-0.997940, abs=1e-6)]
    # each token once: mean 1.6 / 3 = 0.533333, std sqrt((0.316667^2 + 0.416667^2 + 0.733333^2) / 3) = 0.520150
    by_token = normalized_returns(returns, weighting="tokens", eps=0.0)
    assert by_token[1][0] == [pytest.approx(-0.733333 / 0.520150, abs=1e-5)]


def test_beta_in_the_loss_is_refused():
    with pytest.raises(ConfigError, match=r"algorithm\.beta=0\.1: is TRL's KL in the loss"):
        build_components(compose("algorithm=reinforce_pp", "algorithm.beta=0.1"), {"algorithm": "reinforce_pp"})


def scripted(rewards: list[float]):
    def accuracy(completions, **_):
        return rewards[: len(completions)]

    return accuracy


@pytest.mark.slow
@pytest.mark.parametrize(
    ("baseline", "expected"),
    [
        # rewards 1, 0, 0, 0 | 0, 0, 0, 0: mean 0.125, std sqrt(0.109375) = 0.330719 over the responses
        ("none", [2.645751, -0.377964, -0.377964, -0.377964, -0.377964, -0.377964, -0.377964, -0.377964]),
        # centred in its group: 0.75, -0.25 x 3 | 0 x 4: mean 0, std sqrt(0.09375) = 0.306186
        ("group", [2.449490, -0.816497, -0.816497, -0.816497, 0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_the_trainers_advantages_are_the_batch_normalised_rewards(baseline, expected):
    """Before the first update the KL to the initial policy is 0 (to float rounding), so every token of a completion
    has its response's normalised reward (each response counted once: normalize_over=responses)."""
    trainer = trainer_from(
        "algorithm=reinforce_pp", f"algorithm.baseline={baseline}", "algorithm.normalize_over=responses",
        "algorithm.batch_size=8", *FAST,
    )  # fmt: skip
    trainer.reward_funcs[0] = scripted([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    rows = [dict(trainer.train_dataset[q]) for q in (0, 1) for _ in range(4)]
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows)
    mask = output["completion_mask"].bool()
    for row, value in enumerate(expected):
        tokens = output["advantages"][row][mask[row]]
        assert tokens.tolist() == pytest.approx([value] * len(tokens), abs=1e-5)
    assert float(output["advantages"][~mask].abs().max()) == 0.0
    assert abs(trainer._metrics["train"]["reinforce_pp/reward_kl"][-1]) < 1e-6  # 0, to rounding (sampled log-probs)


@pytest.mark.slow
def test_without_guidance_it_is_socraticpos_backend():
    """SocraticPO with one attempt (no guidance is ever given) and REINFORCE++ counting each response once: the same
    completions get the same token advantages, with a reference policy that differs from the student."""
    import torch
    from transformers import set_seed

    advantages = []
    for overrides in (
        ("algorithm=socraticpo", "algorithm.max_attempts=1", "algorithm.teacher_kl_every=0"),
        ("algorithm=reinforce_pp", "algorithm.normalize_over=responses"),
    ):
        trainer = trainer_from(*overrides, *FAST)
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():  # the same perturbed initial policy for both: a KL that is not 0
            for parameter in trainer.ref_policy.parameters():
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
        rows = [dict(trainer.train_dataset[q]) for q in (0, 1, 2, 3) for _ in range(4)]
        trainer.model.train()
        set_seed(5)
        output = trainer._generate_and_score_completions(rows)
        advantages.append((output["completion_ids"], output["advantages"]))
    (socratic_ids, socratic), (plain_ids, plain) = advantages
    assert torch.equal(socratic_ids, plain_ids)
    assert float(socratic.abs().max()) > 0.1
    assert torch.allclose(socratic, plain, atol=1e-6)
