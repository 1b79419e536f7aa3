"""The processes of a distributed launch (``torchrun``, ``accelerate launch``): who writes, and the collectives that
keep them in step.

Every process runs the same code; only the main one (``RANK`` 0) writes the run folder, the logger and the console.
Work split across processes (the held-out evaluation) is gathered back in the order of a single process, and a loop
whose length depends on the data (attempts with a teacher) runs as many rounds, with as many rows, on every process:
under ZeRO-3, FSDP and vLLM's server mode each forward or generation call is a collective, so processes that made
different calls would wait for each other forever.

Heavy imports (torch) stay inside the functions: composing a config imports this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from socratic_exp.core.errors import UserError

T = TypeVar("T")


def rank() -> int:
    """This process's global rank: from the launcher's environment, so it is known before any process group."""
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE``), whether or not they have joined a group yet."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def nodes() -> int:
    """How many machines the launch spans (torchrun's ``GROUP_WORLD_SIZE``; else from the processes per node)."""
    if "GROUP_WORLD_SIZE" in os.environ:
        return int(os.environ["GROUP_WORLD_SIZE"])
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", launched_processes()))
    return -(-launched_processes() // max(1, per_node))


# --- one run folder for every process of a launch ---------------------------------------------------------------
SHARE_TIMEOUT_S = 120.0  # the ranks start within seconds of each other; rank 0 may be resolving resume=auto
SEE_TIMEOUT_S = 30.0  # a shared file system may show another node's new folder a few seconds late (NFS caching)
HANDOFF_SLACK_S = 30.0  # a hand-off file older than this process (less this) is from another launch
PROCESS_START = time.time()
_DECIDED: dict[str, str] = {}  # this process's launch -> its run folder (Hydra resolves the folder several times)


def run_folder_of_launch(decide: Callable[[], str], each_decides: bool = False) -> str:
    """The run folder, one for every process of a launch: ``decide()`` on the global main process, the others take
    its answer. Ranks that each picked their own time-stamped folder would split the run (each node's part of every
    checkpoint in a folder of its own).

    Under torchrun (and ``accelerate launch``, which starts torchrun) the answer goes through the launch's own store
    (the agent's TCPStore at ``MASTER_ADDR:MASTER_PORT``, which ``init_process_group`` joins later). On several nodes
    every other rank then checks that it sees the folder (the main process's lock file names the launch), and says
    so through the store: a rank that does not (no shared file system) stops the launch in one line on every node.
    Without torchrun's store, ``each_decides`` (``$SOCRATIC_EXP_RUN_DIR`` set for every rank) lets each rank decide
    alone, and one node shares its folder through a hand-off file; several nodes are refused."""
    if launched_processes() <= 1:
        return decide()
    launch = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}/" + os.environ.get(
        "TORCHELASTIC_RESTART_COUNT", "0"
    )
    if launch not in _DECIDED:
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            _DECIDED[launch] = _through_store(decide)
        elif each_decides:
            _DECIDED[launch] = decide()
        elif nodes() == 1:
            _DECIDED[launch] = _through_handoff_file(decide)
        else:
            raise UserError(
                f"a launch over {nodes()} nodes without torchrun has no way to share its run folder",
                "start it with torchrun or accelerate launch, or set $SOCRATIC_EXP_RUN_DIR=<a folder on a shared "
                "file system> for every rank",
            )
    return _DECIDED[launch]


def _through_store(decide: Callable[[], str]) -> str:
    """``decide()`` on rank 0, shared through torchrun's agent store (or its failure, so that no rank waits for a
    folder that will not come); on several nodes, with every rank's word that it sees the folder (see
    ``run_folder_of_launch``)."""
    store = _launch_store()
    prefix = f"socratic_exp/run_folder/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    if is_main():
        return _decide_and_share(store, prefix, decide)
    _wait(store, [f"{prefix}/folder"], SHARE_TIMEOUT_S, "the main process's run folder")
    shared = json.loads(store.get(f"{prefix}/folder"))
    if "error" in shared:
        raise UserError(f"[rank {rank()}] the main process could not choose the run folder: {shared['error']}")
    if nodes() > 1:
        _say_whether_seen(store, prefix, shared)
    return shared["folder"]


