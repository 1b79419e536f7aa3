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

from socratic_exp.algorithms.entropy_masked.mask import SEQUENCE_MEAN_LOSSES, kept_count, select_top

if TYPE_CHECKING:
    from socratic_exp.algorithms.entropy_masked.config import EntropyMask
    from socratic_exp.run_folder import MetricsSink

PERCENTILES = (50, 80, 90, 99)
CONTEXT_BEFORE, CONTEXT_AFTER = 32, 8  # tokens of context around a forking token in the table


def with_entropy_mask(base: type) -> type:
    """``base`` (TRL's GRPOTrainer or a subclass) with the mask in front."""
    return type(f"EntropyMasked{base.__name__}", (EntropyMaskMixin, base), {})


class EntropyMaskMixin:
    """The masked policy loss and its analysis, for a ``trl.GRPOTrainer`` subclass (see the module docstring)."""

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
        self._completion_ids: Any = None
        self._forking: tuple[Any, ...] | None = None
        self._mask_generator: Any = None
        if entropy_mask is None:
            return
        # TRL calls get_high_entropy_mask only while top_entropy_quantile < 1: 0 routes every loss through it, rho=1
        # included (the analysis is then logged and every token kept, so the loss is GRPO's exactly).
        self.top_entropy_quantile = 0.0
        if entropy_mask.mode == "random":
            # A private stream: the random mask leaves the sampling RNG (and so the rollouts) as in the other modes.
            self._mask_generator = torch.Generator(device=self.accelerator.device)
            self._mask_generator.manual_seed(self.args.seed + self.accelerator.process_index)

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        self._completion_ids = inputs["completion_ids"]  # for the forking-token table: TRL's hook sees no ids
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._completion_ids = None

    def get_high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        """The token weights TRL multiplies into the policy loss (``threshold``, TRL's quantile, is not used)."""
        settings = self.entropy_mask_settings
        if settings is None:
            return super().get_high_entropy_mask(entropies, mask, threshold)
        valid = mask.bool()
        local_entropy = entropies.detach()[valid].float()
        if settings.mode == "random":
            scores = torch.rand(
                local_entropy.shape, generator=self._mask_generator, device=local_entropy.device, dtype=torch.float
            )
        else:
            scores = local_entropy if settings.mode == "top" else -local_entropy
        gathered, mine = self._gather_tokens(torch.stack([local_entropy, scores], dim=1))
        entropy_all, scores_all = gathered.unbind(1)
        keep_all = select_top(scores_all, kept_count(entropy_all.numel(), settings.rho))
        keep = torch.zeros_like(valid)
        keep[valid] = keep_all[mine]
        if entropy_all.numel():
            self._log_entropy_analysis(entropy_all, keep_all)
            self._remember_forking_tokens(entropies, valid, keep)
        if settings.normalize == "all_tokens":
            return keep
        if self.loss_type in SEQUENCE_MEAN_LOSSES:
            scale = valid.sum(1, keepdim=True) / keep.sum(1, keepdim=True).clamp(min=1)
        else:
            scale = entropy_all.numel() / max(int(keep_all.sum()), 1)
        return keep * scale

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

    def _remember_forking_tokens(self, entropies: torch.Tensor, valid: torch.Tensor, keep: torch.Tensor) -> None:
        """The latest batch's highest-entropy tokens, decoded into the table at the next log."""
        count = min(self.entropy_mask_settings.forking_tokens, int(valid.sum()))
        if not count or self._completion_ids is None or not self.accelerator.is_main_process:
            return
        flat = entropies.detach().float().masked_fill(~valid, float("-inf")).flatten()
        top = flat.topk(count).indices
        rows, cols = top // entropies.shape[1], top % entropies.shape[1]
        self._forking = (
            self._completion_ids[rows].cpu(),
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
