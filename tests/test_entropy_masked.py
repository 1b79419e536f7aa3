"""High-entropy token masking: the selection, its share, its weights, its gradient under both normalisations and
under gradient accumulation, rho=1 as GRPO, the nested block other algorithms use, the paper's overlay, the sweep,
and end-to-end runs of every mode. Expected numbers are written by hand."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import random
from types import SimpleNamespace

import pytest
import torch
from conftest import compose, run_dirs

from socratic_exp.algorithms.entropy_masked.config import EntropyMask
from socratic_exp.algorithms.entropy_masked.mask import (
    kept_count,
    select_top,
    selection_scores,
    steps_share_generation,
    token_weights,
)
from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.core.config import sweeps_dir
from socratic_exp.core.errors import ConfigError
from socratic_exp.core.run_folder import read_jsonl, read_metrics
from socratic_exp.runtime.assembly import build_components


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


@pytest.mark.parametrize(
    ("tokens", "rho", "expected"),
    [
        (10, 0.2, 2),
        (7, 0.3, 2),  # 2.1 rounds down
        (7, 0.5, 4),  # 3.5 rounds half to even: 4
        (9, 0.5, 4),  # 4.5 rounds half to even: 4
        (8, 0.35, 3),  # 2.8 rounds up
        (1, 0.2, 1),  # 0.2 would be 0: at least one
        (2, 0.2, 1),  # 0.4 would be 0: at least one
        (5, 1.0, 5),
        (4, 0.99, 4),  # never more than all of them
    ],
)
def test_kept_count_by_hand(tokens, rho, expected):
    assert kept_count(tokens, rho) == expected


HAND_ENTROPIES = [0.5, 2.0, 0.1, 0.9, 0.3, 2.0]


@pytest.mark.parametrize(
    ("mode", "k", "kept"),
    [
        ("top", 3, [1, 3, 5]),  # 2.0, 2.0, 0.9
        ("top", 1, [1]),  # the tie at 2.0 goes to the earlier token
        ("top", 2, [1, 5]),
        ("bottom", 3, [0, 2, 4]),  # 0.1, 0.3, 0.5
        ("bottom", 1, [2]),
        ("top", 0, []),
        ("top", 6, [0, 1, 2, 3, 4, 5]),
    ],
)
def test_selection_by_hand(mode, k, kept):
    keep = select_top(selection_scores(torch.tensor(HAND_ENTROPIES), mode), k)
    assert keep.tolist() == [i in kept for i in range(6)]


def test_selection_ties_and_random_by_hand():
    assert select_top(torch.tensor([1.0, 1.0, 1.0, 1.0]), 2).tolist() == [True, True, False, False]
    assert select_top(torch.tensor([0.0, 3.0, 3.0, 1.0, 3.0]), 2).tolist() == [False, True, True, False, False]
    noise = torch.tensor([0.3, 0.9, 0.1, 0.8, 0.2, 0.4])
    scores = selection_scores(torch.tensor(HAND_ENTROPIES), "random", noise)
    assert select_top(scores, 2).tolist() == [False, True, False, True, False, False]  # the noise's top 2
    assert selection_scores(torch.tensor([0.5, 2.0]), "bottom").tolist() == [-0.5, -2.0]
    with pytest.raises(ValueError, match="unknown mode"):
        selection_scores(torch.tensor([1.0]), "random")  # random needs its noise
    with pytest.raises(ValueError, match="unknown mode"):
        selection_scores(torch.tensor([1.0]), "middle")


VALID = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]).bool()
KEEP = torch.tensor([[0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]]).bool()


@pytest.mark.parametrize(
    ("normalize", "loss_type", "batch", "expected"),
    [
        # Eq. 5: weight 1 on kept tokens, 0 elsewhere, whatever the loss type
        ("all_tokens", "dapo", (9, 3), [[0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]]),
        ("all_tokens", "grpo", (9, 3), [[0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]]),
        # kept_tokens, token-level losses: the batch's tokens / kept tokens (here this part's: 9 / 3)
        ("kept_tokens", "dapo", (9, 3), [[0, 3, 0, 0], [0, 0, 3, 3], [0, 0, 0, 0]]),
        # ... and the whole batch's when this is a part of it: 40 tokens, 8 kept
        ("kept_tokens", "bnpo", (40, 8), [[0, 5, 0, 0], [0, 0, 5, 5], [0, 0, 0, 0]]),
        ("kept_tokens", "dr_grpo", (40, 8), [[0, 5, 0, 0], [0, 0, 5, 5], [0, 0, 0, 0]]),
        # kept_tokens, per-sequence losses: each sequence's own (3 / 1, 4 / 2; none kept: 0)
        ("kept_tokens", "grpo", (40, 8), [[0, 3, 0, 0], [0, 0, 2, 2], [0, 0, 0, 0]]),
        ("kept_tokens", "sapo", (40, 8), [[0, 3, 0, 0], [0, 0, 2, 2], [0, 0, 0, 0]]),
    ],
)
def test_token_weights_by_hand(normalize, loss_type, batch, expected):
    weights = token_weights(
        KEEP, VALID, normalize=normalize, loss_type=loss_type, batch_tokens=batch[0], batch_kept=batch[1]
    )
    assert weights.tolist() == expected


def test_token_weights_edge_cases_by_hand():
    padding_kept = torch.tensor([[1, 0, 1]]).bool()  # a "kept" padding token weighs nothing
    valid = torch.tensor([[1, 1, 0]]).bool()
    assert token_weights(
        padding_kept, valid, normalize="all_tokens", loss_type="dapo", batch_tokens=2, batch_kept=1
    ).tolist() == [[1, 0, 0]]
    one = torch.tensor([[1, 0, 0]]).bool()  # one kept token of two: it weighs 2 (a batch of one kept token)
    assert token_weights(
        one, valid, normalize="kept_tokens", loss_type="dapo", batch_tokens=2, batch_kept=1
    ).tolist() == [[2, 0, 0]]
    nothing = torch.zeros(1, 3, dtype=torch.bool)
    assert token_weights(
        nothing, valid, normalize="kept_tokens", loss_type="dapo", batch_tokens=2, batch_kept=0
    ).tolist() == [[0, 0, 0]]
    with pytest.raises(ValueError, match="unknown normalize"):
        token_weights(nothing, valid, normalize="tokens", loss_type="dapo", batch_tokens=2, batch_kept=0)


@pytest.mark.parametrize(
    ("accumulation", "per_generation", "ok"),
    [(1, 1, True), (8, 128, True), (2, 2, True), (1, 4, True), (2, 1, False), (4, 6, False), (3, 2, False)],
)
def test_an_optimizer_step_must_lie_in_one_generation_batch(accumulation, per_generation, ok):
    assert steps_share_generation(accumulation, per_generation) is ok


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


def make_trainer(tmp_path, settings: EntropyMask | None, loss_type: str = "dapo", model=None, **grpo_args):
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
        per_device_train_batch_size=grpo_args.pop("per_device_train_batch_size", 4),
        num_generations=2,
        max_completion_length=8,
        loss_type=loss_type,
        report_to=[],
        bf16=False,
        seed=0,
        **grpo_args,
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
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by the training loop otherwise
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


# Gradient accumulation: one optimizer step = two loss calls of two completions each, one generation batch of four.
# The model's entropy at a token is faked as its id / 10, so the ranking is fixed whatever TRL's shuffle does.
ACCUMULATION_ROWS = {  # completion ids -> advantage
    (90, 91, 92, 93): 0.5,
    (94, 95, 96, 97): 1.0,  # the batch's four highest entropies (9.4 to 9.7): rho=0.25 of 16 tokens keeps exactly these
    (10, 11, 12, 13): -1.0,
    (14, 15, 16, 17): 2.0,
}


def fake_forward(logps=None):
    def forward(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        completion = input_ids[:, -logits_to_keep:]
        return (torch.zeros(completion.shape) if logps is None else logps), completion.float() / 10, None

    return forward


def accumulated_slices(trainer):
    """TRL's _prepare_inputs on a hand-made generation batch: the two loss calls' inputs, in TRL's order."""
    ids = torch.tensor(list(ACCUMULATION_ROWS))
    generation = {
        "prompt_ids": torch.full((4, 3), 5),
        "prompt_mask": torch.ones(4, 3, dtype=torch.long),
        "completion_ids": ids,
        "completion_mask": torch.ones(4, 4, dtype=torch.long),
        "advantages": torch.tensor(list(ACCUMULATION_ROWS.values())),
        "num_items_in_batch": torch.tensor(16),
    }
    trainer._generate_and_score_completions = lambda batch: dict(generation)
    trainer._get_per_token_logps_and_entropies = fake_forward()
    first = trainer._prepare_inputs([{"prompt": "1+2="}] * 4)
    trainer._step += 1  # the training loop's count
    second = trainer._prepare_inputs([{"prompt": "1+2="}] * 4)
    assert first is not second and len(first["completion_ids"]) == len(second["completion_ids"]) == 2
    return [first, second]


