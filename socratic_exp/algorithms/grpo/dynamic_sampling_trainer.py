"""DAPO's dynamic sampling on any of the package's TRL trainers (the settings and the choice of groups:
``dynamic_sampling.py``).

**How it sits in a trainer.** The trainer class (composed in ``build.py``) puts two layers around the algorithm's
trainer: ``DynamicSamplingMixin`` above it (first in the MRO) and ``GenerationReplay`` below it, just above TRL's
``GRPOTrainer``. For each generation batch the outer layer runs *discovery* rounds: the algorithm's
``_generate_and_score_completions`` is called as usual (so its own rollout and row preparation run: SocraticPO's
interactive attempts, Socratic-RL's viewpoints), and the inner layer, once TRL's generation and the reward functions
have run, records each completion and its rewards and stops the call there (an exception the outer layer catches),
before any forward pass. When the batch is complete, the outer layer calls the algorithm once more with the rows of
the kept groups, and the inner layer *replays* their recorded completions and rewards in place of generating. So the
algorithm scores the batch it trains on exactly as if it had been generated at once: its batch statistics
(advantage normalisation, SocraticPO's reward decay, the entropy mask's ranking, SDPO's contexts, VPD's E-step) are
the kept batch's, and whatever it does once per batch (Socratic-RL's reflection) happens once.

**What each round sees.** Rewards, and with them the sampler's feedback (Goldilocks' predictor) and Socratic-RL's
traces, come from every completion generated, dropped groups included: they are real feedback about those prompts.
TRL's completion-length metrics and token count cover every round too (the generation cost), its reward and
advantage metrics the batch trained.

**Refills** come from the sampler (``PromptSampler.refill``): uniform draws from a stream of their own, or Goldilocks'
next selection. Every process draws the same prompts and takes its share of their groups, as TRL's dataloader deals
a generation batch; each process keeps its own groups, so a process's batch holds whole groups
(``batch_size x steps_per_generation`` a multiple of ``num_generations``), and the rounds continue until no process
is short, every process generating in every round (generation and rewards are collective calls).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from trl import GRPOTrainer

from socratic_exp.algorithms.grpo.dynamic_sampling import BatchFiller
from socratic_exp.core.distributed import most_on_any_process, summed
from socratic_exp.core.errors import ConfigError, UserError

if TYPE_CHECKING:
    from socratic_exp.algorithms.grpo.dynamic_sampling import DynamicSampling
    from socratic_exp.samplers.base import PromptSampler


class _Generated(Exception):
    """Ends a discovery call once its completions are generated and rewarded."""


@dataclasses.dataclass
class Completion:
    """One generated completion with what TRL's scoring reads of it (``GRPOTrainer._generate``'s per-row outputs) and
    its rewards (one per reward function)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    tool_mask: list[int] | None
    text: Any
    logprobs: list[float] | None
    extras: dict[str, Any]  # the rollout's extra fields of this row (e.g. SocraticPO's attempts)
    rewards: torch.Tensor


