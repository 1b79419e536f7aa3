"""High-entropy token masking: the selection, its share, its gradient, both normalisations, rho=1 as GRPO, the
nested block other algorithms use, the sweep, and end-to-end runs of every mode."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import random
from types import SimpleNamespace

import pytest
import torch
from conftest import compose, run_dirs

from socratic_exp.algorithms.entropy_masked.config import EntropyMask
from socratic_exp.algorithms.entropy_masked.mask import kept_count, select_top
from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.components import build_components
from socratic_exp.errors import ConfigError
from socratic_exp.hydra_support import sweeps_dir


def brute_force_top(scores: list[float], k: int) -> set[int]:
    return set(sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k])


@pytest.mark.parametrize("seed", range(20))
def test_selection_matches_brute_force_with_ties(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 300)
    scores = [round(rng.random() * 2, 1) for _ in range(n)]  # one decimal: many ties
    for rho in (0.05, 0.1, 0.2, 0.5, 0.8, 1.0):
        k = kept_count(n, rho)
        keep = select_top(torch.tensor(scores), k)
        assert set(torch.nonzero(keep).flatten().tolist()) == brute_force_top(scores, k)
        assert abs(int(keep.sum()) - rho * n) <= 1  # the kept share is rho within one token


def test_kept_count_never_keeps_nothing():
    assert kept_count(3, 0.1) == 1 and kept_count(0, 0.2) == 0 and kept_count(10, 1.0) == 10


def test_selection_across_processes_is_the_global_one():
    """Two simulated processes with different token counts: together they keep the global top k."""
    locals_ = [torch.rand(37, 2), torch.rand(11, 2)]
    locals_[1][:5, 1] = locals_[0][:5, 1]  # ties across processes go to the first process's tokens

    def pad(t, width):
        return torch.cat([t, torch.zeros(width - t.shape[0], *t.shape[1:])])

    width = max(t.shape[0] for t in locals_)
    kept = []
    for rank, local in enumerate(locals_):
        accelerator = SimpleNamespace(
            process_index=rank,
            pad_across_processes=lambda t, dim: pad(t, width),
            gather=lambda t: (
                torch.tensor([len(x) for x in locals_])
                if t.shape == (1,)
                else torch.cat([pad(x, width) for x in locals_])
            ),
        )
        from socratic_exp.algorithms.entropy_masked.trainer import EntropyMaskMixin

        gathered, mine = EntropyMaskMixin._gather_tokens(SimpleNamespace(accelerator=accelerator), local)
        assert torch.equal(gathered, torch.cat(locals_))
        kept.append(select_top(gathered[:, 1], 10)[mine])
    all_scores = torch.cat(locals_)[:, 1].tolist()
    assert set(torch.nonzero(torch.cat(kept)).flatten().tolist()) == brute_force_top(all_scores, 10)


# --- the mask inside TRL's loss ------------------------------------------------------------------------------


def make_trainer(tmp_path, settings: EntropyMask | None, loss_type: str = "dapo", model=None):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from socratic_exp.models.char_tokenizer import build_char_tokenizer
    from socratic_exp.models.tiny import TinyModel

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = model or TinyModel(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64).build_untrained(
        tokenizer
    )
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        loss_type=loss_type,
        report_to=[],
        bf16=False,
        seed=0,
    )
    from socratic_exp.algorithms.entropy_masked.trainer import EntropyMaskedTrainer

    base = GRPOTrainer if settings is None else EntropyMaskedTrainer
    extras = {} if settings is None else {"entropy_mask": settings}
    trainer = base(
        model=model,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["1+2="] * 4}),
        processing_class=tokenizer,
        **extras,
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop otherwise
    return trainer


def batch(mask: list[list[int]], advantages: list[float], seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    completion_mask = torch.tensor(mask)
    return {
        "prompt_ids": torch.randint(3, 90, (len(mask), 3), generator=generator),
        "prompt_mask": torch.ones(len(mask), 3, dtype=torch.long),
        "completion_ids": torch.randint(3, 90, completion_mask.shape, generator=generator),
        "completion_mask": completion_mask,
        "advantages": torch.tensor(advantages),
        "num_items_in_batch": completion_mask.sum(),
    }


def loss_and_grad(trainer, inputs, entropies):
    """TRL's loss with the model's log-probabilities replaced by a leaf tensor (its gradient is per token)."""
    logps = torch.zeros(entropies.shape, requires_grad=True)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, entropies, None)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.item(), logps.grad


HAND_MASK = [[1, 1, 1, 0], [1, 1, 1, 1]]  # 7 completion tokens; the last of row 0 is padding
HAND_ENTROPY = torch.tensor([[0.5, 2.0, 0.1, 9.0], [0.3, 0.2, 1.5, 0.4]])  # top 2 of the real ones: (0,1), (1,2)


@pytest.mark.parametrize(
    ("loss_type", "normalize", "expected"),
    [
        ("dapo", "all_tokens", -(1 - 2) / 7),  # the kept tokens' -A, over all 7 completion tokens
        ("dapo", "kept_tokens", -(1 - 2) / 2),  # ... over the 2 kept tokens
        ("grpo", "all_tokens", (-1 / 3 + 2 / 4) / 2),  # per sequence: over its 3 and 4 tokens
        ("grpo", "kept_tokens", (-1 / 1 + 2 / 1) / 2),  # per sequence: over its one kept token
    ],
)
def test_normalisations_on_a_hand_example(tmp_path, loss_type, normalize, expected):
    trainer = make_trainer(tmp_path, EntropyMask(rho=0.3, normalize=normalize), loss_type)  # round(0.3 * 7) = 2
    loss, grad = loss_and_grad(trainer, batch(HAND_MASK, [1.0, -2.0]), HAND_ENTROPY)
    assert loss == pytest.approx(expected)
    kept = torch.zeros(2, 4, dtype=torch.bool)
    kept[0, 1] = kept[1, 2] = True
    assert torch.all(grad[~kept] == 0)  # masked and padding tokens: exactly zero gradient
    assert torch.all(grad[kept] != 0)
    assert trainer._metrics["train"]["entropy_mask/kept_fraction"] == [pytest.approx(2 / 7)]
    assert trainer._metrics["train"]["entropy_mask/kept_entropy"] == [pytest.approx(1.75)]
    assert trainer._metrics["train"]["entropy_mask/dropped_entropy"] == [pytest.approx(1.5 / 5)]


@pytest.mark.parametrize("mode", ["top", "bottom", "random"])
def test_every_mode_keeps_its_share_and_masked_tokens_get_no_gradient(tmp_path, mode):
    trainer = make_trainer(tmp_path, EntropyMask(rho=0.25, mode=mode))
    mask = (torch.rand(8, 30, generator=torch.Generator().manual_seed(1)) < 0.8).long().tolist()
    entropies = torch.rand(8, 30, generator=torch.Generator().manual_seed(2)).round(decimals=1)  # ties
    inputs = batch(mask, [1.0, -1.0] * 4)
    valid = inputs["completion_mask"].bool()
    keep = trainer.get_high_entropy_mask(entropies, inputs["completion_mask"], 0.0)
    n = int(valid.sum())
    assert int(keep.sum()) == kept_count(n, 0.25) and not keep[~valid].any()
    scores = {"top": entropies[valid], "bottom": -entropies[valid]}.get(mode)
    if scores is not None:
        expected = brute_force_top(scores.tolist(), kept_count(n, 0.25))
        assert set(torch.nonzero(keep[valid]).flatten().tolist()) == expected
    else:  # random: the share is right, the choice is not the entropy ranking and changes between batches
        assert not torch.equal(keep, trainer.get_high_entropy_mask(entropies, inputs["completion_mask"], 0.0))
    _, grad = loss_and_grad(trainer, inputs, entropies)
    kept_now = grad != 0
    assert int(kept_now.sum()) == kept_count(n, 0.25) and not kept_now[~valid].any()


def test_rho_one_is_plain_grpo(tmp_path):
    """rho=1: the same loss and the same gradient as TRL's GRPOTrainer on a fixed batch (the real model)."""
    inputs = batch([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]], [1, -1, 0.5, -0.5])
    grads = []
    reference = None
    for settings in (None, EntropyMask(rho=1.0), EntropyMask(rho=1.0, normalize="kept_tokens")):
        trainer = make_trainer(tmp_path, settings, model=copy.deepcopy(reference) if reference else None)
        reference = reference or copy.deepcopy(trainer.model)
        loss = trainer._compute_loss(trainer.model, inputs)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]))
        if settings is not None:
            assert trainer._metrics["train"]["entropy_mask/kept_fraction"] == [1.0]
    (plain_loss, plain_grads), *masked = grads
    for loss, grad in masked:
        assert torch.equal(loss, plain_loss)
        assert all(torch.equal(a, b) for a, b in zip(grad, plain_grads, strict=True))