@pytest.mark.parametrize(("normalize", "weight"), [("all_tokens", 1.0), ("kept_tokens", 16 / 4)])
def test_accumulated_loss_calls_rank_the_whole_generation_batch(tmp_path, normalize, weight):
    """Each loss call's own top 25% would keep 2 of its 8 tokens; the generation batch's keeps the 4 tokens of the
    row (94..97), so the loss call without that row keeps nothing and gets no gradient at all."""
    args = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "steps_per_generation": 2}
    trainer = make_trainer(tmp_path, EntropyMask(rho=0.25, normalize=normalize), **args)
    slices = accumulated_slices(trainer)
    kept_ids = set()
    for inputs in slices:
        weights = inputs["entropy_mask_weights"]
        kept_ids |= set(inputs["completion_ids"][weights > 0].tolist())
        assert set(weights.flatten().tolist()) <= {0.0, weight}
    assert kept_ids == {94, 95, 96, 97}
    assert trainer._metrics["train"]["entropy_mask/kept_fraction"] == [0.25]  # ranked once, over 16 tokens
    assert trainer._metrics["train"]["entropy_mask/kept_entropy"] == [pytest.approx(9.55)]
    losses = []
    for inputs in slices:
        # The loss call's own entropies are ignored once the batch is ranked: all equal here, they would keep the
        # first two tokens of the call.
        loss, grad = loss_and_grad(trainer, inputs, torch.ones(2, 4))
        kept_rows = [i for i, row in enumerate(inputs["completion_ids"].tolist()) if row[0] == 94]
        expected = torch.zeros(2, 4, dtype=torch.bool)
        expected[kept_rows] = True
        assert torch.equal(grad != 0, expected)
        losses.append(loss)
    # DAPO's normaliser: 16 tokens / 1 process x 2 accumulation / 2 steps per generation = 16; the kept row's
    # advantage is 1.0 on each of its 4 tokens (ratio 1): -4 x weight / 16.
    assert sorted(losses) == [pytest.approx(-4 * weight / 16), 0.0]


