"""The sampler interface: which prompts the trainer sees, with a hook that receives each prompt's rewards."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from typing import Any, ClassVar

from socratic_exp.core.component import Component
from socratic_exp.core.errors import UserError

STATE_FILE = "sampler_state.pt"  # written into each checkpoint folder (callbacks.SamplerStateCallback)


def group_rewards(indices: Sequence[int], rewards: Sequence[float]) -> dict[int, list[float]]:
    """The rewards of one batch of rollouts, grouped by question (dataset row ``index``), in first-seen order."""
    groups: dict[int, list[float]] = {}
    for index, reward in zip(indices, rewards, strict=True):
        groups.setdefault(int(index), []).append(float(reward))
    return groups


def utility(rewards: Sequence[float]) -> float:
    """y = sqrt(p (1 - p)), p the group's success rate (Goldilocks RL): the reward's standard deviation for 0/1
    rewards, to which a group's GRPO gradient is proportional. Rewards outside [0, 1] are clipped into it."""
    p = sum(min(max(r, 0.0), 1.0) for r in rewards) / len(rewards)
    return math.sqrt(max(p * (1.0 - p), 0.0))


class GroupStats:
    """What every sampler reports about the groups it observed: the share with zero reward variance (no gradient)
    and their mean utility since the last ``drain``, and the rollouts observed since training began."""

    def __init__(self) -> None:
        self.rollouts = 0
        self._groups = self._zero_variance = 0
        self._utility = 0.0

    def add(self, groups: dict[int, list[float]]) -> None:
        for rewards in groups.values():
            self.rollouts += len(rewards)
            self._groups += 1
            self._zero_variance += max(rewards) == min(rewards)
            self._utility += utility(rewards)

    def drain(self) -> dict[str, float]:
        metrics = {"rollouts": float(self.rollouts)}
        if self._groups:
            metrics["zero_variance_share"] = self._zero_variance / self._groups
            metrics["utility"] = self._utility / self._groups
        self._groups = self._zero_variance = 0
        self._utility = 0.0
        return metrics


def gathered(indices: Sequence[int], rewards: Sequence[float]) -> tuple[list[int], list[float]]:
    """Every process's rollouts (TRL splits a prompt's group across processes): every process's sampler then sees
    the same feedback and, for the same seed, picks the same prompts. One process: the input itself."""
    from accelerate import PartialState

    if PartialState().num_processes == 1:
        return list(indices), list(rewards)
    from accelerate.utils import gather_object

    return gather_object(list(indices)), gather_object(list(rewards))


@dataclasses.dataclass(kw_only=True)
class PromptSampler(Component):
    """A sampler option.

    ``train_sampler`` returns the torch ``Sampler`` of dataset indices for a TRL trainer (or None to keep TRL's own
    ``RepeatSampler``); ``refill`` chooses the prompts of a dynamic-sampling round (``algorithm.dynamic_sampling``);
    ``observe`` receives the rewards of every rollout with its dataset row index, and ``state_dict`` /
    ``load_state_dict`` carry what must survive a resume (saved in every checkpoint).
    """

    config_group: ClassVar[str] = "sampler"

    def __post_init__(self) -> None:
        self.group_stats = GroupStats()
        self.refills = 0
        super().__post_init__()

    def train_sampler(self, trainer: Any, dataset: Any) -> Any | None:
        return None

    def refill(self, trainer: Any, dataset: Any, prompts: int) -> list[int]:
        """The dataset positions of ``prompts`` new prompts for a refill round of dynamic sampling, the same on every
        process: drawn uniformly without replacement, from a stream of their own (the run's seed and the refills so
        far), so the epoch's order of the main stream is untouched."""
        if len(dataset) < prompts:
            raise UserError(
                f"algorithm.dynamic_sampling: the training split has {len(dataset)} questions, fewer than the "
                f"{prompts} prompts of one generation batch",
                "use a larger task.train_size or a smaller algorithm.batch_size",
            )
        draw = random.Random(f"refill:{trainer.args.seed}:{self.refills}")  # str seeds hash the same everywhere
        self.refills += 1
        return draw.sample(range(len(dataset)), prompts)

    def observe(self, indices: list[int], rewards: list[float]) -> None:
        """Called by the reward function (or an algorithm's rollout) after each batch of rollouts is scored, on every
        process at the same point of the step."""
        groups = group_rewards(*gathered(indices, rewards))
        self.group_stats.add(groups)
        self.observe_groups(groups)

    def observe_groups(self, groups: dict[int, list[float]]) -> None:
        """Each question's rewards of one batch, from all processes (what an adaptive sampler learns from)."""

    def metrics(self) -> dict[str, float]:
        """Sampler metrics since the previous call (logged as ``sampler/<name>`` at every logging step)."""
        return self.group_stats.drain()

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue (tensors, numbers, strings, lists and dicts of them)."""
        return {"rollouts": self.group_stats.rollouts, "refills": self.refills}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.group_stats.rollouts = int(state.get("rollouts", 0))
        self.refills = int(state.get("refills", 0))

    def chooses_prompts(self) -> bool:
        """Whether this sampler orders the prompts itself (its own ``train_sampler``) rather than keeping TRL's."""
        return type(self).train_sampler is not PromptSampler.train_sampler


class PromptOrderLayer:
    """The trainer layer of a sampler that chooses the prompts (``PromptSampler.chooses_prompts``), composed into the
    trainer class by ``algorithms.grpo.build``. A layer is needed because TRL trainers pick their sampler in
    ``_get_train_sampler`` with no hook."""

    def __init__(self, *args: Any, prompt_order: PromptSampler, **kwargs: Any) -> None:
        self.prompt_order = prompt_order
        super().__init__(*args, **kwargs)
        # On resume, transformers fast-forwards the dataloader past the batches already trained on, which would run
        # this sampler's selection for each of them. The sampler restores its own position from the checkpoint
        # instead (load_state_dict), so the dataloader starts afresh.
        self.args.ignore_data_skip = True  # type: ignore[attr-defined]

    def _get_train_sampler(self, dataset: Any = None) -> Any:
        return self.prompt_order.train_sampler(self, dataset if dataset is not None else self.train_dataset)  # type: ignore[attr-defined]
