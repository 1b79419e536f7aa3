"""The 80/20 paper's premise and claims, as the study measures them (``socratic_exp.study``).

Premise: the share of completion tokens with entropy above ``HIGH_ENTROPY`` nats, the share of the total entropy
those tokens' top 20% carry, and how much more often the top-20% tokens stand at a decision (the first token of a
reasoning line, where the student picks the next operation) than tokens do on average.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from socratic_exp.core.methods import Claim, Promise

if TYPE_CHECKING:
    from socratic_exp.study.premises import Bench

HIGH_ENTROPY = 0.5  # nats: above this a character-level choice is open (two options near-even at ln 2 = 0.69)
PROMISES = (
    Promise("entropy/decision_enrichment", 2.0, "the top-20% entropy tokens sit at decisions, not spread evenly"),
    Promise("entropy/minority_share", 0.70, "1 - the share of high-entropy tokens: they are a minority"),
)
CLAIMS = (
    Claim("entropy_top>=grpo", "Beyond the 80/20 Rule, Sec. 5", "the top-20% entropy tokens alone do no worse than "
          "all tokens", "entropy_top", "grpo", "not_worse", changes=("algorithm._target_", "algorithm.forking_tokens",
          "algorithm.mode", "algorithm.normalize", "algorithm.rho")),
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
    return {
        "entropy/high_entropy_share": float(high.float().mean()),
        "entropy/minority_share": 1.0 - float(high.float().mean()),
        "entropy/top20_entropy_mass": float(values[top].sum() / values.sum().clamp_min(1e-12)),
        "entropy/decision_share": base_rate,
        "entropy/top20_decision_share": top_rate,
        "entropy/decision_enrichment": top_rate / base_rate if base_rate else 0.0,
        "entropy/mean_at_decision": float(values[at_decision].mean()) if at_decision.any() else 0.0,
        "entropy/mean_elsewhere": float(values[~at_decision].mean()) if (~at_decision).any() else 0.0,
    }


def line_starts(pieces: Sequence[str]) -> list[bool]:
    """Whether each token opens a line of the completion (its first token, or the one after a newline)."""
    starts, fresh = [], True
    for piece in pieces:
        starts.append(fresh and piece not in ("\n", "Ċ"))
        fresh = piece.endswith(("\n", "Ċ")) or (fresh and piece in ("\n", "Ċ"))
    return starts