def test_a_step_across_generation_batches_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm.steps_per_generation=1: is not a multiple of gradient_accum"):
        build_components(
            compose(
                "algorithm=entropy_masked",
                "algorithm.gradient_accumulation_steps=2",
                "algorithm.steps_per_generation=1",
            )
        )
    build_components(compose("algorithm=entropy_masked", "algorithm.gradient_accumulation_steps=2"))  # null: = 2
    with pytest.raises(ConfigError, match=r"fix: set algorithm.steps_per_generation to a multiple of"):
        make_trainer(
            tmp_path,
            EntropyMask(),
            per_device_train_batch_size=2,
            gradient_accumulation_steps=2,
            steps_per_generation=1,
        )  # the trainer refuses it too (for algorithms that nest the mask)
    make_trainer(tmp_path, None, per_device_train_batch_size=2, gradient_accumulation_steps=2, steps_per_generation=1)


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
    assert (algorithm.rho, algorithm.mode, algorithm.normalize) == (0.2, "top", "all_tokens")  # Eq. 5
    assert isinstance(algorithm, GRPO) and algorithm.epsilon_high == 0.28


def test_the_paper_overlay_composes_with_the_papers_values():
    """experiment=entropy_masked_dapo_qwen3 against the paper (Eq. 5, Section 5) and the official script."""
    c = build_components(compose("experiment=entropy_masked_dapo_qwen3"))
    a = c.algorithm
    assert type(a).__name__ == "EntropyMasked"
    assert (a.rho, a.mode, a.normalize) == (0.2, "top", "all_tokens")  # Eq. 5: top 20%, over all tokens
    assert (a.loss_type, a.beta, a.epsilon, a.epsilon_high, a.temperature) == ("dapo", 0.0, 0.2, 0.28, 1.0)
    assert (a.learning_rate, a.weight_decay, a.lr_scheduler_type, a.warmup_steps) == (
        1e-6,
        0.1,
        "constant_with_warmup",
        160,
    )
    assert (a.num_generations, a.max_completion_length, a.num_iterations) == (16, 20480, 1)
    gpus = 8
    assert a.batch_size * a.gradient_accumulation_steps * gpus == 32 * 16  # an optimizer step: 32 prompts x 16
    assert a.batch_size * a.steps_per_generation * gpus == 512 * 16  # the ranked generation batch: 512 prompts x 16
    assert a.steps_per_generation // a.gradient_accumulation_steps == 16  # optimizer steps per rollout
    assert c.model.name == "Qwen/Qwen3-8B-Base" and c.task.eval_set == "aime24"


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


