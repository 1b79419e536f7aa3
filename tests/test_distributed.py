"""The multi-process tier (``-m distributed``): real gloo processes on CPU, started by torchrun as a user would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "distributed"


def torchrun(script: str, *args: str, processes: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node <processes> <script> <args>``, a thread per process, under a timeout (a hang
    fails the test)."""
    with socket.socket() as probe:  # a free rendezvous port, so that parallel test workers do not collide
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               f"--master_port={port}", str(WORKERS / script), *args]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


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