class GenerationReplay(GRPOTrainer):
    """The inner layer: in a discovery call, generation and rewards only, recorded; in the replay, the recorded
    completions and rewards instead of generating and scoring again."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._phase: str | None = None  # "discover" | "replay" | None (TRL's own path)
        self._completions: list[Completion] = []
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self._phase != "discover":
            return super()._generate_and_score_completions(inputs)
        prompts = [row["prompt"] for row in inputs]
        prompt_ids, completion_ids, tool_mask, texts, logprobs, extra, images, _ = self._generate(prompts)
        if images is not None:
            raise UserError("algorithm.dynamic_sampling does not take image prompts", "drop the images or the block")
        extras = [
            {key: values[i] if isinstance(values, list) else values for key, values in extra.items()}
            for i in range(len(inputs))
        ]
        for row, row_extras in zip(inputs, extras, strict=True):
            row.update(row_extras)  # as TRL merges a rollout's extra fields into the rows, for the reward functions
        rewards = self._calculate_rewards(inputs, prompts, texts, completion_ids)  # every process's rows
        offset = self.accelerator.process_index * len(inputs)
        self._completions = [
            Completion(
                prompt_ids=prompt_ids[i],
                completion_ids=completion_ids[i],
                tool_mask=tool_mask[i] if tool_mask is not None else None,
                text=texts[i],
                logprobs=logprobs[i] if logprobs is not None else None,
                extras=extras[i],
                rewards=rewards[offset + i].detach().clone(),
            )
            for i in range(len(inputs))
        ]
        raise _Generated

    def _generate(self, prompts: list[Any]) -> tuple[Any, ...]:
        if self._phase != "replay":
            return super()._generate(prompts)
        done = self._completions
        extra = {key: [c.extras[key] for c in done] for key in (done[0].extras if done else {})}
        return (
            [c.prompt_ids for c in done],
            [c.completion_ids for c in done],
            [c.tool_mask for c in done] if done and done[0].tool_mask is not None else None,
            [c.text for c in done],
            [c.logprobs for c in done] if done and done[0].logprobs is not None else None,
            extra,
            None,
            [],
        )

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        if self._phase != "replay":
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        local = torch.stack([c.rewards for c in self._completions]).to(self.accelerator.device)
        return self.accelerator.gather(local)


class DynamicSamplingMixin:
    """The outer layer: discovery rounds until the batch is full of groups with signal (or the cap), then the
    algorithm's scoring of that batch (see the module docstring)."""

    def __init__(
        self, *args: Any, dynamic_sampling: DynamicSampling, prompt_sampler: PromptSampler, **kwargs: Any
    ) -> None:
        self.dynamic_sampling = dynamic_sampling
        self.prompt_sampler = prompt_sampler
        super().__init__(*args, **kwargs)
        per_process = self.args.generation_batch_size // self.accelerator.num_processes
        if per_process % self.num_generations:
            raise ConfigError(
                "algorithm.dynamic_sampling",
                dataclasses.asdict(dynamic_sampling),
                f"needs whole groups on each process, but a process's generation batch holds {per_process} "
                f"completions, not a multiple of num_generations={self.num_generations}",
                "make algorithm.batch_size x steps_per_generation a multiple of algorithm.num_generations",
            )

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        settings, size = self.dynamic_sampling, self.num_generations
        filler: BatchFiller[list[tuple[dict[str, Any], Completion]]] = BatchFiller(len(inputs) // size)
        rows = list(inputs) + self._refill_rows(settings.batches_per_round - 1, len(inputs))
        while True:
            completions = self._discover(rows)
            pairs = list(zip(rows, completions, strict=True))
            groups = [pairs[start : start + size] for start in range(0, len(pairs), size)]
            # the task's reward (the first function), as verl's filter compares accuracy, not the shaped sum
            filler.add_round(groups, [[float(c.rewards[0]) for _, c in group] for group in groups])
            if filler.rounds == settings.max_rounds or not most_on_any_process(filler.shortfall):
                break
            rows = self._refill_rows(settings.batches_per_round, len(inputs))
        self._log_rounds(filler)
        batch = [pair for group in filler.batch() for pair in group]
        self._phase, self._completions = "replay", [completion for _, completion in batch]
        try:
            return super()._generate_and_score_completions([row for row, _ in batch])
        finally:
            self._phase, self._completions = None, []

    def _discover(self, rows: list[dict[str, Any]]) -> list[Completion]:
        """The rows' completions and rewards, through the algorithm's own rollout (stopped before its scoring)."""
        self._phase = "discover"
        try:
            super()._generate_and_score_completions(rows)
        except _Generated:
            return self._completions
        finally:
            self._phase = None
        raise RuntimeError("the trainer scored a discovery round instead of stopping after its rewards")

    def _refill_rows(self, batches: int, per_process: int) -> list[dict[str, Any]]:
        """This process's rows of ``batches`` new generation batches of prompts from the sampler, each prompt's
        group dealt as TRL's dataloader deals them (process p takes rows p x per_process onwards)."""
        processes, rank = self.accelerator.num_processes, self.accelerator.process_index
        rows: list[dict[str, Any]] = []
        for _ in range(batches):
            prompts = per_process * processes // self.num_generations
            positions = self.prompt_sampler.refill(self, self.train_dataset, prompts)
            repeated = [position for position in positions for _ in range(self.num_generations)]
            rows += [self.train_dataset[int(p)] for p in repeated[rank * per_process : (rank + 1) * per_process]]
        return rows

    def _log_rounds(self, filler: BatchFiller[Any]) -> None:
        counts = filler.counts()
        totals = dict(zip(counts, summed(self.accelerator, *counts.values()), strict=True))
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/rounds"].append(float(filler.rounds))
        metrics["dynamic_sampling/zero_variance_share"].append(
            totals["zero_variance_groups"] / max(totals["generated_groups"], 1.0)
        )
        for name in ("generated_groups", "dropped_groups", "unused_groups", "filled_groups"):
            metrics[f"dynamic_sampling/{name}"].append(totals[name])
