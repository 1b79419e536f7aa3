"""``algorithm=sdpo``'s trainer: Self-Distillation Policy Optimization (SDPO, arXiv 2601.20802), the baseline of VPD.

The teacher is the model conditioned on feedback (a successful sibling rollout, the verifier's reason, or a
teacher's critique: ``contexts.py``); the student distils the teacher's token
distribution on its own on-policy rollouts, only on the rollouts with usable feedback.

**Built on TRL's pieces.** The per-token divergences, the top-k tail bucket and the clipped importance ratio are TRL's
(``trl.experimental.sdpo.loss_utils``), the EMA teacher update is TRL's ``SyncRefModelCallback.sync_target_model``
(what TRL's SDPO teacher sync calls). The trainer is TRL's ``GRPOTrainer``, not ``trl.experimental.sdpo.SDPOTrainer``:
the SDPO trainer is a separate trainer with its own rollout and sampler, while the run's prompt samplers, the
completions table, the GRPO losses the hybrids combine with, and the comparison with ``algorithm=grpo`` on the same
rollout code all live on ``GRPOTrainer``. The feedback context is built here rather than read from a
``privileged_context`` dataset column as TRL does, because our feedback (verdicts, teacher critiques) exists only
after the rollout.

**Departures from TRL's SDPO (settings keep TRL's defaults unless said).** Feedback sources beyond TRL's two
(``teacher``); completion-style templates (``context_style=plain``, see ``contexts.py``); ``teacher_weights``
``shared`` or ``copy`` with the official code's ``teacher_regularization``: ``ema`` (the copy moved
``teacher_update_rate`` toward the student after every step, TRL's ``ema``), ``none`` (shared: TRL's ``live``; copy:
the initial student, TRL's ``base``) or ``trust_region`` (shared: the logits lerp(initial student, student,
``teacher_update_rate``), the official ``TrustRegionTeacher``); ``loss_aggregation=token_mean`` (the official
code's) next to TRL's per-sequence mean; ``topk`` capped at the vocabulary; the hybrid baselines of the VPD paper's
Appendix B:

- ``joint``: ``distill_weight * L_SDPO + rl_weight * L_GRPO`` (B.23), with TRL's GRPO loss (``loss_type``, ``beta``...),
  which scores the student in a second forward pass.
- ``advantage_reshaping``: GRPO with the per-token advantage A_t = A_GRPO + ``reshape_coef`` * sg(log q(y_t | x, C,
  y_<t) - log pi(y_t | x, y_<t)) on rollouts with usable feedback (the SDPO token advantage added to GRPO's).
- ``reweighting``: GRPO whose sequence advantage is spread over the tokens by the teacher: w_t = clip(exp(sign(A) *
  (log q - log pi)), 1/c, c), normalised to mean 1 over the rollout's tokens (c = ``reweight_clip``). The paper's
  definition is cut off in the text we have; this is our reading: tokens the teacher prefers get more of a positive
  advantage, tokens it rejects more of a negative one, and the sequence's total advantage is unchanged.

**Telemetry** (every step): ``self_distillation/teacher_student_kl`` (k1 estimate of KL(student || teacher) on the
distilled tokens), ``teacher_entropy``, ``reward_margin`` (mean per-token log q/pi of correct minus incorrect
rollouts: does the teacher tell them apart?), ``usable_feedback_share`` and the share per source,
``distillation_loss``. Each is a figure of the whole batch: on several processes the sums and counts behind it are
added up across processes before they are divided (``summed``), so every process logs what one process would on the
same batch. So is ``token_mean``'s loss, a mean over the distilled tokens of every process. The teacher's memory
(shared weights or a copy, and its size) is logged at start and kept in ``self_distillation/teacher_copy_mb``.

**LoRA** (``model.lora.r > 0``): the teacher shares the base weights; ``copy`` is a second adapter (``teacher``,
TRL's name) started as a copy of the student's and moved toward it by the same EMA, ``shared`` the student's own
adapter (``_lora_teacher``).
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.experimental.sdpo.loss_utils import apply_importance_sampling_clipping
from trl.trainer.callbacks import SyncRefModelCallback
from trl.trainer.utils import entropy_from_logits, pad, selective_log_softmax

from socratic_exp.algorithms.sdpo.contexts import Rollout, build_contexts
from socratic_exp.algorithms.sdpo.losses import (
    aggregated,
    distilled_tokens,
    margin_of_means,
    per_token_divergence,
    reshaped_advantages,
    reweighted_advantages,
)
from socratic_exp.algorithms.trl_batch import full_logits, loss_mask, rollout_logps, sequence_inputs
from socratic_exp.core.distributed import summed
from socratic_exp.models.adapters import base_view, is_lora

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options
    from socratic_exp.algorithms.sdpo.config import SDPO

log = logging.getLogger("socratic_exp")


class EMATeacherCallback(TrainerCallback):
    """After each optimizer step the teacher copy moves ``teacher_update_rate`` of the way to the student."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self.trainer
        student = trainer.accelerator.unwrap_model(trainer.model)
        with torch.no_grad():
            SyncRefModelCallback.sync_target_model(student, trainer.teacher_model, trainer.sdpo.teacher_update_rate)


class SDPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose loss is SDPO's self-distillation (or one of the hybrids)."""

    def __init__(self, *args: Any, sdpo: SDPO, components: Options, chat: bool, **kwargs: Any):
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # trl.experimental.sdpo's loss functions
        self.sdpo = sdpo
        self.components = components
        self.chat = chat
        self.context_settings = sdpo.context_settings(chat)
        self._rows: list[dict[str, Any]] = []
        super().__init__(*args, **kwargs)
        student = self.accelerator.unwrap_model(self.model)
        if is_lora(student):
            self.teacher_model = self._lora_teacher(student)
        elif sdpo.teacher_weights == "shared":
            self.teacher_model = student
        else:
            from socratic_exp.models.base import frozen_copy

            self.teacher_model = frozen_copy(student)
            if sdpo.teacher_regularization == "ema":
                self.add_callback(EMATeacherCallback(self))
        # official SDPO's trust-region teacher: the live (shared) teacher's logits mixed with the initial student's
        self.initial_teacher = None
        if sdpo.teacher_regularization == "trust_region":
            from socratic_exp.models.base import frozen_copy

            self.initial_teacher = base_view(student) if is_lora(student) else frozen_copy(student)
        self.memory = self._teacher_memory(student)
        log.info("%s: %s", type(sdpo).__name__.lower(), self.memory["description"])

    def _lora_teacher(self, student: Any) -> Any:
        """With LoRA adapters the teacher shares the base weights: ``shared`` is the student's own adapter, ``copy`` a
        second adapter started as a copy of it and moved toward it by the EMA (``models/adapters.py``). Either way a
        view whose parameters are that adapter's, so the EMA and VPD's E-step touch only the adapter."""
        from socratic_exp.models.adapters import (
            STUDENT_ADAPTER,
            TEACHER_ADAPTER,
            AdapterEMACallback,
            AdapterView,
            adapter_copy,
        )

        if self.sdpo.teacher_weights == "shared":
            return AdapterView(student, STUDENT_ADAPTER)
        teacher = adapter_copy(student, TEACHER_ADAPTER)
        if self.sdpo.teacher_regularization == "ema":
            self.add_callback(AdapterEMACallback(teacher, self.sdpo.teacher_update_rate))
        return teacher

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        """Resuming keeps which parameters train: with LoRA, transformers re-activates the student's adapter after
        loading, which peft makes the only trainable one, while VPD's E-step trains the teacher adapter too (and the
        optimizer state being loaded covers both)."""
        flags = [(p, p.requires_grad) for p in self.model.parameters()]
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        for parameter, flag in flags:
            parameter.requires_grad_(flag)

    # --- teacher memory -----------------------------------------------------------------------------------
    def _teacher_memory(self, student: Any) -> dict[str, Any]:
        """What the teacher costs: nothing for shared weights, a copy of the parameters otherwise (with LoRA: of the
        adapter; plus, for VPD, the E-step's optimizer state, added by the subclass)."""
        own = self.teacher_model if is_lora(student) else student
        parameters = sum(p.numel() for p in own.parameters())
        size_mb = sum(p.numel() * p.element_size() for p in own.parameters()) / 2**20
        if self.sdpo.teacher_weights == "copy":
            extra = size_mb
            description = (
                f"teacher = a copy of the student{' adapter' if own is not student else ''} "
                f"({parameters:,} parameters, +{size_mb:.1f} MB)"
            )
        elif self.initial_teacher is not None:
            extra = 0.0 if is_lora(student) else size_mb  # with LoRA the initial student is the base model
            description = (
                f"teacher = the student's logits mixed with the initial student's (trust region, "
                f"{self.sdpo.teacher_update_rate:g} live; +{extra:.1f} MB)"
            )
        else:
            extra = 0.0
            description = "teacher = the student's own weights with the feedback in context (no extra memory)"
        return {"copy_mb": extra, "description": description}

    # --- rollout: contexts, hybrid advantages -------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._rows = inputs  # the answers, for the verifier and the teacher
        output = super()._generate_and_score_completions(inputs)
        if len(inputs) % self.num_generations:
            raise RuntimeError(f"a local batch of {len(inputs)} does not hold whole groups of rollouts")
        mode = "train" if self.model.training else "eval"
        texts = self.processing_class.batch_decode(output["completion_ids"], skip_special_tokens=True)
        verdicts = [self.components.task.verify(t, row["answer"]) for t, row in zip(texts, inputs, strict=True)]
        rollouts = [
            Rollout(row["prompt"], text, verdict.score, verdict.reason, verdict.extracted)
            for row, text, verdict in zip(inputs, texts, verdicts, strict=True)
        ]
        critic = partial(self._critique, rollouts) if "teacher" in self.context_settings.sources else None
        contexts = build_contexts(rollouts, self.num_generations, self.context_settings, critic)
        device = output["completion_ids"].device
        output["teacher_input_ids"], output["teacher_attention_mask"] = self._teacher_inputs(contexts, output)
        output["distill_mask"] = torch.tensor([float(c.usable) for c in contexts], device=device)
        output["correct"] = torch.tensor(
            [float(r.score >= self.sdpo.success_threshold) for r in rollouts], device=device
        )
        self._record_context_metrics(contexts, output["correct"], mode)
        self._after_contexts(output, rollouts, mode)
        if self.sdpo.hybrid in ("advantage_reshaping", "reweighting"):
            output["advantages"] = self._teacher_guided_advantages(output, mode)
        return output

    def _record_context_metrics(self, contexts: list[Any], correct: Any, mode: str) -> None:
        """The shares of the batch's rollouts with usable feedback, a demonstration, a critique, and of its groups
        with a success: over every process's rollouts (counts summed across processes), not this process's."""
        groups = correct.view(-1, self.num_generations)
        n, usable, solutions, critiques, successful, group_count = summed(
            self.accelerator,
            len(contexts),
            sum(c.usable for c in contexts),
            sum(c.solution is not None for c in contexts),
            sum(c.feedback is not None for c in contexts),
            (groups.sum(1) > 0).sum(),
            groups.size(0),
        )
        metrics = {
            "usable_feedback_share": usable / n,
            "solution_share": solutions / n,
            "critique_share": critiques / n,
            "success_group_share": successful / group_count,
            "teacher_copy_mb": self.memory["copy_mb"],
        }
        for name, value in metrics.items():
            self._metrics[mode][f"self_distillation/{name}"].append(value)

    def _after_contexts(self, output: dict[str, Any], rollouts: list[Rollout], mode: str) -> None:
        """A hook once the batch has its teacher contexts (VPD's E-step)."""

    def _critique(self, rollouts: list[Rollout], indices: list[int]) -> list[str]:
        """The run's teacher's guidance on these failed rollouts (its ground-truth setting applies)."""
        from socratic_exp.teachers.base import Attempt, GuidanceRequest

        requests = [
            GuidanceRequest.for_row(
                self._rows[i], [Attempt(rollouts[i].completion, rollouts[i].score, rollouts[i].reason)]
            )
            for i in indices
        ]
        return self.components.teacher.guide(requests)

    def _teacher_inputs(self, contexts: list[Any], output: dict[str, Any]) -> tuple[Any, Any]:
        """Teacher prompt (left-padded, cut from the left to ``max_reprompt_len`` and to the model's context)
        followed by the student's completion, as the teacher scores it."""
        prompt_ids, _, _ = self._tokenize_prompts([c.prompt for c in contexts])
        width = output["completion_ids"].size(1)
        limit = self.sdpo.max_reprompt_len
        positions = getattr(self.accelerator.unwrap_model(self.model).config, "max_position_embeddings", None)
        if positions:
            limit = max(1, min(limit, positions - width))
        device = output["completion_ids"].device
        ids = [torch.tensor(list(p)[-limit:], device=device) for p in prompt_ids]
        prompt = pad(ids, padding_value=self._tokenizer.pad_token_id, padding_side="left")
        prompt_mask = pad([torch.ones_like(t) for t in ids], padding_value=0, padding_side="left")
        return (
            torch.cat([prompt, output["completion_ids"]], dim=1),
            torch.cat([prompt_mask, output["completion_mask"]], dim=1),
        )

    def _student_and_teacher_logps(self, output: dict[str, Any]) -> tuple[Any, Any, Any]:
        """Sampled-token log-probabilities of student and teacher and the teacher's entropies (no gradient)."""
        student = rollout_logps(self, output)
        with torch.no_grad():
            teacher, entropy = self.teacher_logps(output, entropy=True)
        return student, teacher, entropy

    def teacher_logps(self, output: dict[str, Any], entropy: bool = False) -> tuple[Any, Any]:
        """Per-token log-probabilities of the completion tokens under the teacher (with the gradient of whatever
        trains it: VPD's E-step), and optionally its entropies."""
        keep = output["completion_ids"].size(1)
        ids, mask = output["teacher_input_ids"], output["teacher_attention_mask"]
        if self.initial_teacher is None:
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                self.teacher_model, ids, mask, keep, compute_entropy=entropy
            )
            return logps, entropies
        logits = self.teacher_logits(ids, mask, keep)
        logps = selective_log_softmax(logits, output["completion_ids"])
        return logps, (entropy_from_logits(logits) if entropy else None)

    def teacher_logits(self, input_ids: Any, attention_mask: Any, keep: int) -> Any:
        """The teacher's next-token logits on the completion: with the trust region (official SDPO's
        ``TrustRegionTeacher``) lerp(initial, live, teacher_update_rate), the initial student frozen."""
        live = full_logits(self.teacher_model, input_ids, attention_mask, keep, self.temperature)
        if self.initial_teacher is None:
            return live
        with torch.no_grad():
            initial = full_logits(self.initial_teacher, input_ids, attention_mask, keep, self.temperature)
        return torch.lerp(initial, live, self.sdpo.teacher_update_rate)

    def _teacher_guided_advantages(self, output: dict[str, Any], mode: str) -> Any:
        """Per-token advantages of the ``advantage_reshaping`` and ``reweighting`` hybrids."""
        student, teacher, entropy = self._student_and_teacher_logps(output)
        tokens = self._token_mask(output)
        self._record_teacher_stats(mode, teacher, student, entropy, tokens, output)
        delta = (teacher - student) * distilled_tokens(tokens, output["distill_mask"])
        if self.sdpo.hybrid == "advantage_reshaping":
            return reshaped_advantages(output["advantages"], delta, tokens, self.sdpo.reshape_coef)
        return reweighted_advantages(output["advantages"], delta, tokens, self.sdpo.reweight_clip)

    @staticmethod
    def _token_mask(inputs: dict[str, Any]) -> Any:
        return loss_mask(inputs).float()

    # --- loss ---------------------------------------------------------------------------------------------
    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        hybrid = self.sdpo.hybrid
        if hybrid in ("advantage_reshaping", "reweighting"):
            return super()._compute_loss(model, inputs)
        loss = self._distillation_loss(model, inputs)
        if hybrid == "joint":
            loss = self.sdpo.distill_weight * loss
            if self.sdpo.rl_weight > 0:
                loss = loss + self.sdpo.rl_weight * super()._compute_loss(model, inputs)
        return loss

    def _distillation_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        settings = self.sdpo
        completion_ids = inputs["completion_ids"]
        keep = completion_ids.size(1)
        input_ids, attention = sequence_inputs(inputs)
        student_logits = (
            model(input_ids=input_ids, attention_mask=attention, logits_to_keep=keep + 1, use_cache=False)
            .logits[:, :-1][:, -keep:]
            .float()
            / self.temperature
        )
        with torch.no_grad():
            teacher_logits = self.teacher_logits(inputs["teacher_input_ids"], inputs["teacher_attention_mask"], keep)
        per_token = per_token_divergence(
            student_logits,
            teacher_logits,
            completion_ids,
            mode=settings.distillation,
            alpha=settings.alpha,
            topk=settings.topk,
            add_tail=settings.add_tail,
        )
        student_logps = selective_log_softmax(student_logits, completion_ids)
        old = inputs.get("old_per_token_logps")
        if settings.is_clip is not None and old is not None:
            per_token = apply_importance_sampling_clipping(per_token, student_logps, old, settings.is_clip)
        tokens = self._token_mask(inputs)
        mask = distilled_tokens(tokens, inputs["distill_mask"])
        processes = self.accelerator.num_processes
        if settings.loss_aggregation == "token_mean":
            # the mean over the distilled tokens of the whole batch: this process's sum over the count on every
            # process, times the processes, which the gradient's mean over processes (DDP) divides out again
            (count,) = summed(self.accelerator, mask.sum())
            loss = aggregated(per_token, mask, "token_mean", count) * processes
        else:
            # the mean over rollouts (TRL's): every process holds as many rollouts, so the mean over processes is
            # the batch's mean
            loss = aggregated(per_token, mask, "sequence_mean")
        mode = "train" if self.model.training else "eval"
        with torch.no_grad():
            teacher_logps = selective_log_softmax(teacher_logits, completion_ids)
            log_q = teacher_logits.log_softmax(-1)
            entropy = -(log_q.exp() * log_q).sum(-1)
            self._record_teacher_stats(mode, teacher_logps, student_logps.detach(), entropy, tokens, inputs)
            (batch_loss,) = summed(self.accelerator, loss.detach())
            self._metrics[mode]["self_distillation/distillation_loss"].append(batch_loss / processes)
        if mask.sum() == 0:
            loss = student_logits.sum() * 0.0  # keeps the graph: a zero gradient, not a failed backward
        return loss / (self.current_gradient_accumulation_steps if mode == "train" else 1.0)

    def _record_teacher_stats(
        self, mode: str, teacher: Any, student: Any, entropy: Any, tokens: Any, inputs: dict[str, Any]
    ) -> None:
        """Teacher-student KL and teacher entropy on the distilled tokens; the reward margin on all rollouts. Each is
        over the whole batch: sums and counts are added up across processes before they are divided."""
        distilled = distilled_tokens(tokens, inputs["distill_mask"])
        log_ratio = ((teacher - student) * tokens).sum(1) / tokens.sum(1).clamp(min=1.0)
        correct = inputs["correct"].bool()
        count, kl, entropy_sum, right_sum, right, wrong_sum, wrong = summed(
            self.accelerator,
            distilled.sum(),
            ((student - teacher) * distilled).sum(),
            (entropy * distilled).sum(),
            log_ratio[correct].sum(),
            correct.sum(),
            log_ratio[~correct].sum(),
            (~correct).sum(),
        )
        metrics = self._metrics[mode]
        if count > 0:
            metrics["self_distillation/teacher_student_kl"].append(kl / count)
            metrics["self_distillation/teacher_entropy"].append(entropy_sum / count)
        margin = margin_of_means(right_sum, right, wrong_sum, wrong)
        if margin is not None:
            metrics["self_distillation/reward_margin"].append(margin)
