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


def torchrun_two_nodes(
    *args: str, cwd: Path, node1_cwd: Path | None = None, timeout: int = 600
) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """Two machines simulated on one: a ``torchrun --nnodes 2 --nproc_per_node 1`` launcher per node (node ranks 0
    and 1, rendezvous on 127.0.0.1), each started in its own working folder (``node1_cwd``: another machine's file
    system, where the main process's relative run folder does not exist) and without ``$SOCRATIC_EXP_RUN_DIR`` or
    ``$SOCRATIC_EXP_OUTPUTS``: outputs go to ``outputs/`` under the working folder. ``python -m socratic_exp args``."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}"]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}
    for pinned in ("SOCRATIC_EXP_RUN_DIR", "SOCRATIC_EXP_OUTPUTS"):
        environment.pop(pinned, None)
    nodes = [
        subprocess.Popen([*command, f"--node_rank={rank}", "-m", "socratic_exp", *args], cwd=folder, env=environment,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank, folder in enumerate((cwd, node1_cwd or cwd))
    ]  # fmt: skip
    try:
        outputs = [node.communicate(timeout=timeout) for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    done = [subprocess.CompletedProcess(n.args, n.returncode, *o) for n, o in zip(nodes, outputs, strict=True)]
    return done[0], done[1]
