"""The sampler interface: which prompts the trainer sees, with a hook that receives each prompt's rewards."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from socratic_exp.component import Component


@dataclasses.dataclass(kw_only=True)
class PromptSampler(Component):
    """A sampler option.

    ``train_sampler`` returns the torch ``Sampler`` of dataset indices for a TRL trainer (or None to keep TRL's own
    ``RepeatSampler``); ``observe`` receives the rewards of every rollout with its dataset row index.
    """

    config_group: ClassVar[str] = "sampler"

    def train_sampler(self, trainer: Any, dataset: Any) -> Any | None:
        return None

    def observe(self, indices: list[int], rewards: list[float]) -> None:
        """Called by the reward function after each batch of rollouts is scored."""

    def metrics(self) -> dict[str, float]:
        """Sampler state worth logging (e.g. predictor error)."""
        return {}

    def trainer_class(self, base: type) -> type:
        """``base`` itself when TRL's sampling is kept, else a subclass that asks this sampler for indices.

        A subclass is needed because TRL trainers pick their sampler in ``_get_train_sampler`` with no hook.
        """
        if type(self).train_sampler is PromptSampler.train_sampler:
            return base
        sampler = self

        class SampledTrainer(base):  # type: ignore[misc, valid-type]
            def _get_train_sampler(self, dataset: Any = None) -> Any:
                return sampler.train_sampler(self, dataset if dataset is not None else self.train_dataset)

        SampledTrainer.__name__ = f"{type(self).__name__}{base.__name__}"
        return SampledTrainer
