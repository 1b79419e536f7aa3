"""DAPO's dynamic sampling (Yu et al. 2025, Section 3.2: "over-sample and filter out prompts with the accuracy equal
to 1 and 0"): the settings (``algorithm.dynamic_sampling``, a block every algorithm takes, since all extend GRPO)
and the choice of groups, as plain code. Torch-free; the trainer side is ``dynamic_sampling_trainer.py``.

**What it does.** After a generation batch is generated and rewarded, the groups whose rewards are all equal (no
signal for a group-relative advantage) are dropped, and further rounds generate new prompts' groups until the batch
has as many groups with signal as it had prompts; the surplus of the last round is left unused. The reward compared
is the task's (the first reward function: the verifier's score, or SocraticPO's R(tau)), not the shaped sum: verl's
``filter_groups.metric=acc``, so an overlong penalty alone does not keep a group.

**The cap.** At most ``max_rounds`` rounds per generation batch, the first included (verl's
``max_num_gen_batches``, 10 in the 80/20 script). verl stops the run when the cap is reached; here (our choice, so a
long run on hard data does not die hours in) the batch is completed with zero-variance groups, in the order they were
generated, and ``dynamic_sampling/filled_groups`` says how many.

**Logged** per generation batch (``dynamic_sampling/...``, summed over processes): ``rounds`` used,
``generated_groups``, ``zero_variance_share`` of the generated groups, ``dropped_groups`` (zero-variance groups
left out), ``unused_groups`` (groups with signal beyond the batch), ``filled_groups``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar, Generic, TypeVar

from socratic_exp.core.component import Component, setting

T = TypeVar("T")


@dataclasses.dataclass(kw_only=True)
class DynamicSampling(Component):
    """``algorithm.dynamic_sampling={max_rounds: 10, batches_per_round: 3}`` (null: off)."""

    config_group: ClassVar[str] = "algorithm.dynamic_sampling"

    max_rounds: int = setting(
        10,
        "generation rounds per generation batch at most, the first included (verl's max_num_gen_batches; the 80/20 "
        "script: 10); then the batch is completed with zero-variance groups",
        ge=1,
    )
    batches_per_round: int = setting(
        1,
        "prompts each round generates, in generation batches (verl's gen_batch_size / train_batch_size; the 80/20 "
        "script: 3)",
        ge=1,
    )


def has_signal(rewards: Sequence[float]) -> bool:
    """Whether a group's rewards differ (NaN, an unscorable completion, counts as no reward)."""
    return len({r for r in rewards if not math.isnan(r)}) > 1


class BatchFiller(Generic[T]):
    """The groups of one generation batch, gathered round by round: those with signal until ``quota``, then (at the
    cap) zero-variance ones."""

    def __init__(self, quota: int):
        self.quota = quota
        self.rounds = 0
        self.kept: list[T] = []
        self.dropped: list[T] = []

    def add_round(self, groups: Sequence[T], rewards: Sequence[Sequence[float]]) -> None:
        """One round's groups with each group's rewards, in the order generated."""
        self.rounds += 1
        for group, group_rewards in zip(groups, rewards, strict=True):
            (self.kept if has_signal(group_rewards) else self.dropped).append(group)

    @property
    def shortfall(self) -> int:
        """Groups with signal still missing."""
        return max(0, self.quota - len(self.kept))

    def batch(self) -> list[T]:
        """The batch: the first ``quota`` groups with signal, completed with the first zero-variance ones."""
        return self.kept[: self.quota] + self.dropped[: self.shortfall]

    def counts(self) -> dict[str, int]:
        filled = min(self.shortfall, len(self.dropped))
        return {
            "generated_groups": len(self.kept) + len(self.dropped),
            "zero_variance_groups": len(self.dropped),
            "dropped_groups": len(self.dropped) - filled,
            "unused_groups": max(0, len(self.kept) - self.quota),
            "filled_groups": filled,
        }
