"""The entropy mask as a mixin of TRL's GRPOTrainer, and ``algorithm=entropy_masked``'s trainer.

Why a subclass: TRL's ``top_entropy_quantile`` already routes the loss through ``get_high_entropy_mask`` and applies
its result where it belongs (the policy term and the entropy bonus, not the KL); the mixin overrides that hook only,
because TRL's selection keeps every tie at its quantile threshold, has no bottom/random mode and no kept-token
normalisation, and logs nothing about the mask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from socratic_exp.algorithms.entropy_masked.config import SELECTION_BATCH_FIX, selection_batch_problem
from socratic_exp.algorithms.entropy_masked.mask import kept_count, select_top, selection_scores, token_weights
from socratic_exp.algorithms.trl_batch import loss_mask, sequence_inputs
from socratic_exp.core.errors import ConfigError

if TYPE_CHECKING:
    from socratic_exp.algorithms.entropy_masked.config import EntropyMask
    from socratic_exp.core.metrics import MetricsSink

PERCENTILES = (50, 80, 90, 99)
CONTEXT_BEFORE, CONTEXT_AFTER = 32, 8  # tokens of context around a forking token in the table
WEIGHTS_KEY = "entropy_mask_weights"  # a loss call's share of its generation batch's token weights
# The model inputs TRL's _compute_loss passes on besides the ids (multimodal students); the pre-pass passes the same.
FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


class EntropyMaskMixin:
    """The masked policy loss and its analysis, for a ``trl.GRPOTrainer`` subclass (see the package docstring)."""

    def __init__(
        self,
        *args: Any,
        entropy_mask: EntropyMask | None = None,
        metrics_sink: MetricsSink | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.entropy_mask_settings = entropy_mask
        self.metrics_sink = metrics_sink
        self._loss_inputs: dict[str, Any] | None = None
        self._forking: tuple[Any, ...] | None = None
        self._mask_generator: Any = None
        if entropy_mask is None:
            return
        problem = selection_batch_problem(self.args.gradient_accumulation_steps, self.args.steps_per_generation)
        if problem is not None:  # algorithms composing the mask validate their own settings; this covers them all
            raise ConfigError(
                "algorithm.steps_per_generation", self.args.steps_per_generation, problem, SELECTION_BATCH_FIX
            )
        # TRL calls get_high_entropy_mask only while top_entropy_quantile < 1: 0 routes every loss through it, rho=1
        # included (the analysis is then logged and every token kept, so the loss is GRPO's exactly).
        self.top_entropy_quantile = 0.0
        if entropy_mask.mode == "random":
            # A private stream: the random mask leaves the sampling RNG (and so the rollouts) as in the other modes.
            self._mask_generator = torch.Generator(device=self.accelerator.device)
            self._mask_generator.manual_seed(self.args.seed + self.accelerator.process_index)

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        """TRL's slice of the buffered generation batch; when a new generation batch was just split into several
        loss calls, its tokens are ranked together first (``_weigh_generation_batch``)."""
        before = getattr(self, "_buffered_inputs", None)
        inputs = super()._prepare_inputs(generation_batch)
        if (
            self.entropy_mask_settings is not None
            and self.model.training
            and self.args.steps_per_generation > 1
            and self._buffered_inputs is not before
        ):
            self._weigh_generation_batch(self._buffered_inputs)
        return inputs

    def _weigh_generation_batch(self, slices: list[dict[str, Any]]) -> None:
        """Rank the tokens of the whole generation batch (Eq. 5's batch B: with the paper's settings, 512 prompts x
        16 responses, which then feed 16 optimizer steps) instead of each loss call's share of it, and put each
        slice's token weights into the slice (``WEIGHTS_KEY``), where its loss call finds them.

        The entropies come from one no-grad forward pass of the policy that generated the batch (TRL's loss computes
        them per loss call only, too late to rank across calls). The ranking therefore uses the rollout policy's
        entropies for every optimizer step of the batch; Eq. 5 takes them from the policy being trained, which
        differs from the rollout policy after the batch's first optimizer step (docs/entropy-masking.md, deviations)."""
        entropies = []
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            for part in slices:
                input_ids, attention_mask = sequence_inputs(part)
                _, entropy, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    input_ids,
                    attention_mask,
                    part["completion_ids"].size(1),
                    compute_entropy=True,
                    **{key: part.get(key) for key in FORWARD_KEYS},
                )
                entropies.append(entropy)
        valid = torch.cat([loss_mask(part) for part in slices]).bool()
        ids = torch.cat([part["completion_ids"] for part in slices])
        weights = self._entropy_weights(torch.cat(entropies), valid, ids)
        for part, part_weights in zip(slices, weights.split([len(p["completion_ids"]) for p in slices]), strict=True):
            part[WEIGHTS_KEY] = part_weights

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        self._loss_inputs = inputs  # TRL's hook sees neither the precomputed weights nor the ids (forking table)
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._loss_inputs = None

    def get_high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        """The token weights TRL multiplies into the policy loss (``threshold``, TRL's quantile, is not used): the
        generation batch's, when it was ranked as a whole; else this loss call's tokens (then the whole generation
        batch: ``steps_per_generation=1``) ranked here by the entropies of the policy being trained."""
        settings = self.entropy_mask_settings
        if settings is None:
            return super().get_high_entropy_mask(entropies, mask, threshold)
        inputs = self._loss_inputs or {}
        if WEIGHTS_KEY in inputs:
            return inputs[WEIGHTS_KEY]
        return self._entropy_weights(entropies, mask.bool(), inputs.get("completion_ids"))

    def _entropy_weights(self, entropies: torch.Tensor, valid: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor:
        """Rank the ``valid`` tokens of ``entropies`` (rows x tokens) together with every other process's, log the
        analysis, and return this process's token weights (``mask.py``)."""
        settings = self.entropy_mask_settings
        local_entropy = entropies.detach()[valid].float()
        noise = None
        if settings.mode == "random":
            noise = torch.rand(
                local_entropy.shape, generator=self._mask_generator, device=local_entropy.device, dtype=torch.float
            )
        scores = selection_scores(local_entropy, settings.mode, noise)
        gathered, mine = self._gather_tokens(torch.stack([local_entropy, scores], dim=1))
        entropy_all, scores_all = gathered.unbind(1)
        keep_all = select_top(scores_all, kept_count(entropy_all.numel(), settings.rho))
        keep = torch.zeros_like(valid)
        keep[valid] = keep_all[mine]
        if entropy_all.numel():
            self._log_entropy_analysis(entropy_all, keep_all)
            self._remember_forking_tokens(entropies, valid, keep, ids)
        return token_weights(
            keep,
            valid,
            normalize=settings.normalize,
            loss_type=self.loss_type,
            batch_tokens=entropy_all.numel(),
            batch_kept=int(keep_all.sum()),
        )

    def _gather_tokens(self, local: torch.Tensor) -> tuple[torch.Tensor, slice]:
        """Every process's rows of ``local`` (one per token) in process order, and where this process's rows are."""
        accelerator = self.accelerator
        counts = accelerator.gather(torch.tensor([local.shape[0]], device=local.device))
        padded = accelerator.pad_across_processes(local, dim=0)
        gathered = accelerator.gather(padded)  # each process's rows, then its padding
        width = padded.shape[0]
        real = torch.arange(gathered.shape[0], device=local.device) % width < counts.repeat_interleave(width)
        offset = int(counts[: accelerator.process_index].sum())
        return gathered[real], slice(offset, offset + local.shape[0])

    def _log_entropy_analysis(self, entropy: torch.Tensor, keep: torch.Tensor) -> None:
        ordered = entropy.sort().values
        last = ordered.numel() - 1
        values = {
            "entropy_mask/kept_fraction": keep.float().mean(),
            **{f"entropy_mask/entropy_p{p}": ordered[round(p / 100 * last)] for p in PERCENTILES},
            "entropy_mask/kept_entropy": entropy[keep].mean(),
        }
        if not keep.all():  # nothing dropped at rho = 1: no value rather than NaN
            values["entropy_mask/dropped_entropy"] = entropy[~keep].mean()
        metrics = self._metrics["train" if self.model.training else "eval"]
        for name, value in zip(values, torch.stack(list(values.values())).tolist(), strict=True):  # one sync
            metrics[name].append(value)

    def _remember_forking_tokens(
        self, entropies: torch.Tensor, valid: torch.Tensor, keep: torch.Tensor, ids: torch.Tensor | None
    ) -> None:
        """The latest ranked batch's highest-entropy tokens, decoded into the table at the next log."""
        count = min(self.entropy_mask_settings.forking_tokens, int(valid.sum()))
        if not count or ids is None or not self.accelerator.is_main_process:
            return
        flat = entropies.detach().float().masked_fill(~valid, float("-inf")).flatten()
        top = flat.topk(count).indices
        rows, cols = top // entropies.shape[1], top % entropies.shape[1]
        self._forking = (
            ids[rows].cpu(),
            valid[rows].cpu(),
            cols.tolist(),
            flat[top].tolist(),
            keep.flatten()[top].tolist(),
        )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        super().log(logs, start_time)
        if self._forking is not None and self.metrics_sink is not None:
            self.metrics_sink.log_table("forking_tokens", self._forking_rows(), self.state.global_step)
        self._forking = None

    def _forking_rows(self) -> list[dict[str, Any]]:
        ids, valid, cols, entropies, kept = self._forking
        decode = self.processing_class.decode
        rows = []
        for i, (col, entropy, is_kept) in enumerate(zip(cols, entropies, kept, strict=True)):
            start, end = max(0, col - CONTEXT_BEFORE), col + 1 + CONTEXT_AFTER
            rows.append(
                {
                    "before": decode(ids[i, start:col][valid[i, start:col]].tolist()),
                    "token": decode(ids[i, col : col + 1].tolist()),
                    "after": decode(ids[i, col + 1 : end][valid[i, col + 1 : end]].tolist()),
                    "entropy": round(entropy, 4),
                    "kept": bool(is_kept),
                }
            )
        return rows


class EntropyMaskedTrainer(EntropyMaskMixin, GRPOTrainer):
    """``algorithm=entropy_masked``: TRL's GRPOTrainer with the entropy mask."""
