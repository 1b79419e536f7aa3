"""SDPO's distillation loss and the teacher-guided advantages of the VPD paper's hybrids (Appendix B).

TRL's ``trl.experimental.sdpo.loss_utils`` (sampled-token reverse KL, full-vocabulary or top-k divergences with an
optional tail bucket) computes the per-token divergence; only the top-k is capped at the vocabulary size (the tiny
model has 98 tokens, SDPO's official k is 100). The advantage functions are pure tensor maths.
"""

from __future__ import annotations

from typing import Any


def per_token_divergence(
    student_logits: Any,
    teacher_logits: Any,
    completion_ids: Any,
    *,
    mode: str,
    alpha: float,
    topk: int | None,
    add_tail: bool,
) -> Any:
    """The per-token distillation loss (B, T) with TRL's SDPO loss functions."""
    from trl.experimental.sdpo.loss_utils import (
        compute_full_logit_self_distillation_loss,
        compute_sampled_token_self_distillation_loss,
        compute_topk_self_distillation_loss,
    )

    if mode == "sampled_token":
        return compute_sampled_token_self_distillation_loss(
            student_logits, teacher_logits, completion_ids, distillation_alpha=alpha
        )
    if mode == "full_logits" or (topk is not None and topk >= student_logits.size(-1)):
        return compute_full_logit_self_distillation_loss(student_logits, teacher_logits, distillation_alpha=alpha)
    return compute_topk_self_distillation_loss(
        student_logits, teacher_logits, distillation_topk=topk, distillation_alpha=alpha, distillation_add_tail=add_tail
    )


def distilled_tokens(tokens: Any, usable: Any) -> Any:
    """The tokens distilled (B, T): the loss's tokens (``tokens``, B x T) of the rollouts with a usable teacher
    context (``usable``, B: SDPO distils only where the teacher was shown feedback)."""
    return tokens * usable.unsqueeze(1)


def aggregated(per_token: Any, mask: Any, aggregation: str, count: float | None = None) -> Any:
    """The distillation loss from its per-token values (B, T) on the distilled tokens ``mask`` (B, T).

    ``token_mean``: the sum over the distilled tokens divided by their count (``count``: the whole batch's, summed
    over processes; by default this batch's), official SDPO's ``token-mean``; ``sequence_mean``: each rollout's mean
    over its distilled tokens, averaged over the rollouts (one without any counts 0), TRL's. Empty: 0."""
    if aggregation == "token_mean":
        total = float(mask.sum()) if count is None else float(count)
        return (per_token * mask).sum() / max(total, 1.0)
    return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()


def reshaped_advantages(advantages: Any, delta: Any, tokens: Any, coef: float) -> Any:
    """Advantage reshaping (VPD paper, B.2): A_t = A + coef * delta_t, delta_t = sg(log q - log pi) (zero where the
    rollout has no usable feedback). ``advantages`` (B,), ``delta`` and ``tokens`` (B, T)."""
    return (advantages.unsqueeze(1) + coef * delta) * tokens


def reweighted_advantages(advantages: Any, delta: Any, tokens: Any, clip: float) -> Any:
    """Distillation-guided reweighting (B.3, our reading): A_t = A * w_t, w_t = clip(exp(sign(A) delta_t), 1/clip,
    clip) normalised to mean 1 over the rollout's tokens, so each rollout's summed advantage is unchanged."""
    import torch

    advantages = advantages.unsqueeze(1)
    weights = torch.exp(torch.sign(advantages) * delta).clamp(1 / clip, clip) * tokens
    mean = weights.sum(1, keepdim=True) / tokens.sum(1, keepdim=True).clamp(min=1)
    return advantages * weights / mean.clamp(min=1e-8)


def margin_of_means(right_sum: float, right: float, wrong_sum: float, wrong: float) -> float | None:
    """``right_sum / right - wrong_sum / wrong`` (None unless both counts are positive): the margin from sums and
    counts, which add up across processes where means do not."""
    if right <= 0 or wrong <= 0:
        return None
    return right_sum / right - wrong_sum / wrong
