"""Starting real multi-process runs from a test: ``torchrun`` with gloo processes on CPU, as a user would."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).resolve().parent / "distributed"


def free_port() -> int:
    """A free rendezvous port, so that parallel test workers do not collide."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(
    target: str, *args: str, processes: int = 2, timeout: int = 600, check: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node <processes> <target> <args>``, one thread per process, under a timeout (a hang
    fails the test). ``target`` is a worker script under ``tests/distributed/`` or ``-m <module>``."""
    program = target.split() if target.startswith("-m ") else [str(WORKERS / target)]
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               f"--master_port={free_port()}", *program, *args]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run(command, env=environment | (env or {}), capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    return proc
