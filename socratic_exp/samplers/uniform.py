"""``sampler=uniform``: every prompt equally likely, by TRL's own ``RepeatSampler`` (the baseline)."""

from __future__ import annotations

import dataclasses

from socratic_exp.samplers.base import PromptSampler


@dataclasses.dataclass(kw_only=True)
class UniformSampler(PromptSampler):
    pass
