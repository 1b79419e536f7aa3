"""The 80/20 paper's premise and claims, as the study measures them (``socratic_exp.study``).

Premise: the share of completion tokens with entropy above ``HIGH_ENTROPY`` nats, the share of the total entropy
those tokens' top 20% carry, and how much more often the top-20% tokens stand at a decision (the first token of a
reasoning line, where the student picks the next operation) than tokens do on average.

What can make ``entropy_top>=grpo`` hold by construction: a token's policy gradient scales with how open its choice
is (the gradient of log p is one-hot minus p, near zero where the student is sure), so on a student whose low-entropy
tokens are near-certain, the top 20% carry nearly all of GRPO's gradient and the masked update is GRPO's. The premise
measures it: GRPO's policy gradient (group-centred rewards of ``GRADIENT_GROUPS`` prompts x the group size) from
every token and from the top 20% alone, the bottom 80%'s share of its norm and the two gradients' cosine. Where the
bottom 80% carry less than ``BY_CONSTRUCTION`` of the norm, the claim's row says it holds by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from socratic_exp.core.methods import Claim, Construction, Promise

if TYPE_CHECKING:
    from socratic_exp.study.premises import Bench

HIGH_ENTROPY = 0.5  # nats: above this a character-level choice is open (two options near-even at ln 2 = 0.69)
GRADIENT_GROUPS = 32  # prompts whose sampled groups give the policy gradient the premise splits
BY_CONSTRUCTION = 0.02  # the bottom 80%'s share of GRPO's gradient norm below which entropy_top is GRPO's update
PROMISES = (
    Promise("entropy/decision_enrichment", 2.0, "the top-20% entropy tokens sit at decisions, not spread evenly"),
    Promise("entropy/minority_share", 0.70, "1 - the share of high-entropy tokens: they are a minority"),
)
CLAIMS = (
    Claim("entropy_top>=grpo", "Beyond the 80/20 Rule, Sec. 5", "the top-20% entropy tokens alone do no worse than "
          "all tokens", "entropy_top", "grpo", "not_worse", changes=("algorithm._target_", "algorithm.forking_tokens",
          "algorithm.mode", "algorithm.normalize", "algorithm.rho"),
          by_construction=Construction("entropy/bottom80_gradient_share", BY_CONSTRUCTION, "the bottom 80% carry "
                                       "almost none of GRPO's gradient: the top 20% alone are GRPO's update")),
    Claim("entropy_top>bottom", "Beyond the 80/20 Rule, Sec. 5", "the top-20% entropy tokens beat the bottom 80%",
          "entropy_top", "entropy_bottom", changes=("algorithm.mode", "algorithm.rho")),
    Claim("entropy_top>random", "ours (a control the paper lacks)", "entropy, not the share of tokens: top 20% beat "
          "a random 20%", "entropy_top", "entropy_random", changes=("algorithm.mode",)),
)  # fmt: skip


def premises(bench: Bench) -> dict[str, float]:
    import torch

    rows = bench.eval_rows
    completions = bench.sample([r["prompt"] for r in rows], salt=7)
    stats = bench.token_stats([r["prompt"] for r in rows], completions)
    entropies, decisions = [], []
    tokenizer = bench.student.tokenizer
    for (_, token_entropy), completion in zip(stats, completions, strict=True):
        pieces = tokenizer.convert_ids_to_tokens(tokenizer(completion, add_special_tokens=False)["input_ids"])
        starts = line_starts(pieces)
        entropies.append(token_entropy)
        decisions.append(torch.tensor(starts[: len(token_entropy)], dtype=torch.bool))
    values, at_decision = torch.cat(entropies), torch.cat(decisions)
    if values.numel() == 0:
        return {}
    top = values >= torch.quantile(values, 0.8)
    base_rate = float(at_decision.float().mean())
    top_rate = float(at_decision[top].float().mean())
    high = values > HIGH_ENTROPY
    return gradient_split(bench) | {
        "entropy/high_entropy_share": float(high.float().mean()),
        "entropy/minority_share": 1.0 - float(high.float().mean()),
        "entropy/top20_entropy_mass": float(values[top].sum() / values.sum().clamp_min(1e-12)),
        "entropy/decision_share": base_rate,
        "entropy/top20_decision_share": top_rate,
        "entropy/decision_enrichment": top_rate / base_rate if base_rate else 0.0,
        "entropy/mean_at_decision": float(values[at_decision].mean()) if at_decision.any() else 0.0,
        "entropy/mean_elsewhere": float(values[~at_decision].mean()) if (~at_decision).any() else 0.0,
    }


def gradient_split(bench: Bench) -> dict[str, float]:
    """GRPO's policy gradient on sampled groups, from every token and from the batch's top 20% by entropy alone: the
    bottom 80%'s share of its norm and the cosine of the two (module docstring). Empty where every group's rewards
    are equal (no gradient to split)."""
    import torch

    rows, size = bench.eval_rows[:GRADIENT_GROUPS], bench.group_size
    prompts = [r["prompt"] for r in rows for _ in range(size)]
    completions = bench.sample([r["prompt"] for r in rows], n=size, salt=9)
    rewards = torch.tensor([bench.score(c, rows[i // size]) for i, c in enumerate(completions)]).view(-1, size)
    advantages = (rewards - rewards.mean(1, keepdim=True)).flatten()
    if not advantages.any():
        return {}
    entropies = [entropy for _, entropy in bench.token_stats(prompts, completions)]
    if not sum(len(e) for e in entropies):
        return {}
    threshold = torch.quantile(torch.cat(entropies), 0.8)  # the batch's top 20%, as the method masks
    every = [torch.full_like(e, float(a)) for e, a in zip(entropies, advantages, strict=True)]
    top = [w * (e >= threshold) for w, e in zip(every, entropies, strict=True)]
    full, top_only = bench.logp_gradient(prompts, completions, every), bench.logp_gradient(prompts, completions, top)
    full, top_only = full.double(), top_only.double()  # a cosine of two long vectors: float32 sums drift by 1e-4
    norm = full.norm().clamp_min(1e-30)
    return {
        "entropy/bottom80_gradient_share": float((full - top_only).norm() / norm),
        "entropy/top20_gradient_cosine": float(full @ top_only / (norm * top_only.norm().clamp_min(1e-30))),
    }


def line_starts(pieces: Sequence[str]) -> list[bool]:
    """Whether each token opens a line of the completion (its first token, or the one after a newline)."""
    starts, fresh = [], True
    for piece in pieces:
        starts.append(fresh and piece not in ("\n", "Ċ"))
        fresh = piece.endswith(("\n", "Ċ")) or (fresh and piece in ("\n", "Ċ"))
    return starts