def _launch_store() -> Any:
    """A client of torchrun's agent store (``MASTER_ADDR:MASTER_PORT``)."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    host, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    try:
        return TCPStore(host, int(port), None, False, timedelta(seconds=SHARE_TIMEOUT_S))
    except (RuntimeError, OSError) as err:
        raise UserError(
            f"rank {rank()} cannot reach the launch's store at {host}:{port} ({err})",
            "check that the launcher (torchrun) is running and MASTER_ADDR/MASTER_PORT",
        ) from None


def _wait(store: Any, keys: list[str], seconds: float, what: str) -> None:
    from datetime import timedelta

    try:
        store.wait(keys, timedelta(seconds=seconds))
    except RuntimeError:  # torch's DistStoreError: a timeout
        raise UserError(
            f"rank {rank()} waited {seconds:.0f} s for {what}",
            "see the other ranks' output: one of them failed before it got there",
        ) from None


def _decide_and_share(store: Any, prefix: str, decide: Callable[[], str]) -> str:
    """The main process's side: the folder (or the failure to choose one) into the store; on several nodes, the
    folder abandoned when a rank does not see it."""
    from socratic_exp.core.run_folder import abandon_run_folder, claim_run_folder

    several_nodes = nodes() > 1
    try:
        folder, launch = decide(), uuid.uuid4().hex
        if several_nodes:  # the lock file names this launch: what every rank looks for to know it sees the folder
            claim_run_folder(Path(folder), launch=launch)
    except Exception as err:
        store.set(f"{prefix}/folder", json.dumps({"error": str(err)}))
        raise
    store.set(f"{prefix}/folder", json.dumps({"folder": folder, "launch": launch, "host": platform.node()}))
    if several_nodes:
        others = [r for r in range(launched_processes()) if r != rank()]
        seen_keys = [f"{prefix}/seen/{r}" for r in others]
        _wait(store, seen_keys, SHARE_TIMEOUT_S + SEE_TIMEOUT_S, "every rank to see the folder")
        if unseen := [word for key in seen_keys if (word := store.get(key).decode())]:
            abandon_run_folder(Path(folder))
            raise UserError(f"{unseen[0]} ({len(unseen)} rank(s) in all)", _NOT_SHARED_FIX)
    return folder


def _say_whether_seen(store: Any, prefix: str, shared: dict[str, str]) -> None:
    """Another node's side: whether its file system shows the main process's folder (the lock file naming the
    launch), told to the store, and a failure here too when it does not."""
    from socratic_exp.core.run_folder import lock_holder

    folder = Path(shared["folder"])
    deadline = time.monotonic() + SEE_TIMEOUT_S
    while lock_holder(folder).get("launch") != shared["launch"] and time.monotonic() < deadline:
        time.sleep(0.2)
    seen = lock_holder(folder).get("launch") == shared["launch"]
    problem = "" if seen else (f"rank {rank()} on {platform.node()} does not see the run folder {shared['folder']} "
                               f"of the main process (on {shared['host']})")  # fmt: skip
    store.set(f"{prefix}/seen/{rank()}", problem)
    if problem:
        raise UserError(problem, _NOT_SHARED_FIX)


_NOT_SHARED_FIX = (
    "every node must see the run folder: put the outputs on a shared file system ($SOCRATIC_EXP_OUTPUTS, or "
    "$SOCRATIC_EXP_RUN_DIR for every rank) and start every node from the same folder"
)


def _through_handoff_file(decide: Callable[[], str]) -> str:
    """One node without torchrun's store: local rank 0 publishes ``decide()`` in a hand-off file that the other ranks
    read, keyed by the launcher process (the ranks' common parent) and ``MASTER_PORT``; a file older than this
    process is a stale one from an earlier launch."""
    handoff = Path(tempfile.gettempdir()) / f"socratic_exp-run-dir-{os.getppid()}-{os.environ.get('MASTER_PORT', '')}"
    if int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))) == 0:
        folder = decide()
        partial = handoff.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(folder)
        os.replace(partial, handoff)
        return folder
    deadline = time.monotonic() + SHARE_TIMEOUT_S
    while time.monotonic() < deadline:
        if handoff.is_file() and handoff.stat().st_mtime >= PROCESS_START - HANDOFF_SLACK_S:
            return handoff.read_text()
        time.sleep(0.05)
    raise UserError(
        f"rank {rank()} waited {SHARE_TIMEOUT_S:.0f} s for local rank 0's run folder in {handoff}",
        "set $SOCRATIC_EXP_RUN_DIR=<folder> for every rank",
    )


def join() -> None:
    """Join the launch's process group now (as TRL's arguments will, with the same backend: gloo without a GPU), so
    that work before the trainer exists, the first evaluation, is already split across processes."""
    if launched_processes() > 1:
        import torch
        from accelerate import PartialState

        PartialState(cpu=not torch.cuda.is_available())


def world_size() -> int:
    """The processes in the group (1 without one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def my_share(count: int) -> tuple[list[int], int]:
    """This process's share of ``count`` items, strided (process r takes r, r + N, ...), padded by repeating its last
    item (item 0 where it has none) to ``ceil(count / N)`` so that every process does the same amount of work; and
    how many of the indices are its own (the rest are padding, whose results are dropped)."""
    import torch.distributed as dist

    processes = world_size()
    if processes == 1:
        return list(range(count)), count
    mine = list(range(dist.get_rank(), count, processes))
    width = -(-count // processes)
    return mine + [mine[-1] if mine else 0] * (width - len(mine)), len(mine)


def gather_shares(count: int, local: Sequence[T]) -> list[T]:
    """The per-item results of every process's ``my_share(count)`` (its own items only), in item order: the list
    a single process would have computed."""
    import torch.distributed as dist

    processes = world_size()
    if processes == 1:
        return list(local)
    shares: list[Any] = [None] * processes
    dist.all_gather_object(shares, list(local))
    merged: list[Any] = [None] * count
    for process, share in enumerate(shares):
        merged[process::processes] = share
    return merged


def gather_objects(local: T) -> list[T]:
    """``local`` of every process, in rank order."""
    import torch.distributed as dist

    if world_size() == 1:
        return [local]
    every: list[Any] = [None] * world_size()
    dist.all_gather_object(every, local)
    return every


def most_on_any_process(count: int) -> int:
    """The largest ``count`` over the processes: pad a data-dependent batch or loop to it."""
    return max(gather_objects(count))


@contextlib.contextmanager
def full_parameters(model: Any) -> Iterator[None]:
    """The model's whole parameters inside the block: DeepSpeed ZeRO-3 keeps each process's partition only, and
    gathers them here (FSDP2 gathers in its own forward hooks, and plain or DDP models hold them already)."""
    partitioned = [p for p in model.parameters() if hasattr(p, "ds_id")]
    if not partitioned:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None):
        yield


def launch_layout(trainer: Any) -> dict[str, Any]:
    """How the trainer's processes run (recorded in ``summary.json``): their number and accelerate's distributed
    type. FSDP asked for but not applied is an error: accelerate applies it to GPU processes only, and on CPU
    (``MULTI_CPU``) it would train with plain data parallelism without a word."""
    accelerator = trainer.accelerator
    kind = accelerator.distributed_type.value
    if getattr(trainer.args, "fsdp", None) and kind != "FSDP":
        raise UserError(
            f"FSDP was asked for (algorithm.trl_args.fsdp) but accelerate runs these processes as {kind}: it "
            "applies FSDP on GPUs only",
            "drop +algorithm.trl_args.fsdp on CPU; on GPUs launch with launch/accelerate/fsdp2.yaml",
        )
    return {"processes": accelerator.num_processes, "distributed_type": kind}


def peak_memory() -> dict[str, float]:
    """This process's peak memory so far, in GiB (recorded in ``summary.json``): the CPU's resident set and, on a
    GPU, torch's peak allocation and reservation on the current device (the planner's figures, measured)."""
    import resource
    import sys

    import torch

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 if sys.platform != "darwin" else 1024)
    peak = {"cpu_rss_gib": round(kib / 2**20, 3)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["gpu_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        peak["gpu_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 3)
    return peak


def from_main(value: T) -> T:
    """The main process's ``value`` on every process: what only the main one computes (a teacher's reply)."""
    import torch.distributed as dist

    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def summed(accelerator: Any, *values: Any) -> list[float]:
    """Each value (a number or a one-element tensor) summed over the processes, in one all-reduce on the
    accelerator's device (float64: counts stay exact); on one process, the values themselves. Every process must call
    it at the same point."""
    import torch

    local = torch.tensor([float(v) for v in values], dtype=torch.float64, device=accelerator.device)
    if accelerator.num_processes > 1:
        local = accelerator.reduce(local, reduction="sum")
    return local.tolist()
