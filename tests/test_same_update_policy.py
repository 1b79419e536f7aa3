"""The same update on 2 processes as on 1 (issue 33): SocraticPO's rewards, returns and advantages, the entropy mask's
ranking and normaliser, and TRL's GRPO loss as ``algorithm=grpo`` uses it.

One worker (``tests/distributed/same_update_policy.py``) makes one optimizer step of each case on one fixed global
batch of 8 hand-made completions (scored by the task's real verifier), whole on 1 process or split 4 + 4 over 2 gloo
processes started by ``torchrun``: the rows TRL's sampler would hand each process, with ``batch_size`` halved so that
the global (generation) batch is the same. Gradient clipping is off, so that a wrong overall factor (the usual
per-process normalisation bug) is not rescaled away. The gradient compared is the one the optimizer steps with, after
DDP's all-reduce (a mean over the processes): the same gradient gives the same update with any optimizer (Adam would
hide a wrong overall factor, so the parameters after its step would prove less).

Batch-level quantities are defined over the global batch: SocraticPO's mu_k (Eq. 18), the mean and std of Eq. 20 (the
grpo backend: of each group), the entropy mask's top-rho share (Eq. 5's batch B) and its normaliser. Each is checked
on the runs' results three ways: the 1- and 2-process runs agree, every process of the 2-process run holds the same
value, and a number computed by hand or by brute force in this file over the whole batch is met. The batch is built so
that the two processes' halves differ (process 0 mostly solves at once, process 1 never does): a per-process
statistic would not pass (the tests say where they check that it would differ).

How TRL 1.16 normalises (``GRPOTrainer._generate_and_score_completions`` and ``_compute_loss``):

- advantages: the rewards are gathered from every process before the group mean and std (``scale_rewards=batch``:
  the batch std) are taken: global;
- ``loss_type=dapo`` (our default, and what SocraticPO requires; ``cispo`` and ``vespo`` alike): each process divides
  its token sum by ``num_items_in_batch / num_processes`` (times ``gradient_accumulation_steps /
  steps_per_generation``), ``num_items_in_batch`` being the generation batch's token count gathered over the
  processes, and DDP averages the gradients: the token mean over the global batch: global;
- ``grpo``, ``sapo`` (each sequence's token mean, then the mean over the process's sequences) and ``dr_grpo`` (the
  process's token sum over its rows x ``max_completion_length``): global after DDP's mean, as every process holds as
  many rows;
- ``bnpo``: the token mean over the process's own tokens, then DDP's mean over the processes: per process (not the
  global token mean when processes hold different token counts). Not used here; with the entropy mask's
  ``normalize=kept_tokens`` its batch-wide weight then meets TRL's per-process divisor.

Not comparable: ``mode=random`` draws its mask per process (a generator seeded by the seed plus the process index), so
its kept set depends on the process count (its share is still rho of the global batch); timings and the per-process
cost counters (``PER_PROCESS``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from launch_helpers import torchrun

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

WORKER = "same_update_policy.py"
CASES = (
    "socraticpo_reinforce_pp", "socraticpo_grpo", "entropy_top", "entropy_bottom", "entropy_overlay", "grpo",
    "reinforce_pp",
)  # fmt: skip
# Logged values that are not statistics of the batch: timings, and what this process generated (its own cost). TRL's
# ``entropy`` is a mean of per-loss-call means: with the generation batch split into loss calls (entropy_overlay) it
# depends on which rows TRL's per-process shuffle put in which call.
PER_PROCESS = {
    "step_time",
    "socraticpo/rollout_seconds",
    "socraticpo/teacher_seconds",
    "socraticpo/generated_tokens",
    "socraticpo/generation_slots",
}
SPLIT_DEPENDENT = {"entropy_overlay": {"entropy"}}
# The worker's outcome table (delta per attempt, K = 3) and its decayed rewards by hand (Eq. 17-19): step 1 has all 8
# rollouts, 3 right, so mu_1 = 3/8; step 2 adds rollouts 3, 4, 5, 6, 7 with rewards 3/8, 0, 0, 3/8, 0, so
# mu_2 = (3 + 6/8) / 13 = 15/52. (Process 1's rows 4-7 alone would have mu_1 = 0 and no reward after step 1.)
OUTCOMES = [[1], [1], [1], [0, 1], [0, 0, 1], [0, 0, 0], [0, 1], [0, 0, 0]]
DECAYED = [[1], [1], [1], [0, 3 / 8], [0, 0, 15 / 52], [0, 0, 0], [0, 3 / 8], [0, 0, 0]]
# The entropy mask of each case: (rho, mode, normalize).
MASKS = {
    "entropy_top": (0.2, "top", "all_tokens"),
    "entropy_bottom": (0.8, "bottom", "kept_tokens"),
    "entropy_overlay": (0.2, "top", "all_tokens"),
    "socraticpo_grpo": (0.5, "top", "all_tokens"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[int, Path]:
    """Every case, on 1 process and on 2: ``{processes: out folder}``."""
    root = tmp_path_factory.mktemp("same_update")
    for processes in (1, 2):
        torchrun(WORKER, str(root / str(processes)), str(cache_dir), *CASES, processes=processes)
    return {processes: root / str(processes) for processes in (1, 2)}


def load(runs: dict[int, Path], processes: int, case: str) -> list[dict[str, Any]]:
    """What each process of a run wrote for ``case``, in process order."""
    parts = [torch.load(path) for path in sorted((runs[processes] / case).glob("rank*.pt"))]
    assert len(parts) == processes
    return parts


def merged(parts: list[dict[str, Any]], key: str) -> dict[int, Any]:
    """Per global row, from whichever process held it."""
    rows = {g: value for part in parts for g, value in part[key].items()}
    assert sorted(rows) == list(range(len(OUTCOMES)))
    return rows


def attempt_tokens(rows: dict[int, Any], which: list[int] | None = None) -> list[tuple[int, list[float]]]:
    """(group of 2 rollouts, the advantages of one attempt's tokens) of every attempt of the rows ``which``."""
    return [
        (g // 2, rows[g]["advantages"][start:end])
        for g in which or sorted(rows)
        for start, end in rows[g]["segments"]
        if end > start
    ]


def weighted_stats(values: list[tuple[float, float]]) -> tuple[float, float]:
    """Weighted mean and (population) standard deviation of (weight, value) pairs."""
    total = sum(w for w, _ in values)
    mean = sum(w * v for w, v in values) / total
    return mean, math.sqrt(sum(w * (v - mean) ** 2 for w, v in values) / total)


@pytest.mark.parametrize("case", CASES)
def test_the_update_is_the_same_on_2_processes_as_on_1(runs: dict[int, Path], case: str) -> None:
    """The all-reduced gradient of 2 processes, each with half the batch, is the 1-process gradient of the whole
    batch (float noise from other padding aside): every normaliser of the loss is the global batch's."""
    one, two = load(runs, 1, case)[0]["grads"], load(runs, 2, case)[0]["grads"]
    scale = max(float(g.abs().max()) for g in one.values())
    assert scale > 1e-3  # a real step, not a batch whose advantages are all zero
    assert one.keys() == two.keys()
    for name, gradient in one.items():
        torch.testing.assert_close(two[name], gradient, rtol=1e-4, atol=5e-5 * scale, msg=name)


@pytest.mark.parametrize("case", CASES)
def test_batch_statistics_are_the_same_on_every_process(runs: dict[int, Path], case: str) -> None:
    """Every batch statistic logged (SocraticPO's accuracies, correction rates, rewards and KL, the entropy mask's
    kept share and percentiles, TRL's rewards and lengths) is the global batch's, on each of the 2 processes."""
    (single,) = load(runs, 1, case)
    skip = PER_PROCESS | SPLIT_DEPENDENT.get(case, set())
    names = set(single["metrics"]) - skip
    assert len(names) > 10
    for part in load(runs, 2, case):
        assert set(part["metrics"]) - skip == names
        for name in names:
            assert part["metrics"][name] == pytest.approx(single["metrics"][name], rel=1e-5, abs=1e-6), name


@pytest.mark.parametrize("case", ["socraticpo_reinforce_pp", "socraticpo_grpo"])
def test_socraticpo_decayed_rewards_are_the_global_batchs(runs: dict[int, Path], case: str) -> None:
    """Eq. 17-19's mu_k over every rollout of the batch, the hand-computed table, on every process of both runs."""
    for processes in (1, 2):
        for part in load(runs, processes, case):
            assert part["rewards"] == [pytest.approx(row) for row in DECAYED]


def test_socraticpo_reinforce_pp_returns_are_normalised_over_the_global_batch(runs: dict[int, Path]) -> None:
    """REINFORCE++ returns with the k1 KL folded in (it varies along an attempt), normalised over the whole batch
    (Eq. 20, each attempt weighing 1 / its tokens): mean 0 and std 1 over all 8 rollouts, not over each process's."""
    one = merged(load(runs, 1, "socraticpo_reinforce_pp"), "rows")
    parts = load(runs, 2, "socraticpo_reinforce_pp")
    two = merged(parts, "rows")
    for g in one:
        torch.testing.assert_close(torch.tensor(two[g]["advantages"]), torch.tensor(one[g]["advantages"]),
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
    attempts = attempt_tokens(two)
    assert any(max(tokens) - min(tokens) > 0.1 for _, tokens in attempts)  # the KL-to-go moves along an attempt
    mean, std = weighted_stats([(1 / len(tokens), value) for _, tokens in attempts for value in tokens])
    assert mean == pytest.approx(0.0, abs=1e-5)
    assert std == pytest.approx(1.0, abs=1e-4)
    process_1 = attempt_tokens(two, sorted(parts[1]["rows"]))
    mean_1, _ = weighted_stats([(1 / len(tokens), value) for _, tokens in process_1 for value in tokens])
    assert abs(mean_1) > 0.1  # process 1's half alone is far from normalised: a per-process Eq. 20 would differ


def test_socraticpo_grpo_backend_normalises_each_group(runs: dict[int, Path]) -> None:
    """``backend=grpo`` with ``normalize_over=tokens``: within each group of 2 rollouts, the student tokens'
    advantages have mean 0 and std 1 (no KL: a group of equal rewards gets 0); teacher turns get 0."""
    one = merged(load(runs, 1, "socraticpo_grpo"), "rows")
    two = merged(load(runs, 2, "socraticpo_grpo"), "rows")
    for g in one:
        torch.testing.assert_close(torch.tensor(two[g]["advantages"]), torch.tensor(one[g]["advantages"]),
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
        teacher = [a for a, student in zip(two[g]["advantages"], two[g]["student"], strict=True) if not student]
        assert teacher == [0.0] * len(teacher)
    groups: dict[int, list[tuple[float, float]]] = {}
    for group, tokens in attempt_tokens(two):
        groups.setdefault(group, []).extend((1.0, value) for value in tokens)
    assert {value for _, value in groups[0]} == {0.0}  # rollouts 0 and 1: both right at once
    for group in (1, 2, 3):
        mean, std = weighted_stats(groups[group])
        assert mean == pytest.approx(0.0, abs=1e-5)
        assert std == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("case", list(MASKS))
def test_the_entropy_mask_ranks_the_global_batch(runs: dict[int, Path], case: str) -> None:
    """The kept tokens are the round(rho x N) highest (``top``) or lowest (``bottom``) entropies of all N student
    tokens of the global batch, the same on 1 and 2 processes, weighing 1 (``all_tokens``: the loss divides by all N)
    or N / kept (``kept_tokens``). Each process's own top share would keep other tokens. ``entropy_overlay``: the
    generation batch is split into 2 loss calls on each process and ranked at once before them."""
    rho, mode, normalize = MASKS[case]
    one = merged(load(runs, 1, case), "mask")
    parts = load(runs, 2, case)
    two, rows = merged(parts, "mask"), merged(parts, "rows")
    for g in one:
        assert two[g]["weights"] == one[g]["weights"]
    tokens = [
        (entropy, (g, t))
        for g in sorted(two)
        for t, (entropy, student) in enumerate(zip(two[g]["entropy"], rows[g]["student"], strict=True))
        if student
    ]
    n = len(tokens)
    kept_count = round(rho * n)
    ranked = sorted(tokens, reverse=mode == "top")
    expected = {where for _, where in ranked[:kept_count]}
    kept = {(g, t) for g in two for t, weight in enumerate(two[g]["weights"]) if weight > 0}
    assert kept == expected
    weight = 1.0 if normalize == "all_tokens" else n / kept_count
    assert [w for g in two for w in two[g]["weights"] if w > 0] == [pytest.approx(weight)] * kept_count
    mine = [(entropy, where) for entropy, where in tokens if where[0] in parts[1]["mask"]]
    own = {where for _, where in sorted(mine, reverse=mode == "top")[: round(rho * len(mine))]}
    assert own != {where for where in kept if where[0] in parts[1]["mask"]}


def test_grpo_advantages_by_hand(runs: dict[int, Path]) -> None:
    """TRL's group advantages from the rewards gathered over the processes: groups of 2 with rewards (1, 0), (0, 1),
    (1, 0), (0, 0) (the worker's right rows: 0, 3, 4) give +-0.5 / (std + 1e-4), std = sqrt(0.5) (Bessel), or 0."""
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    expected = [a, -a, -a, a, a, -a, 0.0, 0.0]
    for processes in (1, 2):
        rows = merged(load(runs, processes, "grpo"), "rows")
        assert [rows[g]["advantages"] for g in sorted(rows)] == pytest.approx(expected, rel=1e-6)