# --- end to end ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "rho", "normalize", "accumulation"),
    # top: two loss calls per optimizer step, so the generation batch is ranked before them (the pre-pass)
    [("top", 0.2, "all_tokens", 2), ("bottom", 0.8, "kept_tokens", 1), ("random", 0.2, "kept_tokens", 1)],
)
def test_run_logs_the_kept_share_and_the_forking_tokens(run_in_process, mode, rho, normalize, accumulation):
    proc, outputs = run_in_process(
        "algorithm=entropy_masked",
        "debug=quick_warmstart",
        f"algorithm.mode={mode}",
        f"algorithm.rho={rho}",
        f"algorithm.normalize={normalize}",
        f"algorithm.gradient_accumulation_steps={accumulation}",
        "algorithm.max_steps=2",
        "eval.every_steps=0",
        "save_final_model=false",
        "logger=none",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    records = read_metrics(run_dir)
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [1, 2]
    for record in train:
        assert record["entropy_mask/kept_fraction"] == pytest.approx(rho, abs=0.01)  # >= 100 tokens per batch
        assert record["entropy_mask/entropy_p50"] <= record["entropy_mask/entropy_p99"]
        kept, dropped = record["entropy_mask/kept_entropy"], record["entropy_mask/dropped_entropy"]
        assert {"top": kept > dropped, "bottom": kept < dropped, "random": True}[mode]
    rows = read_jsonl(run_dir / "forking_tokens.jsonl")
    assert [r["step"] for r in rows] == [1] * 8 + [2] * 8
    assert set(rows[0]) == {"step", "before", "token", "after", "entropy", "kept"}
    assert all(len(r["token"]) == 1 or r["token"] == "<eos>" for r in rows)  # one character token, or the stop
    if mode == "top":
        assert all(r["kept"] for r in rows)  # the highest-entropy tokens are the kept ones
