"""``algorithm=vpd``'s trainer: Variational Policy Distillation (VPD, arXiv 2605.15113), variational EM on SDPO.

**M-step** (every step): SDPO's distillation, unchanged: the student minimises the divergence to the feedback-
conditioned teacher's token distribution on its own on-policy rollouts (every ``algorithm.*`` of ``sdpo`` applies).
Its defaults are the official SDPO code's (``conf/algorithm/sdpo_official.yaml``: Jensen-Shannon on the top-100
logits with a tail bucket, mean over the distilled tokens...), not TRL's, since the paper builds on that code; the
ablation sweep compares VPD with that preset, so only the E-step differs.

**E-step** (every ``e_step_every`` M-steps, before that step's M-step, on its rollouts): the teacher q_phi(y | x, C)
is refined toward the reward-tilted target q*(y | x) = pi_ref(y | x) exp(r(x, y) / beta) / Z(x) (Appendix A.1).
The rollouts of a prompt are G samples of the current student pi_theta, so on that support q* is the self-normalised
importance estimate q*_i = softmax_i(l_i + r_i / beta), with l_i = log pi_ref(y_i | x) - log pi_theta(y_i | x), and
Z(x) = sum_i softmax(l)_i exp(r_i / beta). With the **dynamic reference prior** (Eq. 7, ``reference_prior=dynamic``)
pi_ref is the current student, l = 0 and q* = softmax(r / beta) over the group; ``fixed`` anchors to the initial
student (a frozen copy supplies log pi_0), the paper's ablation. The teacher's own distribution on the same support
is q_phi,i = softmax_i(log q_phi(y_i | x, C_i) - log pi_theta(y_i | x)), and the E-step minimises KL(q* || q_phi)
over each group, averaged over groups: its gradient raises the teacher's likelihood ratio on rollouts the target
prefers and lowers it on the others, and is zero when log q_phi / pi_theta = r / beta + const.

**Adaptive trust region.** beta is chosen at every E-step so that the target stays within ``trust_region`` nats of
the anchor: mean over groups of KL(q*_g || pi_ref,g) = epsilon on the sampled support (the temperature dual of
REPS / MPO; ``tilt_beta`` fixes beta instead). The teacher's update is then held to the same bound: after the
optimizer step the teacher's support distribution must satisfy mean_g KL(q_phi,g || pi_ref,g) <= max(epsilon, its
value before the step); otherwise the step is halved (parameters interpolated) up to ``max_backtracks`` times, then
rejected. So an E-step never takes the teacher outside the region, and never further out if it was already outside
(the student moved, or the fixed prior). The anchor is the student that generated the batch.

**Our reading, not yet the paper's E-step.** The target, the prior and the trust region anchored to the current
student are the paper's (Appendix A.1, Eq. 7); the sampled-support estimate, the forward KL to q* (a reward-weighted,
contrastive fit), the temperature dual and the backtracking guard are ours, written when the method section was not
at hand. The paper's Section 3.2 (unpaired preference optimisation of the teacher with an implicit reward
beta log q_phi / pi_theta) replaces them in issue 17, in ``estep.py``; the README's deviations table lists the rest.

**Teacher weights.** ``teacher_weights=copy``: the teacher has its own weights, refined by the E-step and, with
``ema_update_rate`` > 0, moved toward the student after every M-step (so it follows the student and keeps its
refinement); memory: a copy of the weights, its AdamW state (2 copies) and the step's snapshot (1 copy).
``shared``: the teacher is the student with the feedback in context, so the E-step updates the student's weights on
feedback-conditioned sequences too (AdamW state and snapshot as above, no weight copy). ``reference_prior=fixed``
adds a frozen initial student.

Logged at each E-step: ``vpd/beta``, ``vpd/target_kl`` (KL(q* || prior)), ``vpd/teacher_kl_before`` / ``after``
(the teacher's support KL to the prior), ``vpd/e_step_loss``, ``vpd/backtracks``, ``vpd/rejected``,
``vpd/teacher_entropy`` (after the update: the teacher's entropy across E-steps), ``vpd/prior_log_weight_std``
(the spread of the fixed prior's log-weights; 0 for the dynamic prior), plus SDPO's telemetry every step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from socratic_exp.algorithms.sdpo.trainer import SDPOTrainer
from socratic_exp.algorithms.trl_batch import rollout_logps, sequence_inputs
from socratic_exp.algorithms.vpd.estep import (
    NOTHING_TO_FIT,
    backtrack_fractions,
    e_step_loss,
    solve_beta,
    step_bound,
    target_kl,
    teacher_support_kl,
    tilted_target,
    within_bound,
)

if TYPE_CHECKING:
    from socratic_exp.algorithms.vpd.config import VPD


class VPDTrainer(SDPOTrainer):
    """SDPO's trainer with VPD's E-step on the teacher before the M-step."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        settings: VPD = self.sdpo
        self.reference_model = None
        if settings.reference_prior == "fixed":
            from socratic_exp.models.base import frozen_copy

            self.reference_model = frozen_copy(self.accelerator.unwrap_model(self.model))
        self.teacher_parameters = [p for p in self.teacher_model.parameters()]
        for parameter in self.teacher_parameters:
            parameter.requires_grad_(True)
        self.e_optimizer = torch.optim.AdamW(
            self.teacher_parameters, lr=settings.teacher_learning_rate or settings.learning_rate, weight_decay=0.0
        )
        self._last_e_step: int | None = None

    def _teacher_memory(self, student: Any) -> dict[str, Any]:
        memory = super()._teacher_memory(student)
        size_mb = sum(p.numel() * p.element_size() for p in student.parameters()) / 2**20
        extra = 3 * size_mb + (size_mb if self.sdpo.reference_prior == "fixed" else 0.0)
        memory["copy_mb"] += extra
        memory["description"] += f"; the E-step adds +{extra:.1f} MB (AdamW state, the step's snapshot" + (
            ", a frozen initial student for the fixed prior)" if self.sdpo.reference_prior == "fixed" else ")"
        )
        return memory

    def _after_contexts(self, output: dict[str, Any], rollouts: list[Any], mode: str) -> None:
        step = self.state.global_step
        due = self._last_e_step is None or step - self._last_e_step >= self.sdpo.e_step_every
        if mode != "train" or not due:
            return
        self._last_e_step = step
        for name, value in self.e_step(output, rollouts).items():
            if value is not None:
                self._metrics[mode][f"vpd/{name}"].append(value)

    # --- the E-step ---------------------------------------------------------------------------------------
    def e_step(self, output: dict[str, Any], rollouts: list[Any]) -> dict[str, float | None]:
        settings: VPD = self.sdpo
        groups = len(rollouts) // self.num_generations
        tokens = self._token_mask(output)
        keep = output["completion_ids"].size(1)
        rewards, student, prior, beta, target = self.e_step_target(output, rollouts)
        snapshot = [p.detach().clone() for p in self.teacher_parameters]
        was_training = self.teacher_model.training
        self.teacher_model.eval()  # no dropout: the bound is checked on the function the M-step will use
        before = loss_value = None
        for _ in range(settings.e_step_iterations):
            self.e_optimizer.zero_grad(set_to_none=True)
            ratio = self._teacher_log_ratio(output, tokens, keep, student, groups)
            loss = e_step_loss(ratio, target)
            if before is None:
                before = teacher_support_kl(ratio.detach(), prior)
            loss_value = float(loss.detach())
            if loss_value < NOTHING_TO_FIT:  # Adam would turn a vanishing gradient into a full-size step
                break
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.teacher_parameters, settings.max_grad_norm)
            self.e_optimizer.step()
        self.e_optimizer.zero_grad(set_to_none=True)  # shared weights: no E-step gradient reaches the M-step
        after, entropy = self._teacher_state(output, tokens, keep, student, groups, prior)
        bound = step_bound(settings.trust_region, before)
        backtracks, rejected = 0, 0.0
        if not within_bound(after, bound):
            updated = [p.detach().clone() for p in self.teacher_parameters]
            for fraction in backtrack_fractions(settings.max_backtracks):
                backtracks += 1
                self._interpolate(snapshot, updated, fraction)
                after, entropy = self._teacher_state(output, tokens, keep, student, groups, prior)
                if within_bound(after, bound):
                    break
            else:
                self._interpolate(snapshot, updated, 0.0)
                after, entropy = self._teacher_state(output, tokens, keep, student, groups, prior)
                rejected = 1.0
        self.teacher_model.train(was_training)
        return {
            "beta": beta,
            "target_kl": target_kl(rewards, beta, prior),
            "teacher_kl_before": before,
            "teacher_kl_after": after,
            "e_step_loss": loss_value,
            "backtracks": float(backtracks),
            "rejected": rejected,
            "teacher_entropy": entropy,
            "prior_log_weight_std": float(prior.std()) if self.reference_model is not None else 0.0,
        }

    def e_step_target(self, output: dict[str, Any], rollouts: list[Any]) -> tuple[Any, Any, Any, float, Any]:
        """The E-step's target on the batch: rewards (groups, G), the student's sequence log-probabilities (B,), the
        prior's log-weights l = log pi_ref - log pi_theta (groups, G; zero for the dynamic prior), beta and q*."""
        settings: VPD = self.sdpo
        groups = len(rollouts) // self.num_generations
        tokens = self._token_mask(output)
        keep = output["completion_ids"].size(1)
        rewards = torch.tensor([r.score for r in rollouts], device=tokens.device).view(groups, -1)
        with torch.no_grad():
            student = self._student_sequence_logps(output, tokens)
            prior = torch.zeros_like(rewards)
            if self.reference_model is not None:
                ids, mask = sequence_inputs(output)
                reference, _ = self._sampled_logps(self.reference_model, ids, mask, keep)
                prior = ((reference * tokens).sum(1) - student).view(groups, -1)
        beta = settings.tilt_beta or solve_beta(rewards, settings.trust_region, prior)
        target, _ = tilted_target(rewards, beta, prior)
        return rewards, student, prior, beta, target

    def _student_sequence_logps(self, output: dict[str, Any], tokens: Any) -> Any:
        """log pi_theta(y | x) of each rollout under the policy that sampled it."""
        return (rollout_logps(self, output) * tokens).sum(1)

    def _teacher_log_ratio(self, output: dict[str, Any], tokens: Any, keep: int, student: Any, groups: int) -> Any:
        """log q_phi(y | x, C) - log pi_theta(y | x) per rollout, as (groups, G), with the teacher's gradient."""
        teacher, _ = self._sampled_logps(
            self.teacher_model, output["teacher_input_ids"], output["teacher_attention_mask"], keep
        )
        return ((teacher * tokens).sum(1) - student).view(groups, -1)

    def _teacher_state(
        self, output: dict[str, Any], tokens: Any, keep: int, student: Any, groups: int, prior: Any
    ) -> tuple[float, float | None]:
        """The teacher's support KL to the prior, and its mean entropy on the distilled tokens (if any)."""
        with torch.no_grad():
            teacher, entropy = self._sampled_logps(
                self.teacher_model, output["teacher_input_ids"], output["teacher_attention_mask"], keep
            )
        ratio = ((teacher * tokens).sum(1) - student).view(groups, -1)
        distilled = tokens * output["distill_mask"].unsqueeze(1)
        mean_entropy = float((entropy * distilled).sum() / distilled.sum()) if distilled.sum() > 0 else None
        return teacher_support_kl(ratio, prior), mean_entropy

    @torch.no_grad()
    def _interpolate(self, old: list[Any], new: list[Any], fraction: float) -> None:
        for parameter, start, end in zip(self.teacher_parameters, old, new, strict=True):
            parameter.copy_(start + fraction * (end - start))
