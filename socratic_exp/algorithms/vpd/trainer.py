"""``algorithm=vpd``'s trainer: Variational Policy Distillation (VPD, arXiv 2605.15113), variational EM on SDPO.

**M-step** (every step): SDPO's distillation, unchanged: the student minimises the divergence to the feedback-
conditioned teacher's token distribution on its own on-policy rollouts (every ``algorithm.*`` of ``sdpo`` applies).
Its defaults are the official SDPO code's (``conf/algorithm/sdpo_official.yaml``: Jensen-Shannon on the top-100
logits with a tail bucket, mean over the distilled tokens...), since the paper builds on that code.

**E-step** (Section 3.2; ``estep.py``), once every ``e_step_every`` M-steps, on that step's rollouts before its
M-step: the teacher is refined by unpaired preference optimisation (BCO) of its implicit reward r~ = beta * (log
q_phi(y | x, C) - log pi_ref(y | x)) on the batch's successful and failed trajectories, each scored under its own
feedback context C. Only trajectories with a context take part (the others have no teacher to refine), and only in a
batch holding both successes and failures (a one-sided batch has nothing to separate; the E-step is skipped and
logged as such). **Dynamic reference prior** (Eq. 7, ``reference_prior=dynamic``): pi_ref is the current student,
the policy that sampled the batch, so the trust region beta KL(q_phi || pi_theta) slides with the student (the
adaptive trust region); ``fixed`` anchors it to a frozen copy of the initial student, Figure 5's ablation, and
differs in nothing else. ``e_step=off`` keeps the M-steps only (SDPO with VPD's contexts and settings).

**Contexts** (``feedback_on_success``): successful trajectories get the environment's verdict as their context C+,
failed ones their feedback C-, so the presence of a context says nothing about success and a teacher cannot fit the
E-step by lowering its likelihood whenever a hint is present; with the equal-weight BCO loss such a teacher gets no
gradient (tests/test_vpd.py).

**Teacher weights.** ``teacher_weights=shared`` (the paper's): the teacher is the student with the feedback in
context, so the E-step updates the student's weights on feedback-conditioned sequences (its own AdamW, the E-step's
state: 2 copies of the trainable parameters). ``copy``: the teacher has its own weights, refined by the E-step and,
with ``teacher_regularization=ema``, moved toward the student after every M-step. ``teacher_regularization``
defaults to ``none`` (our reading: the paper regularises the teacher through the E-step's trust region only);
``trust_region`` mixes the shared teacher's logits with a frozen initial student's (official SDPO's mode), and the
E-step's gradient then reaches the student's weights through their share. ``reference_prior=fixed`` adds a frozen
initial student (with LoRA: the base model, adapters off, no copy). With LoRA the E-step trains the teacher's adapter
only (the student's own for ``shared``, a second one for ``copy``; ``SDPOTrainer._lora_teacher``).

**Several processes.** The E-step's batch is every process's trajectories, as one process would see them: the
counts (and the skip), delta, each side's mean in the loss and the telemetry are computed from sums and counts added
up across processes, and each process's share of the gradient is summed over the processes before the clip and the
step (the E-step's optimizer is outside DDP), so every process's teacher makes the same update.

Logged at each E-step: ``vpd/e_step_loss``, ``vpd/reward_success`` / ``reward_failure`` (mean implicit reward of each
side before the update), ``vpd/shift`` (delta), ``vpd/classifier_accuracy`` (share of trajectories on their side of
delta, measured on the fresh batch before the teacher trains on it: the teacher's held-out skill at reading the
feedback), ``vpd/successes``, ``vpd/failures``, ``vpd/skipped``; SDPO's telemetry every step.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from socratic_exp.algorithms.sdpo.trainer import SDPOTrainer
from socratic_exp.algorithms.trl_batch import rollout_logps, sequence_inputs
from socratic_exp.algorithms.vpd.estep import (
    RunningShift,
    batch_shift,
    classifier_accuracy,
    e_step_loss,
    implicit_rewards,
    side_means,
)
from socratic_exp.core.distributed import summed
from socratic_exp.models.adapters import base_view, is_lora

if TYPE_CHECKING:
    from socratic_exp.algorithms.vpd.config import VPD


class VPDTrainer(SDPOTrainer):
    """SDPO's trainer with VPD's E-step on the teacher every ``e_step_every`` M-steps."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        settings: VPD = self.sdpo
        self.reference_model = None
        self.shift = RunningShift()
        self._last_e_step: int | None = None
        if settings.e_step == "off":
            return
        if settings.reference_prior == "fixed":
            from socratic_exp.models.base import frozen_copy

            student = self.accelerator.unwrap_model(self.model)
            # LoRA: the initial student is the base model with its adapters off (no copy)
            self.reference_model = base_view(student) if is_lora(student) else frozen_copy(student)
        if settings.teacher_weights == "copy":
            self.teacher_model.requires_grad_(True)
        self.teacher_parameters = [p for p in self.teacher_model.parameters() if p.requires_grad]
        self.e_optimizer = torch.optim.AdamW(
            self.teacher_parameters, lr=settings.teacher_learning_rate or settings.learning_rate, weight_decay=0.0
        )

    def _teacher_memory(self, student: Any) -> dict[str, Any]:
        memory = super()._teacher_memory(student)
        if self.sdpo.e_step == "off":
            return memory

        def size_mb(model: Any) -> float:
            return sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20

        fixed_copy = self.sdpo.reference_prior == "fixed" and not is_lora(student)
        # the E-step's AdamW state covers the teacher's own parameters (with LoRA: its adapter)
        extra = 2 * size_mb(self.teacher_model) + (size_mb(student) if fixed_copy else 0.0)
        memory["copy_mb"] += extra
        memory["description"] += f"; the E-step adds +{extra:.1f} MB (its AdamW state" + (
            ", a frozen initial student for the fixed prior)" if fixed_copy else ")"
        )
        return memory

    def _after_contexts(self, output: dict[str, Any], rollouts: list[Any], mode: str) -> None:
        step = self.state.global_step
        due = self._last_e_step is None or step - self._last_e_step >= self.sdpo.e_step_every
        if mode != "train" or not due or self.sdpo.e_step == "off":
            return
        self._last_e_step = step
        for name, value in self.e_step(output).items():
            self._metrics[mode][f"vpd/{name}"].append(value)

    # --- the E-step ---------------------------------------------------------------------------------------
    def e_step(self, output: dict[str, Any]) -> dict[str, float]:
        """One E-step on the batch's trajectories that have a feedback context; returns its telemetry.

        The batch is every process's trajectories: the counts, the skip, the shift, each side's mean in the loss, the
        telemetry and the gradient are the whole batch's (sums and counts added up across processes, the gradient
        summed: the E-step runs outside DDP), so every process makes the same update as one process would."""
        settings: VPD = self.sdpo
        tokens = self._token_mask(output)
        chosen = output["distill_mask"].bool()
        success = output["correct"].bool()[chosen]
        successes, failures = summed(self.accelerator, success.sum(), (~success).sum())
        counts = {"successes": successes, "failures": failures}
        if not (successes > 0 and failures > 0):
            return {**counts, "skipped": 1.0}
        total = functools.partial(summed, self.accelerator)  # the whole batch's sums, over the processes
        reference = self.reference_logps(output, tokens)[chosen]
        first: dict[str, float] = {}
        for _ in range(settings.e_step_iterations):
            self.e_optimizer.zero_grad(set_to_none=True)
            teacher = self.teacher_sequence_logps(output, tokens)[chosen]
            rewards = implicit_rewards(teacher, reference, settings.e_step_beta)
            if not first:
                detached = rewards.detach()
                means = side_means(detached, success, total)
                shift = self.shift.update(batch_shift(means))
                first = {
                    "reward_success": means[0],
                    "reward_failure": means[1],
                    "shift": shift,
                    "classifier_accuracy": classifier_accuracy(detached, success, shift, total),
                }
            loss = e_step_loss(rewards, success, shift, sides=(successes, failures))
            if "e_step_loss" not in first:
                first["e_step_loss"] = summed(self.accelerator, loss.detach())[0]
            loss.backward()
            self._sum_teacher_gradients()
            torch.nn.utils.clip_grad_norm_(self.teacher_parameters, settings.max_grad_norm)
            self.e_optimizer.step()
        self.e_optimizer.zero_grad(set_to_none=True)  # shared weights: no E-step gradient reaches the M-step
        return {**first, **counts, "skipped": 0.0}

    def _sum_teacher_gradients(self) -> None:
        """Each process's share of the E-step's gradient, summed over the processes (one all-reduce): every process
        then clips and steps with the batch's gradient and its teacher stays the same as the others'."""
        if self.accelerator.num_processes == 1:
            return
        parameters = self.teacher_parameters
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in parameters])
        flat = self.accelerator.reduce(flat, reduction="sum")
        offset = 0
        for parameter in parameters:
            size = parameter.numel()
            parameter.grad = flat[offset : offset + size].view_as(parameter).to(parameter.dtype)
            offset += size

    @torch.no_grad()
    def reference_logps(self, output: dict[str, Any], tokens: Any) -> Any:
        """log pi_ref(y | x) per rollout: the student that sampled the batch (dynamic), or the initial one (fixed)."""
        if self.reference_model is None:
            return (rollout_logps(self, output) * tokens).sum(1)
        ids, mask = sequence_inputs(output)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.reference_model, ids, mask, output["completion_ids"].size(1)
        )
        return (logps * tokens).sum(1)

    def teacher_sequence_logps(self, output: dict[str, Any], tokens: Any) -> Any:
        """log q_phi(y | x, C) per rollout, with the teacher's gradient."""
        logps, _ = self.teacher_logps(output)
        return (logps * tokens).sum(1)