# --- config ----------------------------------------------------------------------------------------------------


def test_defaults_and_grpo_knobs():
    algorithm = build_components(compose("algorithm=entropy_masked", "algorithm.epsilon_high=0.28")).algorithm
    assert (algorithm.rho, algorithm.mode, algorithm.normalize) == (0.2, "top", "all_tokens")
    assert isinstance(algorithm, GRPO) and algorithm.epsilon_high == 0.28


@dataclasses.dataclass(kw_only=True)
class MaskedOption(GRPO):
    """Another algorithm taking the mask as a nested block, as algorithm=socraticpo does."""

    entropy_mask: EntropyMask | None = None


def test_the_mask_is_a_nested_block_of_another_algorithm():
    assert MaskedOption().entropy_mask is None
    option = MaskedOption(entropy_mask={"rho": 0.1, "mode": "random"})
    assert option.entropy_mask == EntropyMask(rho=0.1, mode="random")
    with pytest.raises(ConfigError, match=r"algorithm.entropy_mask.rho=2.0: must be <= 1.0"):
        MaskedOption(entropy_mask={"rho": 2.0})
    with pytest.raises(ConfigError, match=r"algorithm.entropy_mask.bogus: unknown key \(fix: remove it; the keys"):
        MaskedOption(entropy_mask={"bogus": 1})


