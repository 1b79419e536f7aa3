"""The multi-process tier (``-m distributed``): real gloo processes on CPU, started by torchrun as a user would."""

from __future__ import annotations

import json

import pytest
from launch_helpers import torchrun


@pytest.mark.slow
@pytest.mark.distributed
def test_socraticpo_makes_the_same_generation_calls_on_every_process(tmp_path):
    """Each process stops at the same attempt and pads its batch to the largest: one sequence of calls (before, the
    two processes made calls of 16, 15, 9 and 16, 16, 6 rows at the first step). The student is warm-started inside
    the launch, from an empty cache: in a process of its own (before, the warm-start's Trainer joined the process
    group while the other process waited on the build's lock, and the launch hung)."""
    torchrun("socraticpo_generation_calls.py", str(tmp_path), str(tmp_path / "cache"))
    calls = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert len(calls[0]) >= 2 * 2  # 2 steps, a first attempt and at least one retry each
    assert calls[0] == calls[1]