def test_sweep_expands_to_every_rho_mode_and_seed():
    from omegaconf import OmegaConf

    params = OmegaConf.load(sweeps_dir() / "entropy_quantile.yaml").hydra.sweeper.params
    values = {key: str(value).split(",") for key, value in params.items()}
    assert values == {
        "algorithm.rho": ["0.1", "0.15", "0.2", "0.25", "0.3", "1.0"],
        "algorithm.mode": ["top", "bottom", "random"],
        "seed": ["0", "1", "2"],
    }
    jobs = list(itertools.product(*([f"{k}={v}" for v in vs] for k, vs in values.items())))
    assert len(jobs) == 54
    for job in jobs[:: len(jobs) // 6]:  # a spread of them compose and validate
        algorithm = build_components(compose("+sweep=entropy_quantile", *job)).algorithm
        assert type(algorithm).__name__ == "EntropyMasked" and algorithm.rho == float(job[0].split("=")[1])


@pytest.mark.slow
def test_multirun_sweep_launches_54_jobs(run_app):
    proc, _ = run_app("--multirun", "+sweep=entropy_quantile", "dry_run=true", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("config OK") == 54
    assert "Launching 54 jobs" in proc.stderr + proc.stdout


# --- end to end ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "rho", "normalize"),
    [("top", 0.2, "all_tokens"), ("bottom", 0.8, "kept_tokens"), ("random", 0.2, "kept_tokens")],
)
def test_run_logs_the_kept_share_and_the_forking_tokens(run_app, mode, rho, normalize):
    proc, outputs = run_app(
        "algorithm=entropy_masked",
        "debug=quick_warmstart",
        f"algorithm.mode={mode}",
        f"algorithm.rho={rho}",
        f"algorithm.normalize={normalize}",
        "algorithm.max_steps=2",
        "eval.every_steps=0",
        "save_final_model=false",
        "logger=none",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [1, 2]
    for record in train:
        assert record["entropy_mask/kept_fraction"] == pytest.approx(rho, abs=0.01)  # >= 100 tokens per batch
        assert record["entropy_mask/entropy_p50"] <= record["entropy_mask/entropy_p99"]
        kept, dropped = record["entropy_mask/kept_entropy"], record["entropy_mask/dropped_entropy"]
        assert {"top": kept > dropped, "bottom": kept < dropped, "random": True}[mode]
    rows = [json.loads(line) for line in (run_dir / "forking_tokens.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] * 8 + [2] * 8
    assert set(rows[0]) == {"step", "before", "token", "after", "entropy", "kept"} and len(rows[0]["token"]) == 1
    if mode == "top":
        assert all(r["kept"] for r in rows)  # the highest-entropy tokens are the kept ones
